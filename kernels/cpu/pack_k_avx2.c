/*
 * pack_k_avx2.c: AVX2 kernels on Q2_K, Q3_K, Q5_K and IQ4_XS weights
 * repacked at load.
 *
 * Built with AVX2 enabled; only reached after quant_isa_supported() checked
 * the CPU.  As in pack_avx2.c, a vector lane is a row: rows are copied into
 * groups of 8, and per 32-element block eight code vectors k whose lane i
 * holds four codes of row i.  vpmaddubsw of a code vector with the four
 * matching activation codes broadcast to every lane gives two 16-bit
 * partial sums per row; they add up in vpaddw for as many vectors as the
 * codes allow without overflow, vpmaddwd against the rows' integer
 * sub-block scales widens them, and the float work is one conversion and
 * one multiply-add per block, 8 rows and a token (the row scale d comes in
 * once per super-block).  So the weights are unpacked once per tile for
 * all its tokens, and each code vector then costs a token two operations
 * (IQ4_XS: four).
 *
 *   Q2_K, Q3_K: a lane's four codes are elements 2k, 2k + 1 (sub-block
 *	2j) and 16 + 2k, 17 + 2k (sub-block 2j + 1), so the two 16-bit halves
 *	of a lane sum the two sub-blocks: one vpmaddwd against (scale 2j,
 *	scale 2j + 1) applies both.  The tile lays the activations out in that
 *	order once for all its rows (tiles are PACK_K2_MR rows high).  The
 *	sub-block sums of the activations come from ACT_PAIR16: for Q2_K's
 *	mins one vpmaddwd against (min 2j, min 2j + 1), for Q3_K's offset (4)
 *	-4 times them start the 16-bit sums (|sums| <= 8128 + 8 x 2 x 7 x 127).
 *   Q5_K: elements 4k..4k+3; codes up to 31, so two 16-bit sums of four
 *	vectors each (4 x 2 x 31 x 127 = 31496); the mins against d * sum q
 *	(s) after each super-block.
 *   IQ4_XS: elements 4k..4k+3 (low nibbles, k < 4) and 16 + 4(k - 4)..
 *	(high nibbles); code book values go as |v| with the sign moved onto
 *	the activations (a single token: |q| with the sign moved onto v),
 *	and a pair may reach 2 x 128 x 127: each vector is widened against
 *	the scales at once.
 *
 * The codes are stored at their own width, so the copies stay within 4%
 * of the file's size, and laid out so that most come out of one vpand or
 * a shift and a vpand: three-bit Q3_K codes two to a byte plus two spare
 * bits, five-bit Q5_K codes one to a byte plus three spare bits; the spare
 * bits of a block's vectors hold its remaining codes.  Per super-block of
 * an 8-row group (offsets in bytes; per block j, c_k is code vector k's
 * code in a byte):
 *   Q2_K:  d[8], dmin[8] (halves); the file's scale bytes (scale | min <<
 *	   4) [j][row][2]; per j two vectors c0 | c1 << 2 | c2 << 4 | c3 << 6
 *	   and the same of c4..c7.
 *   Q3_K:  d[8]; scales - 32 as int8 [j][row][2]; per j three vectors
 *	   c0 | c1 << 3 | (c6 & 3) << 6, c2 | c3 << 3 | (c7 & 3) << 6 and
 *	   c4 | c5 << 3 | (c6 >> 2) << 6 | (c7 >> 2) << 7 (codes 0..7, the
 *	   value plus 4).
 *   Q5_K:  d[8], dmin[8]; scales [j][row], mins [j][row] (bytes); per j
 *	   five vectors: c0..c4 in bits 0-4, bits 5-7 the low three bits of
 *	   c5, c6, c7 (vectors 0, 1, 2), c5 >> 3 and c6 >> 3 at bits 5-6 of
 *	   vectors 3 and 4, c7's bits 3 and 4 at bit 7 of vectors 3 and 4.
 *   IQ4_XS: d[8]; scales - 32 as int8 [j][row]; per j four vectors whose
 *	   lane i is bytes 4k.. of row i's 16 nibble bytes.
 *
 * Each output is one chain of float operations in block order whatever
 * the tile, so results do not depend on the batch or the thread split.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "pack_avx2.h"
#include "pack_k_avx2.h"
#include "avx2_tile.h"
#include "quant.h"

#define AI	static inline __attribute__((always_inline))

#define PG	8		/* rows per packed group: one per lane */
#define NR	PACK_K2_NR	/* tokens per tile */

