/* test-metrics.c: metric arithmetic on synthetic timestamps. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "metrics-testutil.h"
#include "tap.h"

#define MS	1000000ULL
#define SEC	1000000000ULL
#define T0	(1000 * SEC)	/* timestamps are never 0: 0 means "not yet" */

/* Percentiles of known data under the documented definition. */
static void
test_percentiles(void)
{
	uint64_t	v[100], two[2] = { 10, 20 }, one = 7;
	double		d[100], ps[4] = { 0, 50, 99, 100 };
	int		i;

	for (i = 0; i < 100; i++)
		v[i] = 100 - i;		/* unsorted on purpose */
	sort_u64(v, 100);
	is_int(v[0], 1, "sort_u64 puts 1 first");
	is_int(v[99], 100, "sort_u64 puts 100 last");
	near(percentile_sorted(v, 100, 0), 1, 1e-9, "1..100: p0 = 1");
	near(percentile_sorted(v, 100, 50), 50.5, 1e-9, "1..100: p50 = 50.5");
	near(percentile_sorted(v, 100, 90), 90.1, 1e-9, "1..100: p90 = 90.1");
	near(percentile_sorted(v, 100, 99), 99.01, 1e-9, "1..100: p99 = 99.01");
	near(percentile_sorted(v, 100, 100), 100, 1e-9, "1..100: p100 = max");
	near(percentile_sorted(two, 2, 25), 12.5, 1e-9, "two values interpolate");
	near(percentile_sorted(&one, 1, 99), 7, 1e-9, "one value is every percentile");
	near(percentile_sorted(NULL, 0, 50), 0, 0, "no values give 0");
	for (i = 0; i < 100; i++)
		d[i] = (double)v[i] / 1000;
	/* phasectl bench's doubles follow the same definition as stats. */
	for (i = 0; i < 4; i++)
		near(percentile_sorted_d(d, 100, ps[i]),
		    percentile_sorted(v, 100, ps[i]) / 1000, 1e-12,
		    "doubles: same percentile as counts");
	near(percentile_sorted_d(d, 100, 99), 0.09901, 1e-12,
	    "doubles: p99 of 0.001..0.1 interpolates");
}

/* Bucket layouts: monotone bounds and inclusive upper edges. */
static void
test_buckets(void)
{
	const struct hist_layout *ls[] = { &hist_layout_ns, &hist_layout_count,
	    &hist_layout_rate };
	const struct hist_layout *l = &hist_layout_ns;
	int	i, j, mono, nexp;

	for (j = 0; j < 3; j++) {
		mono = 1;
		for (i = 1; i < ls[j]->nbounds; i++)
			if (ls[j]->bounds[i] <= ls[j]->bounds[i - 1])
				mono = 0;
		ok(mono, "layout %s: bounds strictly increase", ls[j]->name);
		ok(ls[j]->nbounds <= HIST_MAXBOUNDS, "layout %s fits", ls[j]->name);
	}
	is_int(l->nbounds, 71, "latency layout: 7 decades of R10 plus 100 s");
	is_int(l->bounds[0], 10000, "first latency bound is 10 us");
	is_int(l->bounds[70], 100 * SEC, "last latency bound is 100 s");
	is_int(hist_bucket(l, 0), 0, "0 ns in the first bucket");
	is_int(hist_bucket(l, 10000), 0, "10 us on the edge is in the first bucket");
	is_int(hist_bucket(l, 10001), 1, "10 us + 1 ns in the second");
	is_int(hist_bucket(l, 12500), 1, "12.5 us on the second edge");
	is_int(hist_bucket(l, 1 * MS), 20, "1 ms is bound 20");
	is_int(l->bounds[20], 1 * MS, "bound 20 is 1 ms");
	is_int(hist_bucket(l, 1 * MS + 1), 21, "just above 1 ms goes up");
	is_int(hist_bucket(l, 100 * SEC), 70, "100 s in the last bounded bucket");
	is_int(hist_bucket(l, 100 * SEC + 1), 71, "above 100 s overflows");
	is_int(hist_bucket(l, UINT64_MAX), 71, "UINT64_MAX overflows");
	is_int(hist_bucket(&hist_layout_count, 1), 0, "count 1 in bucket le=1");
	is_int(hist_bucket(&hist_layout_count, 3), 2, "count 3 in bucket le=4");
	is_int(hist_bucket(&hist_layout_count, 1048577), 21, "count past 2^20 overflows");
	nexp = 0;
	for (i = 0; i < l->nbounds; i++)
		nexp += l->exported(l->bounds[i]);
	is_int(nexp, 22, "22 latency bounds exported (1, 2.5, 5 per decade + 100 s)");
	ok(l->exported(2500000) && l->exported(5 * MS) && !l->exported(2 * MS) &&
	    !l->exported(3150000), "2.5 ms and 5 ms exported, 2 ms and 3.15 ms not");
}

