/* sampler.c: repetition penalty, top-k, top-p, min-p, temperature, draw. */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "util.h"

/*
 * Before top-p sorts the candidates it tries the few whose logit is within
 * this much of the best: if their mass already reaches top_p the cut is
 * the same as over everything, and the full sort is skipped.
 */
#define TOP_P_PREFILTER	16.0f

struct cand {
	float		 logit;
	int32_t		 id;
};

struct sampler {
	struct sampler_params	 p;
	int			 n_vocab;
	uint64_t		 rng[4];	/* xoshiro256** state */
	uint8_t			*seen;		/* n_vocab marks for the penalty */
	struct cand		*cand;		/* n_vocab candidates */
	double			*prob;		/* their probabilities */
};

/* Fill p with the defaults: greedy, no filters, no penalty, window 64. */
void
sampler_params_init(struct sampler_params *p)
{
	memset(p, 0, sizeof *p);
	p->temperature = 0.0f;
	p->top_k = 0;
	p->top_p = 1.0f;
	p->min_p = 0.0f;
	p->repeat_penalty = 1.0f;
	p->repeat_last_n = SAMPLER_REPEAT_LAST_N_DEFAULT;
	p->seed = 0;
}

/* Check every field; -1 and *cause naming the field and its range. */
int
sampler_params_check(const struct sampler_params *p, char **cause)
{
	/* Written so that NaN fails every range test. */
	if (!(p->temperature >= 0.0f &&
	    p->temperature <= SAMPLER_TEMPERATURE_MAX)) {
		set_cause(cause, "temperature %g is out of range 0..%g",
		    (double)p->temperature, (double)SAMPLER_TEMPERATURE_MAX);
		return (-1);
	}
	if (p->top_k < 0) {
		set_cause(cause, "top_k %d is out of range 0..%d", (int)p->top_k,
		    INT32_MAX);
		return (-1);
	}
	if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) {
		set_cause(cause, "top_p %g is out of range 0..1",
		    (double)p->top_p);
		return (-1);
	}
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
		set_cause(cause, "min_p %g is out of range 0..1",
		    (double)p->min_p);
		return (-1);
	}
	if (!(p->repeat_penalty >= SAMPLER_PENALTY_MIN &&
	    p->repeat_penalty <= SAMPLER_PENALTY_MAX)) {
		set_cause(cause, "repeat_penalty %g is out of range %g..%g",
		    (double)p->repeat_penalty, (double)SAMPLER_PENALTY_MIN,
		    (double)SAMPLER_PENALTY_MAX);
		return (-1);
	}
	if (p->repeat_last_n < 0 ||
	    p->repeat_last_n > SAMPLER_REPEAT_LAST_N_MAX) {
		set_cause(cause, "repeat_last_n %d is out of range 0..%d",
		    (int)p->repeat_last_n, SAMPLER_REPEAT_LAST_N_MAX);
		return (-1);
	}
	return (0);
}

