/* attn.h: the tiled attention kernels over paged KV (AVX-512, AVX2). */
#ifndef PHASED_ATTN_H
#define PHASED_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

/*
 * Query tokens per job the forward pass cuts: enough rows to amortize the
 * conversion of each key tile, few enough to keep the threads balanced.
 */
#define ATTN_JOB_TOKENS	64
/* Keys per softmax step: steps fall on multiples of this position. */
#define ATTN_KEY_TILE	64

/*
 * One piece of attention work: n_tok consecutive query tokens of one
 * sequence (positions pos0..pos0+n_tok-1) for the grp query heads that share
 * KV head kv_head.  The keys and values of every position up to the last
 * query's are in the sequence's pages (blocks) of layer; a query sees the
 * positions up to its own, and with win != 0 only the win latest of them.
 * Query head h of token t is at q + t * stride + h * head_dim, its output at
 * out + t * stride + h * head_dim.
 */
struct attn_job {
	const struct kv_pool	*pool;
	const uint32_t		*blocks;
	uint32_t		 layer;
	uint32_t		 kv_head;
	uint32_t		 pos0;
	int			 n_tok;
	int			 grp;
	const float		*q;
	float			*out;
	size_t			 stride;
	float			 qscale;	/* queries times this */
	float			 cap;		/* score soft-cap; 0 = none */
	uint32_t		 win;		/* sliding window; 0 = none */
};

/*
 * Floats of scratch attn_run_avx512 needs for jobs of up to n_tok tokens
 * and grp heads of head_dim.
 */
size_t	attn_avx512_scratch_floats(int n_tok, int grp, int head_dim);

/*
 * Run a job with AVX-512 (only after the CPU was checked for AVX-512 F, BW,
 * VL, DQ and F16C).  Each query's result depends on its position, its own
 * query and the stored keys and values only, never on the rest of the job.
 */
void	attn_run_avx512(const struct attn_job *, float *scratch);

/*
 * Floats of scratch attn_run_avx2 needs for jobs of up to n_tok tokens and
 * grp heads of head_dim.
 */
size_t	attn_avx2_scratch_floats(int n_tok, int grp, int head_dim);

/*
 * Run a job with AVX2 (only after the CPU was checked for AVX2, FMA and
 * F16C): the AVX-512 kernel's algorithm and guarantees with 256-bit
 * vectors, so its results differ from that kernel's in the last bits (a
 * query's still depends on its position, its own query and the stored
 * keys and values only, never on the rest of the job).
 */
void	attn_run_avx2(const struct attn_job *, float *scratch);

#endif
