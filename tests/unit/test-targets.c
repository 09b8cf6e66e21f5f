/*
 * test-targets.c: the latency targets of chunked-prefill and
 * decode-reserved: the automatic TBT target derived from the decode-only
 * iteration time, the plan's report, reconfigure() keeping what was
 * learned, and properties over thousands of random views whose history
 * comes from a known cost model (targets respected within stated bounds).
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

/* Reconfigure a loaded policy; its return value, err filled. */
static int
reconf(struct policy *pol, const char *params, char *err, size_t errlen)
{
	struct phased_param		 kv[8];
	struct phased_policy_params	 pp;
	char				*copy, *argv[8], *eq;
	size_t				 i, n;
	int				 rc;

	copy = strdup(params);
	n = split(copy, argv);
	for (i = 0; i < n; i++) {
		eq = strchr(argv[i], '=');
		*eq = '\0';
		kv[i].key = argv[i];
		kv[i].value = eq + 1;
	}
	pp.n = n;
	pp.v = kv;
	err[0] = '\0';
	rc = pol->ops->reconfigure(pol->state, &pp, err, errlen);
	free(copy);
	return (rc);
}

/* Prefill tokens planned. */
static uint32_t
prefill_planned(const struct tv *t)
{
	uint32_t	i, j, n = 0;

	for (i = 0; i < t->p.n_entries; i++)
		for (j = 0; j < t->v.n_reqs; j++)
			if (t->reqs[j].id == t->p.entries[i].id &&
			    t->reqs[j].state != PHASED_REQ_DECODING)
				n += t->p.entries[i].n_tokens;
	return (n);
}

/* Synthetic iteration cost in ms. */
static double
cost(double a, double b, double c, uint32_t p, uint32_t d)
{
	return (a + b * p + c * d);
}

/*
 * A view with `decodes` running decodes and one long prompt, its history
 * from the cost model: `dec_only` decode-only iterations, then prefills.
 */
static void
model_view(struct tv *t, double a, double b, double c, uint32_t decodes,
    uint32_t dec_only, uint32_t n_hist)
{
	uint32_t	i, p;

	tv_init(t, 16384, 64, 1000000);
	for (i = 0; i < decodes; i++)
		tv_add(t, 1 + i, 0, 20, 20, 4);
	tv_add(t, 100, 0, 50000, 0, 0);
	t->v.n_hist = n_hist;
	for (i = 0; i < n_hist; i++) {
		p = i < dec_only ? 0 : 16 + (i * 37) % 300;
		t->hist[i].prefill_tokens = p;
		t->hist[i].decode_tokens = decodes;
		t->hist[i].n_seqs = decodes + (p != 0);
		t->hist[i].duration_ns = (uint64_t)(1e6 * cost(a, b, c, p,
		    decodes));
	}
}

