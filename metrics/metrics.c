/* metrics.c: request timing, histograms, windows and per-instance stats. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "util.h"

/* Renard R10 mantissas: ten log-spaced steps per decade, as integers. */
#define R10(e)	100ULL * (e), 125ULL * (e), 160ULL * (e), 200ULL * (e), \
		250ULL * (e), 315ULL * (e), 400ULL * (e), 500ULL * (e), \
		630ULL * (e), 800ULL * (e)

/* 10 us .. 100 s in ns. */
static const uint64_t bounds_ns[] = {
	R10(100ULL), R10(1000ULL), R10(10000ULL), R10(100000ULL),
	R10(1000000ULL), R10(10000000ULL), R10(100000000ULL),
	100000000000ULL
};

/* 1 .. 2^20. */
static const uint64_t bounds_count[] = {
	1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
	16384, 32768, 65536, 131072, 262144, 524288, 1048576
};

/* 0.1 .. 10^6 tokens/s in milli-tokens/s. */
static const uint64_t bounds_rate[] = {
	R10(1ULL), R10(10ULL), R10(100ULL), R10(1000ULL), R10(10000ULL),
	R10(100000ULL), R10(1000000ULL), 1000000000ULL
};

/* Shares in ppm; see hist_layout_share. */
static const uint64_t bounds_share[] = {
	0, 10000, 20000, 50000, 100000, 200000, 300000, 400000, 500000,
	600000, 700000, 800000, 900000, 950000, 990000, 1000000
};

#define NITEMS(a)	((int)(sizeof (a) / sizeof (a)[0]))

/* Export only the 1, 2.5, 5 steps of each decade, the usual Prometheus grid. */
static int
export_125(uint64_t b)
{
	while (b != 0 && b % 10 == 0)
		b /= 10;
	return (b == 1 || b == 25 || b == 5);
}

const struct hist_layout hist_layout_ns = {
	"ns", bounds_ns, NITEMS(bounds_ns), 1e-9, "seconds", 1e-6, "ms",
	export_125
};
const struct hist_layout hist_layout_count = {
	"count", bounds_count, NITEMS(bounds_count), 1.0, "", 1.0, "tokens",
	NULL
};
const struct hist_layout hist_layout_rate = {
	"mtok/s", bounds_rate, NITEMS(bounds_rate), 1e-3, "tokens_per_second",
	1e-3, "tok/s", export_125
};

const struct hist_layout hist_layout_share = {
	"ppm", bounds_share, NITEMS(bounds_share), 1e-6, "ratio", 1e-4, "%",
	NULL
};

const struct metric_info metric_info[MET__COUNT] = {
	[MET_QUEUE] = { "queue_time",
	    "Time from arrival to admission (first KV blocks).",
	    &hist_layout_ns },
	[MET_PREFILL] = { "prompt_processing_time",
	    "Time from admission to the end of the last prefill chunk.",
	    &hist_layout_ns },
	[MET_TTFT] = { "ttft",
	    "Time from arrival to the first output token.", &hist_layout_ns },
	[MET_TBT] = { "tbt",
	    "Time between two consecutive output tokens of a request.",
	    &hist_layout_ns },
	[MET_TPOT] = { "tpot",
	    "Mean time per output token after the first, per request.",
	    &hist_layout_ns },
	[MET_E2E] = { "e2e",
	    "Time from arrival to finish.", &hist_layout_ns },
	[MET_PROMPT_TPS] = { "prompt_tokens_per_s",
	    "Prompt tokens over prompt processing time, per request.",
	    &hist_layout_rate },
	[MET_OUTPUT_TPS] = { "output_tokens_per_s",
	    "Output tokens after the first over decode time, per request.",
	    &hist_layout_rate },
	[MET_ITER] = { "iteration_time",
	    "Duration of one engine iteration.", &hist_layout_ns },
	[MET_ITER_PREFILL] = { "iteration_prefill_tokens",
	    "Prompt tokens computed in one engine iteration.",
	    &hist_layout_count },
	[MET_ITER_DECODE] = { "iteration_decode_tokens",
	    "Decode tokens computed in one engine iteration.",
	    &hist_layout_count },
	[MET_ITER_SEQS] = { "iteration_sequences",
	    "Sequences batched in one engine iteration.", &hist_layout_count },
	[MET_ITER_OUT] = { "iteration_output_tokens",
	    "Tokens sampled in one engine iteration.", &hist_layout_count },
};

