/*
 * attn_avx512.c: attention over paged KV with AVX-512, FlashAttention-style.
 *
 * A job is a tile of query tokens times the query heads sharing one KV head
 * (rows token-major: row = token * grp + head).  The keys are walked in
 * tiles of ATTN_KEY_TILE positions aligned on multiples of the tile; each
 * tile's keys and values are converted to f32 once, from however many pages
 * hold them, and then used by every row.  Per tile and per block of RB rows
 * the scores are a small register-blocked product (RB rows by the tile's
 * keys, summed along head_dim), the online softmax is stepped (new maximum,
 * rescale, e^x on the whole row), and the weighted values are a second
 * register-blocked product (RB rows by head_dim, summed along the keys).
 *
 * Batch invariance: a row's accumulators start from zero and take one fused
 * multiply-add per head dimension (scores) or per key (values), in order;
 * rows never mix, so the block a row falls in, its place in the block and
 * the job it belongs to change nothing.  The softmax steps fall on the fixed
 * tile boundaries.  A row whose keys end (its own position, the causal
 * mask) or start (a sliding window) inside a tile masks the other scores to
 * -inf, and its weighted sum runs only over its own keys, so values it must
 * not see are never multiplied, not even by zero.  Tiles wholly outside a
 * row's keys are skipped for it.
 */
#include "config.h"

#include <string.h>

#include "attn_avx512.h"

/*
 * Scores of R rows (queries q, row stride hd) against a key tile k laid out
 * [hd][KT]: s[r][j] = sum over d of q[r][d] k[d][j], one FMA per d in order.
 */
AI void
qk_rows(float *s, const float *q, int hd, const float *k, const int R)
{
	__m512		 acc[RB][KVEC], kv[KVEC];
	const float	*kd;
	int		 r, v, d;

	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (v = 0; v < KVEC; v++)
			acc[r][v] = _mm512_setzero_ps();
	for (d = 0; d < hd; d++) {
		kd = k + (size_t)d * KT;
		UNROLL
		for (v = 0; v < KVEC; v++)
			kv[v] = _mm512_loadu_ps(kd + 16 * v);
		UNROLL
		for (r = 0; r < R; r++) {
			__m512 qb = _mm512_set1_ps(q[(size_t)r * hd + d]);

			UNROLL
			for (v = 0; v < KVEC; v++)
				acc[r][v] = _mm512_fmadd_ps(qb, kv[v], acc[r][v]);
		}
	}
	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (v = 0; v < KVEC; v++)
			_mm512_storeu_ps(s + (size_t)r * KT + 16 * v, acc[r][v]);
}

/*
 * o[r] = o[r] * sc[r] + sum over j in lo..hi-1 of p[r][j] v[j] for R rows
 * and NV vectors of head dimensions (o row stride ostr, v row stride vstr),
 * one FMA per key in order.
 */
AI void
pv_rows(float *o, int ostr, const float *p, const float *v, int vstr,
    int lo, int hi, const float *sc, const int R, const int NV)
{
	__m512		 acc[RB][DCH], vv[DCH];
	const float	*vj;
	int		 r, c, j;

	UNROLL
	for (r = 0; r < R; r++) {
		__m512 s = _mm512_set1_ps(sc[r]);

		UNROLL
		for (c = 0; c < NV; c++)
			acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o +
			    (size_t)r * ostr + 16 * c), s);
	}
	for (j = lo; j < hi; j++) {
		vj = v + (size_t)j * vstr;
		UNROLL
		for (c = 0; c < NV; c++)
			vv[c] = _mm512_loadu_ps(vj + 16 * c);
		UNROLL
		for (r = 0; r < R; r++) {
			__m512 pb = _mm512_set1_ps(p[(size_t)r * KT + j]);

			UNROLL
			for (c = 0; c < NV; c++)
				acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
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
qk_block(int R, float *s, const float *q, int hd, const float *k)
{
	QK_SWITCH(R, s, q, hd, k);
}

/* pv_rows for 1..RB rows and 1..DCH vectors, each shape compiled on its own. */
static void
pv_block(int R, int NV, float *o, int ostr, const float *p, const float *v,
    int vstr, int lo, int hi, const float *sc)
{
	PV_SWITCH(R, NV);
}

/* The working state of one job. */
struct attn_st {
	const struct attn_job	*j;
	int			 hd, hdp;
	float			*q;	/* rows x hd, scaled */
	float			*o;	/* rows x hdp */
	float			*mx;	/* rows */
	float			*ls;	/* rows x 16 */
	float			*k;	/* hd x KT */
	float			*v;	/* KT x hdp */
	float			*s;	/* RB x KT */
	float			 sc[RB];
};

/* Step nr rows from row r0, all with keys lo..hi-1 of the current tile. */
static void
rows_step(void *arg, int r0, int nr, int lo, int hi)
{
	struct attn_st	*st = arg;
	const int	hd = st->hd, hdp = st->hdp;
	int		b, R, c, NV;

	for (b = r0; b < r0 + nr; b += R) {
		R = r0 + nr - b < RB ? r0 + nr - b : RB;
		qk_block(R, st->s, st->q + (size_t)b * hd, hd, st->k);
		softmax_rows(R, st->s, lo, hi, st->j->cap, st->mx + b,
		    st->ls + (size_t)16 * b, st->sc);
		for (c = 0; c < hdp; c += 16 * DCH) {
			NV = (hdp - c) / 16 < DCH ? (hdp - c) / 16 : DCH;
			pv_block(R, NV, st->o + (size_t)b * hdp + c, hdp, st->s,
			    st->v + c, hdp, lo, hi, st->sc);
		}
	}
}

/* n (0..16) halves to floats at dst. */
AI void
h2f_n(float *dst, const uint16_t *src, int n)
{
	__mmask16 m = (__mmask16)((1u << n) - 1);

	_mm512_mask_storeu_ps(dst, m,
	    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src)));
}

