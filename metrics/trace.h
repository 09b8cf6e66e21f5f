/* trace.h: a bounded record of engine iterations, written as a Chrome trace. */
#ifndef PHASED_TRACE_H
#define PHASED_TRACE_H

#include <pthread.h>
#include <stdint.h>

struct strbuf;

#define TRACE_POLICY_MAX	48
#define TRACE_MAXCAP		(1U << 22)

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
};

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
 * Append the held iterations as Chrome trace-event JSON (the object form:
 * {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}}), which
 * chrome://tracing and Perfetto open.  Each iteration is one complete
 * event ("ph":"X") named prefill, decode, mixed or idle after its batch,
 * with ts and dur in microseconds of CLOCK_MONOTONIC, pid 1, tid the device
 * group and args holding the composition and the policy; metadata events
 * ("ph":"M") name the process and each group's thread.
 */
void	 trace_write(struct trace *, struct strbuf *, const char *process_name);

#endif
