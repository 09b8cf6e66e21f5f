/* percentile.c: percentiles of sorted samples (definition in the header). */
#include "config.h"

#include "percentile.h"

/*
 * Where percentile p of n > 0 sorted values lies: index *k and the fraction
 * of the way to k + 1 (0 when k is the last index).
 */
static void
percentile_pos(size_t n, double p, size_t *k, double *frac)
{
	double	h;

	*frac = 0;
	if (p <= 0) {
		*k = 0;
		return;
	}
	if (p >= 100) {
		*k = n - 1;
		return;
	}
	h = (double)(n - 1) * p / 100.0;
	*k = (size_t)h;
	if (*k >= n - 1)
		*k = n - 1;
	else
		*frac = h - (double)*k;
}

/* Interpolate percentile p of n values that get(v, i) reads. */
static double
percentile_at(const void *v, size_t n, double p,
    double (*get)(const void *, size_t))
{
	double	frac;
	size_t	k;

	if (n == 0)
		return (0);
	percentile_pos(n, p, &k, &frac);
	if (frac == 0)
		return (get(v, k));
	return (get(v, k) + frac * (get(v, k + 1) - get(v, k)));
}

/* Element i of an array of uint64_t, as a double. */
static double
get_u64(const void *v, size_t i)
{
	return ((double)((const uint64_t *)v)[i]);
}

/* Element i of an array of double. */
static double
get_d(const void *v, size_t i)
{
	return (((const double *)v)[i]);
}

/* Percentile of sorted 64-bit counts. */
double
percentile_sorted(const uint64_t *v, size_t n, double p)
{
	return (percentile_at(v, n, p, get_u64));
}

/* Percentile of sorted doubles. */
double
percentile_sorted_d(const double *v, size_t n, double p)
{
	return (percentile_at(v, n, p, get_d));
}
