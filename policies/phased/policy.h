/*
 * <phased/policy.h>: the scheduling-policy plugin ABI of phased.
 *
 * A policy is a shared object in the plugin directory that exports exactly
 * one symbol, PHASED_POLICY_SYMBOL ("phased_policy_entry"), a constant
 * struct phased_policy.  Before any plugin code is called the daemon checks
 * the magic, the ABI version and the struct size of that table (and the size
 * of the symbol itself); a mismatch refuses the plugin.
 *
 * Every iteration of a device group's engine loop the daemon builds a
 * read-only struct phased_view and calls schedule(), which writes a
 * struct phased_plan into arrays the daemon owns.  The daemon never trusts
 * a plan: it validates it and, if it is invalid, runs a built-in FCFS plan
 * instead; a policy that produces several invalid plans in a row is ejected.
 *
 * A policy is named, never given by path: NAME is the file NAME.so in the
 * daemon's plugin directory, NAME holds only letters, digits, '-' and '_',
 * and the table's `name` must equal it.
 *
 * A model instance may run on several device groups, each iterating its own
 * engine loop; schedule() is called once per iteration of each loop with
 * view->group set to the group being planned.  Calls for the groups of one
 * instance are serialized, and each sees the effects of the previous one.
 *
 * Rules for plugins:
 *  - Every call runs in the instance's policy host process, one at a time,
 *    under a seccomp filter and a deadline (phased-policy(3), ISOLATION):
 *    no files, sockets or processes; a late, crashing or forbidden call
 *    ends the policy.  Calls must not block, sleep or do I/O.
 *  - Nothing the daemon passes in may be kept after the call returns: views,
 *    requests and params are only valid during the call (copy what you need).
 *  - The plan arrays have fixed capacities; the inline helpers below refuse
 *    to write past them.
 *  - All state lives behind the `state` pointer init() returns; two
 *    instances of one plugin (two model instances) share nothing else.
 *
 * Units: times in nanoseconds (uint64_t, monotonic clock) unless a name ends
 * in _ms; sizes of the KV cache in blocks of view->block_size tokens.
 *
 * The layout is stable within an ABI version; reserved fields are zero and
 * give room to grow without changing it.  C11, no dependencies.
 */
#ifndef PHASED_POLICY_H
#define PHASED_POLICY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "phsd" in the first word, so random data is not read as a table. */
#define PHASED_POLICY_MAGIC		0x70687364u
/* Bumped on any incompatible change of the structures below. */
#define PHASED_POLICY_ABI_VERSION	1u
/*
 * Fields added within ABI version 1 in words that were reserved (zero for
 * older daemons, NULL for older plugins): 1 = phased_request.cached_tokens;
 * 2 = phased_view.abi_minor, the plan's report (chunk_tokens, predicted_ns,
 * target_ns) and the optional reconfigure op; 3 = phased_request.priority,
 * uid and weight; 4 = phased_plan.notices; 5 = phased_plan.flags
 * (PHASED_PLAN_BORROW).
 */
#define PHASED_POLICY_ABI_MINOR		5u
/* The one symbol a plugin exports. */
#define PHASED_POLICY_SYMBOL		"phased_policy_entry"

/* Group index of a request that holds no KV on any group (waiting). */
#define PHASED_GROUP_NONE		UINT32_MAX

/* Life cycle of a request as the engine sees it. */
enum phased_req_state {
	PHASED_REQ_WAITING = 0,		/* queued, no KV; prefill not started */
	PHASED_REQ_PREFILLING = 1,	/* part of the prompt has KV */
	PHASED_REQ_DECODING = 2,	/* prompt done, first token sampled */
	PHASED_REQ_FINISHED = 3		/* done or cancelled; KV freed soon */
};

/* What a device group is for. */
enum phased_group_role {
	PHASED_ROLE_MIXED = 0,		/* prefill and decode */
	PHASED_ROLE_PREFILL = 1,	/* prefill (and first token) only */
	PHASED_ROLE_DECODE = 2		/* decode only: never prefills */
};

