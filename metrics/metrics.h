/* metrics.h: request timing, histograms, windows and per-instance stats. */
#ifndef PHASED_METRICS_H
#define PHASED_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "finish_reason.h"
#include "percentile.h"
#include "wait.h"

/*
 * phased measures the two phases of generation separately (prompt
 * processing and decode), so this module keeps, per model instance:
 *
 *   queue     admission - arrival
 *   prefill   prompt processing time: last prefill chunk end - admission
 *   ttft      first token - arrival
 *   tbt       every gap between two consecutive tokens of a request
 *   tpot      per request: (last token - first token) / (tokens - 1)
 *   e2e       finish - arrival
 *   iteration duration and composition (prefill tokens, decode tokens,
 *             sequences, tokens sampled) of every engine iteration
 *   per-request prompt tokens/s (prompt tokens / prefill) and output
 *             tokens/s ((tokens - 1) / (last token - first token) = 1/tpot)
 *
 * All times are CLOCK_MONOTONIC nanoseconds (now_ns()); every recording
 * function takes the timestamp from its caller so that tests can inject
 * synthetic time.  A timestamp of 0 means "not happened yet", so real ones
 * are never 0.
 *
 * How the engine thread uses it, per request and per iteration:
 *
 *	reqtime_init(&r->timing, arrival, prompt_tokens);	on submit
 *	reqtime_admit(&r->timing, now);			first KV blocks
 *	reqtime_chunk(&r->timing, start, end, tokens);	each prefill chunk
 *	gap = reqtime_token(&r->timing, now);		each token sampled
 *	  collect gap (when not the first token) for the iteration's TBT list;
 *	  after the first: inst_metrics_first_token(m, &r->timing);
 *	reqtime_preempt() + inst_metrics_count(m, CNT_PREEMPTIONS, 1);
 *	inst_metrics_iteration(m, &iter_sample, gaps, ngaps);	end of iteration
 *	inst_metrics_gauges(m, kv_used, kv_free, running, waiting);
 *	reqtime_finish(&r->timing, now);
 *	inst_metrics_finished(m, &r->timing, reason);		finish or cancel
 *	reqtime_summary(&r->timing, &sum);			reply to client
 *	reqtime_free(&r->timing);
 *
 * A gap that spans a preemption is kept as it is: the user waited that long.
 * The control thread calls inst_metrics_snapshot() and then
 * inst_stats_rows(), inst_snapshot_rates() or prom_write() on the copy.
 *
 * Each series keeps two views:
 *   since start  a fixed-bucket histogram (count, sum, min, max and counts
 *                per log-spaced bucket); its percentiles are estimated by
 *                linear interpolation inside the bucket that holds the rank
 *                (the Prometheus histogram_quantile method, clamped to the
 *                observed min and max), so they are accurate to one bucket
 *                width (about 26% of the value for latencies);
 *   window       the samples of the last window_ns (default 60 s) in a ring
 *                of timestamped samples bounded in count; its percentiles
 *                are exact.  When the ring is full the oldest samples drop
 *                first, so the window is "the last window_ns or the last
 *                cap samples, whichever is fewer" (window_truncated says
 *                when that happened).
 *
 * Percentile definition (exact, window): percentile_sorted() in
 * lib/percentile.h, linear interpolation between the closest ranks.
 */

/* --- Histogram ---------------------------------------------------------- */

#define HIST_MAXBOUNDS	96

/*
 * Bucket layout: increasing inclusive upper bounds (a value v lands in the
 * first bucket with v <= bound) in integer units, plus an overflow bucket.
 * `scale' turns a unit into the exported unit (ns -> s for Prometheus),
 * `display' into the unit of stats rows (ns -> ms).
 */
struct hist_layout {
	const char	*name;
	const uint64_t	*bounds;
	int		 nbounds;
	double		 scale;		/* unit -> exported unit */
	const char	*export_unit;	/* "seconds", "tokens", ... */
	double		 display;	/* unit -> stats row unit */
	const char	*display_unit;	/* "ms", "tokens", "tok/s" */
	/* Whether bound i is exported to Prometheus (NULL: all are). */
	int		(*exported)(uint64_t bound);
};

/* Latencies in ns: 10 steps per decade (Renard R10), 10 us to 100 s. */
extern const struct hist_layout hist_layout_ns;
/* Token and sequence counts: powers of two, 1 to 1048576. */
extern const struct hist_layout hist_layout_count;
/* Rates in milli-tokens/s: R10, 0.1 to 10^6 tokens/s. */
extern const struct hist_layout hist_layout_rate;
/*
 * Shares of a whole in millionths (ppm, rounded), exported as fractions:
 * 0, 0.01, 0.02, 0.05, 0.1, 0.2 .. 0.9 by 0.1, 0.95, 0.99 and 1, so the
 * first bucket counts the requests a cause never touched.
 */
