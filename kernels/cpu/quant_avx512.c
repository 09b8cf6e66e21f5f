/*
 * quant_avx512.c: AVX-512 kernels (VNNI for the integer types).
 *
 * Built with AVX-512 enabled; only reached after quant_isa_supported()
 * checked the CPU.  A tile is up to MR rows by NR tokens; its accumulators
 * stay in registers while the columns are walked one step at a time.  Every
 * output element goes through the same operations in the same order
 * whatever the tile shape, so results do not depend on the batch.
 *
 * Integer types: a zmm holds 64 unsigned weight codes; vpdpbusd multiplies
 * them with 64 activation codes into 16 lanes of four products each,
 * starting from the activation bias (-offset * sum of the lane's codes), so
 * each lane is an exact integer sum.  The lane is then scaled by (weight
 * scale of its sub-block) * (activation scale of its block) and accumulated
 * in f32.  Q4_0 gathers four 18-byte blocks with vpermt2w into two code
 * vectors that share lane scales (activations in ACT_Q4_0X4 order); Q4_K
 * uses its nibble planes as they are (ACT_Q4_KX order) and subtracts the
 * mins in a short pass per output.
 *
 * Float types: f32 multiply-adds (F16 through F16C, BF16 by shifting),
 * exact in the weights and activations; or, when allowed
 * (quant_allow_bf16_dot), vdpbf16ps on activations rounded to bf16, twice
 * the arithmetic rate.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "nibble_one_avx512.h"
#include "pack_k_avx512.h"
#include "prefetch.h"
#include "quant.h"
#include "tensor_type.h"
#include "tile_dispatch.h"

#define MR	4
#define NR	4
#define FNR	6	/* tokens per tile of the float types */

/*
 * Software prefetch distance.  A decode tile (one token) walks one row at a
 * time so the weights are a single sequential stream, which the hardware
 * prefetcher follows far better than several interleaved short rows; a
 * prefetch a few KB ahead then helps on top.  Larger tiles (prefill) fetch
 * the next tiles instead.
 */
#ifndef PF_SMALL
#define PF_SMALL	2048
#define PF_LARGE	4096
#endif
#define PF_DIST(kind, mr, rb)						\
	((mr) == 1 ? ((kind) == K_Q4_0 || (kind) == K_Q8_0 ? PF_SMALL : PF_LARGE) :	\
	    2 * (mr) * (rb))

#define AI	static inline __attribute__((always_inline))

enum kind {
	K_Q4_0, K_Q8_0, K_Q4_K, K_Q6_K,
	/* ext_tile: */
	K_Q4_1, K_Q5_0, K_Q5_1, K_IQ4_NL, K_Q2_K, K_Q3_K, K_Q5_K, K_IQ4_XS,
};

/* Half at p (unaligned) to float. */
AI float
h2f(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return (_cvtsh_ss(h));
}

/* Byte mask of the first n (0..64) bytes. */
AI __mmask64
bytes_mask(int64_t n)
{
	return (n >= 64 ? ~0ULL : n <= 0 ? 0 : (1ULL << n) - 1);
}

/*
 * Codes and lane scales of group g (blocks 4g..4g+3) of a Q4_0 row with nb
 * blocks.  vpermt2w gathers the four blocks' 16 nibble bytes (words 9k+1..
 * 9k+8 of the 72 bytes) into one zmm and their scales (word 9k) into lanes
 * [d0 x4, d1 x4, d2 x4, d3 x4]; missing blocks of a last partial group read
 * as zero through the masked loads.
 */
AI void
unpack_q4_0(const uint8_t *row, int64_t g, int64_t nb, __m512i *lo, __m512i *hi,
    __m512 *s)
{
	const uint8_t	*b = row + 72 * g;
	int64_t		 n = (nb - 4 * g) * 18;
	const __m512i	 iq = _mm512_set_epi16(
	    35, 34, 33, 32, 31, 30, 29, 28, 26, 25, 24, 23, 22, 21, 20, 19,
	    17, 16, 15, 14, 13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1);
	const __m512i	 is = _mm512_set_epi16(
	    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	    27, 27, 27, 27, 18, 18, 18, 18, 9, 9, 9, 9, 0, 0, 0, 0);
	__m512i		 A, B, q;

	if (n >= 72) {
		A = _mm512_loadu_si512((const void *)b);
		B = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(b + 64)));
	} else {
		A = _mm512_maskz_loadu_epi8(bytes_mask(n), b);
		B = _mm512_maskz_loadu_epi8(bytes_mask(n - 64), b + 64);
	}
	q = _mm512_permutex2var_epi16(A, iq, B);
	*lo = _mm512_and_si512(q, _mm512_set1_epi8(0x0f));
	*hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0f));
	*s = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(A, is, B)));
}

/* 64 codes (int8 + 128) and lane scales of pair p of a Q8_0 row. */
AI void
unpack_q8_0(const uint8_t *row, int64_t p, int64_t nb, __m512i *u, __m512 *s)
{
	const uint8_t	*b = row + 68 * p;
	int		 two = nb - 2 * p >= 2;
	const __m512i	 is = _mm512_set_epi16(
	    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	    17, 17, 17, 17, 17, 17, 17, 17, 0, 0, 0, 0, 0, 0, 0, 0);
	__m512i		 A, z;

	A = _mm512_maskz_loadu_epi8(two ? ~0ULL : bytes_mask(34), b);
	z = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + 2)));
	z = _mm512_inserti64x4(z, _mm256_maskz_loadu_epi8(two ? ~0U : 0, b + 36), 1);
	*u = _mm512_xor_si512(z, _mm512_set1_epi8((char)0x80));
	*s = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(is, A)));
}

/*
 * Codes of step jj (0..3) of a Q4_K super-block in the ACT_Q4_KX order:
 * bytes 64h..64h+63 of qs hold chunks (4h, 4h+2) in their low nibbles and
 * (4h+1, 4h+3) in their high nibbles.
 */
AI __m512i
unpack_q4_k(const uint8_t *sb, int jj)
{
	__m512i	v = _mm512_loadu_si512((const void *)(sb + 16 + 64 * (jj >> 1)));

	if (jj & 1)
		v = _mm512_srli_epi16(v, 4);
	return (_mm512_and_si512(v, _mm512_set1_epi8(0x0f)));
}

/* Codes (0..63) of pair j (0..3) of a Q6_K super-block. */
AI __m512i
unpack_q6_k(const uint8_t *sb, int j)
{
	int	 h = j >> 1, hi = j & 1;
	__m512i	 ql = _mm512_loadu_si512((const void *)(sb + 64 * h));
	__m256i	 v = _mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * h));
	__m512i	 qh = _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1);
	__m512i	 lo, top;

	/*
	 * Elements 0-31 of the pair come from bytes ql[0..31], 32-63 from
	 * ql[32..63]; the low pair uses the low nibbles and qh bits 0-1 / 2-3,
	 * the high pair the high nibbles and qh bits 4-5 / 6-7.
	 */
	if (hi) {
		lo = _mm512_and_si512(_mm512_srli_epi16(ql, 4), _mm512_set1_epi8(0x0f));
		top = _mm512_srlv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0));
	} else {
		lo = _mm512_and_si512(ql, _mm512_set1_epi8(0x0f));
		top = _mm512_sllv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4));
	}
	return (_mm512_ternarylogic_epi32(lo, top, _mm512_set1_epi8(0x30), 0xf8));
}

/* Horizontal sum in a fixed order. */
AI float
hsum512(__m512 v)
{
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return (_mm_cvtss_f32(b));
}

/* Horizontal sum of 8 in a fixed order. */
AI float
hsum256(__m256 a)
{
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return (_mm_cvtss_f32(b));
}

/*
 * One tile of an integer type: mr rows by nr tokens (compile-time).  A step
 * is 128 elements for Q4_0 (two code vectors share the lane scales) and 64
 * for the others.
 */
