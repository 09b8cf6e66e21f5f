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

/* Percentile of sorted 64-bit counts. */
double
percentile_sorted(const uint64_t *v, size_t n, double p)
{
	double	frac;
	size_t	k;

	if (n == 0)
		return (0);
	percentile_pos(n, p, &k, &frac);
	if (frac == 0)
		return ((double)v[k]);
	return ((double)v[k] + frac * ((double)v[k + 1] - (double)v[k]));
}

/* Percentile of sorted doubles. */
double
percentile_sorted_d(const double *v, size_t n, double p)
{
	double	frac;
	size_t	k;

	if (n == 0)
		return (0);
	percentile_pos(n, p, &k, &frac);
	if (frac == 0)
		return (v[k]);
	return (v[k] + frac * (v[k + 1] - v[k]));
}
