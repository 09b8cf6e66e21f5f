/*
 * decode_reserved.c: decodes first, prefill only inside a reserved share.
 *
 * Every iteration first plans one token for each running decode; prefill
 * work (oldest first, chunked to fit) is then admitted only inside a share
 * that protects the decoding users:
 *
 *   max_prefill_tokens=N	at most N prompt tokens per iteration (1..65536,
 *				default 256)
 *   prefill_every=K		prefill only on iterations whose number is a
 *				multiple of K (1..1024, default 1)
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

struct dr_state {
	uint32_t	max_prefill;	/* prompt tokens per iteration */
	uint32_t	every;		/* prefill on every K-th iteration */
	enum pl_prefill_mode order;	/* PL_CHUNK_SHORT or PL_CHUNK */
};

/* Parse max_prefill_tokens and prefill_every. */
static int
dr_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	struct dr_state	*s;
	uint64_t	 n;
	size_t		 i;

	if ((s = calloc(1, sizeof *s)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	s->max_prefill = 256;
	s->order = PL_CHUNK_SHORT;
	s->every = 1;
	for (i = 0; i < params->n; i++) {
		const struct phased_param *kv = &params->v[i];

		if (strcmp(kv->key, "max_prefill_tokens") == 0) {
			if (pl_param_uint(kv, 1, 65536, &n, err, errlen) != 0)
				goto fail;
			s->max_prefill = n;
		} else if (strcmp(kv->key, "prefill_every") == 0) {
			if (pl_param_uint(kv, 1, 1024, &n, err, errlen) != 0)
				goto fail;
			s->every = n;
		} else if (strcmp(kv->key, "order") == 0) {
			if (pl_param_order(kv, &s->order, err, errlen) != 0)
				goto fail;
		} else {
			pl_param_unknown(kv, "max_prefill_tokens, prefill_every, order",
			    err, errlen);
			goto fail;
		}
	}
	*state = s;
	return (0);
fail:
	free(s);
	return (-1);
}

/* Decodes, then prefill inside the reserved share. */
static int
dr_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct dr_state		*s = state;
	struct pl_budget	 b;
	uint32_t		 limit = UINT32_MAX;
	uint32_t		 i, running = 0;

	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	for (i = 0; i < v->n_reqs; i++) {
		if (v->reqs[i].state == PHASED_REQ_DECODING &&
		    v->reqs[i].group == v->group)
			running++;
	}
	if (running != 0) {
		if (v->iteration % s->every != 0)
			return (0);
		limit = s->max_prefill;
	}
	pl_prefill(v, p, &b, limit, s->order);
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
	.params_help = "max_prefill_tokens=N prefill_every=K "
	    "order=shortest|arrival",
	.init = dr_init,
	.schedule = dr_schedule,
	.fini = dr_fini,
};
