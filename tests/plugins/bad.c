/*
 * bad.c: plugins the loader must refuse or eject, one per build flag:
 * BAD_VERSION (wrong ABI version), BAD_SIZE (wrong struct size), NO_SYMBOL
 * (no entry symbol), REJECT_PARAMS (init refuses any parameter) and BROKEN
 * (every plan gives a decode two tokens; it declines to plan before
 * on_swap_in, so its error shows that on_swap_in came first, and its state
 * is freed only by fini, so a missing fini shows as a leak).
 */
#include <stdio.h>
#include <stdlib.h>

#include <phased/policy.h>

struct bad {
	int	swapped_in;
};

/* Allocate the state, or refuse every parameter. */
static int
bad_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
#ifdef REJECT_PARAMS
	snprintf(err, errlen, "rejecting %zu parameters", params->n);
	return (-1);
#else
	if ((*state = calloc(1, sizeof(struct bad))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	return (0);
#endif
}

/* Plan nothing, or (BROKEN) two tokens for every decode. */
static int
bad_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
#ifdef BROKEN
	struct bad	*b = state;
	uint32_t	 i;

	if (!b->swapped_in)
		return (-1);
	for (i = 0; i < v->n_reqs; i++) {
		if (v->reqs[i].state == PHASED_REQ_DECODING &&
		    v->reqs[i].group == v->group)
			phased_plan_add(p, v, v->reqs[i].id, 2);
	}
#endif
	return (0);
}

/* Note that the policy became active. */
static void
bad_swap_in(void *state, const struct phased_view *v)
{
	((struct bad *)state)->swapped_in = 1;
}

/* Free the state. */
static void
bad_fini(void *state)
{
	free(state);
}

#ifdef NO_SYMBOL
const struct phased_policy phased_policy_other = {
#else
const struct phased_policy phased_policy_entry = {
#endif
	.magic = PHASED_POLICY_MAGIC,
#ifdef BAD_VERSION
	.abi_version = PHASED_POLICY_ABI_VERSION + 1,
#else
	.abi_version = PHASED_POLICY_ABI_VERSION,
#endif
#ifdef BAD_SIZE
	.struct_size = sizeof(struct phased_policy) - 8,
#else
	.struct_size = sizeof(struct phased_policy),
#endif
	.name = BAD_NAME,
	.describe = "a test plugin",
	.init = bad_init,
	.schedule = bad_schedule,
	.fini = bad_fini,
	.on_swap_in = bad_swap_in,
};
