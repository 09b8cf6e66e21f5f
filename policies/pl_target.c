/*
 * pl_target.c: latency targets for the bundled policies: the iteration
 * cost model, what is learned from measured iterations, and the prefill
 * chunk that keeps an iteration within a time-between-tokens target.
 *
 * Every decoding request gets one token per iteration, so its time between
 * tokens is the iteration time: a TBT target is an iteration-time target.
 * Without an explicit one (tbt_p99_ms) the target is tbt_factor (default
 * 3.5) times the decode-only iteration time measured recently, and never less
 * than that time plus 2 ms: it adapts to the model, the machine and the
 * number of decodes, and keeps a long prompt moving at about
 * 1 - 1/tbt_factor of the machine while chats keep their pace.
 *
 * The chunk is the largest P whose forecast, corr * (a + b*P + c*D) times
 * 1 + 2 spread plus one residual standard deviation, stays under the
 * target, bounded by
 * min_chunk and max_chunk and by 3/2 the largest prefill measured (the
 * model is never extrapolated far).  corr is an EWMA of measured over
 * forecast iteration times: the fit lags when the cost drifts (attention
 * over a growing context), and corr closes that loop.  spread is the
 * relative deviation of those ratios around corr (an EWMA of squares, at
 * most 0.15): iterations of one shape vary by several percent on a busy
 * CPU, and the target is meant for the slowest of them, not the mean.
 *
 * With ttft_ms the chunk also grows so that the waiting and prefilling
 * prompts, served oldest first, finish within ttft_ms of their arrival by
 * the model's forecast, but only up to the chunk whose forecast is twice
 * the TBT target: when both cannot hold, TBT is kept within 2x and the TTFT
 * target is missed.  A prompt already past its TTFT target no longer
 * stretches the iterations.  With no decode running there is no TBT to
 * protect and prefill may use the whole batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_lib.h"

#define PL_MAX_SAMPLES	64
/* Automatic target: never less than decode-only plus this much. */
#define PL_AUTO_MIN_ROOM_MS	2.0
/* With ttft_ms, iterations stretch at most this many times the target. */
#define PL_TTFT_STRETCH	2.0
/* Headroom: this many relative deviations, of at most PL_SPREAD_MAX. */
#define PL_SPREAD_K	2.0
#define PL_SPREAD_MAX	0.15
/*
 * A chunk is at most 3/2 the largest prefill measured: the slope of a fit
 * to a few short prompts is loose, and the first chunk of a long one,
 * forecast from it at twice their size, overshot the target by a fifth.
 */
#define PL_GROW_NUM	3
#define PL_GROW_DEN	2

/* Least-squares fit of t = a + b*P + c*D over the samples marked in use. */
static int
pl_fit(const double *t, const double *P, const double *D, const int *use,
    int n, struct pl_cost *m)
{
	double	mt = 0, mp = 0, md = 0, spp = 0, sdd = 0, spd = 0;
	double	spt = 0, sdt = 0, det, ridge, r, ss = 0;
	int	i, k = 0;

	for (i = 0; i < n; i++) {
		if (!use[i])
			continue;
		mt += t[i]; mp += P[i]; md += D[i];
		k++;
	}
	if (k == 0)
		return (-1);
	mt /= k; mp /= k; md /= k;
	for (i = 0; i < n; i++) {
		double	dp = P[i] - mp, dd = D[i] - md, dt = t[i] - mt;

		if (!use[i])
			continue;
		spp += dp * dp; sdd += dd * dd; spd += dp * dd;
		spt += dp * dt; sdt += dd * dt;
	}
	/* Ridge: a slope without variance in its column comes out zero. */
	ridge = 1e-9 * (spp + sdd) + 1e-12;
	spp += ridge;
	sdd += ridge;
	det = spp * sdd - spd * spd;
	if (!(det > 0) || !isfinite(det))
		return (-1);
	m->b = (spt * sdd - sdt * spd) / det;
	m->c = (sdt * spp - spt * spd) / det;
	m->a = mt - m->b * mp - m->c * md;
	for (i = 0; i < n; i++) {
		if (!use[i])
			continue;
		r = t[i] - (m->a + m->b * P[i] + m->c * D[i]);
		ss += r * r;
	}
	m->sigma = sqrt(ss / (k > 3 ? k - 3 : 1));
	m->n = k;
	return (0);
}

