/*
 * bench-matmul: time qmat_mul on TinyLlama-1.1B shapes for every type.
 *
 * usage: bench-matmul [-t threads] [-r min_reps] [-T type,...] [-n ntok,...]
 *     [-s shape index] [-c weight copies] [-B] [-C] [-A] [-I variant]
 *
 * -B lets F16/BF16 weights use bf16 dot products (quant_allow_bf16_dot).
 * -W lets F16 weights use 16-bit integer dot products (quant_allow_f16_i16).
 * -U keeps every type on the mapped rows (quant_allow_pack(0)).
 * -A keeps large batches off the AMX tiles (quant_allow_amx(0)).
 * -C times with the thread's CPU clock (one thread only): on a machine
 * shared with other work this removes the time the thread was not running.
 *
 * Prints, per type, shape and batch size, the median time of several runs,
 * the weight bandwidth (n_tok = 1) and GFLOP/s, then an estimate of whole
 * model decode and prefill speed from the matmul times alone (22 layers of
 * q, k, v, o, gate, up, down plus the output matrix).
 */
#include "config.h"

#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amx.h"
#include "matmul.h"
#include "quant.h"
#include "tensor_type.h"
#include "threadpool.h"
#include "util.h"
#include "kernel-testutil.h"

struct shape {
	const char	*name;
	int64_t		 rows, cols;
	int		 per_model;	/* matrices of this shape in the model */
};

static const struct shape shapes[] = {
	{ "q/o 2048x2048", 2048, 2048, 44 },
	{ "k/v 256x2048", 256, 2048, 44 },
	{ "gate/up 5632x2048", 5632, 2048, 44 },
	{ "down 2048x5632", 2048, 5632, 22 },
	{ "output 32000x2048", 32000, 2048, 1 },
};
#define NSHAPES	(sizeof shapes / sizeof shapes[0])

static int	ntoks[16] = { 1, 4, 16, 64, 512 };
static int	use_cpu_time;	/* -C: time with the thread's CPU clock */

/* Nanoseconds of wall time, or of this thread's CPU time with -C. */
static uint64_t
clock_ns(void)
{
	struct timespec	ts;

	if (!use_cpu_time)
		return (now_ns());
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec);
}
static int	nntok = 5;

/* Compare doubles for qsort. */
static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x < y ? -1 : x > y);
}

/*
 * Median seconds of qmat_mul over at least min_reps runs (and ~0.3 s).  The
 * runs cycle through ncopies copies of the weights so that, as in a real
 * model, they come from memory rather than from the last-level cache.
 */
static double
time_mul(struct threadpool *pool, struct qmat **m, int ncopies, const float *x, int n,
    float *y, int64_t ldy, int min_reps, double *spread)
{
	double	 t[64];
	int	 k, reps = 0;
	uint64_t start, total = 0;

	for (k = 0; k < ncopies; k++)
		qmat_mul(pool, m[k], x, n, y, ldy);	/* warm up */
	while (reps < 64 && (reps < min_reps || total < 300000000ULL)) {
		start = clock_ns();
		qmat_mul(pool, m[reps % ncopies], x, n, y, ldy);
		t[reps] = (clock_ns() - start) / 1e9;
		total += clock_ns() - start;
		reps++;
	}
	qsort(t, reps, sizeof t[0], cmp_double);
	*spread = (t[reps - 1] - t[0]) / t[reps / 2];
	(void)k;
	return (t[reps / 2]);
}