/* --- Histogram ---------------------------------------------------------- */

/* Make an empty histogram with the given bucket layout. */
void
hist_init(struct hist *h, const struct hist_layout *layout)
{
	if (layout->nbounds > HIST_MAXBOUNDS)
		fatalx("hist_init: layout %s has %d bounds (max %d)",
		    layout->name, layout->nbounds, HIST_MAXBOUNDS);
	memset(h, 0, sizeof *h);
	h->layout = layout;
	h->min = UINT64_MAX;
}

/* Find the first bucket whose inclusive upper bound holds v. */
int
hist_bucket(const struct hist_layout *layout, uint64_t v)
{
	int	lo = 0, hi = layout->nbounds, mid;

	/* Invariant: every bound below lo is < v; bound hi (or +Inf) >= v. */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (layout->bounds[mid] >= v)
			hi = mid;
		else
			lo = mid + 1;
	}
	return (lo);
}

/* Count one value. */
void
hist_add(struct hist *h, uint64_t v)
{
	h->counts[hist_bucket(h->layout, v)]++;
	h->count++;
	h->sum = (h->sum > UINT64_MAX - v) ? UINT64_MAX : h->sum + v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

/* Mean of the counted values; 0 when empty. */
double
hist_mean(const struct hist *h)
{
	if (h->count == 0)
		return (0);
	return ((double)h->sum / (double)h->count);
}

/* Estimate a percentile by interpolating inside the bucket holding its rank. */
double
hist_percentile(const struct hist *h, double p)
{
	const struct hist_layout *l = h->layout;
	double		 rank, lo, hi;
	uint64_t	 cum = 0, c;
	int		 i;

	if (h->count == 0)
		return (0);
	if (p <= 0)
		return ((double)h->min);
	if (p >= 100)
		return ((double)h->max);
	rank = p / 100.0 * (double)h->count;
	for (i = 0; i <= l->nbounds; i++) {
		if ((c = h->counts[i]) == 0)
			continue;
		if ((double)(cum + c) >= rank) {
			lo = i == 0 ? 0 : (double)l->bounds[i - 1];
			hi = i == l->nbounds ? (double)h->max :
			    (double)l->bounds[i];
			/* Nothing lies outside what was observed. */
			if (lo < (double)h->min)
				lo = (double)h->min;
			if (hi > (double)h->max)
				hi = (double)h->max;
			if (hi < lo)
				hi = lo;
			return (lo + (hi - lo) *
			    ((rank - (double)cum) / (double)c));
		}
		cum += c;
	}
	return ((double)h->max);
}

/* Compare two u64 for qsort. */
static int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y ? -1 : x > y);
}

/* Sort values ascending. */
void
sort_u64(uint64_t *v, size_t n)
{
	if (n > 1)
		qsort(v, n, sizeof *v, cmp_u64);
}

/* --- Sliding window ----------------------------------------------------- */

/* Make an empty window of span_ns holding at most cap samples. */
void
window_init(struct window *w, uint64_t span_ns, uint32_t cap)
{
	memset(w, 0, sizeof *w);
	w->span_ns = span_ns;
	w->cap = cap;
}

/* Release the ring. */
void
window_free(struct window *w)
{
	free(w->ring);
	window_init(w, w->span_ns, w->cap);
}

/* Drop the oldest sample. */
static void
window_pop(struct window *w)
{
	w->sum -= w->ring[w->head].v;
	w->head = (w->head + 1) % w->alloc;
	w->len--;
}

/* Drop samples that are no longer inside (now - span, now]. */
void
window_expire(struct window *w, uint64_t now)
{
	if (now < w->span_ns)
		return;
	while (w->len != 0 && w->ring[w->head].t <= now - w->span_ns)
		window_pop(w);
}