enum pkind { P_Q2_K, P_Q3_K, P_Q5_K, P_IQ4_XS };

/* Offsets in a packed super-block of a group and its size, per type. */
#define K2_SC	32
#define K2_Q	160
#define K2BLK	672
#define K3_SC	16
#define K3_Q	144
#define K3BLK	912
#define K5_SC	32
#define K5_MN	96
#define K5_Q	160
#define K5BLK	1440
#define KX_SC	16
#define KX_Q	80
#define KXBLK	1104
#define KBLK(kind)	((kind) == P_Q2_K ? K2BLK : (kind) == P_Q3_K ? K3BLK :	\
			    (kind) == P_Q5_K ? K5BLK : KXBLK)
/* Where the codes start, and their bytes per 32-element block. */
#define KQ(kind)	((kind) == P_Q2_K ? K2_Q : (kind) == P_Q3_K ? K3_Q :	\
			    (kind) == P_Q5_K ? K5_Q : KX_Q)
#define KCB(kind)	((kind) == P_Q2_K ? 64 : (kind) == P_Q3_K ? 96 :	\
			    (kind) == P_Q5_K ? 160 : 128)
/* Bytes of a super-block in the file. */
#define KSRC(kind)	((kind) == P_Q2_K ? 84 : (kind) == P_Q3_K ? 110 :	\
			    (kind) == P_Q5_K ? 176 : 136)

