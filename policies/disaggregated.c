/*
 * disaggregated.c: DistServe style prefill/decode disaggregation.
 *
 * The model instance runs on at least two device groups, one with role
 * PREFILL and one with role DECODE, each iterating its own engine loop; the
 * daemon calls schedule() once per iteration of each loop with view->group
 * set to the group being planned, so neither phase ever waits on the other's
 * batch.
 *
 *  - On a PREFILL group: requests whose prefill completed there (state
 *    DECODING: the prompt is computed and the first token was sampled) are
 *    migrated to the DECODE group with the most free KV blocks that can hold
 *    them (the engine copies the KV through its transfer interface); a
 *    request no decode group can take yet waits where it is.  Then waiting
 *    requests are prefilled in chunks of at most chunk=N tokens per
 *    iteration (default 64), least remaining prompt first (order=arrival
 *    for arrival order), so a short chat turn does not wait behind a long
 *    document; chunk=0 prefills whole prompts in arrival order, as DistServe
 *    does (a prompt longer than max_batch_tokens is still chunked).
 *  - On a DECODE group: one token for each decoding request that lives there;
 *    when KV runs short the newest are preempted (they return to waiting and
 *    are prefilled again on a prefill group).
 *  - On a MIXED group, or when the instance lacks a PREFILL or a DECODE
 *    group (a single MIXED group), it degrades to chunked prefill: decodes
 *    first, prompt chunks fill budget=N tokens (default 512), in the same
 *    order.
 *
 * Lending (lend=on, the default): a group's plan asks to borrow the cores of
 * the other groups (PHASED_PLAN_BORROW), which the engine grants for one
 * iteration at a time while they have nothing to run.  So with no chat
 * decoding a prompt is prefilled on the whole machine, and with no prompt
 * pending the decodes run on it; a group that gets work waits at most one
 * iteration of the borrower (one prefill chunk, or one decode step).
 * lend=prefill lets only the prefill group borrow, lend=decode only the
 * decode group, lend=off neither.  reconfigure() takes new parameters in
 * place (the policy keeps no learned state).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phased/policy.h>

#include "policy_lib.h"

/*
 * Prompt tokens per prefill-group iteration by default: small enough that a
 * short prompt arriving behind a long one waits one chunk, not the whole
 * long prefill; large enough to keep the matrix kernels efficient.
 */
#define DG_CHUNK_DEFAULT	64

/* Which groups' plans may borrow idle groups' cores. */
#define DG_LEND_PREFILL		0x1u
#define DG_LEND_DECODE		0x2u

struct dg_state {
	uint32_t	chunk;		/* 0: whole prompts on the prefill group */
	uint32_t	lend;		/* DG_LEND_* bits */
	uint32_t	budget;		/* tokens per iteration when degraded */
	enum pl_prefill_mode order;	/* PL_CHUNK_SHORT or PL_CHUNK */
};

/* Parse lend=on|off|prefill|decode into DG_LEND_* bits; -1 and err. */
static int
dg_param_lend(const struct phased_param *kv, uint32_t *out, char *err,
    size_t errlen)
{
	if (strcmp(kv->value, "on") == 0)
		*out = DG_LEND_PREFILL | DG_LEND_DECODE;
	else if (strcmp(kv->value, "off") == 0)
		*out = 0;
	else if (strcmp(kv->value, "prefill") == 0)
		*out = DG_LEND_PREFILL;
	else if (strcmp(kv->value, "decode") == 0)
		*out = DG_LEND_DECODE;
	else {
		snprintf(err, errlen, "lend '%s' is not on, off, prefill or "
		    "decode", kv->value);
		return (-1);
	}
	return (0);
}

/* Parse chunk, budget, order and lend into s (defaults first); -1 and err. */
static int
dg_parse(const struct phased_policy_params *params, struct dg_state *s,
    char *err, size_t errlen)
{
	uint64_t	 n;
	size_t		 i;

	s->budget = 512;
	s->chunk = DG_CHUNK_DEFAULT;
	s->order = PL_CHUNK_SHORT;
	s->lend = DG_LEND_PREFILL | DG_LEND_DECODE;
	for (i = 0; i < params->n; i++) {
		const struct phased_param *kv = &params->v[i];

		if (strcmp(kv->key, "chunk") == 0) {
			if (pl_param_uint(kv, 0, 65536, &n, err, errlen) != 0)
				return (-1);
			if (n != 0 && n < 16) {
				snprintf(err, errlen, "chunk %llu is out of range "
				    "0 (whole prompts) or 16..65536",
				    (unsigned long long)n);
				return (-1);
			}
			s->chunk = n;
		} else if (strcmp(kv->key, "budget") == 0) {
			if (pl_param_uint(kv, 16, 65536, &n, err, errlen) != 0)
				return (-1);
			s->budget = n;
		} else if (strcmp(kv->key, "order") == 0) {
			if (pl_param_order(kv, &s->order, err, errlen) != 0)
				return (-1);
		} else if (strcmp(kv->key, "lend") == 0) {
			if (dg_param_lend(kv, &s->lend, err, errlen) != 0)
				return (-1);
		} else {
			pl_param_unknown(kv, "chunk, budget, order, lend", err,
			    errlen);
			return (-1);
		}
	}
	return (0);
}

