/*
 * f16_i16_avx2.c: F16 and BF16 weights times activations in 16-bit
 * integer dot products on AVX2 (vpmaddwd: 16 products an instruction,
 * twice vfmadd231ps, then one vpaddd).
 *
 * The numbers, the packed layout and the activations (ACT_I16) are those
 * of f16_i16_avx512.c, so both variants give the same bits: each block of
 * 32 columns sums exactly in 32-bit integers, and each output is
 * fma(float(block sum), weight scale * activation scale, acc) over the
 * blocks in column order.  BF16 weights (which the AVX-512 variant takes
 * this way only where bf16 dot products do not take them) become codes
 * the same way as F16 ones: a block's largest binade keeps its 8
 * significant bits shifted left by five, so weights within a factor of 32
 * of the largest are exact and smaller ones are rounded to 2^-13 of that
 * binade.  A packed pair of columns is 64 bytes, 16 rows of two codes:
 * here two ymm of 8 rows each.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>
#include <time.h>

#include "avx2_tile.h"
#include "i16_format.h"
#include "quant.h"
#include "tensor_type.h"
#include "tile_dispatch.h"

#define INR2	2	/* tokens per two-group tile */
#define INR1	4	/* tokens per one-group tile */

#define AI	static inline __attribute__((always_inline))

/*
 * The codes of 8 F16 or BF16 values h (one per 32-bit lane) of a block of
 * reference exponent eref (its largest, see block_codes): significands
 * shifted left by up to SHIFT, or right with rounding to nearest, ties up.
 */
AI __m256i
codes8(const uint32_t type, __m256i h, int eref)
{
	const __m256i	one = _mm256_set1_epi32(1);
	const __m256i	frac = _mm256_and_si256(h,
			    _mm256_set1_epi32((1 << FRAC(type)) - 1));
	const __m256i	e = _mm256_and_si256(_mm256_srli_epi32(h, FRAC(type)),
			    _mm256_set1_epi32(EMASK(type)));
	const __m256i	normal = _mm256_cmpgt_epi32(e, _mm256_setzero_si256());
	__m256i		m, k, r, up, down;

	m = _mm256_or_si256(frac, _mm256_and_si256(normal,
	    _mm256_set1_epi32(1 << FRAC(type))));
	/* A subnormal counts as exponent 1. */
	k = _mm256_sub_epi32(_mm256_max_epi32(e, one),
	    _mm256_set1_epi32(eref - SHIFT(type)));
	r = _mm256_sub_epi32(_mm256_setzero_si256(), k);
	up = _mm256_sllv_epi32(m, _mm256_max_epi32(k, _mm256_setzero_si256()));
	/* Shifts of 32 or more give 0, as the codes of tiny weights must. */
	down = _mm256_srlv_epi32(_mm256_add_epi32(m, _mm256_sllv_epi32(one,
	    _mm256_sub_epi32(r, one))), r);
	m = _mm256_blendv_epi8(up, down, _mm256_cmpgt_epi32(r,
	    _mm256_setzero_si256()));
	return (_mm256_sign_epi32(m, _mm256_or_si256(one, _mm256_slli_epi32(h, 16))));
}

/*
 * The 32 codes of block b of a row (zero past cols) into c, and the
 * exponent field of their scale: 2^(eref - FRAC - SHIFT - bias), eref
 * being the largest exponent of the block (at least EREF_MIN).
 */
