/*
 * f16_i16_avx512.c: F16 and BF16 weights times activations in 16-bit
 * integer dot products (vpdpwssd: 32 multiply-adds an instruction, twice
 * vfmadd231ps).
 *
 * Numbers.  Each run of 32 columns of a weight row (a block) is held as
 * 16-bit integers m times a power of two, set by eref, the largest
 * exponent in the block.  F16: the block's largest values keep their 11
 * significant bits shifted left by two (|m| <= 8188) and the scale is
 * 2^(eref - 27), so every value within a factor of four of them is exact
 * and a smaller one is rounded to a multiple of 2^-13 of the block's
 * largest binade.  BF16 (where the CPU's bf16 dot products do not take
 * it): its 8 significant bits shifted left by five, scale 2^(eref - 139)
 * with eref at least 13 so that the scale stays a normal float: values
 * within a factor of 32 of the largest are exact.  The activations are
 * rounded per token and block of 32 to q / 8191 of their largest
 * magnitude (|q| <= 8191).  32 products of such bounds sum below 2^31, so
 * a block's integer sum is exact in 32 bits, and each output is
 * fma(float(sum of block b), weight scale * activation scale, acc) over the
 * blocks in column order: the same operations whatever the tile, the
 * batch, the thread split, and whether the weights are repacked; the
 * same bits as f16_i16_avx2.c.
 *
 * Matrices holding an infinity or NaN are left exact (i16_finite).
 *
 * Packed layout: rows in groups of 16; a group is a run of super-blocks
 * of 128 columns, 4160 bytes each: 64 bytes of scales (block k's row i at
 * byte 16k + i, the f32 exponent field of the scale), then the four
 * blocks' codes, 1024 bytes each: per pair of columns (2p, 2p + 1) 16
 * lanes of 32 bits, lane i holding row i's two codes, the operand order of
 * vpdpwssd.  Columns past the end are zero.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "i16_format.h"
#include "quant.h"
#include "tensor_type.h"
#include "tile_dispatch.h"

#define IMR	3	/* groups per tile */
#define INR3	4	/* tokens per three-group tile */
#define INR2	6	/* tokens per two-group tile */
#define INR1	12	/* tokens per one-group tile */
#define IPF_DECODE 6144	/* bytes ahead a one-token tile reads its groups */

#define AI	static inline __attribute__((always_inline))

/*
 * The codes of 32 F16 or BF16 values h (zero past the end) and the
 * exponent field of their scale (see the top of the file).
 */
AI __m512i
i16_codes(const uint32_t type, __m512i h, uint8_t *scale)
{
	const __m512i	mag = _mm512_and_si512(h, _mm512_set1_epi16(0x7fff));
	const __m512i	e = _mm512_srli_epi16(mag, FRAC(type));
	const __m512i	one = _mm512_set1_epi16(1);
	const __m512i	fmask = _mm512_set1_epi16((1 << FRAC(type)) - 1);
	const __mmask32	normal = _mm512_test_epi16_mask(e, e);
	__m512i		ep, m, k, r, half;
	__m256i		mx;
	int		eref;

	/* Both formats order their magnitudes as integers. */
	mx = _mm256_max_epu16(_mm512_castsi512_si256(mag),
	    _mm512_extracti64x4_epi64(mag, 1));
	eref = _mm512_reduce_max_epu32(_mm512_cvtepu16_epi32(mx)) >> FRAC(type);
	if (eref < EREF_MIN(type))
		eref = EREF_MIN(type);
	*scale = (uint8_t)(eref + SBIAS(type));
	/* Significand with its hidden bit; a subnormal counts as exponent 1. */
	m = _mm512_mask_add_epi16(_mm512_and_si512(h, fmask), normal,
	    _mm512_and_si512(h, fmask), _mm512_set1_epi16(1 << FRAC(type)));
	ep = _mm512_max_epu16(e, one);
	/*
	 * Shift left by k = ep - eref + SHIFT (at most SHIFT), or right,
	 * rounding to nearest, ties up; shifts of 16 or more give 0.
	 */
	k = _mm512_sub_epi16(ep, _mm512_set1_epi16((short)(eref - SHIFT(type))));
	r = _mm512_sub_epi16(_mm512_setzero_si512(), k);
	half = _mm512_sllv_epi16(one, _mm512_sub_epi16(r, one));
	m = _mm512_mask_blend_epi16(_mm512_cmpgt_epi16_mask(r,
	    _mm512_setzero_si512()), _mm512_sllv_epi16(m, k),
	    _mm512_srlv_epi16(_mm512_add_epi16(m, half), r));
	return (_mm512_mask_sub_epi16(m, _mm512_test_epi16_mask(h,
	    _mm512_set1_epi16((short)0x8000)), _mm512_setzero_si512(), m));
}