/* Two-bit code of element e of a Q2_K (qs at 16) or Q3_K (qs at 32) block. */
static int
low2(const uint8_t *qs, int e)
{
	return ((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
}

/* Unsigned code of element e of a Q2_K, Q3_K or Q5_K super-block. */
static int
kcode(const enum pkind kind, const uint8_t *sb, int e)
{
	int	j = e / 32, l = e % 32, n;

	switch (kind) {
	case P_Q2_K:
		return (low2(sb + 16, e));
	case P_Q3_K:
		return (low2(sb + 32, e) | ((sb[l] >> j) & 1) << 2);
	default:
		n = sb[48 + 32 * (j / 2) + l];
		n = j & 1 ? n >> 4 : n & 15;
		return (n | ((sb[16 + l] >> j) & 1) << 4);
	}
}

/* Six-bit scale s (0..15) of a Q3_K super-block, before the -32. */
static int
q3k_scale6(const uint8_t *sb, int s)
{
	const uint8_t	*p = sb + 96;
	int		 lo = s < 8 ? p[s] & 15 : p[s - 8] >> 4;

	return (lo | ((p[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
}

/* Copy one row's super-block into lane i of a packed super-block o. */
static void
pack_sb(const enum pkind kind, const uint8_t *sb, int i, uint8_t *o)
{
	uint8_t		 sc[8], mn[8], *q;
	uint16_t	 sh;
	int		 j, k, e, h, c[8];

	switch (kind) {
	case P_Q2_K:
		memcpy(o + 2 * i, sb + 80, 2);
		memcpy(o + 16 + 2 * i, sb + 82, 2);
		break;
	case P_Q3_K:
		memcpy(o + 2 * i, sb + 108, 2);
		break;
	case P_Q5_K:
		memcpy(o + 2 * i, sb, 2);
		memcpy(o + 16 + 2 * i, sb + 2, 2);
		q4k_scales(sb + 4, sc, mn);
		break;
	case P_IQ4_XS:
		memcpy(o + 2 * i, sb, 2);
		break;
	}
	for (j = 0; j < 8; j++) {
		q = o + KQ(kind) + KCB(kind) * j + 4 * i;
		switch (kind) {
		case P_Q2_K:
			for (h = 0; h < 2; h++)
				o[K2_SC + 16 * j + 2 * i + h] = sb[2 * j + h];
			break;
		case P_Q3_K:
			for (h = 0; h < 2; h++)
				o[K3_SC + 16 * j + 2 * i + h] =
				    (uint8_t)(q3k_scale6(sb, 2 * j + h) - 32);
			break;
		case P_Q5_K:
			o[K5_SC + 8 * j + i] = sc[j];
			o[K5_MN + 8 * j + i] = mn[j];
			break;
		case P_IQ4_XS:
			memcpy(&sh, sb + 2, 2);
			o[KX_SC + 8 * j + i] = (uint8_t)((((sb[4 + j / 2] >> (4 * (j % 2))) &
			    15) | ((sh >> (2 * j)) & 3) << 4) - 32);
			for (k = 0; k < 4; k++)
				memcpy(q + 32 * k, sb + 8 + 16 * j + 4 * k, 4);
			continue;
		}
		for (e = 0; e < 4; e++) {
			for (k = 0; k < 8; k++)
				c[k] = kcode(kind, sb, 32 * j + (kind == P_Q5_K ? 4 * k + e :
				    2 * k + (e & 1) + 16 * (e >> 1)));
			switch (kind) {
			case P_Q2_K:
				q[e] = (uint8_t)(c[0] | c[1] << 2 | c[2] << 4 | c[3] << 6);
				q[32 + e] = (uint8_t)(c[4] | c[5] << 2 | c[6] << 4 | c[7] << 6);
				break;
			case P_Q3_K:
				q[e] = (uint8_t)(c[0] | c[1] << 3 | (c[6] & 3) << 6);
				q[32 + e] = (uint8_t)(c[2] | c[3] << 3 | (c[7] & 3) << 6);
				q[64 + e] = (uint8_t)(c[4] | c[5] << 3 | (c[6] >> 2) << 6 |
				    (c[7] >> 2) << 7);
				break;
			default:
				q[e] = (uint8_t)(c[0] | (c[5] & 7) << 5);
				q[32 + e] = (uint8_t)(c[1] | (c[6] & 7) << 5);
				q[64 + e] = (uint8_t)(c[2] | (c[7] & 7) << 5);
				q[96 + e] = (uint8_t)(c[3] | (c[5] >> 3) << 5 |
				    ((c[7] >> 3) & 1) << 7);
				q[128 + e] = (uint8_t)(c[4] | (c[6] >> 3) << 5 |
				    (c[7] >> 4) << 7);
				break;
			}
		}
	}
}

/* Copy rows into the packed layout (or only size it when dst is NULL). */
static size_t
kpack(const enum pkind kind, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	const int64_t	nsb = cols / 256, ng = (rows + PG - 1) / PG;
	int64_t		g, b, r;
	int		i;

	if (dst == NULL)
		return ((size_t)(ng * nsb * KBLK(kind)));
	for (g = 0; g < ng; g++) {
		for (b = 0; b < nsb; b++) {
			uint8_t *o = dst + (size_t)(g * nsb + b) * KBLK(kind);

			/* Rows past the end stay zero: scale 0, so output 0. */
			memset(o, 0, KBLK(kind));
			for (i = 0; i < PG && (r = g * PG + i) < rows; i++)
				pack_sb(kind, w + (size_t)r * rb + (size_t)b * KSRC(kind), i, o);
		}
	}
	return ((size_t)(ng * nsb * KBLK(kind)));
}

/* 32 bytes at p (unaligned). */
AI __m256i
ld(const uint8_t *p)
{
	return (_mm256_loadu_si256((const __m256i *)p));
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
 * Code vector k (0..7, compile-time) of the 32-element block whose codes
 * start at q: unsigned codes, or for IQ4_XS the 4-bit indices.
 */
AI __m256i
kcodes(const enum pkind kind, const uint8_t *q, const int k)
{
	__m256i	v, lo, hi;

	switch (kind) {
	case P_Q2_K:
		v = ld(q + 32 * (k >> 2));
		if (k & 3)
			v = _mm256_srli_epi16(v, 2 * (k & 3));
		return (_mm256_and_si256(v, _mm256_set1_epi8(3)));
	case P_Q3_K:
		if (k < 6) {
			v = ld(q + 32 * (k >> 1));
			if (k & 1)
				v = _mm256_srli_epi16(v, 3);
			return (_mm256_and_si256(v, _mm256_set1_epi8(7)));
		}
		lo = _mm256_and_si256(_mm256_srli_epi16(ld(q + 32 * (k - 6)), 6),
		    _mm256_set1_epi8(3));
		hi = _mm256_and_si256(_mm256_srli_epi16(ld(q + 64), k - 2),
		    _mm256_set1_epi8(4));
		return (_mm256_or_si256(lo, hi));
	case P_Q5_K:
		if (k < 5)
			return (_mm256_and_si256(ld(q + 32 * k), _mm256_set1_epi8(31)));
		lo = _mm256_and_si256(_mm256_srli_epi16(ld(q + 32 * (k - 5)), 5),
		    _mm256_set1_epi8(7));
		if (k < 7)
			hi = _mm256_and_si256(_mm256_srli_epi16(ld(q + 32 * (k - 2)), 2),
			    _mm256_set1_epi8(0x18));
		else
			hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ld(q + 96),
			    4), _mm256_set1_epi8(8)), _mm256_and_si256(_mm256_srli_epi16(
			    ld(q + 128), 3), _mm256_set1_epi8(16)));
		return (_mm256_or_si256(lo, hi));
	default:
		v = ld(q + 32 * (k & 3));
		if (k >= 4)
			v = _mm256_srli_epi16(v, 4);
		return (_mm256_and_si256(v, _mm256_set1_epi8(15)));
	}
}

/*
 * Integer scales of block j of the packed super-block p for vpmaddwd: for
 * Q2_K and Q3_K in sc the scales of sub-blocks 2j and 2j + 1 as the 16-bit
 * pair of each row's lane (Q2_K's mins the same in mn), for Q5_K and
 * IQ4_XS the row's scale twice.
 */
AI void
kscales(const enum pkind kind, const uint8_t *p, int j, __m256i *sc, __m256i *mn)
{
	const __m256i	dlo = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13,
			    12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
	__m256i		v;

	switch (kind) {
	case P_Q2_K:
		v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p + K2_SC +
		    16 * j)));
		*mn = _mm256_srli_epi16(v, 4);
		*sc = _mm256_and_si256(v, _mm256_set1_epi16(15));
		break;
	case P_Q3_K:
		*sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + K3_SC +
		    16 * j)));
		break;
	case P_Q5_K:
		v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + K5_SC +
		    8 * j)));
		*sc = _mm256_shuffle_epi8(v, dlo);
		break;
	default:
		v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + KX_SC +
		    8 * j)));
		*sc = _mm256_shuffle_epi8(v, dlo);
		break;
	}
}