AI uint8_t
block_codes(const uint32_t type, const uint8_t *row, int64_t b, int64_t cols,
    int16_t c[IB])
{
	uint16_t	h[IB] = { 0 };
	__m256i		v[4], mx;
	int64_t		n = cols - b * IB;
	int		eref, i;

	memcpy(h, row + b * IB * 2, (size_t)(n < IB ? n : IB) * 2);
	/* Both formats order their magnitudes as integers. */
	mx = _mm256_max_epu16(_mm256_and_si256(_mm256_loadu_si256(
	    (const __m256i *)h), _mm256_set1_epi16(0x7fff)), _mm256_and_si256(
	    _mm256_loadu_si256((const __m256i *)(h + 16)),
	    _mm256_set1_epi16(0x7fff)));
	mx = _mm256_max_epu16(mx, _mm256_permute2x128_si256(mx, mx, 1));
	mx = _mm256_max_epu16(mx, _mm256_srli_si256(mx, 8));
	mx = _mm256_max_epu16(mx, _mm256_srli_si256(mx, 4));
	mx = _mm256_max_epu16(mx, _mm256_srli_si256(mx, 2));
	eref = _mm256_extract_epi16(mx, 0) >> FRAC(type);
	if (eref < EREF_MIN(type))
		eref = EREF_MIN(type);
	for (i = 0; i < 4; i++)
		v[i] = codes8(type, _mm256_cvtepu16_epi32(_mm_loadu_si128(
		    (const __m128i *)(h + 8 * i))), eref);
	_mm256_storeu_si256((__m256i *)c, _mm256_permute4x64_epi64(
	    _mm256_packs_epi32(v[0], v[1]), 0xd8));
	_mm256_storeu_si256((__m256i *)(c + 16), _mm256_permute4x64_epi64(
	    _mm256_packs_epi32(v[2], v[3]), 0xd8));
	return ((uint8_t)(eref + SBIAS(type)));
}

/* Copy rows into the packed layout (or only size it when dst is NULL). */
AI size_t
i16_pack(const uint32_t type, const uint8_t *w, size_t rb, int64_t rows,
    int64_t cols, uint8_t *dst)
{
	const int64_t	ng = (rows + IG - 1) / IG, nb = nblocks(cols);
	const size_t	gb = group_bytes(cols);
	int16_t		codes[IG][IB];
	int64_t		g, b, r;
	int		i, p;

	if (dst == NULL)
		return ((size_t)ng * gb);
	memset(dst, 0, (size_t)ng * gb);
	for (g = 0; g < ng; g++) {
		uint8_t	*gp = dst + g * gb;

		for (b = 0; b < nb; b++) {
			uint8_t		*sb = gp + (b / ISB) * ISB_BYTES;
			uint8_t		*out = sb + 64 + (b % ISB) * 1024;

			memset(codes, 0, sizeof codes);
			for (i = 0; i < IG; i++) {
				r = g * IG + i;
				if (r < rows)
					sb[16 * (b % ISB) + i] = block_codes(type,
					    w + (size_t)r * rb, b, cols, codes[i]);
			}
			for (p = 0; p < 16; p++)
				for (i = 0; i < IG; i++)
					memcpy(out + 4 * (p * IG + i), &codes[i][2 * p], 4);
		}
	}
	return ((size_t)ng * gb);
}

