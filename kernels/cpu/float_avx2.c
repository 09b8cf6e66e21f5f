/*
 * float_avx2.c: AVX2 products of F16 and BF16 weights repacked at load.
 *
 * The rows are interleaved in blocks of 16 (the layout of the AVX-512 exact
 * mode, float_avx512.c) so that one ymm holds the weights of 8 rows at one
 * column: a tile multiplies it by each token's activation at that column
 * (a broadcast) and adds into one accumulator per token, which ends up
 * holding 8 outputs.  A weight vector is converted once (F16 by vcvtph2ps,
 * BF16 by a shift or a mask) and used by every token of the tile, and no
 * horizontal sums are needed.  The activations are f32, interleaved by
 * tokens (ACT_F32X) so that a tile's broadcasts read one stream.
 *
 * Each output is the sum of two chains, the even and the odd columns, each
 * a multiply-add per column in column order from zero, then even plus odd.
 * A tile of one or two tokens (decode) runs both chains of both 8-row
 * groups together: four or eight independent chains hide the multiply-add
 * latency while one token streams the weights.  Larger tiles run the
 * chains one after the other, which halves the accumulators a token needs:
 * 2 groups x 6 tokens fill 12 of the 16 ymm registers, each converted
 * weight vector serves 6 tokens and each broadcast 2 groups.  The
 * operations per output are the same either way, so results do not depend
 * on the batch or the thread split.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "float_avx2.h"
#include "pack_avx2.h"
#include "avx2_tile.h"
#include "quant.h"
#include "tensor_type.h"

#define AI	static inline __attribute__((always_inline))

#define PB	16	/* rows per packed block: two groups of 8 */
#define SNR	6	/* tokens per sub-tile of a split tile */

/*
 * Column pairs per chunk of a split tile: the chunk's weights (8 KB a
 * block) and a 12-token group's activations (12 KB) stay in L1 while the
 * tile makes its four passes over them (two sub-tiles, two chains); over
 * whole rows every pass would reread them from L2, slower than the FMAs.
 */
#define KC	128

/* Bytes of one packed block: 16 rows by cols rounded up to even, 2 bytes each. */
static size_t
block_bytes(int64_t cols)
{
	return ((size_t)((cols + 1) & ~(int64_t)1) * PB * 2);
}

/*
 * Split the 64-byte line of a column pair from 16 lanes (row i's column 2p
 * low, 2p + 1 high) into the 16 halves of column 2p and then the 16 of
 * column 2p + 1, so that each group of 8 converts with one vcvtph2ps.
 */
static void
split_line(uint32_t *line)
{
	const __m256i	 sh = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7,
			    10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11,
			    14, 15);
	__m256i		 lo, hi;

	/* Per 128-bit lane: 4 evens then 4 odds; then evens 0-7, odds 0-7. */
	lo = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_load_si256(
	    (const __m256i *)line), sh), 0xd8);
	hi = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_load_si256(
	    (const __m256i *)(line + 8)), sh), 0xd8);
	_mm256_store_si256((__m256i *)line, _mm256_permute2x128_si256(lo, hi, 0x20));
	_mm256_store_si256((__m256i *)(line + 8), _mm256_permute2x128_si256(lo, hi,
	    0x31));
}

/*
 * Copy rows into blocks of 16: per column pair p, 64 bytes.  BF16: 16
 * lanes of 32 bits, lane i holding row i's column 2p in the low half and
 * 2p + 1 in the high half (a shift and a mask give the two f32 vectors of
 * 8 rows).  F16: the 16 halves of column 2p, then the 16 of 2p + 1.
 * Missing rows and the column past an odd end are zero.
 */
static size_t
pack_rows(uint32_t type, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	const int64_t	nb = (rows + PB - 1) / PB, np = (cols + 1) / 2, nf = cols / 2;
	const size_t	bb = block_bytes(cols);
	int64_t		b, p;
	int		i;

	if (dst == NULL)
		return ((size_t)nb * bb);
	for (b = 0; b < nb; b++) {
		uint32_t	*out = (uint32_t *)(dst + b * bb);

		if ((b + 1) * PB > rows || (cols & 1))
			memset(out, 0, bb);
		/* Row by row: the block (16 x cols x 2 bytes) stays in L2. */
		for (i = 0; i < PB && b * PB + i < rows; i++) {
			const uint8_t	*src = w + (size_t)(b * PB + i) * rb;

			for (p = 0; p < nf; p++)
				memcpy(out + p * PB + i, src + 4 * p, 4);
			if (cols & 1)
				memcpy(out + nf * PB + i, src + 4 * nf, 2);
		}
		if (type == TT_F16)
			for (p = 0; p < np; p++)
				split_line(out + p * PB);
	}
	return ((size_t)nb * bb);
}