/* Parse the parameters into a new state. */
static int
dg_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	struct dg_state	*s;

	if ((s = calloc(1, sizeof *s)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	if (dg_parse(params, s, err, errlen) != 0) {
		free(s);
		return (-1);
	}
	*state = s;
	return (0);
}

/* Take new parameters in place; the state is unchanged on error. */
static int
dg_reconfigure(void *state, const struct phased_policy_params *params,
    char *err, size_t errlen)
{
	struct dg_state	 n;

	if (dg_parse(params, &n, err, errlen) != 0)
		return (-1);
	*(struct dg_state *)state = n;
	return (0);
}

/* Migrate each request whose prefill completed here to a decode group. */
static void
dg_migrate(const struct phased_view *v, struct phased_plan *p)
{
	uint64_t	 freeb[64];
	uint32_t	 i, g, best, ng;

	ng = v->n_groups < 64 ? v->n_groups : 64;
	for (g = 0; g < ng; g++)
		freeb[g] = v->groups[g].free_blocks;
	for (i = 0; i < v->n_reqs; i++) {
		const struct phased_request *r = &v->reqs[i];

		if (r->state != PHASED_REQ_DECODING || r->group != v->group)
			continue;
		best = UINT32_MAX;
		for (g = 0; g < ng; g++) {
			if (v->groups[g].role != PHASED_ROLE_DECODE ||
			    freeb[g] < r->kv_blocks)
				continue;
			if (best == UINT32_MAX || freeb[g] > freeb[best])
				best = g;
		}
		if (best == UINT32_MAX)
			continue;	/* no room yet: it waits here */
		if (phased_plan_migrate(p, v, r->id, best) != 0)
			return;
		freeb[best] -= r->kv_blocks;
	}
}

/* Plan the group being planned according to its role. */
static int
dg_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct dg_state		*s = state;
	struct pl_budget	 b;
	uint32_t		 g, role, limit;
	int			 have_prefill = 0, have_decode = 0;

	if (v->group >= v->n_groups)
		return (-1);
	for (g = 0; g < v->n_groups; g++) {
		if (v->groups[g].role == PHASED_ROLE_PREFILL)
			have_prefill = 1;
		else if (v->groups[g].role == PHASED_ROLE_DECODE)
			have_decode = 1;
	}
	role = v->groups[v->group].role;
	pl_budget_init(&b, v);
	if (!have_prefill || !have_decode || role == PHASED_ROLE_MIXED) {
		pl_decodes(v, p, &b);
		limit = s->budget > b.decodes ? s->budget - b.decodes : 0;
		if (limit != 0)
			pl_prefill(v, p, &b, limit, s->order);
		return (0);
	}
	if (role == PHASED_ROLE_DECODE) {
		pl_decodes(v, p, &b);
		if (s->lend & DG_LEND_DECODE)
			p->flags |= PHASED_PLAN_BORROW;
		return (0);
	}
	dg_migrate(v, p);
	if (s->lend & DG_LEND_PREFILL)
		p->flags |= PHASED_PLAN_BORROW;
	if (s->chunk != 0)
		pl_prefill(v, p, &b, s->chunk, s->order);
	else
		pl_prefill(v, p, &b, UINT32_MAX, PL_WHOLE);
	return (0);
}

/* Free the state. */
static void
dg_fini(void *state)
{
	free(state);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "disaggregated",
	.describe = "prefill and decode on separate device groups, KV migrated "
	    "when the prompt is done",
	.params_help = "chunk=N (0: whole prompts) budget=N order=shortest|arrival "
	    "lend=on|off|prefill|decode",
	.init = dg_init,
	.schedule = dg_schedule,
	.fini = dg_fini,
	.reconfigure = dg_reconfigure,
};
