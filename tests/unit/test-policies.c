/*
 * test-policies.c: the plans of each bundled policy on synthetic views (no
 * model), property tests over random views, the automatic chunk size of
 * chunked-prefill on a synthetic cost model, and the plan validator's
 * message for each class of invalid plan.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "policy_host.h"
#include "tap.h"
#include "policy-testutil.h"

/* Index of request id in the plan's entries, or -1. */
static int
entry_of(const struct tv *t, uint64_t id)
{
	uint32_t	i;

	for (i = 0; i < t->p.n_entries; i++)
		if (t->p.entries[i].id == id)
			return ((int)i);
	return (-1);
}

/* Whether request id is preempted by the plan. */
static int
preempted(const struct tv *t, uint64_t id)
{
	uint32_t	i;

	for (i = 0; i < t->p.n_preempt; i++)
		if (t->p.preempt[i] == id)
			return (1);
	return (0);
}

/* Tokens planned: all, prefill only. */
static uint32_t
plan_tokens(const struct tv *t, int prefill_only)
{
	uint32_t	i, n = 0;
	int		at;

	for (i = 0; i < t->p.n_entries; i++) {
		at = -1;
		for (uint32_t j = 0; j < t->v.n_reqs; j++)
			if (t->reqs[j].id == t->p.entries[i].id)
				at = j;
		if (prefill_only && at >= 0 &&
		    t->reqs[at].state == PHASED_REQ_DECODING)
			continue;
		n += t->p.entries[i].n_tokens;
	}
	return (n);
}

/* Decodes on the planned group, and the KV blocks they need. */
static uint32_t
count_decodes(const struct tv *t, uint64_t *need)
{
	uint32_t	i, n = 0;

	*need = 0;
	for (i = 0; i < t->v.n_reqs; i++) {
		if (t->reqs[i].state == PHASED_REQ_DECODING &&
		    t->reqs[i].group == t->v.group) {
			n++;
			*need += phased_blocks_needed(&t->v, &t->reqs[i], 1);
		}
	}
	return (n);
}

/* Whether every decode on the group has its one token (or was preempted). */
static int
decodes_served(const struct tv *t, int allow_preempt)
{
	uint32_t	i;
	int		e;

	for (i = 0; i < t->v.n_reqs; i++) {
		if (t->reqs[i].state != PHASED_REQ_DECODING ||
		    t->reqs[i].group != t->v.group)
			continue;
		e = entry_of(t, t->reqs[i].id);
		if (e >= 0 && t->p.entries[e].n_tokens == 1)
			continue;
		if (allow_preempt && preempted(t, t->reqs[i].id))
			continue;
		return (0);
	}
	return (1);
}

/*
 * A random single-group view.  Decodes never exceed the sequence or token
 * limits (the engine only admits what plans allowed); KV is ample, enough
 * for the decodes, or short.
 */
static int
random_view(struct tv *t)
{
	static const uint32_t	batch[] = { 64, 128, 256, 512, 1024, 2048,
				    4096 };
	uint32_t		n, i, decodes = 0, kind, prompt, max_batch;
	uint32_t		max_seqs;
	uint64_t		need;
	struct phased_request	*r;

	max_batch = batch[rnd(0, 6)];
	max_seqs = rnd(4, 64);
	tv_init(t, max_batch, max_seqs, 0);
	t->v.iteration = rnd(0, 1000);
	n = rnd(0, 60);
	for (i = 0; i < n; i++) {
		prompt = rng() % 8 == 0 ? rnd(1, 6000) : rnd(1, 600);
		kind = rnd(0, 99);
		if (kind < 40 && decodes < max_seqs && decodes < max_batch) {
			tv_add(t, 100 + i, 0, prompt, prompt, rnd(1, 300));
			decodes++;
		} else if (kind < 55 && prompt > 1)
			tv_add(t, 100 + i, 0, prompt, rnd(1, prompt - 1), 0);
		else if (kind < 60) {
			r = tv_add(t, 100 + i, 0, prompt, prompt, 5);
			r->state = PHASED_REQ_FINISHED;
		} else
			tv_add(t, 100 + i, 0, prompt, 0, 0);
	}
	count_decodes(t, &need);
	kind = rnd(0, 9);
	if (kind < 3)
		t->groups[0].free_blocks = 1000000;
	else if (kind < 8)
		t->groups[0].free_blocks = need + rnd(0, 400);
	else
		t->groups[0].free_blocks = rnd(0, need + 4);
	return (kind < 3 ? 2 : kind < 8 ? 1 : 0);
}

