/*
 * amx.c: AMX int8 tile kernels for many tokens on repacked weights.
 *
 * Built with AMX and AVX-512 enabled; only reached after
 * quant_amx_supported() said yes.  They read the weights repacked at load
 * by the AVX-512 variant (pack_rows in quant_avx512.c: 16-row groups, per
 * 32-element block the rows' scales, mins, fifth bits, then the codes as
 * 64-byte vectors whose 32-bit lane i holds four codes of row i) and must
 * give bit for bit what that variant's packed kernel gives, because a
 * batch is split between the two (decode and the tail of a batch stay on
 * AVX-512).
 *
 * Both sum a block's products exactly in 32-bit integers, so the tiles
 * only replace that part: per block, tdpbssd multiplies a tile of 16 tokens
 * x 32 activation codes with one of 32 x 16 rows of signed weights (the
 * codes minus their offset, so no bias term is needed), and the 16 x 16
 * sums go through the same float steps in the same order as in the
 * AVX-512 kernel: acc = fma(f32(sum), row scales * token scale, acc), then
 * acc = fma(row mins, token scale * sum(q), acc) for the types with mins,
 * block after block from zero.
 *
 * The B tile wants, per row of the tile, four consecutive K values of each
 * of its 16 columns: exactly the lanes of a packed code vector, so the
 * weights need no second copy; they are only widened to signed bytes, a
 * pass of CHUNK blocks at a time into a buffer that every token tile of
 * the call then reuses.  Tiles of 32 tokens x 32 rows (two A, two B, four
 * C tiles) let each tile load feed two products: loads and stores of
 * tiles, not the products, are what the tile unit is slowest at.
 */
#include "config.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "amx.h"
#include "quant.h"
#include "tensor_type.h"

#define AI	static inline __attribute__((always_inline))

enum akind { A_Q4_0, A_Q8_0, A_Q4_1, A_Q5_0, A_Q5_1, A_IQ4_NL };

/* The packed block of quant_avx512.c (pack_rows), which must match. */
#define PG		16
#define P_MINS(k)	((k) == A_Q4_1 || (k) == A_Q5_1)
#define P_HBIT(k)	((k) == A_Q5_0 || (k) == A_Q5_1)
#define POFF_M		32
#define POFF_H(k)	(32 + (P_MINS(k) ? 32 : 0))
#define POFF_Q(k)	(POFF_H(k) + (P_HBIT(k) ? 64 : 0))
#define PBLK(k)		(POFF_Q(k) + ((k) == A_Q8_0 ? 512 : 256))

/*
 * Blocks widened per pass (32 KB of B tiles per group, on the stack; with
 * the sums about 84 KB of stack in all): the running sums of a token tile
 * go through y once per pass.
 */
#define CHUNK		64
/* Blocks whose products are issued ahead of their scaling. */
#define SUB		2

struct tilecfg {
	uint8_t		palette;
	uint8_t		start_row;
	uint8_t		reserved[14];
	uint16_t	colsb[16];
	uint8_t		rows[16];
} __attribute__((aligned(64)));

/*
 * The tile shapes of a block product: A 16 tokens x 32 codes (tiles 0, 1),
 * B 32 K values x 16 rows, four per row (2, 3), C 16 x 16 sums (4 to 7).
 * A constant in memory: gcc does not see ldtilecfg read its operand and
 * drops the stores of a configuration built on the stack.
 */
static const struct tilecfg block_cfg = {
	.palette = 1,
	.colsb = { 32, 32, 64, 64, 64, 64, 64, 64 },
	.rows = { 16, 16, 8, 8, 16, 16, 16, 16 },
};

/*
 * Widen blocks [b0, b0 + n) of a 16-row group to signed weights, 512
 * bytes per block: row k of the B tile (k = 0..7) holds elements 4k..4k+3
 * of each of the 16 rows.
 */
