/*
 * float_avx512.c: AVX-512 products of F16 and BF16 weights repacked at load.
 *
 * The rows are interleaved in groups of 16 so that one vector holds the
 * weights of 16 rows at one column: a tile multiplies it by each token's
 * activation at that column (a broadcast) and adds into one accumulator per
 * token, which ends up holding 16 outputs.  A weight vector is converted
 * once and used by every token of the tile; no horizontal sums are needed.
 *
 * Exact mode (the default): f32 multiply-adds of the weights (F16 through
 * vcvtph2ps, BF16 by shifting) and the f32 activations.  Each output is the
 * sum of two chains, the even and the odd columns, each added in column
 * order, then added together: the same operations whatever the tile, so
 * results do not depend on the batch or the thread split.  Two chains keep
 * a single-token tile (decode) from waiting on the latency of one chain.
 *
 * bf16 mode (quant_allow_bf16_dot): vdpbf16ps on bf16 weights (F16 ones
 * rounded to bf16 at load) and activations rounded to bf16, two columns per
 * lane and instruction, one chain per output in column order.  The
 * activations are interleaved by groups of tokens (ACT_BF16X) so that a
 * tile's broadcasts read one stream, not one per token: with a stream per
 * token the tile ran at 78% of vdpbf16ps's issue rate on Zen 4, with one
 * at 95-98%.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>
#include <time.h>

#include "quant.h"
#include "tensor_type.h"
#include "tile_dispatch.h"

#define FG	16	/* rows per packed group */
#define XNR	12	/* tokens per one-group tile, exact mode */
#define XMR	2	/* groups per tile, exact mode */
#define XNR2	6	/* tokens per two-group tile (TILE_DISPATCH_NR's most) */
#define XSMR	3	/* groups per one-token tile, exact mode */
#ifndef FPF_DECODE
#define FPF_DECODE 6144	/* bytes ahead a one-token tile reads its groups */
#endif
#define XMAXG	(XSMR > XMR ? XSMR : XMR)
#define BMR	2	/* groups per tile, bf16 mode */
#define BSMR	3	/* groups per tile of one or two tokens, bf16 mode */
#define BNR	12	/* tokens per tile, bf16 mode */

#define AI	static inline __attribute__((always_inline))

/* Bytes of one packed group: 16 rows by cols rounded up to even, 2 bytes each. */
static size_t
group_bytes(int64_t cols)
{
	return ((size_t)((cols + 1) & ~(int64_t)1) * FG * 2);
}

/* Size of the packed copy of rows x cols weights. */
static size_t
packed_size(int64_t rows, int64_t cols)
{
	return ((size_t)((rows + FG - 1) / FG) * group_bytes(cols));
}

/*
 * Exact-mode layout: per group and pair of columns (2p, 2p + 1), 64 bytes.
 * F16: the 16 halves of column 2p, then the 16 of column 2p + 1 (each
 * converts with one vcvtph2ps).  BF16: 16 lanes of 32 bits, lane i holding
 * row i's column 2p in the low half and 2p + 1 in the high half (a shift
 * and a mask give the two f32 vectors).  Missing rows and the column past
 * an odd end are zero.
 */
