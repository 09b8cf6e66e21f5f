/*
 * attn_avx2.c: attention over paged KV with AVX2, FlashAttention-style.
 *
 * The algorithm of attn_avx512.c with 256-bit vectors (see its header for
 * the whole story): a job is a tile of query tokens times the query heads
 * sharing one KV head (rows token-major: row = token * grp + head); the
 * keys are walked in tiles of ATTN_KEY_TILE positions aligned on multiples
 * of the tile, each converted to f32 once and used by every row; per tile
 * and per block of RB rows the scores are a register-blocked product, the
 * online softmax is stepped on the whole row of the tile, and the weighted
 * values are a second register-blocked product.
 *
 * Sixteen ymm registers do not hold a block of rows times a whole tile of
 * scores (eight vectors a row), so both products walk their output in
 * slices of two vectors: RB rows by QNV vectors of keys (scores) or DNV
 * vectors of head dimensions (values), plus the vectors loaded and one
 * broadcast, which leaves the accumulators independent chains enough to
 * keep both FMA pipes busy.
 *
 * Batch invariance, as in the AVX-512 kernel: every accumulator is one row
 * and one vector, started from zero (scores) or from the rescaled output
 * (values), and takes one fused multiply-add per head dimension or per key
 * in order; rows never mix; softmax steps fall on the fixed tile
 * boundaries; the eight-lane running sums are reduced in a fixed order at
 * the end.  Scores outside a row's keys (causal mask, sliding window) are
 * -inf and its weighted sum runs over its own keys only, so values it must
 * not see are never multiplied, not even by zero.
 */
#include "config.h"

#include "attn_avx2.h"

/* n (0..8) halves to floats at dst; F16C converts exactly. */
AI void
h2f_n(float *dst, const uint16_t *src, int n)
{
	uint16_t	h[8];
	float		f[8];

	if (n == 8) {
		_mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(
		    (const __m128i *)src)));
		return;
	}
	memset(h, 0, sizeof h);
	memcpy(h, src, (size_t)n * sizeof *h);
	_mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
	memcpy(dst, f, (size_t)n * sizeof *f);
}

/*
 * Keys and values of positions t0+x0..t0+tn-1 of job j into the f32 tiles
 * kt ([hd][KT]) and vt ([KT][hdp]), from the pages that hold them; the
 * other key slots are zeroed (never seen, but kept finite and normal), the
 * other value slots are left as they were.
 */
static void
gather(const struct attn_job *j, float *kt, float *vt, int hdp, uint32_t t0,
    int x0, int tn)
{
	const struct kv_pool	*pool = j->pool;
	const int		 bs = (int)pool->layout.block_size;
	const int		 hd = (int)pool->layout.head_dim;
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
				for (y = 0; y < len; y += 8) {
					n = len - y < 8 ? len - y : 8;
					h2f_n(kt + (size_t)d * KT + x + y,
					    kb + (size_t)d * bs + slot + y, n);
				}
			for (i = 0; i < len; i++)
				for (y = 0; y < hd; y += 8) {
					n = hd - y < 8 ? hd - y : 8;
					h2f_n(vt + (size_t)(x + i) * hdp + y,
					    vb + (size_t)(slot + i) * hd + y, n);
				}
		} else {
			const float *kb = kv_block_k(pool, blk, j->layer,
			    j->kv_head);
			const float *vb = kv_block_v(pool, blk, j->layer,
			    j->kv_head);

			for (d = 0; d < hd; d++)
				memcpy(kt + (size_t)d * KT + x, kb +
				    (size_t)d * bs + slot, (size_t)len *
				    sizeof(float));
			for (i = 0; i < len; i++)
				memcpy(vt + (size_t)(x + i) * hdp, vb +
				    (size_t)(slot + i) * hd, (size_t)hd *
				    sizeof(float));
		}
	}
	if (x0 > 0 || tn < KT)
		for (d = 0; d < hd; d++) {
			memset(kt + (size_t)d * KT, 0, (size_t)x0 *
			    sizeof(float));
			memset(kt + (size_t)d * KT + tn, 0,
			    (size_t)(KT - tn) * sizeof(float));
		}
}

/*
 * Scores of R rows (queries q, row stride hd) against key slots c0..c1-1
 * (multiples of 8 * QNV) of a key tile k laid out [hd][KT]: s[r][j] = sum
 * over d of q[r][d] k[d][j], one FMA per d in order, QNV vectors of keys at
 * a time.
 */
