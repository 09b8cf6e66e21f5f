/* trace.h: a bounded record of engine iterations, written as a Chrome trace. */
#ifndef PHASED_TRACE_H
#define PHASED_TRACE_H

#include <pthread.h>
#include <stdint.h>

struct strbuf;
struct reqwait;
struct wait_iter;

#define TRACE_POLICY_MAX	48
#define TRACE_MAXCAP		(1U << 22)
#define TRACE_ITER_PREFILLS	8

/* One engine iteration as the trace keeps it. */
struct trace_iter {
	uint64_t	 start;			/* monotonic ns */
	uint64_t	 dur;			/* ns */
	uint32_t	 prefill_tokens;
	uint32_t	 decode_tokens;
	uint32_t	 nreqs;
	int32_t		 group;			/* device group: the tid */
	uint64_t	 seq;			/* set by trace_append */
	char		 policy[TRACE_POLICY_MAX];
	uint32_t	 nprefills;		/* requests prefilling in it */
	uint64_t	 prefill_ids[TRACE_ITER_PREFILLS]; /* the first of them */
};

/* A request whose prefill shared an iteration with a span's request. */
#define TRACE_SPAN_BLAME	3
struct trace_blame {
	uint64_t	 id;
	uint32_t	 tokens;	/* its prompt tokens in that iteration */
};

/*
 * One interval of one request's life given to one wait cause (wait.h),
 * as the wait accounting handed it out.
 */
struct trace_span {
	uint64_t	 req;
	uint64_t	 start;		/* monotonic ns */
	uint64_t	 dur;		/* ns */
	uint64_t	 iter_start;	/* its iteration's start; 0: between */
	int32_t		 group;		/* -1: none */
	uint16_t	 cause;		/* enum wait_cause */
	uint16_t	 nblamed;
	uint32_t	 tokens;	/* own prefill: its tokens; others': theirs */
	uint32_t	 nothers;	/* others' prefill: how many requests */
	struct trace_blame blamed[TRACE_SPAN_BLAME];	/* most tokens first */
};
#define TRACE_SPANS_PER_ITER	4

/*
 * A ring of the last `cap' iterations appended while a capture runs (a
 * flight recorder: when full, the oldest are overwritten and counted in
 * `dropped').  Several engine threads may share one trace; each appends
 * with its device group, which becomes the thread row in the viewer.
 * trace_active() is a lock-free check for the engine's hot path.
 */
struct trace {
	pthread_mutex_t	 lock;
	struct trace_iter *ring;
	uint32_t	 cap;
	uint32_t	 head;
	uint32_t	 len;
	uint64_t	 seq;		/* iterations appended since start */
	uint64_t	 dropped;
	/* Request intervals: a second ring, made at the first start. */
	struct trace_span *spans;
	uint32_t	 scap;		/* cap * TRACE_SPANS_PER_ITER */
	uint32_t	 shead;
	uint32_t	 slen;
	uint64_t	 sseq;
	uint64_t	 sdropped;
	uint64_t	 started;	/* ns, 0 when never started */
	uint64_t	 stopped;	/* ns, 0 while running */
	int		 active;	/* read and written atomically */
};

/* Set up a trace of cap records (1 .. TRACE_MAXCAP); -1 and *cause if not. */
int	 trace_init(struct trace *, uint32_t cap, char **cause);
void	 trace_free(struct trace *);
/* Forget what was recorded and start capturing. */
void	 trace_start(struct trace *, uint64_t now);
/* Stop capturing; the records stay until the next start. */
void	 trace_stop(struct trace *, uint64_t now);
int	 trace_active(struct trace *);
/*
 * Record one iteration if a capture runs.  it->seq is ignored.  The
 * policy name is copied, since a swapped-out policy may be unloaded before
 * the trace is written; one that fills the whole array without a NUL is cut
 * to TRACE_POLICY_MAX - 1 bytes at a UTF-8 character boundary.
 */
void	 trace_append(struct trace *, const struct trace_iter *it);
/* Number of iterations held. */
uint32_t trace_len(struct trace *);
/*
 * Record, if a capture runs, the intervals of request `req' that its last
 * reqwait_* call accounted (reqwait.last).  `it' is the iteration when
 * that call was reqwait_iteration(), else NULL; its prefill entries other
 * than req's become the blamed requests of the others'-prefill interval.
 */
void	 trace_wait(struct trace *, uint64_t req, int32_t group,
	    const struct reqwait *, const struct wait_iter *it);

/*
 * Append the held iterations as Chrome trace-event JSON (the object form:
 * {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}}), which
 * chrome://tracing and Perfetto open.  Each iteration is one complete
 * event ("ph":"X") named prefill, decode, mixed or idle after its batch,
 * with ts and dur in microseconds of CLOCK_MONOTONIC, pid 1, tid the device
 * group and args holding the composition, the policy and the ids of the
 * requests that prefilled in it (prefill_requests); metadata events
 * ("ph":"M") name the process and each group's thread.  Request intervals
 * are complete events of pid 2 ("requests"), one thread row per request
 * (tid: the request id), named after their wait cause (category "wait");
 * an others'-prefill interval names in args.blamed the requests whose
 * prompt tokens shared the iteration, and a flow arrow ("ph":"s" on the
 * blamed request's row at its prefill, "ph":"f" on the delayed one's)
 * joins each to the interval it stretched.
 */
void	 trace_write(struct trace *, struct strbuf *, const char *process_name);

#endif