/* Every plan of every policy on random views is valid; shared properties. */
static void
test_random_properties(void)
{
	static const char *specs[][2] = {
		{ "fcfs", "" },
		{ "decode-reserved", "" },
		{ "decode-reserved", "max_prefill_tokens=64 prefill_every=3" },
		{ "chunked-prefill", "" },
		{ "chunked-prefill", "budget=16" },
		{ "chunked-prefill", "budget=100" },
		{ "chunked-prefill", "budget=2048" },
		{ "chunked-prefill", "tbt_target_ms=20" },
		{ "chunked-prefill", "ttft_ms=2000 tbt_factor=2" },
		{ "decode-reserved", "tbt_p99_ms=50" },
		{ "disaggregated", "" },
		{ "example", "" },
	};
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol;
	char		 err[256];
	size_t		 s;
	int		 iter, kv, invalid, unserved, over, notwhole, order;
	int		 lazy, share;
	uint32_t	 budget, d, dp, pre, i, j;
	uint64_t	 need;

	for (s = 0; s < sizeof specs / sizeof specs[0]; s++) {
		pol = load(specs[s][0], specs[s][1]);
		rng_state = 0x9e3779b97f4a7c15ULL + s;
		invalid = unserved = over = notwhole = order = lazy = share = 0;
		budget = strcmp(specs[s][0], "chunked-prefill") == 0 ?
		    (strstr(specs[s][1], "budget=") ? (uint32_t)atoi(
		    strstr(specs[s][1], "budget=") + 7) : 0) : 0;
		if (strstr(specs[s][1], "tbt_target_ms"))
			budget = 0;
		for (iter = 0; iter < 3000; iter++) {
			kv = random_view(t);
			/* The example declines when KV is short: fallback. */
			if (plan(pol, t) != 0 && kv == 0 &&
			    strcmp(specs[s][0], "example") == 0)
				continue;
			err[0] = '\0';
			if (plan(pol, t) != 0 ||
			    plan_validate(&t->v, &t->p, err, sizeof err) != 0) {
				if (invalid++ == 0)
					diag("%s %s: view %d: %s", specs[s][0],
					    specs[s][1], iter, err);
				continue;
			}
			d = count_decodes(t, &need);
			pre = plan_tokens(t, 1);
			/* Every running decode, when KV allows it. */
			if (strcmp(specs[s][0], "example") != 0 &&
			    !decodes_served(t, kv == 0))
				unserved++;
			if (kv > 0 && t->p.n_preempt != 0)
				unserved++;
			/* chunked-prefill: never over its budget. */
			dp = plan_tokens(t, 0) - pre;	/* decodes planned */
			if (budget != 0 && (plan_tokens(t, 0) > (dp > budget ?
			    dp : budget) || (dp >= budget && pre != 0))) {
				if (over++ == 0)
					diag("%s: view %d: %u tokens, %u decodes,"
					    " %u prefill", specs[s][1], iter,
					    plan_tokens(t, 0), d, pre);
			}
			/* With ample KV it fills the budget when it can. */
			if (budget != 0 && kv == 2) {
				uint64_t	work = 0;
				uint32_t	lim = budget < t->v.max_batch_tokens ?
						    budget : t->v.max_batch_tokens;

				for (i = 0; i < t->v.n_reqs; i++)
					if (t->reqs[i].state ==
					    PHASED_REQ_WAITING ||
					    t->reqs[i].state ==
					    PHASED_REQ_PREFILLING)
						work += phased_req_remaining(
						    &t->reqs[i]);
				if (d < lim && t->p.n_entries < t->v.max_seqs &&
				    plan_tokens(t, 0) < (work + d < lim ?
				    work + d : lim))
					lazy++;
			}
			/* decode-reserved with a share: within it. */
			if (strstr(specs[s][1], "max_prefill_tokens=64") && d > 0 &&
			    (pre > 64 || (t->v.iteration % 3 != 0 && pre != 0)))
				share++;
			if (strcmp(specs[s][0], "fcfs") != 0 ||
			    t->p.n_preempt != 0)
				continue;
			/* fcfs: whole prompts, in strict arrival order. */
			for (i = 0; i < t->p.n_entries; i++) {
				for (j = 0; j < t->v.n_reqs; j++) {
					const struct phased_request *r =
					    &t->reqs[j];

					if (r->id != t->p.entries[i].id ||
					    r->state == PHASED_REQ_DECODING)
						continue;
					if (t->p.entries[i].n_tokens !=
					    phased_req_remaining(r) &&
					    phased_req_remaining(r) <=
					    t->v.max_batch_tokens)
						notwhole++;
				}
			}
			for (i = 0, j = 0; i < t->v.n_reqs; i++) {
				const struct phased_request *r = &t->reqs[i];

				if (r->state != PHASED_REQ_WAITING &&
				    r->state != PHASED_REQ_PREFILLING)
					continue;
				if (entry_of(t, r->id) < 0)
					j = 1;
				else if (j)
					order++;
			}
		}
		is_int(invalid, 0, "%s %s: 3000 random plans pass plan_validate",
		    specs[s][0], specs[s][1]);
		if (strcmp(specs[s][0], "example") != 0)
			is_int(unserved, 0, "%s %s: every running decode planned",
			    specs[s][0], specs[s][1]);
		if (budget != 0) {
			is_int(over, 0, "%s %s: never over budget", specs[s][0],
			    specs[s][1]);
			is_int(lazy, 0, "%s %s: fills the budget when work and "
			    "KV allow", specs[s][0], specs[s][1]);
		}
		if (strstr(specs[s][1], "max_prefill_tokens=64"))
			is_int(share, 0, "%s %s: prefill stays in its share",
			    specs[s][0], specs[s][1]);
		if (strcmp(specs[s][0], "fcfs") == 0) {
			is_int(notwhole, 0, "fcfs: whole prompts only");
			is_int(order, 0, "fcfs: strict arrival order");
		}
		policy_close(pol);
	}
	free(t);
}

