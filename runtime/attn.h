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
 * The rows of job j to step for the key tile at position t0 (a multiple of
 * ATTN_KEY_TILE): step(arg, r0, nr, lo, hi) for nr rows from row r0 that
 * see keys lo..hi-1 of it.  Consecutive tokens that see the whole tile go
 * as one run of rows; the others one token at a time with their own key
 * range (causal mask, sliding window).  Shared by the kernels so that they
 * step exactly the same rows.
 */
static inline __attribute__((always_inline)) void
attn_tile_rows(const struct attn_job *j, uint32_t t0,
    void (*step)(void *, int, int, int, int), void *arg)
{
	const uint32_t	kt = ATTN_KEY_TILE, win = j->win;
	const int	grp = j->grp;
	uint32_t	p, ws;
	int		t, run = -1, lo, hi;

	for (t = 0; t < j->n_tok; t++) {
		p = j->pos0 + (uint32_t)t;
		ws = win != 0 && p + 1 > win ? p + 1 - win : 0;
		if (p < t0 || ws >= t0 + kt) {
			lo = hi = 0;	/* no key of this tile */
		} else {
			lo = ws > t0 ? (int)(ws - t0) : 0;
			hi = p - t0 + 1 < kt ? (int)(p - t0 + 1) : (int)kt;
		}
		if (lo == 0 && hi == (int)kt) {
			if (run < 0)
				run = t;
			continue;
		}
		if (run >= 0)
			step(arg, run * grp, (t - run) * grp, 0, (int)kt);
		run = -1;
		if (hi > lo)
			step(arg, t * grp, grp, lo, hi);
	}
	if (run >= 0)
		step(arg, run * grp, (j->n_tok - run) * grp, 0, (int)kt);
}

/* Round a float count up to whole 64-byte lines (the kernels' scratch). */
static inline size_t
attn_lines(size_t n)
{
	return ((n + 15) & ~(size_t)15);
}

/*
 * Ask for the pages of the key tile after the one at t0 of job j (up to
 * position last) in the second-level cache: its keys and values arrive
 * while this tile is worked on.  Shared by the kernels.
 */
static inline void
attn_prefetch_next(const struct attn_job *j, uint32_t t0, uint32_t last)
{
	const struct kv_pool	*pool = j->pool;
	const uint32_t		 bs = pool->layout.block_size;
	const uint32_t		 n0 = t0 + ATTN_KEY_TILE;
	const size_t		 bytes = pool->elem_size * bs *
				    pool->layout.head_dim;
	const char		*k, *v;
	uint32_t		 p, end;
	size_t			 o;

	if (last < n0)
		return;
	end = last + 1 < n0 + ATTN_KEY_TILE ? last + 1 : n0 + ATTN_KEY_TILE;
	for (p = n0 - n0 % bs; p < end; p += bs) {
		k = kv_block_k(pool, j->blocks[p / bs], j->layer, j->kv_head);
		v = kv_block_v(pool, j->blocks[p / bs], j->layer, j->kv_head);
		for (o = 0; o < bytes; o += 64) {
			__builtin_prefetch(k + o, 0, 2);	/* prefetcht1 */
			__builtin_prefetch(v + o, 0, 2);
		}
	}
}

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
 * Floats of scratch attn_run_bf16 needs for jobs of up to n_tok tokens
 * and grp heads of head_dim.
 */
size_t	attn_bf16_scratch_floats(int n_tok, int grp, int head_dim);

/*
 * Run a job with AVX-512 bf16 dot products (only after the CPU was checked
 * for them as well): the AVX-512 kernel's algorithm and guarantees with
 * the scaled queries, keys, values and softmax weights rounded to bf16,
 * products summed in f32 (see attn_bf16.c).
 */
void	attn_run_bf16(const struct attn_job *, float *scratch);

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

/*
 * Floats of scratch attn_run_i16 needs for jobs of up to n_tok tokens and
 * grp heads of head_dim.
 */
size_t	attn_i16_scratch_floats(int n_tok, int grp, int head_dim);

/*
 * Run a job with AVX2 16-bit integer products (vpmaddwd; only after the
 * CPU was checked as for attn_run_avx2): that kernel's algorithm and
 * guarantees with the scaled queries and the keys as codes of their
 * largest element at about 12 bits (head_dim 64 to 128), the values and
 * the softmax weights at 12.5, the products summed exactly in 32-bit
 * integers (see attn_i16.c).  It reads KV_TYPE_I16 pools only, and is
 * the only kernel that reads them.
 */
void	attn_run_i16(const struct attn_job *, float *scratch);

#endif