/* Compare doubles for qsort. */
static int
pl_cmp_double(const void *x, const void *y)
{
	double	a = *(const double *)x, b = *(const double *)y;

	return ((a > b) - (a < b));
}

/*
 * Fit the cost model to the view's iteration history: the centred normal
 * equations with a small ridge term, then a second fit without the samples
 * beyond three robust standard deviations (1.4826 * median absolute
 * residual), so one stalled iteration does not move the model.
 */
int
pl_cost_fit(const struct phased_view *v, struct pl_cost *m)
{
	double		t[PL_MAX_SAMPLES], P[PL_MAX_SAMPLES], D[PL_MAX_SAMPLES];
	double		res[PL_MAX_SAMPLES], sorted[PL_MAX_SAMPLES], mad;
	int		use[PL_MAX_SAMPLES];
	uint32_t	i, first;
	int		n = 0, j, k, kp;

	memset(m, 0, sizeof *m);
	first = v->n_hist > PL_MAX_SAMPLES ? v->n_hist - PL_MAX_SAMPLES : 0;
	for (i = first; i < v->n_hist; i++) {
		const struct phased_iter_stat *h = &v->hist[i];

		if (h->duration_ns == 0)
			continue;
		t[n] = h->duration_ns / 1e6;
		P[n] = h->prefill_tokens;
		D[n] = h->decode_tokens;
		use[n] = 1;
		if (h->prefill_tokens > m->max_p)
			m->max_p = h->prefill_tokens;
		n++;
	}
	if (n < 3 || m->max_p == 0)
		return (-1);
	if (pl_fit(t, P, D, use, n, m) != 0)
		return (-1);
	for (j = 0; j < n; j++)
		res[j] = fabs(t[j] - (m->a + m->b * P[j] + m->c * D[j]));
	memcpy(sorted, res, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, pl_cmp_double);
	mad = 1.4826 * sorted[n / 2];
	/*
	 * 0.05 ms: below timer noise, so rounding never makes an outlier.
	 * The refit must keep two prefill samples: a tight cluster of
	 * decode-only iterations would otherwise reject every prefill and
	 * make prompt tokens look free.
	 */
	for (j = 0, k = 0, kp = 0; j < n; j++) {
		use[j] = res[j] <= 3 * mad + 0.05;
		k += use[j];
		kp += use[j] && P[j] > 0;
	}
	if (k >= 3 && k < n && kp >= 2) {
		struct pl_cost	fit1 = *m;

		if (pl_fit(t, P, D, use, n, m) != 0)
			*m = fit1;
		m->max_p = fit1.max_p;
	}
	return (0);
}

/* Defaults of the targets: automatic TBT, no TTFT. */
void
pl_target_init(struct pl_target *t)
{
	memset(t, 0, sizeof *t);
	t->factor = 3.5;	/* slowest chunk ~10% over: within 4x */
	t->min_chunk = 16;
	t->max_chunk = 8192;
}

/* Parse one target key: 1 taken, 0 not a target key, -1 and err on error. */
int
pl_param_target(const struct phased_param *kv, struct pl_target *t,
    char *err, size_t errlen)
{
	uint64_t	n;
	double		d;

	if (strcmp(kv->key, "tbt_p99_ms") == 0 ||
	    strcmp(kv->key, "tbt_target_ms") == 0) {
		if (pl_param_real(kv, 0.1, 60000, &d, err, errlen) != 0)
			return (-1);
		t->tbt_ms = d;
	} else if (strcmp(kv->key, "ttft_ms") == 0) {
		if (pl_param_real(kv, 1, 3600000, &d, err, errlen) != 0)
			return (-1);
		t->ttft_ms = d;
	} else if (strcmp(kv->key, "tbt_factor") == 0) {
		if (pl_param_real(kv, 1.2, 100, &d, err, errlen) != 0)
			return (-1);
		t->factor = d;
	} else if (strcmp(kv->key, "min_chunk") == 0) {
		if (pl_param_uint(kv, 1, 65536, &n, err, errlen) != 0)
			return (-1);
		t->min_chunk = (uint32_t)n;
	} else if (strcmp(kv->key, "max_chunk") == 0) {
		if (pl_param_uint(kv, 1, 65536, &n, err, errlen) != 0)
			return (-1);
		t->max_chunk = (uint32_t)n;
	} else
		return (0);
	t->given = 1;
	return (1);
}