/* fcfs on hand-built views. */
static void
test_fcfs(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol = load("fcfs", "");

	tv_init(t, 512, 16, 1000);
	tv_add(t, 1, 0, 20, 20, 4);
	tv_add(t, 2, 0, 30, 30, 9);
	tv_add(t, 3, 0, 300, 0, 0);
	tv_add(t, 4, 0, 100, 0, 0);
	tv_add(t, 5, 0, 200, 0, 0);
	tv_add(t, 6, 0, 10, 0, 0);
	plan(pol, t);
	is_int(t->p.n_entries, 4, "fcfs: 2 decodes + 2 whole prompts");
	is_int(t->p.entries[2].id, 3, "fcfs: oldest prompt first");
	is_int(t->p.entries[2].n_tokens, 300, "fcfs: whole prompt of 300");
	is_int(t->p.entries[3].n_tokens, 100, "fcfs: whole prompt of 100");
	ok(entry_of(t, 6) < 0, "fcfs: a short later prompt does not overtake");

	tv_init(t, 512, 16, 1000);
	tv_add(t, 1, 0, 20, 20, 4);
	tv_add(t, 2, 0, 5000, 0, 0);
	plan(pol, t);
	is_int(t->p.n_entries, 2, "fcfs: oversized prompt admitted");
	is_int(t->p.entries[1].n_tokens, 511, "fcfs: oversized prompt chunked "
	    "to what the batch has left");
	ok(plan_validate(&t->v, &t->p, NULL, 0) == 0, "fcfs: plan valid");

	/* KV short: the newest running request is preempted. */
	tv_init(t, 512, 16, 0);
	tv_add(t, 1, 0, 32, 32, 1);	/* 32 tokens in 2 full blocks */
	tv_add(t, 2, 0, 32, 32, 1);
	plan(pol, t);
	is_int(t->p.n_preempt, 1, "fcfs: one preemption when KV is full");
	is_int(t->p.preempt[0], 2, "fcfs: the newest is preempted");
	is_int(t->p.n_entries, 1, "fcfs: the oldest decodes");
	ok(plan_validate(&t->v, &t->p, NULL, 0) == 0, "fcfs: plan valid");
	policy_close(pol);
	free(t);
}

/* decode-reserved on hand-built views. */
static void
test_decode_reserved(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol = load("decode-reserved",
			    "max_prefill_tokens=100 prefill_every=4");

	tv_init(t, 512, 16, 1000);
	tv_add(t, 1, 0, 20, 20, 4);
	tv_add(t, 2, 0, 300, 0, 0);
	t->v.iteration = 8;
	plan(pol, t);
	is_int(t->p.n_entries, 2, "decode-reserved: decode + prefill");
	is_int(t->p.entries[0].id, 1, "decode-reserved: decode first");
	is_int(t->p.entries[1].n_tokens, 100, "decode-reserved: prefill "
	    "capped at max_prefill_tokens");
	t->v.iteration = 9;
	plan(pol, t);
	is_int(t->p.n_entries, 1, "decode-reserved: no prefill off cadence");
	is_int(t->p.entries[0].id, 1, "decode-reserved: decode still runs");

	tv_init(t, 512, 16, 1000);
	tv_add(t, 2, 0, 300, 0, 0);
	t->v.iteration = 9;
	plan(pol, t);
	is_int(plan_tokens(t, 0), 300, "decode-reserved: without decodes "
	    "prefill uses the batch");
	policy_close(pol);
	free(t);
}

