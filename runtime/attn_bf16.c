/*
 * attn_bf16.c: attention over paged KV with AVX-512 bf16 dot products.
 *
 * The algorithm of attn_avx512.c (the same key tiles, rows, online softmax
 * steps and so the same batch invariance) with both products on
 * vdpbf16ps, which takes two products per lane where vfmadd231ps takes
 * one: the scaled queries, the keys, the values and the softmax weights
 * are rounded to bf16 (an 8-bit significand), the products summed in f32.
 *
 * A score sums pairs of head dimensions: the key tile is laid out
 * [hd / 2][KT] of (dimension 2i, 2i + 1) pairs, the queries as pairs in
 * their natural order.  A weighted value sums pairs of keys: the value tile
 * is laid out [KT / 2][hdp] of (key 2i, 2i + 1) pairs, the weights as pairs
 * in their natural order.  So a row whose keys start or end on an odd slot
 * shares a pair with a key it must not see: that key's weight is exactly 0,
 * and its half of the value pair is cleared for the product, since 0 times
 * a NaN or infinite value (a later position's, or one before a window)
 * would be NaN.
 */
#include "config.h"

#include <string.h>

#include "attn_avx512.h"

#define KP	(KT / 2)	/* key pairs per tile */

/*
 * Scores of R rows (query pairs q, hd2 pairs a row) against a key tile k
 * of dimension pairs: s[r][j] = sum over pairs i of q[r][i] . k[i][j], one
 * vdpbf16ps per pair in order.
 */
AI void
qk_rows(float *s, const uint32_t *q, int hd2, const uint32_t *k, const int R)
{
	__m512		 acc[RB][KVEC];
	__m512i		 kv[KVEC];
	const uint32_t	*kd;
	int		 r, v, i;

	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (v = 0; v < KVEC; v++)
			acc[r][v] = _mm512_setzero_ps();
	for (i = 0; i < hd2; i++) {
		kd = k + (size_t)i * KT;
		UNROLL
		for (v = 0; v < KVEC; v++)
			kv[v] = _mm512_loadu_si512(kd + 16 * v);
		UNROLL
		for (r = 0; r < R; r++) {
			__m512i qb = _mm512_set1_epi32((int)q[(size_t)r * hd2 +
			    i]);

			UNROLL
			for (v = 0; v < KVEC; v++)
				acc[r][v] = _mm512_dpbf16_ps(acc[r][v],
				    (__m512bh)qb, (__m512bh)kv[v]);
		}
	}
	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (v = 0; v < KVEC; v++)
			_mm512_storeu_ps(s + (size_t)r * KT + 16 * v, acc[r][v]);
}

/*
 * o[r] = o[r] * sc[r] + sum over the key pairs i holding keys lo..hi-1 of
 * p[r][i] . v[i] for R rows (weight pairs p, KP a row) and NV vectors of
 * head dimensions (o row stride ostr, v row stride vstr), one vdpbf16ps per
 * pair in order; a pair's key outside lo..hi-1 has its value half cleared.
 */
AI void
pv_rows(float *o, int ostr, const uint32_t *p, const uint32_t *v, int vstr,
    int lo, int hi, const float *sc, const int R, const int NV)
{
	__m512		 acc[RB][DCH];
	__m512i		 vv[DCH];
	const uint32_t	*vi;
	const int	 i0 = lo / 2, i1 = (hi + 1) / 2;
	uint32_t	 keep;
	int		 r, c, i;

	UNROLL
	for (r = 0; r < R; r++) {
		__m512 s = _mm512_set1_ps(sc[r]);

		UNROLL
		for (c = 0; c < NV; c++)
			acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o +
			    (size_t)r * ostr + 16 * c), s);
	}
	for (i = i0; i < i1; i++) {
		vi = v + (size_t)i * vstr;
		UNROLL
		for (c = 0; c < NV; c++)
			vv[c] = _mm512_loadu_si512(vi + 16 * c);
		/* Key 2i is a pair's low half, 2i + 1 its high half. */
		keep = 0xffffffffu;
		if (i == i0 && (lo & 1))
			keep &= 0xffff0000u;
		if (i == i1 - 1 && (hi & 1))
			keep &= 0x0000ffffu;
		if (keep != 0xffffffffu) {
			UNROLL
			for (c = 0; c < NV; c++)
				vv[c] = _mm512_and_si512(vv[c],
				    _mm512_set1_epi32((int)keep));
		}
		UNROLL
		for (r = 0; r < R; r++) {
			__m512i pb = _mm512_set1_epi32((int)p[(size_t)r * KP +
			    i]);

			UNROLL
			for (c = 0; c < NV; c++)
				acc[r][c] = _mm512_dpbf16_ps(acc[r][c],
				    (__m512bh)pb, (__m512bh)vv[c]);
		}
	}
	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (c = 0; c < NV; c++)
			_mm512_storeu_ps(o + (size_t)r * ostr + 16 * c, acc[r][c]);
}