AI void
widen(const enum akind kind, const uint8_t *gp, int64_t b0, int n, int8_t *bt)
{
	const __m512i	lo4 = _mm512_set1_epi8(0x0f);
	__m512i		tbl = _mm512_broadcast_i32x4(_mm_loadu_si128(
			    (const __m128i *)quant_iq4nl_values));
	int		i, k;

	for (i = 0; i < n; i++) {
		const uint8_t	*p = gp + (size_t)(b0 + i) * PBLK(kind);
		int8_t		*o = bt + 512 * i;

		if (kind == A_Q8_0) {
			for (k = 0; k < 8; k++)
				_mm512_store_si512(o + 64 * k, _mm512_xor_si512(
				    _mm512_loadu_si512(p + POFF_Q(kind) + 64 * k),
				    _mm512_set1_epi8((char)0x80)));
			continue;
		}
		for (k = 0; k < 4; k++) {
			__m512i	v = _mm512_loadu_si512(p + POFF_Q(kind) + 64 * k);
			__m512i	l = _mm512_and_si512(v, lo4);
			__m512i	h = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);

			if (kind == A_IQ4_NL) {
				l = _mm512_shuffle_epi8(tbl, l);
				h = _mm512_shuffle_epi8(tbl, h);
			}
			if (P_HBIT(kind)) {
				uint64_t ml, mh;

				memcpy(&ml, p + POFF_H(kind) + 16 * k, 8);
				memcpy(&mh, p + POFF_H(kind) + 16 * k + 8, 8);
				l = _mm512_or_si512(l, _mm512_maskz_mov_epi8(ml,
				    _mm512_set1_epi8(0x10)));
				h = _mm512_or_si512(h, _mm512_maskz_mov_epi8(mh,
				    _mm512_set1_epi8(0x10)));
			}
			if (kind == A_Q4_0 || kind == A_Q5_0) {
				__m512i off = _mm512_set1_epi8(kind == A_Q4_0 ? 8 : 16);

				l = _mm512_sub_epi8(l, off);
				h = _mm512_sub_epi8(h, off);
			}
			_mm512_store_si512(o + 64 * k, l);
			_mm512_store_si512(o + 64 * (4 + k), h);
		}
	}
}

/*
 * The products of blocks [i0, i1) of the pass for nt token tiles by ng
 * row groups, into cb[block][2 * ti + gi].  Two A, two B and four C tiles:
 * each loaded tile feeds two products, which halves the tile loads, the
 * part of the work the tile unit is slowest at.
 */
AI void
block_sums(const int nt, const int ng, const int8_t *xq, int64_t stride,
    const int8_t *bt0, const int8_t *bt1, int64_t b0, int i0, int i1,
    int32_t (*cb)[4][256])
{
	int	i;

	for (i = i0; i < i1; i++) {
		const int8_t	*x = xq + 32 * (b0 + i);
		int32_t		(*c)[256] = cb[i - i0];

		_tile_zero(4);
		if (ng > 1)
			_tile_zero(5);
		if (nt > 1) {
			_tile_zero(6);
			if (ng > 1)
				_tile_zero(7);
		}
		_tile_loadd(0, x, stride);
		_tile_loadd(2, bt0 + 512 * i, 64);
		_tile_dpbssd(4, 0, 2);
		if (ng > 1) {
			_tile_loadd(3, bt1 + 512 * i, 64);
			_tile_dpbssd(5, 0, 3);
		}
		if (nt > 1) {
			_tile_loadd(1, x + 16 * stride, stride);
			_tile_dpbssd(6, 1, 2);
			if (ng > 1)
				_tile_dpbssd(7, 1, 3);
		}
		_tile_stored(4, c[0], 64);
		if (ng > 1)
			_tile_stored(5, c[1], 64);
		if (nt > 1) {
			_tile_stored(6, c[2], 64);
			if (ng > 1)
				_tile_stored(7, c[3], 64);
		}
	}
}

/*
 * Scale and add the sums of blocks [i0, i1) of the pass (product q of each)
 * into the running sums accb of 16 tokens from tt by one row group: one
 * chain of operations per output, in block order.
 */
AI void
block_scale(const enum akind kind, const uint8_t *gp, const struct qact *a, int tt,
    int64_t b0, int i0, int i1, int32_t (*cb)[4][256], int q, float *accb)
{
	const int64_t	 bstride = a->stride / 32;
	const float	*xd = a->d + (size_t)tt * bstride;
	const float	*xs = a->s + (size_t)tt * bstride;
	__m512		 acc[16];
	int		 i, j;

#pragma GCC unroll 16
	for (j = 0; j < 16; j++)
		acc[j] = _mm512_load_ps(accb + 16 * j);
	for (i = i0; i < i1; i++) {
		const int64_t	 b = b0 + i;
		const uint8_t	*p = gp + (size_t)b * PBLK(kind);
		const int32_t	*c = cb[i - i0][q];
		__m512		 ws, wm;

		ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
		wm = P_MINS(kind) ? _mm512_cvtph_ps(_mm256_loadu_si256(
		    (const __m256i *)(p + POFF_M))) : _mm512_setzero_ps();
#pragma GCC unroll 16
		for (j = 0; j < 16; j++) {
			acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(
			    _mm512_load_si512(c + 16 * j)), _mm512_mul_ps(ws,
			    _mm512_set1_ps(xd[j * bstride + b])), acc[j]);
			if (P_MINS(kind))
				acc[j] = _mm512_fmadd_ps(wm, _mm512_set1_ps(
				    xs[j * bstride + b]), acc[j]);
		}
	}
