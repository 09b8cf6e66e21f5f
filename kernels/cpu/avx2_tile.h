/*
 * avx2_tile.h: what the AVX2 tiles of the repacked kernels share (only
 * for files built with AVX2 enabled).
 */
#ifndef PHASED_AVX2_TILE_H
#define PHASED_AVX2_TILE_H

#include <immintrin.h>

#include "pack_avx2.h"
#include "prefetch.h"

/*
 * v, as the compiler must have it here: an empty asm that keeps a tile's
 * chain of integer additions in program order.  GCC otherwise reassociates
 * it into a tree that holds every product of a tile of four tokens at once,
 * more than the sixteen vector registers, and spills them to the stack
 * (prefill of the packed Q4_0 about 1.4x slower).
 */
static inline __attribute__((always_inline)) __m256i
avx2_chain(__m256i v)
{
	__asm__("" : "+x"(v));
	return (v);
}

/* Eight floats of a group of rows' outputs; only the first n are stored. */
static inline __attribute__((always_inline)) void
avx2_store_rows(float *y, __m256 v, int n)
{
	if (n >= 8)
		_mm256_storeu_ps(y, v);
	else
		_mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
		    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
}

/*
 * Prefetch, AVX2_PF_DECODE bytes ahead, the n-byte block at p that a
 * single token's tile reads next (see prefetch_lines).  The Q6_K tile
 * prefetches nothing: there it was 3-16% faster without (12 rounds on two
 * days, when it took one row group a token; 16-24% with two groups),
 * where Q4_0 and Q5_0 were slower without.
 */
static inline __attribute__((always_inline)) void
avx2_prefetch_block(const void *p, int n)
{
	prefetch_lines(p, AVX2_PF_DECODE, n);
}

#endif
