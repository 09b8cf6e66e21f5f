/*
 * bench-tile: the repacked one-token tile of each type on its own, with no
 * activation preparation and no thread pool around it.
 *
 * usage: bench-tile [-T type,...] [-R rows] [-n passes] [-t 1|2]
 *	[-I scalar|avx2|avx512]
 *
 * Packs rows x 2048 random weights, prepares one token's activations once,
 * then calls the kernel's packed function over all rows, 16 a call, passes
 * times.  -t 1 (the default) prints the best of 7 by the thread's CPU
 * clock: with the default 64 rows the weights stay in L2, so this is what
 * the tile's arithmetic allows.  -t 2 splits the rows between two threads
 * that start each pass together and prints the median of 9 by the wall
 * clock: with rows in the tens of thousands, how fast two cores stream the
 * weights from memory through the tile.  -I picks the instruction set
 * whose tiles and layouts run (by default the best the CPU has).
 */
#include "config.h"

#include <sys/mman.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "quant.h"
#include "tensor_type.h"
#include "util.h"
#include "kernel-testutil.h"

#define COLS	2048
#define MAXT	32
#define HUGE	(2 << 20)

struct run {
	struct quant_kernel	 k;
	const uint8_t		*pw;
	const struct qact	*a;
	float			*y;
	int64_t			 rows;
	int			 passes;
	pthread_barrier_t	 bar;
};

struct half {
	struct run	*run;
	int64_t		 r0, r1;
};

/* Seconds on the given clock. */
static double
now(clockid_t clk)
{
	struct timespec	ts;

	clock_gettime(clk, &ts);
	return (ts.tv_sec + ts.tv_nsec * 1e-9);
}

/* Rows [r0, r1) through the tile, 16 a call. */
static void
sweep(const struct run *run, int64_t r0, int64_t r1)
{
	int64_t	r;

	for (r = r0; r < r1; r += 16)
		run->k.pfn(run->pw, COLS, r, r1 - r < 16 ? (int)(r1 - r) : 16, run->a, 0,
		    1, run->y, run->rows);
}

/* One thread's half of every pass, each pass started with the other's. */
static void *
half_main(void *arg)
{
	struct half	*h = arg;
	int		 i;

	for (i = 0; i < h->run->passes; i++) {
		pthread_barrier_wait(&h->run->bar);
		sweep(h->run, h->r0, h->r1);
	}
	return (NULL);
}

/* Order doubles. */
static int
cmp_double(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return (x < y ? -1 : x > y);
}