#pragma GCC unroll 16
	for (j = 0; j < 16; j++)
		_mm512_store_ps(accb + 16 * j, acc[j]);
}

/*
 * One pass (cn blocks from b0) over nt 16-token tiles from tt and ng row
 * groups: the products of the next SUB blocks are issued before the
 * current ones are scaled, so that no vector load of sums directly follows
 * the tile store that writes them.  Between passes the running sums wait
 * in y (exactly, as floats).
 */
AI void
pass_tile(const enum akind kind, const int nt, const int ng, const uint8_t *gp0,
    const uint8_t *gp1, const int8_t *bt0, const int8_t *bt1, __mmask16 m0,
    __mmask16 m1, const struct qact *a, int tt, int64_t b0, int cn, float *y,
    int64_t ldy, int64_t r0)
{
	const int64_t	 stride = a->stride;
	const int8_t	*xq = a->q + (size_t)tt * stride;
	int32_t		 cb[2][SUB][4][256] __attribute__((aligned(64)));
	float		 accb[4][256] __attribute__((aligned(64)));
	int		 i0, i1, ti, gi, j;

	for (ti = 0; ti < nt; ti++)
		for (gi = 0; gi < ng; gi++)
			for (j = 0; j < 16; j++)
				_mm512_store_ps(accb[2 * ti + gi] + 16 * j, b0 == 0 ?
				    _mm512_setzero_ps() : _mm512_maskz_loadu_ps(gi ? m1 : m0,
				    y + (size_t)(tt + 16 * ti + j) * ldy + r0 + PG * gi));
	block_sums(nt, ng, xq, stride, bt0, bt1, b0, 0, cn < SUB ? cn : SUB, cb[0]);
	for (i0 = 0; i0 < cn; i0 = i1) {
		int32_t	(*c)[4][256] = cb[(i0 / SUB) & 1];

		i1 = i0 + SUB < cn ? i0 + SUB : cn;
		if (i1 < cn)
			block_sums(nt, ng, xq, stride, bt0, bt1, b0, i1,
			    i1 + SUB < cn ? i1 + SUB : cn, cb[(i1 / SUB) & 1]);
		for (ti = 0; ti < nt; ti++)
			for (gi = 0; gi < ng; gi++)
				block_scale(kind, gi ? gp1 : gp0, a, tt + 16 * ti, b0, i0,
				    i1, c, 2 * ti + gi, accb[2 * ti + gi]);
	}
	for (ti = 0; ti < nt; ti++)
		for (gi = 0; gi < ng; gi++)
			for (j = 0; j < 16; j++)
				_mm512_mask_storeu_ps(y + (size_t)(tt + 16 * ti + j) * ldy +
				    r0 + PG * gi, gi ? m1 : m0,
				    _mm512_load_ps(accb[2 * ti + gi] + 16 * j));
}

/* Rows of one or two 16-row groups from r0 (n valid) by nr tokens from t0. */
AI void
group_pair(const enum akind kind, const int ng, const uint8_t *gp0, int64_t nb,
    int n, const struct qact *a, int t0, int nr, float *y, int64_t ldy, int64_t r0)
{
	const uint8_t	*gp1 = gp0 + (size_t)nb * PBLK(kind);
	const __mmask16	 m0 = n >= PG ? 0xffff : (__mmask16)((1U << n) - 1);
	const __mmask16	 m1 = n >= 2 * PG ? 0xffff : n <= PG ? 0 :
			    (__mmask16)((1U << (n - PG)) - 1);
	int8_t		 bt[2][CHUNK * 512] __attribute__((aligned(64)));
	int64_t		 b0;
	int		 tt, cn;

	for (b0 = 0; b0 < nb; b0 += CHUNK) {
		cn = nb - b0 < CHUNK ? (int)(nb - b0) : CHUNK;
		widen(kind, gp0, b0, cn, bt[0]);
		if (ng > 1)
			widen(kind, gp1, b0, cn, bt[1]);
		for (tt = t0; tt + 32 <= t0 + nr; tt += 32)
			pass_tile(kind, 2, ng, gp0, gp1, bt[0], bt[1], m0, m1, a, tt,
			    b0, cn, y, ldy, r0);
		if (tt < t0 + nr)
			pass_tile(kind, 1, ng, gp0, gp1, bt[0], bt[1], m0, m1, a, tt,
			    b0, cn, y, ldy, r0);
	}
}

