/* test-sampler.c: greedy, seeded draws, filters, penalty, parameter checks. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "tap.h"

#define NV	8

/* Logits whose softmax is 0.5, 0.25, 0.125, 0.0625, ... (ids shuffled). */
static void
crafted(float *l)
{
	/* id:      0     1     2     3     4     5     6     7 */
	static const int rank[NV] = { 3, 0, 6, 1, 7, 2, 5, 4 };
	int	i;

	for (i = 0; i < NV; i++)
		l[i] = -(float)rank[i] * logf(2.0f);
}

/* Draw n tokens with fresh copies of the crafted logits. */
static void
draw(struct sampler *s, int32_t *out, int n)
{
	float	l[NV];
	int	i;

	for (i = 0; i < n; i++) {
		crafted(l);
		out[i] = sampler_sample(s, l, NULL, 0);
	}
}

/* Probabilities after the chain for params p on the crafted logits. */
static void
dist(const struct sampler_params *p, float *probs)
{
	struct sampler	*s = sampler_create(p, NV);
	float		 l[NV];

	crafted(l);
	sampler_dist(s, l, NULL, 0, probs);
	sampler_free(s);
}

static const float *ref_logits;

/* Order ids by logit, highest first, then by id (for the reference). */
static int
ref_cmp(const void *a, const void *b)
{
	int	x = *(const int *)a, y = *(const int *)b;

	if (ref_logits[x] != ref_logits[y])
		return (ref_logits[x] > ref_logits[y] ? -1 : 1);
	return (x - y);
}

/* Compare top-p over 5000 ids with a brute-force nucleus. */
static void
top_p_large(float step, float top_p)
{
	struct sampler_params	 p;
	struct sampler		*s;
	float			*l = malloc(5000 * sizeof *l);
	float			*pr = malloc(5000 * sizeof *pr);
	int			*idx = malloc(5000 * sizeof *idx);
	double			 z = 0.0, cum = 0.0, tot = 0.0;
	int			 i, want = 0, kept = 0, same = 1;

	for (i = 0; i < 5000; i++) {
		l[i] = -(float)((i * 7) % 50) * step;
		idx[i] = i;
		z += exp((double)l[i]);
	}
	ref_logits = l;
	qsort(idx, 5000, sizeof *idx, ref_cmp);
	while (want < 5000 && cum < top_p)
		cum += exp((double)l[idx[want++]]) / z;

	sampler_params_init(&p);
	p.temperature = 1.0f;
	p.top_p = top_p;
	s = sampler_create(&p, 5000);
	sampler_dist(s, l, NULL, 0, pr);
	for (i = 0; i < 5000; i++) {
		tot += pr[i];
		kept += pr[i] > 0;
	}
	for (i = 0; i < want; i++)
		same &= pr[idx[i]] > 0;
	is_int(kept, want, "top_p %.8g, step %g: nucleus of %d", (double)top_p,
	    (double)step, want);
	ok(same, "the same ids");
	near(tot, 1.0, 1e-5, "probabilities sum to 1");
	sampler_free(s);
	free(l);
	free(pr);
	free(idx);
}

/* Check that params are rejected with exactly the message want. */
static void
rejects(const struct sampler_params *p, const char *want)
{
	char	*cause = NULL;

	ok(sampler_params_check(p, &cause) == -1, "rejected: %s", want);
	is_str(cause, want, "message: %s", want);
	free(cause);
}

/* Log probabilities from raw logits: values, order, ties, the cap. */
static void
test_logprobs(void)
{
	float	 lg[6] = { 1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f };
	float	 lp, top[SAMPLER_TOP_LOGPROBS_MAX];
	int32_t	 ids[SAMPLER_TOP_LOGPROBS_MAX];
	double	 lse = 0;
	int	 i, n;

	for (i = 0; i < 6; i++)
		lse += exp(lg[i]);
	lse = log(lse);
	n = sampler_logprobs(lg, 6, 2, 4, &lp, ids, top);
	is_int(n, 4, "logprobs: four alternatives asked, four given");
	near(lp, 2.0 - lse, 1e-6, "logprobs: the chosen token's log softmax");
	ok(ids[0] == 1 && ids[1] == 3 && ids[2] == 2 && ids[3] == 0,
	    "logprobs: likeliest first, ties to the lower id");
	near(top[0], 3.0 - lse, 1e-6, "logprobs: the top one's value");
	ok(top[0] == top[1] && top[1] > top[2] && top[2] > top[3],
	    "logprobs: in order");
	n = sampler_logprobs(lg, 6, 0, 100, &lp, ids, top);
	is_int(n, 6, "logprobs: never more than the vocabulary");
	n = sampler_logprobs(lg, 6, 0, 0, &lp, ids, top);
	is_int(n, 0, "logprobs: none asked, none given");
	near(lp, 1.0 - lse, 1e-6, "logprobs: still the token's own");
}