/* The 16-bit values of block b of a row (zero past cols). */
AI __m512i
load_block(const uint8_t *row, int64_t b, int64_t cols)
{
	int64_t		n = cols - b * IB;
	__mmask32	m = n >= IB ? ~(__mmask32)0 : (__mmask32)((1u << n) - 1);

	return (_mm512_maskz_loadu_epi16(m, row + b * IB * 2));
}

/* Copy rows into the packed layout (or only size it when dst is NULL). */
AI size_t
i16_pack(const uint32_t type, const uint8_t *w, size_t rb, int64_t rows,
    int64_t cols, uint8_t *dst)
{
	const int64_t	ng = (rows + IG - 1) / IG, nb = nblocks(cols);
	const size_t	gb = group_bytes(cols);
	uint32_t	codes[IG][16];
	int64_t		g, b, r;
	int		i, p;

	if (dst == NULL)
		return ((size_t)ng * gb);
	memset(dst, 0, (size_t)ng * gb);
	for (g = 0; g < ng; g++) {
		uint8_t	*gp = dst + g * gb;

		for (b = 0; b < nb; b++) {
			uint8_t		*sb = gp + (b / ISB) * ISB_BYTES;
			uint32_t	*out = (uint32_t *)(sb + 64 + (b % ISB) * 1024);

			for (i = 0; i < IG; i++) {
				__m512i	v = _mm512_setzero_si512();

				r = g * IG + i;
				if (r < rows)
					v = i16_codes(type, load_block(w +
					    (size_t)r * rb, b, cols),
					    &sb[16 * (b % ISB) + i]);
				_mm512_storeu_si512(codes[i], v);
			}
			for (p = 0; p < 16; p++)
				for (i = 0; i < IG; i++)
					out[p * IG + i] = codes[i][p];
		}
	}
	return ((size_t)ng * gb);
}

/* Activations of tokens [t0, t1) as codes (xb) and block scales (d). */
static void
f16_i16_fill(struct qact *a, uint32_t type, int t0, int t1)
{
	const int64_t	cols = a->cols, stride = a->stride;
	const __m512	sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
	int64_t		c;
	int		t;

	(void)type;
	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		int16_t		*q = (int16_t *)a->xb + (size_t)t * stride;
		float		*d = a->d + (size_t)t * (stride / IB);

		for (c = 0; c < stride; c += IB) {
			int64_t		n = cols - c;
			__mmask16	m0 = n >= 16 ? 0xffff : n <= 0 ? 0 :
					    (__mmask16)((1u << n) - 1);
			__mmask16	m1 = n >= 32 ? 0xffff : n <= 16 ? 0 :
					    (__mmask16)((1u << (n - 16)) - 1);
			__m512		v0 = _mm512_maskz_loadu_ps(m0, x + c);
			__m512		v1 = _mm512_maskz_loadu_ps(m1, x + c + 16);
			float		amax, inv;
			__m512i		q0, q1;

			amax = _mm512_reduce_max_ps(_mm512_max_ps(
			    _mm512_and_ps(v0, sign), _mm512_and_ps(v1, sign)));
			/* An infinite or NaN activation makes its outputs NaN. */
			if (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) != 0 ||
			    _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q) != 0 ||
			    !__builtin_isfinite(amax)) {
				d[c / IB] = __builtin_nanf("");
				inv = 0;
			} else {
				d[c / IB] = amax / QMAX;
				inv = amax > 0 ? QMAX / amax : 0;
			}
			q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)));
			q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)));
			_mm256_storeu_si256((__m256i *)(q + c), _mm512_cvtsepi32_epi16(q0));
			_mm256_storeu_si256((__m256i *)(q + c + 16),
			    _mm512_cvtsepi32_epi16(q1));
		}
	}
}

