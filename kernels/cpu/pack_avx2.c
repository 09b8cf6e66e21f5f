/*
 * pack_avx2.c: AVX2 kernels on Q4_0, Q8_0, Q4_K and Q6_K weights repacked at load.
 *
 * The natural layout spends a vpmaddwd, a conversion and two float
 * operations on every 32 products of a row and a token.  Here a vector
 * lane is a row: eight rows' codes are interleaved four bytes at a time,
 * so the 16-bit products of a whole 32-element block add up in vpaddw
 * (at most 8 x 2 x 15 x 127 = 30480, no overflow) and the float work is
 * done once per block for eight rows (Q8_0's products, up to 2 x 127 x
 * 127, need vpmaddwd at each step).  Built with AVX2 enabled; only
 * reached after quant_isa_supported() checked the CPU.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "pack_avx2.h"
#include "avx2_tile.h"
#include "quant.h"

#define AI	static inline __attribute__((always_inline))

/* Rows of a group: one per lane of a vector of eight. */
#define PG	8

/*
 * Repacked Q4_K: quant_pack_q4_k's layout in groups of 8 rows (d and dmin
 * at 0 and 16, scales at 32, mins at 96, codes from K4HDR).  Per
 * sub-block, acc = fma(f32(sum u * q), d * sc * token scale, acc) then
 * acc -= dmin * mn * (token scale * sum q).
 */
#define K4HDR	QUANT_Q4K_Q(PG)
#define K4BLK	QUANT_Q4K_PACKED_BLOCK(PG)

/* Copy Q4_K rows into the packed layout (or only size it). */
size_t
avx2_q4_k_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (quant_pack_q4_k(w, rb, rows, cols, PG, dst));
}

/*
 * Repacked Q4_0: per 32-element block of an 8-row group, the rows' d
 * (halves, 16 bytes), then the four vectors k whose lane i is bytes
 * 4k..4k+3 of row i's codes: low nibbles are elements 4k.., high nibbles
 * elements 16+4k...  Per block, acc = fma(f32(sum u * q), d * token
 * scale, acc) then acc -= 8 d * (token scale * sum q): the codes' offset.
 */
#define Q4HDR	16
#define Q4BLK	(Q4HDR + 128)

/*
 * Copy rows of a 32-element block type (a half d, then bb - 2 bytes of
 * codes) into the packed layout of Q4_0 and Q8_0, or only size it.
 */
static size_t
pack_blocks32(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst,
    const int bb)
{
	const int64_t	nb = cols / 32, ng = (rows + PG - 1) / PG;
	const size_t	blk = (size_t)(2 * PG + PG * (bb - 2));
	int64_t		g, b, r;
	int		i, k;

	if (dst == NULL)
		return ((size_t)(ng * nb) * blk);
	for (g = 0; g < ng; g++) {
		for (b = 0; b < nb; b++) {
			uint8_t *o = dst + (size_t)(g * nb + b) * blk;

			memset(o, 0, blk);
			for (i = 0; i < PG; i++) {
				const uint8_t *p;

				if ((r = g * PG + i) >= rows)
					break;
				p = w + (size_t)r * rb + (size_t)b * bb;
				memcpy(o + 2 * i, p, 2);
				for (k = 0; k < (bb - 2) / 4; k++)
					memcpy(o + 2 * PG + 32 * k + 4 * i, p + 2 + 4 * k, 4);
			}
		}
	}
	return ((size_t)(ng * nb) * blk);
}

/* Copy Q4_0 rows into the packed layout (or only size it). */
size_t
avx2_q4_0_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_blocks32(w, rb, rows, cols, dst, 18));
}

/*
 * Repacked Q8_0: per 32-element block of an 8-row group, the rows' d
 * (halves, 16 bytes), then the eight vectors k whose lane i is bytes
 * 4k..4k+3 of row i's codes.  Per block, acc = fma(f32(sum w * q), d *
 * token scale, acc); the codes go as |w| with the sign moved onto the
 * activations.
 */
