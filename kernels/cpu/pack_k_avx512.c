/*
 * pack_k_avx512.c: Q2_K, Q3_K, Q5_K and IQ4_XS weights repacked at load
 * for an AVX-512 VNNI GEMM.
 *
 * Built with AVX-512 enabled; only reached after quant_isa_supported()
 * checked the CPU.  As for the other repacked types (quant_avx512.c), rows
 * are copied into groups of 16: per 256-element super-block of a group,
 * the rows' scales, then code vectors whose 32-bit lane i holds four codes
 * (consecutive elements) of row i.  vpdpbusd of a code vector with four
 * activation codes broadcast to every lane adds to 16 rows at once, so the
 * integer sum of a sub-block for 16 rows x 1 token stays in one register
 * and is scaled once:
 *   acc = fma(f32(bias + sum u * q), row scales * token scale, acc)
 * then, for the types with mins, acc -= row mins * (token scale * sum q).
 * Each output is one chain in sub-block order whatever the tile, so results
 * do not depend on the batch or the thread split.
 *
 * The packed copies keep the weights about as small as the file's (within
 * 4%): the codes stay at their own width (two-bit planes, nibbles) and the
 * extra bits are byte masks that vpaddb applies under a mask register.
 *
 * Per super-block of a 16-row group (offsets in bytes):
 *   Q2_K:  d[16], dmin[16] (halves); the scale bytes (scale | min << 4)
 *	   sc[16 sub-blocks][16 rows]; per 16-element sub-block s one
 *	   vector whose byte 4i+e holds at bits 2m the code of element
 *	   16s+4m+e of row i.
 *   Q3_K:  d[16]; scales - 32 as int8 [16][16]; per sub-block pair the
 *	   two-bit code vectors of its two sub-blocks, as for Q2_K, then
 *	   per sub-block and m a 64-bit mask of the third bits.
 *   Q5_K:  d[16], dmin[16]; 6-bit scales and mins as bytes [8][16] each;
 *	   for each sub-block pair h the eight vectors k whose lane i is
 *	   bytes 32h+4k.. of row i's nibbles (low: sub-block 2h, high:
 *	   2h+1), then per sub-block of the pair and k a 64-bit mask of the
 *	   fifth bits.
 *   IQ4_XS: d[16]; scales - 32 as int8 [8][16]; per 32-element sub-block
 *	   the four vectors k whose lane i is bytes 4k.. of row i's 16
 *	   nibble bytes (low: elements 4k.., high: 16+4k..), looked up in
 *	   the code book by vpshufb.
 *
 * The extra bits sit next to the codes they complete, not in a region of
 * their own after them, so that one token reads a super-block front to
 * back: two streams interleaved in a super-block (codes, and bits 1 to 2
 * KB further on) defeat the hardware prefetcher of a 2-core Zen 4, and
 * held one-token Q3_K and Q5_K matrices to about 11 GB/s a core, against
 * 22-26 for the front-to-back layout (bench-tile -t 1 -R 65536).
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "nibble_one_avx512.h"
#include "pack_k_avx512.h"
#include "prefetch.h"
#include "quant.h"
#include "tile_dispatch.h"

#define AI	static inline __attribute__((always_inline))

#define PG	16		/* rows per packed group */
#define PMR	(PACK_K_MR / PG)	/* groups per tile */
#define PNR	PACK_K_NR	/* tokens per tile */

enum pkind { P_Q2_K, P_Q3_K, P_Q5_K, P_IQ4_XS };

/* Offsets in a packed super-block and its size, per type. */
#define K2_SC	64
#define K2_Q	320
#define K2BLK	1344
#define K3_SC	32
#define K3_Q	288
#define K3BLK	1824
#define K5_SC	64
#define K5_MN	192
#define K5_Q	320
#define K5BLK	2880
#define KX_SC	32
#define KX_Q	160
#define KXBLK	2208
#define KBLK(kind)	((kind) == P_Q2_K ? K2BLK : (kind) == P_Q3_K ? K3BLK :	\
			    (kind) == P_Q5_K ? K5BLK : KXBLK)
/* Bytes of a super-block in the file. */
#define KSRC(kind)	((kind) == P_Q2_K ? 84 : (kind) == P_Q3_K ? 110 :	\
			    (kind) == P_Q5_K ? 176 : 136)

/*
 * Where Q3_K's codes of sub-block s and its third bits for code vector k
 * lie, and Q5_K's nibble vector k of sub-block pair h and the fifth bits
 * of sub-block s, vector k: each pair's codes and extra bits side by side,
 * so that a super-block is read front to back.
 */