AI void
int_tile(const enum kind kind, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    const int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nb = cols / 32, stride = a->stride;
	const int64_t	 nsteps = kind == K_Q4_0 ? (nb + 3) / 4 : (nb + 1) / 2;
	const int	 has_bias = kind != K_Q4_K;
	const int	 step_bytes = kind == K_Q4_0 ? 72 : kind == K_Q8_0 ? 68 :
			    kind == K_Q4_K ? 36 : 52;	/* Q6_K: 210 / 4 */
	__m512		 acc[MR][NR];
	__m512		 ksc[MR];	/* K-quants: scales of the super-block */
	__m512i		 u[MR], u2[MR];
	__m512		 ws[MR];
	const uint8_t	*row[MR];
	const int8_t	*xq[NR];
	const float	*dl[NR];
	const int32_t	*bias[NR];
	const int	 unroll = kind == K_Q4_K || kind == K_Q6_K ? 4 : 1;
	int64_t		 p0;
	int		 i, j, jj;
	/* Q4_K: dmin * min of every sub-block, for the pass after the loop. */
	float		 mins[kind == K_Q4_K ? MR : 1][kind == K_Q4_K ? nb : 1];

#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
		row[i] = w + (r0 + i) * rb;
		ksc[i] = _mm512_setzero_ps();
		u2[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[i][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		dl[j] = a->dl + (size_t)(t0 + j) * (stride / 4);
		bias[j] = a->bias + (size_t)(t0 + j) * (stride / 4);
	}
	/*
	 * K-quant super-blocks are four steps: unrolled, each step's
	 * shuffles and shifts are constants.
	 */
	for (p0 = 0; p0 < nsteps; p0 += unroll) {
#pragma GCC unroll 4
		for (jj = 0; jj < unroll; jj++) {
			const int64_t	p = p0 + jj;

			/* Fetch ahead: see PF_DIST. */
#pragma GCC unroll 4
			for (i = 0; i < mr; i++)
				_mm_prefetch((const char *)row[i] + PF_DIST(kind, mr, rb) +
				    step_bytes * p, _MM_HINT_T0);
#pragma GCC unroll 4
			for (i = 0; i < mr; i++) {
				if (kind == K_Q4_0)
					unpack_q4_0(row[i], p, nb, &u[i], &u2[i], &ws[i]);
				else if (kind == K_Q8_0)
					unpack_q8_0(row[i], p, nb, &u[i], &ws[i]);
				else if (kind == K_Q4_K) {
					const uint8_t *sb = row[i] + 144 * (p >> 2);
					if (jj == 0) {
						uint64_t sc, mn;
						__m256 f;

						q4k_scales_fast(sb + 4, &sc, &mn);
						f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
						    _mm_cvtsi64_si128((long long)sc)));
						ksc[i] = _mm512_castps256_ps512(
						    _mm256_mul_ps(f, _mm256_set1_ps(h2f(sb))));
						f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
						    _mm_cvtsi64_si128((long long)mn)));
						_mm256_storeu_ps(&mins[kind == K_Q4_K ? i : 0][2 * p],
						    _mm256_mul_ps(f, _mm256_set1_ps(h2f(sb + 2))));
					}
					u[i] = unpack_q4_k(sb, jj);
					/* Step jj holds chunks c and c + 2, c = 4(jj/2) + jj%2. */
					ws[i] = _mm512_permutexvar_ps(_mm512_set_epi32(
					    2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0) +
					    _mm512_set1_epi32(4 * (jj >> 1) + (jj & 1)), ksc[i]);
				} else {
					const uint8_t *sb = row[i] + 210 * (p >> 2);
					if (jj == 0) {
						__m128i s8 = _mm_loadu_si128((const __m128i *)(sb + 192));
						ksc[i] = _mm512_mul_ps(_mm512_cvtepi32_ps(
						    _mm512_cvtepi8_epi32(s8)), _mm512_set1_ps(h2f(sb + 208)));
					}
					u[i] = unpack_q6_k(sb, jj);
					/* Lane l is sub-block 4 * jj + l / 4. */
					ws[i] = _mm512_permutexvar_ps(_mm512_add_epi32(
					    _mm512_set1_epi32(4 * jj), _mm512_srli_epi32(
					    _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
					    5, 4, 3, 2, 1, 0), 2)), ksc[i]);
				}
			}
#pragma GCC unroll 4
			for (j = 0; j < nr; j++) {
				const int64_t	xo = kind == K_Q4_0 ? 128 * p : 64 * p;
				__m512i		x = _mm512_load_si512(xq[j] + xo);
				__m512i		x2 = kind == K_Q4_0 ?
						    _mm512_load_si512(xq[j] + xo + 64) :
						    _mm512_setzero_si512();
				__m512		d = _mm512_loadu_ps(dl[j] + 16 * p);
				__m512i		b0 = has_bias ?
						    _mm512_loadu_si512(bias[j] + 16 * p) :
						    _mm512_setzero_si512();

#pragma GCC unroll 4
				for (i = 0; i < mr; i++) {
					__m512i	 s = _mm512_dpbusd_epi32(b0, u[i], x);
					if (kind == K_Q4_0)
						s = _mm512_dpbusd_epi32(s, u2[i], x2);
					__m512	 f = _mm512_cvtepi32_ps(s);
					acc[i][j] = _mm512_fmadd_ps(f, _mm512_mul_ps(ws[i], d), acc[i][j]);
				}
			}
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
#pragma GCC unroll 4
		for (j = 0; j < nr; j++) {
			float v = hsum512(acc[i][j]);

			if (kind == K_Q4_K) {
				const float	*s = a->s + (size_t)(t0 + j) * (stride / 32);
				const float	*m = mins[kind == K_Q4_K ? i : 0];
				__m256		 am = _mm256_setzero_ps();
				int64_t		 k;

				for (k = 0; k < nb; k += 8)
					am = _mm256_fmadd_ps(_mm256_loadu_ps(m + k),
					    _mm256_loadu_ps(s + k), am);
				v -= hsum256(am);
			}
			y[(size_t)(t0 + j) * ldy + r0 + i] = v;
		}
	}
}

/*
 * Instantiate a tile shape for each (mr, nr); a single token, or rows short
 * of a full tile, go one row at a time.
 */
#define DISPATCH(fn, kind)						\
static void								\
fn(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,	\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	int	i;							\
									\
	if (mr == MR && nr > 1) {					\
		switch (nr) {						\
		case 1: int_tile(kind, w, rb, cols, r0, MR, a, t0, 1, y, ldy); return; \
		case 2: int_tile(kind, w, rb, cols, r0, MR, a, t0, 2, y, ldy); return; \
		case 3: int_tile(kind, w, rb, cols, r0, MR, a, t0, 3, y, ldy); return; \
		default: int_tile(kind, w, rb, cols, r0, MR, a, t0, 4, y, ldy); return; \
		}							\
	}								\
	for (i = 0; i < mr; i++) {					\
		switch (nr) {						\
		case 1: int_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 1, y, ldy); break; \
		case 2: int_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 2, y, ldy); break; \
		case 3: int_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 3, y, ldy); break; \
		default: int_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 4, y, ldy); break; \
		}							\
	}								\
}

DISPATCH(avx512_q4_0, K_Q4_0)
DISPATCH(avx512_q8_0, K_Q8_0)
DISPATCH(avx512_q4_k, K_Q4_K)
DISPATCH(avx512_q6_k, K_Q6_K)

/*
 * The types added after the first seven share one tile (ext_tile), all on
 * activations in ACT_NATURAL order.  A step is 64 elements: two blocks of
 * 32, or a quarter of a 256-element super-block.  Each step yields 64
 * unsigned codes (code + offset) and a weight scale per lane:
 *   acc += f32(dpbusd(bias, u, x)) * (scale * d)
 * Mins: Q2_K's (one per 16 elements; offset -1, so bias is the lane's
 * activation code sum) add f32(bias) * (min * d) per lane; those of Q4_1,
 * Q5_1 and Q5_K (one per 32) are kept per block and subtracted in a short
 * pass per output against s (d * sum(q) of each block), as Q4_K's are.
 */

/* 32 nibble codes of a 32-element block (low nibbles first), natural order. */
AI __m256i
nib_block(__m128i v)
{
	__m128i	m = _mm_set1_epi8(0x0f);

	return (_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m)),
	    _mm_and_si128(_mm_srli_epi16(v, 4), m), 1));
}

/* The IQ4 code book plus 128, in both 128-bit halves, for vpshufb. */
AI __m256i
iq4_table256(void)
{
	return (_mm256_setr_epi8(
	    1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153, (char)166,
	    (char)181, (char)197, (char)217, (char)241,
	    1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153, (char)166,
	    (char)181, (char)197, (char)217, (char)241));
}

/*
 * Codes, scales and mins of step p (blocks 2p, 2p + 1) of a row of a
 * 32-element type with nb blocks; a missing second block reads as zero.
 */
AI void
unpack_b32(const enum kind kind, const uint8_t *row, int64_t p, int64_t nb, __m512i *u,
    __m512 *ws, float *mins)
{
	const int	 bb = kind == K_Q4_1 ? 20 : kind == K_Q5_0 ? 22 :
			    kind == K_Q5_1 ? 24 : 18;
	const int	 qo = kind == K_Q4_1 ? 4 : kind == K_Q5_0 ? 6 :
			    kind == K_Q5_1 ? 8 : 2;
	const uint8_t	*b0 = row + 2 * p * bb, *b1 = b0 + bb;
	int		 two = 2 * p + 1 < nb;
	__m256i		 c0, c1;
	float		 d0, d1, m0 = 0, m1 = 0;

	c0 = nib_block(_mm_loadu_si128((const __m128i *)(b0 + qo)));
	c1 = nib_block(_mm_maskz_loadu_epi8(two ? 0xffff : 0, b1 + qo));
	d0 = h2f(b0);
	d1 = two ? h2f(b1) : 0;
	if (kind == K_Q4_1 || kind == K_Q5_1) {
		m0 = h2f(b0 + 2);
		m1 = two ? h2f(b1 + 2) : 0;
	}
	if (kind == K_Q5_0 || kind == K_Q5_1) {
		uint32_t h0, h1 = 0;
		memcpy(&h0, b0 + qo - 4, 4);
		if (two)
			memcpy(&h1, b1 + qo - 4, 4);
		c0 = _mm256_or_si256(c0, _mm256_maskz_mov_epi8(h0,
		    _mm256_set1_epi8(0x10)));
		c1 = _mm256_or_si256(c1, _mm256_maskz_mov_epi8(h1, _mm256_set1_epi8(0x10)));
	}
	if (kind == K_IQ4_NL) {
		c0 = _mm256_shuffle_epi8(iq4_table256(), c0);
		c1 = _mm256_shuffle_epi8(iq4_table256(), c1);
	}
	*u = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
	*ws = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
	if (kind == K_Q4_1 || kind == K_Q5_1) {
		mins[2 * p] = m0;
		mins[2 * p + 1] = m1;	/* the array has room for an even count */
	}
}