/* chunked-prefill with a fixed budget on hand-built views. */
static void
test_chunked(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol = load("chunked-prefill", "budget=256 order=arrival");
	struct policy	*srt = load("chunked-prefill", "budget=256");

	tv_init(t, 4096, 16, 1000);
	tv_add(t, 1, 0, 20, 20, 4);
	tv_add(t, 2, 0, 20, 20, 4);
	tv_add(t, 3, 0, 20, 20, 4);
	tv_add(t, 4, 0, 1000, 0, 0);
	tv_add(t, 5, 0, 50, 0, 0);
	plan(pol, t);
	is_int(t->p.n_entries, 4, "chunked: 3 decodes + 1 chunk");
	is_int(t->p.entries[3].n_tokens, 253, "chunked: chunk fills the budget");
	/* By default the short prompt goes first, the long one takes the rest. */
	plan(srt, t);
	is_int(t->p.n_entries, 5, "chunked shortest: 3 decodes + 2 prompts");
	is_int(t->p.entries[3].id, 5, "chunked shortest: the short prompt first");
	is_int(t->p.entries[3].n_tokens, 50, "chunked shortest: all of it");
	is_int(t->p.entries[4].id, 4, "chunked shortest: then the long one");
	is_int(t->p.entries[4].n_tokens, 203, "chunked shortest: the rest of "
	    "the budget");
	policy_close(srt);

	tv_init(t, 4096, 16, 1000);
	tv_add(t, 1, 0, 20, 20, 4);
	tv_add(t, 2, 0, 140, 40, 0);
	tv_add(t, 3, 0, 500, 0, 0);
	plan(pol, t);
	is_int(t->p.n_entries, 3, "chunked: decode + two prompts");
	is_int(t->p.entries[1].n_tokens, 100, "chunked: rest of the older "
	    "prompt");
	is_int(t->p.entries[2].n_tokens, 155, "chunked: start of the next");
	policy_close(pol);
	free(t);
}

/* Synthetic iteration cost in ms: a + b*P + c*D. */
static double
cost(double a, double b, double c, uint32_t p, uint32_t d)
{
	return (a + b * p + c * d);
}

/* A view with 8 decodes and a long prompt, history from a cost model. */
static uint32_t
auto_chunk(struct policy *pol, struct tv *t, double b, double noise,
    int outlier)
{
	uint32_t	i, d;

	tv_init(t, 16384, 64, 1000000);
	for (i = 0; i < 8; i++)
		tv_add(t, 1 + i, 0, 20, 20, 4);
	tv_add(t, 100, 0, 100000, 0, 0);
	t->v.n_hist = 48;
	for (i = 0; i < 48; i++) {
		struct phased_iter_stat *h = &t->hist[i];

		h->prefill_tokens = (i * 397) % 2001;
		h->decode_tokens = d = 4 + i % 9;
		h->n_seqs = d + 1;
		h->duration_ns = (uint64_t)(1e6 * cost(5, b, 0.1,
		    h->prefill_tokens, d) * (1 + noise * (2 * rndf() - 1)));
	}
	if (outlier)
		t->hist[20].duration_ns = 500000000;
	plan(pol, t);
	return (plan_tokens(t, 1));
}

/* The automatic chunk size of chunked-prefill on a synthetic cost model. */
static void
test_auto(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol = load("chunked-prefill", "tbt_target_ms=30");
	uint32_t	 c1, c2, c3, p, i, j, n;
	double		 b, ideal, worst, sum;

	/* Noise-free: (30 - 5 - 0.8) / b. */
	c1 = auto_chunk(pol, t, 0.01, 0, 0);
	c2 = auto_chunk(pol, t, 0.04, 0, 0);
	diag("auto chunk: %u at 0.01 ms/token, %u at 0.04 ms/token", c1, c2);
	ok(c1 >= 2350 && c1 <= 2420, "auto: chunk %u near 2420 at 0.01 "
	    "ms/token", c1);
	ok(c2 >= 585 && c2 <= 605, "auto: chunk %u near 605 at 0.04 ms/token",
	    c2);
	ok(c2 < c1, "auto: higher cost per token, smaller chunk");
	ok(cost(5, 0.04, 0.1, c2, 8) <= 30, "auto: target respected");

	/* 5% noise and one 500 ms stall in the window. */
	rng_state = 42;
	c3 = auto_chunk(pol, t, 0.01, 0.05, 1);
	diag("auto chunk with noise and an outlier: %u", c3);
	ok(c3 >= 1800 && c3 <= 2420, "auto: robust to noise and an outlier "
	    "(%u)", c3);

	/* Decodes alone over the target: min_chunk keeps prompts moving. */
	tv_init(t, 16384, 64, 1000000);
	for (i = 0; i < 8; i++)
		tv_add(t, 1 + i, 0, 20, 20, 4);
	tv_add(t, 100, 0, 100000, 0, 0);
	t->v.n_hist = 10;
	for (i = 0; i < 10; i++) {
		t->hist[i].prefill_tokens = 100 * i;
		t->hist[i].decode_tokens = 8;
		t->hist[i].duration_ns = (uint64_t)(1e6 * cost(40, 0.01, 0.1,
		    100 * i, 8));
	}
	plan(pol, t);
	is_int(plan_tokens(t, 1), 16, "auto: min_chunk when decodes alone "
	    "exceed the target");
	/* No prefill measured: start small, then grow by at most 3/2. */
	for (i = 0; i < 10; i++)
		t->hist[i].prefill_tokens = 0;
	plan(pol, t);
	is_int(plan_tokens(t, 1), 16, "auto: min_chunk without measurements");
	for (i = 0; i < 10; i++) {
		t->hist[i].prefill_tokens = i == 9 ? 100 : 0;
		t->hist[i].duration_ns = (uint64_t)(1e6 * cost(1, 0.0001, 0.1,
		    t->hist[i].prefill_tokens, 8));
	}
	plan(pol, t);
	is_int(plan_tokens(t, 1), 150, "auto: at most 3/2 the largest "
	    "prefill measured");

	/* Closed loop with 3% noise: converge under the target. */
	for (j = 0; j < 2; j++) {
		b = j == 0 ? 0.01 : 0.03;
		ideal = (30 - 5 - 0.8) / b;
		rng_state = 7 + j;
		tv_init(t, 16384, 64, 1000000);
		for (i = 0; i < 8; i++)
			tv_add(t, 1 + i, 0, 20, 20, 4);
		tv_add(t, 100, 0, 1000000, 0, 0);
		worst = 0;
		sum = 0;
		n = 0;
		for (i = 0; i < 120; i++) {
			plan(pol, t);
			p = plan_tokens(t, 1);
			if (i >= 20) {
				if (cost(5, b, 0.1, p, 8) > worst)
					worst = cost(5, b, 0.1, p, 8);
				sum += p;
				n++;
			}
			if (t->v.n_hist == TV_MAXH) {
				memmove(t->hist, t->hist + 1, (TV_MAXH - 1) *
				    sizeof *t->hist);
				t->v.n_hist--;
			}
			t->hist[t->v.n_hist].prefill_tokens = p;
			t->hist[t->v.n_hist].decode_tokens = 8;
			t->hist[t->v.n_hist].duration_ns = (uint64_t)(1e6 *
			    cost(5, b, 0.1, p, 8) * (1 + 0.03 *
			    (2 * rndf() - 1)));
			t->v.n_hist++;
		}
		diag("closed loop at %.2f ms/token: mean chunk %.0f (ideal "
		    "%.0f), worst iteration %.2f ms", b, sum / n, ideal,
		    worst);
		ok(worst <= 30.0, "closed loop %.2f ms/token: every iteration "
		    "within 30 ms (%.2f)", b, worst);
		ok(sum / n >= 0.8 * ideal, "closed loop %.2f ms/token: mean "
		    "chunk %.0f at least 80%% of the ideal %.0f", b, sum / n,
		    ideal);
	}
	policy_close(pol);
	free(t);
}