/* The automatic target, the report, and reconfigure keeping state. */
static void
test_auto_target(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*cp = load("chunked-prefill", "");
	struct policy	*dr = load("decode-reserved", "");
	struct policy	*fresh;
	char		 err[256];
	uint32_t	 p;
	double		 want;

	/* Decode-only 30 ms (a 26, c 2, 2 decodes), 0.5 ms per token. */
	model_view(t, 26, 0.5, 2, 2, 8, 40);
	plan(cp, t);
	p = prefill_planned(t);
	diag("automatic: chunk %u, target %.1f ms, predicted %.1f ms", p,
	    t->p.target_ns / 1e6, t->p.predicted_ns / 1e6);
	ok(fabs(t->p.target_ns / 1e6 - 105) < 0.01, "chunked-prefill: "
	    "automatic target is 3.5x the decode-only 30 ms (%.2f)",
	    t->p.target_ns / 1e6);
	want = (105 - 30) / 0.5;
	ok(p >= want - 2 && p <= want, "chunked-prefill: chunk %u fills the "
	    "target (%.0f)", p, want);
	is_int(t->p.chunk_tokens, p, "chunked-prefill: report names the chunk");
	ok(fabs(t->p.predicted_ns / 1e6 - cost(26, 0.5, 2, p, 2)) < 0.05,
	    "chunked-prefill: report forecasts the iteration (%.2f ms)",
	    t->p.predicted_ns / 1e6);
	ok(cost(26, 0.5, 2, p, 2) <= 105.0001, "chunked-prefill: the "
	    "iteration stays within the automatic target");

	plan(dr, t);
	ok(fabs(t->p.target_ns / 1e6 - 105) < 0.01, "decode-reserved: the "
	    "same automatic target without parameters");
	ok(prefill_planned(t) >= want - 2 && prefill_planned(t) <= want,
	    "decode-reserved: chunk %u sized by it", prefill_planned(t));

	/* A slower machine: the target follows the measurement. */
	model_view(t, 56, 0.5, 2, 2, 8, 40);
	fresh = load("chunked-prefill", "");
	plan(fresh, t);
	ok(fabs(t->p.target_ns / 1e6 - 210) < 0.01, "automatic target "
	    "follows a slower decode-only time (%.2f)", t->p.target_ns / 1e6);
	policy_close(fresh);

	/* No decode running: nothing to protect, the whole batch. */
	model_view(t, 26, 0.5, 2, 0, 0, 40);
	plan(cp, t);
	is_int(prefill_planned(t), 16384, "without decodes prefill fills "
	    "the batch");
	is_int(t->p.target_ns, 0, "without decodes no target is reported");

	/* Reconfigure: the learned decode-only time stays. */
	model_view(t, 26, 0.5, 2, 2, 8, 40);
	plan(cp, t);
	ok(reconf(cp, "tbt_factor=2", err, sizeof err) == 0,
	    "reconfigure tbt_factor=2");
	/* History without decode-only iterations: only memory knows 30. */
	model_view(t, 5, 0.5, 2, 2, 0, 40);
	t->v.iteration = 1000;
	plan(cp, t);
	ok(fabs(t->p.target_ns / 1e6 - 60) < 0.01, "reconfigured: 2x the "
	    "learned decode-only time (%.2f)", t->p.target_ns / 1e6);
	fresh = load("chunked-prefill", "tbt_factor=2");
	plan(fresh, t);
	ok(fabs(t->p.target_ns / 1e6 - 18) < 0.01, "a fresh instance only "
	    "has the model's 9 ms (%.2f)", t->p.target_ns / 1e6);
	policy_close(fresh);
	ok(reconf(cp, "tbt_factor=0.5", err, sizeof err) == -1,
	    "reconfigure with a bad value is refused");
	like(err, "tbt_factor 0.5 is out of range 1.2..100", "reconfigure "
	    "names the bad value and the range");
	plan(cp, t);
	ok(fabs(t->p.target_ns / 1e6 - 60) < 0.01, "refused reconfigure "
	    "leaves the parameters (%.2f)", t->p.target_ns / 1e6);
	ok(reconf(cp, "tbt_p99_ms=80", err, sizeof err) == 0,
	    "reconfigure to an explicit target");
	plan(cp, t);
	ok(fabs(t->p.target_ns / 1e6 - 80) < 0.01, "explicit tbt_p99_ms "
	    "used (%.2f)", t->p.target_ns / 1e6);
	ok(reconf(dr, "max_prefill_tokens=10 tbt_p99_ms=5", err,
	    sizeof err) == -1, "decode-reserved: tokens and time shares "
	    "exclude each other");
	like(err, "exclude each other", "decode-reserved: says why");
	policy_close(cp);
	policy_close(dr);
	free(t);
}

/*
 * Run n iterations planned by pol, iteration i costing scale[i % 2] times
 * the model 20 + 0.5 P with two decodes; the worst cost after the 40th.
 */
static double
run_scaled(struct policy *pol, struct tv *t, int n, const double scale[2])
{
	double	worst = 0, tc;
	int	i;

	for (i = 0; i < n; i++) {
		tc = scale[i % 2] * cost(20, 0.5, 0, prefill_planned(t), 2);
		if (i >= 40 && tc > worst)
			worst = tc;
		memmove(t->hist, t->hist + 1, 39 * sizeof *t->hist);
		t->hist[39].prefill_tokens = prefill_planned(t);
		t->hist[39].decode_tokens = 2;
		t->hist[39].duration_ns = (uint64_t)(tc * 1e6);
		t->v.iteration++;
		plan(pol, t);
	}
	return (worst);
}