/*
 * One tile on packed weights: mg groups of 16 rows (mr rows kept) by nr
 * tokens.  A one-token tile splits each block's integer sum into two
 * chains (even and odd pairs), which integer addition joins exactly.
 */
AI void
i16_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const size_t	 gb = group_bytes(cols);
	const uint8_t	*gp = pw + (size_t)(r0 / IG) * gb;
	const int64_t	 nb = nblocks(cols), dstride = a->stride / IB;
	__m512		 acc[IMR][INR1], ws[IMR];
	__m512i		 is[IMR][INR1], io[IMR];
	const int32_t	*x[INR1];
	int64_t		 b;
	int		 i, j, p;

#pragma GCC unroll 12
	for (j = 0; j < nr; j++) {
		x[j] = (const int32_t *)((const int16_t *)a->xb +
		    (size_t)(t0 + j) * a->stride);
#pragma GCC unroll 3
		for (i = 0; i < mg; i++)
			acc[i][j] = _mm512_setzero_ps();
	}
	for (b = 0; b < nb; b++) {
		const size_t	sbo = (size_t)(b / ISB) * ISB_BYTES;
		const uint8_t	*cp = gp + sbo + 64 + (b % ISB) * 1024;

#pragma GCC unroll 3
		for (i = 0; i < mg; i++) {
			ws[i] = _mm512_castsi512_ps(_mm512_slli_epi32(
			    _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(gp +
			    i * gb + sbo + 16 * (b % ISB)))), 23));
			io[i] = _mm512_setzero_si512();
#pragma GCC unroll 12
			for (j = 0; j < nr; j++)
				is[i][j] = _mm512_setzero_si512();
		}
#pragma GCC unroll 16
		for (p = 0; p < 16; p++) {
#pragma GCC unroll 3
			for (i = 0; i < mg; i++) {
				const uint8_t	*q = cp + i * gb + 64 * p;
				const __m512i	 wv = _mm512_load_si512((const void *)q);

				if (nr == 1)
					_mm_prefetch((const char *)q + IPF_DECODE,
					    _MM_HINT_T0);
				else
					_mm_prefetch((const char *)q + 1024,
					    _MM_HINT_T0);
				if (nr == 1 && (p & 1)) {
					io[i] = _mm512_dpwssd_epi32(io[i], wv,
					    _mm512_set1_epi32(x[0][16 * b + p]));
					continue;
				}
#pragma GCC unroll 12
				for (j = 0; j < nr; j++)
					is[i][j] = _mm512_dpwssd_epi32(is[i][j], wv,
					    _mm512_set1_epi32(x[j][16 * b + p]));
			}
		}
#pragma GCC unroll 12
		for (j = 0; j < nr; j++) {
			const __m512	dj = _mm512_set1_ps(a->d[(size_t)(t0 + j) *
					    dstride + b]);

#pragma GCC unroll 3
			for (i = 0; i < mg; i++) {
				__m512i	s = nr == 1 ? _mm512_add_epi32(is[i][0], io[i]) :
					    is[i][j];

				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
				    _mm512_mul_ps(ws[i], dj), acc[i][j]);
			}
		}
	}
#pragma GCC unroll 3
	for (i = 0; i < mg; i++) {
		const int	 left = mr - i * IG;
		const __mmask16	 m = left >= IG ? 0xffff :
				    left <= 0 ? 0 : (__mmask16)((1u << left) - 1);

#pragma GCC unroll 12
		for (j = 0; j < nr; j++)
			_mm512_mask_storeu_ps(y + (size_t)(t0 + j) * ldy + r0 + i * IG,
			    m, acc[i][j]);
	}
}

/* Two groups by nr tokens (at most INR2). */
static void
i16_two(const uint8_t *pw, int64_t cols, int64_t r0, int mr, const struct qact *a,
    int t0, int nr, float *y, int64_t ldy)
{
	TILE_DISPATCH_NR12(i16_tile, 2, INR2)
}