/* Grow the ring (up to cap), keeping the samples oldest first. */
static void
window_grow(struct window *w)
{
	struct wsample	*ring;
	uint32_t	 alloc, i;

	alloc = w->alloc < 32 ? 64 : w->alloc * 2;
	if (alloc > w->cap || alloc < w->alloc)
		alloc = w->cap;
	ring = xreallocarray(NULL, alloc, sizeof *ring);
	for (i = 0; i < w->len; i++)
		ring[i] = w->ring[(w->head + i) % w->alloc];
	free(w->ring);
	w->ring = ring;
	w->alloc = alloc;
	w->head = 0;
}

/* Add a sample stamped t; expire old ones, evict the oldest when full. */
void
window_add(struct window *w, uint64_t t, uint64_t v)
{
	if (w->cap == 0)
		return;
	if (t < w->last_t)
		t = w->last_t;
	w->last_t = t;
	window_expire(w, t);
	if (w->len == w->alloc) {
		if (w->alloc < w->cap)
			window_grow(w);
		else {
			w->evicted++;
			w->evicted_t = w->ring[w->head].t;
			window_pop(w);
		}
	}
	w->ring[(w->head + w->len) % w->alloc] = (struct wsample){ t, v };
	w->len++;
	w->sum += v;
}

/* Copy the held values, oldest first. */
void
window_values(const struct window *w, uint64_t *out)
{
	uint32_t	i;

	for (i = 0; i < w->len; i++)
		out[i] = w->ring[(w->head + i) % w->alloc].v;
}

/* Whether samples still inside the span were dropped for capacity. */
int
window_truncated(const struct window *w, uint64_t now)
{
	if (w->evicted == 0)
		return (0);
	return (now < w->span_ns || w->evicted_t > now - w->span_ns);
}

/* --- Per-request timing ------------------------------------------------- */

/* Start the timeline of a request that arrived at `arrival'. */
void
reqtime_init(struct reqtime *rt, uint64_t arrival, uint32_t prompt_tokens)
{
	memset(rt, 0, sizeof *rt);
	rt->arrival = arrival;
	rt->prompt_tokens = prompt_tokens;
	reqwait_init(&rt->wait, arrival);
}

/* Release the chunk and gap arrays. */
void
reqtime_free(struct reqtime *rt)
{
	free(rt->chunks);
	free(rt->gaps_us);
	rt->chunks = NULL;
	rt->gaps_us = NULL;
	rt->nchunks = rt->chunks_alloc = rt->gaps_alloc = 0;
}

/* Note the first admission; a re-admission after preemption keeps it. */
void
reqtime_admit(struct reqtime *rt, uint64_t now)
{
	if (rt->admitted == 0)
		rt->admitted = now;
}

/* Note one prefill chunk of `tokens' positions computed from start to end. */
void
reqtime_chunk(struct reqtime *rt, uint64_t start, uint64_t end,
    uint32_t tokens)
{
	if (rt->nchunks == UINT32_MAX)
		return;
	if (rt->nchunks == rt->chunks_alloc) {
		rt->chunks_alloc = rt->chunks_alloc == 0 ? 4 :
		    (rt->chunks_alloc > UINT32_MAX / 2 ? UINT32_MAX :
		    rt->chunks_alloc * 2);
		rt->chunks = xreallocarray(rt->chunks, rt->chunks_alloc,
		    sizeof *rt->chunks);
	}
	rt->chunks[rt->nchunks++] = (struct prefill_chunk){
	    start, end < start ? start : end, tokens };
}

/* Note a sampled token; returns its gap to the previous token in ns. */
uint64_t
reqtime_token(struct reqtime *rt, uint64_t now)
{
	uint64_t	gap, us;

	if (rt->n_tokens == 0) {
		rt->first_token = rt->last_token = now;
		rt->n_tokens = 1;
		return (0);
	}
	if (rt->n_tokens == UINT32_MAX)
		return (0);
	if (now < rt->last_token)
		now = rt->last_token;
	gap = now - rt->last_token;
	rt->last_token = now;
	if (rt->n_tokens - 1 == rt->gaps_alloc) {
		rt->gaps_alloc = rt->gaps_alloc == 0 ? 16 :
		    (rt->gaps_alloc > UINT32_MAX / 2 ? UINT32_MAX :
		    rt->gaps_alloc * 2);
		rt->gaps_us = xreallocarray(rt->gaps_us, rt->gaps_alloc,
		    sizeof *rt->gaps_us);
	}
	us = (gap + 500) / 1000;
	rt->gaps_us[rt->n_tokens - 1] = us > UINT32_MAX ? UINT32_MAX :
	    (uint32_t)us;
	rt->n_tokens++;
	return (gap);
}

