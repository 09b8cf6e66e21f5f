/*
 * bench-bw: the machine's read bandwidth, the ceiling of batch-1 decode.
 *
 * usage: bench-bw [-m MiB] [-r reps]
 *
 * Sums a large buffer (default 1 GiB, far beyond the last-level cache)
 * with AVX-512 loads (AVX2 where the CPU has no AVX-512: on a 2-core Zen
 * 3 the plain loop of 8-byte loads read a fifth less), in huge pages as
 * the repacked weights are, on 1 and 2 threads, with and without software
 * prefetch at a few distances, and prints the median GB/s of each.  Each
 * thread reads its own contiguous half, as the matrix kernels read their
 * own rows.
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

struct part {
	const uint8_t	*p;
	size_t		 len;
	int		 pf;		/* prefetch distance in bytes, 0: none */
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
/* Sum len bytes 256 at a time with four independent accumulators. */
__attribute__((target("avx512f")))
static double
read_avx512(const uint8_t *p, size_t len, int pf)
{
	__m512i	a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	size_t	i;

	for (i = 0; i + 256 <= len; i += 256) {
		if (pf != 0) {
			_mm_prefetch((const char *)p + i + pf, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 64, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 128, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 192, _MM_HINT_T0);
		}
		a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
		a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
		a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
		a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
	}
	a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
	return ((double)_mm512_reduce_add_epi64(a0));
}

/* read_avx512 with 256-bit loads, for CPUs without AVX-512. */
__attribute__((target("avx2")))
static double
read_avx2(const uint8_t *p, size_t len, int pf)
{
	__m256i	a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	__m128i	h;
	size_t	i;

	for (i = 0; i + 128 <= len; i += 128) {
		if (pf != 0) {
			_mm_prefetch((const char *)p + i + pf, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 64, _MM_HINT_T0);
		}
		a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	h = _mm_add_epi64(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1));
	return ((double)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)));
}
#endif

/* Sum len bytes eight at a time (no AVX-512). */
static double
read_plain(const uint8_t *p, size_t len)
{
	const uint64_t	*q = (const uint64_t *)p;
	uint64_t	 s = 0;
	size_t		 i;

	for (i = 0; i < len / 8; i++)
		s += q[i];
	return ((double)s);
}

/* Thread body: wait for the others, read the part, time it. */
static void *
part_run(void *arg)
{
	struct part	*pt = arg;
	uint64_t	 t0;

	pthread_barrier_wait(pt->bar);
	t0 = mono_ns();
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx512f"))
		pt->sum = read_avx512(pt->p, pt->len, pt->pf);
	else if (__builtin_cpu_supports("avx2"))
		pt->sum = read_avx2(pt->p, pt->len, pt->pf);
	else
#endif
		pt->sum = read_plain(pt->p, pt->len);
	pt->secs = (double)(mono_ns() - t0) / 1e9;
	return (NULL);
}

/* One pass of nth threads over the buffer; GB/s (wall time of the slowest). */
static double
pass(const uint8_t *buf, size_t len, int nth, int pf)
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
				gb[r] = pass(buf, len, nth, pfs[k]);
			qsort(gb, reps, sizeof gb[0], cmp_double);
			printf("%-8d %-12d %8.2f %8.2f %8.2f\n", nth, pfs[k],
			    gb[reps / 2], gb[0], gb[reps - 1]);
			fflush(stdout);
		}
	}
	free(buf);
	return (0);
}