#define Q8HDR	16
#define Q8BLK	(Q8HDR + 256)

/* Copy Q8_0 rows into the packed layout (or only size it). */
size_t
avx2_q8_0_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_blocks32(w, rb, rows, cols, dst, 34));
}

/* One packed Q4_0 tile: mg groups of 8 rows by nr tokens (compile-time). */
AI void
q40_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nb = cols / 32, stride = a->stride;
	const size_t	 gstride = (size_t)nb * Q4BLK;
	const __m256i	 low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
	const uint8_t	*gp[2];
	const int8_t	*xq[PACK2_NR];
	const float	*xd[PACK2_NR], *xs[PACK2_NR];
	__m256		 acc[2][PACK2_NR];
	int64_t		 b;
	int		 g, j, k, hi;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
		xs[j] = a->s + (size_t)(t0 + j) * (stride / 32);
	}
	for (b = 0; b < nb; b++) {
		__m256i	is[2][PACK2_NR];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			if (nr == 1)
				avx2_prefetch_block(gp[g] + (size_t)b * Q4BLK, Q4BLK);
#pragma GCC unroll 4
			for (j = 0; j < nr; j++)
				is[g][j] = _mm256_setzero_si256();
		}
#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {
			__m256i	v[2];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++)
				v[g] = _mm256_loadu_si256((const __m256i *)(gp[g] +
				    (size_t)b * Q4BLK + Q4HDR + 32 * k));
#pragma GCC unroll 2
			for (hi = 0; hi < 2; hi++) {
				__m256i	u[2];

#pragma GCC unroll 2
				for (g = 0; g < mg; g++)
					u[g] = _mm256_and_si256(hi ? _mm256_srli_epi16(v[g], 4) :
					    v[g], low);
#pragma GCC unroll 4
				for (j = 0; j < nr; j++) {
					int32_t	q4;
					__m256i	x;

					memcpy(&q4, xq[j] + 32 * b + 16 * hi + 4 * k, 4);
					x = _mm256_set1_epi32(q4);
#pragma GCC unroll 2
					for (g = 0; g < mg; g++)
						is[g][j] = avx2_chain(_mm256_add_epi16(is[g][j],
						    _mm256_maddubs_epi16(u[g], x)));
				}
			}
		}
#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * Q4BLK;
			__m256 ws = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
			__m256 w8 = _mm256_mul_ps(ws, _mm256_set1_ps(8.0f));

#pragma GCC unroll 4
			for (j = 0; j < nr; j++) {
				__m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(is[g][j], ones));

				acc[g][j] = _mm256_fmadd_ps(s, _mm256_mul_ps(ws,
				    _mm256_set1_ps(xd[j][b])), acc[g][j]);
				acc[g][j] = _mm256_fnmadd_ps(w8, _mm256_set1_ps(xs[j][b]),
				    acc[g][j]);
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			avx2_store_rows(y + (size_t)(t0 + j) * ldy + r0 + PG * g, acc[g][j],
			    mr - PG * g);
}

/* One packed Q8_0 tile: mg groups of 8 rows by nr tokens (compile-time). */
AI void
q80_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nb = cols / 32, stride = a->stride;
	const size_t	 gstride = (size_t)nb * Q8BLK;
	const __m256i	 ones = _mm256_set1_epi16(1);
	const uint8_t	*gp[2];
	const int8_t	*xq[PACK2_NR];
	const float	*xd[PACK2_NR];
	__m256		 acc[2][PACK2_NR];
	int64_t		 b;
	int		 g, j, k;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
	}
	for (b = 0; b < nb; b++) {
		__m256i	is[2][PACK2_NR];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			if (nr == 1)
				avx2_prefetch_block(gp[g] + (size_t)b * Q8BLK, Q8BLK);
#pragma GCC unroll 4
			for (j = 0; j < nr; j++)
				is[g][j] = _mm256_setzero_si256();
		}
