/* model-testutil.h: helpers of the tests that run a model's forward pass. */
#ifndef PHASED_MODEL_TESTUTIL_H
#define PHASED_MODEL_TESTUTIL_H

#include <math.h>
#include <stdlib.h>

#include "kvcache.h"
#include "model.h"
#include "tap.h"
#include "threadpool.h"

/* Forward n tokens of one sequence in chunks; logits of the last token. */
static __attribute__((unused)) int
prefill(const struct model *m, struct kv_pool *pool, struct kv_seq *seq,
    const int32_t *tok, int n, int chunk, struct threadpool *tp, float *logits)
{
	struct fwd_entry	 e;
	struct fwd_batch	 b = { &e, 1 };
	char			*cause = NULL;
	int			 i, c;

	for (i = 0; i < n; i += c) {
		c = n - i < chunk ? n - i : chunk;
		if (kv_seq_reserve(pool, seq, c) != 0) {
			diag("reserve failed");
			return (-1);
		}
		e.seq = seq;
		e.tokens = tok + i;
		e.n_tokens = c;
		e.logits = i + c == n ? logits : NULL;
		if (model_forward(m, pool, &b, tp, &cause) != 0) {
			diag("forward: %s", cause);
			free(cause);
			return (-1);
		}
	}
	return (0);
}

/* Largest absolute difference of two float arrays (infinite on NaN). */
static __attribute__((unused)) double
maxdiff(const float *a, const float *b, size_t n)
{
	double	d = 0.0, e;
	size_t	i;

	for (i = 0; i < n; i++) {
		e = fabs((double)a[i] - b[i]);
		if (isnan(e))
			return (INFINITY);
		d = e > d ? e : d;
	}
	return (d);
}

#endif