/* The borrow flag of a disaggregated plan for group g of view t. */
static int
dg_borrows(struct policy *pol, struct tv *t, uint32_t g)
{
	t->v.group = g;
	plan(pol, t);
	return ((t->p.flags & PHASED_PLAN_BORROW) != 0);
}

/*
 * disaggregated lend=: which groups' plans may borrow idle cores; the flag
 * never changes what is planned; reconfigure switches it in place.
 */
static void
test_disaggregated_lend(void)
{
	struct tv	*t = calloc(1, sizeof *t), *u;
	struct policy	*on = load("disaggregated", "");
	struct policy	*off = load("disaggregated", "lend=off");
	struct policy	*pre = load("disaggregated", "lend=prefill");
	struct policy	*dec = load("disaggregated", "lend=decode");
	struct phased_param		 kv[1];
	struct phased_policy_params	 pp = { 1, kv };
	char		 err[256];
	int		 iter, differ = 0, flag = 0;

	tv_init(t, 2048, 32, 1000);
	t->v.n_groups = 2;
	t->groups[0].role = PHASED_ROLE_PREFILL;
	t->groups[1].role = PHASED_ROLE_DECODE;
	t->groups[1].free_blocks = 1000;
	tv_add(t, 1, 1, 20, 20, 7);
	tv_add(t, 2, 0, 300, 0, 0);
	ok(dg_borrows(on, t, 0) && dg_borrows(on, t, 1),
	    "lend=on (default): both groups may borrow");
	ok(!dg_borrows(off, t, 0) && !dg_borrows(off, t, 1),
	    "lend=off: neither borrows");
	ok(dg_borrows(pre, t, 0) && !dg_borrows(pre, t, 1),
	    "lend=prefill: only the prefill group borrows");
	ok(!dg_borrows(dec, t, 0) && dg_borrows(dec, t, 1),
	    "lend=decode: only the decode group borrows");
	t->v.n_groups = 1;
	t->groups[0].role = PHASED_ROLE_MIXED;
	ok(!dg_borrows(on, t, 0), "one mixed group: nothing to borrow");

	/* Random two-group views: lending changes no entry or migration. */
	u = calloc(1, sizeof *u);
	rng_state = 4321;
	for (iter = 0; iter < 2000; iter++) {
		random_view(t);
		t->v.n_groups = 2;
		t->groups[0].role = PHASED_ROLE_PREFILL;
		t->groups[1].role = PHASED_ROLE_DECODE;
		t->groups[1].free_blocks = rnd(0, 1) ? 1000000 : rnd(0, 50);
		for (uint32_t i = 0; i < t->v.n_reqs; i++)
			if (t->reqs[i].state == PHASED_REQ_DECODING &&
			    rnd(0, 1))
				t->reqs[i].group = 1;
		t->v.group = rnd(0, 1);
		*u = *t;
		u->v.reqs = u->reqs;
		u->v.groups = u->groups;
		u->v.hist = u->hist;
		plan(on, t);
		plan(off, u);
		if ((t->p.flags & PHASED_PLAN_BORROW) == 0 || u->p.flags != 0)
			flag++;
		if (t->p.n_entries != u->p.n_entries ||
		    t->p.n_migrations != u->p.n_migrations ||
		    t->p.n_preempt != u->p.n_preempt ||
		    memcmp(t->e, u->e, t->p.n_entries * sizeof *t->e) != 0 ||
		    memcmp(t->mig, u->mig, t->p.n_migrations *
		    sizeof *t->mig) != 0)
			differ++;
	}
	is_int(flag, 0, "2000 random views: lend=on always asks, off never");
	is_int(differ, 0, "2000 random views: the same plan with and without "
	    "lending");

	/* Reconfigure: applied in place, a bad value keeps the old state. */
	tv_init(t, 2048, 32, 1000);
	t->v.n_groups = 2;
	t->groups[0].role = PHASED_ROLE_PREFILL;
	t->groups[1].role = PHASED_ROLE_DECODE;
	tv_add(t, 1, 0, 300, 0, 0);
	kv[0].key = "lend";
	kv[0].value = "sometimes";
	ok(on->ops->reconfigure != NULL &&
	    on->ops->reconfigure(on->state, &pp, err, sizeof err) == -1,
	    "reconfigure lend=sometimes refused");
	like(err, "lend 'sometimes' is not on, off, prefill or decode",
	    "names the value and the choices");
	ok(dg_borrows(on, t, 0), "refused: still lending");
	kv[0].value = "off";
	ok(on->ops->reconfigure(on->state, &pp, err, sizeof err) == 0 &&
	    !dg_borrows(on, t, 0), "reconfigure lend=off: no longer borrows");
	kv[0].key = "chunk";
	kv[0].value = "8";
	ok(on->ops->reconfigure(on->state, &pp, err, sizeof err) == -1,
	    "reconfigure chunk=8 refused");
	ok(!dg_borrows(on, t, 0) && t->p.n_entries == 1 &&
	    t->e[0].n_tokens == 64, "refused: lend=off and chunk 64 kept");
	free(u);
	policy_close(on);
	policy_close(off);
	policy_close(pre);
	policy_close(dec);
	free(t);
}