static size_t
pack_exact(uint32_t type, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	const int64_t	ng = (rows + FG - 1) / FG, np = (cols + 1) / 2;
	const size_t	gb = group_bytes(cols);
	const __m512i	lanes = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12,
			    11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(FG));
	__m512i		split;
	int64_t		g, p;
	int		i;

	if (dst == NULL)
		return (packed_size(rows, cols));
	/* Word j of a pair block takes word 2j (j < 16) or 2(j - 16) + 1. */
	{
		uint16_t	idx[32];

		for (i = 0; i < 32; i++)
			idx[i] = i < 16 ? 2 * i : 2 * (i - 16) + 1;
		split = _mm512_loadu_si512((const void *)idx);
	}
	for (g = 0; g < ng; g++) {
		uint32_t	*out = (uint32_t *)(dst + g * gb);

		if ((g + 1) * FG > rows)
			memset(out, 0, gb);
		/*
		 * Each 32-bit pair of columns of a row goes to its row's lane of
		 * the pair's block (the BF16 layout); F16 then splits every
		 * block into its even and odd halves.
		 */
		for (i = 0; i < FG && g * FG + i < rows; i++) {
			const uint8_t	*src = w + (size_t)(g * FG + i) * rb;

			for (p = 0; p + 16 <= cols / 2; p += 16)
				_mm512_i32scatter_epi32(out + p * FG + i, lanes,
				    _mm512_loadu_si512((const void *)(src + 4 * p)), 4);
			for (; p < np; p++) {
				uint16_t	e, o = 0;

				memcpy(&e, src + 4 * p, 2);
				if (2 * p + 1 < cols)
					memcpy(&o, src + 4 * p + 2, 2);
				out[p * FG + i] = e | (uint32_t)o << 16;
			}
		}
		if (type == TT_F16)
			for (p = 0; p < np; p++)
				_mm512_store_si512((void *)(out + p * FG),
				    _mm512_permutexvar_epi16(split,
				    _mm512_load_si512((const void *)(out + p * FG))));
	}
	return (packed_size(rows, cols));
}

/* Pack F16 weights for the exact kernel. */
static size_t
f16_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_exact(TT_F16, w, rb, rows, cols, dst));
}

/* Pack BF16 weights for the exact kernel. */
static size_t
bf16_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_exact(TT_BF16, w, rb, rows, cols, dst));
}

/* The f32 weights of columns 2p (*e) and 2p + 1 (*o) of a packed group. */
AI void
load_pair(const uint32_t type, const uint8_t *gp, int64_t p, __m512 *e, __m512 *o)
{
	const uint8_t *q = gp + 64 * p;

	if (type == TT_F16) {
		*e = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)q));
		*o = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(q + 32)));
	} else {
		__m512i v = _mm512_load_si512((const void *)q);

		*e = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
		*o = _mm512_castsi512_ps(_mm512_and_si512(v,
		    _mm512_set1_epi32((int)0xffff0000)));
	}
}

#ifndef XPF
#define XPF	1536	/* bytes ahead to prefetch the activations */
#endif
/*
 * Prefetch what the next pair column p of a tile's group at q needs.  A
 * prompt's tile takes its weights from L2 a few lines ahead and fetches
 * the next groups' (at next) into L2 meanwhile, so the first tile of a
 * group does not wait on memory and the later ones find them there.  A
 * decode step (one token) does one multiply-add per weight, too little
 * to hide the memory latency: it reads its groups FPF_DECODE ahead and
 * nothing else, three groups (three streams, six chains in exact mode) at
 * a time.  On a 2-core Zen 5, in alternated runs, that made F16 decode
 * 1.05-1.32x faster than two groups 8 KB ahead, which were 1.09-1.19x
 * faster than one group with the next one fetched into L2; the integer
 * tiles, with more work per byte, are faster on one stream.
 */
AI void
prefetch_group(const uint8_t *q, const uint8_t *next, int nr)
{
	if (nr == 1)
		_mm_prefetch((const char *)q + FPF_DECODE, _MM_HINT_T0);
	else {
		_mm_prefetch((const char *)q + 1024, _MM_HINT_T0);
		_mm_prefetch((const char *)next, _MM_HINT_T1);
	}
}

/*
 * Tokens per interleaved group of ACT_F32X and ACT_BF16X: ACT_F32X_TOK, or
 * all of a smaller batch, so that a decode step's activations stay one
 * dense row.
 */
AI int
f32x_group(const struct qact *a)
{
	return (a->n_tok < ACT_F32X_TOK ? a->n_tok : ACT_F32X_TOK);
}