/*
 * Q2_K and Q3_K: the activations of tokens [t0, t0 + nr) in the order of
 * their code vectors, once for all the rows of a tile: per 32 elements,
 * bytes 4k..4k+3 are elements 2k, 2k + 1, 16 + 2k, 17 + 2k (the two
 * sub-blocks' in the two 16-bit halves of a lane), token t's at xp + t *
 * cols.  For Q3_K also the biases its 16-bit sums start from: per block,
 * -4 (the codes' offset) times the sums of its halves (ACT_PAIR16; |4
 * sum| <= 8128 fits), token t's at bp + t * cols / 32.
 */
AI void
pair_acts(const enum pkind kind, const struct qact *a, int t0, int nr, int64_t cols,
    int8_t *xp, uint32_t *bp)
{
	const __m256i	ctl = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13,
			    6, 7, 14, 15, 0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
	const int64_t	nb = cols / 32;
	int64_t		b;
	int		t;

	for (t = 0; t < nr; t++) {
		const int8_t	*q = a->q + (size_t)(t0 + t) * a->stride;
		const int32_t	*l = a->bias + (size_t)(t0 + t) * (a->stride / 4);

		for (b = 0; b < nb; b++) {
			__m256i	v = _mm256_loadu_si256((const __m256i *)(q + 32 * b));

			/* Elements 0-7 16-23 | 8-15 24-31, then pairs of each. */
			v = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(v, 0xd8), ctl);
			_mm256_storeu_si256((__m256i *)(xp + t * cols + 32 * b), v);
		}
		if (kind == P_Q3_K)
			for (b = 0; b < nb; b += 8) {
				__m256i	v = _mm256_loadu_si256((const __m256i *)(l + b));

				v = _mm256_sub_epi16(_mm256_setzero_si256(),
				    _mm256_slli_epi16(v, 2));
				_mm256_storeu_si256((__m256i *)(bp + t * nb + b), v);
			}
	}
}

