/*
 * quant_avx2.c: AVX2/FMA/F16C kernels.
 *
 * Built with AVX2 enabled; only reached after quant_isa_supported() checked
 * the CPU.  The structure follows quant_avx512.c with 256-bit vectors: a
 * ymm holds 32 codes, vpmaddubsw + vpmaddwd with ones give eight 32-bit
 * lanes of four products each (the same lanes as vpdpbusd), the lane bias
 * removes the code offset, and the lanes are scaled and accumulated in f32.
 * Activations are in the natural layout.  Every output element goes
 * through the same operations whatever the tile shape.  Every type but
 * F32 is repacked at load, eight rows to a vector, for the kernels of
 * pack_avx2.c (Q4_0, Q8_0, Q4_K, Q6_K), pack32_avx2.c (Q4_1, Q5_0, Q5_1,
 * IQ4_NL), pack_k_avx2.c (Q2_K, Q3_K, Q5_K, IQ4_XS) and float_avx2.c (F16,
 * BF16); those here serve them only on the mapped rows
 * (quant_allow_pack(0), or a matrix too wide for its packed tiles).
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "float_avx2.h"
#include "pack32_avx2.h"
#include "pack_avx2.h"
#include "pack_k_avx2.h"
#include "quant.h"
#include "tensor_type.h"

#define MR	2
#define NR	3
/* Rows of a float type's tile: its steps are one FMA per row and token. */
#define FMR	4
/*
 * Rows a single-token tile walks together, for the float types (DMR) and
 * the integer ones (DMR_INT): a chain of FMAs on one accumulator would
 * leave the unit waiting on its latency; the integer tiles have more work
 * per step and gain from only two.
 */
#define DMR	4
#define DMR_INT	2
/* Rows the tile arrays are sized for: the largest of MR, FMR and DMR. */
#define TMR	4

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

/* Horizontal sum of 8 in a fixed order. */
AI float
hsum256(__m256 a)
{
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return (_mm_cvtss_f32(b));
}

/* Codes of Q6_K chunk m (0..7, 32 elements) of a super-block. */
AI __m256i
unpack_q6_k(const uint8_t *sb, int m)
{
	int	h = m >> 2, part = m & 3;
	__m256i	lo = _mm256_loadu_si256((const __m256i *)(sb + 64 * h + 32 * (part & 1)));
	__m256i	hi = _mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * h));
	__m128i	c4 = _mm_cvtsi32_si128(4 * (part >> 1));
	__m128i	c2 = _mm_cvtsi32_si128(2 * part);

	lo = _mm256_and_si256(_mm256_srl_epi16(lo, c4), _mm256_set1_epi8(0x0f));
	hi = _mm256_and_si256(_mm256_srl_epi16(hi, c2), _mm256_set1_epi8(0x03));
	return (_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
}

/*
 * One step of a row and a token: acc + f32(the lanes' sums of four u * xs,
 * plus b0 where has_bias) * (ws * d).
 */
AI __m256
lane_step(__m256 acc, __m256i u, __m256i xs, __m256i b0, const int has_bias, __m256 ws,
    __m256 d)
{
	__m256i	s = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), _mm256_set1_epi16(1));

	if (has_bias)
		s = _mm256_add_epi32(s, b0);
	return (_mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ws, d), acc));
}

