/* wait.c: per-request wait attribution (see wait.h). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "wait.h"

const char *const wait_cause_names[WAIT__COUNT] = {
	[WAIT_QUEUED] = "queued",
	[WAIT_PREFILL] = "prefill",
	[WAIT_DECODE] = "decode",
	[WAIT_OTHERS_PREFILL] = "others_prefill",
	[WAIT_PREEMPTED] = "preempted",
	[WAIT_KV_TRANSFER] = "kv_transfer",
	[WAIT_CLIENT] = "client",
	[WAIT_SCHEDULING] = "scheduling",
};

/* Start the timeline of a request that arrived at `arrival'. */
void
reqwait_init(struct reqwait *w, uint64_t arrival)
{
	memset(w, 0, sizeof *w);
	w->cursor = arrival;
	w->gap = WAIT_QUEUED;
}

/* Note [start, end) as given to cause by the current call. */
static void
note(struct reqwait *w, uint64_t start, uint64_t end, int cause)
{
	if (end > start && w->nlast < WAIT_LAST_MAX)
		w->last[w->nlast++] = (struct wait_seg){ start, end, cause };
}

/* Give [cursor, until) to cause; time never runs backwards here. */
static void
account(struct reqwait *w, uint64_t until, int cause)
{
	if (until > w->cursor) {
		w->ns[cause] += until - w->cursor;
		note(w, w->cursor, until, cause);
		w->cursor = until;
	}
}

/* Account up to now to the pending cause, then wait for another. */
void
reqwait_gap(struct reqwait *w, uint64_t now, enum wait_cause cause)
{
	w->nlast = 0;
	account(w, now, w->gap);
	w->gap = cause;
}

/* Add ns of blame to request id, keeping the largest few. */
static void
blame(struct reqwait *w, uint64_t id, uint64_t ns)
{
	int	i, low = 0;

	if (ns == 0 || id == 0)
		return;
	for (i = 0; i < WAIT_BLAME_MAX; i++) {
		if (w->blame[i].id == id) {
			w->blame[i].ns += ns;
			return;
		}
		if (w->blame[i].ns < w->blame[low].ns)
			low = i;
	}
	/* Full: a newcomer displaces the smallest only if it is larger. */
	if (w->blame[low].id == 0 || ns > w->blame[low].ns) {
		w->blame[low].id = id;
		w->blame[low].ns = ns;
	}
}

/* Others' share of an iteration: the model's proportion of its length. */
uint64_t
wait_others_ns(const struct wait_iter *it, uint32_t own_prefill)
{
	uint64_t	dur = it->end > it->start ? it->end - it->start : 0;
	uint32_t	po;
	double		cost, f;

	if (own_prefill > it->prefill_tokens)
		own_prefill = it->prefill_tokens;
	po = it->prefill_tokens - own_prefill;
	if (po == 0 || dur == 0)
		return (0);
	cost = it->a + it->b * it->prefill_tokens + it->c * it->decode_tokens;
	if (!(cost > 0))
		return (0);
	f = it->b * po / cost;
	if (!(f > 0))
		return (0);
	if (f >= 1)
		return (dur);
	return ((uint64_t)llround(f * (double)dur));
}

/* An iteration the request was part of has ended. */
void
reqwait_iteration(struct reqwait *w, const struct wait_iter *it,
    uint64_t self, enum wait_cause own)
{
	uint64_t	dur, others, share, start = it->start;
	uint32_t	own_prefill = 0, po = 0;
	size_t		i;

	w->nlast = 0;
	account(w, start, w->gap);
	if (start < w->cursor)
		start = w->cursor;
	dur = it->end > start ? it->end - start : 0;
	for (i = 0; i < it->nprefills; i++) {
		if (it->prefills[i].id == self)
			own_prefill += it->prefills[i].tokens;
		else
			po += it->prefills[i].tokens;
	}
	others = wait_others_ns(it, own_prefill);
	if (others > dur)
		others = dur;
	w->ns[WAIT_OTHERS_PREFILL] += others;
	w->ns[own] += dur - others;
	note(w, start, start + dur - others, own);
	note(w, start + dur - others, start + dur, WAIT_OTHERS_PREFILL);
	w->cursor = start + dur;
	w->gap = WAIT_SCHEDULING;
	/* Split others' share among them by their tokens. */
	for (i = 0; i < it->nprefills && po > 0 && others > 0; i++) {
		if (it->prefills[i].id == self)
			continue;
		share = others * it->prefills[i].tokens / po;
		blame(w, it->prefills[i].id, share);
	}
}

