/*
 * pack32_avx2.c: AVX2 kernels on Q4_1, Q5_0, Q5_1 and IQ4_NL weights
 * repacked at load.
 *
 * The layout of pack_avx2.c's Q4_0, in groups of 8 rows: per 32-element
 * block, the rows' scales d (halves, 16 bytes), their mins m (Q4_1, Q5_1,
 * 16 bytes), then the codes as 32-byte vectors whose 32-bit lane i holds
 * four codes of row i.  vpmaddubsw against four activation codes
 * broadcast to every lane then works on 8 rows at once, the products of a
 * block add up in 16 bits, and its float work is done once for 8 rows:
 * acc = fma(f32(sum u * q), d * token scale, acc), then for the mins acc
 * = fma(m, token scale * sum q, acc), for Q5_0's code offset 16 the same
 * with -16 d.  The copy is exactly the size of the rows.
 *
 * Q4_1 and IQ4_NL keep the nibble vectors of Q4_0: vector k (0..3) is
 * bytes 4k..4k+3 of each row's codes, low nibbles elements 4k.., high
 * nibbles elements 16+4k...  Q4_1's sums stay within 16 bits (8 x 2 x 15
 * x 127).  IQ4_NL's code book values (|v| <= 127) go as |v| with the sign
 * moved onto the activations (vpsignb, as Q8_0), or for a single token the
 * activations as |q| with the sign moved onto v (iq4_product), each
 * vector's pairs widened with vpmaddwd.
 *
 * Q5_0 and Q5_1 store their 5-bit codes c (element e of a row) in five
 * vectors instead of nibbles and separate fifth bits, so that no vector
 * needs the 3-4 op bit-to-byte expansion: byte 4i + l of vector j (0..3)
 * holds c(4j + l) in bits 0-4 and bits 0-2 of c(16 + 4j + l) in bits 5-7;
 * byte 4i + l of vector 4 holds bits 3-4 of c(16 + 4j + l) at bits 2j,
 * 2j + 1 for every j.  Elements 4j.. are then one vpand, elements 16 +
 * 4j.. two shifts, two vpands and a vpor.  Their products (up to 2 x 31
 * x 127 a pair) fit 16 bits for four vectors only, so the first and last
 * 16 elements of a block add up apart.
 *
 * Built with AVX2 enabled; only reached after quant_isa_supported()
 * checked the CPU.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "pack32_avx2.h"
#include "pack_avx2.h"
#include "avx2_tile.h"
#include "quant.h"

#define AI	static inline __attribute__((always_inline))

/* Rows of a group: one per lane of a vector of eight. */
#define PG	8
/* Tokens of a tile, at most. */
#define P32_NR	PACK32_IQ4_NR

enum p32 { P_Q4_1, P_Q5_0, P_Q5_1, P_IQ4_NL };

#define HAS_MIN(k)	((k) == P_Q4_1 || (k) == P_Q5_1)
#define IS_Q5(k)	((k) == P_Q5_0 || (k) == P_Q5_1)
/* Bytes of a row's block in the file. */
#define SRC_BB(k)	((k) == P_Q4_1 ? 20 : (k) == P_Q5_0 ? 22 : (k) == P_Q5_1 ? 24 : 18)
/*
 * A packed block of a group: the rows' d (halves) at 0, their m at 16
 * (Q4_1, Q5_1), then the code vectors from OFF_Q.
 */
#define OFF_M		16
#define OFF_Q(k)	(16 + (HAS_MIN(k) ? 16 : 0))
#define BLK(k)		(OFF_Q(k) + (IS_Q5(k) ? 160 : 128))

/* Bit k (0..3) of the 4-bit x to bit 0 of byte k. */
static uint32_t
spread4(uint32_t x)
{
	return ((x * 0x00204081U) & 0x01010101U);
}

