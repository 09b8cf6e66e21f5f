/*
 * chunked_prefill.c: Sarathi-Serve style chunked prefill.
 *
 * Each iteration carries at most `budget` tokens: one for every running
 * decode first, then prompt chunks fill the remainder, the request with the
 * least prompt left first (order=arrival: oldest first) so that a short chat
 * turn is not queued behind a long document; a long prompt is split across
 * iterations and the remainder of an iteration can hold chunks of several
 * prompts.  With more running decodes
 * than the budget, all decodes still run (a decode is never delayed) and no
 * prefill does.
 *
 * Automatic mode (tbt_target_ms=T) sizes the prefill chunk from measured
 * iteration times instead.  The cost of an iteration is modelled as
 *
 *	t = a + b * P + c * D
 *
 * (P prompt tokens, D decode sequences; a the fixed cost of a pass, b the cost
 * of one prompt token, c the cost of one decode).  The coefficients are fitted
 * by least squares over the view's ring of recent iterations: the centred 2x2
 * normal equations for b and c with a small ridge term (so a column without
 * variance, e.g. a constant decode count, gives a zero slope instead of
 * noise), then a second fit without the samples whose residual exceeds three
 * robust standard deviations (1.4826 * median absolute residual), so one
 * stalled iteration does not move the model.  The chunk is the largest P
 * with a + b*P + c*D + sigma <= T, sigma being the residual standard
 * deviation of the fit (one sigma of headroom against noise), bounded by
 * min_chunk and max_chunk, and by twice the largest prefill in the window: the
 * model is never extrapolated far beyond what was measured, so the chunk
 * grows geometrically from min_chunk while the history has no prefill.
 * min_chunk keeps prompts moving even when decodes alone exceed the target.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phased/policy.h>

#include "policy_lib.h"

#define CP_MAX_SAMPLES	64

struct cp_state {
	uint32_t	budget;		/* tokens per iteration */
	double		target_ms;	/* 0: fixed budget */
	uint32_t	min_chunk;
	uint32_t	max_chunk;
	enum pl_prefill_mode order;	/* PL_CHUNK_SHORT or PL_CHUNK */
};

/* A fitted cost model, in milliseconds. */
struct cp_model {
	double		a, b, c;	/* fixed, per prompt token, per decode */
	double		sigma;		/* residual standard deviation */
	uint32_t	max_p;		/* largest prefill in the samples */
	int		n;		/* samples used */
};