/* n (0..16) floats from src to dst. */
AI void
f2f_n(float *dst, const float *src, int n)
{
	__mmask16 m = (__mmask16)((1u << n) - 1);

	_mm512_mask_storeu_ps(dst, m, _mm512_maskz_loadu_ps(m, src));
}

/*
 * Keys and values of positions t0+x0..t0+tn-1 into the f32 tiles, from the
 * pages that hold them; the other key slots are zeroed (never seen, but
 * kept finite and normal).
 */
static void
gather(struct attn_st *st, uint32_t t0, int x0, int tn)
{
	const struct attn_job	*j = st->j;
	const struct kv_pool	*pool = j->pool;
	const int		 bs = (int)pool->layout.block_size, hd = st->hd;
	const int		 f16 = pool->layout.type == KV_TYPE_F16;
	uint32_t		 p, blk;
	int			 x, len, slot, d, y, n, i;

	for (x = x0; x < tn; x += len) {
		p = t0 + (uint32_t)x;
		blk = j->blocks[p / bs];
		slot = (int)(p % bs);
		len = bs - slot < tn - x ? bs - slot : tn - x;
		if (f16) {
			const uint16_t *kb = kv_block_k(pool, blk, j->layer,
			    j->kv_head);
			const uint16_t *vb = kv_block_v(pool, blk, j->layer,
			    j->kv_head);

			for (d = 0; d < hd; d++)
				for (y = 0; y < len; y += 16) {
					n = len - y < 16 ? len - y : 16;
					h2f_n(st->k + (size_t)d * KT + x + y,
					    kb + (size_t)d * bs + slot + y, n);
				}
			for (i = 0; i < len; i++)
				for (y = 0; y < hd; y += 16) {
					n = hd - y < 16 ? hd - y : 16;
					h2f_n(st->v + (size_t)(x + i) * st->hdp + y,
					    vb + (size_t)(slot + i) * hd + y, n);
				}
		} else {
			const float *kb = kv_block_k(pool, blk, j->layer,
			    j->kv_head);
			const float *vb = kv_block_v(pool, blk, j->layer,
			    j->kv_head);

			for (d = 0; d < hd; d++)
				for (y = 0; y < len; y += 16) {
					n = len - y < 16 ? len - y : 16;
					f2f_n(st->k + (size_t)d * KT + x + y,
					    kb + (size_t)d * bs + slot + y, n);
				}
			for (i = 0; i < len; i++)
				for (y = 0; y < hd; y += 16) {
					n = hd - y < 16 ? hd - y : 16;
					f2f_n(st->v + (size_t)(x + i) * st->hdp + y,
					    vb + (size_t)(slot + i) * hd + y, n);
				}
		}
	}
	if (x0 > 0 || tn < KT)
		for (d = 0; d < hd; d++) {
			memset(st->k + (size_t)d * KT, 0, (size_t)x0 *
			    sizeof(float));
			memset(st->k + (size_t)d * KT + tn, 0,
			    (size_t)(KT - tn) * sizeof(float));
		}
}

/* Floats of scratch for jobs of up to n_tok tokens of grp heads of hd. */
size_t
attn_avx512_scratch_floats(int n_tok, int grp, int hd)
{
	size_t	nq = (size_t)n_tok * grp, hdp = attn_lines(hd);

	return (16 + attn_lines(nq * hd) + nq * hdp + attn_lines(nq) +
	    nq * 16 + attn_lines((size_t)hd * KT) + KT * hdp + RB * KT);
}

/* Run one attention job (see attn.h). */
void
attn_run_avx512(const struct attn_job *j, float *scratch)
{
	const int	 hd = (int)j->pool->layout.head_dim, grp = j->grp;
	const int	 nq = j->n_tok * grp;
	const uint32_t	 last = j->pos0 + j->n_tok - 1, win = j->win;
	struct attn_st	 st;
	uint32_t	 first, t0;
	int		 kt, tn, t, r, d;
	float		*f;

	st.j = j;
	st.hd = hd;
	st.hdp = (int)attn_lines(hd);
	f = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	st.q = f;
	st.o = st.q + attn_lines((size_t)nq * hd);
	st.mx = st.o + (size_t)nq * st.hdp;
	st.ls = st.mx + attn_lines(nq);
	st.k = st.ls + (size_t)nq * 16;
	st.v = st.k + attn_lines((size_t)hd * KT);
	st.s = st.v + (size_t)KT * st.hdp;

	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++) {
			const float *q = j->q + (size_t)t * j->stride +
			    (size_t)r * hd;
			float *qs = st.q + (size_t)(t * grp + r) * hd;

			for (d = 0; d < hd; d += 16) {
				__mmask16 m = hd - d < 16 ?
				    (__mmask16)((1u << (hd - d)) - 1) : 0xffff;

				_mm512_mask_storeu_ps(qs + d, m, _mm512_mul_ps(
				    _mm512_maskz_loadu_ps(m, q + d),
				    _mm512_set1_ps(j->qscale)));
			}
		}
	memset(st.o, 0, (size_t)nq * st.hdp * sizeof(float));
	memset(st.ls, 0, (size_t)nq * 16 * sizeof(float));
	for (r = 0; r < nq; r++)
		st.mx[r] = -INFINITY;
	if (st.hdp != hd)	/* padding lanes of the values stay zero */
		memset(st.v, 0, (size_t)KT * st.hdp * sizeof(float));

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