/* Pack F16 weights. */
size_t
avx2_f16_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_rows(TT_F16, w, rb, rows, cols, dst));
}

/* Pack BF16 weights. */
size_t
avx2_bf16_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst)
{
	return (pack_rows(TT_BF16, w, rb, rows, cols, dst));
}

/*
 * The f32 weights of rows 8h..8h + 7 at column 2p + k (k 0 or 1) of a
 * block, q pointing at the pair's line.
 */
AI __m256
wload(const uint32_t type, const uint8_t *q, const int h, const int k)
{
	__m256i	v;

	if (type == TT_F16)
		return (_mm256_cvtph_ps(_mm_load_si128((const __m128i *)(q + 32 * k +
		    16 * h))));
	v = _mm256_load_si256((const __m256i *)(q + 32 * h));
	if (k == 0)
		return (_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
	return (_mm256_castsi256_ps(_mm256_and_si256(v,
	    _mm256_set1_epi32((int)0xffff0000))));
}

/*
 * Both chains of a block's 16 rows for nt (1 or 2) tokens at once.  A
 * decode step does one multiply-add per 8 weights, too little work to hide
 * the memory latency: the weights are prefetched AVX2_PF_DECODE bytes
 * ahead, non-temporal (they are used once; on Zen 3 that read a matrix
 * about 15% faster than prefetcht0).  x is the first token's first pair,
 * xs the floats per pair, y the first token's output for the block's
 * first row.
 */
AI void
fused_tile(const uint32_t type, const uint8_t *q, int64_t cols, const float *x,
    int64_t xs, const int nt, float *y, int64_t ldy, int mr)
{
	const int64_t	np = cols / 2;
	__m256		ae[2][2], ao[2][2], we[2], wo[2], xe, xo;
	int64_t		p;
	int		h, j;

#pragma GCC unroll 2
	for (h = 0; h < 2; h++)
#pragma GCC unroll 2
		for (j = 0; j < nt; j++)
			ae[h][j] = ao[h][j] = _mm256_setzero_ps();
	for (p = 0; p < np; p++, q += 64, x += xs) {
		_mm_prefetch((const char *)q + AVX2_PF_DECODE, _MM_HINT_NTA);
#pragma GCC unroll 2
		for (h = 0; h < 2; h++) {
			we[h] = wload(type, q, h, 0);
			wo[h] = wload(type, q, h, 1);
		}
#pragma GCC unroll 2
		for (j = 0; j < nt; j++) {
			xe = _mm256_broadcast_ss(x + 2 * j);
			xo = _mm256_broadcast_ss(x + 2 * j + 1);
#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				ae[h][j] = _mm256_fmadd_ps(we[h], xe, ae[h][j]);
				ao[h][j] = _mm256_fmadd_ps(wo[h], xo, ao[h][j]);
			}
		}
	}
	if (cols & 1) {
#pragma GCC unroll 2
		for (h = 0; h < 2; h++) {
			we[h] = wload(type, q, h, 0);
#pragma GCC unroll 2
			for (j = 0; j < nt; j++)
				ae[h][j] = _mm256_fmadd_ps(we[h], _mm256_broadcast_ss(x +
				    2 * j), ae[h][j]);
		}
	}
#pragma GCC unroll 2
	for (j = 0; j < nt; j++)
#pragma GCC unroll 2
		for (h = 0; h < 2; h++)
			avx2_store_rows(y + j * ldy + 8 * h, _mm256_add_ps(ae[h][j], ao[h][j]),
			    mr - 8 * h);
}

/*
 * Continue one chain (k 0: even columns, 1: odd) of a block's 16 rows
 * over np pairs for nt tokens: the accumulators come from st and go back
 * there.  Every `every` pairs one line from pf on is prefetched, so that
 * the passes over a chunk fetch the next chunk's weights between them.
 */