/* Where token t's first column pair is in the ACT_F32X activations. */
AI const float *
f32x_token(const struct qact *a, int t)
{
	const int64_t	c2 = (a->cols + 1) & ~(int64_t)1;
	const int	g = f32x_group(a);

	return (a->xf + (size_t)(t / g) * g * c2 + (t % g) * 2);
}

/*
 * One exact-mode tile: mg groups of 16 rows (mr rows kept) by nr tokens.
 * Two groups share each broadcast activation, so a prompt's tile loads
 * one broadcast per two multiply-adds instead of one per multiply-add.
 */
AI void
exact_tile(const uint32_t type, const uint8_t *pw, int64_t cols, int64_t r0,
    const int mg, int mr, const struct qact *a, int t0, const int nr, float *y,
    int64_t ldy)
{
	const size_t	 gb = group_bytes(cols);
	const uint8_t	*gp = pw + (size_t)(r0 / FG) * gb;
	const int64_t	 np = cols / 2;
	const int64_t	 xs = 2 * f32x_group(a);	/* floats per column pair */
	__m512		 acc0[XMAXG][XNR], acc1[XMAXG][XNR], we[XMAXG], wo[XMAXG];
	const float	*x[XNR];
	int64_t		 p;
	int		 i, j;

#pragma GCC unroll 12
	for (j = 0; j < nr; j++) {
		x[j] = f32x_token(a, t0 + j);
#pragma GCC unroll 4
		for (i = 0; i < mg; i++) {
			acc0[i][j] = _mm512_setzero_ps();
			acc1[i][j] = _mm512_setzero_ps();
		}
	}
	for (p = 0; p < np; p++) {
#pragma GCC unroll 4
		for (i = 0; i < mg; i++) {
			prefetch_group(gp + i * gb + 64 * p,
			    gp + (i + mg) * gb + 64 * p, nr);
			load_pair(type, gp + i * gb, p, &we[i], &wo[i]);
		}
		_mm_prefetch((const char *)(x[0] + xs * p) + XPF, _MM_HINT_T0);
		_mm_prefetch((const char *)(x[nr - 1] + xs * p) + XPF, _MM_HINT_T0);
#pragma GCC unroll 12
		for (j = 0; j < nr; j++) {
			const __m512	xe = _mm512_set1_ps(x[j][xs * p]);
			const __m512	xo = _mm512_set1_ps(x[j][xs * p + 1]);

#pragma GCC unroll 4
			for (i = 0; i < mg; i++) {
				acc0[i][j] = _mm512_fmadd_ps(we[i], xe, acc0[i][j]);
				acc1[i][j] = _mm512_fmadd_ps(wo[i], xo, acc1[i][j]);
			}
		}
	}
	if (cols & 1) {
#pragma GCC unroll 4
		for (i = 0; i < mg; i++) {
			load_pair(type, gp + i * gb, np, &we[i], &wo[i]);
#pragma GCC unroll 12
			for (j = 0; j < nr; j++)
				acc0[i][j] = _mm512_fmadd_ps(we[i],
				    _mm512_set1_ps(x[j][xs * np]), acc0[i][j]);
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < mg; i++) {
		const int	 left = mr - i * FG;
		const __mmask16	 m = left >= FG ? 0xffff :
				    (__mmask16)((1U << left) - 1);

#pragma GCC unroll 12
		for (j = 0; j < nr; j++)
			_mm512_mask_storeu_ps(y + (size_t)(t0 + j) * ldy + r0 + i * FG,
			    m, _mm512_add_ps(acc0[i][j], acc1[i][j]));
	}
}

/* exact_tile of one group for every token count up to XNR. */
#define XTILES1(type)							\
	switch (nr) {							\
	case 1: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 1, y, ldy); return; \
	case 2: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 2, y, ldy); return; \
	case 3: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 3, y, ldy); return; \
	case 4: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 4, y, ldy); return; \
	case 5: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 5, y, ldy); return; \
	case 6: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 6, y, ldy); return; \
	case 7: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 7, y, ldy); return; \
	case 8: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 8, y, ldy); return; \
	case 9: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 9, y, ldy); return; \
	case 10: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 10, y, ldy); return; \
	case 11: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 11, y, ldy); return; \
	default: exact_tile(type, pw, cols, r0, 1, mr, a, t0, 12, y, ldy); return; \
	}