/* Histogram counts, sum, extremes and bucket-interpolated percentiles. */
static void
test_hist(void)
{
	struct hist	h;
	int		i;

	hist_init(&h, &hist_layout_ns);
	near(hist_percentile(&h, 50), 0, 0, "empty histogram: p50 = 0");
	for (i = 1; i <= 100; i++)
		hist_add(&h, (uint64_t)i * MS);
	is_int(h.count, 100, "100 samples counted");
	is_int(h.sum, 5050 * MS, "sum of 1..100 ms");
	is_int(h.min, 1 * MS, "min 1 ms");
	is_int(h.max, 100 * MS, "max 100 ms");
	near(hist_mean(&h), 50.5 * MS, 1, "mean 50.5 ms");
	is_int(h.counts[hist_bucket(&hist_layout_ns, 50 * MS)], 10,
	    "bucket (40, 50] ms holds 41..50");
	is_int(h.counts[hist_bucket(&hist_layout_ns, 100 * MS)], 20,
	    "bucket (80, 100] ms holds 81..100");
	/* Rank 50 is the top of (40, 50]: interpolation lands on the edge. */
	near(hist_percentile(&h, 50), 50 * MS, 1, "bucket p50 = 50 ms");
	/* Rank 99 is 19/20 through (80, 100]. */
	near(hist_percentile(&h, 99), 99 * MS, 1, "bucket p99 = 99 ms");
	near(hist_percentile(&h, 90), 90 * MS, 1, "bucket p90 = 90 ms");
	near(hist_percentile(&h, 0), 1 * MS, 0, "bucket p0 = min");
	near(hist_percentile(&h, 100), 100 * MS, 0, "bucket p100 = max");

	/* A lone value: every estimate is clamped to what was observed. */
	hist_init(&h, &hist_layout_ns);
	hist_add(&h, 7 * MS);
	near(hist_percentile(&h, 50), 7 * MS, 0, "one sample: p50 is the sample");
	hist_add(&h, 1000 * SEC);
	/* Rank 1.98 is 98% through (100 s, max]. */
	near(hist_percentile(&h, 99), 100.0 * SEC + 0.98 * 900.0 * SEC, 1e3,
	    "overflow bucket interpolates up to the max");
}