/* One tile of an integer type: one step is 32 elements. */
AI void
int_tile(const enum kind kind, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    const int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nb = cols / 32, stride = a->stride;
	const int	 has_bias = kind == K_Q4_0 || kind == K_Q6_K;
	const int	 step = kind == K_Q4_K || kind == K_Q6_K ? 8 : 1;
	/* Bytes of a row per 32 elements (Q6_K's 26.25 rounded down). */
	const int	 bpb = kind == K_Q8_0 ? 34 : kind == K_Q6_K ? 26 : 18;
	__m256		 acc[TMR][NR];
	__m256		 ksc[TMR][2];	/* K-quants: scales of the super-block */
	__m256i		 u[TMR];
	__m256		 ws[TMR];
	__m256i		 sgn[TMR];
	const uint8_t	*row[TMR];
	const int8_t	*xq[NR];
	const float	*dl[NR];
	const int32_t	*bias[NR];
	int64_t		 bs;
	int		 i, j, m;
	float		 mins[kind == K_Q4_K ? TMR : 1][kind == K_Q4_K ? nb : 1];

#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
		row[i] = w + (r0 + i) * rb;
		ksc[i][0] = ksc[i][1] = _mm256_setzero_ps();
		sgn[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[i][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		dl[j] = a->dl + (size_t)(t0 + j) * (stride / 4);
		bias[j] = a->bias + (size_t)(t0 + j) * (stride / 4);
	}
	/* A super-block's eight steps unrolled: its shifts and lanes are constants. */
	for (bs = 0; bs < nb; bs += step) {
#pragma GCC unroll 8
		for (m = 0; m < step; m++) {
			const int64_t b = bs + m;

#pragma GCC unroll 4
			for (i = 0; i < mr; i++) {
				if (nr == 1)
					_mm_prefetch((const char *)row[i] + bpb * b +
					    AVX2_PF_DECODE, _MM_HINT_T0);
				if (kind == K_Q4_0) {
					const uint8_t *p = row[i] + 18 * b;
					__m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
					__m256i z = _mm256_inserti128_si256(_mm256_castsi128_si256(v),
					    _mm_srli_epi16(v, 4), 1);
					u[i] = _mm256_and_si256(z, _mm256_set1_epi8(0x0f));
					ws[i] = _mm256_set1_ps(h2f(p));
				} else if (kind == K_Q8_0) {
					const uint8_t *p = row[i] + 34 * b;
					__m256i v = _mm256_loadu_si256((const __m256i *)(p + 2));
					/* |w| times x with w's sign: no offset needed. */
					u[i] = _mm256_abs_epi8(v);
					sgn[i] = v;
					ws[i] = _mm256_set1_ps(h2f(p));
				} else if (kind == K_Q4_K) {
					const uint8_t *sb = row[i] + 144 * (b >> 3);
					if (m == 0) {
						uint64_t sc, mn;

						q4k_scales_fast(sb + 4, &sc, &mn);
						_mm256_storeu_ps(&mins[kind == K_Q4_K ? i : 0][b],
						    _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn))),
						    _mm256_set1_ps(h2f(sb + 2))));
						ksc[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc))),
						    _mm256_set1_ps(h2f(sb)));
					}
					__m256i v = _mm256_loadu_si256((const __m256i *)
					    (sb + 16 + 32 * (m >> 1)));
					if (m & 1)
						v = _mm256_srli_epi16(v, 4);
					u[i] = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
					ws[i] = _mm256_permutevar8x32_ps(ksc[i][0], _mm256_set1_epi32(m));
				} else {
					const uint8_t *sb = row[i] + 210 * (b >> 3);
					if (m == 0) {
						__m128i s8 = _mm_loadu_si128((const __m128i *)(sb + 192));
						__m256 d = _mm256_set1_ps(h2f(sb + 208));
						ksc[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepi8_epi32(s8)), d);
						ksc[i][1] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8))), d);
					}
					u[i] = unpack_q6_k(sb, m);
					/* Lanes 0-3: sub-block 2m, lanes 4-7: 2m + 1. */
					ws[i] = _mm256_permutevar8x32_ps(ksc[i][m >> 2],
					    _mm256_add_epi32(_mm256_set1_epi32(2 * (m & 3)),
					    _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0)));
				}
			}
#pragma GCC unroll 4
			for (j = 0; j < nr; j++) {
				__m256i	x = _mm256_loadu_si256((const __m256i *)(xq[j] + 32 * b));
				__m256	d = _mm256_loadu_ps(dl[j] + 8 * b);
				__m256i	b0 = has_bias ?
					    _mm256_loadu_si256((const __m256i *)(bias[j] + 8 * b)) :
					    _mm256_setzero_si256();

#pragma GCC unroll 4
				for (i = 0; i < mr; i++) {
					acc[i][j] = lane_step(acc[i][j], u[i], kind == K_Q8_0 ?
					    _mm256_sign_epi8(x, sgn[i]) : x, b0, has_bias, ws[i], d);
				}
			}
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
#pragma GCC unroll 4
		for (j = 0; j < nr; j++) {
			float v = hsum256(acc[i][j]);

			if (kind == K_Q4_K) {
				const float	*s = a->s + (size_t)(t0 + j) * (stride / 32);
				const float	*mn = mins[kind == K_Q4_K ? i : 0];
				__m256		 am = _mm256_setzero_ps();
				int64_t		 k;

				for (k = 0; k < nb; k += 8)
					am = _mm256_fmadd_ps(_mm256_loadu_ps(mn + k),
					    _mm256_loadu_ps(s + k), am);
				v -= hsum256(am);
			}
			y[(size_t)(t0 + j) * ldy + r0 + i] = v;
		}
	}
}