/*
 * The exact product of up to 48 rows: a decode step's groups together
 * (XSMR streams, see prefetch_group), two groups together when a prompt's
 * tokens can share the broadcasts (XNR2 at a time), else group by group,
 * whose one-group tiles hold more tokens.
 */
#define XDISPATCH(fn, type)						\
static void								\
fn(const uint8_t *pw, int64_t cols, int64_t r0, int mr,		\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	int	t;							\
									\
	if (mr > XMR * FG) {	/* a small batch's tile of XSMR groups */ \
		if (nr == 1) {						\
			exact_tile(type, pw, cols, r0, XSMR, mr, a, t0, 1, \
			    y, ldy);					\
			return;						\
		}							\
		fn(pw, cols, r0, XMR * FG, a, t0, nr, y, ldy);		\
		fn(pw, cols, r0 + XMR * FG, mr - XMR * FG, a, t0, nr, y, ldy); \
		return;							\
	}								\
	if (mr > FG && (nr == 1 || nr >= XNR2)) {			\
		for (t = t0; t < t0 + nr; t += XNR2) {			\
			const int n = t0 + nr - t;			\
									\
			TILE_DISPATCH_NR(exact_tile, type, 2, pw, cols,	\
			    r0, mr, a, t, n, y, ldy)			\
		}							\
		return;							\
	}								\
	if (mr > FG) {							\
		fn(pw, cols, r0, FG, a, t0, nr, y, ldy);		\
		fn(pw, cols, r0 + FG, mr - FG, a, t0, nr, y, ldy);	\
		return;							\
	}								\
	XTILES1(type)							\
}

XDISPATCH(f16_packed, TT_F16)
XDISPATCH(bf16_packed, TT_BF16)

/*
 * bf16-mode layout: per group and pair of columns, 16 lanes of 32 bits,
 * lane i holding row i's columns 2p (low) and 2p + 1 (high) as bf16, the
 * operand order of vdpbf16ps.  F16 weights are rounded to bf16 (nearest
 * even) as they are packed.
 */
static size_t
pack_bf16dot(uint32_t type, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	const int64_t	ng = (rows + FG - 1) / FG, np = (cols + 1) / 2;
	size_t		gb = group_bytes(cols);
	int64_t		g, p, r, k;
	uint32_t	pairs[FG][16];
	int		i;

	if (dst == NULL)
		return (packed_size(rows, cols));
	for (g = 0; g < ng; g++) {
		uint32_t	*out = (uint32_t *)(dst + g * gb);

		/* 16 rows by 32 columns (16 pairs) at a time. */
		for (p = 0; p < np; p += 16) {
			int64_t		nc = cols - 2 * p < 32 ? cols - 2 * p : 32;
			__mmask32	m = (__mmask32)(nc == 32 ? ~0u :
					    (1u << nc) - 1);

			for (i = 0; i < FG; i++) {
				__m512i		v = _mm512_setzero_si512();

				r = g * FG + i;
				if (r < rows)
					v = _mm512_maskz_loadu_epi16(m,
					    w + (size_t)r * rb + 4 * p);
				/* Nearest even, as f32_to_bf16 does. */
				if (type == TT_F16)
					v = (__m512i)_mm512_cvtne2ps_pbh(
					    _mm512_cvtph_ps(
					    _mm512_extracti64x4_epi64(v, 1)),
					    _mm512_cvtph_ps(
					    _mm512_castsi512_si256(v)));
				_mm512_storeu_si512(pairs[i], v);
			}
			for (k = 0; k < 16 && p + k < np; k++)
				for (i = 0; i < FG; i++)
					out[(p + k) * FG + i] = pairs[i][k];
		}
	}
	return (packed_size(rows, cols));
}

