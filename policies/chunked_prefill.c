/*
 * chunked_prefill.c: Sarathi-Serve style chunked prefill, aimed at a
 * time-between-tokens target.
 *
 * Each iteration plans one token for every running decode first (a decode
 * is never delayed), then prompt chunks fill what the target leaves, the
 * request with the least prompt left first (order=arrival: oldest first)
 * so that a short chat turn is not queued behind a long document; a long
 * prompt is split across iterations and the remainder of an iteration can
 * hold chunks of several prompts.
 *
 * Without parameters the target is automatic: tbt_factor (3.5) times the
 * decode-only iteration time the engine measured recently (pl_target.c
 * explains the cost model, the correction from measured iterations and how
 * a TTFT target given with ttft_ms is traded against the TBT target).
 * tbt_p99_ms=T (tbt_target_ms is the same key) gives the target instead.
 * budget=N alone is the fixed mode: at most N tokens per iteration, no
 * target; with a target it is an extra bound.
 *
 * reconfigure() applies new parameters and keeps what was learned (the
 * decode-only time and the forecast correction); the cost model itself is
 * refitted from the view every iteration.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phased/policy.h>

#include "policy_lib.h"

/* The parameters. */
struct cp_conf {
	uint32_t	budget;		/* tokens per iteration */
	int		fixed;		/* budget without targets */
	struct pl_target target;
	enum pl_prefill_mode order;	/* PL_CHUNK_SHORT or PL_CHUNK */
};

struct cp_state {
	struct cp_conf	conf;
	struct pl_learn	learn;		/* kept across reconfigure() */
};

/* Parse the parameters into conf; 0, or -1 with err. */
static int
cp_parse(const struct phased_policy_params *params, struct cp_conf *c,
    char *err, size_t errlen)
{
	uint64_t	n;
	size_t		i;
	int		have_budget = 0, rc;

	memset(c, 0, sizeof *c);
	c->budget = 65536;
	c->order = PL_CHUNK_SHORT;
	pl_target_init(&c->target);
	for (i = 0; i < params->n; i++) {
		const struct phased_param *kv = &params->v[i];

		if ((rc = pl_param_target(kv, &c->target, err, errlen)) == -1)
			return (-1);
		if (rc == 1)
			continue;
		if (strcmp(kv->key, "budget") == 0) {
			if (pl_param_uint(kv, 16, 65536, &n, err, errlen) != 0)
				return (-1);
			c->budget = (uint32_t)n;
			have_budget = 1;
		} else if (strcmp(kv->key, "order") == 0) {
			if (pl_param_order(kv, &c->order, err, errlen) != 0)
				return (-1);
		} else {
			pl_param_unknown(kv, "budget, order, " PL_TARGET_KEYS,
			    err, errlen);
			return (-1);
		}
	}
	c->fixed = have_budget && !c->target.given;
	return (pl_target_check(&c->target, err, errlen));
}

/* Parse the parameters, allocate state. */
static int
cp_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	struct cp_state	*s;

	if ((s = calloc(1, sizeof *s)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	if (cp_parse(params, &s->conf, err, errlen) != 0) {
		free(s);
		return (-1);
	}
	*state = s;
	return (0);
}

/* New parameters for the running policy; what was learned stays. */
static int
cp_reconfigure(void *state, const struct phased_policy_params *params,
    char *err, size_t errlen)
{
	struct cp_state	*s = state;
	struct cp_conf	 c;

	if (cp_parse(params, &c, err, errlen) != 0)
		return (-1);
	s->conf = c;
	return (0);
}

/* Decodes first, then prompt chunks up to the budget or the target. */
static int
cp_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct cp_state		*s = state;
	struct pl_budget	 b;
	struct pl_chunk		 ch;
	uint32_t		 limit;

	pl_learn_update(&s->learn, v);
	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	limit = s->conf.budget > b.decodes ? s->conf.budget - b.decodes : 0;
	if (!s->conf.fixed) {
		pl_target_chunk(&s->conf.target, &s->learn, v, b.decodes, &ch);
		if (ch.chunk < limit)
			limit = ch.chunk;
	} else {
		memset(&ch, 0, sizeof ch);
		ch.chunk = limit;
	}
	if (limit != 0)
		pl_prefill(v, p, &b, limit, s->conf.order);
	pl_target_report(&s->learn, v, &ch, b.prefill, b.decodes, p);
	return (0);
}

/* Free the state. */
static void
cp_fini(void *state)
{
	free(state);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "chunked-prefill",
	.describe = "decodes first, prompt chunks sized to a time-between-"
	    "tokens target (automatic, or tbt_p99_ms) or a token budget",
	.params_help = "tbt_p99_ms=T ttft_ms=T tbt_factor=F min_chunk=N "
	    "max_chunk=N budget=N order=shortest|arrival",
	.init = cp_init,
	.schedule = cp_schedule,
	.fini = cp_fini,
	.reconfigure = cp_reconfigure,
};