/* The 16 six-bit scales of a Q3_K super-block, as bytes 0..63. */
AI __m128i
q3k_scales16(const uint8_t *s)
{
	uint32_t	a0, a1, t, r[4];

	memcpy(&a0, s, 4);
	memcpy(&a1, s + 4, 4);
	memcpy(&t, s + 8, 4);
	r[0] = (a0 & 0x0f0f0f0f) | (t & 0x03030303) << 4;
	r[1] = (a1 & 0x0f0f0f0f) | ((t >> 2) & 0x03030303) << 4;
	r[2] = ((a0 >> 4) & 0x0f0f0f0f) | ((t >> 4) & 0x03030303) << 4;
	r[3] = ((a1 >> 4) & 0x0f0f0f0f) | ((t >> 6) & 0x03030303) << 4;
	return (_mm_loadu_si128((const __m128i *)r));
}

/*
 * Per-super-block scales and mins of a 256-element type, one float per 16
 * elements (sc16, mn16).
 */
AI void
ksetup(const enum kind kind, const uint8_t *sb, __m512 *sc16, __m512 *mn16, float *mn32)
{
	const __m512i	half = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10,
			    9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 1);

	if (kind == K_Q2_K) {
		__m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sb));
		*sc16 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v,
		    _mm512_set1_epi32(15))), _mm512_set1_ps(h2f(sb + 80)));
		*mn16 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)),
		    _mm512_set1_ps(-h2f(sb + 82)));
	} else if (kind == K_Q3_K) {
		__m512i v = _mm512_cvtepu8_epi32(q3k_scales16(sb + 96));
		*sc16 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v,
		    _mm512_set1_epi32(32))), _mm512_set1_ps(h2f(sb + 108)));
	} else if (kind == K_Q5_K) {
		uint64_t sc, mn;

		q4k_scales_fast(sb + 4, &sc, &mn);
		*sc16 = _mm512_permutexvar_ps(half, _mm512_castps256_ps512(_mm256_mul_ps(
		    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc))),
		    _mm256_set1_ps(h2f(sb)))));
		_mm256_storeu_ps(mn32, _mm256_mul_ps(_mm256_cvtepi32_ps(
		    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn))),
		    _mm256_set1_ps(-h2f(sb + 2))));
		(void)mn16;
	} else {		/* IQ4_XS */
		uint16_t	sh;
		uint32_t	sl;
		int32_t		ls[8];
		int		i;

		memcpy(&sh, sb + 2, 2);
		memcpy(&sl, sb + 4, 4);
		for (i = 0; i < 8; i++)
			ls[i] = (int32_t)(((sl >> (4 * i)) & 15) | ((sh >> (2 * i)) & 3) << 4) - 32;
		*sc16 = _mm512_permutexvar_ps(half, _mm512_castps256_ps512(_mm256_mul_ps(
		    _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)ls)),
		    _mm256_set1_ps(h2f(sb)))));
	}
}

/* 64 codes of step jj (0..3) of a 256-element super-block. */
AI __m512i
unpack_k256(const enum kind kind, const uint8_t *sb, const int jj)
{
	__m256i	lo, hi, v;

	if (kind == K_Q2_K || kind == K_Q3_K) {
		/* Two-bit planes 2(jj % 2) and 2(jj % 2) + 1 of 32 bytes. */
		const int s0 = 4 * (jj & 1);
		v = _mm256_loadu_si256((const __m256i *)(sb + (kind == K_Q2_K ? 16 : 32) +
		    32 * (jj >> 1)));
		lo = _mm256_and_si256(_mm256_srli_epi16(v, s0), _mm256_set1_epi8(3));
		hi = _mm256_and_si256(_mm256_srli_epi16(v, s0 + 2), _mm256_set1_epi8(3));
		if (kind == K_Q3_K) {
			/* hmask bit 4(jj / 2) + 2(jj % 2) (+ 1) adds 4. */
			const int hb = 4 * (jj >> 1) + 2 * (jj & 1);
			__m256i hm = _mm256_loadu_si256((const __m256i *)sb);
			lo = _mm256_or_si256(lo, _mm256_maskz_mov_epi8(
			    _mm256_test_epi8_mask(hm, _mm256_set1_epi8((char)(1 << hb))),
			    _mm256_set1_epi8(4)));
			hi = _mm256_or_si256(hi, _mm256_maskz_mov_epi8(
			    _mm256_test_epi8_mask(hm, _mm256_set1_epi8((char)(2 << hb))),
			    _mm256_set1_epi8(4)));
		}
	} else if (kind == K_Q5_K) {
		__m256i qh = _mm256_loadu_si256((const __m256i *)(sb + 16));
		v = _mm256_loadu_si256((const __m256i *)(sb + 48 + 32 * jj));
		lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
		hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
		lo = _mm256_or_si256(lo, _mm256_maskz_mov_epi8(
		    _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << (2 * jj)))),
		    _mm256_set1_epi8(16)));
		hi = _mm256_or_si256(hi, _mm256_maskz_mov_epi8(
		    _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(2 << (2 * jj)))),
		    _mm256_set1_epi8(16)));
	} else {		/* IQ4_XS: sub-blocks 2jj, 2jj + 1 of 16 bytes */
		v = _mm256_loadu_si256((const __m256i *)(sb + 8 + 32 * jj));
		lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
		hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
		lo = _mm256_shuffle_epi8(iq4_table256(), lo);
		hi = _mm256_shuffle_epi8(iq4_table256(), hi);
		/* [lo0 lo1 hi0 hi1] to element order [lo0 hi0 lo1 hi1]. */
		__m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
		return (_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)));
	}
	return (_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

/* One tile of a type added after the first seven (see above). */
AI void
ext_tile(const enum kind kind, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    const int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int	 k256 = kind >= K_Q2_K;
	const int	 lmins = kind == K_Q2_K;	/* mins per lane */
	const int	 bmins = kind == K_Q4_1 || kind == K_Q5_1 || kind == K_Q5_K;
	const int64_t	 nb = cols / 32, stride = a->stride, nsteps = (nb + 1) / 2;
	const int	 sbb = kind == K_Q2_K ? 84 : kind == K_Q3_K ? 110 :
			    kind == K_Q5_K ? 176 : 136;
	const int	 step_bytes = k256 ? sbb / 4 : kind == K_Q4_1 ? 40 :
			    kind == K_Q5_0 ? 44 : kind == K_Q5_1 ? 48 : 36;
	const int	 unroll = k256 ? 4 : 1;
	const __m512i	 quarter = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11,
			    10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2);
	__m512		 acc[MR][NR], ws[MR], wm[MR], ksc[MR], kmn[MR];
	__m512i		 u[MR];
	const uint8_t	*row[MR];
	const int8_t	*xq[NR];
	const float	*dl[NR];
	const int32_t	*bias[NR];
	int64_t		 p0;
	int		 i, j, jj;
	/* Q4_1, Q5_1, Q5_K: the min of every block of 32, rounded up to 8. */
	float		 bmin[bmins ? MR : 1][bmins ? ((nb + 7) & ~7) : 1];

#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
		row[i] = w + (r0 + i) * rb;
		ksc[i] = kmn[i] = wm[i] = _mm512_setzero_ps();
		if (bmins)
			memset(bmin[i], 0, sizeof bmin[i]);
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[i][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		dl[j] = a->dl + (size_t)(t0 + j) * (stride / 4);
		bias[j] = a->bias + (size_t)(t0 + j) * (stride / 4);
	}
	for (p0 = 0; p0 < nsteps; p0 += unroll) {
#pragma GCC unroll 4
		for (jj = 0; jj < unroll; jj++) {
			const int64_t	p = p0 + jj;

#pragma GCC unroll 4
			for (i = 0; i < mr; i++)
				_mm_prefetch((const char *)row[i] + PF_DIST(kind, mr, rb) +
				    step_bytes * p, _MM_HINT_T0);
#pragma GCC unroll 4
			for (i = 0; i < mr; i++) {
				if (!k256) {
					unpack_b32(kind, row[i], p, nb, &u[i], &ws[i],
					    bmin[bmins ? i : 0]);
					continue;
				}
				const uint8_t *sb = row[i] + sbb * (p >> 2);
				if (jj == 0)
					ksetup(kind, sb, &ksc[i], &kmn[i],
					    &bmin[bmins ? i : 0][bmins ? 2 * p : 0]);
				u[i] = unpack_k256(kind, sb, jj);
				/* Lane l of step jj is sub-block 4jj + l / 4 of 16. */
				__m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * jj), quarter);
				ws[i] = _mm512_permutexvar_ps(idx, ksc[i]);
				if (lmins)
					wm[i] = _mm512_permutexvar_ps(idx, kmn[i]);
			}
#pragma GCC unroll 4
			for (j = 0; j < nr; j++) {
				__m512i	x = _mm512_load_si512(xq[j] + 64 * p);
				__m512	d = _mm512_loadu_ps(dl[j] + 16 * p);
				__m512i	b0 = bmins ? _mm512_setzero_si512() :
					    _mm512_loadu_si512(bias[j] + 16 * p);
				__m512	bf = lmins ? _mm512_cvtepi32_ps(b0) : _mm512_setzero_ps();

#pragma GCC unroll 4
				for (i = 0; i < mr; i++) {
					__m512i s = _mm512_dpbusd_epi32(lmins ?
					    _mm512_setzero_si512() : b0, u[i], x);
					acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
					    _mm512_mul_ps(ws[i], d), acc[i][j]);
					if (lmins)
						acc[i][j] = _mm512_fmadd_ps(bf,
						    _mm512_mul_ps(wm[i], d), acc[i][j]);
				}
			}
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < mr; i++)
#pragma GCC unroll 4
		for (j = 0; j < nr; j++) {
			float v = hsum512(acc[i][j]);

			if (bmins) {
				/* s and the mins are zero past the last block. */
				const float	*sa = a->s + (size_t)(t0 + j) * (stride / 32);
				__m256		 am = _mm256_setzero_ps();
				int64_t		 k;

				for (k = 0; k < nb; k += 8)
					am = _mm256_fmadd_ps(_mm256_loadu_ps(bmin[i] + k),
					    _mm256_maskz_loadu_ps(nb - k >= 8 ? 0xff :
					    (__mmask8)((1u << (nb - k)) - 1), sa + k), am);
				v += hsum256(am);
			}
			y[(size_t)(t0 + j) * ldy + r0 + i] = v;
		}
}