/* Count a preemption (the request's KV state was dropped). */
void
reqtime_preempt(struct reqtime *rt)
{
	rt->preemptions++;
}

/* Note the finish time. */
void
reqtime_finish(struct reqtime *rt, uint64_t now)
{
	rt->finished = now;
	reqwait_finish(&rt->wait, now);
}

/* Interval b - a, or 0 when either end is missing or b is earlier. */
static uint64_t
interval(uint64_t a, uint64_t b)
{
	if (a == 0 || b == 0 || b < a)
		return (0);
	return (b - a);
}

/* Derive the request's figures from its timeline. */
void
reqtime_summary(const struct reqtime *rt, struct reqtime_summary *s)
{
	uint64_t	last_end = 0;
	uint32_t	i;

	memset(s, 0, sizeof *s);
	s->prompt_tokens = rt->prompt_tokens;
	s->output_tokens = rt->n_tokens;
	s->nchunks = rt->nchunks;
	s->preemptions = rt->preemptions;
	for (i = 0; i < rt->nchunks; i++) {
		s->prefill_busy_ns += rt->chunks[i].end - rt->chunks[i].start;
		s->prefill_tokens += rt->chunks[i].tokens;
		if (rt->chunks[i].end > last_end)
			last_end = rt->chunks[i].end;
	}
	for (i = 0; i + 1 < rt->n_tokens; i++) {
		if ((uint64_t)rt->gaps_us[i] * 1000 > s->tbt_max_ns)
			s->tbt_max_ns = (uint64_t)rt->gaps_us[i] * 1000;
	}
	s->queue_ns = interval(rt->arrival, rt->admitted);
	s->prefill_ns = interval(rt->admitted, last_end);
	s->ttft_ns = interval(rt->arrival, rt->first_token);
	s->e2e_ns = interval(rt->arrival, rt->finished);
	if (rt->n_tokens >= 2) {
		s->decode_ns = rt->last_token - rt->first_token;
		s->tpot_ns = s->decode_ns / (rt->n_tokens - 1);
		if (s->decode_ns != 0)
			s->output_tps = (double)(rt->n_tokens - 1) * 1e9 /
			    (double)s->decode_ns;
	}
	if (s->prefill_ns != 0)
		s->prompt_tps = (double)rt->prompt_tokens * 1e9 /
		    (double)s->prefill_ns;
	if (s->e2e_ns != 0)
		s->e2e_tps = (double)rt->n_tokens * 1e9 / (double)s->e2e_ns;
	memcpy(s->wait_ns, rt->wait.ns, sizeof s->wait_ns);
	s->nblamed = (uint32_t)reqwait_blamed(&rt->wait, s->blamed);
}

/* --- Per-instance aggregates -------------------------------------------- */

/* Set up the aggregates of the instance `name', created at `now'. */
void
inst_metrics_init(struct inst_metrics *m, const char *name, uint64_t now,
    const struct inst_metrics_config *conf)
{
	uint64_t	span = 60ULL * 1000000000ULL;
	uint32_t	cap = 8192, tbtcap = 131072;
	int		i, error;

	if (conf != NULL) {
		if (conf->window_ns != 0)
			span = conf->window_ns;
		if (conf->window_cap != 0)
			cap = conf->window_cap;
		if (conf->tbt_window_cap != 0)
			tbtcap = conf->tbt_window_cap;
	}
	memset(m, 0, sizeof *m);
	if ((error = pthread_mutex_init(&m->lock, NULL)) != 0)
		fatalx("inst_metrics_init: pthread_mutex_init: %s",
		    strerror(error));
	m->name = xstrdup(name);
	m->created = now;
	m->window_ns = span;
	for (i = 0; i < MET__COUNT; i++) {
		hist_init(&m->series[i].total, metric_info[i].layout);
		window_init(&m->series[i].win, span,
		    i == MET_TBT ? tbtcap : cap);
	}
	for (i = 0; i < WAIT__COUNT; i++)
		hist_init(&m->wait_share[i], &hist_layout_share);
	/* One sample per iteration each, so both drop the same ones. */
	window_init(&m->decode_others, span, cap);
	window_init(&m->decode_gaps, span, cap);
}

