/*
 * nibble_one_avx512.h: the one-token tile that the repacked Q4_K
 * (quant_avx512.c) and Q5_K (pack_k_avx512.c) matrices share, and the
 * small helpers of their AVX-512 tiles.  Only for files built for AVX-512.
 *
 * Both layouts have, per super-block of a 16-row group: d[16] and
 * dmin[16] (halves), the 6-bit scales [8][16] and mins [8][16] (bytes),
 * then at NO_HDR + stride * h, for each sub-block pair h, the eight
 * vectors k whose lane i holds four nibbles of row i (low: sub-block 2h,
 * high: 2h + 1); Q5_K follows each pair's vectors with its fifth bits,
 * per sub-block of the pair and k a 64-bit byte mask.
 */
#ifndef PHASED_NIBBLE_ONE_AVX512_H
#define PHASED_NIBBLE_ONE_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "pack_k_avx512.h"
#include "prefetch.h"
#include "quant.h"

#define NO_PG	16	/* rows per packed group */
#define NO_MG	2	/* groups per tile at most */
#define NO_SC	64	/* bytes before the scales */
#define NO_MN	192	/* bytes before the mins */
#define NO_HDR	320	/* bytes before the first pair's vectors */

/* Four activation codes broadcast to every lane. */
static inline __attribute__((always_inline)) __m512i
bcast4(const int8_t *p)
{
	int32_t	v;

	memcpy(&v, p, 4);
	return (_mm512_set1_epi32(v));
}

/* 64-bit byte mask at p (unaligned). */
static inline __attribute__((always_inline)) __mmask64
mask_at(const uint8_t *p)
{
	uint64_t	m;

	memcpy(&m, p, 8);
	return ((__mmask64)m);
}

/* The 16 rows' scale and min of sub-block sub of a packed super-block p. */
static inline __attribute__((always_inline)) void
nibble_sub_scales(const uint8_t *p, const int sub, __m512 dd, __m512 dm, __m512 *ws,
    __m512 *wm)
{
	*ws = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
	    _mm_loadu_si128((const __m128i *)(p + NO_SC + 16 * sub)))));
	*wm = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
	    _mm_loadu_si128((const __m128i *)(p + NO_MN + 16 * sub)))));
}

/*
 * The tile for one token over mg (compile-time) groups of super-blocks of
 * blk bytes, pairs stride bytes apart, fifth bits when fifth: each nibble
 * vector is loaded once for the two sub-blocks it holds and the integer
 * sums run as two chains a sub-block.  The float steps are those of the
 * types' many-token tiles, in the same order, so the results are the
 * same:
 *   acc = fma(f32(sum), dd * scale * token scale, acc)
 *   acc -= dmin * min * (token scale * sum q)
 * Each pair's bytes are prefetched PF_DECODE ahead just before they are
 * read, so the super-block streams front to back.
 */
static inline __attribute__((always_inline)) void
nibble_one(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, float *y, int64_t ldy, const int blk,
    const int stride, const int fifth)
{
	const int64_t	 nsb = cols / 256, xstride = a->stride;
	const size_t	 gstride = (size_t)nsb * blk;
	const int8_t	*xq = a->q + (size_t)t0 * xstride;
	const float	*xd = a->d + (size_t)t0 * (xstride / 32);
	const float	*xs = a->s + (size_t)t0 * (xstride / 32);
	const __m512i	 m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(16);
	const uint8_t	*gp[NO_MG];
	__m512		 acc[NO_MG];
	int64_t		 b;
	int		 g, h, k, sp;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / NO_PG + g) * gstride;
		acc[g] = _mm512_setzero_ps();
	}
	for (b = 0; b < nsb; b++) {
		__m512	dd[NO_MG], dm[NO_MG];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * blk;

			prefetch_lines(p, PF_DECODE, NO_HDR);
			dd[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
			dm[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
		}
		for (sp = 0; sp < 4; sp++) {
			const int64_t	 e = 256 * b + 64 * sp;
			__m512i		 ic[NO_MG][4];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				prefetch_lines(gp[g] + (size_t)b * blk + NO_HDR + stride * sp,
				    PF_DECODE, stride);
				ic[g][0] = ic[g][1] = ic[g][2] = ic[g][3] =
				    _mm512_setzero_si512();
			}
#pragma GCC unroll 8
			for (k = 0; k < 8; k++) {
				const __m512i	xl = bcast4(xq + e + 4 * k);
				const __m512i	xh = bcast4(xq + e + 32 + 4 * k);

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					const uint8_t	*q = gp[g] + (size_t)b * blk + NO_HDR +
					    stride * sp;
					const __m512i	 v = _mm512_loadu_si512((const void *)
					    (q + 64 * k));
					__m512i		 lo = _mm512_and_si512(v, m4);
					__m512i		 hi = _mm512_and_si512(
					    _mm512_srli_epi16(v, 4), m4);

					if (fifth) {
						lo = _mm512_mask_add_epi8(lo, mask_at(q + 512 +
						    8 * k), lo, b4);
						hi = _mm512_mask_add_epi8(hi, mask_at(q + 576 +
						    8 * k), hi, b4);
					}
					ic[g][k & 1] = _mm512_dpbusd_epi32(ic[g][k & 1], lo, xl);
					ic[g][2 + (k & 1)] = _mm512_dpbusd_epi32(
					    ic[g][2 + (k & 1)], hi, xh);
				}
			}
#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				const int	sub = 2 * sp + h;
				const __m512	d = _mm512_set1_ps(xd[(e + 32 * h) / 32]);
				const __m512	sm = _mm512_set1_ps(xs[(e + 32 * h) / 32]);

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					__m512	ws, wm;

					nibble_sub_scales(gp[g] + (size_t)b * blk, sub, dd[g],
					    dm[g], &ws, &wm);
					acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(
					    _mm512_add_epi32(ic[g][2 * h], ic[g][2 * h + 1])),
					    _mm512_mul_ps(ws, d), acc[g]);
					acc[g] = _mm512_fnmadd_ps(wm, sm, acc[g]);
				}
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		int		n = mr - NO_PG * g;
		__mmask16	m = n >= NO_PG ? 0xffff : (__mmask16)((1U << n) - 1);

		_mm512_mask_storeu_ps(y + (size_t)t0 * ldy + r0 + NO_PG * g, m, acc[g]);
	}
}

#endif
