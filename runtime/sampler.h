/* sampler.h: turning a row of logits into the next token. */
#ifndef PHASED_SAMPLER_H
#define PHASED_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/*
 * The chain, in order: repetition penalty over the last repeat_last_n
 * tokens of the history; then, unless greedy, top-k, top-p and min-p on
 * the softmax of the penalised logits, temperature on the survivors, and a
 * draw from the request's own PRNG.  temperature 0 (or top_k 1) is greedy:
 * the highest logit, ties going to the lowest id.  The same parameters,
 * seed, logits and history always give the same token.
 */
struct sampler_params {
	float		 temperature;	/* 0 = greedy; 0..100 */
	int32_t		 top_k;		/* 0 = off; >= n_vocab is off too */
	float		 top_p;		/* 1 = off; 0..1 */
	float		 min_p;		/* 0 = off; 0..1, relative to the top */
	float		 repeat_penalty;/* 1 = off; 0.01..100 */
	int32_t		 repeat_last_n;	/* history window; 0 = off */
	uint64_t	 seed;
};

#define SAMPLER_REPEAT_LAST_N_DEFAULT	64
#define SAMPLER_REPEAT_LAST_N_MAX	(1 << 20)
#define SAMPLER_TEMPERATURE_MAX		100.0f
#define SAMPLER_PENALTY_MIN		0.01f
#define SAMPLER_PENALTY_MAX		100.0f

struct sampler;

/* Fill p with the defaults: greedy, no filters, no penalty, window 64. */
void		 sampler_params_init(struct sampler_params *p);
/* Check every field; -1 and *cause ("top_p 1.5 is out of range 0..1"). */
int		 sampler_params_check(const struct sampler_params *, char **cause);

/* A sampler for one request; the params must have passed the check. */
struct sampler	*sampler_create(const struct sampler_params *, int n_vocab);
void		 sampler_free(struct sampler *);

/*
 * Pick the next token from n_vocab logits (modified in place by the
 * penalty and temperature).  history holds the tokens so far (prompt and
 * output); ids outside the vocabulary in it are ignored.
 */
int32_t		 sampler_sample(struct sampler *, float *logits,
		    const int32_t *history, size_t n_history);

/*
 * The distribution sampler_sample would draw from, without drawing:
 * probs[i] for every id (0 for those filtered out, summing to 1; greedy
 * puts 1 on the chosen token).  logits are modified as for sampling.
 */
void		 sampler_dist(struct sampler *, float *logits,
		    const int32_t *history, size_t n_history, float *probs);

/* Most alternatives sampler_logprobs() reports. */
#define SAMPLER_TOP_LOGPROBS_MAX	20

/*
 * Log probabilities from raw logits (before penalty and temperature, as
 * the model gave them): *lp gets id's, top_ids/top_lps the top_n likeliest
 * (at most SAMPLER_TOP_LOGPROBS_MAX), most likely first, ties to the lower
 * id.  Returns how many alternatives were written.
 */
int		 sampler_logprobs(const float *logits, int n_vocab, int32_t id,
		    int top_n, float *lp, int32_t *top_ids, float *top_lps);

#endif