extern const struct hist_layout hist_layout_share;

struct hist {
	const struct hist_layout *layout;
	uint64_t	 counts[HIST_MAXBOUNDS + 1];	/* last: overflow */
	uint64_t	 count;
	uint64_t	 sum;		/* saturates at UINT64_MAX */
	uint64_t	 min;		/* UINT64_MAX while empty */
	uint64_t	 max;
};

void	 hist_init(struct hist *, const struct hist_layout *);
void	 hist_add(struct hist *, uint64_t);
/* Bucket index of a value: 0..nbounds (nbounds is the overflow bucket). */
int	 hist_bucket(const struct hist_layout *, uint64_t);
/* Estimated percentile (p in [0, 100]) in layout units; 0 when empty. */
double	 hist_percentile(const struct hist *, double p);
double	 hist_mean(const struct hist *);

/* Sort values in place, ascending. */
void	 sort_u64(uint64_t *, size_t n);

/* --- Sliding window ----------------------------------------------------- */

struct wsample {
	uint64_t	 t;	/* monotonic ns */
	uint64_t	 v;
};

/*
 * Samples of the last span_ns, oldest first, at most cap of them.  The ring
 * grows by doubling up to cap, so an idle instance costs little.  Samples
 * must be added in non-decreasing time order; an earlier stamp is taken as
 * the newest one already held.  sum is the running sum of the held values.
 */
struct window {
	uint64_t	 span_ns;
	uint32_t	 cap;
	uint32_t	 alloc;
	uint32_t	 head;
	uint32_t	 len;
	struct wsample	*ring;
	uint64_t	 sum;
	uint64_t	 last_t;
	uint64_t	 evicted;	/* dropped for capacity, not age */
	uint64_t	 evicted_t;	/* stamp of the last one so dropped */
};

void	 window_init(struct window *, uint64_t span_ns, uint32_t cap);
void	 window_free(struct window *);
void	 window_add(struct window *, uint64_t t, uint64_t v);
/* Drop samples with t <= now - span_ns. */
void	 window_expire(struct window *, uint64_t now);
/* Copy the held values, oldest first, into out (room for w->len). */
void	 window_values(const struct window *, uint64_t *out);
/* Whether samples inside the span were dropped for capacity. */
int	 window_truncated(const struct window *, uint64_t now);

/* --- Per-request timing ------------------------------------------------- */

struct prefill_chunk {
	uint64_t	 start;
	uint64_t	 end;
	uint32_t	 tokens;
};

/*
 * The timeline of one request, kept by the engine thread alone.  Memory
 * grows with the request's own work only: one chunk record per prefill
 * chunk and 4 bytes per output token (the TBT gaps, in microseconds,
 * saturating at about 71 minutes).
 */
struct reqtime {
	uint64_t	 arrival;
	uint64_t	 admitted;	/* first admission; 0 until admitted */
	uint64_t	 first_token;	/* 0 until the first token */
	uint64_t	 last_token;
	uint64_t	 finished;	/* 0 until finished */
	uint32_t	 prompt_tokens;
	uint32_t	 n_tokens;	/* output tokens produced */
	uint32_t	 preemptions;

	struct prefill_chunk *chunks;
	uint32_t	 nchunks;
	uint32_t	 chunks_alloc;

	uint32_t	*gaps_us;	/* n_tokens - 1 gaps */
	uint32_t	 gaps_alloc;

	struct reqwait	 wait;		/* who made it wait (wait.h) */
};

/* Derived figures; times in ns, rates in tokens/s, 0 when undefined. */
struct reqtime_summary {
	uint64_t	 queue_ns;	/* admitted - arrival */
	uint64_t	 prefill_ns;	/* last chunk end - admitted */
	uint64_t	 prefill_busy_ns; /* sum of chunk durations */
	uint64_t	 ttft_ns;	/* first token - arrival */
	uint64_t	 tpot_ns;	/* decode_ns / (n - 1), n >= 2 */
	uint64_t	 decode_ns;	/* last token - first token */
	uint64_t	 e2e_ns;	/* finished - arrival */
	uint64_t	 tbt_max_ns;	/* largest gap */
	uint32_t	 prompt_tokens;
	uint32_t	 prefill_tokens; /* computed, recomputation included */
	uint32_t	 output_tokens;
	uint32_t	 nchunks;
	uint32_t	 preemptions;
	double		 prompt_tps;	/* prompt_tokens / prefill_ns */
	double		 output_tps;	/* (n - 1) / decode_ns = 1 / tpot */
	double		 e2e_tps;	/* output_tokens / e2e_ns */
	uint64_t	 wait_ns[WAIT__COUNT];	/* sums to e2e_ns once finished */
	struct wait_blame blamed[WAIT_BLAME_MAX]; /* largest first */
	uint32_t	 nblamed;
};