/* Rows [r0, r0 + mr) (r0 a multiple of 16) by nr tokens, a multiple of 16. */
AI void
amx_packed(const enum akind kind, const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	const int64_t	nb = cols / 32;
	const size_t	gstride = (size_t)nb * PBLK(kind);
	int		g;

	_tile_loadconfig(&block_cfg);
	for (g = 0; PG * g < mr; g += 2) {
		const uint8_t *gp = pw + (size_t)(r0 / PG + g) * gstride;

		if (mr - PG * g > PG)
			group_pair(kind, 2, gp, nb, mr - PG * g, a, t0, nr, y, ldy,
			    r0 + PG * g);
		else
			group_pair(kind, 1, gp, nb, mr - PG * g, a, t0, nr, y, ldy,
			    r0 + PG * g);
	}
	/* Hand the tile state back so context switches need not save it. */
	_tile_release();
}

#define ADISPATCH(fn, kind)						\
static void								\
fn(const uint8_t *pw, int64_t cols, int64_t r0, int mr,			\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	amx_packed(kind, pw, cols, r0, mr, a, t0, nr, y, ldy);		\
}

ADISPATCH(amx_q4_0, A_Q4_0)
ADISPATCH(amx_q8_0, A_Q8_0)
ADISPATCH(amx_q4_1, A_Q4_1)
ADISPATCH(amx_q5_0, A_Q5_0)
ADISPATCH(amx_q5_1, A_Q5_1)
ADISPATCH(amx_iq4_nl, A_IQ4_NL)

/* The AMX kernel of a type on the AVX-512 packed layout, or NULL. */
quant_packed_fn
amx_packed_kernel(uint32_t type)
{
	switch (type) {
	case TT_Q4_0: return (amx_q4_0);
	case TT_Q8_0: return (amx_q8_0);
	case TT_Q4_1: return (amx_q4_1);
	case TT_Q5_0: return (amx_q5_0);
	case TT_Q5_1: return (amx_q5_1);
	case TT_IQ4_NL: return (amx_iq4_nl);
	default: return (NULL);
	}
}

/*
 * A 16 x 64 by 64 x 16 product on the tiles against plain C: guards
 * against a tile unit that is present but does not compute (a hypervisor
 * that exposes the bits without the state, say).
 */
int
amx_selftest(void)
{
	int8_t		 A[16][64] __attribute__((aligned(64)));
	int8_t		 B[16][64] __attribute__((aligned(64)));
	int32_t		 C[16][16] __attribute__((aligned(64)));
	static const struct tilecfg cfg = {
		.palette = 1,
		.colsb = { 64, 64, 64 },
		.rows = { 16, 16, 16 },
	};
	int		 i, j, k, ok = 1;

	for (i = 0; i < 16; i++)
		for (k = 0; k < 64; k++) {
			A[i][k] = (int8_t)((i * 37 + k * 11) % 255 - 127);
			B[i][k] = (int8_t)((i * 53 + k * 7) % 251 - 125);
		}
	_tile_loadconfig(&cfg);
	_tile_zero(2);
	_tile_loadd(0, A, 64);
	_tile_loadd(1, B, 64);
	_tile_dpbssd(2, 0, 1);
	_tile_stored(2, C, 64);
	_tile_release();
	/* C[i][j] = sum over k of A[i][k] * B[k / 4][4 j + k % 4]. */
	for (i = 0; i < 16; i++)
		for (j = 0; j < 16; j++) {
			int32_t s = 0;

			for (k = 0; k < 64; k++)
				s += A[i][k] * B[k / 4][4 * j + k % 4];
			ok &= s == C[i][j];
		}
	return (ok);
}