/* One step of splitmix64, used to spread the seed over the state. */
static uint64_t
splitmix64(uint64_t *x)
{
	uint64_t	z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/* Rotate left. */
static inline uint64_t
rotl(uint64_t x, int k)
{
	return ((x << k) | (x >> (64 - k)));
}

/* Next 64 bits of xoshiro256**. */
static uint64_t
rng_next(struct sampler *s)
{
	uint64_t	*r = s->rng, out, t;

	out = rotl(r[1] * 5, 7) * 9;
	t = r[1] << 17;
	r[2] ^= r[0];
	r[3] ^= r[1];
	r[1] ^= r[2];
	r[0] ^= r[3];
	r[2] ^= t;
	r[3] = rotl(r[3], 45);
	return (out);
}

/* A sampler for one request. */
struct sampler *
sampler_create(const struct sampler_params *p, int n_vocab)
{
	struct sampler	*s;
	uint64_t	 x;
	int		 i;

	if (n_vocab < 1)
		n_vocab = 1;
	s = xcalloc(1, sizeof *s);
	s->p = *p;
	s->n_vocab = n_vocab;
	x = p->seed;
	for (i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&x);
	s->seen = xcalloc(n_vocab, 1);
	s->cand = xreallocarray(NULL, n_vocab, sizeof *s->cand);
	s->prob = xreallocarray(NULL, n_vocab, sizeof *s->prob);
	return (s);
}

/* Free a sampler. */
void
sampler_free(struct sampler *s)
{
	if (s == NULL)
		return;
	free(s->seen);
	free(s->cand);
	free(s->prob);
	free(s);
}

/* Divide (or multiply, when negative) each recent token's logit once. */
static void
apply_penalty(struct sampler *s, float *logits, const int32_t *hist, size_t n)
{
	float	pen = s->p.repeat_penalty;
	size_t	start, i;
	int32_t	id;

	if (pen == 1.0f || s->p.repeat_last_n == 0 || n == 0)
		return;
	start = n > (size_t)s->p.repeat_last_n ? n - s->p.repeat_last_n : 0;
	for (i = start; i < n; i++) {
		id = hist[i];
		if (id < 0 || id >= s->n_vocab || s->seen[id])
			continue;
		s->seen[id] = 1;
		if (logits[id] > 0.0f)
			logits[id] /= pen;
		else
			logits[id] *= pen;
	}
	for (i = start; i < n; i++) {
		id = hist[i];
		if (id >= 0 && id < s->n_vocab)
			s->seen[id] = 0;
	}
}

/*
 * Highest logit, ties to the lowest id (NaN never wins): the maximum in
 * eight independent lanes (which compilers turn into vector code), then
 * the first id holding it.
 */
static int32_t
argmax(const float *logits, int n)
{
	float	lane[8], m = -INFINITY;
	int	i, k;

	for (k = 0; k < 8; k++)
		lane[k] = -INFINITY;
	for (i = 0; i + 8 <= n; i += 8) {
		for (k = 0; k < 8; k++)
			lane[k] = logits[i + k] > lane[k] ? logits[i + k] : lane[k];
	}
	for (; i < n; i++)
		lane[0] = logits[i] > lane[0] ? logits[i] : lane[0];
	for (k = 0; k < 8; k++)
		m = lane[k] > m ? lane[k] : m;
	for (i = 0; i < n; i++) {
		if (logits[i] == m)
			return (i);
	}
	/* Every logit is NaN or -inf: the first -inf, else 0. */
	for (i = 0; i < n; i++) {
		if (logits[i] == -INFINITY)
			return (i);
	}
	return (0);
}

/* Order candidates by logit, highest first, then by id. */
static int
cand_cmp(const void *a, const void *b)
{
	const struct cand	*x = a, *y = b;

	if (x->logit != y->logit)
		return (x->logit > y->logit ? -1 : 1);
	return (x->id < y->id ? -1 : x->id > y->id);
}

/* True when a ranks after b in cand_cmp's order. */
static inline int
cand_after(const struct cand *a, const struct cand *b)
{
	return (a->logit < b->logit || (a->logit == b->logit && a->id > b->id));
}

/* Sift the root of a heap whose root is its worst candidate down. */
static void
heap_down(struct cand *h, int n, int i)
{
	struct cand	t;
	int		c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && cand_after(&h[c + 1], &h[c]))
			c++;
		if (!cand_after(&h[c], &h[i]))
			break;
		t = h[i];
		h[i] = h[c];
		h[c] = t;
		i = c;
	}
}

/* Keep the k best of n candidates in c[0..k) (unordered); returns k. */
static int
select_top_k(struct cand *c, int n, int k)
{
	int	i;

	if (k >= n)
		return (n);
	/* A heap of the k best so far with the worst at the root. */
	for (i = k / 2 - 1; i >= 0; i--)
		heap_down(c, k, i);
	for (i = k; i < n; i++) {
		if (cand_after(&c[0], &c[i])) {
			c[0] = c[i];
			heap_down(c, k, 0);
		}
	}
	return (k);
}

/*
 * Cut sorted-or-not candidates to the smallest best-first prefix whose
 * probability reaches top_p; leaves them sorted and returns the count.
 */
static int
cut_top_p(struct cand *c, int n, float max, double top_p)
{
	double	sum = 0.0, cum = 0.0;
	int	i, hi;

	for (i = 0; i < n; i++)
		sum += exp((double)c[i].logit - max);
	/* Move the near-best candidates to the front and try them alone. */
	hi = 0;
	for (i = 0; i < n; i++) {
		if (c[i].logit >= max - TOP_P_PREFILTER) {
			struct cand t = c[hi];

			c[hi++] = c[i];
			c[i] = t;
		}
	}
	qsort(c, hi, sizeof *c, cand_cmp);
	for (i = 0; i < hi; i++) {
		cum += exp((double)c[i].logit - max) / sum;
		if (cum >= top_p)
			return (i + 1);
	}
	qsort(c, n, sizeof *c, cand_cmp);
	cum = 0.0;
	for (i = 0; i < n; i++) {
		cum += exp((double)c[i].logit - max) / sum;
		if (cum >= top_p)
			return (i + 1);
	}
	return (n);
}