/* Check the targets once all keys are parsed; -1 and err on error. */
int
pl_target_check(const struct pl_target *t, char *err, size_t errlen)
{
	if (t->min_chunk > t->max_chunk) {
		snprintf(err, errlen, "min_chunk %u is above max_chunk %u",
		    t->min_chunk, t->max_chunk);
		return (-1);
	}
	return (0);
}

/* The slot of view->group in the per-group arrays. */
static uint32_t
pl_slot(const struct phased_view *v)
{
	return (v->group < PL_MAX_GROUPS ? v->group : PL_MAX_GROUPS - 1);
}

/* Take in the iterations measured since the last call for view->group. */
void
pl_learn_update(struct pl_learn *l, const struct phased_view *v)
{
	const struct phased_iter_stat	*h;
	uint32_t			 g = pl_slot(v), i, fresh;
	double				 ms, ratio, c, dev;

	if (!l->primed[g])
		fresh = v->n_hist;
	else if (v->iteration <= l->seen[g])
		fresh = 0;
	else if (v->iteration - l->seen[g] < v->n_hist)
		fresh = (uint32_t)(v->iteration - l->seen[g]);
	else
		fresh = v->n_hist;
	for (i = v->n_hist - fresh; i < v->n_hist; i++) {
		h = &v->hist[i];
		if (h->duration_ns == 0 || h->prefill_tokens != 0 ||
		    h->decode_tokens == 0)
			continue;
		ms = h->duration_ns / 1e6;
		l->base_ms[g] = l->base_ms[g] == 0 ? ms :
		    l->base_ms[g] + (ms - l->base_ms[g]) / 4;
		l->n_base++;
	}
	/* The plan forecast last time ran as the newest iteration. */
	if (l->primed[g] && v->iteration == l->seen[g] + 1 && v->n_hist > 0 &&
	    l->pred_ms[g] > 0) {
		h = &v->hist[v->n_hist - 1];
		if (h->prefill_tokens != 0 && h->duration_ns != 0) {
			ratio = (h->duration_ns / 1e6) / l->pred_ms[g];
			if (ratio < 0.5)
				ratio = 0.5;
			if (ratio > 3)
				ratio = 3;
			c = l->corr[g] == 0 ? 1 : l->corr[g];
			dev = ratio / c - 1;
			l->spread[g] += (dev * dev - l->spread[g]) / 8;
			c += (ratio - c) / 4;
			l->corr[g] = c < 0.7 ? 0.7 : c > 2.5 ? 2.5 : c;
			l->n_corr++;
		}
	}
	l->pred_ms[g] = 0;
	l->primed[g] = 1;
	l->seen[g] = v->iteration;
}

/* Largest chunk whose corrected forecast plus noise is within limit_ms. */
static uint32_t
pl_chunk_for(const struct pl_target *t, const struct pl_chunk *c,
    uint32_t decodes, double limit_ms, uint32_t cap)
{
	const struct pl_cost	*m = &c->cost;
	double			 room, p, cc = m->c > 0 ? m->c : 0;

	room = (limit_ms - m->sigma) / (c->corr * (1 + PL_SPREAD_K *
	    c->spread)) - m->a - cc * decodes;
	if (room <= 0)
		return (t->min_chunk);
	if (m->b <= 1e-12)
		return (cap);	/* prefill looks free: grow, measure again */
	p = floor(room / m->b);
	if (p >= cap)
		return (cap);
	if (p <= t->min_chunk)
		return (t->min_chunk);
	return ((uint32_t)p);
}

/*
 * The chunk that lets the prompts, served oldest first, each finish within
 * ttft_ms of arrival by the forecast; 0 when none needs more than min_chunk.
 */