/* disaggregated: prefill group, decode group, and the degraded mode. */
static void
test_disaggregated(void)
{
	struct tv	*t = calloc(1, sizeof *t), *u;
	struct policy	*pol = load("disaggregated", "chunk=0");
	struct policy	*cp = load("chunked-prefill", "budget=512");
	char		 err[256];
	uint32_t	 i;
	int		 iter, bad = 0, wrong = 0, same = 0, nomig = 0;

	tv_init(t, 2048, 32, 1000);
	t->v.n_groups = 2;
	t->groups[0].role = PHASED_ROLE_PREFILL;
	t->groups[1].role = PHASED_ROLE_DECODE;
	t->groups[1].free_blocks = 1000;
	tv_add(t, 1, 1, 20, 20, 7);	/* decoding on the decode group */
	tv_add(t, 2, 0, 40, 40, 1);	/* prefill done on the prefill group */
	tv_add(t, 3, 0, 100, 60, 0);	/* prefilling */
	tv_add(t, 4, 0, 300, 0, 0);	/* waiting */

	t->v.group = 0;
	plan(pol, t);
	ok(plan_validate(&t->v, &t->p, err, sizeof err) == 0,
	    "disaggregated: prefill plan valid");
	is_int(t->p.n_migrations, 1, "disaggregated: one migration");
	is_int(t->p.migrations[0].id, 2, "disaggregated: the finished prefill");
	is_int(t->p.migrations[0].from, 0, "disaggregated: from prefill group");
	is_int(t->p.migrations[0].to, 1, "disaggregated: to the decode group");
	is_int(t->p.n_entries, 2, "disaggregated: two prefills");
	is_int(t->p.entries[0].id, 3, "disaggregated: prefilling first");
	is_int(t->p.entries[0].n_tokens, 40, "disaggregated: rest of prompt");
	is_int(t->p.entries[1].n_tokens, 300, "disaggregated: whole prompt");
	ok(entry_of(t, 1) < 0 && entry_of(t, 2) < 0,
	    "disaggregated: no decode on the prefill group");

	t->v.group = 1;
	plan(pol, t);
	ok(plan_validate(&t->v, &t->p, err, sizeof err) == 0,
	    "disaggregated: decode plan valid");
	is_int(t->p.n_entries, 1, "disaggregated: decode group plans its one "
	    "decode");
	is_int(t->p.entries[0].id, 1, "disaggregated: the request it holds");
	is_int(t->p.n_migrations, 0, "disaggregated: decode group migrates "
	    "nothing");

	/* No room on the decode group: the request waits where it is. */
	t->v.group = 0;
	t->groups[1].free_blocks = 0;
	plan(pol, t);
	is_int(t->p.n_migrations, 0, "disaggregated: no migration without room");

	/* Random two-group views. */
	rng_state = 1234;
	for (iter = 0; iter < 2000; iter++) {
		random_view(t);
		t->v.n_groups = 2;
		t->groups[0].role = PHASED_ROLE_PREFILL;
		t->groups[1].role = PHASED_ROLE_DECODE;
		t->groups[1].free_blocks = rnd(0, 3) == 0 ? rnd(0, 50) :
		    1000000;
		for (i = 0; i < t->v.n_reqs; i++)
			if (t->reqs[i].state == PHASED_REQ_DECODING &&
			    rnd(0, 3) != 0)
				t->reqs[i].group = 1;
		t->v.group = rnd(0, 1);
		plan(pol, t);
		if (plan_validate(&t->v, &t->p, err, sizeof err) != 0) {
			if (bad++ == 0)
				diag("view %d: %s", iter, err);
			continue;
		}
		for (i = 0; i < t->p.n_entries; i++) {
			for (uint32_t k = 0; k < t->v.n_reqs; k++) {
				const struct phased_request *r = &t->reqs[k];

				if (r->id != t->p.entries[i].id)
					continue;
				if (t->v.group == 1 ? r->state !=
				    PHASED_REQ_DECODING || r->group != 1 :
				    r->state == PHASED_REQ_DECODING)
					wrong++;
			}
		}
		if (t->v.group == 1 && t->p.n_migrations != 0)
			wrong++;
		if (t->v.group == 0 && t->groups[1].free_blocks == 1000000) {
			for (i = 0; i < t->v.n_reqs; i++)
				if (t->reqs[i].state == PHASED_REQ_DECODING &&
				    t->reqs[i].group == 0 &&
				    t->p.n_migrations == 0)
					nomig++;
		}
	}
	is_int(bad, 0, "disaggregated: 2000 random two-group plans valid");
	is_int(wrong, 0, "disaggregated: each group plans only its phase and "
	    "its requests");
	is_int(nomig, 0, "disaggregated: finished prefills migrate when the "
	    "decode group has room");

	/* One MIXED group: the same plans as chunked-prefill budget=512. */
	u = calloc(1, sizeof *u);
	rng_state = 99;
	for (iter = 0; iter < 500; iter++) {
		random_view(t);
		*u = *t;
		u->v.reqs = u->reqs;
		u->v.groups = u->groups;
		u->v.hist = u->hist;
		plan(pol, t);
		plan(cp, u);
		if (t->p.n_entries != u->p.n_entries ||
		    t->p.n_preempt != u->p.n_preempt ||
		    memcmp(t->e, u->e, t->p.n_entries * sizeof *t->e) != 0)
			same++;
	}
	is_int(same, 0, "disaggregated on one mixed group = chunked-prefill");
	free(u);
	policy_close(cp);
	policy_close(pol);
	free(t);
}