AI void
qk_rows(float *s, const float *q, int hd, const float *k, int c0, int c1,
    const int R)
{
	__m256		 acc[RB][QNV], kv[QNV];
	const float	*kd;
	int		 c, r, v, d;

	for (c = c0; c < c1; c += 8 * QNV) {
		UNROLL
		for (r = 0; r < R; r++)
			UNROLL
			for (v = 0; v < QNV; v++)
				acc[r][v] = _mm256_setzero_ps();
		for (d = 0; d < hd; d++) {
			kd = k + (size_t)d * KT + c;
			UNROLL
			for (v = 0; v < QNV; v++)
				kv[v] = _mm256_loadu_ps(kd + 8 * v);
			UNROLL
			for (r = 0; r < R; r++) {
				__m256 qb = _mm256_broadcast_ss(q +
				    (size_t)r * hd + d);

				UNROLL
				for (v = 0; v < QNV; v++)
					acc[r][v] = _mm256_fmadd_ps(qb, kv[v],
					    acc[r][v]);
			}
		}
		UNROLL
		for (r = 0; r < R; r++)
			UNROLL
			for (v = 0; v < QNV; v++)
				_mm256_storeu_ps(s + (size_t)r * KT + c + 8 * v,
				    acc[r][v]);
	}
}

/*
 * o[r] = o[r] * sc[r] + sum over j in lo..hi-1 of p[r][j] v[j] for R rows
 * and NV vectors of head dimensions (o row stride ostr, v row stride vstr),
 * one FMA per key in order.  sc is NULL when every factor is 1 (most tiles
 * after the first few), which skips multiplies that change no bits.
 */
AI void
pv_rows(float *o, int ostr, const float *p, const float *v, int vstr,
    int lo, int hi, const float *sc, const int R, const int NV)
{
	__m256		 acc[RB][DNV], vv[DNV];
	const float	*vj;
	int		 r, c, j;

	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (c = 0; c < NV; c++)
			acc[r][c] = _mm256_loadu_ps(o + (size_t)r * ostr + 8 * c);
	if (sc != NULL)
		UNROLL
		for (r = 0; r < R; r++) {
			__m256 s = _mm256_set1_ps(sc[r]);

			UNROLL
			for (c = 0; c < NV; c++)
				acc[r][c] = _mm256_mul_ps(acc[r][c], s);
		}
	for (j = lo; j < hi; j++) {
		vj = v + (size_t)j * vstr;
		UNROLL
		for (c = 0; c < NV; c++)
			vv[c] = _mm256_loadu_ps(vj + 8 * c);
		UNROLL
		for (r = 0; r < R; r++) {
			__m256 pb = _mm256_broadcast_ss(p + (size_t)r * KT + j);

			UNROLL
			for (c = 0; c < NV; c++)
				acc[r][c] = _mm256_fmadd_ps(pb, vv[c], acc[r][c]);
		}
	}
	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (c = 0; c < NV; c++)
			_mm256_storeu_ps(o + (size_t)r * ostr + 8 * c, acc[r][c]);
}

/* qk_rows for a block of 1..RB rows, each size compiled on its own. */
static void
qk_block(int R, float *s, const float *q, int hd, const float *k, int c0,
    int c1)
{
	switch (R) {
	case 1: qk_rows(s, q, hd, k, c0, c1, 1); break;
	case 2: qk_rows(s, q, hd, k, c0, c1, 2); break;
	case 3: qk_rows(s, q, hd, k, c0, c1, 3); break;
	case 4: qk_rows(s, q, hd, k, c0, c1, 4); break;
	case 5: qk_rows(s, q, hd, k, c0, c1, 5); break;
	default: qk_rows(s, q, hd, k, c0, c1, 6); break;
	}
}

#define PV_CASE(R)							\
	case R:								\
		if (NV == 1)						\
			pv_rows(o, ostr, p, v, vstr, lo, hi, sc, R, 1);	\
		else							\
			pv_rows(o, ostr, p, v, vstr, lo, hi, sc, R, 2);	\
		break

/* pv_rows for 1..RB rows and 1..DNV vectors, each shape compiled on its own. */
static void
pv_block(int R, int NV, float *o, int ostr, const float *p, const float *v,
    int vstr, int lo, int hi, const float *sc)
{
	switch (R) {
	PV_CASE(1);
	PV_CASE(2);
	PV_CASE(3);
	PV_CASE(4);
	PV_CASE(5);
	default:
	PV_CASE(6);
	}
}


/* The working state of one job. */
struct attn_st {
	const struct attn_job	*j;
	int			 hd, hdp;
	float			*q;	/* rows x hd, scaled */
	float			*o;	/* rows x hdp */
	float			*mx;	/* rows */
	float			*ls;	/* rows x 8 */
	float			*k;	/* hd x KT */
	float			*v;	/* KT x hdp */
	float			*s;	/* RB x KT */
	float			 sc[RB];
};

