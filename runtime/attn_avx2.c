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

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn.h"

#define KT	ATTN_KEY_TILE
#define KVEC	(KT / 8)	/* vectors of scores per row */
#define RB	6		/* rows per register block */
#define QNV	2		/* vectors of keys per score pass */
#define DNV	2		/* vectors of head_dim per value pass */

#define AI	static inline __attribute__((always_inline))
/* Loops over a block's rows and vectors unrolled, so they live in registers. */
#define UNROLL	_Pragma("GCC unroll 16")

/*
 * e^x for eight x <= 0: x = n ln 2 + r, |r| <= ln 2 / 2, and e^r = 1 + r q(r)
 * with the degree-5 polynomial of exp16 in attn_avx512.c.  The two FMA
 * pipes are what the softmax waits on, so the reduction is lean: x log2 e
 * is rounded to the integer n by adding 1.5 * 2^23 in the same FMA (the
 * sum's low mantissa bits then hold n, ready to shift), and r = x - n ln 2
 * is one FMA with ln 2 rounded to a float (an error of at most n * 1.9e-9
 * in r), which keeps the result within 2.8e-7 of e^x for x >= -20 and
 * 4.6e-7 down to -87.  AVX2 has no scalef, so 2^n goes into the exponent
 * bits: n << 23 added to e^r's.  The clamp at -87 keeps that exact:
 * n >= -126 and then r > 0, so e^r >= 1 and the sum stays a normal float
 * (e^-87 is about 1.6e-38); -inf, NaN and huge negative differences never
 * reach the reduction.  Callers zero the lanes that must be exactly 0.
 */
AI __m256
exp8(__m256 x)
{
	const __m256	magic = _mm256_set1_ps(12582912.0f);	/* 1.5 * 2^23 */
	__m256		t, n, r, p;
	__m256i		e;

	x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
	t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f), magic);
	n = _mm256_sub_ps(t, magic);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182464599609f), x);
	p = _mm256_set1_ps(0.008363774046301842f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.04187985509634018f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.16666573286056519f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.4999934732913971f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	e = _mm256_slli_epi32(_mm256_castps_si256(t), 23);
	return (_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p),
	    e)));
}