/*
 * Instantiate the tile shapes: a single token (decode) takes DMR rows at a
 * time, so several accumulator chains are in flight; rows short of a full
 * tile go one at a time.
 */
#define DISPATCH(fn, tile, kind, dmr, tmr)			\
static void								\
fn(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,	\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	int	i = 0;							\
									\
	if (nr == 1) {							\
		for (; i + (dmr) <= mr; i += (dmr))			\
			tile(kind, w, rb, cols, r0 + i, dmr, a, t0, 1, y, ldy); \
		for (; i < mr; i++)					\
			tile(kind, w, rb, cols, r0 + i, 1, a, t0, 1, y, ldy); \
		return;							\
	}								\
	for (; i + (tmr) <= mr; i += (tmr)) {				\
		if (nr == 2)						\
			tile(kind, w, rb, cols, r0 + i, tmr, a, t0, 2, y, ldy); \
		else							\
			tile(kind, w, rb, cols, r0 + i, tmr, a, t0, 3, y, ldy); \
	}								\
	for (; i < mr; i++) {						\
		if (nr == 2)						\
			tile(kind, w, rb, cols, r0 + i, 1, a, t0, 2, y, ldy); \
		else							\
			tile(kind, w, rb, cols, r0 + i, 1, a, t0, 3, y, ldy); \
	}								\
}

DISPATCH(avx2_q4_0, int_tile, K_Q4_0, DMR_INT, MR)
DISPATCH(avx2_q8_0, int_tile, K_Q8_0, DMR_INT, MR)
DISPATCH(avx2_q4_k, int_tile, K_Q4_K, DMR_INT, MR)
DISPATCH(avx2_q6_k, int_tile, K_Q6_K, DMR_INT, MR)

/*
 * The types added after the first seven (ext_tile), a block of 32 (or an
 * eighth of a super-block) per step, as int_tile: unsigned codes with the
 * offset in the lane bias, except the IQ4 code books, whose signed values
 * (|v| <= 127, so vpmaddubsw cannot saturate) go as |v| with the sign moved
 * onto the activations, as Q8_0 does.  Mins: Q2_K's per 16 elements scale
 * the lane sums (bias, offset -1); those of Q4_1, Q5_1 and Q5_K (per 32)
 * are subtracted in a pass per output against s.
 */

/* 32 nibble codes of 16 bytes: low nibbles first, as Q4_0. */
AI __m256i
nibbles32(const uint8_t *qs)
{
	__m128i	v = _mm_loadu_si128((const __m128i *)qs);

	return (_mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v),
	    _mm_srli_epi16(v, 4), 1), _mm256_set1_epi8(0x0f)));
}

/* Byte i is 0xff where bit i of the 32-bit m is set. */
AI __m256i
bits_to_bytes(uint32_t m)
{
	const __m256i	sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1,
			    1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i	bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	__m256i		v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), sel);

	return (_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit));
}

/* Byte i is 0xff where bit k of byte i of v is set. */
AI __m256i
byte_bit(__m256i v, int k)
{
	__m256i	b = _mm256_set1_epi8((char)(1 << k));

	return (_mm256_cmpeq_epi8(_mm256_and_si256(v, b), b));
}

/* The IQ4 code book in both halves, for vpshufb. */
AI __m256i
iq4_book256(void)
{
	return (_mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25,
	    38, 53, 69, 89, 113, -127, -104, -83, -65, -49, -35, -22, -10, 1, 13,
	    25, 38, 53, 69, 89, 113));
}

/* Six-bit scales 0-15 of a Q3_K super-block minus 32, as bytes. */
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
	return (_mm_sub_epi8(_mm_loadu_si128((const __m128i *)r), _mm_set1_epi8(32)));
}

