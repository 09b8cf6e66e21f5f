/*
 * plan.c: the plan validator and the built-in FCFS fallback.
 *
 * The engine never trusts a plan from a plugin: plan_validate() checks it
 * against the view it was made from, and plan_fcfs() makes a plan that is
 * valid by construction when a plugin's is not.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_host.h"
#include "policy_lib.h"
#include "util.h"

/* An index from request id to its position in the view. */
struct plan_ix {
	uint64_t	id;
	uint32_t	at;
	uint32_t	used;	/* 0, or which plan part named it (1..3) */
};

/* Write a formatted error; always returns -1. */
static int __attribute__((format(printf, 3, 4)))
plan_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list	ap;

	if (err != NULL && errlen != 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return (-1);
}

/* Order index entries by id. */
static int
plan_ix_cmp(const void *a, const void *b)
{
	uint64_t	x = ((const struct plan_ix *)a)->id;
	uint64_t	y = ((const struct plan_ix *)b)->id;

	return ((x > y) - (x < y));
}

/* Find a request id in the index. */
static struct plan_ix *
plan_ix_find(struct plan_ix *ix, uint32_t n, uint64_t id)
{
	struct plan_ix	key = { .id = id };

	return (bsearch(&key, ix, n, sizeof *ix, plan_ix_cmp));
}

/* Name of a request state for messages. */
static const char *
plan_state_name(uint32_t state)
{
	switch (state) {
	case PHASED_REQ_WAITING:
		return ("waiting");
	case PHASED_REQ_PREFILLING:
		return ("prefilling");
	case PHASED_REQ_DECODING:
		return ("decoding");
	case PHASED_REQ_FINISHED:
		return ("finished");
	}
	return ("in an unknown state");
}

/* Name of a group role for messages. */
static const char *
plan_role_name(uint32_t role)
{
	switch (role) {
	case PHASED_ROLE_MIXED:
		return ("mixed");
	case PHASED_ROLE_PREFILL:
		return ("prefill");
	case PHASED_ROLE_DECODE:
		return ("decode");
	}
	return ("unknown");
}

/* Name the plan part that used a request first. */
static const char *
plan_part_name(uint32_t used)
{
	return (used == 1 ? "an entry" : used == 2 ? "a preemption" :
	    "a migration");
}

/* Check the preemptions and count the blocks they free. */
static int
plan_check_preempt(const struct phased_view *v, const struct phased_plan *p,
    struct plan_ix *ix, uint64_t *freed, char *err, size_t errlen)
{
	const struct phased_request	*r;
	struct plan_ix			*x;
	uint32_t			 i;

	for (i = 0; i < p->n_preempt; i++) {
		if ((x = plan_ix_find(ix, v->n_reqs, p->preempt[i])) == NULL)
			return (plan_err(err, errlen, "preemption of unknown "
			    "request %llu", (unsigned long long)p->preempt[i]));
		r = &v->reqs[x->at];
		if (x->used != 0)
			return (plan_err(err, errlen, "request %llu named twice "
			    "(preempted after %s)", (unsigned long long)r->id,
			    plan_part_name(x->used)));
		x->used = 2;
		if (!phased_req_running_on(r, v->group))
			return (plan_err(err, errlen, "preemption of request "
			    "%llu which is %s%s, not running on group %u",
			    (unsigned long long)r->id,
			    plan_state_name(r->state),
			    r->group != v->group && r->group !=
			    PHASED_GROUP_NONE ? " on another group" : "",
			    v->group));
		*freed += r->kv_blocks;
	}
	return (0);
}