/* As DISPATCH, for ext_tile. */
#define EDISPATCH(fn, kind)						\
static void								\
fn(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,	\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	int	i;							\
									\
	if (mr == MR && nr > 1) {					\
		switch (nr) {						\
		case 2: ext_tile(kind, w, rb, cols, r0, MR, a, t0, 2, y, ldy); return; \
		case 3: ext_tile(kind, w, rb, cols, r0, MR, a, t0, 3, y, ldy); return; \
		default: ext_tile(kind, w, rb, cols, r0, MR, a, t0, 4, y, ldy); return; \
		}							\
	}								\
	for (i = 0; i < mr; i++) {					\
		switch (nr) {						\
		case 1: ext_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 1, y, ldy); break; \
		case 2: ext_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 2, y, ldy); break; \
		case 3: ext_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 3, y, ldy); break; \
		default: ext_tile(kind, w, rb, cols, r0 + i, 1, a, t0, 4, y, ldy); break; \
		}							\
	}								\
}

EDISPATCH(avx512_q4_1, K_Q4_1)
EDISPATCH(avx512_q5_0, K_Q5_0)
EDISPATCH(avx512_q5_1, K_Q5_1)
EDISPATCH(avx512_iq4_nl, K_IQ4_NL)
EDISPATCH(avx512_q2_k, K_Q2_K)
EDISPATCH(avx512_q3_k, K_Q3_K)
EDISPATCH(avx512_q5_k, K_Q5_K)
EDISPATCH(avx512_iq4_xs, K_IQ4_XS)

/* 16 weights of a float row at column c as f32 (masked past the end). */
AI __m512
load_w(uint32_t type, const uint8_t *row, int64_t c, __mmask16 m)
{
	if (type == TT_F32)
		return (_mm512_maskz_loadu_ps(m, row + 4 * c));
	__m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * c);
	if (type == TT_F16)
		return (_mm512_cvtph_ps(h));
	return (_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
}

/* One tile of a float type: f32 multiply-adds, 16 columns at a time. */
AI void
float_tile(const uint32_t type, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    const int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	__m512		 acc[MR][FNR], wv[MR];
	const uint8_t	*row[MR];
	const float	*x[FNR];
	int64_t		 c;
	int		 i, j;

#pragma GCC unroll 6
	for (i = 0; i < mr; i++) {
		row[i] = w + (r0 + i) * rb;
#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			acc[i][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 6
	for (j = 0; j < nr; j++)
		x[j] = a->x + (size_t)(t0 + j) * cols;
	for (c = 0; c < cols; c += 16) {
		__mmask16 m = cols - c >= 16 ? 0xffff : (__mmask16)((1u << (cols - c)) - 1);

#pragma GCC unroll 6
		for (i = 0; i < mr; i++) {
			/* The next tile, a tile ahead (see int_tile). */
			_mm_prefetch((const char *)row[i] + PF_DIST(K_Q6_K, mr, rb) +
			    (type == TT_F32 ? 4 : 2) * c, _MM_HINT_T0);
			wv[i] = load_w(type, row[i], c, m);
		}
#pragma GCC unroll 6
		for (j = 0; j < nr; j++) {
			__m512 xv = _mm512_maskz_loadu_ps(m, x[j] + c);
#pragma GCC unroll 6
			for (i = 0; i < mr; i++)
				acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
		}
	}
#pragma GCC unroll 6
	for (i = 0; i < mr; i++)
#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			y[(size_t)(t0 + j) * ldy + r0 + i] = hsum512(acc[i][j]);
}

/*
 * Instantiate the shapes of a float tile (float_tile, or bf16_tile on bf16
 * dot products), as DISPATCH does for the integer ones.
 */
#define FDISPATCH(fn, tile, type)					\
static void								\
fn(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,	\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	int	i;							\
									\
	if (mr == MR && nr > 1) {					\
		switch (nr) {						\
		case 2: tile(type, w, rb, cols, r0, MR, a, t0, 2, y, ldy); return; \
		case 3: tile(type, w, rb, cols, r0, MR, a, t0, 3, y, ldy); return; \
		case 4: tile(type, w, rb, cols, r0, MR, a, t0, 4, y, ldy); return; \
		case 5: tile(type, w, rb, cols, r0, MR, a, t0, 5, y, ldy); return; \
		default: tile(type, w, rb, cols, r0, MR, a, t0, 6, y, ldy); return; \
		}							\
	}								\
	for (i = 0; i < mr; i++) {					\
		switch (nr) {						\
		case 1: tile(type, w, rb, cols, r0 + i, 1, a, t0, 1, y, ldy); break; \
		case 2: tile(type, w, rb, cols, r0 + i, 1, a, t0, 2, y, ldy); break; \
		case 3: tile(type, w, rb, cols, r0 + i, 1, a, t0, 3, y, ldy); break; \
		case 4: tile(type, w, rb, cols, r0 + i, 1, a, t0, 4, y, ldy); break; \
		case 5: tile(type, w, rb, cols, r0 + i, 1, a, t0, 5, y, ldy); break; \
		default: tile(type, w, rb, cols, r0 + i, 1, a, t0, 6, y, ldy); break; \
		}							\
	}								\
}

FDISPATCH(avx512_f32, float_tile, TT_F32)
FDISPATCH(avx512_f16, float_tile, TT_F16)
FDISPATCH(avx512_bf16, float_tile, TT_BF16)

/* 32 weights of a F16 or BF16 row at column c as bf16 (masked past the end). */
AI __m512bh
load_wb(uint32_t type, const uint8_t *row, int64_t c, int64_t cols)
{
	int64_t		n = cols - c;
	__mmask32	m = n >= 32 ? ~0U : (__mmask32)((1U << n) - 1);

	if (type == TT_BF16)
		return ((__m512bh)_mm512_maskz_loadu_epi16(m, row + 2 * c));
	__m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)m, row + 2 * c));
	__m512 hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)(m >> 16),
	    row + 2 * c + 32));
	return (_mm512_cvtne2ps_pbh(hi, lo));
}

/*
 * One tile of a float type with bf16 dot products: each vdpbf16ps adds 32
 * products (pairs of adjacent columns) into 16 f32 lanes.
 */
AI void
bf16_tile(const uint32_t type, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    const int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	__m512		 acc[MR][FNR];
	__m512bh	 wv[MR];
	const uint8_t	*row[MR];
	const uint16_t	*x[FNR];
	int64_t		 c;
	int		 i, j;

#pragma GCC unroll 6
	for (i = 0; i < mr; i++) {
		row[i] = w + (r0 + i) * rb;
#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			acc[i][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 6
	for (j = 0; j < nr; j++)
		x[j] = a->xb + (size_t)(t0 + j) * a->stride;
	for (c = 0; c < cols; c += 32) {
#pragma GCC unroll 6
		for (i = 0; i < mr; i++) {
			_mm_prefetch((const char *)row[i] + PF_DIST(K_Q6_K, mr, rb) + 2 * c,
			    _MM_HINT_T0);
			wv[i] = load_wb(type, row[i], c, cols);
		}
#pragma GCC unroll 6
		for (j = 0; j < nr; j++) {
			__m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x[j] + c));
#pragma GCC unroll 6
			for (i = 0; i < mr; i++)
				acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv[i], xv);
		}
	}
#pragma GCC unroll 6
	for (i = 0; i < mr; i++)
#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			y[(size_t)(t0 + j) * ldy + r0 + i] = hsum512(acc[i][j]);
}

FDISPATCH(avx512_f16_bf16dot, bf16_tile, TT_F16)
FDISPATCH(avx512_bf16_bf16dot, bf16_tile, TT_BF16)

/* Activations rounded to bf16 (nearest even), zero padded to the stride. */
static void
avx512_act_fill_bf16(struct qact *a, uint32_t type, int t0, int t1)
{
	const int64_t	cols = a->cols, stride = a->stride;
	int64_t		c;
	int		t;

	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		uint16_t	*xb = a->xb + (size_t)t * stride;

		for (c = 0; c < stride; c += 16) {
			int64_t		n = cols - c;
			__mmask16	m = n >= 16 ? 0xffff : n <= 0 ? 0 :
					    (__mmask16)((1U << n) - 1);
			__m256bh	v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + c));

			_mm256_storeu_si256((__m256i *)(xb + c), (__m256i)v);
		}
	}
}

/*
 * quant_act_fill with AVX-512: the same arithmetic (max, 127 / max, round to
 * nearest even, integer sums), so the same codes and scales.
 */