/* Activations of tokens [t0, t1) as codes (xb) and block scales (d). */
static void
i16_fill(struct qact *a, uint32_t type, int t0, int t1)
{
	const int64_t	cols = a->cols, stride = a->stride;
	const __m256	sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	int64_t		c;
	int		t, i;

	(void)type;
	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		int16_t		*q = (int16_t *)a->xb + (size_t)t * stride;
		float		*d = a->d + (size_t)t * (stride / IB);

		for (c = 0; c < stride; c += IB) {
			float		v[IB] = { 0 }, amax, inv;
			int64_t		n = cols - c;
			__m256		f[4], mx, bad;
			__m256i		qi[4];
			__m128		m4;

			if (n > 0)
				memcpy(v, x + c, (size_t)(n < IB ? n : IB) * 4);
			bad = _mm256_setzero_ps();
			mx = _mm256_setzero_ps();
			for (i = 0; i < 4; i++) {
				f[i] = _mm256_loadu_ps(v + 8 * i);
				bad = _mm256_or_ps(bad, _mm256_cmp_ps(f[i], f[i],
				    _CMP_UNORD_Q));
				mx = _mm256_max_ps(mx, _mm256_and_ps(f[i], sign));
			}
			m4 = _mm_max_ps(_mm256_castps256_ps128(mx),
			    _mm256_extractf128_ps(mx, 1));
			m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
			m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
			amax = _mm_cvtss_f32(m4);
			/* An infinite or NaN activation makes its outputs NaN. */
			if (_mm256_movemask_ps(bad) != 0 || !__builtin_isfinite(amax)) {
				d[c / IB] = __builtin_nanf("");
				inv = 0;
			} else {
				d[c / IB] = amax / QMAX;
				inv = amax > 0 ? QMAX / amax : 0;
			}
			for (i = 0; i < 4; i++)
				qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(f[i],
				    _mm256_set1_ps(inv)));
			_mm256_storeu_si256((__m256i *)(q + c), _mm256_permute4x64_epi64(
			    _mm256_packs_epi32(qi[0], qi[1]), 0xd8));
			_mm256_storeu_si256((__m256i *)(q + c + 16),
			    _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[2], qi[3]),
			    0xd8));
		}
	}
}

/*
 * One tile on packed weights: mg groups of 16 rows (mr rows kept) by nr
 * tokens.  Each group is two halves of 8 rows; a token's pair of codes is
 * broadcast and vpmaddwd multiplies it into each half's lanes.
 */
AI void
i16_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const size_t	 gb = group_bytes(cols);
	const uint8_t	*gp = pw + (size_t)(r0 / IG) * gb;
	const int64_t	 nb = nblocks(cols), dstride = a->stride / IB;
	__m256		 acc[2 * 2][INR1];
	__m256i		 is[2 * 2][INR1];
	const int32_t	*x[INR1];
	int64_t		 b;
	int		 h, j, p;

#pragma GCC unroll 4
	for (j = 0; j < nr; j++) {
		x[j] = (const int32_t *)((const int16_t *)a->xb +
		    (size_t)(t0 + j) * a->stride);
#pragma GCC unroll 4
		for (h = 0; h < 2 * mg; h++)
			acc[h][j] = _mm256_setzero_ps();
	}
	for (b = 0; b < nb; b++) {
		const size_t	sbo = (size_t)(b / ISB) * ISB_BYTES;
		const uint8_t	*cp = gp + sbo + 64 + (b % ISB) * 1024;

#pragma GCC unroll 4
		for (h = 0; h < 2 * mg; h++)
#pragma GCC unroll 4
			for (j = 0; j < nr; j++)
				is[h][j] = _mm256_setzero_si256();
#pragma GCC unroll 16
		for (p = 0; p < 16; p++) {
			__m256i	wv[2 * 2];

#pragma GCC unroll 4
			for (h = 0; h < 2 * mg; h++)
				wv[h] = _mm256_load_si256((const __m256i *)(cp +
				    (h / 2) * gb + 64 * p + 32 * (h % 2)));
#pragma GCC unroll 4
			for (j = 0; j < nr; j++) {
				const __m256i	xv = _mm256_set1_epi32(x[j][16 * b + p]);

#pragma GCC unroll 4
				for (h = 0; h < 2 * mg; h++)
					is[h][j] = avx2_chain(_mm256_add_epi32(is[h][j],
					    _mm256_madd_epi16(wv[h], xv)));
			}
		}
#pragma GCC unroll 4
		for (h = 0; h < 2 * mg; h++) {
			const __m256	ws = _mm256_castsi256_ps(_mm256_slli_epi32(
					    _mm256_cvtepu8_epi32(_mm_loadl_epi64(
					    (const __m128i *)(gp + (h / 2) * gb + sbo +
					    16 * (b % ISB) + 8 * (h % 2)))), 23));

#pragma GCC unroll 4
			for (j = 0; j < nr; j++)
				acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[h][j]),
				    _mm256_mul_ps(ws, _mm256_set1_ps(a->d[(size_t)(t0 +
				    j) * dstride + b])), acc[h][j]);
		}
	}