/* Release the instance's aggregates. */
void
inst_metrics_free(struct inst_metrics *m)
{
	int	i;

	for (i = 0; i < MET__COUNT; i++)
		window_free(&m->series[i].win);
	window_free(&m->decode_others);
	window_free(&m->decode_gaps);
	free(m->name);
	m->name = NULL;
	pthread_mutex_destroy(&m->lock);
}

/* Record one sample of a series; the caller holds the lock. */
static void
series_add(struct inst_metrics *m, enum metric_id id, uint64_t t, uint64_t v)
{
	hist_add(&m->series[id].total, v);
	window_add(&m->series[id].win, t, v);
}

/* Record one engine iteration and the TBT gaps of the tokens it sampled. */
void
inst_metrics_iteration(struct inst_metrics *m, const struct iter_sample *it,
    const uint64_t *tbt_ns, size_t ntbt)
{
	uint64_t	t = it->end, gaps = 0;
	size_t		i;

	for (i = 0; i < ntbt; i++)
		gaps += tbt_ns[i];
	pthread_mutex_lock(&m->lock);
	window_add(&m->decode_others, t, it->decode_others_ns);
	window_add(&m->decode_gaps, t, gaps);
	series_add(m, MET_ITER, t,
	    it->end > it->start ? it->end - it->start : 0);
	series_add(m, MET_ITER_PREFILL, t, it->prefill_tokens);
	series_add(m, MET_ITER_DECODE, t, it->decode_tokens);
	series_add(m, MET_ITER_SEQS, t, it->nseqs);
	series_add(m, MET_ITER_OUT, t, it->out_tokens);
	for (i = 0; i < ntbt; i++)
		series_add(m, MET_TBT, t, tbt_ns[i]);
	m->prompt_tokens += it->prefill_tokens;
	m->output_tokens += it->out_tokens;
	m->iterations++;
	pthread_mutex_unlock(&m->lock);
}

/* Record what is known once a request has its first token. */
void
inst_metrics_first_token(struct inst_metrics *m, const struct reqtime *rt)
{
	struct reqtime_summary	s;
	uint64_t		t = rt->first_token;

	reqtime_summary(rt, &s);
	pthread_mutex_lock(&m->lock);
	if (rt->admitted != 0)
		series_add(m, MET_QUEUE, t, s.queue_ns);
	if (rt->admitted != 0 && rt->nchunks != 0) {
		series_add(m, MET_PREFILL, t, s.prefill_ns);
		if (s.prefill_ns != 0)
			series_add(m, MET_PROMPT_TPS, t,
			    (uint64_t)(s.prompt_tps * 1e3 + 0.5));
	}
	if (rt->first_token != 0)
		series_add(m, MET_TTFT, t, s.ttft_ns);
	pthread_mutex_unlock(&m->lock);
}

/* part / whole in millionths, rounded, at most a million. */
static uint64_t
share_ppm(uint64_t part, uint64_t whole)
{
	if (whole == 0)
		return (0);
	if (part >= whole)
		return (1000000);
	return ((uint64_t)((double)part * 1e6 / (double)whole + 0.5));
}

/* Record what is known once a request has finished, and why it did. */
void
inst_metrics_finished(struct inst_metrics *m, const struct reqtime *rt,
    enum finish_reason why)
{
	struct reqtime_summary	s;
	uint64_t		t = rt->finished;