static void
avx512_act_fill(struct qact *a, uint32_t type, int t0, int t1)
{
	static const int chunk[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };
	const int64_t	 cols = a->cols, stride = a->stride, nb = stride / 32;
	const int	 off = quant_code_offset(type);
	const __m512i	 ones = _mm512_set1_epi8(1);
	int64_t		 b, g;
	int		 t, h;

	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		int8_t		*q = a->q + (size_t)t * stride;
		float		*d = a->d + (size_t)t * nb;
		float		*dl = a->dl + (size_t)t * stride / 4;
		int32_t		*bias = a->bias + (size_t)t * stride / 4;
		float		*s = a->s + (size_t)t * nb;

		for (b = 0; b < nb; b++) {
			int64_t	 base = 256 * (b / 8), e0 = 32 * (b % 8), pos[2];
			__m128i	 c[2];
			float	 amax, db, id;

			for (h = 0; h < 2; h++) {
				int64_t e = e0 + 16 * h;
				if (a->layout == ACT_Q4_0X4)
					pos[h] = 128 * (e / 128) + (e % 32 < 16 ?
					    16 * ((e % 128) / 32) :
					    64 + 16 * ((e % 128) / 32));
				else if (a->layout == ACT_Q4_KX)
					pos[h] = 32 * chunk[e / 32] + e % 32;
				else
					pos[h] = e;
			}
			if (32 * b >= cols) {
				_mm_storeu_si128((__m128i *)(q + base + pos[0]), _mm_setzero_si128());
				_mm_storeu_si128((__m128i *)(q + base + pos[1]), _mm_setzero_si128());
				d[b] = s[b] = 0;
				continue;
			}
			__m512 x0 = _mm512_loadu_ps(x + 32 * b);
			__m512 x1 = _mm512_loadu_ps(x + 32 * b + 16);
			amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0),
			    _mm512_abs_ps(x1)));
			db = amax / 127.0f;
			id = db > 0 ? 127.0f / amax : 0;
			__m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, _mm512_set1_ps(id)));
			__m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, _mm512_set1_ps(id)));
			int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
			c[0] = _mm512_cvtsepi32_epi8(q0);
			c[1] = _mm512_cvtsepi32_epi8(q1);
			_mm_storeu_si128((__m128i *)(q + base + pos[0]), c[0]);
			_mm_storeu_si128((__m128i *)(q + base + pos[1]), c[1]);
			d[b] = db;
			s[b] = db * (float)sum;
		}
		if (a->layout == ACT_Q4_0X4) {
			for (g = 0; g < stride / 128; g++) {
				__m512i	sm = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones,
				    _mm512_load_si512(q + 128 * g));
				sm = _mm512_dpbusd_epi32(sm, ones, _mm512_load_si512(q + 128 * g + 64));
				_mm512_storeu_si512(bias + 16 * g,
				    _mm512_mullo_epi32(sm, _mm512_set1_epi32(-off)));
				_mm512_storeu_ps(dl + 16 * g, _mm512_permutexvar_ps(
				    _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
				    _mm512_maskz_loadu_ps(0xf, d + 4 * g)));
			}
		} else {
			for (g = 0; g < stride / 64; g++) {
				int64_t	ca = 2 * g, cb = 2 * g + 1, ba, bb;
				__m512i	sm = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones,
				    _mm512_load_si512(q + 64 * g));

				_mm512_storeu_si512(bias + 16 * g,
				    _mm512_mullo_epi32(sm, _mm512_set1_epi32(-off)));
				if (a->layout == ACT_Q4_KX) {
					ba = 8 * (ca / 8) + chunk[ca % 8];
					bb = 8 * (cb / 8) + chunk[cb % 8];
				} else {
					ba = ca;
					bb = cb;
				}
				_mm512_storeu_ps(dl + 16 * g, _mm512_insertf32x8(
				    _mm512_set1_ps(d[ba]), _mm256_set1_ps(d[bb]), 1));
			}
		}
		if (a->layout == ACT_BLOCK)
			quant_act_block_bias(bias, nb, 8);
		else if (a->layout == ACT_BLOCK16)
			quant_act_block_bias(bias, 2 * nb, 4);
	}
}

/*
 * Repacked 32-element block types (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL).
 * Weights are copied at load into groups of 16 rows: per block, the 16
 * rows' half-precision scales, their mins (Q4_1, Q5_1), their fifth bits
 * (Q5_0, Q5_1: one 64-bit mask per code vector), then the codes as 64-byte
 * vectors whose 32-bit lane i holds four codes of row i.  4-bit types:
 * vector k (0..3) is bytes 4k..4k+3 of each row's block as stored, so its
 * low nibbles are elements 4k..4k+3 and its high nibbles 16+4k..; Q8_0:
 * vector k (0..7) is elements 4k..4k+3 plus 128.  vpdpbusd of a code
 * vector with four activation codes broadcast to every lane then adds to
 * 16 rows at once, and a block's integer sum for 16 rows x 1 token stays
 * in one register (no per-lane scales, no horizontal sums): per block,
 * acc = fma(f32(bias + sum u * q), row scales * token scale, acc), then
 * for the types with mins acc += mins * (token scale * sum q): one chain
 * per output in block order, whatever the tile.
 */
#define PG	16	/* rows per packed group */

#define PMR	2	/* groups per tile */
#define PNR	6	/* tokens per tile */

#define P_MINS(kind)	((kind) == K_Q4_1 || (kind) == K_Q5_1)
#define P_HBIT(kind)	((kind) == K_Q5_0 || (kind) == K_Q5_1)
/* Offsets in a packed block: mins, fifth-bit masks, codes; its size. */
#define POFF_M		32
#define POFF_H(kind)	(32 + (P_MINS(kind) ? 32 : 0))
#define POFF_Q(kind)	(POFF_H(kind) + (P_HBIT(kind) ? 64 : 0))
#define PBLK(kind)	(POFF_Q(kind) + ((kind) == K_Q8_0 ? 512 : 256))

/* Copy rows into the packed layout (or only size it when dst is NULL). */
static size_t
pack_rows(const enum kind kind, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	const int64_t	nb = cols / 32, ng = (rows + PG - 1) / PG;
	const int	bb = kind == K_Q8_0 ? 34 : kind == K_Q4_1 ? 20 :
			    kind == K_Q5_0 ? 22 : kind == K_Q5_1 ? 24 : 18;
	const int	qo = bb - (kind == K_Q8_0 ? 32 : 16);
	const int	nk = kind == K_Q8_0 ? 8 : 4;
	int64_t		g, b, r;
	int		i, k, e;

	if (dst == NULL)
		return ((size_t)(ng * nb * PBLK(kind)));
	for (g = 0; g < ng; g++) {
		for (b = 0; b < nb; b++) {
			uint8_t *o = dst + (size_t)(g * nb + b) * PBLK(kind);

			memset(o, 0, PBLK(kind));
			for (i = 0; i < PG; i++) {
				const uint8_t	*blk;
				uint32_t	 qh;

				if ((r = g * PG + i) >= rows)
					break;
				blk = w + (size_t)r * rb + (size_t)b * bb;
				memcpy(o + 2 * i, blk, 2);
				if (P_MINS(kind))
					memcpy(o + POFF_M + 2 * i, blk + 2, 2);
				if (P_HBIT(kind)) {
					memcpy(&qh, blk + qo - 4, 4);
					/* Mask 2k: low nibbles of vector k; 2k+1: high. */
					for (k = 0; k < 4; k++)
						for (e = 0; e < 4; e++) {
							o[POFF_H(kind) + 16 * k + (4 * i + e) / 8] |=
							    (uint8_t)(((qh >> (4 * k + e)) & 1) <<
							    ((4 * i + e) % 8));
							o[POFF_H(kind) + 16 * k + 8 + (4 * i + e) / 8] |=
							    (uint8_t)(((qh >> (16 + 4 * k + e)) & 1) <<
							    ((4 * i + e) % 8));
						}
				}
				for (k = 0; k < nk; k++)
					for (e = 0; e < 4; e++)
						o[POFF_Q(kind) + 64 * k + 4 * i + e] =
						    kind == K_Q8_0 ?
						    (uint8_t)(blk[qo + 4 * k + e] ^ 0x80) :
						    blk[qo + 4 * k + e];
			}
		}
	}
	return ((size_t)(ng * nb * PBLK(kind)));
}

/* One packed tile: mg groups of 16 rows by nr tokens (compile-time). */
AI void
packed_tile(const enum kind kind, const uint8_t *pw, int64_t cols, int64_t r0,
    const int mg, int mr, const struct qact *a, int t0, const int nr, float *y,
    int64_t ldy)
{
	const int64_t	 nb = cols / 32, stride = a->stride;
	const int	 nk = kind == K_Q8_0 ? 8 : 4;
	const size_t	 gstride = (size_t)nb * PBLK(kind);
	const uint8_t	*gp[PMR];
	const int8_t	*xq[PNR];
	const float	*xd[PNR], *xs[PNR];
	const int32_t	*xb[PNR];
	__m512		 acc[PMR][PNR];
	int64_t		 b;
	int		 g, j, k;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 6
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
		xs[j] = a->s + (size_t)(t0 + j) * (stride / 32);
		xb[j] = a->bias + (size_t)(t0 + j) * (stride / 4);
	}
	for (b = 0; b < nb; b++) {
		__m512i	 ia[PMR][PNR], ic[PMR][4];
		__m512	 ws[PMR], wm[PMR];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * PBLK(kind);

			/*
			 * The next blocks of this group: one stream per group,
			 * fetched further ahead for a single token (see PF_DECODE).
			 * A single token's weights are read once a step, so they
			 * are fetched non-temporally: on a 2-core Zen 4 that read
			 * Q4_0, Q8_0 and Q5_0 decode steps at 91-93% of the
			 * memory's pace instead of 83-89%.
			 */
			for (k = 0; k < PBLK(kind); k += 64) {
				if (nr > 1)
					_mm_prefetch((const char *)p + 1024 + k, _MM_HINT_T0);
				else
					_mm_prefetch((const char *)p + PF_DECODE + k,
					    _MM_HINT_NTA);
			}
			ws[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
			wm[g] = P_MINS(kind) ? _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)(p + POFF_M))) : _mm512_setzero_ps();
