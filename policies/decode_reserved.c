/*
 * decode_reserved.c: decodes first, prefill only inside a reserved share.
 *
 * Every iteration first plans one token for each running decode; prefill
 * work (chunked to fit, least prompt left first) is then admitted only
 * inside a share that protects the decoding users:
 *
 *   max_prefill_tokens=N	at most N prompt tokens per iteration (1..65536)
 *   prefill_every=K		prefill only on iterations whose number is a
 *				multiple of K (1..1024, default 1)
 *
 * Without max_prefill_tokens the share is time, not tokens: the prefill
 * tokens of an iteration are sized by the cost model so that the iteration
 * stays within a time-between-tokens target, automatic (tbt_factor times
 * the decode-only iteration time measured recently) or given by
 * tbt_p99_ms, traded against ttft_ms as pl_target.c explains.
 *
 * Both limits apply only while some decode is running on the group: with
 * nothing to protect, prefill may use the whole batch.  A running decode is
 * never delayed: prefill only ever takes what the decodes left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phased/policy.h>

#include "policy_lib.h"

/* The parameters. */
struct dr_conf {
	uint32_t	max_prefill;	/* prompt tokens per iteration; 0: target */
	uint32_t	every;		/* prefill on every K-th iteration */
	struct pl_target target;
	enum pl_prefill_mode order;	/* PL_CHUNK_SHORT or PL_CHUNK */
};

struct dr_state {
	struct dr_conf	conf;
	struct pl_learn	learn;		/* kept across reconfigure() */
};

/* Parse the parameters into conf; 0, or -1 with err. */
static int
dr_parse(const struct phased_policy_params *params, struct dr_conf *c,
    char *err, size_t errlen)
{
	uint64_t	 n;
	size_t		 i;
	int		 rc;

	memset(c, 0, sizeof *c);
	c->order = PL_CHUNK_SHORT;
	c->every = 1;
	pl_target_init(&c->target);
	for (i = 0; i < params->n; i++) {
		const struct phased_param *kv = &params->v[i];

		if ((rc = pl_param_target(kv, &c->target, err, errlen)) == -1)
			return (-1);
		if (rc == 1)
			continue;
		if (strcmp(kv->key, "max_prefill_tokens") == 0) {
			if (pl_param_uint(kv, 1, 65536, &n, err, errlen) != 0)
				return (-1);
			c->max_prefill = (uint32_t)n;
		} else if (strcmp(kv->key, "prefill_every") == 0) {
			if (pl_param_uint(kv, 1, 1024, &n, err, errlen) != 0)
				return (-1);
			c->every = (uint32_t)n;
		} else if (strcmp(kv->key, "order") == 0) {
			if (pl_param_order(kv, &c->order, err, errlen) != 0)
				return (-1);
		} else {
			pl_param_unknown(kv, "max_prefill_tokens, prefill_every, "
			    "order, " PL_TARGET_KEYS, err, errlen);
			return (-1);
		}
	}
	if (c->max_prefill != 0 && c->target.given) {
		snprintf(err, errlen, "max_prefill_tokens and the target keys "
		    "exclude each other (a share in tokens or in time)");
		return (-1);
	}
	return (pl_target_check(&c->target, err, errlen));
}

/* Parse the parameters, allocate state. */
static int
dr_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	struct dr_state	*s;

	if ((s = calloc(1, sizeof *s)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	if (dr_parse(params, &s->conf, err, errlen) != 0) {
		free(s);
		return (-1);
	}
	*state = s;
	return (0);
}

/* New parameters for the running policy; what was learned stays. */
static int
dr_reconfigure(void *state, const struct phased_policy_params *params,
    char *err, size_t errlen)
{
	struct dr_state	*s = state;
	struct dr_conf	 c;

	if (dr_parse(params, &c, err, errlen) != 0)
		return (-1);
	s->conf = c;
	return (0);
}

/* Decodes, then prefill inside the reserved share. */
static int
dr_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct dr_state		*s = state;
	struct pl_budget	 b;
	struct pl_chunk		 ch;
	uint32_t		 limit = UINT32_MAX;
	uint32_t		 i, running = 0;

	pl_learn_update(&s->learn, v);
	memset(&ch, 0, sizeof ch);
	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	for (i = 0; i < v->n_reqs; i++) {
		if (v->reqs[i].state == PHASED_REQ_DECODING &&
		    v->reqs[i].group == v->group)
			running++;
	}
	if (running != 0) {
		if (v->iteration % s->conf.every != 0) {
			pl_target_report(&s->learn, v, &ch, 0, b.decodes, p);
			return (0);
		}
		if ((limit = s->conf.max_prefill) == 0) {
			pl_target_chunk(&s->conf.target, &s->learn, v,
			    b.decodes, &ch);
			limit = ch.chunk;
		} else
			ch.chunk = limit;
	} else
		ch.chunk = UINT32_MAX;
	pl_prefill(v, p, &b, limit, s->conf.order);
	pl_target_report(&s->learn, v, &ch, b.prefill, b.decodes, p);
	return (0);
}

/* Free the state. */
static void
dr_fini(void *state)
{
	free(state);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "decode-reserved",
	.describe = "every running decode first; prefill only in a reserved "
	    "share of tokens and iterations",
	.params_help = "max_prefill_tokens=N prefill_every=K tbt_p99_ms=T "
	    "ttft_ms=T tbt_factor=F min_chunk=N max_chunk=N "
	    "order=shortest|arrival",
	.init = dr_init,
	.schedule = dr_schedule,
	.fini = dr_fini,
	.reconfigure = dr_reconfigure,
};