/* Sliding window: expiry by age and eviction by count, with injected time. */
static void
test_window(void)
{
	struct window	w;
	uint64_t	vals[1000];
	int		i, inorder;

	window_init(&w, 10 * SEC, 100);
	for (i = 1; i <= 10; i++)
		window_add(&w, T0 + (uint64_t)i * SEC, (uint64_t)i);
	is_int(w.len, 10, "10 samples held");
	is_int(w.sum, 55, "running sum 55");
	window_expire(&w, T0 + 11 * SEC);
	is_int(w.len, 9, "at +11 s the +1 s sample (exactly 10 s old) left");
	is_int(w.sum, 54, "sum follows expiry");
	window_values(&w, vals);
	is_int(vals[0], 2, "oldest held is now 2");
	window_expire(&w, T0 + 19 * SEC + 1);
	is_int(w.len, 1, "at +19 s + 1 ns only the +10 s sample is left");
	window_expire(&w, T0 + 20 * SEC);
	is_int(w.len, 0, "at +20 s the window is empty");
	is_int(w.sum, 0, "and its sum is 0");
	ok(!window_truncated(&w, T0 + 20 * SEC), "nothing was evicted for room");
	/* Adding expires too: a late sample pushes the old ones out. */
	window_add(&w, T0 + 21 * SEC, 5);
	window_add(&w, T0 + 40 * SEC, 6);
	is_int(w.len, 1, "adding at +40 s expired the +21 s sample");
	/* An earlier stamp than the newest is clamped, not reordered. */
	window_add(&w, T0 + 39 * SEC, 7);
	window_expire(&w, T0 + 49 * SEC + 1);
	is_int(w.len, 2, "a clamped stamp lives as long as the newest");
	window_free(&w);

	window_init(&w, 10 * SEC, 4);
	for (i = 1; i <= 6; i++)
		window_add(&w, T0 + (uint64_t)i * SEC, (uint64_t)i);
	is_int(w.len, 4, "capacity 4 holds 4");
	window_values(&w, vals);
	ok(vals[0] == 3 && vals[3] == 6, "the oldest were evicted (3..6 held)");
	is_int(w.sum, 18, "sum of 3..6");
	ok(window_truncated(&w, T0 + 6 * SEC), "truncated while evictions are inside the span");
	ok(!window_truncated(&w, T0 + 12 * SEC + 1), "not once they would have expired anyway");
	window_free(&w);

	window_init(&w, 100 * SEC, 1000);
	for (i = 0; i < 700; i++)
		window_add(&w, T0 + (uint64_t)i * MS, (uint64_t)i);
	window_values(&w, vals);
	inorder = 1;
	for (i = 0; i < 700; i++)
		if (vals[i] != (uint64_t)i)
			inorder = 0;
	ok(inorder && w.len == 700, "the ring grows to 700 keeping order");
	ok(w.alloc <= 1000, "and never past its cap");
	window_free(&w);

	window_init(&w, 10 * SEC, 0);
	window_add(&w, T0, 1);
	is_int(w.len, 0, "a window of capacity 0 holds nothing");
	window_free(&w);
}