/* One tile of a type added after the first seven. */
AI void
ext_tile(const enum kind kind, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    const int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nb = cols / 32, stride = a->stride;
	const int	 k256 = kind >= K_Q2_K;
	const int	 iq4 = kind == K_IQ4_NL || kind == K_IQ4_XS;
	const int	 lmins = kind == K_Q2_K;
	const int	 bmins = kind == K_Q4_1 || kind == K_Q5_1 || kind == K_Q5_K;
	const int	 has_bias = !iq4 && !bmins && !lmins;
	const int	 bb = kind == K_Q4_1 ? 20 : kind == K_Q5_0 ? 22 :
			    kind == K_Q5_1 ? 24 : kind == K_IQ4_NL ? 18 :
			    kind == K_Q2_K ? 84 : kind == K_Q3_K ? 110 :
			    kind == K_Q5_K ? 176 : 136;
	/* A super-block's eight steps unrolled: its shifts and lanes are constants. */
	const int	 step = k256 ? 8 : 1;
	__m256		 acc[TMR][NR], ksc[TMR][2], kmn[TMR][2], ws[TMR], wm[TMR];
	__m256i		 u[TMR], sgn[TMR];
	const uint8_t	*row[TMR];
	const int8_t	*xq[NR];
	const float	*dl[NR];
	const int32_t	*bias[NR];
	int64_t		 bs;
	int		 i, j, m;
	float		 bmin[bmins ? TMR : 1][bmins ? ((nb + 7) & ~7) : 1];

#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
		row[i] = w + (r0 + i) * rb;
		ksc[i][0] = ksc[i][1] = kmn[i][0] = kmn[i][1] = wm[i] = _mm256_setzero_ps();
		sgn[i] = _mm256_setzero_si256();
		if (bmins)
			memset(bmin[i], 0, sizeof bmin[i]);
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[i][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		dl[j] = a->dl + (size_t)(t0 + j) * (stride / 4);
		bias[j] = a->bias + (size_t)(t0 + j) * (stride / 4);
	}
	for (bs = 0; bs < nb; bs += step) {
#pragma GCC unroll 8
		for (m = 0; m < step; m++) {
			const int64_t b = bs + m;
			const int h = m >> 2, jq = m & 3;


#pragma GCC unroll 4
			for (i = 0; i < mr; i++) {
				if (nr == 1)
					_mm_prefetch((const char *)row[i] + (k256 ? bb * b / 8 :
					    bb * b) + AVX2_PF_DECODE, _MM_HINT_T0);
				if (!k256) {
					const uint8_t *p = row[i] + bb * b;
					const int qo = kind == K_Q4_1 ? 4 : kind == K_Q5_0 ? 6 :
					    kind == K_Q5_1 ? 8 : 2;
					__m256i c = nibbles32(p + qo);
					if (kind == K_Q5_0 || kind == K_Q5_1) {
						uint32_t qh;
						memcpy(&qh, p + qo - 4, 4);
						c = _mm256_or_si256(c, _mm256_and_si256(bits_to_bytes(qh),
						    _mm256_set1_epi8(0x10)));
					}
					if (iq4) {
						c = _mm256_shuffle_epi8(iq4_book256(), c);
						sgn[i] = c;
						c = _mm256_abs_epi8(c);
					}
					u[i] = c;
					ws[i] = _mm256_set1_ps(h2f(p));
					if (bmins)
						bmin[i][b] = h2f(p + 2);
					continue;
				}
				const uint8_t *sb = row[i] + bb * (b >> 3);
				if (m == 0) {
					if (kind == K_Q2_K) {
						__m128i s8 = _mm_loadu_si128((const __m128i *)sb);
						__m128i lo = _mm_and_si128(s8, _mm_set1_epi8(15));
						__m128i hi = _mm_and_si128(_mm_srli_epi16(s8, 4),
						    _mm_set1_epi8(15));
						__m256 d = _mm256_set1_ps(h2f(sb + 80));
						__m256 dm = _mm256_set1_ps(-h2f(sb + 82));
						ksc[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(lo)), d);
						ksc[i][1] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), d);
						kmn[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(hi)), dm);
						kmn[i][1] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), dm);
					} else if (kind == K_Q3_K) {
						__m128i s8 = q3k_scales16(sb + 96);
						__m256 d = _mm256_set1_ps(h2f(sb + 108));
						ksc[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepi8_epi32(s8)), d);
						ksc[i][1] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8))), d);
					} else if (kind == K_Q5_K) {
						uint64_t sc, mn;

						q4k_scales_fast(sb + 4, &sc, &mn);
						_mm256_storeu_ps(&bmin[bmins ? i : 0][b],
						    _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn))),
						    _mm256_set1_ps(-h2f(sb + 2))));
						ksc[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc))),
						    _mm256_set1_ps(h2f(sb)));
					} else {
						uint16_t sh;
						uint32_t sl;
						int32_t ls[8];
						int k;

						memcpy(&sh, sb + 2, 2);
						memcpy(&sl, sb + 4, 4);
						for (k = 0; k < 8; k++)
							ls[k] = (int32_t)(((sl >> (4 * k)) & 15) |
							    ((sh >> (2 * k)) & 3) << 4) - 32;
						ksc[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(
						    _mm256_loadu_si256((const __m256i *)ls)),
						    _mm256_set1_ps(h2f(sb)));
					}
				}
				if (kind == K_Q2_K || kind == K_Q3_K) {
					/* Chunk m: bits 2jq.. of qs[32h + l]; sub-blocks 2m, 2m + 1. */
					__m256i v = _mm256_loadu_si256((const __m256i *)(sb +
					    (kind == K_Q2_K ? 16 : 32) + 32 * h));
					__m256i c = _mm256_and_si256(_mm256_srl_epi16(v,
					    _mm_cvtsi32_si128(2 * jq)), _mm256_set1_epi8(3));
					__m256i idx = _mm256_add_epi32(_mm256_set1_epi32(2 * jq),
					    _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
					if (kind == K_Q3_K)
						c = _mm256_or_si256(c, _mm256_and_si256(byte_bit(
						    _mm256_loadu_si256((const __m256i *)sb), 4 * h + jq),
						    _mm256_set1_epi8(4)));
					u[i] = c;
					ws[i] = _mm256_permutevar8x32_ps(ksc[i][h], idx);
					if (lmins)
						wm[i] = _mm256_permutevar8x32_ps(kmn[i][h], idx);
				} else if (kind == K_Q5_K) {
					__m256i v = _mm256_loadu_si256((const __m256i *)(sb + 48 +
					    32 * (m >> 1)));
					if (m & 1)
						v = _mm256_srli_epi16(v, 4);
					v = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
					u[i] = _mm256_or_si256(v, _mm256_and_si256(byte_bit(
					    _mm256_loadu_si256((const __m256i *)(sb + 16)), m),
					    _mm256_set1_epi8(0x10)));
					ws[i] = _mm256_permutevar8x32_ps(ksc[i][0], _mm256_set1_epi32(m));
				} else {
					__m256i c = _mm256_shuffle_epi8(iq4_book256(),
					    nibbles32(sb + 8 + 16 * m));
					sgn[i] = c;
					u[i] = _mm256_abs_epi8(c);
					ws[i] = _mm256_permutevar8x32_ps(ksc[i][0], _mm256_set1_epi32(m));
				}
			}