#pragma GCC unroll 6
			for (j = 0; j < nr; j++)
				ia[g][j] = _mm512_set1_epi32(xb[j][b]);
			/*
			 * A single token has one integer chain per group: split it
			 * in four so the dot products do not wait on each other's
			 * latency (integer sums, so the result is the same).
			 */
			if (nr == 1) {
				ic[g][0] = ia[g][0];
				ic[g][1] = ic[g][2] = ic[g][3] = _mm512_setzero_si512();
			}
		}
#pragma GCC unroll 8
		for (k = 0; k < nk; k++) {
			__m512i	u[PMR], u2[PMR];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				const uint8_t *p = gp[g] + (size_t)b * PBLK(kind);
				__m512i v = _mm512_loadu_si512((const void *)(p +
				    POFF_Q(kind) + 64 * k));

				if (kind == K_Q8_0) {
					u[g] = u2[g] = v;
					continue;
				}
				u[g] = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
				u2[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4),
				    _mm512_set1_epi8(0x0f));
				if (kind == K_IQ4_NL) {
					__m512i t = _mm512_broadcast_i32x4(
					    _mm256_castsi256_si128(iq4_table256()));
					u[g] = _mm512_shuffle_epi8(t, u[g]);
					u2[g] = _mm512_shuffle_epi8(t, u2[g]);
				}
				if (P_HBIT(kind)) {
					uint64_t ml, mh;

					memcpy(&ml, p + POFF_H(kind) + 16 * k, 8);
					memcpy(&mh, p + POFF_H(kind) + 16 * k + 8, 8);
					u[g] = _mm512_or_si512(u[g],
					    _mm512_maskz_mov_epi8(ml, _mm512_set1_epi8(0x10)));
					u2[g] = _mm512_or_si512(u2[g],
					    _mm512_maskz_mov_epi8(mh, _mm512_set1_epi8(0x10)));
				}
			}
			if (nr == 1) {
				const int8_t *x = xq[0] + 32 * b;
				__m512i	xl = bcast4(x + 4 * k);
				__m512i	xh = kind == K_Q8_0 ? xl : bcast4(x + 16 + 4 * k);
				const int c = kind == K_Q8_0 ? (k & 3) : 2 * (k & 1);

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					ic[g][c] = _mm512_dpbusd_epi32(ic[g][c], u[g], xl);
					if (kind != K_Q8_0)
						ic[g][c + 1] = _mm512_dpbusd_epi32(ic[g][c + 1],
						    u2[g], xh);
				}
				continue;
			}
#pragma GCC unroll 6
			for (j = 0; j < nr; j++) {
				const int8_t *x = xq[j] + 32 * b;
				__m512i	xl = bcast4(x + 4 * k);
				__m512i	xh = kind == K_Q8_0 ? xl : bcast4(x + 16 + 4 * k);

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					ia[g][j] = _mm512_dpbusd_epi32(ia[g][j], u[g], xl);
					if (kind != K_Q8_0)
						ia[g][j] = _mm512_dpbusd_epi32(ia[g][j], u2[g], xh);
				}
			}
		}
		if (nr == 1) {
#pragma GCC unroll 2
			for (g = 0; g < mg; g++)
				ia[g][0] = _mm512_add_epi32(_mm512_add_epi32(ic[g][0],
				    ic[g][1]), _mm512_add_epi32(ic[g][2], ic[g][3]));
		}
#pragma GCC unroll 6
		for (j = 0; j < nr; j++) {
			__m512 d = _mm512_set1_ps(xd[j][b]);
#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[g][j]),
				    _mm512_mul_ps(ws[g], d), acc[g][j]);
				if (P_MINS(kind))
					acc[g][j] = _mm512_fmadd_ps(wm[g],
					    _mm512_set1_ps(xs[j][b]), acc[g][j]);
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		int		n = mr - PG * g;
		__mmask16	m = n >= PG ? 0xffff : (__mmask16)((1U << n) - 1);

#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			_mm512_mask_storeu_ps(y + (size_t)(t0 + j) * ldy + r0 + PG * g, m,
			    acc[g][j]);
	}
}

/* Instantiate the packed tile shapes of a type. */
#define PDISPATCH(fn, pk, kind)						\
static size_t								\
pk(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst) \
{									\
	return (pack_rows(kind, w, rb, rows, cols, dst));		\
}									\
static void								\
fn(const uint8_t *pw, int64_t cols, int64_t r0, int mr,			\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	TILE_DISPATCH(packed_tile, kind, PG, pw, cols, r0, mr, a, t0, nr, y,	\
	    ldy);							\
}

PDISPATCH(avx512_q4_0_packed, avx512_q4_0_pack, K_Q4_0)
PDISPATCH(avx512_q8_0_packed, avx512_q8_0_pack, K_Q8_0)
PDISPATCH(avx512_q4_1_packed, avx512_q4_1_pack, K_Q4_1)
PDISPATCH(avx512_q5_0_packed, avx512_q5_0_pack, K_Q5_0)
PDISPATCH(avx512_q5_1_packed, avx512_q5_1_pack, K_Q5_1)
PDISPATCH(avx512_iq4_nl_packed, avx512_iq4_nl_pack, K_IQ4_NL)

/*
 * Repacked Q4_K: quant_pack_q4_k's layout in groups of 16 rows (d and
 * dmin at 0 and 32, scales at 64, mins at 192, codes from K4HDR).  Per
 * sub-block, acc = fma(f32(sum u * q), d * sc * token scale, acc) then
 * acc -= dmin * mn * (token scale * sum q).
 */
#define K4HDR	QUANT_Q4K_Q(PG)
#define K4BLK	QUANT_Q4K_PACKED_BLOCK(PG)

/* Copy Q4_K rows into the packed layout (or only size it). */
static size_t
avx512_q4_k_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (quant_pack_q4_k(w, rb, rows, cols, PG, dst));
}

/* Prefetch the next packed Q4_K super-block; load this one's d and dmin. */
AI void
q4k_head(const uint8_t *p, __m512 *dd, __m512 *dm)
{
	prefetch_lines(p, K4BLK, K4BLK);
	*dd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
	*dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p +
	    QUANT_Q4K_DM(PG))));
}

_Static_assert(QUANT_Q4K_SC(PG) == NO_SC && QUANT_Q4K_MN(PG) == NO_MN &&
    K4HDR == NO_HDR && PG == NO_PG && PMR <= NO_MG,
    "the Q4_K layout is the one nibble_one reads");

/* One packed Q4_K tile: mg groups of 16 rows by nr tokens (compile-time). */
AI void
q4k_packed_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nsb = cols / 256, stride = a->stride;
	const size_t	 gstride = (size_t)nsb * K4BLK;
	const uint8_t	*gp[PMR];
	const int8_t	*xq[PNR];
	const float	*xd[PNR], *xs[PNR];
	__m512		 acc[PMR][PNR];
	int64_t		 b;
	int		 g, j, k, sub;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 6
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
		xs[j] = a->s + (size_t)(t0 + j) * (stride / 32);
	}
	for (b = 0; b < nsb; b++) {
		__m512	dd[PMR], dm[PMR];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * K4BLK;

			q4k_head(p, &dd[g], &dm[g]);
		}
		for (sub = 0; sub < 8; sub++) {
			const int64_t	 e = 256 * b + 32 * sub;
			__m512i		 ia[PMR][PNR];
			__m512		 ws[PMR], wm[PMR];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				const uint8_t *p = gp[g] + (size_t)b * K4BLK;

				nibble_sub_scales(p, sub, dd[g], dm[g], &ws[g], &wm[g]);
#pragma GCC unroll 6
				for (j = 0; j < nr; j++)
					ia[g][j] = _mm512_setzero_si512();
			}
#pragma GCC unroll 8
			for (k = 0; k < 8; k++) {
				__m512i	u[PMR];

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					__m512i v = _mm512_loadu_si512((const void *)(gp[g] +
					    (size_t)b * K4BLK + K4HDR + 512 * (sub >> 1) + 64 * k));
					if (sub & 1)
						v = _mm512_srli_epi16(v, 4);
					u[g] = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
				}
#pragma GCC unroll 6
				for (j = 0; j < nr; j++) {
					__m512i	x = bcast4(xq[j] + e + 4 * k);

#pragma GCC unroll 2
					for (g = 0; g < mg; g++)
						ia[g][j] = _mm512_dpbusd_epi32(ia[g][j], u[g], x);
				}
			}