int
main(int argc, char **argv)
{
	struct threadpool	*pool;
	uint32_t		 types[8] = { TT_Q4_0, TT_Q8_0, TT_Q4_K, TT_Q6_K, TT_F16, TT_BF16 };
	int			 ntypes = 6, nthreads = 2, min_reps = 5, ch, i, s, k;
	int			 shape_only = -1, copies_opt = 0;
	char			*cause = NULL, *tok, *str;
	double			 secs[8][NSHAPES][16];

	while ((ch = getopt(argc, argv, "ABCUWI:t:r:T:n:s:c:")) != -1) {
		switch (ch) {
		case 't':
			nthreads = atoi(optarg);
			break;
		case 'r':
			min_reps = atoi(optarg);
			break;
		case 'T':
			if ((ntypes = ktu_parse_types(optarg, types, 8)) < 0)
				return (1);
			break;
		case 's':
			shape_only = atoi(optarg);
			break;
		case 'c':
			copies_opt = atoi(optarg);
			break;
		case 'B':
			quant_allow_bf16_dot(QUANT_BF16_DOT_ALL);
			break;
		case 'W':
			quant_allow_f16_i16(1);
			break;
		case 'C':
			use_cpu_time = 1;
			break;
		case 'U':
			quant_allow_pack(0);
			break;
		case 'A':
			quant_allow_amx(0);
			break;
		case 'I':
			if ((k = quant_isa_by_name(optarg)) < 0 ||
			    quant_force_isa(k) != 0) {
				fprintf(stderr, "variant %s: unknown or not supported\n",
				    optarg);
				return (1);
			}
			break;
		case 'n':
			nntok = 0;
			str = optarg;
			while ((tok = strsep(&str, ",")) != NULL && nntok < 16)
				ntoks[nntok++] = atoi(tok);
			break;
		default:
			fprintf(stderr, "usage: bench-matmul [-t threads] [-r reps] "
			    "[-T type,...] [-n ntok,...] [-s shape] [-c copies] [-B] [-W] [-C] [-U] [-A] [-I scalar|avx2|avx512]\n");
			return (1);
		}
	}
	if (use_cpu_time && nthreads != 1) {
		fprintf(stderr, "-C needs -t 1\n");
		return (1);
	}
	if ((pool = threadpool_create(nthreads, NULL, &cause)) == NULL) {
		fprintf(stderr, "%s\n", cause);
		return (1);
	}
	printf("# variant %s%s%s, %d threads; median of >= %d runs; spread = "
	    "(max - min) / median%s\n", quant_isa_name(quant_isa()),
	    quant_bf16_dot_allowed() ? " (bf16 dot allowed)" :
	    quant_f16_i16_allowed() ? " (F16 int16 dot allowed)" : "",
	    quant_amx_allowed() && quant_amx_supported() ? " (amx allowed)" : "",
	    nthreads, min_reps,
	    use_cpu_time ? "; thread CPU time" : "");
	for (i = 0; i < ntypes; i++) {
		const struct tensor_type_info *ti = tensor_type_get(types[i]);

		for (s = 0; s < (int)NSHAPES; s++) {
			const struct shape *sh = &shapes[s];
			size_t	 rb = tensor_row_bytes(ti, sh->cols);
			size_t	 bytes = sh->rows * rb;

			if (shape_only != -1 && s != shape_only) {
				for (k = 0; k < nntok; k++)
					secs[i][s][k] = 0;
				continue;
			}
			int	 ncopies = (int)((256u << 20) / bytes) + 1, maxn = 0, c;
			uint8_t	*w;
			float	*x, *y;
			struct qmat *m[64];
			int64_t	 r;

			if (ncopies > 64)
				ncopies = 64;
			if (copies_opt > 0)
				ncopies = copies_opt;	/* 1: weights stay in cache */
			w = xmalloc(bytes * ncopies);

			for (k = 0; k < nntok; k++)
				maxn = ntoks[k] > maxn ? ntoks[k] : maxn;
			for (r = 0; r < sh->rows; r++)
				ktu_fill_row(types[i], w + r * rb, sh->cols);
			for (c = 1; c < ncopies; c++)
				memcpy(w + c * bytes, w, bytes);
			x = xmalloc((size_t)maxn * sh->cols * sizeof *x);
			y = xmalloc((size_t)maxn * sh->rows * sizeof *y);
			for (r = 0; r < (int64_t)maxn * sh->cols; r++)
				x[r] = ktu_uniform();
			for (c = 0; c < ncopies; c++) {
				m[c] = qmat_create(types[i], sh->rows, sh->cols,
				    w + c * bytes, &cause);
				if (m[c] == NULL) {
					fprintf(stderr, "%s\n", cause);
					return (1);
				}
			}
			for (k = 0; k < nntok; k++) {
				double sp, t = time_mul(pool, m, ncopies, x, ntoks[k], y, sh->rows,
				    ntoks[k] >= 64 ? 3 : min_reps, &sp);
				secs[i][s][k] = t;
				printf("%-5s %-18s n_tok %4d: %9.1f us  %6.1f GB/s  %7.1f "
				    "GFLOP/s  (spread %.0f%%)\n", ti->name, sh->name,
				    ntoks[k], t * 1e6, sh->rows * rb / t / 1e9,
				    2.0 * sh->rows * sh->cols * ntoks[k] / t / 1e9,
				    sp * 100);
				fflush(stdout);
			}
			for (c = 0; c < ncopies; c++)
				qmat_free(m[c]);
			free(w);
			free(x);
			free(y);
		}
	}
	if (shape_only != -1) {
		threadpool_destroy(pool);
		return (0);	/* no whole-model estimate from one shape */
	}
	printf("# whole-model estimate from matmul time alone (TinyLlama-1.1B shapes)\n");
	for (i = 0; i < ntypes; i++) {
		for (k = 0; k < nntok; k++) {
			double total = 0;

			for (s = 0; s < (int)NSHAPES; s++)
				total += secs[i][s][k] * shapes[s].per_model;
			if (total > 0)
				printf("%-6s n_tok %4d: %8.1f tok/s\n",
				    tensor_type_name(types[i]), ntoks[k], ntoks[k] / total);
		}
	}
	/*
	 * Q4_K_M keeps about half of attn_v and ffn_down and the output
	 * matrix in Q6_K, the rest in Q4_K.
	 */
	for (i = 0; i < ntypes && types[i] != TT_Q4_K; i++)
		;
	for (k = 0; k < ntypes && types[k] != TT_Q6_K; k++)
		;
	if (i < ntypes && k < ntypes) {
		static const double q6_share[NSHAPES] = { 0, 11, 0, 11, 1 };
		int n;

		for (n = 0; n < nntok; n++) {
			double total = 0;

			for (s = 0; s < (int)NSHAPES; s++)
				total += secs[i][s][n] * (shapes[s].per_model - q6_share[s]) +
				    secs[k][s][n] * q6_share[s];
			if (total > 0)
				printf("Q4_K_M n_tok %4d: %8.1f tok/s\n", ntoks[n],
				    ntoks[n] / total);
		}
	}
	threadpool_destroy(pool);
	return (0);
}