/* A hand-built request with two prefill chunks and five tokens. */
static void
test_request(void)
{
	struct reqtime	rt;
	struct reqtime_summary	s;
	uint64_t		g[5];

	reqtime_init(&rt, T0, 512);
	reqtime_admit(&rt, T0 + 5 * MS);
	reqtime_chunk(&rt, T0 + 10 * MS, T0 + 30 * MS, 256);
	reqtime_chunk(&rt, T0 + 40 * MS, T0 + 60 * MS, 256);
	g[0] = reqtime_token(&rt, T0 + 60 * MS);
	g[1] = reqtime_token(&rt, T0 + 80 * MS);
	g[2] = reqtime_token(&rt, T0 + 100 * MS);
	g[3] = reqtime_token(&rt, T0 + 130 * MS);
	g[4] = reqtime_token(&rt, T0 + 160 * MS);
	reqtime_admit(&rt, T0 + 150 * MS);	/* re-admission is ignored */
	reqtime_finish(&rt, T0 + 165 * MS);
	is_int(g[0], 0, "first token has no gap");
	ok(g[1] == 20 * MS && g[2] == 20 * MS && g[3] == 30 * MS &&
	    g[4] == 30 * MS, "token gaps 20, 20, 30, 30 ms");
	ok(rt.gaps_us[0] == 20000 && rt.gaps_us[3] == 30000,
	    "gaps kept in microseconds");
	reqtime_summary(&rt, &s);
	is_int(s.queue_ns, 5 * MS, "queue time 5 ms");
	is_int(s.prefill_ns, 55 * MS, "prompt processing 55 ms (admission to last chunk end)");
	is_int(s.prefill_busy_ns, 40 * MS, "prefill chunks busy 40 ms");
	is_int(s.ttft_ns, 60 * MS, "TTFT 60 ms");
	is_int(s.decode_ns, 100 * MS, "decode 100 ms");
	is_int(s.tpot_ns, 25 * MS, "TPOT (160 - 60) / 4 = 25 ms");
	is_int(s.e2e_ns, 165 * MS, "end to end 165 ms");
	is_int(s.tbt_max_ns, 30 * MS, "largest TBT 30 ms");
	is_int(s.prefill_tokens, 512, "512 prompt positions computed");
	is_int(s.output_tokens, 5, "5 output tokens");
	is_int(s.nchunks, 2, "2 chunks");
	near(s.prompt_tps, 512 / 0.055, 1e-6, "prompt 512 tokens / 55 ms");
	near(s.output_tps, 40, 1e-9, "output 4 tokens / 100 ms = 40 tokens/s");
	near(s.e2e_tps, 5 / 0.165, 1e-9, "end-to-end 5 tokens / 165 ms");
	reqtime_free(&rt);

	/* One token: no TPOT, no decode rate. */
	reqtime_init(&rt, T0, 3);
	reqtime_admit(&rt, T0);
	reqtime_chunk(&rt, T0, T0 + 2 * MS, 3);
	reqtime_token(&rt, T0 + 2 * MS);
	reqtime_finish(&rt, T0 + 2 * MS);
	reqtime_summary(&rt, &s);
	ok(s.tpot_ns == 0 && s.output_tps == 0, "one token: TPOT and output rate undefined (0)");
	is_int(s.queue_ns, 0, "admitted on arrival: queue 0");
	is_int(s.ttft_ns, 2 * MS, "TTFT 2 ms");
	reqtime_free(&rt);

	/* Cancelled while waiting. */
	reqtime_init(&rt, T0, 100);
	reqtime_finish(&rt, T0 + 9 * MS);
	reqtime_summary(&rt, &s);
	ok(s.queue_ns == 0 && s.prefill_ns == 0 && s.ttft_ns == 0,
	    "never admitted: queue, prefill and TTFT stay 0");
	is_int(s.e2e_ns, 9 * MS, "but end to end is 9 ms");
	reqtime_free(&rt);

	/* Many tokens: the gap array grows with the output only. */
	reqtime_init(&rt, T0, 1);
	for (int i = 0; i < 1000; i++)
		reqtime_token(&rt, T0 + (uint64_t)i * MS);
	is_int(rt.n_tokens, 1000, "1000 tokens");
	ok(rt.gaps_alloc >= 999 && rt.gaps_alloc <= 2 * 999, "gap array sized to the output");
	reqtime_summary(&rt, &s);
	is_int(s.tpot_ns, 1 * MS, "TPOT 1 ms");
	reqtime_free(&rt);
}

/* Find a row by name. */
static const struct stats_row *
row(const struct stats_row *rows, size_t n, const char *name)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (strcmp(rows[i].name, name) == 0)
			return (&rows[i]);
	return (NULL);
}

/* Run one synthetic request of 100 prompt tokens through an instance. */
static void
feed_request(struct inst_metrics *m, uint64_t at, uint64_t ttft,
    int ntok, uint64_t gap, enum finish_reason why)
{
	metrics_feed(m, at, 1 * MS, 100, ttft, ntok, gap, why);
}