#define K3C(s)		(K3_Q + 192 * ((s) >> 1) + 64 * ((s) & 1))
#define K3M(s, k)	(K3_Q + 192 * ((s) >> 1) + 128 + 32 * ((s) & 1) + 8 * (k))
#define K5C(h, k)	(K5_Q + 640 * (h) + 64 * (k))
#define K5M(s, k)	(K5_Q + 640 * ((s) >> 1) + 512 + 64 * ((s) & 1) + 8 * (k))

/* Two-bit code of element e of a Q2_K (qs at 16) or Q3_K (qs at 32) block. */
static int
low2(const uint8_t *qs, int e)
{
	return ((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
}

/* Scale s (0..15, 0..63 before the -32) of a Q3_K super-block. */
static int
q3k_scale(const uint8_t *sb, int s)
{
	const uint8_t	*p = sb + 96;
	int		 lo = s < 8 ? p[s] & 15 : p[s - 8] >> 4;

	return (lo | ((p[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
}

/* Copy one row's super-block into lane i of a packed super-block o. */
static void
pack_sb(const enum pkind kind, const uint8_t *sb, int i, uint8_t *o)
{
	uint8_t	sc[8], mn[8];
	int	s, m, e, k, h, c, bit;

	switch (kind) {
	case P_Q2_K:
		memcpy(o + 2 * i, sb + 80, 2);
		memcpy(o + 32 + 2 * i, sb + 82, 2);
		for (s = 0; s < 16; s++) {
			o[K2_SC + 16 * s + i] = sb[s];
			for (m = 0; m < 4; m++)
				for (e = 0; e < 4; e++)
					o[K2_Q + 64 * s + 4 * i + e] |= (uint8_t)(low2(sb + 16,
					    16 * s + 4 * m + e) << (2 * m));
		}
		break;
	case P_Q3_K:
		memcpy(o + 2 * i, sb + 108, 2);
		for (s = 0; s < 16; s++) {
			o[K3_SC + 16 * s + i] = (uint8_t)(int8_t)(q3k_scale(sb, s) - 32);
			for (m = 0; m < 4; m++)
				for (e = 0; e < 4; e++) {
					c = 16 * s + 4 * m + e;
					o[K3C(s) + 4 * i + e] |= (uint8_t)(low2(sb + 32, c) <<
					    (2 * m));
					bit = (sb[c % 32] >> (4 * (c / 128) + (c % 128) / 32)) & 1;
					o[K3M(s, m) + (4 * i + e) / 8] |=
					    (uint8_t)(bit << ((4 * i + e) % 8));
				}
		}
		break;
	case P_Q5_K:
		memcpy(o + 2 * i, sb, 2);
		memcpy(o + 32 + 2 * i, sb + 2, 2);
		q4k_scales(sb + 4, sc, mn);
		for (s = 0; s < 8; s++) {
			o[K5_SC + 16 * s + i] = sc[s];
			o[K5_MN + 16 * s + i] = mn[s];
			for (k = 0; k < 8; k++)
				for (e = 0; e < 4; e++) {
					c = 32 * s + 4 * k + e;
					bit = (sb[16 + c % 32] >> s) & 1;
					o[K5M(s, k) + (4 * i + e) / 8] |=
					    (uint8_t)(bit << ((4 * i + e) % 8));
				}
		}
		for (h = 0; h < 4; h++)
			for (k = 0; k < 8; k++)
				memcpy(o + K5C(h, k) + 4 * i,
				    sb + 48 + 32 * h + 4 * k, 4);
		break;
	case P_IQ4_XS: {
		uint16_t	sh;

		memcpy(o + 2 * i, sb, 2);
		memcpy(&sh, sb + 2, 2);
		for (s = 0; s < 8; s++) {
			c = ((sb[4 + s / 2] >> (4 * (s % 2))) & 15) | ((sh >> (2 * s)) & 3) << 4;
			o[KX_SC + 16 * s + i] = (uint8_t)(int8_t)(c - 32);
			for (k = 0; k < 4; k++)
				memcpy(o + KX_Q + 256 * s + 64 * k + 4 * i,
				    sb + 8 + 16 * s + 4 * k, 4);
		}
		break;
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

/* Code vector k of sub-block sub of a packed super-block p (compile-time k). */
AI __m512i
kp_codes(const enum pkind kind, const uint8_t *p, const int sub, const int k)
{
	__m512i	v, u;

	switch (kind) {
	case P_Q2_K:
	case P_Q3_K:
		v = _mm512_loadu_si512((const void *)(p + (kind == P_Q2_K ? K2_Q + 64 * sub :
		    K3C(sub))));
		u = _mm512_and_si512(_mm512_srli_epi16(v, 2 * k), _mm512_set1_epi8(3));
		if (kind == P_Q3_K)
			u = _mm512_mask_add_epi8(u, mask_at(p + K3M(sub, k)), u,
			    _mm512_set1_epi8(4));
		return (u);
	case P_Q5_K:
		v = _mm512_loadu_si512((const void *)(p + K5C(sub >> 1, k)));
		if (sub & 1)
			v = _mm512_srli_epi16(v, 4);
		u = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
		return (_mm512_mask_add_epi8(u, mask_at(p + K5M(sub, k)), u,
		    _mm512_set1_epi8(16)));
	default:
		v = _mm512_loadu_si512((const void *)(p + KX_Q + 256 * sub + 64 * (k & 3)));
		if (k >= 4)
			v = _mm512_srli_epi16(v, 4);
		u = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
		/* The IQ4 code book plus 128, in every 128-bit lane. */
		return (_mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_setr_epi8(
		    1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153,
		    (char)166, (char)181, (char)197, (char)217, (char)241)), u));
	}
}

/* Row scales (ws) and mins (wm) of sub-block sub of packed super-block p. */
AI void
kp_scales(const enum pkind kind, const uint8_t *p, const int sub, __m512 dd, __m512 dm,
    __m512 *ws, __m512 *wm)
{
	__m512i	v;

	switch (kind) {
	case P_Q2_K:
		v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + K2_SC +
		    16 * sub)));
		*ws = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_and_si512(v,
		    _mm512_set1_epi32(15))));
		*wm = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)));
		break;
	case P_Q5_K:
		nibble_sub_scales(p, sub, dd, dm, ws, wm);
		break;
	default:
		*ws = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
		    _mm_loadu_si128((const __m128i *)(p + (kind == P_Q3_K ? K3_SC : KX_SC) +
		    16 * sub)))));
		*wm = _mm512_setzero_ps();
		break;
	}
}