/* Copy rows into the packed layout (or only size it when dst is NULL). */
static size_t
pack32(const enum p32 kind, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	const int64_t	nb = cols / 32, ng = (rows + PG - 1) / PG;
	const size_t	blk = BLK(kind);
	int64_t		g, b, r;
	uint32_t	qh, lo, hi, v5, v4;
	int		i, j;

	if (dst == NULL)
		return ((size_t)(ng * nb) * blk);
	for (g = 0; g < ng; g++) {
		for (b = 0; b < nb; b++) {
			uint8_t *o = dst + (size_t)(g * nb + b) * blk;

			memset(o, 0, blk);
			for (i = 0; i < PG; i++) {
				const uint8_t	*p, *qs;

				if ((r = g * PG + i) >= rows)
					break;
				p = w + (size_t)r * rb + (size_t)b * SRC_BB(kind);
				qs = p + SRC_BB(kind) - 16;
				memcpy(o + 2 * i, p, 2);
				if (HAS_MIN(kind))
					memcpy(o + OFF_M + 2 * i, p + 2, 2);
				if (!IS_Q5(kind)) {
					for (j = 0; j < 4; j++)
						memcpy(o + OFF_Q(kind) + 32 * j + 4 * i, qs + 4 * j,
						    4);
					continue;
				}
				/* Four codes, one per byte, at a time. */
				memcpy(&qh, qs - 4, 4);
				for (v4 = 0, j = 0; j < 4; j++) {
					memcpy(&lo, qs + 4 * j, 4);
					hi = (lo >> 4 & 0x0f0f0f0f) |
					    spread4(qh >> (16 + 4 * j) & 15) << 4;
					lo = (lo & 0x0f0f0f0f) | spread4(qh >> 4 * j & 15) << 4;
					v5 = lo | (hi & 0x07070707) << 5;
					v4 |= (hi >> 3 & 0x03030303) << (2 * j);
					memcpy(o + OFF_Q(kind) + 32 * j + 4 * i, &v5, 4);
				}
				memcpy(o + OFF_Q(kind) + 128 + 4 * i, &v4, 4);
			}
		}
	}
	return ((size_t)(ng * nb) * blk);
}

/* Four activation codes broadcast to every lane. */
AI __m256i
bcast4(const int8_t *p)
{
	int32_t	v;

	memcpy(&v, p, 4);
	return (_mm256_set1_epi32(v));
}

/*
 * Code vectors k and 4 + k (*lo, *hi) of a packed block's codes q; for
 * IQ4_NL the signed code book values.  h is the block's fifth-bit vector
 * (Q5_0, Q5_1).
 */
AI void
unpack_pair(const enum p32 kind, const uint8_t *q, __m256i h, const int k,
    __m256i *lo, __m256i *hi)
{
	const __m256i	v = _mm256_loadu_si256((const __m256i *)(q + 32 * k));
	__m256i		t;

	if (IS_Q5(kind)) {
		*lo = _mm256_and_si256(v, _mm256_set1_epi8(0x1f));
		t = k == 0 ? _mm256_slli_epi16(h, 3) : k == 1 ? _mm256_slli_epi16(h, 1) :
		    k == 2 ? _mm256_srli_epi16(h, 1) : _mm256_srli_epi16(h, 3);
		*hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 5),
		    _mm256_set1_epi8(0x07)), _mm256_and_si256(t, _mm256_set1_epi8(0x18)));
		return;
	}
	*lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
	*hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
	if (kind == P_IQ4_NL) {
		const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128(
		    (const __m128i *)quant_iq4nl_values));

		*lo = _mm256_shuffle_epi8(book, *lo);
		*hi = _mm256_shuffle_epi8(book, *hi);
	}
}

/*
 * IQ4_NL: the 32-bit sums of pairs u x sign(s) x.  The products v q of
 * code book values and activation codes come as u = |v|, s = v, x = q, or
 * as u = |q|, s = q, x = v: the same exact sums (a pair at most 2 x 128 x
 * 127, within 16 bits), one vpabsb either way.
 */
AI __m256i
iq4_product(__m256i u, __m256i s, __m256i x)
{
	return (_mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(x, s)),
	    _mm256_set1_epi16(1)));
}

/*
 * Add the products of a group's code vectors k and 4 + k (lo, hi; for
 * IQ4_NL the signed code book values) and a token's activations (xl, xh)
 * to the block's sums *ia and *ib (see p32_tile).  IQ4_NL comes here for a
 * single token only, with |xl| and |xh| (al, ah) taken once for both
 * groups where |v| would be one vpabsb a group; two chains stay in flight
 * (exact integer sums, the same result as one).
 */
