/*
 * attn_i16.c: attention over paged KV with AVX2 16-bit integer products.
 *
 * The algorithm of attn_avx2.c (the same key tiles, rows, online softmax
 * steps and so the same batch invariance) with both products on vpmaddwd,
 * which multiplies sixteen pairs of 16-bit integers and adds each pair
 * into a 32-bit lane: with its vpaddd, twice the products of an f32
 * multiply-add for the same issue slots, where the CPU has two pipes for
 * it.  The operands become integer codes with a scale each:
 *
 *   - a scaled query row: codes of its largest |q| at qmax, one scale;
 *   - a key: codes of its largest |k| over head_dim at qmax, one scale;
 *     so a score is sum(code q x code k) x scale q x scale k, the integer
 *     sum exact;
 *   - a value: codes of its largest |v| over head_dim at PV_MAX, one
 *     scale, which moves onto its softmax weight: w = e^(s - max) x scale
 *     v, and the weights of a row in a tile are codes of their largest at
 *     PV_MAX with one scale.
 *
 * qmax is the largest code that keeps head_dim products in a 32-bit lane:
 * about 12.5 bits for head_dim 64, 12 for 128, 11.5 for 256; PV_MAX keeps
 * a tile's 64.  Each code is within half a unit of its value, so a score
 * is off by at most about head_dim x 2^-12 of its operands' largest
 * products, far less than the 8-bit activations of a quantized model's
 * matrices move it (the only models this kernel serves by default).  The
 * softmax runs in f32 on the scores, and its sums too; only the weights
 * that multiply the values are rounded.
 *
 * A score sums pairs of head dimensions: the key tile is laid out [hd / 2]
 * [KT] of (dimension 2i, 2i + 1) pairs, the queries as pairs in their
 * natural order.  A weighted value sums pairs of keys: the value tile is
 * laid out [KT / 2][hd] of (key 2i, 2i + 1) pairs, the weights as pairs in
 * their natural order; a pair that holds a key a row must not see
 * multiplies it by a weight of exactly 0, whatever the key's code.
 *
 * The kernel reads KV_TYPE_I16 pools only (kvcache.h), whose pages hold
 * the keys and values as these codes already, in these pairs, with a
 * head_dim of whole vectors: a tile is copied from them eight keys at a
 * time, not converted (a decode step's eight rows of a KV head do too few
 * products per tile to pay for encoding it).
 */
#include "config.h"

#include "attn_avx2.h"
#include "avx2_tile.h"

#define KP	(KT / 2)	/* key pairs per tile */
/*
 * Rows per register block: vpmaddwd does not accumulate, so each product
 * needs a register of its own before its vpaddd: with RB rows the sixteen
 * ymm registers spill.
 */
#define IRB	4
/* The largest weight and value code: KT products of both fit in 31 bits. */
#define PV_MAX	KV_I16_VMAX

/*
 * Scores of R rows (query pairs q with scales qd, hd2 pairs a row) against
 * key slots c0..c1-1 (multiples of 8 * QNV) of a pair tile k with scales
 * kd: s[r][j] = (sum over pairs i of q[r][i] . k[i][j]) x (qd[r] x kd[j]).
 */
AI void
qk_rows(float *s, const uint32_t *q, const float *qd, int hd2,
    const uint32_t *k, const float *kd, int c0, int c1, const int R)
{
	__m256i		 acc[IRB][QNV], kv[QNV];
	const uint32_t	*ki;
	int		 c, r, v, i;

	for (c = c0; c < c1; c += 8 * QNV) {
		UNROLL
		for (r = 0; r < R; r++)
			UNROLL
			for (v = 0; v < QNV; v++)
				acc[r][v] = _mm256_setzero_si256();
		for (i = 0; i < hd2; i++) {
			ki = k + (size_t)i * KT + c;
			UNROLL
			for (v = 0; v < QNV; v++)
				kv[v] = _mm256_loadu_si256((const __m256i *)(ki +
				    8 * v));
			UNROLL
			for (r = 0; r < R; r++) {
				__m256i qb = _mm256_set1_epi32((int)q[(size_t)r *
				    hd2 + i]);

				UNROLL
				for (v = 0; v < QNV; v++)
					acc[r][v] = avx2_chain(_mm256_add_epi32(
					    _mm256_madd_epi16(qb, kv[v]), acc[r][v]));
			}
		}
		UNROLL
		for (r = 0; r < R; r++) {
			__m256 qs = _mm256_set1_ps(qd[r]);

			UNROLL
			for (v = 0; v < QNV; v++)
				_mm256_storeu_ps(s + (size_t)r * KT + c + 8 * v,
				    _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][v]),
				    _mm256_mul_ps(qs, _mm256_loadu_ps(kd + c +
				    8 * v))));
		}
	}
}