#pragma GCC unroll 8
		for (k = 0; k < 8; k++) {
			__m256i	v[2], u[2];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				v[g] = _mm256_loadu_si256((const __m256i *)(gp[g] +
				    (size_t)b * Q8BLK + Q8HDR + 32 * k));
				u[g] = _mm256_abs_epi8(v[g]);
			}
#pragma GCC unroll 4
			for (j = 0; j < nr; j++) {
				int32_t	q4;
				__m256i	x;

				memcpy(&q4, xq[j] + 32 * b + 4 * k, 4);
				x = _mm256_set1_epi32(q4);
#pragma GCC unroll 2
				for (g = 0; g < mg; g++)
					is[g][j] = avx2_chain(_mm256_add_epi32(is[g][j],
					    _mm256_madd_epi16(_mm256_maddubs_epi16(u[g],
					    _mm256_sign_epi8(x, v[g])), ones)));
			}
		}
#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			__m256 ws = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp[g] +
			    (size_t)b * Q8BLK)));

#pragma GCC unroll 4
			for (j = 0; j < nr; j++)
				acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[g][j]),
				    _mm256_mul_ps(ws, _mm256_set1_ps(xd[j][b])), acc[g][j]);
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			avx2_store_rows(y + (size_t)(t0 + j) * ldy + r0 + PG * g, acc[g][j],
			    mr - PG * g);
}

/* One packed Q4_K tile: mg groups of 8 rows by nr tokens (compile-time). */
AI void
q4k_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nsb = cols / 256, stride = a->stride;
	const size_t	 gstride = (size_t)nsb * K4BLK;
	const __m256i	 low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
	const uint8_t	*gp[2];
	const int8_t	*xq[PACK2_NR];
	const float	*xd[PACK2_NR], *xs[PACK2_NR];
	__m256		 acc[2][PACK2_NR];
	int64_t		 b;
	int		 g, j, k, sub;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
		xs[j] = a->s + (size_t)(t0 + j) * (stride / 32);
	}
	for (b = 0; b < nsb; b++) {
		__m256	dd[2], dm[2];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * K4BLK;

			if (nr == 1)	/* the header; codes per pair of blocks */
				avx2_prefetch_block(p, K4HDR);
			dd[g] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
			dm[g] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p +
			    QUANT_Q4K_DM(PG))));
		}
#pragma GCC unroll 8
		for (sub = 0; sub < 8; sub++) {
			const int64_t	 e = 256 * b + 32 * sub;
			__m256i		 is[2][PACK2_NR];

			for (g = 0; nr == 1 && (sub & 1) == 0 && g < mg; g++)
				avx2_prefetch_block(gp[g] + (size_t)b * K4BLK + K4HDR +
				    256 * (sub >> 1), 256);
#pragma GCC unroll 2
			for (g = 0; g < mg; g++)
#pragma GCC unroll 4
				for (j = 0; j < nr; j++)
					is[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (k = 0; k < 8; k++) {
				__m256i	u[2];

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					__m256i v = _mm256_loadu_si256((const __m256i *)(gp[g] +
					    (size_t)b * K4BLK + K4HDR + 256 * (sub >> 1) + 32 * k));
					if (sub & 1)
						v = _mm256_srli_epi16(v, 4);
					u[g] = _mm256_and_si256(v, low);
				}
#pragma GCC unroll 4
				for (j = 0; j < nr; j++) {
					int32_t	q4;
					__m256i	x;

					memcpy(&q4, xq[j] + e + 4 * k, 4);
					x = _mm256_set1_epi32(q4);
#pragma GCC unroll 2
					for (g = 0; g < mg; g++)
						is[g][j] = avx2_chain(_mm256_add_epi16(is[g][j],
						    _mm256_maddubs_epi16(u[g], x)));
				}
			}
#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				const uint8_t *p = gp[g] + (size_t)b * K4BLK;
				__m256 ws = _mm256_mul_ps(dd[g], _mm256_cvtepi32_ps(
				    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)
				    (p + QUANT_Q4K_SC(PG) + PG * sub)))));
				__m256 wm = _mm256_mul_ps(dm[g], _mm256_cvtepi32_ps(
				    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)
				    (p + QUANT_Q4K_MN(PG) + PG * sub)))));