AI void
mac_pair(const enum p32 kind, __m256i *ia, __m256i *ib, __m256i lo, __m256i hi,
    __m256i xl, __m256i xh, __m256i al, __m256i ah)
{
	if (kind == P_IQ4_NL) {
		*ia = avx2_chain(_mm256_add_epi32(*ia, iq4_product(al, xl, lo)));
		*ib = avx2_chain(_mm256_add_epi32(*ib, iq4_product(ah, xh, hi)));
		return;
	}
	*ia = avx2_chain(_mm256_add_epi16(*ia, _mm256_maddubs_epi16(lo, xl)));
	if (IS_Q5(kind))
		*ib = avx2_chain(_mm256_add_epi16(*ib, _mm256_maddubs_epi16(hi, xh)));
	else
		*ia = avx2_chain(_mm256_add_epi16(*ia, _mm256_maddubs_epi16(hi, xh)));
}

/*
 * One packed tile: mg groups of 8 rows by nr tokens (compile-time).  Per
 * block and output, acc = fma(f32(sum u * q), d * token scale, acc), then
 * the mins or the code offset against token scale * sum q: one chain per
 * output in block order, whatever the tile.
 */
AI void
p32_tile(const enum p32 kind, const uint8_t *pw, int64_t cols, int64_t r0, const int mg,
    int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	const int64_t	 nb = cols / 32, stride = a->stride;
	const size_t	 gstride = (size_t)nb * BLK(kind);
	const __m256i	 ones = _mm256_set1_epi16(1);
	const uint8_t	*gp[2];
	const int8_t	*xq[P32_NR];
	const float	*xd[P32_NR], *xs[P32_NR];
	__m256		 acc[2][P32_NR];
	int64_t		 b;
	int		 g, j, k;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 8
		for (j = 0; j < nr; j++)
			acc[g][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 8
	for (j = 0; j < nr; j++) {
		xq[j] = a->q + (size_t)(t0 + j) * stride;
		xd[j] = a->d + (size_t)(t0 + j) * (stride / 32);
		xs[j] = a->s + (size_t)(t0 + j) * (stride / 32);
	}
	for (b = 0; b < nb; b++) {
		/*
		 * The block's integer sums: ia of code vectors 0-3 for Q5_0 and
		 * Q5_1, of all eight otherwise; ib of 4-7 for Q5_0 and Q5_1
		 * (their 16-bit sums together could overflow), and half of
		 * IQ4_NL's for a single token.
		 */
		__m256i	ia[2][P32_NR], ib[2][P32_NR], h[2];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * BLK(kind);

			if (nr == 1)
				avx2_prefetch_block(p, BLK(kind));
			h[g] = IS_Q5(kind) ? _mm256_loadu_si256((const __m256i *)(p +
			    OFF_Q(kind) + 128)) : _mm256_setzero_si256();
#pragma GCC unroll 8
			for (j = 0; j < nr; j++)
				ia[g][j] = ib[g][j] = _mm256_setzero_si256();
		}
#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {
			__m256i	lo[2], hi[2];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++)
				unpack_pair(kind, gp[g] + (size_t)b * BLK(kind) + OFF_Q(kind),
				    h[g], k, &lo[g], &hi[g]);
			/*
			 * IQ4_NL: the low code vector for every token, then the
			 * high, each vector's |v| shared by the tokens.
			 */
			if (kind == P_IQ4_NL && nr > 1) {
				const __m256i ul = _mm256_abs_epi8(lo[0]);
				const __m256i uh = _mm256_abs_epi8(hi[0]);

#pragma GCC unroll 16
				for (j = 0; j < 2 * nr; j++) {
					const int t = j % nr;
					const __m256i x = bcast4(xq[t] + 32 * b + 16 * (j / nr) +
					    4 * k);

					ia[0][t] = avx2_chain(_mm256_add_epi32(ia[0][t], j < nr ?
					    iq4_product(ul, lo[0], x) :
					    iq4_product(uh, hi[0], x)));
				}
				continue;
			}
#pragma GCC unroll 8
			for (j = 0; j < nr; j++) {
				const __m256i xl = bcast4(xq[j] + 32 * b + 4 * k);
				const __m256i xh = bcast4(xq[j] + 32 * b + 16 + 4 * k);
				const __m256i al = kind == P_IQ4_NL ? _mm256_abs_epi8(xl) : xl;
				const __m256i ah = kind == P_IQ4_NL ? _mm256_abs_epi8(xh) : xh;

#pragma GCC unroll 2
				for (g = 0; g < mg; g++)
					mac_pair(kind, &ia[g][j], &ib[g][j], lo[g], hi[g],
					    xl, xh, al, ah);
			}
		}