void	 reqtime_init(struct reqtime *, uint64_t arrival,
	    uint32_t prompt_tokens);
void	 reqtime_free(struct reqtime *);
/* The request got its first KV blocks; later re-admissions are ignored. */
void	 reqtime_admit(struct reqtime *, uint64_t now);
void	 reqtime_chunk(struct reqtime *, uint64_t start, uint64_t end,
	    uint32_t tokens);
/* A token was sampled at `now'; returns the gap to the last (0 if first). */
uint64_t reqtime_token(struct reqtime *, uint64_t now);
void	 reqtime_preempt(struct reqtime *);
void	 reqtime_finish(struct reqtime *, uint64_t now);
void	 reqtime_summary(const struct reqtime *, struct reqtime_summary *);

/* --- Per-instance aggregates -------------------------------------------- */

enum metric_id {
	MET_QUEUE,		/* ns, at the first token */
	MET_PREFILL,		/* ns, at the first token */
	MET_TTFT,		/* ns, at the first token */
	MET_TBT,		/* ns, per token after the first */
	MET_TPOT,		/* ns, at finish, requests with >= 2 tokens */
	MET_E2E,		/* ns, at finish */
	MET_PROMPT_TPS,		/* milli-tokens/s per request, at first token */
	MET_OUTPUT_TPS,		/* milli-tokens/s per request, at finish */
	MET_ITER,		/* ns, per iteration */
	MET_ITER_PREFILL,	/* prompt tokens computed per iteration */
	MET_ITER_DECODE,	/* decode tokens computed per iteration */
	MET_ITER_SEQS,		/* sequences per iteration */
	MET_ITER_OUT,		/* tokens sampled per iteration */
	MET__COUNT
};

struct metric_info {
	const char		*name;		/* stats row name */
	const char		*help;
	const struct hist_layout *layout;
};
extern const struct metric_info metric_info[MET__COUNT];

enum metric_counter {
	CNT_PREEMPTIONS,
	CNT_PLAN_ERRORS,	/* policy plans the engine rejected */
	CNT_POLICY_SWAPS,
	CNT_POLICY_EJECTIONS,	/* policies ended: late, crashed, invalid plans */
	CNT_PREFIX_QUERIES,	/* admissions that asked the prefix cache */
	CNT_PREFIX_HIT_TOKENS,	/* prompt tokens it supplied */
	CNT_PREFIX_EVICTIONS,	/* cached blocks given to new content (set) */
	CNT_PREFIX_BLOCKS_CACHED, /* blocks holding a cached prefix (a gauge) */
	CNT_POLICY_CHUNK_TOKENS, /* prefill chunk the policy allowed (gauge) */
	CNT_POLICY_TARGET_US,	/* iteration time it aimed under (gauge) */
	CNT_POLICY_PREDICTED_US, /* its forecast of the last iteration (gauge) */
	CNT_ITER_MEASURED_US,	/* what the last iteration took (gauge) */
	CNT_KV_TRANSFERS,	/* KV moves between device groups */
	CNT_KV_TRANSFER_BYTES,	/* bytes of KV blocks they moved */
	CNT_KV_TRANSFER_NS,	/* their time, from queued to seen done */
	CNT_LEND_ITERATIONS,	/* iterations run with another group's cores */
	CNT_CORES_LENT,		/* borrowed threads, summed over them */
	CNT_KV_TRANSFERS_ASYNC,	/* moves that ran beside compute */
	CNT_KV_TRANSFER_QUEUE_NS, /* host time spent starting moves */
	CNT__COUNT
};

/* What the engine reports once per iteration. */
struct iter_sample {
	uint64_t	 start;
	uint64_t	 end;
	uint32_t	 prefill_tokens;	/* prompt positions computed */
	uint32_t	 decode_tokens;		/* decode positions computed */
	uint32_t	 nseqs;			/* sequences in the batch */
	uint32_t	 out_tokens;		/* tokens sampled and emitted */
	uint64_t	 decode_others_ns;	/* others' prefill share of the
						   decoding requests' steps */
};

struct inst_metrics_config {
	uint64_t	 window_ns;	/* default 60 s */
	uint32_t	 window_cap;	/* samples per window, default 8192 */
	uint32_t	 tbt_window_cap; /* for TBT, default 131072 */
};

struct inst_series {
	struct hist	 total;
	struct window	 win;
};

/*
 * The aggregates of one model instance.  The engine thread records, other
 * threads read through inst_metrics_snapshot(); a mutex guards everything
 * (taken once per iteration and once per request event).
 */
