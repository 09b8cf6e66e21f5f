/* bench.h: phasectl bench's options, requests and run, shared by its files. */
#ifndef PHASECTL_BENCH_H
#define PHASECTL_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "phasectl.h"

#define B_MAX_INFLIGHT	4096	/* requests in flight at once */
#define B_MAX_TOKENS	(1U << 20)
#define B_FRAMES_PER_FD	64	/* frames read from one fd per poll round */

enum b_mode { BM_CONCURRENCY, BM_RATE, BM_INTERFERENCE, BM_MULTITURN };
enum b_kind { BK_NORMAL, BK_CHAT, BK_LONG, BK_TURN };

#define B_MAX_CONVS	256	/* multiturn conversations */
#define B_MAX_TURNS	64	/* turns per conversation */

/* A length given as N or A-B (uniform). */
struct b_range {
	uint32_t	lo, hi;
};

struct b_opts {
	const char	*model;
	enum b_mode	 mode;
	double		 rate;		/* requests/s */
	double		 burstiness;	/* gamma shape; 1 is Poisson */
	uint32_t	 concurrency;
	uint32_t	 requests;	/* 0: by duration */
	double		 duration;	/* seconds; 0: by count */
	struct b_range	 prompt_len;
	struct b_range	 output_len;
	const char	*lengths_file;
	uint64_t	 seed;
	double		 slo_ttft_ms;	/* 0: none */
	double		 slo_tbt_ms;
	const char	*model_file;
	const char	*timeline;
	int		 quiet;
	uint32_t	 chats;
	uint32_t	 chat_output;
	uint32_t	 chat_prompt_len;
	uint32_t	 long_prompt_len;
	uint32_t	 long_output;
	double		 long_every;
	uint32_t	 long_count;
	const char	*url;		/* an OpenAI-compatible server */
	uint32_t	 conversations;	/* multiturn */
	uint32_t	 turns;
};

/* One request and everything measured about it. */
struct b_req {
	enum b_kind	 kind;
	uint32_t	 stream;	/* chat stream or long prompt index */
	uint32_t	 prompt_len;
	uint32_t	 output_len;
	double		 arrival_s;	/* planned send time (open loop) */
	struct phased_conn *conn;
	struct bh_conn	*http;		/* --url */
	uint64_t	 id;
	int		 done;
	int		 cancelled;	/* by the bench, at the end of a scenario */
	uint64_t	 send_ns;	/* since the start of the run */
	uint64_t	 done_ns;
	uint64_t	*tok_ns;	/* client time of each token */
	uint64_t	*tok_us;	/* daemon t_us of each token */
	size_t		 n_tok, cap_tok;
	char		*finish;	/* finish reason, or "error" */
	char		*error;
	uint32_t	 d_prompt_tokens;	/* the daemon's Timings */
	uint32_t	 d_output_tokens;
	double		 d_queue_ms, d_prompt_ms, d_ttft_ms, d_e2e_ms;
	uint32_t	 d_cached_tokens;	/* from the prefix cache */
	/* A multiturn turn: its prompt (the history) and its answer. */
	uint32_t	 turn;
	int32_t		*ids;
	int32_t		*out_ids;
};

/* The run. */
struct bench {
	struct ctl	*ctl;
	struct b_opts	*o;
	uint64_t	 rng;
	int32_t		*corpus;	/* prompt token stream */
	size_t		 n_corpus;
	int		 from_text;	/* corpus is tokenized text */
	uint32_t	 n_vocab;
	struct b_range	*lengths;	/* --lengths-file: prompt lo, output hi */
	size_t		 n_lengths;
	struct b_req	**reqs;
	size_t		 n_reqs, cap_reqs;
	struct phased_conn **idle;	/* connections free for reuse */
	size_t		 n_idle;
	struct b_req	*inflight[B_MAX_INFLIGHT];
	size_t		 n_inflight;
	uint64_t	 t0;
	uint64_t	 end_ns;	/* last Done */
	int		 chat_busy[256];
	uint32_t	 longs_sent, longs_done;
	int		 chats_cancelled;
	uint64_t	 out_tokens;	/* for the progress line */
	int		 aborted;
	/* multiturn: each conversation's history and turns sent */
	int32_t		*conv_hist[B_MAX_CONVS];
	uint32_t	 conv_len[B_MAX_CONVS];
	uint32_t	 conv_turns[B_MAX_CONVS];
};

/* The sample series the report gives, in its order. */
enum b_series {
	BS_TTFT, BS_TBT, BS_TPOT, BS_E2E, BS_DAEMON_TTFT, BS_DAEMON_TBT,
	BS_DAEMON_QUEUE,
	BS_CHAT_TBT, BS_CHAT_TTFT, BS_CHAT_GAP, BS_LONG_TTFT,	/* interference */
	BS__COUNT
};
#define BS__PLAIN	BS_CHAT_TBT	/* series every mode reports */

/* Summary statistics of a sample. */
struct b_stat {
	size_t	n;
	double	mean, p50, p90, p99, max, min;
};

#define B_MAX_REASONS	16

/* Everything the report prints, aggregated once from the requests. */
struct b_summary {
	const char	*mode;		/* concurrency, poisson, gamma, interference */
	size_t		 requests, ok, errors, good, n_long;
	const char	*reasons[B_MAX_REASONS];	/* finish reasons seen */
	size_t		 counts[B_MAX_REASONS];
	size_t		 n_reasons;
	uint64_t	 prompt_tokens, output_tokens;
	double		 duration_s;
	struct b_stat	 stat[BS__COUNT];
	/* multiturn: per turn, TTFT and mean prompt and cached tokens */
	uint64_t	 cached_tokens;
	struct b_stat	 turn_ttft[B_MAX_TURNS];
	double		 turn_prompt[B_MAX_TURNS], turn_cached[B_MAX_TURNS];
};
extern const char *const b_series_names[BS__COUNT];

/* bench_opts.c: the command line and --lengths-file. */
int		 b_parse(int argc, char **argv, struct b_opts *);
int		 b_read_lengths(struct bench *, const char *path);

/* bench_workload.c: random draws, prompts, arrivals and request records. */
uint64_t	 b_rand(struct bench *);
int		 b_model_info(struct bench *, char **path);
void		 b_corpus(struct bench *, const char *path, size_t want);
struct b_req	*b_new(struct bench *, enum b_kind, uint32_t stream,
		    uint32_t plen, uint32_t olen);
struct b_req	*b_new_normal(struct bench *);
double		 b_next_arrival(struct bench *, double prev);

/* bench_run.c: the poll loop that sends, reads and times the requests. */
void		 b_run(struct bench *);
void		 b_progress(struct bench *, double now_s);

/* bench_stats.c: the samples and their statistics. */
int		 b_ok(const struct b_req *);
void		 b_summarize(struct bench *, struct b_summary *);

/* bench_report.c: the report, as text or JSON, and the timeline file. */
int		 b_report(struct bench *, const struct b_summary *);
int		 b_timeline(struct bench *, const char *path);

#endif