/* The largest of eight floats. */
AI float
hmax8(__m256 m)
{
	__m128	a;

	a = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	a = _mm_max_ps(a, _mm_movehl_ps(a, a));
	a = _mm_max_ss(a, _mm_movehdup_ps(a));
	return (_mm_cvtss_f32(a));
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

/*
 * One softmax step for R rows of scores s (stride KT) whose keys are slots
 * lo..hi-1 of the tile: soft-cap, mask the rest to -inf, raise the running
 * maxima mx, turn the scores into e^(s - max) in place, and rescale the
 * eight-lane running sums ls by the factors left in sc for the values.
 */
static void
softmax_rows(int R, float *s, int lo, int hi, float cap, float *mx, float *ls,
    float *sc)
{
	const __m256	ninf = _mm256_set1_ps(-INFINITY);
	const __m256i	lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256		x[KVEC], keep[KVEC], m, mold, t, sum;
	float		*sr, mnew, f;
	int		 r, v, j;

	for (r = 0; r < R; r++) {
		sr = s + (size_t)r * KT;
		if (cap != 0.0f) {
			for (j = lo; j < hi; j++)
				sr[j] = cap * tanhf(sr[j] / cap);
		}
		UNROLL
		for (v = 0; v < KVEC; v++) {
			x[v] = _mm256_loadu_ps(sr + 8 * v);
			keep[v] = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
			if (lo > 8 * v || hi < 8 * v + 8) {
				__m256i idx = _mm256_add_epi32(lane,
				    _mm256_set1_epi32(8 * v));

				keep[v] = _mm256_castsi256_ps(_mm256_andnot_si256(
				    _mm256_cmpgt_epi32(_mm256_set1_epi32(lo), idx),
				    _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx)));
				x[v] = _mm256_blendv_ps(ninf, x[v], keep[v]);
			}
		}
		m = x[0];
		UNROLL
		for (v = 1; v < KVEC; v++)
			m = _mm256_max_ps(m, x[v]);
		/*
		 * e^0 is exactly 1: skip it while the maximum holds, and the
		 * reduction too when no lane passes it (most tiles after the
		 * first few).
		 */
		mold = _mm256_set1_ps(mx[r]);
		sc[r] = 1.0f;
		if (_mm256_movemask_ps(_mm256_cmp_ps(m, mold, _CMP_GT_OQ)) != 0) {
			f = hmax8(m);
			mnew = mx[r] > f ? mx[r] : f;
			if (mnew != mx[r]) {
				sc[r] = mx[r] == -INFINITY ? 0.0f :
				    _mm256_cvtss_f32(exp8(_mm256_set1_ps(
				    mx[r] - mnew)));
				mx[r] = mnew;
				mold = _mm256_set1_ps(mnew);
			}
		}
		UNROLL
		for (v = 0; v < KVEC; v++) {
			if (8 * v >= hi || 8 * v + 8 <= lo) {
				x[v] = _mm256_setzero_ps();	/* not read */
				continue;
			}
			x[v] = exp8(_mm256_sub_ps(x[v], mold));
			if (lo > 8 * v || hi < 8 * v + 8)	/* masked: 0 */
				x[v] = _mm256_and_ps(x[v], keep[v]);
			_mm256_storeu_ps(sr + 8 * v, x[v]);
		}
		sum = x[0];
		UNROLL
		for (v = 1; v < KVEC; v++)
			sum = _mm256_add_ps(sum, x[v]);
		t = _mm256_loadu_ps(ls + (size_t)8 * r);
		if (sc[r] != 1.0f)
			t = _mm256_mul_ps(t, _mm256_set1_ps(sc[r]));
		_mm256_storeu_ps(ls + (size_t)8 * r, _mm256_add_ps(t, sum));
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
				for (y = 0; y < len; y += 8) {
					n = len - y < 8 ? len - y : 8;
					h2f_n(st->k + (size_t)d * KT + x + y,
					    kb + (size_t)d * bs + slot + y, n);
				}
			for (i = 0; i < len; i++)
				for (y = 0; y < hd; y += 8) {
					n = hd - y < 8 ? hd - y : 8;
					h2f_n(st->v + (size_t)(x + i) * st->hdp + y,
					    vb + (size_t)(slot + i) * hd + y, n);
				}
		} else {
			const float *kb = kv_block_k(pool, blk, j->layer,
			    j->kv_head);
			const float *vb = kv_block_v(pool, blk, j->layer,
			    j->kv_head);

			for (d = 0; d < hd; d++)
				memcpy(st->k + (size_t)d * KT + x, kb +
				    (size_t)d * bs + slot, (size_t)len *
				    sizeof(float));
			for (i = 0; i < len; i++)
				memcpy(st->v + (size_t)(x + i) * st->hdp, vb +
				    (size_t)(slot + i) * hd, (size_t)hd *
				    sizeof(float));
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

/*
 * Ask for the pages of positions t0..t0+tn-1 in the second-level cache:
 * the next tile's keys and values arrive while this tile is worked on.
 */
static void
prefetch_tile(const struct attn_st *st, uint32_t t0, int tn)
{
	const struct attn_job	*j = st->j;
	const struct kv_pool	*pool = j->pool;
	const uint32_t		 bs = pool->layout.block_size;
	const size_t		 bytes = (size_t)st->hd * bs * pool->elem_size;
	const char		*k, *v;
	uint32_t		 p;
	size_t			 o;

	for (p = t0 - t0 % bs; p < t0 + (uint32_t)tn; p += bs) {
		k = kv_block_k(pool, j->blocks[p / bs], j->layer, j->kv_head);
		v = kv_block_v(pool, j->blocks[p / bs], j->layer, j->kv_head);
		for (o = 0; o < bytes; o += 64) {
			_mm_prefetch(k + o, _MM_HINT_T1);
			_mm_prefetch(v + o, _MM_HINT_T1);
		}
	}
}

/* Round a float count up to whole 64-byte lines. */
static size_t
lines(size_t n)
{
	return ((n + 15) & ~(size_t)15);
}

/* Round a float count up to whole vectors. */
static size_t
vecs(size_t n)
{
	return ((n + 7) & ~(size_t)7);
}

/* Floats of scratch for jobs of up to n_tok tokens of grp heads of hd. */
size_t
attn_avx2_scratch_floats(int n_tok, int grp, int hd)
{
	size_t	nq = (size_t)n_tok * grp, hdp = vecs(hd);

	return (16 + lines(nq * hd) + lines(nq * hdp) + lines(nq) +
	    lines(nq * 8) + lines((size_t)hd * KT) + lines(KT * hdp) +
	    RB * KT);
}

/* Run one attention job (see attn.h). */
void
attn_run_avx2(const struct attn_job *j, float *scratch)
{
	const int	 hd = (int)j->pool->layout.head_dim, grp = j->grp;
	const int	 nq = j->n_tok * grp;
	const uint32_t	 last = j->pos0 + j->n_tok - 1, win = j->win;
	const __m256	 qs8 = _mm256_set1_ps(j->qscale);
	struct attn_st	 st;
	uint32_t	 first, t0;
	int		 kt, tn, t, r, d;
	float		*f, l;

	st.j = j;
	st.hd = hd;
	st.hdp = (int)vecs(hd);
	f = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	st.q = f;
	st.o = st.q + lines((size_t)nq * hd);
	st.mx = st.o + lines((size_t)nq * st.hdp);
	st.ls = st.mx + lines(nq);
	st.k = st.ls + lines((size_t)nq * 8);
	st.v = st.k + lines((size_t)hd * KT);
	st.s = st.v + lines((size_t)KT * st.hdp);

	/* Scalar tails multiply and divide as the vector lanes do. */
	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++) {
			const float *q = j->q + (size_t)t * j->stride +
			    (size_t)r * hd;
			float *qs = st.q + (size_t)(t * grp + r) * hd;

			for (d = 0; d + 8 <= hd; d += 8)
				_mm256_storeu_ps(qs + d, _mm256_mul_ps(
				    _mm256_loadu_ps(q + d), qs8));
			for (; d < hd; d++)
				qs[d] = q[d] * j->qscale;
		}
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
		gather(&st, t0, first > t0 ? (int)(first - t0) : 0, tn);
		if (last >= t0 + KT)
			prefetch_tile(&st, t0 + KT, last - (t0 + KT) + 1 < KT ?
			    (int)(last - (t0 + KT) + 1) : KT);
		attn_tile_rows(j, t0, rows_step, &st);
	}

	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++) {
			const int	 qi = t * grp + r;
			const float	*o = st.o + (size_t)qi * st.hdp;
			float		*out = j->out + (size_t)t * j->stride +
			    (size_t)r * hd;
			__m256		 lv;

			l = 0.0f;
			for (d = 0; d < 8; d++)
				l += st.ls[(size_t)8 * qi + d];
			lv = _mm256_set1_ps(l);
			for (d = 0; d + 8 <= hd; d += 8)
				_mm256_storeu_ps(out + d, _mm256_div_ps(
				    _mm256_loadu_ps(o + d), lv));
			for (; d < hd; d++)
				out[d] = o[d] / l;
		}
}
