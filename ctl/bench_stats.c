/* bench_stats.c: phasectl bench's samples and their statistics. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "percentile.h"
#include "util.h"

/* Compare doubles for qsort. */
static int
b_cmp(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return ((x > y) - (x < y));
}

/* Sort v and summarize it (percentiles as percentile_sorted_d). */
static struct b_stat
b_stats(double *v, size_t n)
{
	struct b_stat	s = { 0 };
	size_t		i;

	if (n == 0)
		return (s);
	qsort(v, n, sizeof *v, b_cmp);
	s.n = n;
	for (i = 0; i < n; i++)
		s.mean += v[i];
	s.mean /= n;
	s.p50 = percentile_sorted_d(v, n, 50);
	s.p90 = percentile_sorted_d(v, n, 90);
	s.p99 = percentile_sorted_d(v, n, 99);
	s.min = v[0];
	s.max = v[n - 1];
	return (s);
}

/* A growable sample of doubles. */
struct b_vec {
	double	*v;
	size_t	 n, cap;
};

/* Append x to a sample. */
static void
b_push(struct b_vec *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->v = xreallocarray(s->v, s->cap, sizeof *s->v);
	}
	s->v[s->n++] = x;
}

/* Whether a request ended normally. */
int
b_ok(const struct b_req *r)
{
	return (r->done && strcmp(r->finish, "error") != 0 &&
	    (strcmp(r->finish, "cancelled") != 0 || r->cancelled));
}

/* The largest gap between two tokens of r, in ms. */
static double
b_max_tbt(const struct b_req *r)
{
	double	m = 0, d;
	size_t	i;

	for (i = 1; i < r->n_tok; i++) {
		d = (r->tok_ns[i] - r->tok_ns[i - 1]) / 1e6;
		if (d > m)
			m = d;
	}
	return (m);
}

/*
 * The gaps a chat stream's user sees: between successive tokens of the
 * stream across its requests, so the wait for the first token of each new
 * turn counts too; a last request cancelled before any token adds the wait
 * from the stream's last token to the cancel.
 */
static void
b_stream_gaps(struct bench *b, struct b_vec *gaps)
{
	struct b_req	*r;
	uint32_t	 k;
	uint64_t	 last;
	size_t		 i, j;
	int		 have;

	for (k = 0; k < b->o->chats; k++) {
		have = 0;
		last = 0;
		for (i = 0; i < b->n_reqs; i++) {
			r = b->reqs[i];
			if (r->kind != BK_CHAT || r->stream != k || !b_ok(r))
				continue;
			for (j = 0; j < r->n_tok; j++) {
				if (have)
					b_push(gaps, (r->tok_ns[j] - last) / 1e6);
				last = r->tok_ns[j];
				have = 1;
			}
			if (r->n_tok == 0 && r->cancelled && have)
				b_push(gaps, (r->done_ns - last) / 1e6);
		}
	}
}

const char *const b_series_names[BS__COUNT] = {
	[BS_TTFT] = "ttft", [BS_TBT] = "tbt", [BS_TPOT] = "tpot",
	[BS_E2E] = "e2e", [BS_DAEMON_TTFT] = "daemon_ttft",
	[BS_DAEMON_TBT] = "daemon_tbt", [BS_DAEMON_QUEUE] = "daemon_queue",
	[BS_CHAT_TBT] = "chat_tbt", [BS_CHAT_TTFT] = "chat_ttft",
	[BS_CHAT_GAP] = "chat_stream_gap", [BS_LONG_TTFT] = "long_ttft",
};

/* Count a request's finish reason (the first B_MAX_REASONS kinds). */
static void
b_count_reason(struct b_summary *s, const char *finish)
{
	size_t	j;

	for (j = 0; j < s->n_reasons; j++)
		if (strcmp(s->reasons[j], finish) == 0)
			break;
	if (j == s->n_reasons && s->n_reasons < B_MAX_REASONS) {
		s->reasons[s->n_reasons] = finish;
		s->counts[s->n_reasons++] = 0;
	}
	if (j < s->n_reasons)
		s->counts[j]++;
}

/* Add the samples of one request that ended normally. */
static void
b_sample(const struct b_opts *o, const struct b_req *r, struct b_vec *v,
    struct b_summary *s)
{
	double	x;
	size_t	j;