/* Check the migrations, including the KV room on each destination. */
static int
plan_check_migrations(const struct phased_view *v,
    const struct phased_plan *p, struct plan_ix *ix, char *err, size_t errlen)
{
	const struct phased_request	*r;
	const struct phased_migration	*m;
	struct plan_ix			*x;
	uint64_t			*want;
	uint32_t			 i, j;

	for (i = 0; i < p->n_migrations; i++) {
		m = &p->migrations[i];
		if ((x = plan_ix_find(ix, v->n_reqs, m->id)) == NULL)
			return (plan_err(err, errlen, "migration of unknown "
			    "request %llu", (unsigned long long)m->id));
		r = &v->reqs[x->at];
		if (x->used != 0)
			return (plan_err(err, errlen, "request %llu named twice "
			    "(migrated after %s)", (unsigned long long)r->id,
			    plan_part_name(x->used)));
		x->used = 3;
		if (r->state != PHASED_REQ_DECODING)
			return (plan_err(err, errlen, "migration of request "
			    "%llu which is %s: only a request whose prefill "
			    "is done can move", (unsigned long long)r->id,
			    plan_state_name(r->state)));
		if (m->from != v->group || r->group != v->group)
			return (plan_err(err, errlen, "migration of request "
			    "%llu from group %u: it is on group %u and group "
			    "%u is being planned", (unsigned long long)r->id,
			    m->from, r->group, v->group));
		if (m->to >= v->n_groups || m->to == m->from)
			return (plan_err(err, errlen, "migration of request "
			    "%llu to group %u: not another group (0..%u)",
			    (unsigned long long)r->id, m->to,
			    v->n_groups - 1));
		if (v->groups[m->to].role == PHASED_ROLE_PREFILL)
			return (plan_err(err, errlen, "migration of request "
			    "%llu to group %u which has role %s",
			    (unsigned long long)r->id, m->to,
			    plan_role_name(v->groups[m->to].role)));
	}
	if (p->n_migrations == 0)
		return (0);
	want = xcalloc(v->n_groups, sizeof *want);
	for (i = 0; i < p->n_migrations; i++) {
		m = &p->migrations[i];
		x = plan_ix_find(ix, v->n_reqs, m->id);
		want[m->to] += v->reqs[x->at].kv_blocks;
	}
	for (j = 0; j < v->n_groups; j++) {
		if (want[j] > v->groups[j].free_blocks) {
			plan_err(err, errlen, "migrations need %llu KV blocks "
			    "on group %u which has %u free",
			    (unsigned long long)want[j], j,
			    v->groups[j].free_blocks);
			free(want);
			return (-1);
		}
	}
	free(want);
	return (0);
}

/* Check the entries and the iteration's totals. */
static int
plan_check_entries(const struct phased_view *v, const struct phased_plan *p,
    struct plan_ix *ix, uint64_t freed, char *err, size_t errlen)
{
	const struct phased_request	*r;
	const struct phased_plan_entry	*e;
	const struct phased_group	*g = &v->groups[v->group];
	struct plan_ix			*x;
	uint64_t			 tokens = 0, blocks = 0;
	uint32_t			 i, rem;

	if (p->n_entries > v->max_seqs)
		return (plan_err(err, errlen, "plan has %u sequences, over the "
		    "limit of %u", p->n_entries, v->max_seqs));
	for (i = 0; i < p->n_entries; i++) {
		e = &p->entries[i];
		if ((x = plan_ix_find(ix, v->n_reqs, e->id)) == NULL)
			return (plan_err(err, errlen, "entry for unknown request "
			    "%llu", (unsigned long long)e->id));
		r = &v->reqs[x->at];
		if (x->used == 1)
			return (plan_err(err, errlen, "duplicate entry for "
			    "request %llu", (unsigned long long)r->id));
		if (x->used != 0)
			return (plan_err(err, errlen, "request %llu named twice "
			    "(entry after %s)", (unsigned long long)r->id,
			    plan_part_name(x->used)));
		x->used = 1;
		if (e->group != v->group)
			return (plan_err(err, errlen, "entry for request %llu "
			    "names group %u but group %u is being planned",
			    (unsigned long long)r->id, e->group, v->group));
		switch (r->state) {
		case PHASED_REQ_DECODING:
			if (r->group != v->group)
				return (plan_err(err, errlen, "request %llu is "
				    "on group %u, not group %u",
				    (unsigned long long)r->id, r->group,
				    v->group));
			if (e->n_tokens != 1)
				return (plan_err(err, errlen, "request %llu is "
				    "decoding: given %u tokens, must be exactly "
				    "1", (unsigned long long)r->id,
				    e->n_tokens));
			break;
		case PHASED_REQ_WAITING:
		case PHASED_REQ_PREFILLING:
			if (r->state == PHASED_REQ_PREFILLING &&
			    r->group != v->group)
				return (plan_err(err, errlen, "request %llu is "
				    "on group %u, not group %u",
				    (unsigned long long)r->id, r->group,
				    v->group));
			if (r->state == PHASED_REQ_WAITING &&
			    r->group != PHASED_GROUP_NONE)
				return (plan_err(err, errlen, "request %llu is "
				    "waiting for group %u, not group %u",
				    (unsigned long long)r->id, r->group,
				    v->group));
			if (g->role == PHASED_ROLE_DECODE)
				return (plan_err(err, errlen, "request %llu: "
				    "group %u has role %s and cannot "
				    "prefill", (unsigned long long)r->id,
				    v->group, plan_role_name(g->role)));
			rem = phased_req_remaining(r);
			if (e->n_tokens < 1 || e->n_tokens > rem)
				return (plan_err(err, errlen, "request %llu is "
				    "%s: given %u tokens, remaining prompt is "
				    "%u", (unsigned long long)r->id,
				    plan_state_name(r->state), e->n_tokens,
				    rem));
			break;
		default:
			return (plan_err(err, errlen, "request %llu is %s: it "
			    "cannot be scheduled", (unsigned long long)r->id,
			    plan_state_name(r->state)));
		}
		tokens += e->n_tokens;
		blocks += phased_blocks_needed(v, r, e->n_tokens);
	}
	if (tokens > v->max_batch_tokens)
		return (plan_err(err, errlen, "plan has %llu tokens, over the "
		    "batch limit of %u", (unsigned long long)tokens,
		    v->max_batch_tokens));
	if (blocks > g->free_blocks + freed)
		return (plan_err(err, errlen, "plan needs %llu KV blocks on "
		    "group %u which has %llu free (%u + %llu preempted)",
		    (unsigned long long)blocks, v->group,
		    (unsigned long long)(g->free_blocks + freed),
		    g->free_blocks, (unsigned long long)freed));
	return (0);
}