#pragma GCC unroll 6
			for (j = 0; j < nr; j++) {
				__m512 d = _mm512_set1_ps(xd[j][e / 32]);
				__m512 sm = _mm512_set1_ps(xs[j][e / 32]);
#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[g][j]),
					    _mm512_mul_ps(ws[g], d), acc[g][j]);
					acc[g][j] = _mm512_fnmadd_ps(wm[g], sm, acc[g][j]);
				}
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		int		n = mr - PG * g;
		__mmask16	m = n >= PG ? 0xffff : (__mmask16)((1U << n) - 1);

#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			_mm512_mask_storeu_ps(y + (size_t)(t0 + j) * ldy + r0 + PG * g, m,
			    acc[g][j]);
	}
}

/* The packed Q4_K tile shapes. */
static void
avx512_q4_k_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	if (mr > PG) {
		switch (nr) {
		case 1: nibble_one(pw, cols, r0, 2, mr, a, t0, y, ldy, K4BLK, 512, 0); return;
		case 2: q4k_packed_tile(pw, cols, r0, 2, mr, a, t0, 2, y, ldy); return;
		case 3: q4k_packed_tile(pw, cols, r0, 2, mr, a, t0, 3, y, ldy); return;
		case 4: q4k_packed_tile(pw, cols, r0, 2, mr, a, t0, 4, y, ldy); return;
		case 5: q4k_packed_tile(pw, cols, r0, 2, mr, a, t0, 5, y, ldy); return;
		default: q4k_packed_tile(pw, cols, r0, 2, mr, a, t0, 6, y, ldy); return;
		}
	}
	switch (nr) {
	case 1: nibble_one(pw, cols, r0, 1, mr, a, t0, y, ldy, K4BLK, 512, 0); return;
	case 2: q4k_packed_tile(pw, cols, r0, 1, mr, a, t0, 2, y, ldy); return;
	case 3: q4k_packed_tile(pw, cols, r0, 1, mr, a, t0, 3, y, ldy); return;
	case 4: q4k_packed_tile(pw, cols, r0, 1, mr, a, t0, 4, y, ldy); return;
	case 5: q4k_packed_tile(pw, cols, r0, 1, mr, a, t0, 5, y, ldy); return;
	default: q4k_packed_tile(pw, cols, r0, 1, mr, a, t0, 6, y, ldy); return;
	}
}

/*
 * Repacked Q6_K: per super-block of a 16-row group, the rows' d (halves,
 * 32 bytes), the 16 sub-block scales (int8, sc[16][16]), then 64 code
 * vectors v = 4s + k (lane i: elements 16s+4k.. of row i) as 32 nibble
 * vectors (low nibbles of v < 32, high nibbles of v + 32) and 16 vectors
 * of the top two bits (bits 2m of vector p are those of v = p + 16m).
 * So a nibble vector serves two sub-blocks, a top-bit vector four.
 * Per 32-element activation block, acc = fma(f32(sum over its two
 * sub-blocks of sc * (bias + sum u * q)), d * token scale, acc), the bias
 * being -32 times the codes' sum of a sub-block (ACT_BLOCK16).
 */
#define K6HDR	(32 + 256)
#define K6BLK	(K6HDR + 2048 + 1024)
/*
 * The code vectors are stored in the order a tile first reads them, so
 * that one token streams a super-block front to back: per s = 0..3 the
 * nibble vectors 4s..4s+3 then the top-bit vectors 4s..4s+3, then the
 * nibble vectors 16..31 (sub-blocks 8..15 read them all again).
 */
#define K6N(i)	(K6HDR + ((i) < 16 ? 512 * ((i) / 4) + 64 * ((i) % 4) :	\
	2048 + 64 * ((i) - 16)))
#define K6H(p)	(K6HDR + 512 * ((p) / 4) + 256 + 64 * ((p) % 4))

/* Copy Q6_K rows into the packed layout (or only size it). */
static size_t
avx512_q6_k_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	const int64_t	nsb = cols / 256, ng = (rows + PG - 1) / PG;
	int64_t		g, b, r;
	int		i, v, e, c;

	if (dst == NULL)
		return ((size_t)(ng * nsb * K6BLK));
	for (g = 0; g < ng; g++) {
		for (b = 0; b < nsb; b++) {
			uint8_t *o = dst + (size_t)(g * nsb + b) * K6BLK;

			memset(o, 0, K6BLK);
			for (i = 0; i < PG; i++) {
				const uint8_t *sb;

				if ((r = g * PG + i) >= rows)
					break;
				sb = w + (size_t)r * rb + (size_t)b * 210;
				memcpy(o + 2 * i, sb + 208, 2);
				for (v = 0; v < 16; v++)
					o[32 + 16 * v + i] = sb[192 + v];
				for (v = 0; v < 64; v++) {
					for (e = 0; e < 4; e++) {
						c = q6k_code(sb, 4 * v + e);
						o[K6N(v & 31) + 4 * i + e] |=
						    (uint8_t)((c & 15) << (v >= 32 ? 4 : 0));
						o[K6H(v & 15) + 4 * i + e] |=
						    (uint8_t)((c >> 4) << (2 * (v >> 4)));
					}
				}
			}
		}
	}
	return ((size_t)(ng * nsb * K6BLK));
}

/* Code vector v (0..63) of a packed Q6_K super-block p (compile-time v). */
AI __m512i
q6k_packed_codes(const uint8_t *p, const int v)
{
	__m512i	n = _mm512_loadu_si512((const void *)(p + K6N(v & 31)));
	__m512i	h = _mm512_loadu_si512((const void *)(p + K6H(v & 15)));
	const int m = v >> 4;

	n = v >= 32 ? _mm512_srli_epi16(n, 4) : n;
	n = _mm512_and_si512(n, _mm512_set1_epi8(0x0f));
	h = m == 0 ? _mm512_slli_epi16(h, 4) : m == 1 ? _mm512_slli_epi16(h, 2) :
	    m == 2 ? h : _mm512_srli_epi16(h, 2);
	return (_mm512_ternarylogic_epi32(n, h, _mm512_set1_epi8(0x30), 0xf8));
}

/* One packed Q6_K tile: mg groups of 16 rows by nr tokens (compile-time). */
AI void
q6k_packed_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nsb = cols / 256, stride = a->stride;
	const size_t	 gstride = (size_t)nsb * K6BLK;
	const uint8_t	*gp[PMR];
	const int8_t	*xq[PNR];
	const float	*xd[PNR];
	const int32_t	*xb[PNR];
	__m512		 acc[PMR][PNR];
	int64_t		 b;
	int		 g, h, j, k, sp;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 6
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
		xb[j] = a->bias + (size_t)(t0 + j) * (stride / 4);
	}
	for (b = 0; b < nsb; b++) {
		__m512	dd[PMR];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * K6BLK;

			prefetch_lines(p, K6BLK, K6BLK);
			dd[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
		}
		/*
		 * The two sub-blocks of an activation block: their integer
		 * sums times their scales are added as integers (below 2^24
		 * in magnitude, so exact in a float), then scaled once.
		 */
#pragma GCC unroll 8
		for (sp = 0; sp < 8; sp++) {
			const int64_t	 e = 256 * b + 32 * sp;
			__m512i		 it[PMR][PNR];

#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				const int	 sub = 2 * sp + h;
				__m512i		 ia[PMR][PNR], sc[PMR];

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					sc[g] = _mm512_cvtepi8_epi32(_mm_loadu_si128(
					    (const __m128i *)(gp[g] + (size_t)b * K6BLK + 32 +
					    16 * sub)));
#pragma GCC unroll 6
					for (j = 0; j < nr; j++)
						ia[g][j] = _mm512_set1_epi32(xb[j][e / 16 + h]);
				}
#pragma GCC unroll 4
				for (k = 0; k < 4; k++) {
					__m512i	u[PMR];

#pragma GCC unroll 2
					for (g = 0; g < mg; g++)
						u[g] = q6k_packed_codes(gp[g] + (size_t)b * K6BLK,
						    4 * sub + k);
#pragma GCC unroll 6
					for (j = 0; j < nr; j++) {
						__m512i	x = bcast4(xq[j] + e + 16 * h + 4 * k);

#pragma GCC unroll 2
						for (g = 0; g < mg; g++)
							ia[g][j] = _mm512_dpbusd_epi32(ia[g][j],
							    u[g], x);
					}
				}
#pragma GCC unroll 2
				for (g = 0; g < mg; g++)
#pragma GCC unroll 6
					for (j = 0; j < nr; j++) {
						__m512i	v = _mm512_mullo_epi32(ia[g][j], sc[g]);

						it[g][j] = h == 0 ? v : _mm512_add_epi32(it[g][j], v);
					}
			}
#pragma GCC unroll 6
			for (j = 0; j < nr; j++) {
				__m512 d = _mm512_set1_ps(xd[j][e / 32]);
#pragma GCC unroll 2
				for (g = 0; g < mg; g++)
					acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it[g][j]),
					    _mm512_mul_ps(dd[g], d), acc[g][j]);
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		int		n = mr - PG * g;
		__mmask16	m = n >= PG ? 0xffff : (__mmask16)((1U << n) - 1);

#pragma GCC unroll 6
		for (j = 0; j < nr; j++)
			_mm512_mask_storeu_ps(y + (size_t)(t0 + j) * ldy + r0 + PG * g, m,
			    acc[g][j]);
	}
}

