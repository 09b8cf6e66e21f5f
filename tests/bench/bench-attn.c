/*
 * bench-attn.c: speed of an attention kernel over a causal prefill, or
 * with -d of one decode step after N_TOKENS - 1 positions, in thread CPU
 * time (so a busy machine stretches it less than wall time).
 *
 * usage: bench-attn [-d] [-k avx512|bf16|avx2|i16] [N_TOKENS [HEAD_DIM
 * [KV_HEADS [GROUP [REPS [TILE]]]]]]
 * (defaults: the best exact kernel the CPU runs, 4096 64 4 8 3 64: the
 * TinyLlama-1.1B shape, F16 KV, pages of 16, query tokens per job as the
 * forward pass cuts them).  bf16 is the AVX-512 kernel on bf16 dot
 * products that quantized models take under bf16-dot auto, i16 the AVX2
 * kernel on 16-bit integer products that they take there on AVX2 CPUs,
 * over keys and values stored as its codes, as the daemon keeps them for
 * it.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "kvcache.h"
#include "quant.h"


/* Thread CPU time in seconds. */
static double
cpu_s(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (ts.tv_sec + ts.tv_nsec * 1e-9);
}

/* Print the usage and fail. */
static int
usage(void)
{
	fprintf(stderr, "usage: bench-attn [-d] [-k avx512|bf16|avx2|i16] "
	    "[N_TOKENS [HEAD_DIM [KV_HEADS [GROUP [REPS [TILE]]]]]]\n");
	return (2);
}