	reqtime_summary(rt, &s);
	if (t == 0)
		t = rt->last_token;
	pthread_mutex_lock(&m->lock);
	if (rt->n_tokens >= 2) {
		series_add(m, MET_TPOT, t, s.tpot_ns);
		if (s.decode_ns != 0)
			series_add(m, MET_OUTPUT_TPS, t,
			    (uint64_t)(s.output_tps * 1e3 + 0.5));
	}
	if (rt->finished != 0)
		series_add(m, MET_E2E, t, s.e2e_ns);
	for (int c = 0; c < WAIT__COUNT; c++) {
		m->wait_ns[c] += s.wait_ns[c];
		if (rt->finished != 0 && s.e2e_ns != 0)
			hist_add(&m->wait_share[c], share_ppm(s.wait_ns[c],
			    reqwait_total(&rt->wait)));
	}
	if ((unsigned)why < FINISH__COUNT)
		m->finished[why]++;
	else
		m->finished[FINISH_ERROR]++;
	pthread_mutex_unlock(&m->lock);
}

/* Add n to a counter. */
void
inst_metrics_count(struct inst_metrics *m, enum metric_counter c, uint64_t n)
{
	if ((unsigned)c >= CNT__COUNT)
		return;
	pthread_mutex_lock(&m->lock);
	m->counters[c] += n;
	pthread_mutex_unlock(&m->lock);
}

/* Set a counter kept elsewhere (or a gauge in the counter table). */
void
inst_metrics_set(struct inst_metrics *m, enum metric_counter c, uint64_t v)
{
	if ((unsigned)c >= CNT__COUNT)
		return;
	pthread_mutex_lock(&m->lock);
	m->counters[c] = v;
	pthread_mutex_unlock(&m->lock);
}

/* Set the gauges the engine owns. */
void
inst_metrics_gauges(struct inst_metrics *m, uint64_t kv_used, uint64_t kv_free,
    uint64_t running, uint64_t waiting)
{
	pthread_mutex_lock(&m->lock);
	m->kv_used = kv_used;
	m->kv_free = kv_free;
	m->running = running;
	m->waiting = waiting;
	pthread_mutex_unlock(&m->lock);
}

/* --- Snapshots and reports ---------------------------------------------- */

/* Make an empty snapshot. */
void
inst_snapshot_init(struct inst_snapshot *s)
{
	int	i;

	memset(s, 0, sizeof *s);
	for (i = 0; i < MET__COUNT; i++)
		hist_init(&s->series[i].total, metric_info[i].layout);
	for (i = 0; i < WAIT__COUNT; i++)
		hist_init(&s->wait_share[i], &hist_layout_share);
}

/* Release a snapshot's memory. */
void
inst_snapshot_free(struct inst_snapshot *s)
{
	int	i;

	free(s->name);
	for (i = 0; i < MET__COUNT; i++)
		free(s->series[i].wvals);
	inst_snapshot_init(s);
}

/* The span window rates divide by: the window, or the uptime if shorter. */
uint64_t
inst_snapshot_window_span(const struct inst_snapshot *s)
{
	uint64_t	up = s->taken > s->created ? s->taken - s->created : 0;

	return (up < s->window_ns ? up : s->window_ns);
}

/* Copy an instance's aggregates at `now' and sort the window values. */
void
inst_metrics_snapshot(struct inst_metrics *src, struct inst_snapshot *dst,
    uint64_t now)
{
	struct window	*w;
	int		 i;

	pthread_mutex_lock(&src->lock);
	if (dst->name == NULL || strcmp(dst->name, src->name) != 0) {
		free(dst->name);
		dst->name = xstrdup(src->name);
	}
	dst->created = src->created;
	dst->taken = now;
	dst->window_ns = src->window_ns;
	for (i = 0; i < MET__COUNT; i++) {
		w = &src->series[i].win;
		window_expire(w, now);
		dst->series[i].total = src->series[i].total;
		if (dst->series[i].walloc < w->len) {
			free(dst->series[i].wvals);
			dst->series[i].wvals = xreallocarray(NULL, w->len,
			    sizeof *dst->series[i].wvals);
			dst->series[i].walloc = w->len;
		}
		window_values(w, dst->series[i].wvals);
		dst->series[i].wlen = w->len;
		dst->series[i].wsum = w->sum;
		dst->series[i].wtruncated = window_truncated(w, now);
		if (dst->series[i].wtruncated)
			dst->series[i].wspan = now > w->evicted_t ?
			    now - w->evicted_t : 0;
		else
			dst->series[i].wspan = inst_snapshot_window_span(dst);
	}
	memcpy(dst->finished, src->finished, sizeof dst->finished);
	memcpy(dst->counters, src->counters, sizeof dst->counters);
	memcpy(dst->wait_ns, src->wait_ns, sizeof dst->wait_ns);
	memcpy(dst->wait_share, src->wait_share, sizeof dst->wait_share);
	window_expire(&src->decode_others, now);
	window_expire(&src->decode_gaps, now);
	dst->decode_others_ns = src->decode_others.sum;
	dst->decode_gaps_ns = src->decode_gaps.sum;
	dst->prompt_tokens = src->prompt_tokens;
	dst->output_tokens = src->output_tokens;
	dst->iterations = src->iterations;
	dst->kv_used = src->kv_used;
	dst->kv_free = src->kv_free;
	dst->running = src->running;
	dst->waiting = src->waiting;
	pthread_mutex_unlock(&src->lock);

	/* Sorting happens after the engine has its lock back. */
	for (i = 0; i < MET__COUNT; i++)
		sort_u64(dst->series[i].wvals, dst->series[i].wlen);
}