/*
 * Code vector k (compile-time) of a block for mg groups and nr tokens:
 * into the 16-bit sums is, or for IQ4_XS (|v| with the sign on the
 * activations, a pair up to 2 x 128 x 127) widened against the scales sc
 * at once into iv.  A single token takes |q| with the sign on the code
 * book values instead, the same exact products: one vpabsb for all groups
 * rather than one a group.
 */
AI void
kstep(const enum pkind kind, const uint8_t *const *q, const int8_t *const *xq,
    int64_t e, const int mg, const int nr, const int k, const __m256i *sc,
    __m256i (*is)[NR], __m256i (*iv)[NR])
{
	const __m256i	book = _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22,
			    -10, 1, 13, 25, 38, 53, 69, 89, 113, -127, -104, -83, -65, -49,
			    -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
	__m256i		c[2], v[2];
	int		g, t;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		c[g] = kcodes(kind, q[g], k);
		if (kind == P_IQ4_XS) {
			v[g] = _mm256_shuffle_epi8(book, c[g]);
			if (nr > 1)
				c[g] = _mm256_abs_epi8(v[g]);
		}
	}
#pragma GCC unroll 4
	for (t = 0; t < nr; t++) {
		const __m256i	x = bcast4(xq[t] + e + 4 * k);
		const __m256i	ax = kind == P_IQ4_XS && nr == 1 ? _mm256_abs_epi8(x) : x;

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			__m256i	p;

			if (kind != P_IQ4_XS) {
				is[g][t] = avx2_chain(_mm256_add_epi16(is[g][t],
				    _mm256_maddubs_epi16(c[g], x)));
				continue;
			}
			p = _mm256_madd_epi16(nr == 1 ? _mm256_maddubs_epi16(ax,
			    _mm256_sign_epi8(v[g], x)) : _mm256_maddubs_epi16(c[g],
			    _mm256_sign_epi8(x, v[g])), sc[g]);
			iv[g][t] = k == 0 ? p : avx2_chain(_mm256_add_epi32(iv[g][t], p));
		}
	}
}
#define KSTEP(k)	kstep(kind, q, xq, e, mg, nr, k, sc, is, iv)

/* Start a block's 16-bit sums: Q3_K's biases (its codes' offset), or 0. */
AI void
kstart(const enum pkind kind, const int mg, const int nr, const uint32_t *bp,
    int64_t nb, int64_t e, __m256i (*is)[NR])
{
	int	g, t;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 4
		for (t = 0; t < nr; t++)
			is[g][t] = kind == P_Q3_K ? _mm256_set1_epi32((int)bp[t * nb +
			    e / 32]) : _mm256_setzero_si256();
}

/* Widen the 16-bit sums against the scales into iv (added when add). */
AI void
kwiden(const int mg, const int nr, __m256i (*is)[NR], const __m256i *sc,
    __m256i (*iv)[NR], const int add)
{
	int	g, t;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 4
		for (t = 0; t < nr; t++) {
			__m256i	m = _mm256_madd_epi16(is[g][t], sc[g]);

			iv[g][t] = add ? _mm256_add_epi32(iv[g][t], m) : m;
		}
}

/*
 * One packed tile: mg groups of 8 rows by nr tokens (compile-time).  Per
 * 32-element block, 8 rows and a token, I is the block's integer sum with
 * the sub-block scales applied; ss = fma(f32(I), token scale, ss) sums a
 * super-block, then acc = fma(ss, d, acc).  Mins: Q2_K sums M, the mins
 * times the sub-block sums, the same way into sm, then acc -= sm * dmin;
 * Q5_K takes acc -= dmin * min * (token scale * sum q) per block after
 * its super-block.
 */