/* Parse budget, tbt_target_ms, min_chunk and max_chunk. */
static int
cp_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	struct cp_state	*s;
	uint64_t	 n;
	double		 d;
	size_t		 i;
	int		 have_budget = 0, have_chunk = 0;

	if ((s = calloc(1, sizeof *s)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	s->budget = 512;
	s->order = PL_CHUNK_SHORT;
	s->min_chunk = 32;
	s->max_chunk = 8192;
	for (i = 0; i < params->n; i++) {
		const struct phased_param *kv = &params->v[i];

		if (strcmp(kv->key, "budget") == 0) {
			if (pl_param_uint(kv, 16, 65536, &n, err, errlen) != 0)
				goto fail;
			s->budget = n;
			have_budget = 1;
		} else if (strcmp(kv->key, "tbt_target_ms") == 0) {
			if (pl_param_real(kv, 0.1, 60000, &d, err, errlen) != 0)
				goto fail;
			s->target_ms = d;
		} else if (strcmp(kv->key, "min_chunk") == 0) {
			if (pl_param_uint(kv, 1, 65536, &n, err, errlen) != 0)
				goto fail;
			s->min_chunk = n;
			have_chunk = 1;
		} else if (strcmp(kv->key, "max_chunk") == 0) {
			if (pl_param_uint(kv, 1, 65536, &n, err, errlen) != 0)
				goto fail;
			s->max_chunk = n;
			have_chunk = 1;
		} else if (strcmp(kv->key, "order") == 0) {
			if (pl_param_order(kv, &s->order, err, errlen) != 0)
				goto fail;
		} else {
			pl_param_unknown(kv, "budget, tbt_target_ms, min_chunk, "
			    "max_chunk, order", err, errlen);
			goto fail;
		}
	}
	if (s->target_ms == 0 && have_chunk) {
		snprintf(err, errlen, "min_chunk and max_chunk need "
		    "tbt_target_ms");
		goto fail;
	}
	if (s->min_chunk > s->max_chunk) {
		snprintf(err, errlen, "min_chunk %u is above max_chunk %u",
		    s->min_chunk, s->max_chunk);
		goto fail;
	}
	if (s->target_ms != 0 && !have_budget)
		s->budget = 65536;	/* the target, not a budget, limits */
	*state = s;
	return (0);
fail:
	free(s);
	return (-1);
}

/* Least-squares fit of t = a + b*P + c*D over the samples marked in use. */
static int
cp_fit(const double *t, const double *P, const double *D, const int *use,
    int n, struct cp_model *m)
{
	double	mt = 0, mp = 0, md = 0, spp = 0, sdd = 0, spd = 0;
	double	spt = 0, sdt = 0, det, ridge, r, ss = 0;
	int	i, k = 0;

	for (i = 0; i < n; i++) {
		if (!use[i])
			continue;
		mt += t[i]; mp += P[i]; md += D[i];
		k++;
	}
	if (k == 0)
		return (-1);
	mt /= k; mp /= k; md /= k;
	for (i = 0; i < n; i++) {
		double	dp = P[i] - mp, dd = D[i] - md, dt = t[i] - mt;

		if (!use[i])
			continue;
		spp += dp * dp; sdd += dd * dd; spd += dp * dd;
		spt += dp * dt; sdt += dd * dt;
	}
	/* Ridge: a slope without variance in its column comes out zero. */
	ridge = 1e-9 * (spp + sdd) + 1e-12;
	spp += ridge;
	sdd += ridge;
	det = spp * sdd - spd * spd;
	if (!(det > 0) || !isfinite(det))
		return (-1);
	m->b = (spt * sdd - sdt * spd) / det;
	m->c = (sdt * spp - spt * spd) / det;
	m->a = mt - m->b * mp - m->c * md;
	for (i = 0; i < n; i++) {
		if (!use[i])
			continue;
		r = t[i] - (m->a + m->b * P[i] + m->c * D[i]);
		ss += r * r;
	}
	m->sigma = sqrt(ss / (k > 3 ? k - 3 : 1));
	m->n = k;
	return (0);
}

/* Compare doubles for qsort. */
static int
cp_cmp(const void *x, const void *y)
{
	double	a = *(const double *)x, b = *(const double *)y;

	return ((a > b) - (a < b));
}

/* Fit the cost model to the view's iteration history, dropping outliers. */
static int
cp_model(const struct phased_view *v, struct cp_model *m)
{
	double		t[CP_MAX_SAMPLES], P[CP_MAX_SAMPLES], D[CP_MAX_SAMPLES];
	double		res[CP_MAX_SAMPLES], mad;
	int		use[CP_MAX_SAMPLES];
	uint32_t	i, first;
	int		n = 0, j, k;

	memset(m, 0, sizeof *m);
	first = v->n_hist > CP_MAX_SAMPLES ? v->n_hist - CP_MAX_SAMPLES : 0;
	for (i = first; i < v->n_hist; i++) {
		const struct phased_iter_stat *h = &v->hist[i];

		if (h->duration_ns == 0)
			continue;
		t[n] = h->duration_ns / 1e6;
		P[n] = h->prefill_tokens;
		D[n] = h->decode_tokens;
		use[n] = 1;
		if (h->prefill_tokens > m->max_p)
			m->max_p = h->prefill_tokens;
		n++;
	}
	if (n < 3 || m->max_p == 0)
		return (-1);
	if (cp_fit(t, P, D, use, n, m) != 0)
		return (-1);

	/* Drop samples beyond three robust standard deviations, refit. */
	for (j = 0; j < n; j++)
		res[j] = fabs(t[j] - (m->a + m->b * P[j] + m->c * D[j]));
	{
		double	sorted[CP_MAX_SAMPLES];

		memcpy(sorted, res, n * sizeof *sorted);
		qsort(sorted, n, sizeof *sorted, cp_cmp);
		mad = 1.4826 * sorted[n / 2];
	}
	for (j = 0, k = 0; j < n; j++) {
		use[j] = mad == 0 || res[j] <= 3 * mad + 1e-9;
		k += use[j];
	}
	if (k >= 3 && k < n)
		return (cp_fit(t, P, D, use, n, m));
	return (0);
}

/* The largest prefill chunk that keeps the predicted iteration in target. */
static uint32_t
cp_auto_chunk(const struct cp_state *s, const struct phased_view *v,
    uint32_t decodes)
{
	struct cp_model	m;
	double		room, p;
	uint32_t	cap = s->max_chunk;

	if (cp_model(v, &m) != 0)
		return (s->min_chunk);
	if (2ULL * m.max_p < cap)
		cap = 2 * m.max_p;
	if (cap < s->min_chunk)
		cap = s->min_chunk;
	if (m.c < 0)
		m.c = 0;
	room = s->target_ms - m.a - m.c * decodes - m.sigma;
	if (room <= 0)
		return (s->min_chunk);
	if (m.b <= 1e-12)
		return (cap);	/* prefill looks free: grow, measure again */
	p = floor(room / m.b);
	if (p >= cap)
		return (cap);
	if (p <= s->min_chunk)
		return (s->min_chunk);
	return ((uint32_t)p);
}

/* Decodes first, then prompt chunks up to the budget or the target. */
static int
cp_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct cp_state		*s = state;
	struct pl_budget	 b;
	uint32_t		 limit, chunk;

	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	limit = s->budget > b.decodes ? s->budget - b.decodes : 0;
	if (s->target_ms != 0 && limit != 0) {
		chunk = cp_auto_chunk(s, v, b.decodes);
		if (chunk < limit)
			limit = chunk;
	}
	if (limit != 0)
		pl_prefill(v, p, &b, limit, s->order);
	return (0);
}

/* Free the state. */
static void
cp_fini(void *state)
{
	free(state);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "chunked-prefill",
	.describe = "decodes first, prompt chunks fill a token budget or a "
	    "time-between-tokens target",
	.params_help = "budget=N tbt_target_ms=T min_chunk=N max_chunk=N "
	    "order=shortest|arrival",
	.init = cp_init,
	.schedule = cp_schedule,
	.fini = cp_fini,
};