AI void
chain(const uint32_t type, const uint8_t *q, int64_t np, const float *x, int64_t xs,
    const int nt, const int k, const uint8_t *pf, const int every, float st[2][SNR][8])
{
	__m256		acc[2][SNR], w0, w1, xv;
	int64_t		p;
	int		j;

#pragma GCC unroll 6
	for (j = 0; j < nt; j++) {
		acc[0][j] = _mm256_load_ps(st[0][j]);
		acc[1][j] = _mm256_load_ps(st[1][j]);
	}
	x += k;
	for (p = 0; p < np; p++, q += 64, x += xs) {
		if (p % every == 0)
			_mm_prefetch((const char *)pf + 64 * (p / every), _MM_HINT_T0);
		w0 = wload(type, q, 0, k);
		w1 = wload(type, q, 1, k);
#pragma GCC unroll 6
		for (j = 0; j < nt; j++) {
			xv = _mm256_broadcast_ss(x + 2 * j);
			acc[0][j] = _mm256_fmadd_ps(w0, xv, acc[0][j]);
			acc[1][j] = _mm256_fmadd_ps(w1, xv, acc[1][j]);
		}
	}
#pragma GCC unroll 6
	for (j = 0; j < nt; j++) {
		_mm256_store_ps(st[0][j], acc[0][j]);
		_mm256_store_ps(st[1][j], acc[1][j]);
	}
}

/*
 * Rows [0, mr) of the blocks from q (up to FLOAT2_MR rows) for n tokens
 * (3 to 12), in sub-tiles of n1 and n - n1 tokens: chunk by chunk, each
 * block's even chains, then its odd ones, for each sub-tile.  st holds the
 * chains, from zero, between passes.  A call of several blocks reads each
 * chunk of activations from L1 for all of them.  The passes prefetch what
 * comes next: the next block's chunk, or after the last block the first
 * one's next chunk.
 */
AI void
split_tile(const uint32_t type, const uint8_t *q, int64_t cols, const float *x,
    int64_t xs, const int n, float *y, int64_t ldy, int mr)
{
	const int	n1 = n <= SNR ? n : (n + 1) / 2, n2 = n - n1;
	const int	nb = (mr + PB - 1) / PB, every = n2 > 0 ? 4 : 2;
	const int64_t	ne = (cols + 1) / 2, no = cols / 2, bb = block_bytes(cols);
	float		st[FLOAT2_MR / PB][2][2][2][SNR][8] __attribute__((aligned(32)));
	const uint8_t	*qb, *pf;
	const float	*xc;
	int64_t		c, pe, po;
	int		b, h, j, s;

	memset(st, 0, (size_t)nb * sizeof st[0]);
	for (c = 0; c < ne; c += KC) {
		pe = ne - c < KC ? ne - c : KC;
		po = no - c < KC ? no - c : KC;
		xc = x + xs * c;
		for (b = 0; b < nb; b++) {
			qb = q + b * bb + 64 * c;
			pf = b + 1 < nb ? qb + bb : q + 64 * (c + KC);
			chain(type, qb, pe, xc, xs, n1, 0, pf, every, st[b][0][0]);
			pf += 64 * KC / every;
			chain(type, qb, po, xc, xs, n1, 1, pf, every, st[b][0][1]);
			if (n2 > 0) {
				pf += 64 * KC / every;
				chain(type, qb, pe, xc + 2 * n1, xs, n2, 0, pf, every,
				    st[b][1][0]);
				pf += 64 * KC / every;
				chain(type, qb, po, xc + 2 * n1, xs, n2, 1, pf, every,
				    st[b][1][1]);
			}
		}
	}
	for (b = 0; b < nb; b++)
#pragma GCC unroll 12
		for (j = 0; j < n; j++) {
			s = j >= n1;
#pragma GCC unroll 2
			for (h = 0; h < 2; h++)
				avx2_store_rows(y + j * ldy + PB * b + 8 * h, _mm256_add_ps(
				    _mm256_load_ps(st[b][s][0][h][j - s * n1]),
				    _mm256_load_ps(st[b][s][1][h][j - s * n1])),
				    mr - PB * b - 8 * h);
		}
}

/*
 * Tokens [t0, t0 + nr) of rows [r0, r0 + mr): runs of tokens within one
 * interleaved group of ACT_F32X (all of a call's, as matmul.c walks them).
 */