/* A view for the validator cases. */
static void
validator_view(struct tv *t)
{
	struct phased_request	*r;

	tv_init(t, 64, 3, 10);
	t->v.n_groups = 2;
	t->groups[1].role = PHASED_ROLE_DECODE;
	t->groups[1].free_blocks = 10;
	tv_add(t, 1, 0, 20, 20, 5);	/* decoding, 24 tokens in 2 blocks */
	tv_add(t, 2, 0, 100, 40, 0);	/* prefilling, 60 left, 3 blocks */
	tv_add(t, 3, 0, 50, 0, 0);	/* waiting */
	r = tv_add(t, 4, 0, 10, 10, 3);
	r->state = PHASED_REQ_FINISHED;
	tv_add(t, 5, 1, 20, 20, 2);	/* decoding on group 1 */
}

/* Add an entry to a test plan. */
static void
add(struct tv *t, uint64_t id, uint32_t n, uint32_t group)
{
	t->p.entries[t->p.n_entries].id = id;
	t->p.entries[t->p.n_entries].n_tokens = n;
	t->p.entries[t->p.n_entries].group = group;
	t->p.n_entries++;
}

/* Validate the test plan and compare the message. */
static void
expect(struct tv *t, const char *want, const char *what)
{
	char	err[256];
	int	rv;

	rv = plan_validate(&t->v, &t->p, err, sizeof err);
	if (want == NULL) {
		if (!ok(rv == 0, "validator accepts %s", what))
			diag("error: %s", err);
		return;
	}
	ok(rv == -1, "validator refuses %s", what);
	is_str(err, want, "message for %s", what);
}

