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
/*
 * Plan prefill chunks for the request indices ord[0..n) in that order, at
 * most `limit` tokens (as PL_CHUNK, the KV rules of pl_prefill()).
 */
PL_HIDDEN uint32_t pl_prefill_in_order(const struct phased_view *,
		    struct phased_plan *, struct pl_budget *, uint32_t limit,
		    const uint32_t *ord, uint32_t n);
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

/*
 * Latency targets (pl_target.c).  An iteration's cost is modelled as
 * t = a + b*P + c*D milliseconds (P prompt tokens, D decodes), fitted to
 * the view's history; what the policy learns from measured iterations
 * (the decode-only iteration time, how far the model's forecasts were off)
 * is kept per group in struct pl_learn, across calls and reconfigurations.
 */
#define PL_MAX_GROUPS	8
/* Keys pl_param_target() takes, for the policies' error messages. */
#define PL_TARGET_KEYS	"tbt_p99_ms, tbt_target_ms, ttft_ms, tbt_factor, " \
			"min_chunk, max_chunk"

/* A fitted cost model, in milliseconds. */
struct pl_cost {
	double		a, b, c;	/* fixed, per prompt token, per decode */
	double		sigma;		/* residual standard deviation */
	uint32_t	max_p;		/* largest prefill in the samples */
	int		n;		/* samples used */
};

/* The targets a policy was given. */
struct pl_target {
	double		tbt_ms;		/* iteration-time target; 0: automatic */
	double		ttft_ms;	/* first-token target; 0: none */
	double		factor;		/* automatic: this times decode-only */
	uint32_t	min_chunk, max_chunk;
	int		given;		/* some key above was given */
};

/* What measured iterations taught, per group. */
struct pl_learn {
	uint64_t	seen[PL_MAX_GROUPS];	/* view->iteration last planned */
	int		primed[PL_MAX_GROUPS];
	double		base_ms[PL_MAX_GROUPS];	/* decode-only iteration, EWMA */
	double		corr[PL_MAX_GROUPS];	/* measured / forecast, EWMA */
	double		spread[PL_MAX_GROUPS];	/* its relative variance, EWMA */
	double		pred_ms[PL_MAX_GROUPS];	/* forecast of the last plan */
	uint64_t	n_base, n_corr;		/* samples taken, all groups */
};

/* One iteration's decision. */
struct pl_chunk {
	uint32_t	chunk;		/* prefill tokens allowed */
	double		target_ms;	/* iteration time aimed under; 0: none */
	int		have_model;	/* cost model fitted: forecasts valid */
	struct pl_cost	cost;
	double		corr;		/* forecast correction applied */
	double		spread;		/* relative deviation of measured times */
};

/* Fit the cost model to the view's history, dropping outliers; 0 or -1. */
PL_HIDDEN int	 pl_cost_fit(const struct phased_view *, struct pl_cost *);
/* Defaults of the targets: automatic TBT, no TTFT. */
PL_HIDDEN void	 pl_target_init(struct pl_target *);
/* Parse one target key: 1 taken, 0 not a target key, -1 and err on error. */
PL_HIDDEN int	 pl_param_target(const struct phased_param *,
		    struct pl_target *, char *err, size_t errlen);
/* Check the targets once all keys are parsed; -1 and err on error. */
PL_HIDDEN int	 pl_target_check(const struct pl_target *, char *err,
		    size_t errlen);
/* Take in the iterations measured since the last call for view->group. */
PL_HIDDEN void	 pl_learn_update(struct pl_learn *, const struct phased_view *);
/* The prefill chunk that keeps this iteration within the targets. */
PL_HIDDEN void	 pl_target_chunk(const struct pl_target *, struct pl_learn *,
		    const struct phased_view *, uint32_t decodes,
		    struct pl_chunk *);
/* Fill the plan's report and remember the forecast for the next call. */
PL_HIDDEN void	 pl_target_report(struct pl_learn *, const struct phased_view *,
		    const struct pl_chunk *, uint32_t prefill, uint32_t decodes,
		    struct phased_plan *);

#endif