#pragma GCC unroll 4
				for (j = 0; j < nr; j++) {
					__m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(is[g][j],
					    ones));

					acc[g][j] = _mm256_fmadd_ps(s, _mm256_mul_ps(ws,
					    _mm256_set1_ps(xd[j][e / 32])), acc[g][j]);
					acc[g][j] = _mm256_fnmadd_ps(wm,
					    _mm256_set1_ps(xs[j][e / 32]), acc[g][j]);
				}
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			avx2_store_rows(y + (size_t)(t0 + j) * ldy + r0 + PG * g, acc[g][j],
			    mr - PG * g);
}

/*
 * Repacked Q6_K, per 256-element super-block of an 8-row group: the rows'
 * d (halves, 16 bytes); per 32-element block m the scale pairs (16 bytes:
 * byte 2i is row i's scale of sub-block 2m, byte 2i + 1 that of 2m + 1);
 * then per block m (Q6BLK bytes each), for each half h, three vectors
 * X, Y, Z.  Code vector c of half h holds in lane i row i's elements 16h
 * + 4c.. (one code a byte).  X, Y and Z carry code vectors 0, 1 and 2 in
 * their low six bits; their top two bits carry bits 4-5, 2-3 and 0-1 of
 * code vector 3.  Three codes then cost a mask each and the fourth eight
 * operations, where nibbles and a vector of top bits cost four or five
 * each.  The codes stay unsigned (0..63, the offset 32 is removed
 * through the activations' half-block sums, ACT_PAIR16), so two vectors'
 * vpmaddubsw pairs add up in 16 bits (2 x 2 x 63 x 127 = 32004); vpmaddwd
 * with the rows' scales widens them.  A block's sum, at most 2 x 16 x 63
 * x 127 x 128 plus the offset term, stays an exact int32; it is scaled
 * once per block for eight rows: acc = fma(f32(sum), d * token scale, acc).
 */
#define Q6SC	16
#define Q6Q	(Q6SC + 8 * 16)
#define Q6BLK	192
#define Q6SB	(Q6Q + 8 * Q6BLK)

/* The 256 codes (0..63) of a Q6_K super-block, in element order. */
static void
q6k_unpack(const uint8_t *sb, uint8_t *c)
{
	int	h, l, q0, q1, qh;

	for (h = 0; h < 2; h++)
		for (l = 0; l < 32; l++) {
			q0 = sb[64 * h + l];
			q1 = sb[64 * h + 32 + l];
			qh = sb[128 + 32 * h + l];
			c[128 * h + l] = (uint8_t)((q0 & 15) | (qh & 3) << 4);
			c[128 * h + 32 + l] = (uint8_t)((q1 & 15) | (qh >> 2 & 3) << 4);
			c[128 * h + 64 + l] = (uint8_t)(q0 >> 4 | (qh >> 4 & 3) << 4);
			c[128 * h + 96 + l] = (uint8_t)(q1 >> 4 | (qh >> 6) << 4);
		}
}

/* Row i's lanes (q + 4i) of block m's X, Y, Z from its 32 codes u. */
static void
q6k_pack_block(uint8_t *q, const uint8_t *u)
{
	int	h, c, k;

	for (h = 0; h < 2; h++)
		for (c = 0; c < 3; c++)
			for (k = 0; k < 4; k++)
				q[96 * h + 32 * c + k] = (uint8_t)(u[16 * h + 4 * c + k] |
				    (u[16 * h + 12 + k] >> (4 - 2 * c) & 3) << 6);
}