#pragma GCC unroll 4
	for (h = 0; h < 2 * mg; h++) {
		const int	left = mr - h * 8;

#pragma GCC unroll 4
		for (j = 0; j < nr; j++)
			if (left > 0)
				avx2_store_rows(y + (size_t)(t0 + j) * ldy + r0 + h * 8,
				    acc[h][j], left);
	}
}

/* Two groups by nr tokens (at most INR2). */
static void
i16_two(const uint8_t *pw, int64_t cols, int64_t r0, int mr, const struct qact *a,
    int t0, int nr, float *y, int64_t ldy)
{
	TILE_DISPATCH_NR4(i16_tile, 2, INR2)
}

/* One group by nr tokens (at most INR1). */
static void
i16_one(const uint8_t *pw, int64_t cols, int64_t r0, int mr, const struct qact *a,
    int t0, int nr, float *y, int64_t ldy)
{
	TILE_DISPATCH_NR4(i16_tile, 1, INR1)
}

/*
 * The product on packed weights: a decode step's one or two tokens take
 * two groups (two weight streams), more tokens one group at a time, INR1
 * tokens a tile (a larger tile spills its accumulators).
 */
static void
i16_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	int	t, g;

	if (nr <= INR2 && mr > IG) {
		for (t = t0; t < t0 + nr; t += INR2)
			i16_two(pw, cols, r0, mr, a, t, t0 + nr - t, y, ldy);
		return;
	}
	for (g = 0; g * IG < mr; g++)
		for (t = t0; t < t0 + nr; t += INR1)
			i16_one(pw, cols, r0 + g * IG, mr - g * IG, a, t,
			    t0 + nr - t, y, ldy);
}

/* Copy F16 rows into the packed layout. */
static size_t
f16_i16_pack2(const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	return (i16_pack(TT_F16, w, rb, rows, cols, dst));
}

/* Copy BF16 rows into the packed layout. */
static size_t
bf16_i16_pack2(const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	return (i16_pack(TT_BF16, w, rb, rows, cols, dst));
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
			int16_t	 c[IB];
			uint32_t bits = (uint32_t)block_codes(type, row, b, cols,
				    c) << 23;
			__m256i	 c0 = _mm256_loadu_si256((const __m256i *)c);
			__m256i	 c1 = _mm256_loadu_si256((const __m256i *)(c + 16));
			float	 s;

			memcpy(&s, &bits, 4);
			for (j = 0; j < nr; j++) {
				const int16_t	*q = (const int16_t *)a->xb +
						    (size_t)(t0 + j) * a->stride + b * IB;
				__m256i		 v = _mm256_add_epi32(_mm256_madd_epi16(c0,
						    _mm256_loadu_si256((const __m256i *)q)),
						    _mm256_madd_epi16(c1, _mm256_loadu_si256(
						    (const __m256i *)(q + 16))));
				__m128i		 v4 = _mm_add_epi32(
						    _mm256_castsi256_si128(v),
						    _mm256_extracti128_si256(v, 1));
				int32_t		 sum;

				v4 = _mm_add_epi32(v4, _mm_shuffle_epi32(v4, 0x4e));
				v4 = _mm_add_epi32(v4, _mm_shuffle_epi32(v4, 0xb1));
				sum = _mm_cvtsi128_si32(v4);
				acc[j] = __builtin_fmaf((float)sum, s *
				    a->d[(size_t)(t0 + j) * dstride + b], acc[j]);
			}
		}
		for (j = 0; j < nr; j++)
			y[(size_t)(t0 + j) * ldy + r0 + i] = acc[j];
	}
}

