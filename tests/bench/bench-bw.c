/*
 * bench-bw: the machine's read bandwidth, the ceiling of batch-1 decode,
 * and its f32 multiply-add rate, the ceiling of F16 and BF16 prefill.
 *
 * usage: bench-bw [-m MiB] [-r reps]
 *
 * Sums a large buffer (default 1 GiB, far beyond the last-level cache)
 * with the loads of the kernels' variant (mem_read_sum: 512-bit under
 * AVX-512, 256-bit under AVX2), in huge pages as the repacked weights
 * are, on 1 and 2 threads, with and without software prefetch at a few
 * distances, and prints the median GB/s of each.  Each
 * thread reads its own contiguous half, as the matrix kernels read their
 * own rows.  Then it times twelve independent chains of vector
 * multiply-adds (the accumulators of a float tile) on 1 and 2 threads and
 * prints GFLOP/s: no kernel that multiplies f32 can beat it.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "memread.h"
#include "quant.h"

struct part {
	const uint8_t	*p;
	size_t		 len;
	int		 pf;		/* prefetch distance in bytes, 0: none */
	int		 fma;		/* 16 or 8: time that multiply-add loop */
	double		 sum;
	pthread_barrier_t *bar;
	double		 secs;
};

/* Nanoseconds of monotonic time. */
static uint64_t
mono_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec);
}

#if defined(__x86_64__)
/* Multiply-adds per chain per call of the peak loops. */
#define FMA_ITERS	20000000L

/*
 * fn(iters): twelve chains of iters multiply-adds on vectors of type vec
 * (ISA isa); the empty asm keeps the compiler from merging the chains,
 * which all compute the same values.  Returns a sum that keeps them live.
 */
#define FMA_PEAK(fn, isa, vec, set1, fmadd, con)			\
__attribute__((target(isa)))						\
static double								\
fn(long iters)								\
{									\
	vec	w = set1(0.999f), x = set1(1e-3f), a0 = set1(0), a1 = a0; \
	vec	a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;	\
	vec	a8 = a0, a9 = a0, a10 = a0, a11 = a0;			\
	long	i;							\
									\
	for (i = 0; i < iters; i++) {					\
		a0 = fmadd(w, x, a0); a1 = fmadd(w, x, a1);		\
		a2 = fmadd(w, x, a2); a3 = fmadd(w, x, a3);		\
		a4 = fmadd(w, x, a4); a5 = fmadd(w, x, a5);		\
		a6 = fmadd(w, x, a6); a7 = fmadd(w, x, a7);		\
		a8 = fmadd(w, x, a8); a9 = fmadd(w, x, a9);		\
		a10 = fmadd(w, x, a10); a11 = fmadd(w, x, a11);		\
		__asm__("" : con(a0), con(a1), con(a2), con(a3), con(a4), \
		    con(a5), con(a6), con(a7), con(a8), con(a9), con(a10), \
		    con(a11));						\
	}								\
	return ((double)(a0[0] + a5[1] + a6[2] + a11[3]));		\
}

FMA_PEAK(fma_avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, "+v")
FMA_PEAK(fma_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, "+x")
#endif

/* Thread body: wait for the others, read the part, time it. */
static void *
part_run(void *arg)
{
	struct part	*pt = arg;
	uint64_t	 t0;

	pthread_barrier_wait(pt->bar);
	t0 = mono_ns();
#if defined(__x86_64__)
	if (pt->fma == 16)
		pt->sum = fma_avx512(FMA_ITERS);
	else if (pt->fma == 8)
		pt->sum = fma_avx2(FMA_ITERS);
	else
#endif
		pt->sum = (double)mem_read_sum(quant_isa(), pt->p, pt->len,
		    (size_t)pt->pf);
	pt->secs = (double)(mono_ns() - t0) / 1e9;
	return (NULL);
}

/*
 * One pass of nth threads over the buffer, GB/s, or with fma (its lanes)
 * of the multiply-add loop, GFLOP/s (wall time of the slowest).
 */