/* Per-instance aggregates, window against since start, stats rows and rates. */
static void
test_instance(void)
{
	struct inst_metrics_config conf = { 10 * SEC, 4, 0 };
	struct inst_metrics	m;
	struct inst_snapshot	s;
	struct stats_row	rows[MET__COUNT + 2];
	const struct stats_row	*r;
	struct iter_sample	it;
	uint64_t		tbt[2] = { 20 * MS, 40 * MS };
	double			wp, wo, ap, ao;
	size_t			n;
	int			i;

	inst_metrics_init(&m, "tiny", T0, &conf);
	inst_snapshot_init(&s);

	/* Ten iterations, one a second, 100 prompt and 2 output tokens each. */
	for (i = 1; i <= 10; i++) {
		it = (struct iter_sample){ T0 + (uint64_t)i * SEC - 30 * MS,
		    T0 + (uint64_t)i * SEC, 100, 2, 3, 2, 0 };
		inst_metrics_iteration(&m, &it, tbt, 2);
	}
	feed_request(&m, T0 + 1 * SEC, 50 * MS, 3, 10 * MS, FINISH_EOS);
	feed_request(&m, T0 + 2 * SEC, 150 * MS, 5, 30 * MS, FINISH_LENGTH);
	feed_request(&m, T0 + 3 * SEC, 100 * MS, 1, 0, FINISH_CANCELLED);
	inst_metrics_count(&m, CNT_PREEMPTIONS, 2);
	inst_metrics_count(&m, CNT_POLICY_SWAPS, 1);
	inst_metrics_gauges(&m, 30, 70, 2, 5);

	inst_metrics_snapshot(&m, &s, T0 + 10 * SEC);
	is_str(s.name, "tiny", "snapshot carries the name");
	is_int(s.finished[FINISH_EOS], 1, "1 finished on eos");
	is_int(s.finished[FINISH_LENGTH], 1, "1 finished on length");
	is_int(s.finished[FINISH_CANCELLED], 1, "1 cancelled");
	is_int(s.counters[CNT_PREEMPTIONS], 2, "2 preemptions");
	is_int(s.counters[CNT_POLICY_SWAPS], 1, "1 policy swap");
	ok(s.kv_used == 30 && s.kv_free == 70 && s.running == 2 && s.waiting == 5,
	    "gauges copied");
	is_int(s.prompt_tokens, 1000, "1000 prompt tokens counted");
	is_int(s.output_tokens, 20, "20 output tokens counted");

	n = inst_stats_rows(&s, STATS_WINDOW, rows, MET__COUNT + 2);
	is_int(n, MET__COUNT, "one row per series");
	r = row(rows, n, "ttft");
	ok(r != NULL && r->count == 3, "window TTFT has 3 samples");
	if (r != NULL) {
		is_str(r->unit, "ms", "TTFT in ms");
		near(r->mean, 100, 1e-9, "window TTFT mean 100 ms");
		near(r->p50, 100, 1e-9, "window TTFT p50 100 ms (exact)");
		near(r->p90, 140, 1e-9, "window TTFT p90 140 ms (exact)");
		near(r->max, 150, 1e-9, "window TTFT max 150 ms");
	}
	r = row(rows, n, "tpot");
	ok(r != NULL && r->count == 2, "TPOT only for requests with 2+ tokens");
	if (r != NULL)
		near(r->mean, 20, 1e-9, "TPOT mean (10 + 30) / 2 ms");
	r = row(rows, n, "queue_time");
	ok(r != NULL && r->count == 3 && fabs(r->max - 1) < 1e-9, "queue time 1 ms each");
	r = row(rows, n, "output_tokens_per_s");
	ok(r != NULL && r->count == 2, "two output rates");
	if (r != NULL) {
		is_str(r->unit, "tok/s", "rates in tok/s");
		near(r->max, 100, 1e-3, "fastest request 100 tok/s");
	}
	/* The iteration windows hold 4 samples (cap) covering 4 s. */
	r = row(rows, n, "iteration_time");
	ok(r != NULL && r->count == 4 && r->truncated,
	    "iteration window capped at 4, and the row says so");
	ok(s.series[MET_ITER].wtruncated, "and says it was truncated");
	inst_snapshot_rates(&s, &wp, &wo, &ap, &ao);
	near(wp, 100, 1e-9, "window prompt rate: 400 tokens over the 4 s held");
	near(wo, 2, 1e-9, "window output rate: 8 tokens over 4 s");
	near(ap, 100, 1e-9, "since start prompt: 1000 tokens / 10 s");
	near(ao, 2, 1e-9, "since start output: 20 tokens / 10 s");
	r = row(rows, n, "tbt");
	ok(r != NULL && r->count == 20, "20 TBT samples in the window");
	if (r != NULL)
		near(r->p50, 30, 1e-9, "TBT p50 between 20 and 40 ms");

	n = inst_stats_rows(&s, STATS_SINCE_START, rows, MET__COUNT);
	r = row(rows, n, "iteration_time");
	ok(r != NULL && r->count == 10, "since start keeps all 10 iterations");
	if (r != NULL)
		near(r->mean, 30, 1e-9, "iteration mean 30 ms");

	/* 30 s later the window is empty but since start is not. */
	inst_metrics_snapshot(&m, &s, T0 + 40 * SEC);
	n = inst_stats_rows(&s, STATS_WINDOW, rows, MET__COUNT);
	r = row(rows, n, "ttft");
	ok(r != NULL && r->count == 0 && r->p99 == 0, "window TTFT expired");
	inst_snapshot_rates(&s, &wp, &wo, NULL, NULL);
	ok(wp == 0 && wo == 0, "window rates fall to 0 when idle");
	n = inst_stats_rows(&s, STATS_SINCE_START, rows, MET__COUNT);
	r = row(rows, n, "ttft");
	ok(r != NULL && r->count == 3, "since-start TTFT keeps 3");
	if (r != NULL)
		near(r->max, 150, 1e-9, "since-start max exact");

	/* Uptime shorter than the window: rates divide by the uptime. */
	inst_metrics_free(&m);
	inst_metrics_init(&m, "young", T0, NULL);
	it = (struct iter_sample){ T0, T0 + 1 * SEC, 500, 0, 1, 1, 0 };
	inst_metrics_iteration(&m, &it, NULL, 0);
	inst_metrics_snapshot(&m, &s, T0 + 2 * SEC);
	is_int(inst_snapshot_window_span(&s), 2 * SEC, "span is the 2 s uptime");
	inst_snapshot_rates(&s, &wp, &wo, NULL, NULL);
	near(wp, 250, 1e-9, "500 prompt tokens over 2 s");
	near(wo, 0.5, 1e-9, "1 output token over 2 s");
	is_str(s.name, "young", "snapshot reused for another instance");

	inst_snapshot_free(&s);
	inst_metrics_free(&m);
}