/* Tokens per second of `tokens' over `ns', 0 when no time passed. */
static double
per_second(uint64_t tokens, uint64_t ns)
{
	return (ns == 0 ? 0 : (double)tokens * 1e9 / (double)ns);
}

/* Others' prefill over the time between tokens, in the window. */
double
inst_snapshot_decode_others_share(const struct inst_snapshot *s)
{
	if (s->decode_gaps_ns == 0)
		return (0);
	if (s->decode_others_ns >= s->decode_gaps_ns)
		return (1);
	return ((double)s->decode_others_ns / (double)s->decode_gaps_ns);
}

/* Prompt and output tokens/s over the window and since start. */
void
inst_snapshot_rates(const struct inst_snapshot *s, double *win_prompt,
    double *win_output, double *all_prompt, double *all_output)
{
	uint64_t	up = s->taken > s->created ? s->taken - s->created : 0;

	if (win_prompt != NULL)
		*win_prompt = per_second(s->series[MET_ITER_PREFILL].wsum,
		    s->series[MET_ITER_PREFILL].wspan);
	if (win_output != NULL)
		*win_output = per_second(s->series[MET_ITER_OUT].wsum,
		    s->series[MET_ITER_OUT].wspan);
	if (all_prompt != NULL)
		*all_prompt = per_second(s->prompt_tokens, up);
	if (all_output != NULL)
		*all_output = per_second(s->output_tokens, up);
}

/* Fill one stats row per series, over the window or since start. */
size_t
inst_stats_rows(const struct inst_snapshot *s, enum stats_span span,
    struct stats_row *rows, size_t n)
{
	const struct hist_layout *l;
	const struct hist	*h;
	struct stats_row	*r;
	const uint64_t		*v;
	size_t			 i, len;
	double			 k;

	for (i = 0; i < n && i < MET__COUNT; i++) {
		r = &rows[i];
		l = metric_info[i].layout;
		k = l->display;
		r->name = metric_info[i].name;
		r->unit = l->display_unit;
		if (span == STATS_WINDOW) {
			v = s->series[i].wvals;
			len = s->series[i].wlen;
			r->count = len;
			r->mean = len == 0 ? 0 :
			    (double)s->series[i].wsum / (double)len * k;
			r->p50 = percentile_sorted(v, len, 50) * k;
			r->p90 = percentile_sorted(v, len, 90) * k;
			r->p99 = percentile_sorted(v, len, 99) * k;
			r->max = len == 0 ? 0 : (double)v[len - 1] * k;
			r->truncated = s->series[i].wtruncated;
		} else {
			h = &s->series[i].total;
			r->count = h->count;
			r->mean = hist_mean(h) * k;
			r->p50 = hist_percentile(h, 50) * k;
			r->p90 = hist_percentile(h, 90) * k;
			r->p99 = hist_percentile(h, 99) * k;
			r->max = (h->count == 0 ? 0 : (double)h->max) * k;
			r->truncated = 0;
		}
	}
	return (i);
}
