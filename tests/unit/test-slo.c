/*
 * test-slo.c: the slo policy: valid plans on thousands of random views (no
 * interactive decode ever preempted or left out, prefill within the
 * reported chunk, batch decodes preempted only while the decodes exceed the
 * target); preemption, the notices, the slack order and admission control
 * on hand-built views with a known cost model.
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

/* Whether id has an entry; whether it is preempted. */
static int
planned(const struct tv *t, uint64_t id)
{
	uint32_t	i;

	for (i = 0; i < t->p.n_entries; i++)
		if (t->p.entries[i].id == id)
			return (1);
	return (0);
}

static int
preempted(const struct tv *t, uint64_t id)
{
	uint32_t	i;

	for (i = 0; i < t->p.n_preempt; i++)
		if (t->p.preempt[i] == id)
			return (1);
	return (0);
}

/* A request with a priority, added as tv_add does. */
static struct phased_request *
add(struct tv *t, uint64_t id, int32_t prio, uint32_t prompt,
    uint32_t computed, uint32_t generated)
{
	struct phased_request	*r = tv_add(t, id, 0, prompt, computed,
				    generated);

	r->priority = prio;
	return (r);
}

/* History from t = a + b*P + c*D with varied P and D. */
static void
history(struct tv *t, double a, double b, double c, uint32_t n)
{
	uint32_t	i;

	t->v.n_hist = n;
	for (i = 0; i < n; i++) {
		t->hist[i].prefill_tokens = (i * 53) % 400;
		t->hist[i].decode_tokens = 1 + (i * 7) % 15;
		t->hist[i].duration_ns = (uint64_t)(1e6 * (a + b *
		    t->hist[i].prefill_tokens + c * t->hist[i].decode_tokens));
	}
}

/* Preemption, notices, slack order and admission on known costs. */
static void
test_cases(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol = load("slo", "tbt_ms=60 ttft_ms=1000");
	uint32_t	 i, kept = 0;

	/* 2 interactive and 10 batch decodes at 10 ms each over 10 ms. */
	tv_init(t, 4096, 64, 1000000);
	t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	history(t, 10, 0.1, 10, 40);
	add(t, 1, 0, 20, 20, 3);
	add(t, 2, 0, 20, 20, 3);
	for (i = 0; i < 10; i++)
		add(t, 10 + i, 50, 20, 20, 3);
	plan(pol, t);
	ok(planned(t, 1) && planned(t, 2) && !preempted(t, 1) &&
	    !preempted(t, 2), "interactive decodes run");
	for (i = 0; i < 10; i++)
		kept += planned(t, 10 + i);
	is_int(kept, 3, "batch decodes kept to what the 60 ms target holds "
	    "(10 + 10 * 5 = 60)");
	is_int(t->p.n_preempt, 7, "the other 7 preempted");
	ok(preempted(t, 19) && preempted(t, 13) && !preempted(t, 12),
	    "the newest batch decodes go first");
	ok(t->p.notices & PHASED_NOTICE_PREEMPTED, "notice: preempted");
	ok(plan_validate(&t->v, &t->p, NULL, 0) == 0, "plan valid");

	/* Only interactive decodes over the target: none preempted. */
	tv_init(t, 4096, 64, 1000000);
	t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	history(t, 10, 0.1, 10, 40);
	for (i = 0; i < 8; i++)
		add(t, 1 + i, 0, 20, 20, 3);
	plan(pol, t);
	is_int(t->p.n_preempt, 0, "interactive decodes are never preempted");
	is_int(t->p.n_entries, 8, "all 8 run");
	ok(t->p.notices & PHASED_NOTICE_TBT_OVER, "notice: tbt target missed");

	/* A batch prompt waits while one more decode breaks the target. */
	tv_init(t, 4096, 64, 1000000);
	t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	history(t, 10, 0.1, 10, 40);
	for (i = 0; i < 5; i++)
		add(t, 1 + i, 0, 20, 20, 3);
	add(t, 50, 50, 30, 0, 0);
	plan(pol, t);
	ok(!planned(t, 50), "batch admission held at the target");
	ok(t->p.notices & PHASED_NOTICE_ADMISSION_HELD, "notice: admission "
	    "held");

	/* Slack: a prompt that can still meet its TTFT goes first. */
	tv_init(t, 4096, 64, 1000000);
	t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	history(t, 10, 0.1, 10, 40);
	add(t, 1, 0, 20, 20, 3);
	add(t, 2, 0, 20000, 0, 0);	/* 2 s of prefill: late */
	add(t, 3, 0, 300, 0, 0);
	t->reqs[1].arrival_ns = t->v.now_ns - 500000000ULL;
	t->reqs[2].arrival_ns = t->v.now_ns - 400000000ULL;
	plan(pol, t);
	ok(planned(t, 3) && t->p.entries[1].id == 3, "the feasible prompt "
	    "first, although younger");
	ok(t->p.notices & PHASED_NOTICE_TTFT_LATE, "notice: a prompt is late");
	policy_close(pol);
	free(t);
}