/*
 * Run the chain up to the draw: fills s->cand/s->prob with the surviving
 * candidates and their probabilities and returns how many, or returns 0
 * and sets *greedy for a deterministic pick.
 */
static int
prepare(struct sampler *s, float *logits, const int32_t *hist, size_t n_hist,
    int32_t *greedy)
{
	const struct sampler_params	*p = &s->p;
	struct cand			*c = s->cand;
	float				 max, t = p->temperature, floor_l;
	double				 sum;
	int				 n = s->n_vocab, i, j;

	apply_penalty(s, logits, hist, n_hist);
	*greedy = argmax(logits, n);
	max = logits[*greedy];
	if (t == 0.0f || p->top_k == 1 || !isfinite(max))
		return (0);

	for (i = j = 0; i < n; i++) {
		if (isnan(logits[i]) || logits[i] == -INFINITY)
			continue;
		c[j].logit = logits[i];
		c[j++].id = i;
	}
	n = j;
	if (p->top_k > 0)
		n = select_top_k(c, n, p->top_k);
	if (p->top_p < 1.0f)
		n = cut_top_p(c, n, max, p->top_p);
	if (p->min_p > 0.0f) {
		/* p_i / p_max >= min_p  <=>  l_i >= max + log(min_p). */
		floor_l = max + logf(p->min_p);
		for (i = j = 0; i < n; i++) {
			if (c[i].logit >= floor_l)
				c[j++] = c[i];
		}
		n = j;
	}
	if (n == 0)
		return (0);

	for (i = 0; i < s->n_vocab; i++)
		logits[i] /= t;
	sum = 0.0;
	for (i = 0; i < n; i++) {
		s->prob[i] = exp(((double)c[i].logit - max) / t);
		sum += s->prob[i];
	}
	for (i = 0; i < n; i++)
		s->prob[i] /= sum;
	return (n);
}

/* Pick the next token. */
int32_t
sampler_sample(struct sampler *s, float *logits, const int32_t *hist,
    size_t n_hist)
{
	double	u, cum = 0.0;
	int32_t	greedy;
	int	n, i;

	n = prepare(s, logits, hist, n_hist, &greedy);
	if (n == 0)
		return (greedy);
	u = (double)(rng_next(s) >> 11) * 0x1.0p-53;
	for (i = 0; i < n; i++) {
		cum += s->prob[i];
		if (u < cum)
			return (s->cand[i].id);
	}
	/* Rounding left u above the total: take the last candidate. */
	return (s->cand[n - 1].id);
}

/* The distribution sampler_sample would draw from, without drawing. */
void
sampler_dist(struct sampler *s, float *logits, const int32_t *hist,
    size_t n_hist, float *probs)
{
	int32_t	greedy;
	int	n, i;

	memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
	n = prepare(s, logits, hist, n_hist, &greedy);
	if (n == 0) {
		probs[greedy] = 1.0f;
		return;
	}
	for (i = 0; i < n; i++)
		probs[s->cand[i].id] = (float)s->prob[i];
}

/* Log probabilities of id and of the top_n likeliest tokens, from raw logits. */
int
sampler_logprobs(const float *logits, int n_vocab, int32_t id, int top_n,
    float *lp, int32_t *top_ids, float *top_lps)
{
	double	 max = -INFINITY, sum = 0, lse;
	int	 i, j, n = 0;

	if (top_n > SAMPLER_TOP_LOGPROBS_MAX)
		top_n = SAMPLER_TOP_LOGPROBS_MAX;
	if (top_n > n_vocab)
		top_n = n_vocab;
	for (i = 0; i < n_vocab; i++)
		if (logits[i] > max)
			max = logits[i];
	for (i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - max);
	lse = max + log(sum);
	*lp = id >= 0 && id < n_vocab ? (float)(logits[id] - lse) : -INFINITY;
	/* Insertion into a short sorted list: top_n is at most 20. */
	for (i = 0; i < n_vocab && top_n > 0; i++) {
		if (n == top_n && !(logits[i] > logits[top_ids[n - 1]]))
			continue;
		j = n < top_n ? n++ : n - 1;
		while (j > 0 && logits[i] > logits[top_ids[j - 1]]) {
			top_ids[j] = top_ids[j - 1];
			j--;
		}
		top_ids[j] = i;
	}
	for (i = 0; i < n; i++)
		top_lps[i] = (float)(logits[top_ids[i]] - lse);
	return (n);
}
