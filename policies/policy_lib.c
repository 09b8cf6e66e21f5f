/* policy_lib.c: decode and prefill planning shared by the bundled policies. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_lib.h"

/* Start a budget from the view's limits for the group being planned. */
void
pl_budget_init(struct pl_budget *b, const struct phased_view *v)
{
	memset(b, 0, sizeof *b);
	b->tokens = v->max_batch_tokens;
	b->seqs = v->max_seqs;
	if (v->group < v->n_groups)
		b->blocks = v->groups[v->group].free_blocks;
	b->cut = v->n_reqs;
}

/* Whether the group being planned may prefill (its role is not DECODE). */
int
pl_can_prefill(const struct phased_view *v)
{
	return (v->group < v->n_groups &&
	    v->groups[v->group].role != PHASED_ROLE_DECODE);
}

/*
 * Plan one token for every decode on the group.  Decodes come first in
 * every bundled policy: a running decode is never delayed for prefill work.
 * When the free KV blocks cannot hold one more token for each of them, the
 * most recently arrived running requests are preempted (their KV is freed and
 * they are recomputed later), as vLLM does, until the rest fit.
 */
uint32_t
pl_decodes(const struct phased_view *v, struct phased_plan *p,
    struct pl_budget *b)
{
	const struct phased_request	*r;
	uint64_t			 need = 0, avail = b->blocks;
	uint32_t			 i, n = 0, cut = v->n_reqs;

	for (i = 0; i < v->n_reqs; i++) {
		r = &v->reqs[i];
		if (r->state == PHASED_REQ_DECODING && r->group == v->group)
			need += phased_blocks_needed(v, r, 1);
	}
	while (need > avail && cut > 0) {
		r = &v->reqs[--cut];
		if (!phased_req_running_on(r, v->group))
			continue;
		if (phased_plan_preempt(p, r->id) != 0)
			break;
		avail += r->kv_blocks;
		if (r->state == PHASED_REQ_DECODING)
			need -= phased_blocks_needed(v, r, 1);
		b->no_admit = 1;
	}
	b->cut = cut;
	b->blocks = avail;

	for (i = 0; i < cut; i++) {
		r = &v->reqs[i];
		if (r->state != PHASED_REQ_DECODING || r->group != v->group)
			continue;
		/* Only when the engine's limits shrank below the running set. */
		if (b->tokens == 0 || b->seqs == 0)
			break;
		if (phased_blocks_needed(v, r, 1) > b->blocks)
			continue;
		if (phased_plan_add(p, v, r->id, 1) != 0)
			break;
		b->blocks -= phased_blocks_needed(v, r, 1);
		b->tokens--;
		b->seqs--;
		n++;
	}
	b->decodes += n;
	return (n);
}

/* Largest n <= want whose KV fits in the blocks left. */
static uint32_t
pl_fit_kv(const struct phased_view *v, const struct phased_request *r,
    uint32_t want, uint64_t blocks)
{
	uint64_t	cap;

	cap = ((uint64_t)r->kv_blocks + blocks) * v->block_size;
	if (cap <= r->kv_tokens)
		return (0);
	cap -= r->kv_tokens;
	return (cap < want ? (uint32_t)cap : want);
}

/* The view qsort compares in; per thread, as engine loops plan in parallel. */
static __thread const struct phased_view *pl_sort_view;

/* Order two request indices by remaining prompt, then by arrival. */
static int
pl_cmp_remaining(const void *a, const void *b)
{
	uint32_t	ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
	uint32_t	ra = phased_req_remaining(&pl_sort_view->reqs[ia]);
	uint32_t	rb = phased_req_remaining(&pl_sort_view->reqs[ib]);

	if (ra != rb)
		return (ra < rb ? -1 : 1);
	return (ia < ib ? -1 : ia > ib);
}

/*
 * The request indices of a view, least remaining prompt first (ties in
 * arrival order); NULL when out of memory.
 */
static uint32_t *
pl_order_shortest(const struct phased_view *v)
{
	uint32_t	*ord;
	uint32_t	 i;

	if ((ord = malloc(v->n_reqs * sizeof *ord)) == NULL)
		return (NULL);
	for (i = 0; i < v->n_reqs; i++)
		ord[i] = i;
	pl_sort_view = v;
	qsort(ord, v->n_reqs, sizeof *ord, pl_cmp_remaining);
	pl_sort_view = NULL;
	return (ord);
}

/*
 * Plan prefill work in arrival order: requests prefilling on the group and
 * waiting requests (admitted to it), at most `limit` tokens in all.  In
 * PL_WHOLE mode each gets its whole remaining prompt or nothing, and the
 * first that does not fit stops admission (strict FCFS); a prompt longer than
 * max_batch_tokens could never fit whole and is chunked instead.  In
 * PL_CHUNK mode each gets as much as is left, so one long prompt is split
 * across iterations and several prompts can share one.  PL_CHUNK_SHORT
 * chunks too but serves the prompts with the least left to prefill first,
 * so a short chat turn is not queued behind the chunks of a long document
 * (the long prompt loses only the few tokens the short ones take).
 */