/* Three groups by nr tokens (at most INR3). */
static void
i16_three(const uint8_t *pw, int64_t cols, int64_t r0, int mr, const struct qact *a,
    int t0, int nr, float *y, int64_t ldy)
{
	TILE_DISPATCH_NR12(i16_tile, 3, INR3)
}

/*
 * The product on packed weights: three groups at once where there are
 * three, whose weights share each token's broadcasts (up to INR3 tokens
 * at a time; a decode step's one token then reads three streams), else
 * two for up to INR2 tokens, or one for up to INR1.
 */
static void
f16_i16_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	int	t;

	if (mr > 2 * IG) {
		for (t = t0; t < t0 + nr; t += INR3)
			i16_three(pw, cols, r0, mr, a, t, t0 + nr - t, y, ldy);
		return;
	}
	if (mr > IG) {
		for (t = t0; t < t0 + nr; t += INR2)
			i16_two(pw, cols, r0, mr, a, t, t0 + nr - t, y, ldy);
		return;
	}
	TILE_DISPATCH_NR12(i16_tile, 1, INR1)
}

/*
 * The same product on the mapped rows: each row's blocks converted as
 * they are packed, the block sums reduced across lanes (exact in integers).
 */
AI void
i16_plain(const uint32_t type, const uint8_t *w, size_t rb, int64_t cols,
    int64_t r0, int mr, const struct qact *a, int t0, int nr, float *y,
    int64_t ldy)
{
	const int64_t	nb = nblocks(cols), dstride = a->stride / IB;
	int64_t		b;
	int		i, j;

	for (i = 0; i < mr; i++) {
		const uint8_t	*row = w + (size_t)(r0 + i) * rb;
		float		 acc[INR1] = { 0 };

		for (b = 0; b < nb; b++) {
			uint8_t	 e;
			__m512i	 c = i16_codes(type, load_block(row, b, cols), &e);
			uint32_t bits = (uint32_t)e << 23;
			float	 s;

			memcpy(&s, &bits, 4);
			for (j = 0; j < nr; j++) {
				const __m512i	 q = _mm512_loadu_si512((const int16_t *)a->xb +
						    (size_t)(t0 + j) * a->stride + b * IB);
				int32_t		 sum = _mm512_reduce_add_epi32(
						    _mm512_madd_epi16(c, q));

				acc[j] = __builtin_fmaf((float)sum, s *
				    a->d[(size_t)(t0 + j) * dstride + b], acc[j]);
			}
		}
		for (j = 0; j < nr; j++)
			y[(size_t)(t0 + j) * ldy + r0 + i] = acc[j];
	}
}

/* i16_pack of F16 rows. */
static size_t
f16_i16_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	return (i16_pack(TT_F16, w, rb, rows, cols, dst));
}

/* i16_pack of BF16 rows. */
static size_t
bf16_i16_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	return (i16_pack(TT_BF16, w, rb, rows, cols, dst));
}

/* i16_plain of F16 weights. */
static void
f16_i16_plain(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	i16_plain(TT_F16, w, rb, cols, r0, mr, a, t0, nr, y, ldy);
}

/* i16_plain of BF16 weights. */
static void
bf16_i16_plain(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	i16_plain(TT_BF16, w, rb, cols, r0, mr, a, t0, nr, y, ldy);
}

/* The 16-bit integer kernel of F16 or BF16 weights. */
struct quant_kernel
quant_kernel_avx512_i16(uint32_t type)
{
	struct quant_kernel	k = { .fn = f16_i16_plain, .mr = 1, .nr = INR1,
	    .layout = ACT_I16, .fill = f16_i16_fill, .pack = f16_i16_pack,
	    .pfn = f16_i16_packed, .pmr = IMR * IG,
	    .pnr = INR1, .playout = ACT_I16, .pfill = f16_i16_fill };

	if (type == TT_BF16) {
		k.fn = bf16_i16_plain;
		k.pack = bf16_i16_pack;
	}
	return (k);
}