	s->prompt_tokens += r->d_prompt_tokens;
	s->cached_tokens += r->d_cached_tokens;
	s->output_tokens += r->n_tok;
	b_push(&v[BS_E2E], (r->done_ns - r->send_ns) / 1e6);
	b_push(&v[BS_DAEMON_QUEUE], r->d_queue_ms);
	if (r->n_tok > 0) {
		x = (r->tok_ns[0] - r->send_ns) / 1e6;
		b_push(&v[BS_TTFT], x);
		b_push(&v[BS_DAEMON_TTFT], r->tok_us[0] / 1e3);
		if (r->kind == BK_LONG)
			b_push(&v[BS_LONG_TTFT], x);
		else if (r->kind == BK_CHAT)
			b_push(&v[BS_CHAT_TTFT], x);
	}
	if (r->kind == BK_LONG)
		s->n_long++;
	if (r->n_tok > 1)
		b_push(&v[BS_TPOT], (r->tok_ns[r->n_tok - 1] - r->tok_ns[0]) /
		    1e6 / (r->n_tok - 1));
	for (j = 1; j < r->n_tok; j++) {
		x = (r->tok_ns[j] - r->tok_ns[j - 1]) / 1e6;
		b_push(&v[BS_TBT], x);
		b_push(&v[BS_DAEMON_TBT], (r->tok_us[j] - r->tok_us[j - 1]) /
		    1e3);
		if (r->kind == BK_CHAT)
			b_push(&v[BS_CHAT_TBT], x);
	}
	/* Goodput: TTFT and every token gap within the SLOs. */
	if (r->n_tok > 0 && (o->slo_ttft_ms == 0 ||
	    (r->tok_ns[0] - r->send_ns) / 1e6 <= o->slo_ttft_ms) &&
	    (o->slo_tbt_ms == 0 || b_max_tbt(r) <= o->slo_tbt_ms))
		s->good++;
}

/* Per turn of the multiturn scenario: TTFT, prompt and cached tokens. */
static void
b_turns(struct bench *b, struct b_summary *s)
{
	struct b_vec	 v;
	struct b_req	*r;
	uint32_t	 t;
	size_t		 i, n;

	for (t = 0; t < b->o->turns && t < B_MAX_TURNS; t++) {
		memset(&v, 0, sizeof v);
		n = 0;
		for (i = 0; i < b->n_reqs; i++) {
			r = b->reqs[i];
			if (r->kind != BK_TURN || r->turn != t || !b_ok(r) ||
			    r->n_tok == 0)
				continue;
			b_push(&v, (r->tok_ns[0] - r->send_ns) / 1e6);
			s->turn_prompt[t] += r->d_prompt_tokens;
			s->turn_cached[t] += r->d_cached_tokens;
			n++;
		}
		if (n > 0) {
			s->turn_prompt[t] /= n;
			s->turn_cached[t] /= n;
		}
		s->turn_ttft[t] = b_stats(v.v, v.n);
		free(v.v);
	}
}

/* Aggregate the run's requests into what the report prints. */
void
b_summarize(struct bench *b, struct b_summary *s)
{
	const struct b_opts	*o = b->o;
	struct b_vec		 v[BS__COUNT];
	struct b_req		*r;
	uint64_t		 start = UINT64_MAX;
	size_t			 i;

	memset(s, 0, sizeof *s);
	memset(v, 0, sizeof v);
	s->requests = b->n_reqs;
	for (i = 0; i < b->n_reqs; i++) {
		r = b->reqs[i];
		if (r->send_ns < start)
			start = r->send_ns;
		b_count_reason(s, r->finish);
		if (!b_ok(r)) {
			s->errors++;
			continue;
		}
		s->ok++;
		b_sample(o, r, v, s);
	}
	if (start == UINT64_MAX)
		start = 0;
	s->duration_s = b->end_ns > start ? (b->end_ns - start) / 1e9 : 0;
	if (o->mode == BM_MULTITURN)
		b_turns(b, s);
	s->mode = o->mode == BM_MULTITURN ? "multiturn" :
	    o->mode == BM_INTERFERENCE ? "interference" : o->mode ==
	    BM_RATE ? (o->burstiness == 1 ? "poisson" : "gamma") :
	    "concurrency";
	if (o->mode == BM_INTERFERENCE)
		b_stream_gaps(b, &v[BS_CHAT_GAP]);
	for (i = 0; i < BS__COUNT; i++) {
		s->stat[i] = b_stats(v[i].v, v[i].n);
		free(v[i].v);
	}
}
