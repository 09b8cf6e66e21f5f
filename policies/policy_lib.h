/*
 * policy_lib.h: building blocks shared by the bundled policies and the
 * daemon's built-in FCFS fallback.  Compiled into each plugin (hidden, so a
 * plugin still exports only its entry symbol) and into the daemon.
 */
#ifndef PHASED_POLICY_LIB_H
#define PHASED_POLICY_LIB_H

#include <stddef.h>
#include <stdint.h>

#include <phased/policy.h>

#define PL_HIDDEN	__attribute__((visibility("hidden")))

/* What is left of one iteration while a plan is being built. */
struct pl_budget {
	uint32_t	tokens;		/* batch tokens left */
	uint32_t	seqs;		/* sequences left */
	uint64_t	blocks;		/* free KV blocks left on the group */
	uint32_t	cut;		/* reqs[cut..] running on the group are preempted */
	int		no_admit;	/* KV was short: admit no waiting request */
	uint32_t	decodes;	/* decode entries planned */
	uint32_t	prefill;	/* prefill tokens planned */
};

/* How pl_prefill() sizes the work it gives one request. */
enum pl_prefill_mode {
	PL_WHOLE,	/* whole remaining prompt, strict arrival order (FCFS) */
	PL_CHUNK,	/* any chunk that fits, oldest first */
	PL_CHUNK_SHORT	/* any chunk that fits, least remaining prompt first */
};

/* Start a budget from the view's limits for the group being planned. */
PL_HIDDEN void	 pl_budget_init(struct pl_budget *, const struct phased_view *);
/* Whether the group being planned may prefill (its role is not DECODE). */
PL_HIDDEN int	 pl_can_prefill(const struct phased_view *);
/* Plan one token for every decode on the group, preempting when KV is short. */
PL_HIDDEN uint32_t pl_decodes(const struct phased_view *, struct phased_plan *,
		    struct pl_budget *);
/* Plan prefill work in arrival order, at most `limit` tokens. */
PL_HIDDEN uint32_t pl_prefill(const struct phased_view *, struct phased_plan *,
		    struct pl_budget *, uint32_t limit, enum pl_prefill_mode);
/* Parse order=shortest|arrival into a chunking mode; -1 and err on failure. */
PL_HIDDEN int	 pl_param_order(const struct phased_param *,
		    enum pl_prefill_mode *, char *err, size_t errlen);
/* Parse an integer parameter within [min, max]; -1 and err on failure. */
PL_HIDDEN int	 pl_param_uint(const struct phased_param *, uint64_t min,
		    uint64_t max, uint64_t *out, char *err, size_t errlen);
/* Parse a real parameter within [min, max]; -1 and err on failure. */
PL_HIDDEN int	 pl_param_real(const struct phased_param *, double min,
		    double max, double *out, char *err, size_t errlen);
/* Report an unknown parameter key, listing the valid ones. */
PL_HIDDEN int	 pl_param_unknown(const struct phased_param *,
		    const char *valid, char *err, size_t errlen);

#endif
