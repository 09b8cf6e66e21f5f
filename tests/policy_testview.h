/* policy_testview.h: synthetic engine views for the policy tests. */
#ifndef PHASED_POLICY_TESTVIEW_H
#define PHASED_POLICY_TESTVIEW_H

#include <stdint.h>
#include <string.h>

#include <phased/policy.h>

#define TV_MAXR		128
#define TV_MAXG		4
#define TV_MAXH		64

/* A view with storage for its arrays and for a plan. */
struct tv {
	struct phased_view		v;
	struct phased_request		reqs[TV_MAXR];
	struct phased_group		groups[TV_MAXG];
	struct phased_iter_stat		hist[TV_MAXH];
	struct phased_plan		p;
	struct phased_plan_entry	e[TV_MAXR];
	uint64_t			pre[TV_MAXR];
	struct phased_migration		mig[TV_MAXR];
};

/* Reset the plan to empty with full capacities. */
static inline void
tv_plan_reset(struct tv *t)
{
	memset(&t->p, 0, sizeof t->p);
	t->p.entries = t->e;
	t->p.cap_entries = TV_MAXR;
	t->p.preempt = t->pre;
	t->p.cap_preempt = TV_MAXR;
	t->p.migrations = t->mig;
	t->p.cap_migrations = TV_MAXR;
}

/* An empty single-group view: one MIXED group with `blocks` free. */
static inline void
tv_init(struct tv *t, uint32_t max_batch, uint32_t max_seqs, uint32_t blocks)
{
	memset(t, 0, sizeof *t);
	t->v.group = 0;
	t->v.n_groups = 1;
	t->v.groups = t->groups;
	t->groups[0].role = PHASED_ROLE_MIXED;
	t->groups[0].n_devices = 1;
	t->groups[0].free_blocks = blocks;
	t->groups[0].total_blocks = blocks;
	t->v.max_batch_tokens = max_batch;
	t->v.max_seqs = max_seqs;
	t->v.block_size = 16;
	t->v.reqs = t->reqs;
	t->v.hist = t->hist;
	t->v.now_ns = 1000000000ULL;
	tv_plan_reset(t);
}

/* Add a request; computed/generated decide its state; returns it. */
static inline struct phased_request *
tv_add(struct tv *t, uint64_t id, uint32_t group, uint32_t prompt,
    uint32_t computed, uint32_t generated)
{
	struct phased_request	*r = &t->reqs[t->v.n_reqs++];
	uint32_t		 bs = t->v.block_size;

	memset(r, 0, sizeof *r);
	r->id = id;
	r->arrival_ns = id * 1000;
	r->prompt_tokens = prompt;
	r->computed_tokens = computed;
	r->generated_tokens = generated;
	r->max_tokens = generated + 256;
	if (computed == 0) {
		r->state = PHASED_REQ_WAITING;
		r->group = PHASED_GROUP_NONE;
	} else if (computed < prompt) {
		r->state = PHASED_REQ_PREFILLING;
		r->group = group;
		r->kv_tokens = computed;
	} else {
		r->state = PHASED_REQ_DECODING;
		r->group = group;
		r->kv_tokens = prompt + generated - 1;
	}
	r->kv_blocks = (r->kv_tokens + bs - 1) / bs;
	return (r);
}

#endif