#pragma GCC unroll 4
			for (j = 0; j < nr; j++) {
				__m256i	x = _mm256_loadu_si256((const __m256i *)(xq[j] + 32 * b));
				__m256	d = _mm256_loadu_ps(dl[j] + 8 * b);
				__m256i	b0 = has_bias || lmins ?
					    _mm256_loadu_si256((const __m256i *)(bias[j] + 8 * b)) :
					    _mm256_setzero_si256();
				__m256	bf = lmins ? _mm256_cvtepi32_ps(b0) : _mm256_setzero_ps();

#pragma GCC unroll 4
				for (i = 0; i < mr; i++) {
					acc[i][j] = lane_step(acc[i][j], u[i], iq4 ?
					    _mm256_sign_epi8(x, sgn[i]) : x, b0, has_bias, ws[i], d);
					if (lmins)
						acc[i][j] = _mm256_fmadd_ps(bf, _mm256_mul_ps(wm[i], d),
						    acc[i][j]);
				}
			}
	}
	}
#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
#pragma GCC unroll 4
		for (j = 0; j < nr; j++) {
			float v = hsum256(acc[i][j]);

			if (bmins) {
				const float	*s = a->s + (size_t)(t0 + j) * (stride / 32);
				__m256		 am = _mm256_setzero_ps();
				int64_t		 k;

				/* s is zero past the last block: a whole 8 may be read. */
				for (k = 0; k < nb; k += 8)
					am = _mm256_fmadd_ps(_mm256_loadu_ps(bmin[i] + k),
					    _mm256_loadu_ps(s + k), am);
				v += hsum256(am);
			}
			y[(size_t)(t0 + j) * ldy + r0 + i] = v;
		}
	}
}