/* Random views: valid plans and the class rules. */
static void
test_random(void)
{
	static const char *specs[] = { "", "tbt_ms=40 ttft_ms=500",
	    "tbt_ms=5 batch_tbt_ms=100 batch_priority=1", "ttft_ms=100000" };
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol;
	char		 err[256];
	size_t		 s;
	int		 iter, invalid, inter, over, pre_bad;
	uint32_t	 i, n, prio_cut;

	for (s = 0; s < sizeof specs / sizeof specs[0]; s++) {
		pol = load("slo", specs[s]);
		prio_cut = strstr(specs[s], "batch_priority=1") ? 1 : 10;
		rng_state = 77 + s;
		invalid = inter = over = pre_bad = 0;
		for (iter = 0; iter < 3000; iter++) {
			uint32_t pre = 0, d = 0;

			tv_init(t, rnd(16, 4096), rnd(1, 48), rnd(0, 4) == 0 ?
			    rnd(0, 300) : 1000000);
			t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
			t->v.iteration = (uint64_t)iter;
			t->v.now_ns = 1000000000ULL * rnd(1, 5);
			history(t, rnd(1, 40), rnd(1, 100) / 100.0,
			    rnd(0, 200) / 10.0, rnd(0, 50));
			n = rnd(0, 60);
			for (i = 0; i < n; i++) {
				uint32_t p = rnd(1, 2000), k = rnd(0, 2);

				add(t, 1 + i, (int32_t)rnd(0, 20), p,
				    k == 0 ? 0 : k == 1 ? rnd(1, p) : p,
				    k == 2 ? rnd(1, 40) : 0)->arrival_ns =
				    rnd(0, 900) * 1000000ULL;
			}
			if (plan(pol, t) != 0 || plan_validate(&t->v, &t->p,
			    err, sizeof err) != 0) {
				if (invalid++ == 0)
					diag("'%s' view %d: %s", specs[s], iter,
					    err);
				continue;
			}
			for (i = 0; i < t->v.n_reqs; i++) {
				const struct phased_request *r = &t->reqs[i];
				int in = planned(t, r->id);

				if (r->state == PHASED_REQ_DECODING) {
					d += in;
					/* Only KV shortage takes an
					   interactive decode out. */
					if (r->priority < (int32_t)prio_cut &&
					    preempted(t, r->id) &&
					    t->groups[0].free_blocks == 1000000)
						inter++;
					if (r->priority >= (int32_t)prio_cut &&
					    preempted(t, r->id) &&
					    t->p.predicted_ns != 0 &&
					    t->groups[0].free_blocks == 1000000 &&
					    !(t->p.notices &
					    PHASED_NOTICE_PREEMPTED))
						pre_bad++;
				} else if (in) {
					uint32_t e;

					for (e = 0; e < t->p.n_entries; e++)
						if (t->p.entries[e].id == r->id)
							pre += t->p.entries[e].
							    n_tokens;
				}
			}
			if (d > 0 && pre > t->p.chunk_tokens && over++ == 0)
				diag("'%s' view %d: prefill %u over chunk %u",
				    specs[s], iter, pre, t->p.chunk_tokens);
		}
		is_int(invalid, 0, "'%s': 3000 random plans valid", specs[s]);
		is_int(inter, 0, "'%s': no interactive decode preempted with "
		    "ample KV", specs[s]);
		is_int(pre_bad, 0, "'%s': batch preemptions are reported",
		    specs[s]);
		is_int(over, 0, "'%s': prefill within the reported chunk",
		    specs[s]);
		policy_close(pol);
	}
	free(t);
}

int
main(void)
{
	const char	*e;

	rng_state = 0xda942042e4dd58b5ULL;
	log_init(1, 0, "test-slo");
	if ((e = getenv("POLICY_BUILD_DIR")) != NULL)
		builddir = e;
	test_cases();
	test_random();
	done_testing();
}