/* Bytes before the codes of a packed super-block, per type. */
#define KQ(kind)	((kind) == P_Q2_K ? K2_Q : (kind) == P_Q3_K ? K3_Q :	\
			    (kind) == P_Q5_K ? K5_Q : KX_Q)

/* Prefetch the codes of the 32 elements from sub-block sub on (one token). */
AI void
kp_prefetch_codes(const enum pkind kind, const uint8_t *p, const int sub)
{
	switch (kind) {
	case P_Q2_K:
		prefetch_lines(p + K2_Q + 64 * sub, PF_DECODE, 128);
		break;
	case P_Q3_K:
		prefetch_lines(p + K3C(sub), PF_DECODE, 192);
		break;
	case P_Q5_K:		/* one token goes to nibble_one */
		break;
	default:
		prefetch_lines(p + KX_Q + 256 * sub, PF_DECODE, 256);
		break;
	}
}

/* One packed tile: mg groups of 16 rows by nr tokens (compile-time). */
AI void
kp_tile(const enum pkind kind, const uint8_t *pw, int64_t cols, int64_t r0, const int mg,
    int mr, const struct qact *a, int t0, const int nr, float *y, int64_t ldy)
{
	/* Q2_K and Q3_K: 16 sub-blocks of 16; Q5_K and IQ4_XS: 8 of 32. */
	const int	 sub16 = kind == P_Q2_K || kind == P_Q3_K;
	const int	 nsub = sub16 ? 16 : 8, sube = sub16 ? 16 : 32, nvec = sube / 4;
	const int	 mins = kind == P_Q2_K || kind == P_Q5_K;
	const int	 hasbias = kind == P_Q3_K || kind == P_IQ4_XS;
	const int64_t	 nsb = cols / 256, stride = a->stride;
	const size_t	 gstride = (size_t)nsb * KBLK(kind);
	const uint8_t	*gp[PMR];
	const int8_t	*xq[PNR];
	const float	*xd[PNR], *xs[PNR];
	const int32_t	*xb[PNR];
	__m512		 acc[PMR][PNR];
	int64_t		 b;
	int		 g, j, k, sp, h2;

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
	for (b = 0; b < nsb; b++) {
		__m512	dd[PMR], dm[PMR];

#pragma GCC unroll 2
		for (g = 0; g < mg; g++) {
			const uint8_t *p = gp[g] + (size_t)b * KBLK(kind);

			/*
			 * The next super-block of this group: one stream per
			 * group.  One token: the header, then codes as reached.
			 */
			if (nr == 1)
				prefetch_lines(p, PF_DECODE, KQ(kind));
			else
				prefetch_lines(p, KBLK(kind), KBLK(kind));
			dd[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
			dm[g] = mins ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)
			    (p + 32))) : _mm512_setzero_ps();
		}
		/* Sub-blocks in pairs, so that the parity of sub is known. */
		for (sp = 0; sp < nsub; sp += 2) {
#pragma GCC unroll 2
			for (h2 = 0; h2 < 2; h2++) {
				const int	 sub = sp + h2;
				const int64_t	 e = 256 * b + sube * sub;
				__m512i		 ia[PMR][PNR];
				__m512		 ws[PMR], wm[PMR];

#pragma GCC unroll 2
				for (g = 0; g < mg; g++) {
					if (nr == 1 && (!sub16 || h2 == 0))
						kp_prefetch_codes(kind, gp[g] +
						    (size_t)b * KBLK(kind), sub);
					kp_scales(kind, gp[g] + (size_t)b * KBLK(kind), sub,
					    dd[g], dm[g], &ws[g], &wm[g]);
#pragma GCC unroll 6
					for (j = 0; j < nr; j++)
						ia[g][j] = hasbias ? _mm512_set1_epi32(
						    xb[j][e / sube]) : _mm512_setzero_si512();
				}
#pragma GCC unroll 8
				for (k = 0; k < nvec; k++) {
					__m512i	u[PMR];

#pragma GCC unroll 2
					for (g = 0; g < mg; g++)
						u[g] = kp_codes(kind, gp[g] + (size_t)b * KBLK(kind),
						    sub, k);
#pragma GCC unroll 6
					for (j = 0; j < nr; j++) {
						__m512i	x = bcast4(xq[j] + e + 4 * k);

#pragma GCC unroll 2
						for (g = 0; g < mg; g++)
							ia[g][j] = _mm512_dpbusd_epi32(ia[g][j],
							    u[g], x);
					}
				}
#pragma GCC unroll 6
				for (j = 0; j < nr; j++) {
					__m512	d = _mm512_set1_ps(xd[j][e / 32]);
					__m512	sm = _mm512_setzero_ps();

					/* Q2_K: bias is the codes' sum of the sub-block. */
					if (kind == P_Q2_K)
						sm = _mm512_set1_ps(xd[j][e / 32] *
						    (float)xb[j][e / 16]);
					else if (kind == P_Q5_K)
						sm = _mm512_set1_ps(xs[j][e / 32]);
#pragma GCC unroll 2
					for (g = 0; g < mg; g++) {
						acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(
						    ia[g][j]), _mm512_mul_ps(ws[g], d), acc[g][j]);
						if (mins)
							acc[g][j] = _mm512_fnmadd_ps(wm[g], sm,
							    acc[g][j]);
					}
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

_Static_assert(K5_SC == NO_SC && K5_MN == NO_MN && K5_Q == NO_HDR &&
    K5C(1, 0) - K5C(0, 0) == 640 && K5M(0, 0) - K5C(0, 0) == 512 &&
    K5M(1, 0) - K5C(0, 0) == 576 && PG == NO_PG && PMR <= NO_MG,
    "the Q5_K layout is the one nibble_one reads");

/* Instantiate the pack function and the tile shapes of a type. */
#define KPDISPATCH(fn, pk, kind)					\
size_t									\
pk(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, uint8_t *dst) \
{									\
	return (kpack(kind, w, rb, rows, cols, dst));			\
}									\
void									\
fn(const uint8_t *pw, int64_t cols, int64_t r0, int mr,			\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	TILE_DISPATCH(kp_tile, kind, PG, pw, cols, r0, mr, a, t0, nr, y,	\
	    ldy);							\
}

KPDISPATCH(avx512_q2_k_packed, avx512_q2_k_pack, P_Q2_K)
KPDISPATCH(avx512_q3_k_packed, avx512_q3_k_pack, P_Q3_K)
KPDISPATCH(avx512_iq4_xs_packed, avx512_iq4_xs_pack, P_IQ4_XS)

/* Copy Q5_K rows into the packed layout (or only size it). */
size_t
avx512_q5_k_pack(const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
    uint8_t *dst)
{
	return (kpack(P_Q5_K, w, rb, rows, cols, dst));
}

/* The packed Q5_K tile shapes: one token through nibble_one. */
void
avx512_q5_k_packed(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	if (nr == 1) {
		if (mr > PG)
			nibble_one(pw, cols, r0, 2, mr, a, t0, y, ldy, K5BLK, 640, 1);
		else
			nibble_one(pw, cols, r0, 1, mr, a, t0, y, ldy, K5BLK, 640, 1);
		return;
	}
	TILE_DISPATCH(kp_tile, P_Q5_K, PG, pw, cols, r0, mr, a, t0, nr, y, ldy);
}