/* The request finished: the rest goes to what it was waiting for. */
void
reqwait_finish(struct reqwait *w, uint64_t now)
{
	w->nlast = 0;
	account(w, now, w->gap);
}

/* Time the last call gave to cause. */
uint64_t
reqwait_last_ns(const struct reqwait *w, enum wait_cause cause)
{
	uint64_t	t = 0;
	int		i;

	for (i = 0; i < w->nlast; i++)
		if (w->last[i].cause == (int)cause)
			t += w->last[i].end - w->last[i].start;
	return (t);
}

/* Sum of every cause. */
uint64_t
reqwait_total(const struct reqwait *w)
{
	uint64_t	t = 0;
	int		i;

	for (i = 0; i < WAIT__COUNT; i++)
		t += w->ns[i];
	return (t);
}

/* Copy the used blame entries, largest first; returns how many. */
size_t
reqwait_blamed(const struct reqwait *w, struct wait_blame *out)
{
	struct wait_blame	t;
	size_t			n = 0, i, j;

	for (i = 0; i < WAIT_BLAME_MAX; i++)
		if (w->blame[i].id != 0)
			out[n++] = w->blame[i];
	for (i = 1; i < n; i++)
		for (j = i; j > 0 && (out[j].ns > out[j - 1].ns ||
		    (out[j].ns == out[j - 1].ns && out[j].id < out[j - 1].id));
		    j--) {
			t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return (n);
}

/* Empty fit. */
void
wait_model_init(struct wait_model *m)
{
	memset(m, 0, sizeof *m);
}

/* Add one iteration to the fit. */
void
wait_model_add(struct wait_model *m, uint32_t prefill, uint32_t decode,
    uint64_t dur_ns)
{
	double	p = prefill, d = decode, t = (double)dur_ns;

	m->n += 1;
	m->sp += p;
	m->sd += d;
	m->st += t;
	m->spp += p * p;
	m->spd += p * d;
	m->sdd += d * d;
	m->spt += p * t;
	m->sdt += d * t;
}

/* Determinant of a 3x3 matrix given by rows. */
static double
det3(double a, double b, double c, double d, double e, double f, double g,
    double h, double i)
{
	return (a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g));
}

/* Solve the normal equations by Cramer's rule; fall back when singular. */
void
wait_model_coef(const struct wait_model *m, double *a, double *b, double *c)
{
	double	D, scale;

	*a = 0;
	*b = *c = 1;
	if (m->n < 3)
		return;
	D = det3(m->n, m->sp, m->sd, m->sp, m->spp, m->spd, m->sd, m->spd,
	    m->sdd);
	scale = m->n * m->spp * m->sdd;
	if (!(fabs(D) > 1e-9 * scale) || !(scale > 0))
		return;
	double A = det3(m->st, m->sp, m->sd, m->spt, m->spp, m->spd, m->sdt,
	    m->spd, m->sdd) / D;
	double B = det3(m->n, m->st, m->sd, m->sp, m->spt, m->spd, m->sd,
	    m->sdt, m->sdd) / D;
	double C = det3(m->n, m->sp, m->st, m->sp, m->spp, m->spt, m->sd,
	    m->spd, m->sdt) / D;
	/* A fit that says tokens are free or negative is noise: keep equal. */
	if (!(B > 0) || C < 0 || !isfinite(A))
		return;
	*a = A > 0 ? A : 0;
	*b = B;
	*c = C;
}