int
main(int argc, char **argv)
{
	const char		*kern = NULL;
	int			 n, hd, nkv, grp, reps, QTILE, ch, isa;
	int			 decode = 0, steps = 1, first = 0;
	size_t			(*scratch_floats)(int, int, int);
	void			(*run)(const struct attn_job *, float *);
	struct kv_layout	 lay;
	struct kv_pool		*pool;
	struct kv_seq		 seq;
	struct attn_job		 j;
	float			*q, *out, *scratch;
	double			 t, best = INFINITY, flops = 0;
	char			*cause = NULL;
	size_t			 i, stride;
	int			 r, t0, g, k;

	while ((ch = getopt(argc, argv, "dk:")) != -1) {
		if (ch == 'd')
			decode = 1;
		else if (ch == 'k')
			kern = optarg;
		else
			return (usage());
	}
	argc -= optind;
	argv += optind;
	n = argc > 0 ? atoi(argv[0]) : 4096;
	hd = argc > 1 ? atoi(argv[1]) : 64;
	nkv = argc > 2 ? atoi(argv[2]) : 4;
	grp = argc > 3 ? atoi(argv[3]) : 8;
	reps = argc > 4 ? atoi(argv[4]) : 3;
	QTILE = argc > 5 ? atoi(argv[5]) : ATTN_JOB_TOKENS;
	if (n < 1 || hd < 1 || nkv < 1 || grp < 1 || reps < 1 || QTILE < 1)
		return (usage());
	if (kern == NULL)
		kern = quant_isa_supported(QUANT_ISA_AVX512) ? "avx512" : "avx2";
	if (strcmp(kern, "avx512") == 0) {
		isa = QUANT_ISA_AVX512;
		scratch_floats = attn_avx512_scratch_floats;
		run = attn_run_avx512;
	} else if (strcmp(kern, "bf16") == 0) {
		isa = QUANT_ISA_AVX512;
		scratch_floats = attn_bf16_scratch_floats;
		run = attn_run_bf16;
	} else if (strcmp(kern, "avx2") == 0) {
		isa = QUANT_ISA_AVX2;
		scratch_floats = attn_avx2_scratch_floats;
		run = attn_run_avx2;
	} else if (strcmp(kern, "i16") == 0) {
		isa = QUANT_ISA_AVX2;
		scratch_floats = attn_i16_scratch_floats;
		run = attn_run_i16;
	} else
		return (usage());
	if (!quant_isa_supported(isa) || (run == attn_run_bf16 &&
	    !quant_bf16_dot_supported())) {
		printf("bench-attn: the CPU has no %s, nothing to measure\n",
		    kern);
		return (0);
	}
	/* A decode step is short: time a thousand, report one. */
	if (decode) {
		first = n - 1;
		steps = 1000;
	}
	lay = (struct kv_layout){ 1, (uint32_t)nkv, (uint32_t)hd, 16,
	    run == attn_run_i16 ? KV_TYPE_I16 : KV_TYPE_F16 };
	pool = kv_pool_create(&lay, kv_layout_blocks_for(&lay, n), &cause);
	if (pool == NULL) {
		fprintf(stderr, "bench-attn: %s\n", cause);
		return (1);
	}
	memset(&seq, 0, sizeof seq);
	kv_seq_reserve(pool, &seq, (uint32_t)n);
	if (lay.type == KV_TYPE_I16) {
		float	*kr = malloc(2 * (size_t)hd * sizeof *kr), *vr = kr + hd;

		for (i = 0; i < (size_t)n * nkv; i++) {
			for (k = 0; k < hd; k++) {
				kr[k] = (float)(((i * hd + k) * 2654435761u) % 1000) /
				    500.0f - 1.0f;
				vr[k] = (float)(((i * hd + k) * 40503u) % 1000) /
				    500.0f - 1.0f;
			}
			kv_put_i16(pool, seq.blocks[i / nkv / 16],
			    (uint32_t)(i / nkv % 16), 0, (uint32_t)(i % nkv), kr, vr);
		}
		free(kr);
	} else
		for (i = 0; i < (size_t)pool->n_blocks * pool->block_bytes / 2; i++)
			((uint16_t *)pool->data)[i] = f32_to_fp16((float)((i *
			    2654435761u) % 1000) / 500.0f - 1.0f);
	stride = (size_t)nkv * grp * hd;
	q = malloc((size_t)n * stride * sizeof *q);
	out = malloc((size_t)n * stride * sizeof *out);
	scratch = malloc(scratch_floats(QTILE, grp, hd) * sizeof *scratch);
	for (i = 0; i < (size_t)n * stride; i++)
		q[i] = (float)((i * 40503u) % 1000) / 500.0f - 1.0f;
	for (i = first; i < (size_t)n; i++)
		flops += 4.0 * hd * (double)(i + 1) * nkv * grp;

	memset(&j, 0, sizeof j);
	j.pool = pool;
	j.blocks = seq.blocks;
	j.grp = grp;
	j.stride = stride;
	j.qscale = 1.0f / sqrtf((float)hd);
	for (r = 0; r < reps; r++) {
		t = cpu_s();
		for (k = 0; k < steps; k++)
			for (t0 = first; t0 < n; t0 += QTILE)
				for (g = 0; g < nkv; g++) {
					j.kv_head = (uint32_t)g;
					j.pos0 = (uint32_t)t0;
					j.n_tok = n - t0 < QTILE ? n - t0 :
					    QTILE;
					j.q = q + (size_t)t0 * stride +
					    (size_t)g * grp * hd;
					j.out = out + (size_t)t0 * stride +
					    (size_t)g * grp * hd;
					run(&j, scratch);
				}
		t = (cpu_s() - t) / steps;
		best = t < best ? t : best;
	}
	if (decode) {
		printf("%s attention decode step after %d positions, head dim "
		    "%d, %d KV heads x %d: %.1f us CPU per layer (best of %d), "
		    "%.1f GFLOP/s\n", kern, n - 1, hd, nkv, grp, best * 1e6,
		    reps, flops / best * 1e-9);
		goto out;
	}
	printf("%s attention prefill of %d tokens, head dim %d, %d KV heads x "
	    "%d: %.3f s CPU (best of %d, jobs of %d), %.1f GFLOP/s, %.1f us "
	    "per token per layer\n", kern, n, hd, nkv, grp, best, reps, QTILE,
	    flops / best * 1e-9, best / n * 1e6);
out:
	free(scratch);
	free(out);
	free(q);
	kv_seq_release(pool, &seq);
	kv_pool_free(pool);
	return (0);
}