/* Time one type; 0 when it has no repacked tile on this CPU. */
static int
bench(uint32_t type, int64_t rows, int passes, int nth)
{
	const struct tensor_type_info *ti = tensor_type_get(type);
	struct run	 run;
	struct half	 h[2];
	struct qact	 a;
	pthread_t	 t;
	size_t		 rb = tensor_row_bytes(ti, COLS), pb;
	uint8_t		*w, *pw;
	float		*x;
	void		*abuf;
	double		 s[9], t0;
	int64_t		 r;
	int		 i, j, reps = nth == 1 ? 7 : 9;

	memset(&run, 0, sizeof run);
	run.k = quant_kernel_get(quant_isa(), type);
	if (run.k.pack == NULL || run.k.pfn == NULL)
		return (0);
	w = xmalloc((size_t)rows * rb);
	for (r = 0; r < rows; r++)
		ktu_fill_row(type, w + (size_t)r * rb, COLS);
	pb = run.k.pack(w, rb, rows, COLS, NULL);
	/* Huge pages, as the engine asks for its packed copies (matmul.c). */
	if (posix_memalign((void **)&pw, HUGE, pb) != 0) {
		fprintf(stderr, "%s: no memory for %zu bytes\n", ti->name, pb);
		exit(1);
	}
#ifdef MADV_HUGEPAGE
	if (pb >= HUGE)
		(void)madvise(pw, pb & ~(size_t)(HUGE - 1), MADV_HUGEPAGE);
#endif
	run.k.pack(w, rb, rows, COLS, pw);
	free(w);
	x = xmalloc(COLS * sizeof *x);
	for (i = 0; i < COLS; i++)
		x[i] = ktu_uniform();
	abuf = xmalloc(quant_act_bytes(type, run.k.playout, COLS, 1) + 64);
	quant_act_init(&a, type, run.k.playout, x, COLS, 1, abuf);
	run.k.pfill(&a, type, 0, 1);
	run.pw = pw;
	run.a = &a;
	run.y = xmalloc((size_t)rows * sizeof *run.y);
	run.rows = rows;
	run.passes = passes;
	pthread_barrier_init(&run.bar, NULL, 2);
	h[0] = (struct half){ &run, 0, rows / 32 * 16 };
	h[1] = (struct half){ &run, rows / 32 * 16, rows };
	for (i = 0; i < reps; i++) {
		if (nth == 1) {
			t0 = now(CLOCK_THREAD_CPUTIME_ID);
			for (j = 0; j < passes; j++)
				sweep(&run, 0, rows);
			s[i] = (now(CLOCK_THREAD_CPUTIME_ID) - t0) / passes;
			continue;
		}
		t0 = now(CLOCK_MONOTONIC);
		if (pthread_create(&t, NULL, half_main, &h[1]) != 0) {
			fprintf(stderr, "cannot start a thread\n");
			exit(1);
		}
		half_main(&h[0]);
		pthread_join(t, NULL);
		s[i] = (now(CLOCK_MONOTONIC) - t0) / passes;
	}
	qsort(s, reps, sizeof s[0], cmp_double);
	t0 = nth == 1 ? s[0] : s[reps / 2];
	printf("%-8s %6lld rows %8.2f MB  %8.2f us a pass  %6.1f GB/s  %5.3f ns per 32 "
	    "multiply-adds\n", ti->name, (long long)rows, pb / 1e6, t0 * 1e6, pb / t0 / 1e9,
	    t0 * 1e9 / ((double)rows * COLS / 32));
	pthread_barrier_destroy(&run.bar);
	free(run.y);
	free(abuf);
	free(x);
	free(pw);
	return (1);
}

int
main(int argc, char **argv)
{
	uint32_t	 types[MAXT];
	int64_t		 rows = 64;
	int		 ntypes = 0, passes = 0, nth = 1, ch, k;
	size_t		 i;

	while ((ch = getopt(argc, argv, "T:R:n:t:I:")) != -1) {
		switch (ch) {
		case 'T':
			if ((ntypes = ktu_parse_types(optarg, types, MAXT)) < 0)
				return (1);
			break;
		case 'R':
			rows = strtoll(optarg, NULL, 10);
			break;
		case 'n':
			passes = atoi(optarg);
			break;
		case 't':
			nth = atoi(optarg);
			break;
		case 'I':
			if ((k = quant_isa_by_name(optarg)) < 0 ||
			    quant_force_isa(k) != 0) {
				fprintf(stderr, "bench-tile: -I %s: unknown or not supported "
				    "(scalar, avx2 or avx512)\n", optarg);
				return (1);
			}
			break;
		default:
			fprintf(stderr, "usage: bench-tile [-T type,...] [-R rows] [-n passes] "
			    "[-t 1|2] [-I scalar|avx2|avx512]\n");
			return (1);
		}
	}
	if (rows < 32 || rows > 1 << 20 || rows % 16 != 0) {
		fprintf(stderr, "bench-tile: rows %lld: a multiple of 16 from 32 to %d\n",
		    (long long)rows, 1 << 20);
		return (1);
	}
	if (nth != 1 && nth != 2) {
		fprintf(stderr, "bench-tile: threads %d: 1 or 2\n", nth);
		return (1);
	}
	/* About 0.3 s a measurement at L2 speed unless told. */
	if (passes <= 0)
		passes = (int)(1280000 / rows) > 1 ? (int)(1280000 / rows) : 1;
	if (ntypes == 0)
		for (i = 0; i < KTU_NTYPES; i++)
			types[ntypes++] = ktu_types[i];
	printf("# %s tiles, %d thread%s, %d passes\n", quant_isa_name(quant_isa()), nth,
	    nth == 1 ? " (CPU clock, best of 7)" : "s (wall clock, median of 9)", passes);
	for (k = 0; k < ntypes; k++)
		if (!bench(types[k], rows, passes, nth))
			printf("%-8s no repacked tile\n", tensor_type_name(types[k]));
	return (0);
}