/* Pack F16 weights (rounded to bf16) for the bf16 kernel. */
static size_t
f16_pack_bf16dot(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_bf16dot(TT_F16, w, rb, rows, cols, dst));
}

/* Pack BF16 weights for the bf16 kernel. */
static size_t
bf16_pack_bf16dot(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_bf16dot(TT_BF16, w, rb, rows, cols, dst));
}

/*
 * One bf16-mode tile: mg groups of 16 rows (mr rows kept) by nr tokens of
 * one ACT_BF16X group, whose pairs for a column pair lie side by side.
 */
AI void
bf16dot_tile(const uint8_t *pw, int64_t cols, int64_t r0, const int mg, int mr,
    const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const size_t	 gb = group_bytes(cols);
	const uint8_t	*gp = pw + (size_t)(r0 / FG) * gb;
	const int64_t	 np = (cols + 1) / 2;
	const int	 g = f32x_group(a);
	const uint32_t	*x = (const uint32_t *)a->xb + (size_t)(t0 / g) * g * np +
			     t0 % g;
	__m512		 acc[BSMR][BNR];
	__m512bh	 wv[BSMR];
	int64_t		 p;
	int		 i, j;

#pragma GCC unroll 12
	for (j = 0; j < nr; j++)
#pragma GCC unroll 4
		for (i = 0; i < mg; i++)
			acc[i][j] = _mm512_setzero_ps();
	for (p = 0; p < np; p++, x += g) {
#pragma GCC unroll 4
		for (i = 0; i < mg; i++) {
			prefetch_group(gp + i * gb + 64 * p,
			    gp + (i + mg) * gb + 64 * p, nr);
			wv[i] = (__m512bh)_mm512_load_si512((const void *)(gp + i * gb +
			    64 * p));
		}
#pragma GCC unroll 12
		for (j = 0; j < nr; j++) {
			__m512bh xv = (__m512bh)_mm512_set1_epi32((int)x[j]);
#pragma GCC unroll 4
			for (i = 0; i < mg; i++)
				acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv[i], xv);
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < mg; i++) {
		int		left = mr - i * FG;
		__mmask16	m = left >= FG ? 0xffff : (__mmask16)((1U << left) - 1);

#pragma GCC unroll 12
		for (j = 0; j < nr; j++)
			_mm512_mask_storeu_ps(y + (size_t)(t0 + j) * ldy + r0 + i * FG, m,
			    acc[i][j]);
	}
}

/* The bf16-mode product on packed weights (F16 and BF16 alike). */
static void
bf16dot_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	/* A decode step's tile: BSMR groups, BSMR chains (see smr). */
	if (mr > (BSMR - 1) * FG && nr <= 2) {
		if (nr == 1)
			bf16dot_tile(pw, cols, r0, BSMR, mr, a, t0, 1, y, ldy);
		else
			bf16dot_tile(pw, cols, r0, BSMR, mr, a, t0, 2, y, ldy);
		return;
	}
	if (mr > BMR * FG) {
		bf16dot_packed(pw, cols, r0, BMR * FG, a, t0, nr, y, ldy);
		bf16dot_packed(pw, cols, r0 + BMR * FG, mr - BMR * FG, a, t0,
		    nr, y, ldy);
		return;
	}
	if (mr > FG) {
		TILE_DISPATCH_NR12(bf16dot_tile, 2, BNR)
	} else {
		TILE_DISPATCH_NR12(bf16dot_tile, 1, BNR)
	}
}