struct inst_metrics {
	pthread_mutex_t	 lock;
	char		*name;
	uint64_t	 created;
	uint64_t	 window_ns;
	struct inst_series series[MET__COUNT];
	uint64_t	 finished[FINISH__COUNT];
	uint64_t	 counters[CNT__COUNT];
	uint64_t	 prompt_tokens;		/* computed by iterations */
	uint64_t	 output_tokens;		/* sampled by iterations */
	uint64_t	 iterations;
	uint64_t	 kv_used, kv_free, running, waiting;
	uint64_t	 wait_ns[WAIT__COUNT];	/* finished requests' shares */
	/* Each cause's share of each finished request's e2e (ppm). */
	struct hist	 wait_share[WAIT__COUNT];
	/*
	 * Per iteration, over the window: others' prefill time given to the
	 * requests that were decoding, and the time between tokens of the
	 * tokens it sampled; their ratio is the share of decode latency
	 * others' prefill caused.
	 */
	struct window	 decode_others;
	struct window	 decode_gaps;
};

void	 inst_metrics_init(struct inst_metrics *, const char *name,
	    uint64_t now, const struct inst_metrics_config *);
void	 inst_metrics_free(struct inst_metrics *);
/* One engine iteration and the TBT gaps (ns) of the tokens it sampled. */
void	 inst_metrics_iteration(struct inst_metrics *,
	    const struct iter_sample *, const uint64_t *tbt_ns, size_t ntbt);
/* A request has its first token: records queue, prefill, TTFT, prompt tok/s. */
void	 inst_metrics_first_token(struct inst_metrics *,
	    const struct reqtime *);
/* A request finished (records TPOT, e2e, output tokens/s and the reason). */
void	 inst_metrics_finished(struct inst_metrics *, const struct reqtime *,
	    enum finish_reason);
void	 inst_metrics_count(struct inst_metrics *, enum metric_counter,
	    uint64_t);
/* Set a counter kept elsewhere (or a gauge in the counter table). */
void	 inst_metrics_set(struct inst_metrics *, enum metric_counter,
	    uint64_t);
void	 inst_metrics_gauges(struct inst_metrics *, uint64_t kv_used,
	    uint64_t kv_free, uint64_t running, uint64_t waiting);

/* --- Snapshots and reports ---------------------------------------------- */

/*
 * A consistent copy of an instance's aggregates, taken under its lock at
 * time `taken', with the window values sorted.  Readers work on snapshots
 * so the engine waits only for the copy, never for a sort or a write.
 */
struct inst_snapshot {
	char		*name;
	uint64_t	 created;
	uint64_t	 taken;
	uint64_t	 window_ns;
	struct {
		struct hist	 total;
		uint64_t	*wvals;		/* sorted ascending */
		size_t		 wlen;
		size_t		 walloc;
		uint64_t	 wsum;
		uint64_t	 wspan;		/* ns the held samples cover */
		int		 wtruncated;
	} series[MET__COUNT];
	uint64_t	 finished[FINISH__COUNT];
	uint64_t	 counters[CNT__COUNT];
	uint64_t	 prompt_tokens;
	uint64_t	 output_tokens;
	uint64_t	 iterations;
	uint64_t	 kv_used, kv_free, running, waiting;
	uint64_t	 wait_ns[WAIT__COUNT];	/* finished requests' shares */
	struct hist	 wait_share[WAIT__COUNT];
	uint64_t	 decode_others_ns;	/* summed over the window */
	uint64_t	 decode_gaps_ns;
};

void	 inst_snapshot_init(struct inst_snapshot *);
void	 inst_snapshot_free(struct inst_snapshot *);
/* Expire src's windows at `now' and copy src into dst (reusing its memory). */
void	 inst_metrics_snapshot(struct inst_metrics *src,
	    struct inst_snapshot *dst, uint64_t now);

/* The span the window rates divide by: window_ns, or the uptime if shorter. */
uint64_t inst_snapshot_window_span(const struct inst_snapshot *);
/* Share of decode latency over the window due to others' prefill (0..1). */
double	 inst_snapshot_decode_others_share(const struct inst_snapshot *);
/* Prompt and output tokens/s: over the window, and since start. */
void	 inst_snapshot_rates(const struct inst_snapshot *, double *win_prompt,
	    double *win_output, double *all_prompt, double *all_output);

/*
 * One line of `phasectl stats': a series over the window or since start, in
 * the display unit of its layout (ms, tokens, tokens/s).  For the window the
 * figures are exact; since start the percentiles come from the buckets.
 */
struct stats_row {
	const char	*name;		/* static */
	const char	*unit;		/* static */
	uint64_t	 count;
	double		 mean;
	double		 p50;
	double		 p90;
	double		 p99;
	double		 max;
	int		 truncated;	/* window hit its sample cap */
};

enum stats_span {
	STATS_WINDOW,
	STATS_SINCE_START
};

/* Fill up to n rows (one per series, MET__COUNT in all); returns how many. */
size_t	 inst_stats_rows(const struct inst_snapshot *, enum stats_span,
	    struct stats_row *, size_t n);

#endif