DISPATCH(avx2_q4_1, ext_tile, K_Q4_1, DMR_INT, MR)
DISPATCH(avx2_q5_0, ext_tile, K_Q5_0, DMR_INT, MR)
DISPATCH(avx2_q5_1, ext_tile, K_Q5_1, DMR_INT, MR)
DISPATCH(avx2_iq4_nl, ext_tile, K_IQ4_NL, DMR_INT, MR)
DISPATCH(avx2_q2_k, ext_tile, K_Q2_K, DMR_INT, MR)
DISPATCH(avx2_q3_k, ext_tile, K_Q3_K, DMR_INT, MR)
DISPATCH(avx2_q5_k, ext_tile, K_Q5_K, DMR_INT, MR)
DISPATCH(avx2_iq4_xs, ext_tile, K_IQ4_XS, DMR_INT, MR)

/* 8 weights of a float row at column c as f32; past the end reads zeros. */
AI __m256
load_w(uint32_t type, const uint8_t *row, int64_t c, int64_t cols)
{
	int64_t		 n = cols - c, size = type == TT_F32 ? 4 : 2;
	const uint8_t	*p = row + size * c;
	uint8_t		 tmp[32];

	if (n < 8) {
		memset(tmp, 0, sizeof tmp);
		memcpy(tmp, p, n * size);
		p = tmp;
	}
	if (type == TT_F32)
		return (_mm256_loadu_ps((const float *)p));
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	if (type == TT_F16)
		return (_mm256_cvtph_ps(h));
	return (_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}

/* 8 activations at column c; past the end reads zeros. */
AI __m256
load_x(const float *x, int64_t c, int64_t cols)
{
	if (cols - c < 8) {
		float tmp[8] = { 0 };
		memcpy(tmp, x + c, (cols - c) * sizeof *x);
		return (_mm256_loadu_ps(tmp));
	}
	return (_mm256_loadu_ps(x + c));
}

/* One tile of a float type: f32 multiply-adds, 8 columns at a time. */
AI void
float_tile(const uint32_t type, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    const int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	__m256		 acc[TMR][NR];
	const uint8_t	*row[TMR];
	const float	*x[NR];
	int64_t		 c;
	int		 i, j;

#pragma GCC unroll 4
	for (i = 0; i < mr; i++) {
		row[i] = w + (r0 + i) * rb;
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			acc[i][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < nr; j++)
		x[j] = a->x + (size_t)(t0 + j) * cols;
	for (c = 0; c < cols; c += 8) {
		__m256	xv[NR];

#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			xv[j] = load_x(x[j], c, cols);
#pragma GCC unroll 4
		for (i = 0; i < mr; i++) {
			__m256	wv;

			if (nr == 1)
				_mm_prefetch((const char *)row[i] + (type == TT_F32 ? 4 : 2) * c +
				    AVX2_PF_DECODE, _MM_HINT_T0);
			wv = load_w(type, row[i], c, cols);
#pragma GCC unroll 4
			for (j = 0; j < nr; j++)
				acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < mr; i++)
#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			y[(size_t)(t0 + j) * ldy + r0 + i] = hsum256(acc[i][j]);
}

DISPATCH(avx2_f32, float_tile, TT_F32, DMR, FMR)
DISPATCH(avx2_f16, float_tile, TT_F16, DMR, FMR)
DISPATCH(avx2_bf16, float_tile, TT_BF16, DMR, FMR)

/*
 * quant_act_fill with AVX2 for the element-order layouts (ACT_NATURAL,
 * ACT_BLOCK, ACT_BLOCK16, ACT_PAIR16): the same arithmetic (max, 127 / max,
 * round to nearest even, integer sums), so the same codes and scales.
 */
void
avx2_act_fill(struct qact *a, uint32_t type, int t0, int t1)
{
	const int64_t	 cols = a->cols, stride = a->stride, nb = stride / 32;
	const int	 off = quant_code_offset(type);
	const __m256i	 perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	const __m256	 sign = _mm256_set1_ps(-0.0f);
	const int	 pair16 = a->layout == ACT_PAIR16;
	int64_t		 b;
	int		 t, k;

	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		int8_t		*q = a->q + (size_t)t * stride;
		float		*d = a->d + (size_t)t * nb;
		float		*dl = a->dl + (size_t)t * stride / 4;
		int32_t		*bias = a->bias + (size_t)t * stride / 4;
		float		*s = a->s + (size_t)t * nb;

		for (b = 0; b < nb; b++) {
			__m256	 v[4], m;
			__m256i	 qi[4], p;
			__m128	 h;
			float	 amax, db, id;
			int	 sum;

			if (32 * b >= cols) {
				_mm256_storeu_si256((__m256i *)(q + 32 * b),
				    _mm256_setzero_si256());
				d[b] = s[b] = 0;
				_mm256_storeu_ps(dl + 8 * b, _mm256_setzero_ps());
				if (pair16)
					bias[b] = 0;
				else
					_mm256_storeu_si256((__m256i *)(bias + 8 * b),
					    _mm256_setzero_si256());
				continue;
			}
			for (k = 0; k < 4; k++)
				v[k] = _mm256_loadu_ps(x + 32 * b + 8 * k);
			m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]),
			    _mm256_andnot_ps(sign, v[1])), _mm256_max_ps(
			    _mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
			h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
			h = _mm_max_ps(h, _mm_movehl_ps(h, h));
			h = _mm_max_ss(h, _mm_movehdup_ps(h));
			amax = _mm_cvtss_f32(h);
			db = amax / 127.0f;
			id = db > 0 ? 127.0f / amax : 0;
			for (k = 0; k < 4; k++)
				qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k],
				    _mm256_set1_ps(id)));
			p = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]),
			    _mm256_add_epi32(qi[2], qi[3]));
			p = _mm256_hadd_epi32(p, p);
			p = _mm256_hadd_epi32(p, p);
			sum = _mm256_extract_epi32(p, 0) + _mm256_extract_epi32(p, 4);
			p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
			    _mm256_packs_epi32(qi[2], qi[3]));
			p = _mm256_permutevar8x32_epi32(p, perm);
			_mm256_storeu_si256((__m256i *)(q + 32 * b), p);
			d[b] = db;
			s[b] = db * (float)sum;
			/* Lanes of four codes: -off * their sum, and the scale. */
			p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p),
			    _mm256_set1_epi16(1));
			_mm256_storeu_ps(dl + 8 * b, _mm256_set1_ps(db));
			if (pair16) {
				p = _mm256_hadd_epi32(p, p);
				p = _mm256_hadd_epi32(p, p);
				bias[b] = (int32_t)((uint32_t)(uint16_t)_mm256_extract_epi32(p, 0) |
				    (uint32_t)(uint16_t)_mm256_extract_epi32(p, 4) << 16);
				continue;
			}
			_mm256_storeu_si256((__m256i *)(bias + 8 * b),
			    _mm256_mullo_epi32(p, _mm256_set1_epi32(-off)));
		}
		if (a->layout == ACT_BLOCK)
			quant_act_block_bias(bias, nb, 8);
		else if (a->layout == ACT_BLOCK16)
			quant_act_block_bias(bias, 2 * nb, 4);
	}
}

