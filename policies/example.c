/*
 * example.c: a complete, minimal phased scheduling policy.
 *
 * Each iteration: one token for every decode on the group, then one prompt
 * chunk of at most chunk=N tokens (default 64) for the oldest request that
 * still has prompt to prefill.  Build it with
 *	cc -shared -fPIC -o example.so example.c
 * and copy example.so into the plugin directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phased/policy.h>

struct example {
	unsigned long	chunk;
};

/* Validate the parameters and allocate the state. */
static int
example_init(const struct phased_policy_params *params, void **state,
    char *err, size_t errlen)
{
	struct example	*ex;
	char		*end;
	size_t		 i;

	if ((ex = malloc(sizeof *ex)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	ex->chunk = 64;
	for (i = 0; i < params->n; i++) {
		if (strcmp(params->v[i].key, "chunk") != 0) {
			snprintf(err, errlen, "unknown parameter '%s' "
			    "(expected chunk)", params->v[i].key);
			free(ex);
			return (-1);
		}
		ex->chunk = strtoul(params->v[i].value, &end, 10);
		if (*end != '\0' || ex->chunk < 1 || ex->chunk > 4096) {
			snprintf(err, errlen, "chunk '%s' is out of range "
			    "1..4096", params->v[i].value);
			free(ex);
			return (-1);
		}
	}
	*state = ex;
	return (0);
}

/* Decodes first, then one chunk of the oldest unfinished prompt. */
static int
example_schedule(void *state, const struct phased_view *v,
    struct phased_plan *plan)
{
	struct example			*ex = state;
	const struct phased_request	*r;
	uint32_t			 i, n, tokens = v->max_batch_tokens;
	uint32_t			 blocks = v->groups[v->group].free_blocks;

	for (i = 0; i < v->n_reqs && tokens > 0; i++) {
		r = &v->reqs[i];
		if (r->state != PHASED_REQ_DECODING || r->group != v->group)
			continue;
		if (phased_blocks_needed(v, r, 1) > blocks ||
		    plan->n_entries >= v->max_seqs)
			return (-1);	/* let the daemon's fallback preempt */
		blocks -= phased_blocks_needed(v, r, 1);
		phased_plan_add(plan, v, r->id, 1);
		tokens--;
	}
	if (v->groups[v->group].role == PHASED_ROLE_DECODE ||
	    plan->n_entries >= v->max_seqs)
		return (0);
	for (i = 0; i < v->n_reqs; i++) {
		r = &v->reqs[i];
		if (!(r->state == PHASED_REQ_WAITING &&
		    r->group == PHASED_GROUP_NONE) &&
		    !(r->state == PHASED_REQ_PREFILLING && r->group == v->group))
			continue;
		n = phased_req_remaining(r);
		if (n > ex->chunk)
			n = ex->chunk;
		if (n > tokens)
			n = tokens;
		if (n > 0 && phased_blocks_needed(v, r, n) <= blocks)
			phased_plan_add(plan, v, r->id, n);
		break;
	}
	return (0);
}

/* Free the state. */
static void
example_fini(void *state)
{
	free(state);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "example",
	.describe = "decodes, then one chunk of the oldest prompt",
	.params_help = "chunk=N",
	.init = example_init,
	.schedule = example_schedule,
	.fini = example_fini,
};