/* The machine slows down by half: the chunk follows what is measured. */
static void
test_correction(void)
{
	static const double slow[2] = { 1.5, 1.5 };
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*cp = load("chunked-prefill", "tbt_p99_ms=100");
	uint32_t	 p0, p;
	double		 worst;

	model_view(t, 20, 0.5, 0, 2, 8, 40);
	t->v.iteration = 50;
	plan(cp, t);
	p0 = prefill_planned(t);
	/* Every iteration from now on costs 1.5x what the history says. */
	worst = run_scaled(cp, t, 60, slow);
	p = prefill_planned(t);
	diag("slowdown: chunk %u before, %u after, worst iteration %.1f ms "
	    "after 40", p0, p, worst);
	ok(p < p0 * 3 / 4, "chunk shrinks when iterations run over the "
	    "forecast (%u -> %u)", p0, p);
	ok(p >= 70, "but not below what the target allows (%u >= 70)", p);
	ok(worst <= 100.01, "iterations back within the target after 40 "
	    "(%.1f ms)", worst);
	policy_close(cp);
	free(t);
}

/*
 * Iterations of one shape alternate 10% under and over the model: the
 * chunk keeps headroom for the slow ones, so the worst stays in target.
 */
static void
test_spread(void)
{
	static const double noisy[2] = { 0.9, 1.1 };
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*cp = load("chunked-prefill", "tbt_p99_ms=100");
	uint32_t	 p;
	double		 worst;

	model_view(t, 20, 0.5, 0, 2, 8, 40);
	t->v.iteration = 50;
	plan(cp, t);
	worst = run_scaled(cp, t, 80, noisy);
	p = prefill_planned(t);
	diag("+-10%% noise: chunk %u, worst iteration %.1f ms after 40", p,
	    worst);
	ok(worst <= 100.5, "the slow iterations stay within the target "
	    "(%.1f ms)", worst);
	ok(p >= 100, "with a chunk the headroom only trims (%u >= 100)", p);
	policy_close(cp);
	free(t);
}

/*
 * Random views with history from a random cost model: with decodes
 * running, the prefill planned is at most the reported chunk; when the
 * chunk is above min_chunk the true cost of the iteration is within the
 * target (within 2x the target with ttft_ms, the documented stretch); with
 * no decode running and ample KV the prefill fills the batch.
 */