/* The AVX2 kernel of a type. */
struct quant_kernel
quant_kernel_avx2(uint32_t type)
{
	struct quant_kernel	k = { .mr = MR, .nr = NR, .dmr = DMR, .layout = ACT_NATURAL,
	    .fill = quant_act_fill };

	switch (type) {
	case TT_F32:
		k.fn = avx2_f32;
		k.mr = FMR;
		break;
	case TT_F16:
		k.fn = avx2_f16;
		k.mr = FMR;
		k.pack = avx2_f16_pack;
		k.pfn = avx2_f16_packed;
		k.pmr = FLOAT2_MR;
		k.pnr = FLOAT2_NR;
		k.playout = ACT_F32X;
		k.pfill = avx2_act_fill_f32x;
		break;
	case TT_BF16:
		k.fn = avx2_bf16;
		k.mr = FMR;
		k.pack = avx2_bf16_pack;
		k.pfn = avx2_bf16_packed;
		k.pmr = FLOAT2_MR;
		k.pnr = FLOAT2_NR;
		k.playout = ACT_F32X;
		k.pfill = avx2_act_fill_f32x;
		break;
	case TT_Q4_0:
		k.fn = avx2_q4_0;
		k.fill = avx2_act_fill;
		k.pack = avx2_q4_0_pack;
		k.pfn = avx2_q4_0_packed;
		break;
	case TT_Q8_0:
		k.fn = avx2_q8_0;
		k.fill = avx2_act_fill;
		k.pack = avx2_q8_0_pack;
		k.pfn = avx2_q8_0_packed;
		break;
	case TT_Q4_K:
		k.fn = avx2_q4_k;
		k.fill = avx2_act_fill;
		k.pack = avx2_q4_k_pack;
		k.pfn = avx2_q4_k_packed;
		break;
	case TT_Q6_K:
		k.fn = avx2_q6_k;
		k.fill = avx2_act_fill;
		k.pack = avx2_q6_k_pack;
		k.pfn = avx2_q6_k_packed;
		k.pmr = PACK2_MR;
		k.pnr = 3;
		k.playout = ACT_PAIR16;
		k.pfill = avx2_act_fill;
		break;
	case TT_Q4_1:
		k.fn = avx2_q4_1;
		k.fill = avx2_act_fill;
		k.pack = avx2_q4_1_pack;
		k.pfn = avx2_q4_1_packed;
		break;
	case TT_Q5_0:
		k.fn = avx2_q5_0;
		k.fill = avx2_act_fill;
		k.pack = avx2_q5_0_pack;
		k.pfn = avx2_q5_0_packed;
		break;
	case TT_Q5_1:
		k.fn = avx2_q5_1;
		k.fill = avx2_act_fill;
		k.pack = avx2_q5_1_pack;
		k.pfn = avx2_q5_1_packed;
		break;
	case TT_IQ4_NL:
		k.fn = avx2_iq4_nl;
		k.fill = avx2_act_fill;
		k.pack = avx2_iq4_nl_pack;
		k.pfn = avx2_iq4_nl_packed;
		k.pnr = PACK32_IQ4_NR;
		break;
	case TT_Q2_K:
		k.fn = avx2_q2_k;
		k.fill = avx2_act_fill;
		k.pack = avx2_q2_k_pack;
		k.pfn = avx2_q2_k_packed;
		k.pmax_cols = PACK_K2_MAX_COLS;
		k.pmr = PACK_K2_MR;
		k.smr = PACK_K2_MR;
		k.pnr = PACK_K2_NR;
		k.playout = ACT_PAIR16;
		k.pfill = avx2_act_fill;
		break;
	case TT_Q3_K:
		k.fn = avx2_q3_k;
		k.fill = avx2_act_fill;
		k.pack = avx2_q3_k_pack;
		k.pfn = avx2_q3_k_packed;
		k.pmax_cols = PACK_K2_MAX_COLS;
		k.pmr = PACK_K2_MR;
		k.smr = PACK_K2_MR;
		k.pnr = PACK_K2_NR;
		k.playout = ACT_PAIR16;
		k.pfill = avx2_act_fill;
		break;
	case TT_Q5_K:
		k.fn = avx2_q5_k;
		k.fill = avx2_act_fill;
		k.pack = avx2_q5_k_pack;
		k.pfn = avx2_q5_k_packed;
		k.pmr = PACK2_MR;
		k.pnr = PACK_K2_NR;
		k.playout = ACT_NATURAL;
		k.pfill = avx2_act_fill;
		break;
	case TT_IQ4_XS:
		k.fn = avx2_iq4_xs;
		k.fill = avx2_act_fill;
		k.pack = avx2_iq4_xs_pack;
		k.pfn = avx2_iq4_xs_packed;
		k.pmr = PACK2_MR;
		k.pnr = PACK_K2_NR;
		k.playout = ACT_NATURAL;
		k.pfill = avx2_act_fill;
		break;
	}
	/* What a packed kernel leaves unset: pack_avx2.h's tile, ACT_NATURAL. */
	if (k.pack != NULL && k.pmr == 0)
		k.pmr = PACK2_MR;
	if (k.pack != NULL && k.pnr == 0)
		k.pnr = PACK2_NR;
	if (k.pack != NULL && k.pfill == NULL) {
		k.playout = ACT_NATURAL;
		k.pfill = avx2_act_fill;
	}
	return (k);
}