/* qk_rows for a block of 1..RB rows, each size compiled on its own. */
static void
qk_block(int R, float *s, const uint32_t *q, int hd2, const uint32_t *k)
{
	QK_SWITCH(R, s, q, hd2, k);
}

/* pv_rows for 1..RB rows and 1..DCH vectors, each shape compiled on its own. */
static void
pv_block(int R, int NV, float *o, int ostr, const uint32_t *p,
    const uint32_t *v, int vstr, int lo, int hi, const float *sc)
{
	PV_SWITCH(R, NV);
}

/* The softmax weights of R rows of s (stride KT) as bf16 pairs at p. */
static void
weights_bf16(int R, const float *s, uint32_t *p)
{
	int	r, w;

	for (r = 0; r < R; r++)
		UNROLL
		for (w = 0; w < KVEC / 2; w++) {
			const float *x = s + (size_t)r * KT + 32 * w;

			_mm512_storeu_si512(p + (size_t)r * KP + 16 * w,
			    (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x +
			    16), _mm512_loadu_ps(x)));
		}
}

/* The working state of one job. */
struct bf_st {
	const struct attn_job	*j;
	int			 hd, hd2, hdp;
	uint32_t		*q;	/* rows x hd2 pairs, scaled */
	float			*o;	/* rows x hdp */
	float			*mx;	/* rows */
	float			*ls;	/* rows x 16 */
	uint32_t		*k;	/* hd2 x KT pairs */
	uint32_t		*v;	/* KP x hdp pairs */
	float			*s;	/* RB x KT */
	uint32_t		*p;	/* RB x KP pairs */
	float			 sc[RB];
};

/* Step nr rows from row r0, all with keys lo..hi-1 of the current tile. */
static void
rows_step(void *arg, int r0, int nr, int lo, int hi)
{
	struct bf_st	*st = arg;
	const int	hd2 = st->hd2, hdp = st->hdp;
	int		b, R, c, NV;

	for (b = r0; b < r0 + nr; b += R) {
		R = r0 + nr - b < RB ? r0 + nr - b : RB;
		qk_block(R, st->s, st->q + (size_t)b * hd2, hd2, st->k);
		softmax_rows(R, st->s, lo, hi, st->j->cap, st->mx + b,
		    st->ls + (size_t)16 * b, st->sc);
		weights_bf16(R, st->s, st->p);
		for (c = 0; c < hdp; c += 16 * DCH) {
			NV = (hdp - c) / 16 < DCH ? (hdp - c) / 16 : DCH;
			pv_block(R, NV, st->o + (size_t)b * hdp + c, hdp, st->p,
			    st->v + c, hdp, lo, hi, st->sc);
		}
	}
}

/* n (0..16) stored elements (F16 or F32) from src as floats. */
AI __m512
load_n(const void *src, int n, int f16)
{
	__mmask16 m = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);

	if (f16)
		return (_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src)));
	return (_mm512_maskz_loadu_ps(m, src));
}

/*
 * a and b rounded to bf16 and interleaved: the sixteen pairs (a[i], b[i]),
 * pair i in 32-bit lane i.
 */
AI __m512i
pairs(__m512 a, __m512 b)
{
	const __m512i	idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12,
			    27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
			    20, 4, 19, 3, 18, 2, 17, 1, 16, 0);

	return (_mm512_permutexvar_epi16(idx,
	    (__m512i)_mm512_cvtne2ps_pbh(b, a)));
}

/*
 * Keys and values of positions t0+x0..t0+tn-1 into the pair tiles, from
 * the pages that hold them (a pair of positions 2i, 2i + 1 never straddles
 * two: pages hold a multiple of 8).  The key slots outside are zeroed, as
 * is the other half of a value pair cut by x0 or tn, so that no position
 * outside is read; value pairs wholly outside are never read.
 */