static void
test_properties(void)
{
	static const char *specs[][2] = {
		{ "chunked-prefill", "" },
		{ "chunked-prefill", "tbt_p99_ms=50" },
		{ "chunked-prefill", "tbt_factor=2 min_chunk=4" },
		{ "chunked-prefill", "ttft_ms=500" },
		{ "decode-reserved", "" },
		{ "decode-reserved", "tbt_p99_ms=80 ttft_ms=2000" },
	};
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol;
	char		 err[256];
	size_t		 s;
	int		 iter, invalid, over_chunk, over_target, lazy, nz;
	uint32_t	 i, d, p, work, minc;
	double		 a, b, c, limit, tc;

	for (s = 0; s < sizeof specs / sizeof specs[0]; s++) {
		rng_state = 0x1234567ULL + s;
		invalid = over_chunk = over_target = lazy = nz = 0;
		minc = strstr(specs[s][1], "min_chunk=4") ? 4 : 16;
		for (iter = 0; iter < 2000; iter++) {
			pol = load(specs[s][0], specs[s][1]);
			a = rnd(1, 100);
			b = rnd(1, 2000) / 1000.0;
			c = rnd(0, 50) / 10.0;
			d = rnd(0, 3) == 0 ? 0 : rnd(1, 40);
			model_view(t, a, b, c, d, rnd(0, 20), rnd(3, 64));
			for (i = rnd(0, 5); i > 0; i--)
				tv_add(t, 200 + i, 0, rnd(1, 3000), 0, 0);
			t->v.now_ns = 1000000000ULL + rnd(0, 400) * 1000000ULL;
			t->v.iteration = rnd(0, 1000);
			if (plan(pol, t) != 0 ||
			    plan_validate(&t->v, &t->p, err, sizeof err) != 0) {
				if (invalid++ == 0)
					diag("%s %s: view %d: %s", specs[s][0],
					    specs[s][1], iter, err);
				policy_close(pol);
				continue;
			}
			p = prefill_planned(t);
			if (d > 0 && p > t->p.chunk_tokens && over_chunk++ == 0)
				diag("%s %s: view %d: prefill %u over chunk %u",
				    specs[s][0], specs[s][1], iter, p,
				    t->p.chunk_tokens);
			tc = cost(a, b, c, p, d);
			limit = t->p.target_ns / 1e6 *
			    (strstr(specs[s][1], "ttft") ? 2 : 1);
			if (d > 0 && t->p.target_ns != 0) {
				nz++;
				if (p > minc && tc > limit * 1.0001 + 1e-6 &&
				    over_target++ == 0)
					diag("%s %s: view %d: cost %.2f over "
					    "%.2f (P %u D %u)", specs[s][0],
					    specs[s][1], iter, tc, limit, p, d);
			}
			if (d == 0) {
				work = 0;
				for (i = 0; i < t->v.n_reqs; i++)
					work += phased_req_remaining(
					    &t->reqs[i]);
				if (p < (work < 16384 ? work : 16384) &&
				    t->p.n_entries < t->v.max_seqs)
					lazy++;
			}
			policy_close(pol);
		}
		is_int(invalid, 0, "%s %s: 2000 random plans valid",
		    specs[s][0], specs[s][1]);
		is_int(over_chunk, 0, "%s %s: prefill within the reported "
		    "chunk", specs[s][0], specs[s][1]);
		is_int(over_target, 0, "%s %s: iteration cost within the "
		    "target%s above min_chunk", specs[s][0], specs[s][1],
		    strstr(specs[s][1], "ttft") ? " x2" : "");
		ok(nz > 1000, "%s %s: a target reported in %d views with "
		    "decodes", specs[s][0], specs[s][1], nz);
		is_int(lazy, 0, "%s %s: without decodes prefill fills the "
		    "batch", specs[s][0], specs[s][1]);
	}
	free(t);
}

/* The TTFT target stretches the chunk, at most to twice the TBT target. */
static void
test_ttft(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*tbt = load("chunked-prefill", "tbt_p99_ms=100");
	struct policy	*both = load("chunked-prefill",
			    "tbt_p99_ms=100 ttft_ms=12000");
	uint32_t	 p1, p2, p3;

	/* 50000 tokens left in 11 s: more than 400-token chunks give. */
	model_view(t, 20, 0.2, 0, 2, 8, 40);
	plan(tbt, t);
	p1 = prefill_planned(t);
	plan(both, t);
	p2 = prefill_planned(t);
	diag("ttft: chunk %u without, %u with ttft_ms", p1, p2);
	ok(p2 > p1, "ttft_ms grows the chunk (%u > %u)", p2, p1);
	ok(cost(20, 0.2, 0, p2, 2) <= 200.001, "but the iteration stays "
	    "within 2x the TBT target");
	/* Already late: no stretch. */
	t->v.now_ns = 100ULL * 1000000000ULL;
	plan(both, t);
	p3 = prefill_planned(t);
	is_int(p3, p1, "a prompt past its TTFT target no longer stretches");
	policy_close(tbt);
	policy_close(both);
	free(t);
}

int
main(void)
{
	const char	*e;

	rng_state = 0x2545f4914f6cdd1dULL;
	log_init(1, 0, "test-targets");
	if ((e = getenv("POLICY_BUILD_DIR")) != NULL)
		builddir = e;
	test_auto_target();
	test_correction();
	test_spread();
	test_ttft();
	test_properties();
	done_testing();
}