/*
 * Step nr rows from row r0, all with keys lo..hi-1 of the current tile.
 * Scores are computed only for the slices of keys that hold some of
 * lo..hi-1 (softmax_rows masks the rest, whatever is left in s).  The last
 * two blocks share their rows evenly: a block of one or two rows keeps too
 * few accumulators in flight to cover the FMA latency (grp 8 runs as 4 + 4,
 * not 6 + 2).
 */
static void
rows_step(void *arg, int r0, int nr, int lo, int hi)
{
	struct attn_st	*st = arg;
	const int	 hd = st->hd, hdp = st->hdp;
	const int	 c0 = lo & ~(8 * QNV - 1);
	const int	 c1 = (hi + 8 * QNV - 1) & ~(8 * QNV - 1);
	const float	*sc;
	int		 b, R, c, NV, r, left;

	for (b = r0; b < r0 + nr; b += R) {
		left = r0 + nr - b;
		R = left <= RB ? left : left < 2 * RB ? (left + 1) / 2 : RB;
		qk_block(R, st->s, st->q + (size_t)b * hd, hd, st->k, c0, c1);
		softmax_rows(R, st->s, lo, hi, st->j->cap, st->mx + b,
		    st->ls + (size_t)8 * b, st->sc);
		sc = NULL;
		for (r = 0; r < R; r++)
			if (st->sc[r] != 1.0f)
				sc = st->sc;
		for (c = 0; c < hdp; c += 8 * DNV) {
			NV = (hdp - c) / 8 < DNV ? (hdp - c) / 8 : DNV;
			pv_block(R, NV, st->o + (size_t)b * hdp + c, hdp, st->s,
			    st->v + c, hdp, lo, hi, sc);
		}
	}
}

/* Floats of scratch for jobs of up to n_tok tokens of grp heads of hd. */
size_t
attn_avx2_scratch_floats(int n_tok, int grp, int hd)
{
	size_t	nq = (size_t)n_tok * grp, hdp = vecs(hd);

	return (16 + attn_lines(nq * hd) + attn_lines(nq * hdp) +
	    attn_lines(nq) + attn_lines(nq * 8) + attn_lines((size_t)hd * KT) +
	    attn_lines(KT * hdp) + RB * KT);
}

/* Run one attention job (see attn.h). */
void
attn_run_avx2(const struct attn_job *j, float *scratch)
{
	const int	 hd = (int)j->pool->layout.head_dim, grp = j->grp;
	const int	 nq = j->n_tok * grp;
	const uint32_t	 last = j->pos0 + j->n_tok - 1, win = j->win;
	struct attn_st	 st;
	uint32_t	 first, t0;
	int		 kt, tn, t, r;
	float		*f;

	st.j = j;
	st.hd = hd;
	st.hdp = (int)vecs(hd);
	f = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	st.q = f;
	st.o = st.q + attn_lines((size_t)nq * hd);
	st.mx = st.o + attn_lines((size_t)nq * st.hdp);
	st.ls = st.mx + attn_lines(nq);
	st.k = st.ls + attn_lines((size_t)nq * 8);
	st.v = st.k + attn_lines((size_t)hd * KT);
	st.s = st.v + attn_lines((size_t)KT * st.hdp);

	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++)
			scaled_query(j, t, r, st.q + (size_t)(t * grp + r) * hd);
	memset(st.o, 0, (size_t)nq * st.hdp * sizeof(float));
	memset(st.ls, 0, (size_t)nq * 8 * sizeof(float));
	for (r = 0; r < nq; r++)
		st.mx[r] = -INFINITY;
	if (st.hdp != hd)	/* padding lanes of the values stay zero */
		memset(st.v, 0, (size_t)KT * st.hdp * sizeof(float));

	first = win != 0 && j->pos0 + 1 > win ? j->pos0 + 1 - win : 0;
	for (kt = (int)(first / KT); kt <= (int)(last / KT); kt++) {
		t0 = (uint32_t)kt * KT;
		tn = last - t0 + 1 < KT ? (int)(last - t0 + 1) : KT;
		gather(j, st.k, st.v, st.hdp, t0, first > t0 ?
		    (int)(first - t0) : 0, tn);
		attn_prefetch_next(j, t0, last);
		attn_tile_rows(j, t0, rows_step, &st);
	}

	store_out(j, st.o, st.hdp, st.ls);
}
