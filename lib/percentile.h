/* percentile.h: the one percentile definition, for stats and bench alike. */
#ifndef PHASED_PERCENTILE_H
#define PHASED_PERCENTILE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Percentile of n values sorted ascending, p in [0, 100]: linear
 * interpolation between the closest ranks, as NumPy's default and R's
 * type 7.  With h = (n - 1) p / 100,
 * P(p) = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]).
 * For the values 1..100: p50 = 50.5, p90 = 90.1, p99 = 99.01, p100 = 100.
 * Both return 0 when n is 0.
 */
double	 percentile_sorted(const uint64_t *, size_t n, double p);
double	 percentile_sorted_d(const double *, size_t n, double p);

#endif