/* Round the activations of tokens [t0, t1) to bf16 (ACT_BF16X). */
static void
act_fill_bf16x(struct qact *a, uint32_t type, int t0, int t1)
{
	const int64_t	cols = a->cols, np = (cols + 1) / 2;
	const int	g = f32x_group(a);
	int64_t		p;
	int		t;

	(void)type;
	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		uint32_t	*d = (uint32_t *)a->xb + (size_t)(t / g) * g * np + t % g;

		/* Nearest even, as f32_to_bf16 does; a missing last column is 0. */
		for (p = 0; p < np; p += 16) {
			int64_t		n = cols - 2 * p;
			__mmask16	lo = n >= 32 ? 0xffff :
					    (__mmask16)((1U << (n > 16 ? 16 : n)) - 1);
			__mmask16	hi = n >= 32 ? 0xffff : n <= 16 ? 0 :
					    (__mmask16)((1U << (n - 16)) - 1);
			__m512i		v = (__m512i)_mm512_cvtne2ps_pbh(
					    _mm512_maskz_loadu_ps(hi, x + 2 * p + 16),
					    _mm512_maskz_loadu_ps(lo, x + 2 * p));
			uint32_t	w[16];
			int		k;

			_mm512_storeu_si512(w, v);
			for (k = 0; k < 16 && p + k < np; k++)
				d[(p + k) * g] = w[k];
		}
	}
}

/* Interleave the f32 activations of tokens [t0, t1) (ACT_F32X). */
static void
act_fill_f32x(struct qact *a, uint32_t type, int t0, int t1)
{
	const int64_t	cols = a->cols, np = cols / 2, xs = 2 * f32x_group(a);
	int64_t		p;
	int		t;

	(void)type;
	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		float		*d = (float *)f32x_token(a, t);

		for (p = 0; p < np; p++)
			memcpy(d + xs * p, x + 2 * p, 8);
		if (cols & 1) {
			d[xs * np] = x[cols - 1];
			d[xs * np + 1] = 0;
		}
	}
}

/*
 * Add the repacked path of a F16 or BF16 kernel to k (left as it is for
 * other types).  bf16 selects the bf16 dot products.
 */
void
float_avx512_packed(struct quant_kernel *k, uint32_t type, int bf16)
{
	if (type != TT_F16 && type != TT_BF16)
		return;
	if (bf16) {
		k->pack = type == TT_F16 ? f16_pack_bf16dot : bf16_pack_bf16dot;
		k->pfn = bf16dot_packed;
		k->pmr = BMR * FG;
		/*
		 * One chain of vdpbf16ps an output (6 cycles each on Zen 5)
		 * would bound a decode step on one group; three keep three
		 * chains going in three streams (see prefetch_group).
		 */
		k->smr = BSMR * FG;
		k->pnr = BNR;
		k->playout = ACT_BF16X;
		k->pfill = act_fill_bf16x;
		return;
	}
	k->pack = type == TT_F16 ? f16_pack : bf16_pack;
	k->pfn = type == TT_F16 ? f16_packed : bf16_packed;
	k->pmr = XMR * FG;
	k->smr = XSMR * FG;
	k->pnr = XNR;
	k->playout = ACT_F32X;
	k->pfill = act_fill_f32x;
}

/*
 * Whether all n F16 values at w are bf16 values too (8-bit significand,
 * as in a file converted from a bf16 checkpoint): then rounding them to
 * bf16 loses nothing.  Reads until the first one that is not.
 */
int
float_avx512_f16_is_bf16(const void *w, size_t n)
{
	const uint16_t	*h = w;
	const __m512i	 low = _mm512_set1_epi32(0xffff);
	size_t		 i;

	for (i = 0; i < n; i += 16) {
		__mmask16	m = n - i >= 16 ? 0xffff :
				    (__mmask16)((1u << (n - i)) - 1);
		__m512		v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m,
				    h + i));

		/* Widened to f32, a bf16 value has its low 16 bits clear. */
		if (_mm512_test_epi32_mask(_mm512_castps_si512(v), low) != 0)
			return (0);
	}
	return (1);
}