/*
 * o[r] = o[r] x sc[r] + pd[r] x (sum over key pairs i in lo2..hi2-1 of
 * p[r][i] . v[i]) for R rows (weight pairs p, KP a row, scales pd) and NV
 * vectors of head dimensions (o row stride ostr, v row stride vstr).  sc
 * is NULL when every factor is 1.
 */
AI void
pv_rows(float *o, int ostr, const uint32_t *p, const float *pd,
    const uint32_t *v, int vstr, int lo2, int hi2, const float *sc,
    const int R, const int NV)
{
	__m256i		 acc[IRB][DNV], vv[DNV];
	const uint32_t	*vi;
	int		 r, c, i;

	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (c = 0; c < NV; c++)
			acc[r][c] = _mm256_setzero_si256();
	for (i = lo2; i < hi2; i++) {
		vi = v + (size_t)i * vstr;
		UNROLL
		for (c = 0; c < NV; c++)
			vv[c] = _mm256_loadu_si256((const __m256i *)(vi + 8 * c));
		UNROLL
		for (r = 0; r < R; r++) {
			__m256i pb = _mm256_set1_epi32((int)p[(size_t)r * KP + i]);

			UNROLL
			for (c = 0; c < NV; c++)
				acc[r][c] = avx2_chain(_mm256_add_epi32(
				    _mm256_madd_epi16(pb, vv[c]), acc[r][c]));
		}
	}
	UNROLL
	for (r = 0; r < R; r++) {
		__m256 ps = _mm256_set1_ps(pd[r]);

		UNROLL
		for (c = 0; c < NV; c++) {
			__m256 x = _mm256_loadu_ps(o + (size_t)r * ostr + 8 * c);

			if (sc != NULL)
				x = _mm256_mul_ps(x, _mm256_set1_ps(sc[r]));
			_mm256_storeu_ps(o + (size_t)r * ostr + 8 * c,
			    _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][c]), ps, x));
		}
	}
}

/* qk_rows for a block of 1..IRB rows, each size compiled on its own. */
static void
qk_block(int R, float *s, const uint32_t *q, const float *qd, int hd2,
    const uint32_t *k, const float *kd, int c0, int c1)
{
	switch (R) {
	case 1: qk_rows(s, q, qd, hd2, k, kd, c0, c1, 1); break;
	case 2: qk_rows(s, q, qd, hd2, k, kd, c0, c1, 2); break;
	case 3: qk_rows(s, q, qd, hd2, k, kd, c0, c1, 3); break;
	default: qk_rows(s, q, qd, hd2, k, kd, c0, c1, 4); break;
	}
}

#define PV_CASE(R)							\
	case R:								\
		if (NV == 1)						\
			pv_rows(o, ostr, p, pd, v, vstr, lo2, hi2, sc, R, 1); \
		else							\
			pv_rows(o, ostr, p, pd, v, vstr, lo2, hi2, sc, R, 2); \
		break

/* pv_rows for 1..IRB rows and 1..DNV vectors, each shape compiled on its own. */
static void
pv_block(int R, int NV, float *o, int ostr, const uint32_t *p, const float *pd,
    const uint32_t *v, int vstr, int lo2, int hi2, const float *sc)
{
	switch (R) {
	PV_CASE(1);
	PV_CASE(2);
	PV_CASE(3);
	default:
	PV_CASE(4);
	}
}

/* Codes of eight floats x times inv, rounded to nearest (ties to even). */
AI __m256i
codes8(__m256 x, __m256 inv)
{
	return (_mm256_cvtps_epi32(_mm256_mul_ps(x, inv)));
}

/*
 * code max over the largest of |m| where m > 0, else 0 (a slot without a
 * key or an all-zero vector keeps codes 0 and scale 0, never a NaN).
 */
AI __m256
inv8(__m256 m, float max)
{
	return (_mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(max), m),
	    _mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GT_OQ)));
}

/* |x| of eight floats. */
AI __m256
abs8(__m256 x)
{
	return (_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x));
}

/*
 * The weights of R rows of s (stride KT, e^(s - max) on keys lo..hi-1 of
 * the vectors that hold them, 0 on the others of those vectors) times the
 * values' scales vd, as codes of each row's largest at PV_MAX: pairs at p
 * (KP a row) and scales at pd.  A weight of 0 stays 0 whatever the scale
 * beside it: slots outside the positions may hold any, a NaN among them.
 */
