/*
 * fcfs.c: first come, first served, whole prompts.
 *
 * Every running decode gets its token; then waiting requests are admitted in
 * arrival order while their whole prompt fits the iteration's tokens,
 * sequences and KV blocks, and each admitted prompt is prefilled entirely in
 * the iteration that admits it, in the same batch as the decodes.  This is
 * the behaviour of early vLLM and the llama.cpp server, and the baseline that
 * shows prefill/decode interference: a long prompt stretches the iteration
 * every decoding user is waiting on.
 *
 * Admission is strict: the first request that does not fit stops it, so a
 * later short prompt never overtakes an earlier long one.  A prompt longer
 * than max_batch_tokens can never fit whole; to keep the plan valid it is
 * prefilled in chunks of what the iteration has left (at most
 * max_batch_tokens), still ahead of everything that arrived after it.
 */
#include <stdlib.h>

#include <phased/policy.h>

#include "policy_lib.h"

/* Accept no parameters. */
static int
fcfs_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	if (params->n != 0)
		return (pl_param_unknown(&params->v[0], NULL, err, errlen));
	*state = NULL;
	return (0);
}

/* Decodes, then whole prompts in arrival order. */
static int
fcfs_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct pl_budget	b;

	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	pl_prefill(v, p, &b, UINT32_MAX, PL_WHOLE);
	return (0);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "fcfs",
	.describe = "first come first served: whole prompts batched with "
	    "every running decode",
	.params_help = "",
	.init = fcfs_init,
	.schedule = fcfs_schedule,
};