#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * BLK(kind);
			__m256 ws = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
			__m256 wm = HAS_MIN(kind) ? _mm256_cvtph_ps(_mm_loadu_si128(
			    (const __m128i *)(p + OFF_M))) : kind == P_Q5_0 ?
			    _mm256_mul_ps(ws, _mm256_set1_ps(-16.0f)) : _mm256_setzero_ps();

#pragma GCC unroll 8
			for (j = 0; j < nr; j++) {
				__m256i	is;

				if (kind == P_IQ4_NL)
					is = nr == 1 ? _mm256_add_epi32(ia[g][j], ib[g][j]) :
					    ia[g][j];
				else if (IS_Q5(kind))
					is = _mm256_add_epi32(_mm256_madd_epi16(ia[g][j], ones),
					    _mm256_madd_epi16(ib[g][j], ones));
				else
					is = _mm256_madd_epi16(ia[g][j], ones);
				acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
				    _mm256_mul_ps(ws, _mm256_set1_ps(xd[j][b])), acc[g][j]);
				if (kind != P_IQ4_NL)
					acc[g][j] = _mm256_fmadd_ps(wm, _mm256_set1_ps(xs[j][b]),
					    acc[g][j]);
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 8
		for (j = 0; j < nr; j++)
			avx2_store_rows(y + (size_t)(t0 + j) * ldy + r0 + PG * g, acc[g][j],
			    mr - PG * g);
}

/*
 * The packing and the packed tile shapes of a type: a single token takes
 * both groups at once (two chains in flight, one pass over the
 * activations); more tokens go a group at a time, which leaves registers
 * for four of them, or for IQ4_NL eight: its one 32-bit sum a token and
 * half of a pair of code vectors at a time fit, and each code vector's
 * sign and |v| (the vpabsb, vpshufb and unpacking, a sixth of the
 * work at four tokens) serve twice the tokens.
 */
#define P32_SHAPES(pk, fn, kind)					\
size_t									\
pk(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst) \
{									\
	return (pack32(kind, w, rb, rows, cols, dst));			\
}									\
void									\
fn(const uint8_t *pw, int64_t cols, int64_t r0, int mr,		\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	int	g;							\
									\
	if (nr == 1) {							\
		if (mr > PG)						\
			p32_tile(kind, pw, cols, r0, 2, mr, a, t0, 1, y, ldy); \
		else							\
			p32_tile(kind, pw, cols, r0, 1, mr, a, t0, 1, y, ldy); \
		return;							\
	}								\
	for (g = 0; PG * g < mr; g++) {					\
		int64_t	r = r0 + PG * g;				\
		int	n = mr - PG * g;				\
									\
		if (kind == P_IQ4_NL && nr > 4) {			\
			switch (nr) {					\
			case 5: p32_tile(kind, pw, cols, r, 1, n, a, t0, 5, y, ldy); break; \
			case 6: p32_tile(kind, pw, cols, r, 1, n, a, t0, 6, y, ldy); break; \
			case 7: p32_tile(kind, pw, cols, r, 1, n, a, t0, 7, y, ldy); break; \
			default: p32_tile(kind, pw, cols, r, 1, n, a, t0, 8, y, ldy); break; \
			}						\
			continue;					\
		}							\
		switch (nr) {						\
		case 2: p32_tile(kind, pw, cols, r, 1, n, a, t0, 2, y, ldy); break; \
		case 3: p32_tile(kind, pw, cols, r, 1, n, a, t0, 3, y, ldy); break; \
		default: p32_tile(kind, pw, cols, r, 1, n, a, t0, 4, y, ldy); break; \
		}							\
	}								\
}

P32_SHAPES(avx2_q4_1_pack, avx2_q4_1_packed, P_Q4_1)
P32_SHAPES(avx2_q5_0_pack, avx2_q5_0_packed, P_Q5_0)
P32_SHAPES(avx2_q5_1_pack, avx2_q5_1_packed, P_Q5_1)
P32_SHAPES(avx2_iq4_nl_pack, avx2_iq4_nl_packed, P_IQ4_NL)