static void
gather(struct bf_st *st, uint32_t t0, int x0, int tn)
{
	const struct attn_job	*j = st->j;
	const struct kv_pool	*pool = j->pool;
	const int		 bs = (int)pool->layout.block_size, hd = st->hd;
	const int		 f16 = pool->layout.type == KV_TYPE_F16;
	const size_t		 es = pool->elem_size;
	const __m512		 zero = _mm512_setzero_ps();
	uint32_t		 p, blk;
	int			 x, len, slot, d, y, n, i;
	__mmask16		 m;

	for (x = x0; x < tn; x += len) {
		p = t0 + (uint32_t)x;
		blk = j->blocks[p / bs];
		slot = (int)(p % bs);
		len = bs - slot < tn - x ? bs - slot : tn - x;

		const char *kb = kv_block_k(pool, blk, j->layer, j->kv_head);

		for (d = 0; d < hd; d += 2)
			for (y = 0; y < len; y += 16) {
				n = len - y < 16 ? len - y : 16;
				m = (__mmask16)((1u << n) - 1);
				_mm512_mask_storeu_epi32(st->k + (size_t)(d / 2) *
				    KT + x + y, m, pairs(load_n(kb +
				    ((size_t)d * bs + slot + y) * es, n, f16),
				    d + 1 < hd ? load_n(kb + ((size_t)(d + 1) *
				    bs + slot + y) * es, n, f16) : zero));
			}
	}
	for (i = x0 / 2; i < (tn + 1) / 2; i++) {
		const char	*va, *vb;
		int		 sa = 2 * i >= x0, sb = 2 * i + 1 < tn;

		p = t0 + 2 * (uint32_t)i;
		blk = j->blocks[p / bs];
		va = (const char *)kv_block_v(pool, blk, j->layer, j->kv_head) +
		    (size_t)(p % bs) * hd * es;
		vb = va + (size_t)hd * es;
		for (y = 0; y < hd; y += 16) {
			n = hd - y < 16 ? hd - y : 16;
			_mm512_mask_storeu_epi32(st->v + (size_t)i * st->hdp + y,
			    (__mmask16)(n < 16 ? (1u << n) - 1 : 0xffff),
			    pairs(sa ? load_n(va + (size_t)y * es, n, f16) : zero,
			    sb ? load_n(vb + (size_t)y * es, n, f16) : zero));
		}
	}
	if (x0 == 0 && tn == KT)
		return;
	for (d = 0; d < st->hd2; d++) {
		memset(st->k + (size_t)d * KT, 0, (size_t)x0 * sizeof(uint32_t));
		memset(st->k + (size_t)d * KT + tn, 0, (size_t)(KT - tn) *
		    sizeof(uint32_t));
	}
}

/* Floats of scratch for jobs of up to n_tok tokens of grp heads of hd. */
size_t
attn_bf16_scratch_floats(int n_tok, int grp, int hd)
{
	size_t	nq = (size_t)n_tok * grp, hdp = attn_lines(hd);
	size_t	hd2 = (hd + 1) / 2;

	return (16 + attn_lines(nq * hd2) + nq * hdp + attn_lines(nq) +
	    nq * 16 + attn_lines(hd2 * KT) + KP * hdp + RB * KT + RB * KP);
}

/* Run one attention job with bf16 products (see attn.h). */
void
attn_run_bf16(const struct attn_job *j, float *scratch)
{
	const int	 hd = (int)j->pool->layout.head_dim, grp = j->grp;
	const int	 nq = j->n_tok * grp;
	const uint32_t	 last = j->pos0 + j->n_tok - 1, win = j->win;
	struct bf_st	 st;
	uint32_t	 first, t0;
	int		 kt, tn, t, r, d;
	float		*f;

	st.j = j;
	st.hd = hd;
	st.hd2 = (hd + 1) / 2;
	st.hdp = (int)attn_lines(hd);
	f = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	st.q = (uint32_t *)f;
	st.o = f + attn_lines((size_t)nq * st.hd2);
	st.mx = st.o + (size_t)nq * st.hdp;
	st.ls = st.mx + attn_lines(nq);
	st.k = (uint32_t *)(st.ls + (size_t)nq * 16);
	st.v = st.k + attn_lines((size_t)st.hd2 * KT);
	st.s = (float *)(st.v + (size_t)KP * st.hdp);
	st.p = (uint32_t *)(st.s + (size_t)RB * KT);

	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++) {
			const float *q = j->q + (size_t)t * j->stride +
			    (size_t)r * hd;
			uint32_t *qs = st.q + (size_t)(t * grp + r) * st.hd2;

			qs[st.hd2 - 1] = 0;	/* an odd head_dim's pad */
			for (d = 0; d < hd; d += 16) {
				__mmask16 m = hd - d < 16 ?
				    (__mmask16)((1u << (hd - d)) - 1) : 0xffff;

				_mm256_mask_storeu_epi16((uint16_t *)qs + d, m,
				    (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(
				    _mm512_maskz_loadu_ps(m, q + d),
				    _mm512_set1_ps(j->qscale))));
			}
		}
	memset(st.o, 0, (size_t)nq * st.hdp * sizeof(float));
	memset(st.ls, 0, (size_t)nq * 16 * sizeof(float));
	for (r = 0; r < nq; r++)
		st.mx[r] = -INFINITY;
	/*
	 * Values past head_dim stay zero (gather writes an odd head_dim's
	 * last key pair, and the key slots outside, itself).
	 */
	if (st.hdp != hd)
		memset(st.v, 0, (size_t)KP * st.hdp * sizeof(uint32_t));

	first = win != 0 && j->pos0 + 1 > win ? j->pos0 + 1 - win : 0;
	for (kt = (int)(first / KT); kt <= (int)(last / KT); kt++) {
		t0 = (uint32_t)kt * KT;
		tn = last - t0 + 1 < KT ? (int)(last - t0 + 1) : KT;
		gather(&st, t0, first > t0 ? (int)(first - t0) : 0, tn);
		attn_prefetch_next(j, t0, last);
		attn_tile_rows(j, t0, rows_step, &st);
	}

	store_out(j, st.o, st.hdp, st.ls);
}