static void
weights_i16(int R, const float *s, const float *vd, int lo, int hi,
    uint32_t *p, float *pd)
{
	const int	 v0 = lo / 8, v1 = (hi + 7) / 8;
	__m256		 w[KVEC], m, inv, x;
	__m256i		 c;
	float		 mx;
	int		 r, v;

	for (r = 0; r < R; r++) {
		m = _mm256_setzero_ps();
		for (v = v0; v < v1; v++) {
			x = _mm256_loadu_ps(s + (size_t)r * KT + 8 * v);
			w[v] = _mm256_mul_ps(x, _mm256_loadu_ps(vd + 8 * v));
			/* Only keys in lo..hi have weights, and none is 0. */
			if (lo > 8 * v || hi < 8 * v + 8)
				w[v] = _mm256_and_ps(w[v], _mm256_cmp_ps(x,
				    _mm256_setzero_ps(), _CMP_NEQ_UQ));
			m = _mm256_max_ps(m, abs8(w[v]));
		}
		mx = hmax8(m);
		pd[r] = mx / PV_MAX;
		inv = inv8(_mm256_set1_ps(mx), PV_MAX);
		for (v = v0; v < v1; v++) {
			c = codes8(w[v], inv);
			/* Codes 0..3 | 4..7 of each half, then the two halves. */
			c = _mm256_permute4x64_epi64(_mm256_packs_epi32(c, c), 0x08);
			_mm_storeu_si128((__m128i *)(p + (size_t)r * KP + 4 * v),
			    _mm256_castsi256_si128(c));
		}
	}
}

/* The working state of one job. */
struct i16_st {
	const struct attn_job	*j;
	int			 hd, hd2;
	uint32_t		*q;	/* rows x hd2 pairs */
	float			*qd;	/* rows: the queries' scales */
	float			*o;	/* rows x hd */
	float			*mx;	/* rows */
	float			*ls;	/* rows x 8 */
	uint32_t		*k;	/* hd2 x KT pairs */
	float			*kd;	/* KT: the keys' scales */
	uint32_t		*v;	/* KP x hd pairs */
	float			*vd;	/* KT: the values' scales */
	float			*s;	/* IRB x KT */
	uint32_t		*p;	/* IRB x KP pairs */
	float			 pd[IRB];
	float			 sc[IRB];
};

/* Step nr rows from row r0, all with keys lo..hi-1 of the current tile. */
static void
rows_step(void *arg, int r0, int nr, int lo, int hi)
{
	struct i16_st	*st = arg;
	const int	 hd2 = st->hd2, hd = st->hd;
	const int	 c0 = lo & ~(8 * QNV - 1);
	const int	 c1 = (hi + 8 * QNV - 1) & ~(8 * QNV - 1);
	const float	*sc;
	int		 b, R, c, NV, r, left;

	for (b = r0; b < r0 + nr; b += R) {
		left = r0 + nr - b;
		R = left <= IRB ? left : left < 2 * IRB ? (left + 1) / 2 : IRB;
		qk_block(R, st->s, st->q + (size_t)b * hd2, st->qd + b, hd2,
		    st->k, st->kd, c0, c1);
		softmax_rows(R, st->s, lo, hi, st->j->cap, st->mx + b,
		    st->ls + (size_t)8 * b, st->sc);
		weights_i16(R, st->s, st->vd, lo, hi, st->p, st->pd);
		sc = NULL;
		for (r = 0; r < R; r++)
			if (st->sc[r] != 1.0f)
				sc = st->sc;
		for (c = 0; c < hd; c += 8 * DNV) {
			NV = (hd - c) / 8 < DNV ? (hd - c) / 8 : DNV;
			pv_block(R, NV, st->o + (size_t)b * hd + c, hd, st->p,
			    st->pd, st->v + c, hd, lo / 2, (hi + 1) / 2, sc);
		}
	}
}

/* Copy n 32-byte vectors from src to dst. */
AI void
copy_vecs(void *dst, const void *src, int n)
{
	int	i;

	for (i = 0; i < n; i++)
		_mm256_storeu_si256((__m256i *)dst + i, _mm256_loadu_si256(
		    (const __m256i *)src + i));
}

/*
 * The code tiles of positions t0+x0..t0+tn-1 from an I16 pool's pages
 * (kvcache.h), whose layout is the tiles': key pairs into k with their
 * scales kd, value pairs into v with vd, eight keys at a time (keys j..j+7,
 * j a multiple of 8 as t0 and block_size are, lie in one page).  Slots of
 * those eights outside the positions bring whatever their page holds, and
 * the other eights keep what they held: their scores are masked and their
 * weights are 0.
 */