/* One request, as of the start of the iteration being planned. */
struct phased_request {
	uint64_t	id;		/* unique within the model instance */
	uint32_t	state;		/* enum phased_req_state */
	uint32_t	group;		/* group holding its KV, or PHASED_GROUP_NONE */
	uint64_t	arrival_ns;	/* when it was queued */
	uint32_t	prompt_tokens;	/* tokens to prefill (after a preemption:
					   prompt plus tokens generated so far) */
	uint32_t	computed_tokens; /* of those, prefilled so far */
	uint32_t	generated_tokens; /* tokens sampled so far */
	uint32_t	max_tokens;	/* generation limit */
	uint32_t	kv_tokens;	/* positions whose KV it holds */
	uint32_t	kv_blocks;	/* KV blocks it holds on its group */
	double		tbt_last_ms;	/* last gap between two of its tokens */
	double		tbt_ewma_ms;	/* EWMA (alpha 1/8) of that gap; 0: none */
	/*
	 * ABI minor 1: prompt tokens the prefix cache supplies (waiting: what
	 * it holds now, already counted in computed_tokens; running: what it
	 * supplied at admission).  Taken from the reserved words, so plugins
	 * built before it still load and simply never read it.
	 */
	uint32_t	cached_tokens;
	/*
	 * ABI minor 3: the request's priority as the client gave it
	 * (-1000..1000, lower is more urgent, like nice(1); default 0), the
	 * user it is served for (the peer's uid on a Unix socket;
	 * PHASED_UID_NETWORK for HTTP over TCP) and that user's weight from
	 * phased.conf (user-weight; 1 when not configured).
	 */
	int32_t		priority;
	uint32_t	uid;
	uint32_t	weight;
	uint64_t	reserved[2];
};

/* The user of requests that came over TCP (no peer credentials). */
#define PHASED_UID_NETWORK	0xfffffffeu

/* A device group: one or more devices that run one engine loop. */
struct phased_group {
	uint32_t	role;		/* enum phased_group_role */
	uint32_t	n_devices;	/* devices in the group */
	uint32_t	free_blocks;	/* KV blocks free now */
	uint32_t	total_blocks;	/* KV blocks in all */
	uint64_t	reserved[2];
};

/* One past iteration of the group being planned. */
struct phased_iter_stat {
	uint64_t	duration_ns;	/* wall time of the forward pass + sampling */
	uint32_t	prefill_tokens;	/* prompt tokens it computed */
	uint32_t	decode_tokens;	/* decode tokens it computed (= decode seqs) */
	uint32_t	n_seqs;		/* sequences in the batch */
	uint32_t	reserved;
};

/*
 * What the engine knows at the start of an iteration.  Built by the daemon
 * for one call; read-only to the policy.  `reqs` holds every unfinished
 * request of the model instance (all groups), oldest arrival first (ties by
 * id); finished ones may still appear until their KV is freed.
 */
struct phased_view {
	uint32_t	 group;		/* the group being planned */
	uint32_t	 n_groups;
	const struct phased_group *groups; /* [n_groups] */
	uint32_t	 max_batch_tokens; /* token limit of one iteration (group) */
	uint32_t	 max_seqs;	/* sequence limit of one iteration (group) */
	uint32_t	 block_size;	/* tokens per KV block (> 0) */
	uint32_t	 n_reqs;
	const struct phased_request *reqs; /* [n_reqs], arrival order */
	uint32_t	 n_hist;	/* entries in hist, at most 64 */
	uint32_t	 reserved0;
	const struct phased_iter_stat *hist; /* [n_hist], oldest first */
	uint64_t	 now_ns;	/* monotonic clock at planning time */
	uint64_t	 iteration;	/* iteration number of this group's loop */
	/*
	 * ABI minor 2: the PHASED_POLICY_ABI_MINOR of the daemon that built
	 * the view (0 from older daemons), so a plugin knows which of the
	 * fields added in reserved words are filled in.
	 */
	uint32_t	 abi_minor;
	uint32_t	 reserved1;
	uint64_t	 reserved[5];
};