static uint32_t
pl_prefill_ord(const struct phased_view *v, struct phased_plan *p,
    struct pl_budget *b, uint32_t limit, enum pl_prefill_mode mode,
    const uint32_t *given, uint32_t n_given)
{
	const struct phased_request	*r;
	uint32_t			 i, k, rem, avail, n, total = 0;
	uint32_t			 need, whole, *ord = NULL, n_ord = v->n_reqs;
	int64_t				 slack;

	if (!pl_can_prefill(v) || v->block_size == 0)
		return (0);
	/*
	 * Blocks not promised to the prompts already being prefilled: a new
	 * prompt is admitted only if its whole KV fits in them, so partial
	 * prefills can never hold every block while none of them can finish.
	 */
	slack = (int64_t)b->blocks;
	for (i = 0; i < b->cut; i++) {
		r = &v->reqs[i];
		if (r->state == PHASED_REQ_PREFILLING && r->group == v->group)
			slack -= phased_blocks_needed(v, r,
			    phased_req_remaining(r));
	}
	if (given == NULL && mode == PL_CHUNK_SHORT && v->n_reqs > 1 &&
	    (ord = pl_order_shortest(v)) == NULL)
		mode = PL_CHUNK;	/* out of memory: arrival order */
	if (given != NULL)
		n_ord = n_given;
	for (k = 0; k < n_ord; k++) {
		i = given != NULL ? given[k] : ord != NULL ? ord[k] : k;
		if (i >= v->n_reqs)
			continue;
		r = &v->reqs[i];
		if (r->state == PHASED_REQ_PREFILLING) {
			if (r->group != v->group || i >= b->cut)
				continue;
		} else if (r->state == PHASED_REQ_WAITING) {
			if (b->no_admit || r->group != PHASED_GROUP_NONE)
				continue;
		} else
			continue;
		if ((rem = phased_req_remaining(r)) == 0)
			continue;
		avail = b->tokens < limit - total ? b->tokens : limit - total;
		if (avail == 0 || b->seqs == 0)
			break;

		if (rem <= avail)
			n = rem;
		else if (mode != PL_WHOLE || rem > v->max_batch_tokens)
			n = avail;
		else
			break;	/* head of line waits for a whole iteration */

		whole = phased_blocks_needed(v, r, rem);
		if (r->state == PHASED_REQ_WAITING && whole > slack)
			break;	/* its whole prompt could not be held */
		need = phased_blocks_needed(v, r, n);
		if (need > b->blocks) {
			if (mode == PL_WHOLE && n == rem)
				break;
			if ((n = pl_fit_kv(v, r, n, b->blocks)) == 0)
				break;
			need = phased_blocks_needed(v, r, n);
		}
		if (phased_plan_add(p, v, r->id, n) != 0)
			break;
		b->blocks -= need;
		b->tokens -= n;
		b->seqs--;
		total += n;
		if (r->state == PHASED_REQ_WAITING)
			slack -= whole;
		if (mode == PL_WHOLE && n < rem)
			break;	/* a chunked head of line takes the rest */
	}
	free(ord);
	b->prefill += total;
	return (total);
}

/* Plan prefill work in arrival order (or shortest first), at most limit. */
uint32_t
pl_prefill(const struct phased_view *v, struct phased_plan *p,
    struct pl_budget *b, uint32_t limit, enum pl_prefill_mode mode)
{
	return (pl_prefill_ord(v, p, b, limit, mode, NULL, 0));
}

/* Plan prefill chunks for the requests ord[0..n) in that order. */
uint32_t
pl_prefill_in_order(const struct phased_view *v, struct phased_plan *p,
    struct pl_budget *b, uint32_t limit, const uint32_t *ord, uint32_t n)
{
	return (pl_prefill_ord(v, p, b, limit, PL_CHUNK, ord, n));
}

/* Parse an integer parameter within [min, max]; -1 and err on failure. */
int
pl_param_uint(const struct phased_param *kv, uint64_t min, uint64_t max,
    uint64_t *out, char *err, size_t errlen)
{
	const char		*s = kv->value;
	char			*end;
	unsigned long long	 v;

	errno = 0;
	if (*s < '0' || *s > '9') {
		snprintf(err, errlen, "%s '%s' is not an integer", kv->key, s);
		return (-1);
	}
	v = strtoull(s, &end, 10);
	if (*end != '\0') {
		snprintf(err, errlen, "%s '%s' is not an integer", kv->key, s);
		return (-1);
	}
	if (errno == ERANGE || v < min || v > max) {
		snprintf(err, errlen, "%s %s is out of range %llu..%llu", kv->key,
		    s, (unsigned long long)min, (unsigned long long)max);
		return (-1);
	}
	*out = v;
	return (0);
}

/* Parse a real parameter within [min, max]; -1 and err on failure. */
int
pl_param_real(const struct phased_param *kv, double min, double max,
    double *out, char *err, size_t errlen)
{
	const char	*s = kv->value;
	char		*end;
	double		 v;

	errno = 0;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || !isfinite(v)) {
		snprintf(err, errlen, "%s '%s' is not a number", kv->key, s);
		return (-1);
	}
	if (errno == ERANGE || v < min || v > max) {
		snprintf(err, errlen, "%s %s is out of range %g..%g", kv->key, s,
		    min, max);
		return (-1);
	}
	*out = v;
	return (0);
}

/* Report an unknown parameter key, listing the valid ones. */
int
pl_param_unknown(const struct phased_param *kv, const char *valid, char *err,
    size_t errlen)
{
	if (valid == NULL || *valid == '\0')
		snprintf(err, errlen, "unknown parameter '%s' (this policy "
		    "takes none)", kv->key);
	else
		snprintf(err, errlen, "unknown parameter '%s' (expected %s)",
		    kv->key, valid);
	return (-1);
}

/* Parse order=shortest|arrival into the chunking mode it selects. */
int
pl_param_order(const struct phased_param *kv, enum pl_prefill_mode *mode,
    char *err, size_t errlen)
{
	if (strcmp(kv->value, "shortest") == 0)
		*mode = PL_CHUNK_SHORT;
	else if (strcmp(kv->value, "arrival") == 0)
		*mode = PL_CHUNK;
	else {
		snprintf(err, errlen, "order '%s' is not shortest or arrival",
		    kv->value);
		return (-1);
	}
	return (0);
}