int
main(void)
{
	struct sampler_params	 p, bad;
	struct sampler		*s, *s2;
	float			 l[NV], probs[NV], sum;
	int32_t			 a[64], b[64], hist[4];
	int			 i, differ, seen[NV];
	char			*cause = NULL;

	sampler_params_init(&p);
	is_int(sampler_params_check(&p, &cause), 0, "defaults are valid");
	ok(p.temperature == 0.0f, "default is greedy");
	is_int(p.repeat_last_n, 64, "default window 64");

	/* Greedy: argmax, ties to the lowest id. */
	s = sampler_create(&p, NV);
	crafted(l);
	is_int(sampler_sample(s, l, NULL, 0), 1, "greedy picks the top id");
	for (i = 0; i < NV; i++)
		l[i] = 0.0f;
	l[5] = 2.0f;
	l[3] = 2.0f;
	is_int(sampler_sample(s, l, NULL, 0), 3, "tie goes to the lowest id");
	l[0] = NAN;
	is_int(sampler_sample(s, l, NULL, 0), 3, "NaN never wins");
	sampler_free(s);

	/* top_k 1 with a temperature is greedy too. */
	p.temperature = 1.5f;
	p.top_k = 1;
	s = sampler_create(&p, NV);
	draw(s, a, 32);
	for (i = 0, differ = 0; i < 32; i++)
		differ |= a[i] != 1;
	ok(!differ, "top_k 1 always gives the greedy token");
	sampler_free(s);

	/* Same seed, same sequence; other seeds differ. */
	sampler_params_init(&p);
	p.temperature = 1.0f;
	p.seed = 42;
	s = sampler_create(&p, NV);
	s2 = sampler_create(&p, NV);
	draw(s, a, 64);
	draw(s2, b, 64);
	ok(memcmp(a, b, sizeof a) == 0, "same seed gives the same 64 tokens");
	sampler_free(s2);
	p.seed = 43;
	s2 = sampler_create(&p, NV);
	draw(s2, b, 64);
	ok(memcmp(a, b, sizeof a) != 0, "another seed gives other tokens");
	sampler_free(s2);
	sampler_free(s);
	memset(seen, 0, sizeof seen);
	for (i = 0; i < 64; i++)
		seen[a[i]]++;
	ok(seen[1] > 16 && seen[1] < 48, "top token drawn about half the time "
	    "(%d of 64)", seen[1]);

	/* The distributions of the filters on the crafted logits. */
	sampler_params_init(&p);
	p.temperature = 1.0f;
	dist(&p, probs);
	near(probs[1], 0.5 / (1 - 1.0 / 256), 1e-6, "no filter: p(top)");
	near(probs[4], 1.0 / 256 / (1 - 1.0 / 256), 1e-6, "no filter: p(last)");

	p.top_k = 3;
	dist(&p, probs);
	near(probs[1], 4.0 / 7, 1e-6, "top_k 3: renormalised top");
	near(probs[3], 2.0 / 7, 1e-6, "top_k 3: second");
	near(probs[5], 1.0 / 7, 1e-6, "top_k 3: third");
	ok(probs[0] == 0 && probs[2] == 0 && probs[4] == 0 && probs[6] == 0 &&
	    probs[7] == 0, "top_k 3: others masked");

	p.top_k = 0;
	p.top_p = 0.7f;		/* 0.5 + 0.25 reaches it */
	dist(&p, probs);
	near(probs[1], 2.0 / 3, 1e-6, "top_p 0.7: top");
	near(probs[3], 1.0 / 3, 1e-6, "top_p 0.7: second");
	ok(probs[5] == 0 && probs[0] == 0, "top_p 0.7: third and on masked");
	p.top_p = 0.0f;
	dist(&p, probs);
	ok(probs[1] == 1.0f, "top_p 0 keeps only the top");

	p.top_p = 1.0f;
	p.min_p = 0.2f;		/* keeps p >= 0.1: 0.5, 0.25, 0.125 */
	dist(&p, probs);
	near(probs[5], 1.0 / 7, 1e-6, "min_p 0.2 keeps 1/8 (ratio 0.25)");
	ok(probs[0] == 0, "min_p 0.2 masks 1/16 (ratio 0.125)");
	p.min_p = 0.3f;
	dist(&p, probs);
	ok(probs[5] == 0 && probs[3] > 0, "min_p 0.3 masks ratio 0.25, keeps 0.5");

	/* Temperature sharpens or flattens the survivors. */
	sampler_params_init(&p);
	p.temperature = 0.5f;
	p.top_k = 2;
	dist(&p, probs);
	near(probs[1], 0.8, 1e-6, "temperature 0.5 squares the ratio");
	p.temperature = 2.0f;
	dist(&p, probs);
	near(probs[1], 1 / (1 + sqrt(0.5)), 1e-6, "temperature 2 roots it");

	/* Draws only come from the kept set, and cover it. */
	sampler_params_init(&p);
	p.temperature = 1.0f;
	p.top_p = 0.7f;
	p.seed = 7;
	s = sampler_create(&p, NV);
	draw(s, a, 64);
	memset(seen, 0, sizeof seen);
	for (i = 0; i < 64; i++)
		seen[a[i]]++;
	ok(seen[1] + seen[3] == 64 && seen[1] > 0 && seen[3] > 0,
	    "top_p draws cover exactly ids 1 and 3 (%d, %d)", seen[1], seen[3]);
	sampler_free(s);

	/* Large vocabulary: top-p keeps exactly the brute-force nucleus. */
	top_p_large(0.5f, 0.999999f);		/* cut inside the prefilter */
	top_p_large(1.0f, 0.99999994f);		/* cut past it: full sort */

	/* Repetition penalty. */
	sampler_params_init(&p);
	p.repeat_penalty = 2.0f;
	s = sampler_create(&p, NV);
	for (i = 0; i < NV; i++)
		l[i] = 0.0f;
	l[2] = 3.0f;
	l[6] = 2.0f;
	l[7] = -1.0f;
	hist[0] = 2;
	hist[1] = 2;
	hist[2] = 7;
	hist[3] = 99;		/* out of range: ignored */
	is_int(sampler_sample(s, l, hist, 4), 6, "penalised 3.0/2 loses to 2.0");
	near(l[2], 1.5, 1e-7, "positive logit divided once");
	near(l[7], -2.0, 1e-7, "negative logit multiplied");
	near(l[6], 2.0, 1e-7, "unrepeated logit untouched");
	sampler_free(s);
	p.repeat_last_n = 1;	/* only the 99 is in the window */
	s = sampler_create(&p, NV);
	for (i = 0; i < NV; i++)
		l[i] = 0.0f;
	l[2] = 3.0f;
	l[6] = 2.0f;
	is_int(sampler_sample(s, l, hist, 4), 2, "window 1 does not reach id 2");
	sampler_free(s);

	/* Probabilities sum to one after every filter together. */
	sampler_params_init(&p);
	p.temperature = 0.8f;
	p.top_k = 5;
	p.top_p = 0.9f;
	p.min_p = 0.05f;
	dist(&p, probs);
	for (i = 0, sum = 0; i < NV; i++)
		sum += probs[i];
	near(sum, 1.0, 1e-6, "chain sums to 1");

	/* Bad parameters. */
	sampler_params_init(&p);
	bad = p;
	bad.top_p = 1.5f;
	rejects(&bad, "top_p 1.5 is out of range 0..1");
	bad = p;
	bad.top_p = NAN;
	rejects(&bad, "top_p nan is out of range 0..1");
	bad = p;
	bad.temperature = -0.5f;
	rejects(&bad, "temperature -0.5 is out of range 0..100");
	bad = p;
	bad.top_k = -1;
	rejects(&bad, "top_k -1 is out of range 0..2147483647");
	bad = p;
	bad.min_p = 2.0f;
	rejects(&bad, "min_p 2 is out of range 0..1");
	bad = p;
	bad.repeat_penalty = 0.0f;
	rejects(&bad, "repeat_penalty 0 is out of range 0.01..100");
	bad = p;
	bad.repeat_last_n = -3;
	rejects(&bad, "repeat_last_n -3 is out of range 0..1048576");
	test_logprobs();
	done_testing();
}