/* Each class of invalid plan gets its own message. */
static void
test_validator(void)
{
	struct tv	*t = calloc(1, sizeof *t);

	validator_view(t);
	expect(t, NULL, "an empty plan");
	add(t, 1, 1, 0); add(t, 2, 30, 0); add(t, 3, 20, 0);
	expect(t, NULL, "a valid plan");

	tv_plan_reset(t);
	add(t, 99, 1, 0);
	expect(t, "entry for unknown request 99", "an unknown id");
	tv_plan_reset(t);
	add(t, 2, 61, 0);
	expect(t, "request 2 is prefilling: given 61 tokens, remaining prompt "
	    "is 60", "too many prompt tokens");
	tv_plan_reset(t);
	add(t, 3, 0, 0);
	expect(t, "request 3 is waiting: given 0 tokens, remaining prompt is "
	    "50", "zero tokens");
	tv_plan_reset(t);
	add(t, 1, 1, 0); add(t, 1, 1, 0);
	expect(t, "duplicate entry for request 1", "a duplicate");
	tv_plan_reset(t);
	add(t, 2, 60, 0); add(t, 3, 50, 0);
	expect(t, "plan has 110 tokens, over the batch limit of 64",
	    "over the token budget");
	tv_plan_reset(t);
	add(t, 1, 1, 0); add(t, 2, 1, 0); add(t, 3, 1, 0); add(t, 5, 1, 1);
	expect(t, "plan has 4 sequences, over the limit of 3",
	    "too many sequences");
	tv_plan_reset(t);
	t->groups[0].free_blocks = 2;
	add(t, 3, 50, 0);
	expect(t, "plan needs 4 KV blocks on group 0 which has 2 free "
	    "(2 + 0 preempted)", "over KV");
	t->p.preempt[t->p.n_preempt++] = 2;
	expect(t, NULL, "the same plan once a preemption frees KV");
	t->groups[0].free_blocks = 10;
	tv_plan_reset(t);
	add(t, 1, 1, 1);
	expect(t, "entry for request 1 names group 1 but group 0 is being "
	    "planned", "an entry for another group");
	tv_plan_reset(t);
	add(t, 5, 1, 0);
	expect(t, "request 5 is on group 1, not group 0",
	    "a request on another group");
	tv_plan_reset(t);
	add(t, 1, 2, 0);
	expect(t, "request 1 is decoding: given 2 tokens, must be exactly 1",
	    "a decode given 2 tokens");
	tv_plan_reset(t);
	add(t, 4, 1, 0);
	expect(t, "request 4 is finished: it cannot be scheduled",
	    "a finished request");
	tv_plan_reset(t);
	t->p.preempt[t->p.n_preempt++] = 3;
	expect(t, "preemption of request 3 which is waiting, not running on "
	    "group 0", "preempting a waiting request");
	tv_plan_reset(t);
	t->p.preempt[t->p.n_preempt++] = 1;
	add(t, 1, 1, 0);
	expect(t, "request 1 named twice (entry after a preemption)",
	    "a preempted request also scheduled");
	tv_plan_reset(t);
	t->p.migrations[0] = (struct phased_migration){ 1, 0, 1 };
	t->p.n_migrations = 1;
	expect(t, NULL, "a migration to the decode group");
	t->groups[1].free_blocks = 1;
	expect(t, "migrations need 2 KV blocks on group 1 which has 1 free",
	    "a migration over the destination's KV");
	t->groups[1].free_blocks = 10;
	t->p.migrations[0] = (struct phased_migration){ 2, 0, 1 };
	expect(t, "migration of request 2 which is prefilling: only a request "
	    "whose prefill is done can move", "migrating a prefill");
	t->p.migrations[0] = (struct phased_migration){ 1, 0, 0 };
	expect(t, "migration of request 1 to group 0: not another group "
	    "(0..1)", "migrating to the same group");
	tv_plan_reset(t);
	t->v.group = 1;
	add(t, 3, 10, 1);
	expect(t, "request 3: group 1 has role decode and cannot prefill",
	    "prefill on a decode group");
	tv_plan_reset(t);
	add(t, 5, 1, 1);
	expect(t, NULL, "a decode on the decode group");
	tv_plan_reset(t);
	t->p.n_entries = TV_MAXR + 1;
	expect(t, "plan has 129 entries, over the capacity of 128",
	    "a count past the capacity");
	t->v.group = 2;
	tv_plan_reset(t);
	expect(t, "group 2 being planned does not exist (2 groups)",
	    "a view for a group that does not exist");

	/* plan_fcfs always makes a valid plan. */
	{
		int	i, bad = 0;
		char	err[256];

		rng_state = 5;
		for (i = 0; i < 3000; i++) {
			random_view(t);
			tv_plan_reset(t);
			plan_fcfs(&t->v, &t->p);
			if (plan_validate(&t->v, &t->p, err, sizeof err) != 0 &&
			    bad++ == 0)
				diag("plan_fcfs view %d: %s", i, err);
		}
		is_int(bad, 0, "plan_fcfs: 3000 random plans valid");
	}
	free(t);
}

int
main(void)
{
	const char	*e;

	log_init(1, 0, "test-policies");
	if ((e = getenv("POLICY_BUILD_DIR")) != NULL)
		builddir = e;
	test_fcfs();
	test_decode_reserved();
	test_chunked();
	test_auto();
	test_disaggregated();
	test_disaggregated_lend();
	test_random_properties();
	test_validator();
	done_testing();
}