static double
pass(const uint8_t *buf, size_t len, int nth, int pf, int fma)
{
	pthread_t		 th[2];
	struct part		 pt[2];
	pthread_barrier_t	 bar;
	double			 worst = 0.0;
	int			 i;

	pthread_barrier_init(&bar, NULL, (unsigned)nth);
	for (i = 0; i < nth; i++) {
		pt[i].p = buf + (size_t)i * (len / nth);
		pt[i].len = len / nth;
		pt[i].pf = pf;
		pt[i].fma = fma;
		pt[i].bar = &bar;
		if (i > 0)
			pthread_create(&th[i], NULL, part_run, &pt[i]);
	}
	part_run(&pt[0]);
	for (i = 1; i < nth; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < nth; i++)
		worst = pt[i].secs > worst ? pt[i].secs : worst;
	pthread_barrier_destroy(&bar);
	if (pt[0].sum == 1.0)	/* keep the sums alive */
		fputc(' ', stderr);
	if (fma)
		return ((double)FMA_ITERS * 12 * fma * 2 * nth / worst / 1e9);
	return ((double)len / worst / 1e9);
}

/* Compare doubles for qsort. */
static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x < y ? -1 : x > y);
}

int
main(int argc, char **argv)
{
	static const int pfs[] = { 0, 512, 1024, 2048, 4096 };
	size_t		 mib = 1024, len;
	uint8_t		*buf;
	double		 gb[64];
	int		 ch, reps = 7, nth, k, r;

	while ((ch = getopt(argc, argv, "m:r:")) != -1) {
		switch (ch) {
		case 'm':
			mib = strtoul(optarg, NULL, 10);
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: bench-bw [-m MiB] [-r reps]\n");
			return (2);
		}
	}
	if (mib < 16 || reps < 1 || reps > 64) {
		fprintf(stderr, "bench-bw: -m from 16 MiB, -r from 1 to 64\n");
		return (2);
	}
	len = mib << 20;
	if (posix_memalign((void **)&buf, (size_t)2 << 20, len) != 0) {
		fprintf(stderr, "bench-bw: no memory for %zu MiB\n", mib);
		return (1);
	}
#ifdef MADV_HUGEPAGE
	(void)madvise(buf, len, MADV_HUGEPAGE);
#endif
	memset(buf, 1, len);
	printf("buffer %zu MiB, median of %d passes\n", mib, reps);
	printf("%-8s %-12s %8s %8s %8s\n", "threads", "prefetch", "median", "min",
	    "max");
	for (nth = 1; nth <= 2; nth++) {
		for (k = 0; k < (int)(sizeof pfs / sizeof pfs[0]); k++) {
			for (r = 0; r < reps; r++)
				gb[r] = pass(buf, len, nth, pfs[k], 0);
			qsort(gb, reps, sizeof gb[0], cmp_double);
			printf("%-8d %-12d %8.2f %8.2f %8.2f\n", nth, pfs[k],
			    gb[reps / 2], gb[0], gb[reps - 1]);
			fflush(stdout);
		}
	}
#if defined(__x86_64__)
	/* The lanes of the widest multiply-add the CPU has. */
	int lanes = __builtin_cpu_supports("avx512f") ? 16 :
	    __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 8 : 0;
	if (lanes > 0) {
		printf("\n%-8s %-12s %8s %8s %8s\n", "threads", "f32 fma", "median",
		    "min", "max");
		for (nth = 1; nth <= 2; nth++) {
			for (r = 0; r < reps; r++)
				gb[r] = pass(buf, len, nth, 0, lanes);
			qsort(gb, reps, sizeof gb[0], cmp_double);
			printf("%-8d %-12s %8.1f %8.1f %8.1f  GFLOP/s\n", nth,
			    lanes == 16 ? "avx512" : "avx2", gb[reps / 2], gb[0],
			    gb[reps - 1]);
		}
	}
#endif
	free(buf);
	return (0);
}