/*
 * The packed Q6_K tile for one token.  Sub-blocks q and q + 8 share their
 * nibble vectors (low and high nibbles) and top-bit vectors, so it reads
 * them once for both: q = 0..3 take the first 2048 code bytes, q = 4..7
 * the nibble vectors 16..31 and the top bits again.  So each byte comes
 * from memory once and in order; in sub-block order the tile went back
 * over the whole super-block for sub-blocks 8-15, and one-token Q6_K
 * matrices ran at about half the memory rate of the other types on a
 * 2-core Zen 4.  It leaves the stream to the hardware prefetcher, which
 * follows it better there than with a prefetch PF_DECODE ahead
 * (bench-tile -t 1 -R 65536, medians of three: 22 against 17 GB/s).  The
 * sixteen integer sums wait in is[] for the float steps, which are
 * q6k_packed_tile's in its order, so the results are the same.
 */
AI void
q6k_one(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, float *y, int64_t ldy)
{
	const int64_t	 nsb = cols / 256, stride = a->stride;
	const size_t	 gstride = (size_t)nsb * K6BLK;
	const int8_t	*xq = a->q + (size_t)t0 * stride;
	const float	*xd = a->d + (size_t)t0 * (stride / 32);
	const int32_t	*xb = a->bias + (size_t)t0 * (stride / 4);
	const uint8_t	*gp[PMR];
	__m512		 acc[PMR];
	__m512i		 is[PMR][16];
	int64_t		 b;
	int		 g, h, k, q, sp;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
		acc[g] = _mm512_setzero_ps();
	}
	for (b = 0; b < nsb; b++) {
		const int64_t	e0 = 256 * b;

		/* Sub-blocks q and q + 8. */
#pragma GCC unroll 8
		for (q = 0; q < 8; q++) {
#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				is[g][q] = _mm512_set1_epi32(xb[e0 / 16 + q]);
				is[g][q + 8] = _mm512_set1_epi32(xb[e0 / 16 + q + 8]);
			}
#pragma GCC unroll 4
			for (k = 0; k < 4; k++) {
				const __m512i	xl = bcast4(xq + e0 + 16 * q + 4 * k);
				const __m512i	xh = bcast4(xq + e0 + 16 * (q + 8) + 4 * k);

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					const uint8_t	*p = gp[g] + (size_t)b * K6BLK;

					is[g][q] = _mm512_dpbusd_epi32(is[g][q],
					    q6k_packed_codes(p, 4 * q + k), xl);
					is[g][q + 8] = _mm512_dpbusd_epi32(is[g][q + 8],
					    q6k_packed_codes(p, 4 * q + k + 32), xh);
				}
			}
		}
#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t	*p = gp[g] + (size_t)b * K6BLK;
			const __m512	 dd = _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)p));

			for (sp = 0; sp < 8; sp++) {
				__m512i	it = _mm512_setzero_si512();

#pragma GCC unroll 2
				for (h = 0; h < 2; h++) {
					const int	sub = 2 * sp + h;
					__m512i		v = _mm512_mullo_epi32(is[g][sub],
					    _mm512_cvtepi8_epi32(_mm_loadu_si128(
					    (const __m128i *)(p + 32 + 16 * sub))));

					it = h == 0 ? v : _mm512_add_epi32(it, v);
				}
				acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it), _mm512_mul_ps(dd,
				    _mm512_set1_ps(xd[(e0 + 32 * sp) / 32])), acc[g]);
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		int		n = mr - PG * g;
		__mmask16	m16 = n >= PG ? 0xffff : (__mmask16)((1U << n) - 1);

		_mm512_mask_storeu_ps(y + (size_t)t0 * ldy + r0 + PG * g, m16, acc[g]);
	}
}

/* The packed Q6_K tile shapes. */
static void
avx512_q6_k_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	if (nr == 1) {
		if (mr > PG)
			q6k_one(pw, cols, r0, 2, mr, a, t0, y, ldy);
		else
			q6k_one(pw, cols, r0, 1, mr, a, t0, y, ldy);
		return;
	}
	if (mr > PG) {
		switch (nr) {
		case 2: q6k_packed_tile(pw, cols, r0, 2, mr, a, t0, 2, y, ldy); return;
		case 3: q6k_packed_tile(pw, cols, r0, 2, mr, a, t0, 3, y, ldy); return;
		case 4: q6k_packed_tile(pw, cols, r0, 2, mr, a, t0, 4, y, ldy); return;
		case 5: q6k_packed_tile(pw, cols, r0, 2, mr, a, t0, 5, y, ldy); return;
		default: q6k_packed_tile(pw, cols, r0, 2, mr, a, t0, 6, y, ldy); return;
		}
	}
	switch (nr) {
	case 2: q6k_packed_tile(pw, cols, r0, 1, mr, a, t0, 2, y, ldy); return;
	case 3: q6k_packed_tile(pw, cols, r0, 1, mr, a, t0, 3, y, ldy); return;
	case 4: q6k_packed_tile(pw, cols, r0, 1, mr, a, t0, 4, y, ldy); return;
	case 5: q6k_packed_tile(pw, cols, r0, 1, mr, a, t0, 5, y, ldy); return;
	default: q6k_packed_tile(pw, cols, r0, 1, mr, a, t0, 6, y, ldy); return;
	}
}

/* The bf16 dot-product kernel of F16 or BF16 weights (fn NULL for others). */
struct quant_kernel
quant_kernel_avx512_bf16dot(uint32_t type)
{
	struct quant_kernel	k = { .mr = MR, .nr = FNR, .layout = ACT_BF16,
	    .fill = avx512_act_fill_bf16 };

	if ((type != TT_F16 && type != TT_BF16) || !quant_bf16_dot_supported())
		return ((struct quant_kernel){ .fn = NULL });
	k.fn = type == TT_F16 ? avx512_f16_bf16dot : avx512_bf16_bf16dot;
	float_avx512_packed(&k, type, 1);
	return (k);
}

/* The AVX-512 kernel of a type. */
struct quant_kernel
quant_kernel_avx512(uint32_t type)
{
	struct quant_kernel	k = { .mr = MR, .nr = NR, .layout = ACT_NATURAL,
	    .fill = quant_act_fill };

	if (quant_bf16_dot_takes(type))
		return (quant_kernel_avx512_bf16dot(type));
	switch (type) {
	case TT_F32:
		k.fn = avx512_f32;
		k.nr = FNR;
		break;
	case TT_F16:
		k.fn = avx512_f16;
		k.nr = FNR;
		float_avx512_packed(&k, type, 0);
		return (k);
	case TT_BF16:
		k.fn = avx512_bf16;
		k.nr = FNR;
		float_avx512_packed(&k, type, 0);
		return (k);
	case TT_Q4_0:
		k.fn = avx512_q4_0;
		k.layout = ACT_Q4_0X4;
		k.fill = avx512_act_fill;
		k.pack = avx512_q4_0_pack;
		k.pfn = avx512_q4_0_packed;
		break;
	case TT_Q8_0:
		k.fn = avx512_q8_0;
		k.fill = avx512_act_fill;
		k.pack = avx512_q8_0_pack;
		k.pfn = avx512_q8_0_packed;
		break;
	case TT_Q4_K:
		k.fn = avx512_q4_k;
		k.layout = ACT_Q4_KX;
		k.fill = avx512_act_fill;
		k.pack = avx512_q4_k_pack;
		k.pfn = avx512_q4_k_packed;
		break;
	case TT_Q6_K:
		k.fn = avx512_q6_k;
		k.fill = avx512_act_fill;
		k.pack = avx512_q6_k_pack;
		k.pfn = avx512_q6_k_packed;
		break;
	case TT_Q4_1:
		k.fn = avx512_q4_1;
		k.fill = avx512_act_fill;
		k.pack = avx512_q4_1_pack;
		k.pfn = avx512_q4_1_packed;
		break;
	case TT_Q5_0:
		k.fn = avx512_q5_0;
		k.fill = avx512_act_fill;
		k.pack = avx512_q5_0_pack;
		k.pfn = avx512_q5_0_packed;
		break;
	case TT_Q5_1:
		k.fn = avx512_q5_1;
		k.fill = avx512_act_fill;
		k.pack = avx512_q5_1_pack;
		k.pfn = avx512_q5_1_packed;
		break;
	case TT_IQ4_NL:
		k.fn = avx512_iq4_nl;
		k.fill = avx512_act_fill;
		k.pack = avx512_iq4_nl_pack;
		k.pfn = avx512_iq4_nl_packed;
		break;
	case TT_Q2_K:
		k.fn = avx512_q2_k;
		k.fill = avx512_act_fill;
		k.pack = avx512_q2_k_pack;
		k.pfn = avx512_q2_k_packed;
		break;
	case TT_Q3_K:
		k.fn = avx512_q3_k;
		k.fill = avx512_act_fill;
		k.pack = avx512_q3_k_pack;
		k.pfn = avx512_q3_k_packed;
		break;
	case TT_Q5_K:
		k.fn = avx512_q5_k;
		k.fill = avx512_act_fill;
		k.pack = avx512_q5_k_pack;
		k.pfn = avx512_q5_k_packed;
		break;
	case TT_IQ4_XS:
		k.fn = avx512_iq4_xs;
		k.fill = avx512_act_fill;
		k.pack = avx512_iq4_xs_pack;
		k.pfn = avx512_iq4_xs_packed;
		break;
	}
	if (k.pfn != NULL) {
		k.pmr = PMR * PG;
		k.pnr = PNR;
		k.playout = type == TT_Q6_K || type == TT_Q2_K || type == TT_Q3_K ?
		    ACT_BLOCK16 : ACT_BLOCK;
		k.pfill = avx512_act_fill;
	}
	return (k);
}