/*
 * Why a latency policy cannot meet its targets this iteration, reported in
 * phased_plan.notices (ABI minor 4) and shown by `phasectl policy show'.
 */
#define PHASED_NOTICE_TTFT_LATE		0x1u	/* a prompt can no longer meet
						   its TTFT target: queued
						   behind those that can */
#define PHASED_NOTICE_TBT_OVER		0x2u	/* the decodes alone exceed the
						   TBT target */
#define PHASED_NOTICE_PREEMPTED		0x4u	/* lower-class decodes preempted
						   to hold the TBT target */
#define PHASED_NOTICE_ADMISSION_HELD	0x8u	/* waiting requests held back:
						   admitting them would break
						   the TBT target */

/*
 * phased_plan.flags (ABI minor 5).  BORROW: this iteration may also run on
 * the cores of the model's other device groups while all of them are idle
 * (no request they could run); they get them back when it ends, so a group
 * that wakes with work waits at most one iteration of the borrower.  Only
 * groups of CPU cores lend; results are the same either way.
 */
#define PHASED_PLAN_BORROW		0x1u

/* Run n_tokens of request id on group this iteration. */
struct phased_plan_entry {
	uint64_t	id;
	uint32_t	n_tokens;	/* decode: 1; prefill: 1..remaining prompt */
	uint32_t	group;		/* must be view->group */
};

/* Move the KV of a request whose prefill is done to another group. */
struct phased_migration {
	uint64_t	id;
	uint32_t	from;		/* the group being planned */
	uint32_t	to;		/* a MIXED or DECODE group */
};

/*
 * The plan.  The daemon owns the arrays and sets the capacities (each at
 * least view->n_reqs) and zeroes the counts; the policy appends with the
 * helpers below.  Preempted requests lose their KV and go back to waiting
 * (their tokens are recomputed later).
 */
struct phased_plan {
	struct phased_plan_entry *entries;
	uint32_t	 n_entries;
	uint32_t	 cap_entries;
	uint64_t	*preempt;	/* request ids */
	uint32_t	 n_preempt;
	uint32_t	 cap_preempt;
	struct phased_migration *migrations;
	uint32_t	 n_migrations;
	uint32_t	 cap_migrations;
	/*
	 * ABI minor 2: what the policy aimed at in this plan, shown by
	 * `phasectl policy show' and the metrics next to the measured
	 * iteration time; zero means not reported.  The daemon zeroes them
	 * before every call.
	 */
	uint32_t	 chunk_tokens;	/* prefill tokens it allowed this iteration */
	uint32_t	 notices;	/* minor 4: PHASED_NOTICE_* bits */
	uint64_t	 predicted_ns;	/* its forecast of this iteration's time */
	uint64_t	 target_ns;	/* the iteration time it aims to stay under */
	uint32_t	 flags;		/* minor 5: PHASED_PLAN_* bits */
	uint32_t	 reserved32;
};

/* One key=value parameter; both strings are NUL-terminated. */
struct phased_param {
	const char	*key;
	const char	*value;
};

/* The parameters given when the policy was loaded, in the order given. */
struct phased_policy_params {
	size_t			 n;
	const struct phased_param *v;	/* [n] */
};

/*
 * The exported table, to be filled with designated initializers.  The first
 * three fields never move.  Ops marked optional may be NULL.
 */
struct phased_policy {
	uint32_t	 magic;		/* PHASED_POLICY_MAGIC */
	uint32_t	 abi_version;	/* PHASED_POLICY_ABI_VERSION */
	uint32_t	 struct_size;	/* sizeof(struct phased_policy) */
	uint32_t	 flags;		/* zero */
	const char	*name;		/* equal to the file name without ".so" */
	const char	*describe;	/* one line: what the policy does */
	const char	*params_help;	/* one line: its keys, e.g. "budget=N" */