#define RATE_FMA_OP	0
#define RATE_BF16_OP	1
#define RATE_I16_OP	2
/* Nanoseconds of 12 chains of n vfmadd231ps, vdpbf16ps or vpdpwssd each. */
static double
rate_run(int op, int n)
{
	__m512		 a = _mm512_set1_ps(1e-4f);
	__m512bh	 h = _mm512_cvtne2ps_pbh(a, a);
	__m512i		 w = _mm512_set1_epi32(0x00010001);
	__m512		 c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;
	struct timespec	 t0, t1;
	float		 sink;
	int		 i;

	/* Named accumulators stay in registers, as in the kernels; distinct
	 * values keep the compiler from merging the chains. */
	c0 = _mm512_set1_ps(1), c1 = _mm512_set1_ps(2);
	c2 = _mm512_set1_ps(3), c3 = _mm512_set1_ps(4);
	c4 = _mm512_set1_ps(5), c5 = _mm512_set1_ps(6);
	c6 = _mm512_set1_ps(7), c7 = _mm512_set1_ps(8);
	c8 = _mm512_set1_ps(9), c9 = _mm512_set1_ps(10);
	c10 = _mm512_set1_ps(11), c11 = _mm512_set1_ps(12);
#define RATE_STEP(op) do {						\
	c0 = op(c0); c1 = op(c1); c2 = op(c2); c3 = op(c3);		\
	c4 = op(c4); c5 = op(c5); c6 = op(c6); c7 = op(c7);		\
	c8 = op(c8); c9 = op(c9); c10 = op(c10); c11 = op(c11);		\
} while (0)
#define RATE_DOT(c)	_mm512_dpbf16_ps(c, h, h)
#define RATE_FMA(c)	_mm512_fmadd_ps(a, a, c)
#define RATE_I16(c)	_mm512_castsi512_ps(_mm512_dpwssd_epi32(		\
			    _mm512_castps_si512(c), w, w))
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (op == RATE_BF16_OP)
		for (i = 0; i < n; i++)
			RATE_STEP(RATE_DOT);
	else if (op == RATE_I16_OP)
		for (i = 0; i < n; i++)
			RATE_STEP(RATE_I16);
	else
		for (i = 0; i < n; i++)
			RATE_STEP(RATE_FMA);
	clock_gettime(CLOCK_MONOTONIC, &t1);
#undef RATE_STEP
#undef RATE_DOT
#undef RATE_FMA
#undef RATE_I16
	c0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1),
	    _mm512_add_ps(c2, c3)), _mm512_add_ps(c4, c5));
	c6 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c6, c7),
	    _mm512_add_ps(c8, c9)), _mm512_add_ps(c10, c11));
	sink = _mm512_reduce_add_ps(_mm512_add_ps(c0, c6));
	/* Keeps the loops from being dropped. */
	__asm__ volatile("" : : "x"(sink));
	return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec));
}

/*
 * The issue rate of op over that of f32 multiply-adds on the calling
 * thread's core: the best of fifteen short runs of each, so that a
 * preemption in one does not decide.
 */
static double
op_rate(int op)
{
	double	f = 0, b = 0, t;
	int	r;

	for (r = 0; r < 15; r++) {
		t = rate_run(RATE_FMA_OP, 16384);
		f = r == 0 || t < f ? t : f;
		t = rate_run(op, 16384);
		b = r == 0 || t < b ? t : b;
	}
	return (b > 0 ? f / b : 0);
}

/*
 * vdpbf16ps's issue rate over vfmadd231ps's: about 1 where bf16 dot
 * products double the arithmetic rate, 0.5 or less where they do not pay.
 */
double
float_avx512_bf16_rate(void)
{
	return (op_rate(RATE_BF16_OP));
}

/* vpdpwssd's issue rate over vfmadd231ps's (2 products a lane each). */
double
float_avx512_i16_rate(void)
{
	return (op_rate(RATE_I16_OP));
}
