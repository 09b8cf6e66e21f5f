/*
 * report-view.c: a test policy that plans as fcfs and reports, in its
 * plan's report fields, what the view says of the newest request: its
 * priority (chunk_tokens = priority + 1000), its uid (predicted_ns = uid
 * ms) and its weight (target_ns = weight ms), so that an integration test
 * reads them back through `phasectl policy show'.
 */
#include <phased/policy.h>

#include "policy_lib.h"

/* fcfs, and the newest request's priority, uid and weight as the report. */
static int
rv_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	const struct phased_request	*r;
	struct pl_budget		 b;

	(void)state;
	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	pl_prefill(v, p, &b, UINT32_MAX, PL_WHOLE);
	if (v->n_reqs == 0 || v->abi_minor < 3)
		return (0);
	r = &v->reqs[v->n_reqs - 1];
	p->chunk_tokens = (uint32_t)(r->priority + 1000);
	p->predicted_ns = (uint64_t)r->uid * 1000000ULL;
	p->target_ns = (uint64_t)r->weight * 1000000ULL;
	return (0);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "report-view",
	.describe = "test: fcfs, reporting the newest request's priority, "
	    "uid and weight",
	.params_help = "",
	.schedule = rv_schedule,
};