/* i16_plain of F16 weights. */
static void
f16_i16_plain2(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	i16_plain(TT_F16, w, rb, cols, r0, mr, a, t0, nr, y, ldy);
}

/* i16_plain of BF16 weights. */
static void
bf16_i16_plain2(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	i16_plain(TT_BF16, w, rb, cols, r0, mr, a, t0, nr, y, ldy);
}

/*
 * Whether all n F16 (or, bf16 set, BF16) values at w are finite: an
 * infinity or NaN has no block scale, so such a matrix stays exact.
 */
int
i16_finite(const void *w, size_t n, int bf16)
{
	const uint16_t	*h = w;
	const uint16_t	 em = bf16 ? 0x7f80 : 0x7c00;
	const __m256i	 inf = _mm256_set1_epi16((short)em);
	__m256i		 any = _mm256_setzero_si256();
	size_t		 i;

	for (i = 0; i + 16 <= n; i += 16) {
		__m256i	v = _mm256_and_si256(_mm256_loadu_si256(
			    (const __m256i *)(h + i)), inf);

		any = _mm256_or_si256(any, _mm256_cmpeq_epi16(v, inf));
	}
	for (; i < n; i++)
		if ((h[i] & em) == em)
			return (0);
	return (_mm256_testz_si256(any, any));
}

/* The 16-bit integer kernel of F16 or BF16 weights on AVX2. */
struct quant_kernel
quant_kernel_avx2_i16(uint32_t type)
{
	struct quant_kernel	k = { .fn = f16_i16_plain2, .mr = 1, .nr = INR1,
	    .layout = ACT_I16, .fill = i16_fill, .pack = f16_i16_pack2,
	    .pfn = i16_packed, .pmr = IG, .smr = 2 * IG,
	    .pnr = INR1, .playout = ACT_I16, .pfill = i16_fill };

	if (type == TT_BF16) {
		k.fn = bf16_i16_plain2;
		k.pack = bf16_i16_pack2;
	}
	return (k);
}

/* Nanoseconds of 12 chains of n vfmadd231ps, or of vpmaddwd and vpaddd. */
static double
rate_run2(int i16, int n)
{
	const __m256	 f = _mm256_set1_ps(1e-4f);
	const __m256i	 w = _mm256_set1_epi32(0x00010001);
	__m256		 c[12];
	struct timespec	 t0, t1;
	float		 sink[8];
	int		 i, k;

	for (k = 0; k < 12; k++)
		c[k] = _mm256_set1_ps((float)k);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (i16)
		for (i = 0; i < n; i++) {
#pragma GCC unroll 12
			for (k = 0; k < 12; k++)
				c[k] = _mm256_castsi256_ps(_mm256_add_epi32(
				    _mm256_castps_si256(c[k]), _mm256_madd_epi16(w,
				    _mm256_castps_si256(c[k]))));
		}
	else
		for (i = 0; i < n; i++) {
#pragma GCC unroll 12
			for (k = 0; k < 12; k++)
				c[k] = _mm256_fmadd_ps(f, f, c[k]);
		}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (k = 1; k < 12; k++)
		c[0] = _mm256_add_ps(c[0], c[k]);
	_mm256_storeu_ps(sink, c[0]);
	/* Keeps the loops from being dropped. */
	__asm__ volatile("" : : "r"(sink) : "memory");
	return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec));
}

/*
 * The issue rate of vpmaddwd with its vpaddd over that of vfmadd231ps on
 * the calling thread's core: the best of fifteen short runs of each, so
 * that a preemption in one does not decide.
 */
double
float_avx2_i16_rate(void)
{
	double	f = 0, b = 0, t;
	int	r;

	for (r = 0; r < 15; r++) {
		t = rate_run2(0, 16384);
		f = r == 0 || t < f ? t : f;
		t = rate_run2(1, 16384);
		b = r == 0 || t < b ? t : b;
	}
	return (b > 0 ? f / b : 0);
}
