/* wait.h: per-request wait attribution, who made a request wait. */
#ifndef PHASED_WAIT_H
#define PHASED_WAIT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Every nanosecond of a request's life, from arrival to finish, is given
 * to exactly one cause, so the shares add up to its end-to-end time by
 * construction.  The engine thread feeds two kinds of event:
 *
 *   reqwait_gap()        the request changes what it waits for between
 *                        iterations (preempted, KV being moved to another
 *                        group); the time since the last event goes to the
 *                        cause it waited for until now
 *   reqwait_iteration()  an iteration the request was part of ended: the
 *                        time before its start goes to the pending gap
 *                        cause; its measured duration is split between the
 *                        request's own work and the prefill tokens of the
 *                        other requests in the batch, in the proportion the
 *                        instance's iteration cost model gives
 *
 * The cost model is a least-squares fit of iteration time on prefill and
 * decode tokens, t = a + b * prefill + c * decode, over every iteration the
 * instance ran.  Others' share of an iteration of measured length D with P
 * prefill tokens, Po of them other requests', and K decode tokens is
 * D * b * Po / (a + b * P + c * K): the model says which part of the cost
 * their tokens added, the measurement how long it really was.  Until the
 * fit is defined (three iterations of different composition) every token
 * costs the same and the fixed cost is nothing.
 *
 * The request's own share is its prefill (or recomputation after a
 * preemption) or its decode step.  Between iterations the request waits
 * for the engine (planning, sampling) or for an iteration it is not part
 * of: that is "scheduling".  "client" exists for output backpressure; the
 * engine hands tokens to the control thread's queue without ever waiting
 * for a client, so it stays 0.
 */
enum wait_cause {
	WAIT_QUEUED,		/* arrival to first admission */
	WAIT_PREFILL,		/* own prompt processing */
	WAIT_DECODE,		/* own decode steps */
	WAIT_OTHERS_PREFILL,	/* other requests' prompt tokens in its batch */
	WAIT_PREEMPTED,		/* preempted, then recomputing */
	WAIT_KV_TRANSFER,	/* KV moved to another group, until it runs */
	WAIT_CLIENT,		/* output backpressure */
	WAIT_SCHEDULING,	/* admitted, between its iterations */
	WAIT__COUNT
};
extern const char *const wait_cause_names[WAIT__COUNT];

/* The requests whose prefill stretched this one's iterations the most. */
#define WAIT_BLAME_MAX	4
struct wait_blame {
	uint64_t	 id;		/* 0: unused */
	uint64_t	 ns;
};

/*
 * One interval given to one cause.  Each reqwait_* call keeps the
 * intervals it accounted (at most: the pending gap, the request's own
 * work, others' prefill) in `last', in time order, so that a trace can
 * draw the request's timeline without a timeline of its own.  Within an
 * iteration the own part comes first, then others' share: the split is
 * an attribution of the iteration's length, not two things in sequence.
 */
struct wait_seg {
	uint64_t	 start;
	uint64_t	 end;
	int		 cause;		/* enum wait_cause */
};
#define WAIT_LAST_MAX	3

struct reqwait {
	uint64_t	 cursor;	/* everything before is accounted */
	int		 gap;		/* enum wait_cause of the pending gap */
	uint64_t	 ns[WAIT__COUNT];
	struct wait_blame blame[WAIT_BLAME_MAX];
	struct wait_seg	 last[WAIT_LAST_MAX];	/* what the last call gave */
	int		 nlast;
};

/* The running sums of the least-squares fit of one instance. */
struct wait_model {
	double		 n, sp, sd, st, spp, spd, sdd, spt, sdt;
};

/* One prefill entry of an iteration: whose, and how many tokens. */
struct wait_entry {
	uint64_t	 id;
	uint32_t	 tokens;
};

/* An iteration as the attribution sees it. */
struct wait_iter {
	uint64_t	 start;
	uint64_t	 end;
	uint32_t	 prefill_tokens;
	uint32_t	 decode_tokens;
	const struct wait_entry *prefills;	/* the batch's prefill entries */
	size_t		 nprefills;
	double		 a, b, c;		/* wait_model_coef() */
};

void	 reqwait_init(struct reqwait *, uint64_t arrival);
/* Account up to `now' to the pending cause, then wait for `cause'. */
void	 reqwait_gap(struct reqwait *, uint64_t now, enum wait_cause);
/*
 * The request (id `self') was in iteration `it' doing `own' work
 * (WAIT_PREFILL, WAIT_PREEMPTED or WAIT_DECODE); afterwards it waits
 * for scheduling.
 */
void	 reqwait_iteration(struct reqwait *, const struct wait_iter *it,
	    uint64_t self, enum wait_cause own);
/* The request finished at `now': account the rest to the pending cause. */
void	 reqwait_finish(struct reqwait *, uint64_t now);
/* Time the last reqwait_* call gave to `cause'. */
uint64_t reqwait_last_ns(const struct reqwait *, enum wait_cause);
/* Sum of every cause (the end-to-end time once finished). */
uint64_t reqwait_total(const struct reqwait *);
/* The blame entries, largest first; returns how many are used. */
size_t	 reqwait_blamed(const struct reqwait *, struct wait_blame *out);

void	 wait_model_init(struct wait_model *);
void	 wait_model_add(struct wait_model *, uint32_t prefill, uint32_t decode,
	    uint64_t dur_ns);
/* The fitted a (ns), b and c (ns per token); the fallback when undefined. */
void	 wait_model_coef(const struct wait_model *, double *a, double *b,
	    double *c);
/* Others' share (ns) of an iteration, from the model and its length. */
uint64_t wait_others_ns(const struct wait_iter *, uint32_t own_prefill);

#endif
