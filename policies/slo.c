/*
 * slo.c: schedule for goodput under per-class latency targets.
 *
 * Two classes: interactive (priority below batch_priority, default 10) and
 * batch.  Each has a TTFT target (ttft_ms, batch_ttft_ms) and a TBT target
 * (tbt_ms, automatic like chunked-prefill when not given; batch_tbt_ms,
 * none when not given).  Every iteration:
 *
 *  - the iteration-time target is the TBT target of the strictest class
 *    with a running decode;
 *  - when the cost model (pl_target.c) forecasts that the decodes alone
 *    exceed it, batch decodes are preempted, newest first, until they fit
 *    (their KV is dropped and they are recomputed later): an interactive
 *    decode would otherwise miss its target.  With none left to preempt the
 *    iteration runs over and says so (notice TBT_OVER);
 *  - waiting batch requests are not admitted while one more decode would
 *    break the target (notice ADMISSION_HELD);
 *  - prompts are served by slack: the time left to their TTFT deadline less
 *    the forecast time to prefill what remains.  Those that can still meet
 *    their target come first, least slack first; then those without a
 *    target, by priority then arrival; then those that can no longer meet
 *    it (notice TTFT_LATE): serving a prompt that misses anyway would make
 *    another one miss too;
 *  - the prefill tokens are sized by the cost model to keep the iteration
 *    within the target.
 *
 * A request is never refused by the policy: one that cannot be served in
 * time is queued with a notice that `phasectl policy show' prints; a
 * request's own deadline_ms still ends it with an error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phased/policy.h>

#include "policy_lib.h"

enum { SLO_INTERACTIVE = 0, SLO_BATCH = 1 };

/* The parameters. */
struct slo_conf {
	int32_t		batch_priority;	/* this priority and above: batch */
	double		ttft_ms[2];	/* 0: none */
	double		tbt_ms[2];	/* interactive 0: automatic; batch 0: none */
	struct pl_target target;	/* factor, chunk bounds */
};

struct slo_state {
	struct slo_conf	conf;
	struct pl_learn	learn;
};

/* A prompt waiting or prefilling, with its place in the order. */
struct slo_cand {
	uint32_t	idx;
	int		rank;		/* 0 feasible, 1 no target, 2 late */
	double		key;		/* slack, or priority */
};

/* Parse one target in ms within 0.1..3600000. */
static int
slo_ms(const struct phased_param *kv, double *out, char *err, size_t errlen)
{
	return (pl_param_real(kv, 0.1, 3600000, out, err, errlen));
}

/* Parse the parameters into conf; 0, or -1 with err. */
static int
slo_parse(const struct phased_policy_params *params, struct slo_conf *c,
    char *err, size_t errlen)
{
	uint64_t	n;
	size_t		i;
	int		rc;

	memset(c, 0, sizeof *c);
	c->batch_priority = 10;
	c->ttft_ms[SLO_INTERACTIVE] = 10000;
	pl_target_init(&c->target);
	for (i = 0; i < params->n; i++) {
		const struct phased_param *kv = &params->v[i];

		rc = 0;
		if (strcmp(kv->key, "ttft_ms") == 0)
			rc = slo_ms(kv, &c->ttft_ms[SLO_INTERACTIVE], err,
			    errlen);
		else if (strcmp(kv->key, "tbt_ms") == 0)
			rc = slo_ms(kv, &c->tbt_ms[SLO_INTERACTIVE], err,
			    errlen);
		else if (strcmp(kv->key, "batch_ttft_ms") == 0)
			rc = slo_ms(kv, &c->ttft_ms[SLO_BATCH], err, errlen);
		else if (strcmp(kv->key, "batch_tbt_ms") == 0)
			rc = slo_ms(kv, &c->tbt_ms[SLO_BATCH], err, errlen);
		else if (strcmp(kv->key, "batch_priority") == 0) {
			if (pl_param_uint(kv, 0, 1000, &n, err, errlen) != 0)
				return (-1);
			c->batch_priority = (int32_t)n;
		} else if (strcmp(kv->key, "tbt_factor") == 0 ||
		    strcmp(kv->key, "min_chunk") == 0 ||
		    strcmp(kv->key, "max_chunk") == 0)
			rc = pl_param_target(kv, &c->target, err, errlen) == 1 ?
			    0 : -1;
		else {
			pl_param_unknown(kv, "ttft_ms, tbt_ms, batch_ttft_ms, "
			    "batch_tbt_ms, batch_priority, tbt_factor, "
			    "min_chunk, max_chunk", err, errlen);
			return (-1);
		}
		if (rc != 0)
			return (-1);
	}
	return (pl_target_check(&c->target, err, errlen));
}