/* Check a plan against the view; 0, or -1 with the first problem in err. */
int
plan_validate(const struct phased_view *v, const struct phased_plan *p,
    char *err, size_t errlen)
{
	struct plan_ix	*ix;
	uint64_t	 freed = 0;
	uint32_t	 i;
	int		 rv = -1;

	if (err != NULL && errlen != 0)
		*err = '\0';
	if (v->group >= v->n_groups)
		return (plan_err(err, errlen, "group %u being planned does "
		    "not exist (%u groups)", v->group, v->n_groups));
	if (v->block_size == 0)
		return (plan_err(err, errlen, "view has a block size of 0"));
	if (p->n_entries > p->cap_entries)
		return (plan_err(err, errlen, "plan has %u entries, over the "
		    "capacity of %u", p->n_entries, p->cap_entries));
	if (p->n_preempt > p->cap_preempt)
		return (plan_err(err, errlen, "plan has %u preemptions, over "
		    "the capacity of %u", p->n_preempt, p->cap_preempt));
	if (p->n_migrations > p->cap_migrations)
		return (plan_err(err, errlen, "plan has %u migrations, over "
		    "the capacity of %u", p->n_migrations, p->cap_migrations));
	if (p->n_entries + p->n_preempt + p->n_migrations == 0)
		return (0);

	ix = xcalloc(v->n_reqs, sizeof *ix);
	for (i = 0; i < v->n_reqs; i++) {
		ix[i].id = v->reqs[i].id;
		ix[i].at = i;
	}
	qsort(ix, v->n_reqs, sizeof *ix, plan_ix_cmp);

	if (plan_check_preempt(v, p, ix, &freed, err, errlen) != 0)
		goto out;
	if (plan_check_migrations(v, p, ix, err, errlen) != 0)
		goto out;
	if (plan_check_entries(v, p, ix, freed, err, errlen) != 0)
		goto out;
	rv = 0;
out:
	free(ix);
	return (rv);
}

/* Empty a plan (counts to zero), keeping the arrays. */
void
plan_clear(struct phased_plan *p)
{
	p->n_entries = 0;
	p->n_preempt = 0;
	p->n_migrations = 0;
	p->chunk_tokens = 0;
	p->notices = 0;
	p->flags = 0;
	p->predicted_ns = 0;
	p->target_ns = 0;
}

/*
 * The built-in fallback: every decode on the group (preempting the newest
 * running requests when KV is short), then whole prompts in arrival order,
 * exactly as the fcfs plugin plans.  Valid by construction for any view the
 * engine builds.
 */
void
plan_fcfs(const struct phased_view *v, struct phased_plan *p)
{
	struct pl_budget	b;

	plan_clear(p);
	if (v->group >= v->n_groups || v->block_size == 0)
		return;
	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	pl_prefill(v, p, &b, UINT32_MAX, PL_WHOLE);
}