/* Copy Q6_K rows into the packed layout (or only size it). */
size_t
avx2_q6_k_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	const int64_t	nsb = cols / 256, ng = (rows + PG - 1) / PG;
	uint8_t		cd[256];
	int64_t		g, b, r;
	int		i, m;

	if (dst == NULL)
		return ((size_t)(ng * nsb) * Q6SB);
	for (g = 0; g < ng; g++) {
		for (b = 0; b < nsb; b++) {
			uint8_t *o = dst + (size_t)(g * nsb + b) * Q6SB;

			memset(o, 0, Q6SB);
			for (i = 0; i < PG; i++) {
				const uint8_t *sb;

				if ((r = g * PG + i) >= rows)
					break;
				sb = w + (size_t)r * rb + (size_t)b * 210;
				q6k_unpack(sb, cd);
				memcpy(o + 2 * i, sb + 208, 2);
				for (m = 0; m < 8; m++) {
					uint8_t		*q = o + Q6Q + Q6BLK * m;
					const uint8_t	*u = cd + 32 * m;

					o[Q6SC + 16 * m + 2 * i] = sb[192 + 2 * m];
					o[Q6SC + 16 * m + 2 * i + 1] = sb[192 + 2 * m + 1];
					q6k_pack_block(q + 4 * i, u);
				}
			}
		}
	}
	return ((size_t)(ng * nsb) * Q6SB);
}

/* Code vector c (0..3) of the half of a packed Q6_K block at q (its X). */
AI __m256i
q6k_codes(const uint8_t *q, const int c)
{
	const __m256i	m6 = _mm256_set1_epi8(0x3f), mt = _mm256_set1_epi8((char)0xc0);
	__m256i		x, y, z;

	if (c < 3)
		return (_mm256_and_si256(_mm256_loadu_si256((const __m256i *)
		    (q + 32 * c)), m6));
	/* Masked first, so the 16-bit shifts move nothing across bytes. */
	x = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)q), mt);
	y = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(q + 32)), mt);
	z = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(q + 64)), mt);
	return (_mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(x, 2),
	    _mm256_srli_epi16(y, 4)), _mm256_srli_epi16(z, 6)));
}

/* Block m's scale pairs (row i's at 16-bit lanes 2i, 2i + 1) of super-block p. */
AI __m256i
q6k_pairs(const uint8_t *p, const int m)
{
	return (_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)
	    (p + Q6SC + 16 * m))));
}

/*
 * For vpmaddwd: each row's scale of half h of block m in both 16-bit
 * halves of its lane.
 */
AI __m256i
q6k_scales(const uint8_t *p, const int m, const int h)
{
	__m256i	pr = q6k_pairs(p, m);

	if (h == 0)
		return (_mm256_blend_epi16(pr, _mm256_slli_epi32(pr, 16), 0xaa));
	return (_mm256_blend_epi16(pr, _mm256_srli_epi32(pr, 16), 0x55));
}