AI void
kx_tile(const enum pkind kind, const uint8_t *pw, int64_t cols, int64_t r0, const int mg,
    int mr, const struct qact *a, int t0, const int nr, const int8_t *xp,
    const uint32_t *bp, float *y, int64_t ldy)
{
	const int	 pairs = kind == P_Q2_K || kind == P_Q3_K;
	const int	 mins = kind == P_Q2_K || kind == P_Q5_K;
	const int64_t	 nsb = cols / 256, nb = cols / 32, stride = a->stride;
	const size_t	 gstride = (size_t)nsb * KBLK(kind);
	const uint8_t	*gp[2];
	const int8_t	*xq[NR];
	const float	*xd[NR], *xs[NR];
	const int32_t	*xb[NR];
	__m256		 acc[2][NR];
	int64_t		 b;
	int		 g, t, j;

#pragma GCC unroll 2
	for (g = 0; g < mg; g++) {
		gp[g] = pw + (size_t)(r0 / PG + g) * gstride;
#pragma GCC unroll 4
		for (t = 0; t < nr; t++)
			acc[g][t] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (t = 0; t < nr; t++) {
		xq[t] = pairs ? xp + t * cols : a->q + (size_t)(t0 + t) * stride;
		xd[t] = a->d + (size_t)(t0 + t) * (stride / 32);
		xs[t] = a->s + (size_t)(t0 + t) * (stride / 32);
		xb[t] = a->bias + (size_t)(t0 + t) * (stride / 4);
	}
	for (b = 0; b < nsb; b++) {
		__m256	dd[2], dm[2], ss[2][NR], sm[2][NR];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * KBLK(kind);

			if (nr == 1)	/* the header; codes block by block */
				avx2_prefetch_block(p, KQ(kind));
			dd[g] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
			dm[g] = mins ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)
			    (p + 16))) : _mm256_setzero_ps();
#pragma GCC unroll 4
			for (t = 0; t < nr; t++)
				ss[g][t] = sm[g][t] = _mm256_setzero_ps();
		}
		for (j = 0; j < 8; j++) {
			const int64_t	 e = 256 * b + 32 * j;
			const uint8_t	*q[2];
			__m256i		 sc[2], mn[2], iv[2][NR], is[2][NR];

#pragma GCC unroll 2
			for (g = 0; g < mg; g++) {
				const uint8_t *p = gp[g] + (size_t)b * KBLK(kind);

				q[g] = p + KQ(kind) + KCB(kind) * j;
				if (nr == 1)
					avx2_prefetch_block(q[g], KCB(kind));
				kscales(kind, p, j, &sc[g], &mn[g]);
			}
			/*
			 * The code vectors one by one (calls, not a loop: each
			 * needs k constant, and a loop the compiler left rolled
			 * made its shifts and cases run-time).  Pairs: one 16-bit
			 * sum; Q5_K: two, for the range.
			 */
			if (kind == P_IQ4_XS) {
				KSTEP(0); KSTEP(1); KSTEP(2); KSTEP(3);
				KSTEP(4); KSTEP(5); KSTEP(6); KSTEP(7);
			} else if (pairs) {
				kstart(kind, mg, nr, bp, nb, e, is);
				KSTEP(0); KSTEP(1); KSTEP(2); KSTEP(3);
				KSTEP(4); KSTEP(5); KSTEP(6); KSTEP(7);
				kwiden(mg, nr, is, sc, iv, 0);
			} else {
				kstart(kind, mg, nr, bp, nb, e, is);
				KSTEP(0); KSTEP(1); KSTEP(2); KSTEP(3);
				kwiden(mg, nr, is, sc, iv, 0);
				kstart(kind, mg, nr, bp, nb, e, is);
				KSTEP(4); KSTEP(5); KSTEP(6); KSTEP(7);
				kwiden(mg, nr, is, sc, iv, 1);
			}
#pragma GCC unroll 2
			for (g = 0; g < mg; g++)
#pragma GCC unroll 4
				for (t = 0; t < nr; t++) {
					__m256	dx = _mm256_set1_ps(xd[t][e / 32]);
					__m256	fi = _mm256_cvtepi32_ps(iv[g][t]);

					ss[g][t] = _mm256_fmadd_ps(fi, dx, ss[g][t]);
					if (kind == P_Q2_K)
						sm[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(
						    _mm256_madd_epi16(_mm256_set1_epi32(
						    xb[t][e / 32]), mn[g])), dx, sm[g][t]);
				}
		}