struct feeder {
	struct inst_metrics	*m;
	int			 n;
};

/* Engine-like thread: record iterations as fast as it can. */
static void *
feeder_main(void *arg)
{
	struct feeder		*f = arg;
	struct iter_sample	 it;
	uint64_t		 tbt = 1 * MS;
	int			 i;

	for (i = 0; i < f->n; i++) {
		it = (struct iter_sample){ T0 + (uint64_t)i * MS,
		    T0 + (uint64_t)(i + 1) * MS, 1, 1, 1, 1, 0 };
		inst_metrics_iteration(f->m, &it, &tbt, 1);
	}
	return (NULL);
}

/* One thread records while another snapshots: totals must add up. */
static void
test_threads(void)
{
	struct inst_metrics	m;
	struct inst_snapshot	s;
	struct feeder		f;
	pthread_t		th;
	int			i, sane = 1;

	inst_metrics_init(&m, "busy", T0, NULL);
	inst_snapshot_init(&s);
	f.m = &m;
	f.n = 20000;
	pthread_create(&th, NULL, feeder_main, &f);
	for (i = 0; i < 200; i++) {
		inst_metrics_snapshot(&m, &s, T0 + 1 * MS);
		if (s.series[MET_ITER].total.count != s.iterations ||
		    s.series[MET_TBT].total.count != s.iterations)
			sane = 0;
	}
	pthread_join(th, NULL);
	inst_metrics_snapshot(&m, &s, T0 + 20001 * MS);
	ok(sane, "every snapshot is consistent");
	is_int(s.iterations, 20000, "all 20000 iterations recorded");
	is_int(s.series[MET_TBT].total.count, 20000, "and their TBT samples");
	inst_snapshot_free(&s);
	inst_metrics_free(&m);
}

int
main(void)
{
	test_percentiles();
	test_buckets();
	test_hist();
	test_window();
	test_request();
	test_instance();
	test_threads();
	done_testing();
}