static uint32_t
pl_ttft_chunk(const struct pl_target *t, const struct pl_chunk *c,
    const struct phased_view *v, uint32_t decodes)
{
	const struct pl_cost	*m = &c->cost;
	double			 fixed, per, left, R = 0, need, best = 0;
	uint64_t		 deadline;
	uint32_t		 i;

	fixed = c->corr * (m->a + (m->c > 0 ? m->c : 0) * decodes);
	per = c->corr * (m->b > 0 ? m->b : 0);
	if (fixed < 0)
		fixed = 0;
	for (i = 0; i < v->n_reqs; i++) {
		const struct phased_request *r = &v->reqs[i];

		if (!(r->state == PHASED_REQ_WAITING &&
		    r->group == PHASED_GROUP_NONE) &&
		    !(r->state == PHASED_REQ_PREFILLING && r->group == v->group))
			continue;
		if (phased_req_remaining(r) == 0)
			continue;
		R += phased_req_remaining(r);
		deadline = r->arrival_ns + (uint64_t)(t->ttft_ms * 1e6);
		if (deadline <= v->now_ns)
			continue;	/* already late: it no longer stretches */
		left = (deadline - v->now_ns) / 1e6;
		/* (R / P) iterations of fixed + per*P each within left. */
		if (left - R * per <= 0)
			need = INFINITY;
		else
			need = R * fixed / (left - R * per);
		if (need > best)
			best = need;
	}
	if (best <= t->min_chunk)
		return (0);
	return (best >= 65536 ? 65536 : (uint32_t)ceil(best));
}

/* The prefill chunk that keeps this iteration within the targets. */
void
pl_target_chunk(const struct pl_target *t, struct pl_learn *l,
    const struct phased_view *v, uint32_t decodes, struct pl_chunk *c)
{
	uint32_t	g = pl_slot(v), cap, need, stretch;
	double		base;

	memset(c, 0, sizeof *c);
	c->chunk = UINT32_MAX;
	c->corr = l->corr[g] > 0 ? l->corr[g] : 1;
	c->spread = sqrt(l->spread[g]);
	if (c->spread > PL_SPREAD_MAX)
		c->spread = PL_SPREAD_MAX;
	c->have_model = pl_cost_fit(v, &c->cost) == 0;
	if (decodes == 0)
		return;		/* no TBT to protect */
	if (t->tbt_ms != 0)
		c->target_ms = t->tbt_ms;
	else {
		base = l->base_ms[g];
		if (base == 0 && c->have_model)
			base = c->cost.a + (c->cost.c > 0 ? c->cost.c : 0) *
			    decodes;
		if (!(base > 0)) {
			c->chunk = t->min_chunk;
			return;
		}
		c->target_ms = t->factor * base;
		if (c->target_ms < base + PL_AUTO_MIN_ROOM_MS)
			c->target_ms = base + PL_AUTO_MIN_ROOM_MS;
	}
	if (!c->have_model) {
		c->chunk = t->min_chunk;
		return;
	}
	cap = t->max_chunk;
	if ((uint64_t)c->cost.max_p * PL_GROW_NUM / PL_GROW_DEN < cap)
		cap = c->cost.max_p * PL_GROW_NUM / PL_GROW_DEN;
	if (cap < t->min_chunk)
		cap = t->min_chunk;
	c->chunk = pl_chunk_for(t, c, decodes, c->target_ms, cap);
	if (t->ttft_ms != 0 &&
	    (need = pl_ttft_chunk(t, c, v, decodes)) > c->chunk) {
		stretch = pl_chunk_for(t, c, decodes,
		    PL_TTFT_STRETCH * c->target_ms, cap);
		c->chunk = need < stretch ? need : stretch;
	}
}

/* Fill the plan's report and remember the forecast for the next call. */
void
pl_target_report(struct pl_learn *l, const struct phased_view *v,
    const struct pl_chunk *c, uint32_t prefill, uint32_t decodes,
    struct phased_plan *p)
{
	const struct pl_cost	*m = &c->cost;
	uint32_t		 g = pl_slot(v);
	double			 pred = 0;

	if (c->have_model && prefill + decodes != 0) {
		pred = c->corr * (m->a + m->b * prefill +
		    (m->c > 0 ? m->c : 0) * decodes);
		if (pred < 0)
			pred = 0;
	}
	p->chunk_tokens = c->chunk == UINT32_MAX ? v->max_batch_tokens :
	    c->chunk;
	p->predicted_ns = (uint64_t)(pred * 1e6);
	p->target_ns = (uint64_t)(c->target_ms * 1e6);
	l->pred_ms[g] = prefill != 0 ? pred : 0;
	l->seen[g] = v->iteration;
}