/* Parse the parameters, allocate state. */
static int
slo_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	struct slo_state	*s;

	if ((s = calloc(1, sizeof *s)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	if (slo_parse(params, &s->conf, err, errlen) != 0) {
		free(s);
		return (-1);
	}
	*state = s;
	return (0);
}

/* New parameters; the learned times stay. */
static int
slo_reconfigure(void *state, const struct phased_policy_params *params,
    char *err, size_t errlen)
{
	struct slo_state	*s = state;
	struct slo_conf		 c;

	if (slo_parse(params, &c, err, errlen) != 0)
		return (-1);
	s->conf = c;
	return (0);
}

/* The class of a request. */
static int
slo_class(const struct slo_conf *c, const struct phased_view *v,
    const struct phased_request *r)
{
	return (v->abi_minor >= 3 && r->priority >= c->batch_priority ?
	    SLO_BATCH : SLO_INTERACTIVE);
}

/* Order candidates: rank, then key (slack or priority), then arrival. */
static int
slo_cmp(const void *a, const void *b)
{
	const struct slo_cand	*x = a, *y = b;

	if (x->rank != y->rank)
		return (x->rank < y->rank ? -1 : 1);
	if (x->key != y->key)
		return (x->key < y->key ? -1 : 1);
	return (x->idx < y->idx ? -1 : x->idx > y->idx);
}

/* Forecast of an iteration with D decodes and P prompt tokens, in ms. */
static double
slo_forecast(const struct pl_chunk *ch, uint32_t P, uint32_t D)
{
	const struct pl_cost	*m = &ch->cost;

	/* Less 1 us: rounding of the measured times is no excess. */
	return (ch->corr * (m->a + m->b * P + (m->c > 0 ? m->c : 0) * D) +
	    m->sigma - 1e-3);
}

/* Remove the plan entry of request id; whether it had one. */
static int
slo_unplan(struct phased_plan *p, uint64_t id)
{
	uint32_t	i;

	for (i = 0; i < p->n_entries; i++) {
		if (p->entries[i].id != id)
			continue;
		memmove(&p->entries[i], &p->entries[i + 1],
		    (p->n_entries - i - 1) * sizeof *p->entries);
		p->n_entries--;
		return (1);
	}
	return (0);
}

/* Decodes (preempting batch ones for the target), then prompts by slack. */
static int
slo_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct slo_state	*s = state;
	struct slo_conf		*c = &s->conf;
	struct pl_target	 t = c->target;
	struct pl_budget	 b;
	struct pl_chunk		 ch;
	struct slo_cand		*cand;
	uint32_t		*ord, i, k, n = 0, dec[2] = { 0, 0 }, rem, limit;
	uint32_t		 notices = 0, planned;
	double			 dl, est, per;
	int			 cls, top = -1;

	pl_learn_update(&s->learn, v);
	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	for (i = 0; i < b.cut; i++) {
		const struct phased_request *r = &v->reqs[i];

		if (r->state == PHASED_REQ_DECODING && r->group == v->group) {
			cls = slo_class(c, v, r);
			dec[cls]++;
			if (top < 0 || cls < top)
				top = cls;
		}
	}
	/* The strictest class decoding sets the target. */
	t.tbt_ms = top < 0 ? 0 : c->tbt_ms[top];
	if (top == SLO_BATCH && t.tbt_ms == 0)
		t.tbt_ms = 60000;	/* batch only, no target: best effort */
	pl_target_chunk(&t, &s->learn, v, b.decodes, &ch);

	/* Preempt batch decodes, newest first, when the decodes exceed it. */
	if (top == SLO_INTERACTIVE && ch.have_model && ch.target_ms > 0) {
		for (i = b.cut; i-- > 0 && dec[SLO_BATCH] > 0 &&
		    slo_forecast(&ch, 0, b.decodes) > ch.target_ms; ) {
			const struct phased_request *r = &v->reqs[i];

			if (r->state != PHASED_REQ_DECODING ||
			    r->group != v->group ||
			    slo_class(c, v, r) != SLO_BATCH)
				continue;
			/* One the limits left out costs nothing: keep it. */
			if (!slo_unplan(p, r->id))
				continue;
			phased_plan_preempt(p, r->id);	/* capacity >= n_reqs */
			b.blocks += r->kv_blocks + phased_blocks_needed(v, r, 1);
			b.tokens++;
			b.seqs++;
			b.decodes--;
			dec[SLO_BATCH]--;
			notices |= PHASED_NOTICE_PREEMPTED;
		}
		if (slo_forecast(&ch, 0, b.decodes) > ch.target_ms)
			notices |= PHASED_NOTICE_TBT_OVER;
		pl_target_chunk(&t, &s->learn, v, b.decodes, &ch);
	}

	/* The prompts, by slack. */
	if ((cand = calloc(v->n_reqs + 1, sizeof *cand)) == NULL ||
	    (ord = calloc(v->n_reqs + 1, sizeof *ord)) == NULL) {
		free(cand);
		return (-1);
	}
	per = ch.have_model ? ch.corr * (ch.cost.b > 0 ? ch.cost.b : 0) : 0;
	for (i = 0; i < v->n_reqs; i++) {
		const struct phased_request *r = &v->reqs[i];

		if ((rem = phased_req_remaining(r)) == 0)
			continue;
		if (r->state == PHASED_REQ_PREFILLING) {
			if (r->group != v->group || i >= b.cut)
				continue;
		} else if (r->state != PHASED_REQ_WAITING ||
		    r->group != PHASED_GROUP_NONE || b.no_admit)
			continue;
		cls = slo_class(c, v, r);
		/* A batch admission that would break the target waits. */
		if (r->state == PHASED_REQ_WAITING && cls == SLO_BATCH &&
		    top == SLO_INTERACTIVE && ch.have_model &&
		    ch.target_ms > 0 &&
		    slo_forecast(&ch, 0, b.decodes + 1) > ch.target_ms) {
			notices |= PHASED_NOTICE_ADMISSION_HELD;
			continue;
		}
		cand[n].idx = i;
		if (c->ttft_ms[cls] == 0) {
			cand[n].rank = 1;
			cand[n].key = r->priority;
		} else {
			dl = (double)r->arrival_ns / 1e6 + c->ttft_ms[cls] -
			    (double)v->now_ns / 1e6;
			est = rem * per;
			cand[n].key = dl - est;
			cand[n].rank = cand[n].key >= 0 ? 0 : 2;
			if (cand[n].rank == 2) {
				notices |= PHASED_NOTICE_TTFT_LATE;
				cand[n].key = (double)i;
			}
		}
		n++;
	}
	qsort(cand, n, sizeof *cand, slo_cmp);
	for (k = 0; k < n; k++)
		ord[k] = cand[k].idx;
	limit = ch.chunk;
	planned = 0;
	if (limit != 0 && n != 0)
		planned = pl_prefill_in_order(v, p, &b, limit, ord, n);
	free(cand);
	free(ord);
	pl_target_report(&s->learn, v, &ch, planned, b.decodes, p);
	p->notices = notices;
	return (0);
}

/* Free the state. */
static void
slo_fini(void *state)
{
	free(state);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "slo",
	.describe = "per-class TTFT and TBT targets: prompts by slack, chunks "
	    "by the cost model, batch decodes preempted for the target",
	.params_help = "ttft_ms=T tbt_ms=T batch_ttft_ms=T batch_tbt_ms=T "
	    "batch_priority=P tbt_factor=F min_chunk=N max_chunk=N",
	.init = slo_init,
	.schedule = slo_schedule,
	.fini = slo_fini,
	.reconfigure = slo_reconfigure,
};