AI void
packed(const uint32_t type, const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	const int	 g = a->n_tok < ACT_F32X_TOK ? a->n_tok : ACT_F32X_TOK;
	const int64_t	 c2 = (cols + 1) & ~(int64_t)1, xs = 2 * g;
	const size_t	 bb = block_bytes(cols);
	const uint8_t	*q = pw + (size_t)(r0 / PB) * bb;
	const float	*x;
	float		*yt;
	int		 n, b;

	while (nr > 0) {
		n = nr;
		if (t0 % g + n > g)
			n = g - t0 % g;
		x = a->xf + (size_t)(t0 / g) * g * c2 + 2 * (t0 % g);
		yt = y + (size_t)t0 * ldy + r0;
		t0 += n;
		nr -= n;
		switch (n) {
		case 1:
		case 2:
			for (b = 0; b * PB < mr; b++) {
				if (n == 1)
					fused_tile(type, q + b * bb, cols, x, xs, 1,
					    yt + b * PB, ldy, mr - b * PB);
				else
					fused_tile(type, q + b * bb, cols, x, xs, 2,
					    yt + b * PB, ldy, mr - b * PB);
			}
			break;
		case 3: split_tile(type, q, cols, x, xs, 3, yt, ldy, mr); break;
		case 4: split_tile(type, q, cols, x, xs, 4, yt, ldy, mr); break;
		case 5: split_tile(type, q, cols, x, xs, 5, yt, ldy, mr); break;
		case 6: split_tile(type, q, cols, x, xs, 6, yt, ldy, mr); break;
		case 7: split_tile(type, q, cols, x, xs, 7, yt, ldy, mr); break;
		case 8: split_tile(type, q, cols, x, xs, 8, yt, ldy, mr); break;
		case 9: split_tile(type, q, cols, x, xs, 9, yt, ldy, mr); break;
		case 10: split_tile(type, q, cols, x, xs, 10, yt, ldy, mr); break;
		case 11: split_tile(type, q, cols, x, xs, 11, yt, ldy, mr); break;
		default: split_tile(type, q, cols, x, xs, 12, yt, ldy, mr); break;
		}
	}
}

/* The product on packed F16 weights. */
void
avx2_f16_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	packed(TT_F16, pw, cols, r0, mr, a, t0, nr, y, ldy);
}

/* The product on packed BF16 weights. */
void
avx2_bf16_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	packed(TT_BF16, pw, cols, r0, mr, a, t0, nr, y, ldy);
}

/*
 * Interleave the f32 activations of tokens [t0, t1): token t, column c at
 * (t / G) * G * C2 + (c / 2) * 2G + (t % G) * 2 + c % 2 (quant.h), the
 * column past an odd end zero.  Four pairs of a token at a time, for all
 * the tokens of a group before the next four: the stores then fill a few
 * lines at once rather than one pair of every line of a row.
 */
void
avx2_act_fill_f32x(struct qact *a, uint32_t type, int t0, int t1)
{
	const int64_t	cols = a->cols, np = cols / 2, c2 = (cols + 1) & ~(int64_t)1;
	const int	g = a->n_tok < ACT_F32X_TOK ? a->n_tok : ACT_F32X_TOK;
	const int64_t	xs = 2 * g;
	int64_t		p, u;
	int		t, ta, tb;
	__m256		v;
	__m128		lo, hi;

	(void)type;
	if (g == 1) {
		/* One token a group: the rows as they are, padded to even. */
		for (t = t0; t < t1; t++) {
			memcpy(a->xf + (size_t)t * c2, a->x + (size_t)t * cols,
			    (size_t)cols * 4);
			if (cols & 1)
				a->xf[(size_t)t * c2 + cols] = 0;
		}
		return;
	}
	for (ta = t0; ta < t1; ta = tb) {
		/* The tokens of [t0, t1) in ta's group. */
		tb = (ta / g + 1) * g < t1 ? (ta / g + 1) * g : t1;
		for (p = 0; p + 4 <= np; p += 4)
			for (t = ta; t < tb; t++) {
				float *d = a->xf + (size_t)(t / g) * g * c2 + 2 * (t % g) +
				    xs * p;

				v = _mm256_loadu_ps(a->x + (size_t)t * cols + 2 * p);
				lo = _mm256_castps256_ps128(v);
				hi = _mm256_extractf128_ps(v, 1);
				_mm_storel_pi((__m64 *)d, lo);
				_mm_storeh_pi((__m64 *)(d + xs), lo);
				_mm_storel_pi((__m64 *)(d + 2 * xs), hi);
				_mm_storeh_pi((__m64 *)(d + 3 * xs), hi);
			}
		for (t = ta; t < tb; t++) {
			const float	*x = a->x + (size_t)t * cols;
			float		*d = a->xf + (size_t)(t / g) * g * c2 + 2 * (t % g);

			for (u = np & ~(int64_t)3; u < np; u++)
				memcpy(d + xs * u, x + 2 * u, 8);
			if (cols & 1) {
				d[xs * np] = x[cols - 1];
				d[xs * np + 1] = 0;
			}
		}
	}
}