#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * KBLK(kind);

#pragma GCC unroll 4
			for (t = 0; t < nr; t++) {
				acc[g][t] = _mm256_fmadd_ps(ss[g][t], dd[g], acc[g][t]);
				if (kind == P_Q2_K)
					acc[g][t] = _mm256_fnmadd_ps(sm[g][t], dm[g], acc[g][t]);
			}
			/* Q5_K's mins here keep acc out of the blocks' registers. */
			for (j = 0; kind == P_Q5_K && j < 8; j++) {
				__m256	wm = _mm256_mul_ps(dm[g], _mm256_cvtepi32_ps(
				    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)
				    (p + K5_MN + 8 * j)))));

#pragma GCC unroll 4
				for (t = 0; t < nr; t++)
					acc[g][t] = _mm256_fnmadd_ps(wm, _mm256_set1_ps(
					    xs[t][8 * b + j]), acc[g][t]);
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < mg; g++)
#pragma GCC unroll 4
		for (t = 0; t < nr; t++)
			avx2_store_rows(y + (size_t)(t0 + t) * ldy + r0 + PG * g, acc[g][t],
			    mr - PG * g);
}

/*
 * The tile shapes: a single token takes two groups at once (two weight
 * streams and chains in flight); more tokens go a group at a time, which
 * leaves registers for four of them.  Q2_K and Q3_K lay their activations
 * out once for all the rows.
 */
AI void
kx_run(const enum pkind kind, const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	const int	 pairs = kind == P_Q2_K || kind == P_Q3_K;
	int8_t		 xp[pairs ? nr * cols : 1];
	uint32_t	 bp[kind == P_Q3_K ? nr * cols / 32 : 1];
	int		 r;

	if (pairs)
		pair_acts(kind, a, t0, nr, cols, xp, bp);
	if (nr == 1) {
		for (r = 0; r < mr; r += 2 * PG) {
			if (mr - r > PG)
				kx_tile(kind, pw, cols, r0 + r, 2, mr - r, a, t0, 1, xp, bp,
				    y, ldy);
			else
				kx_tile(kind, pw, cols, r0 + r, 1, mr - r, a, t0, 1, xp, bp,
				    y, ldy);
		}
		return;
	}
	for (r = 0; r < mr; r += PG) {
		switch (nr) {
		case 2:
			kx_tile(kind, pw, cols, r0 + r, 1, mr - r, a, t0, 2, xp, bp, y, ldy);
			break;
		case 3:
			kx_tile(kind, pw, cols, r0 + r, 1, mr - r, a, t0, 3, xp, bp, y, ldy);
			break;
		default:
			kx_tile(kind, pw, cols, r0 + r, 1, mr - r, a, t0, 4, xp, bp, y, ldy);
			break;
		}
	}
}

/* Instantiate the pack function and the tiles of a type. */
#define KDISPATCH(fn, pk, kind)						\
size_t									\
pk(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst) \
{									\
	return (kpack(kind, w, rb, rows, cols, dst));			\
}									\
void									\
fn(const uint8_t *pw, int64_t cols, int64_t r0, int mr,			\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	kx_run(kind, pw, cols, r0, mr, a, t0, nr, y, ldy);		\
}

KDISPATCH(avx2_q2_k_packed, avx2_q2_k_pack, P_Q2_K)
KDISPATCH(avx2_q3_k_packed, avx2_q3_k_pack, P_Q3_K)
KDISPATCH(avx2_q5_k_packed, avx2_q5_k_pack, P_Q5_K)
KDISPATCH(avx2_iq4_xs_packed, avx2_iq4_xs_pack, P_IQ4_XS)