static void
gather_codes(struct i16_st *st, uint32_t t0, int x0, int tn)
{
	const struct attn_job	*j = st->j;
	const struct kv_pool	*pool = j->pool;
	const uint32_t		 bs = pool->layout.block_size;
	const int		 hd = st->hd, hd2 = st->hd2;
	const uint32_t		*kb, *vb;
	uint32_t		 p, blk, slot;
	int			 x, i;

	for (x = x0 & ~7; x < tn; x += 8) {
		p = t0 + (uint32_t)x;
		blk = j->blocks[p / bs];
		slot = p % bs;
		kb = (const uint32_t *)kv_block_k(pool, blk, j->layer,
		    j->kv_head) + slot;
		vb = (const uint32_t *)kv_block_v(pool, blk, j->layer,
		    j->kv_head) + (size_t)slot / 2 * hd;
		for (i = 0; i < hd2; i++)
			copy_vecs(st->k + (size_t)i * KT + x,
			    kb + (size_t)i * bs, 1);
		copy_vecs(st->kd + x, kv_block_kscale(pool, blk, j->layer,
		    j->kv_head) + slot, 1);
		copy_vecs(st->vd + x, kv_block_vscale(pool, blk, j->layer,
		    j->kv_head) + slot, 1);
		copy_vecs(st->v + (size_t)x / 2 * hd, vb, hd / 2);
	}
}

/* Round a count of 32-bit elements up to whole 64-byte lines. */
#define LN(n)	attn_lines((size_t)(n))

/* Floats of scratch for jobs of up to n_tok tokens of grp heads of hd. */
size_t
attn_i16_scratch_floats(int n_tok, int grp, int hd)
{
	size_t	nq = (size_t)n_tok * grp, hdp = vecs(hd), hd2 = hdp / 2;

	return (16 + LN(nq * hd2) + LN(nq) + LN(nq * hdp) + LN(nq) +
	    LN(nq * 8) + LN(hd2 * KT) + LN(KT) + LN(KP * hdp) + LN(KT) +
	    LN(IRB * KT) + LN(IRB * KP) + LN(hdp));
}

/* Run one attention job with 16-bit integer products (see attn.h). */
void
attn_run_i16(const struct attn_job *j, float *scratch)
{
	const int	 hd = (int)j->pool->layout.head_dim, grp = j->grp;
	const int	 nq = j->n_tok * grp;
	const uint32_t	 last = j->pos0 + j->n_tok - 1, win = j->win;
	struct i16_st	 st;
	uint32_t	 first, t0;
	int		 kt, tn, t, r, d, qmax, x0;
	float		*f, *qs, mx;
	int16_t		*qc;
	__m256		 m, inv;

	st.j = j;
	st.hd = hd;
	st.hd2 = hd / 2;
	qmax = j->pool->i16_kmax;
	f = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	st.q = (uint32_t *)f;
	st.qd = f + LN(nq * st.hd2);
	st.o = st.qd + LN(nq);
	st.mx = st.o + LN(nq * hd);
	st.ls = st.mx + LN(nq);
	st.k = (uint32_t *)(st.ls + LN(nq * 8));
	st.kd = (float *)(st.k + LN(st.hd2 * KT));
	st.v = (uint32_t *)(st.kd + LN(KT));
	st.vd = (float *)(st.v + LN(KP * hd));
	st.s = st.vd + LN(KT);
	st.p = (uint32_t *)(st.s + LN(IRB * KT));
	qs = (float *)(st.p + LN(IRB * KP));

	/* Each row's scaled query as codes of its largest |q| at qmax. */
	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++) {
			const int qi = t * grp + r;

			scaled_query(j, t, r, qs);
			m = _mm256_setzero_ps();
			for (d = 0; d < hd; d += 8)
				m = _mm256_max_ps(m, abs8(_mm256_loadu_ps(qs + d)));
			mx = hmax8(m);
			st.qd[qi] = mx / (float)qmax;
			inv = inv8(_mm256_set1_ps(mx), (float)qmax);
			qc = (int16_t *)(st.q + (size_t)qi * st.hd2);
			for (d = 0; d < hd; d += 8) {
				__m256i c = _mm256_permute4x64_epi64(
				    _mm256_packs_epi32(codes8(_mm256_loadu_ps(qs +
				    d), inv), _mm256_setzero_si256()), 0x08);

				_mm_storeu_si128((__m128i *)(qc + d),
				    _mm256_castsi256_si128(c));
			}
		}
	memset(st.o, 0, (size_t)nq * hd * sizeof(float));
	memset(st.ls, 0, (size_t)nq * 8 * sizeof(float));
	for (r = 0; r < nq; r++)
		st.mx[r] = -INFINITY;

	first = win != 0 && j->pos0 + 1 > win ? j->pos0 + 1 - win : 0;
	for (kt = (int)(first / KT); kt <= (int)(last / KT); kt++) {
		t0 = (uint32_t)kt * KT;
		tn = last - t0 + 1 < KT ? (int)(last - t0 + 1) : KT;
		x0 = first > t0 ? (int)(first - t0) : 0;
		gather_codes(&st, t0, x0, tn);
		attn_prefetch_next(j, t0, last);
		attn_tile_rows(j, t0, rows_step, &st);
	}

	store_out(j, st.o, hd, st.ls);
}