/* One packed Q6_K tile: mg groups of 8 rows by nr tokens (compile-time). */
AI void
q6k_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nsb = cols / 256, stride = a->stride;
	const size_t	 gstride = (size_t)nsb * Q6SB;
	const uint8_t	*gp[2];
	const int8_t	*xq[PACK2_NR];
	const float	*xd[PACK2_NR];
	const int32_t	*xp[PACK2_NR];
	__m256		 acc[2][PACK2_NR];
	int64_t		 b;
	int		 g, j, k, m, h;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
		xp[j] = a->bias + (size_t)(t0 + j) * (stride / 4);
	}
	for (b = 0; b < nsb; b++) {
#pragma GCC unroll 8
		for (m = 0; m < 8; m++) {
			const int64_t	 e = 256 * b + 32 * m;
			__m256i		 is[2][PACK2_NR];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++)
#pragma GCC unroll 4
				for (j = 0; j < nr; j++)
					is[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				__m256i	sc[2];

				/* Loaded where used: registers are short with two groups. */
#pragma GCC unroll 2
				for (g = 0; g < mg; g++)
					sc[g] = q6k_scales(gp[g] + (size_t)b * Q6SB, m, h);
#pragma GCC unroll 2
				for (k = 0; k < 4; k += 2) {
					__m256i	u0[2], u1[2];

#pragma GCC unroll 2
					for (g = 0; g < mg; g++) {
						const uint8_t *q = gp[g] + (size_t)b * Q6SB + Q6Q +
						    Q6BLK * m + 96 * h;

						u0[g] = q6k_codes(q, k);
						u1[g] = q6k_codes(q, k + 1);
					}
#pragma GCC unroll 4
					for (j = 0; j < nr; j++) {
						int32_t	q0, q1;
						__m256i	x0, x1;

						memcpy(&q0, xq[j] + e + 16 * h + 4 * k, 4);
						memcpy(&q1, xq[j] + e + 16 * h + 4 * k + 4, 4);
						x0 = _mm256_set1_epi32(q0);
						x1 = _mm256_set1_epi32(q1);
#pragma GCC unroll 2
						for (g = 0; g < mg; g++)
							is[g][j] = avx2_chain(_mm256_add_epi32(is[g][j],
							    _mm256_madd_epi16(_mm256_add_epi16(
							    _mm256_maddubs_epi16(u0[g], x0),
							    _mm256_maddubs_epi16(u1[g], x1)), sc[g])));
					}
				}
			}
#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				/* 32 x the pairs, for the offset term against ACT_PAIR16. */
				__m256i sp = _mm256_slli_epi16(q6k_pairs(gp[g] +
				    (size_t)b * Q6SB, m), 5);
				__m256 dd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)
				    (gp[g] + (size_t)b * Q6SB)));

#pragma GCC unroll 4
				for (j = 0; j < nr; j++) {
					__m256i off = _mm256_madd_epi16(sp,
					    _mm256_set1_epi32(xp[j][e / 32]));

					acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(
					    _mm256_sub_epi32(is[g][j], off)), _mm256_mul_ps(dd,
					    _mm256_set1_ps(xd[j][e / 32])), acc[g][j]);
				}
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			avx2_store_rows(y + (size_t)(t0 + j) * ldy + r0 + PG * g, acc[g][j],
			    mr - PG * g);
}

/*
 * The packed tile shapes: a single token takes both groups at once (two
 * chains in flight, one pass over the activations); more tokens go a
 * group at a time, which leaves registers for four of them.
 */
#define PACKED_SHAPES(fn, tile)						\
void									\
fn(const uint8_t *pw, int64_t cols, int64_t r0, int mr,		\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	int	g;							\
									\
	for (g = 0; PG * g < mr; g += nr == 1 ? 2 : 1) {		\
		int64_t	r = r0 + PG * g;				\
		int	n = mr - PG * g;				\
									\
		switch (nr) {						\
		case 1:							\
			if (n > PG)					\
				tile(pw, cols, r, 2, n, a, t0, 1, y, ldy); \
			else						\
				tile(pw, cols, r, 1, n, a, t0, 1, y, ldy); \
			break;						\
		case 2: tile(pw, cols, r, 1, n, a, t0, 2, y, ldy); break; \
		case 3: tile(pw, cols, r, 1, n, a, t0, 3, y, ldy); break; \
		default: tile(pw, cols, r, 1, n, a, t0, 4, y, ldy); break; \
		}							\
	}								\
}

PACKED_SHAPES(avx2_q4_0_packed, q40_tile)
PACKED_SHAPES(avx2_q8_0_packed, q80_tile)
PACKED_SHAPES(avx2_q4_k_packed, q4k_tile)
PACKED_SHAPES(avx2_q6_k_packed, q6k_tile)