	/* Validate params, allocate state; 0, or -1 with a message in err. Optional. */
	int	(*init)(const struct phased_policy_params *params, void **state,
		    char *err, size_t errlen);
	/* Plan one iteration of view->group into plan; 0, or -1 to fall back. Required. */
	int	(*schedule)(void *state, const struct phased_view *view,
		    struct phased_plan *plan);
	/* Free state; called once, after the last other call. Optional. */
	void	(*fini)(void *state);
	/* A request was queued. Optional. */
	void	(*on_arrival)(void *state, const struct phased_request *req);
	/* A request finished or was cancelled. Optional. */
	void	(*on_finish)(void *state, const struct phased_request *req);
	/* The policy became active; view is the first one it will plan. Optional. */
	void	(*on_swap_in)(void *state, const struct phased_view *view);
	/* The policy is being replaced or ejected; fini follows. Optional. */
	void	(*on_swap_out)(void *state);
	/*
	 * ABI minor 2.  New params for the running policy (`phasectl policy
	 * set' with the same name): check them all, then apply them to state,
	 * keeping what was learned; 0, or -1 with a message in err and state
	 * unchanged.  The params replace those given before (keys not given
	 * return to their defaults).  Optional: without it the daemon loads a
	 * fresh instance instead.
	 */
	int	(*reconfigure)(void *state, const struct phased_policy_params *params,
		    char *err, size_t errlen);

	void	*reserved[7];		/* NULL */
};

/*
 * Helpers for plugins.  They are static inline so that a plugin stays one
 * file with no library to link.
 */

/* Prompt tokens still to prefill. */
static inline uint32_t
phased_req_remaining(const struct phased_request *r)
{
	return (r->computed_tokens >= r->prompt_tokens ? 0 :
	    r->prompt_tokens - r->computed_tokens);
}

/* Whether a request holds KV (is running) on group g. */
static inline int
phased_req_running_on(const struct phased_request *r, uint32_t g)
{
	return ((r->state == PHASED_REQ_PREFILLING ||
	    r->state == PHASED_REQ_DECODING) && r->group == g);
}

/* KV blocks a request needs beyond those it holds to compute n more tokens. */
static inline uint32_t
phased_blocks_needed(const struct phased_view *v,
    const struct phased_request *r, uint32_t n)
{
	uint64_t	want;

	want = ((uint64_t)r->kv_tokens + n + v->block_size - 1) / v->block_size;
	return (want <= r->kv_blocks ? 0 : (uint32_t)(want - r->kv_blocks));
}

/* Append an entry for view->group; -1 when the array is full. */
static inline int
phased_plan_add(struct phased_plan *p, const struct phased_view *v,
    uint64_t id, uint32_t n_tokens)
{
	if (p->n_entries >= p->cap_entries)
		return (-1);
	p->entries[p->n_entries].id = id;
	p->entries[p->n_entries].n_tokens = n_tokens;
	p->entries[p->n_entries].group = v->group;
	p->n_entries++;
	return (0);
}

/* Append a preemption; -1 when the array is full. */
static inline int
phased_plan_preempt(struct phased_plan *p, uint64_t id)
{
	if (p->n_preempt >= p->cap_preempt)
		return (-1);
	p->preempt[p->n_preempt++] = id;
	return (0);
}

/* Append a migration from view->group to group `to`; -1 when full. */
static inline int
phased_plan_migrate(struct phased_plan *p, const struct phased_view *v,
    uint64_t id, uint32_t to)
{
	if (p->n_migrations >= p->cap_migrations)
		return (-1);
	p->migrations[p->n_migrations].id = id;
	p->migrations[p->n_migrations].from = v->group;
	p->migrations[p->n_migrations].to = to;
	p->n_migrations++;
	return (0);
}

#ifdef __cplusplus
}
#endif

#endif
