/*
 * attn_avx2.h: what the AVX2 attention kernels share (attn_avx2.c with f32
 * products, attn_i16.c with 16-bit integer ones): the tile sizes, e^x, the
 * online softmax step and the final division by the sums.  Each kernel
 * file includes it once.
 */
#ifndef PHASED_ATTN_AVX2_H
#define PHASED_ATTN_AVX2_H

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

/* Round a float count up to whole vectors. */
static size_t
vecs(size_t n)
{
	return ((n + 7) & ~(size_t)7);
}

/*
 * Query head r of token t of job j times the job's scale, into qs; scalar
 * tails multiply as the vector lanes do.
 */
static void
scaled_query(const struct attn_job *j, int t, int r, float *qs)
{
	const int	 hd = (int)j->pool->layout.head_dim;
	const float	*q = j->q + (size_t)t * j->stride + (size_t)r * hd;
	const __m256	 s = _mm256_set1_ps(j->qscale);
	int		 d;

	for (d = 0; d + 8 <= hd; d += 8)
		_mm256_storeu_ps(qs + d, _mm256_mul_ps(_mm256_loadu_ps(q + d), s));
	for (; d < hd; d++)
		qs[d] = q[d] * j->qscale;
}

/*
 * The outputs of job j: each row's accumulator o (row stride hdp) over the
 * sum of its eight-lane softmax sums ls.  Scalar tails divide as the
 * vector lanes do.
 */
static void
store_out(const struct attn_job *j, const float *o, int hdp, const float *ls)
{
	const int	 hd = (int)j->pool->layout.head_dim, grp = j->grp;
	const float	*or;
	float		*out, l;
	__m256		 lv;
	int		 t, r, d, qi;

	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++) {
			qi = t * grp + r;
			or = o + (size_t)qi * hdp;
			out = j->out + (size_t)t * j->stride + (size_t)r * hd;
			l = 0.0f;
			for (d = 0; d < 8; d++)
				l += ls[(size_t)8 * qi + d];
			lv = _mm256_set1_ps(l);
			for (d = 0; d + 8 <= hd; d += 8)
				_mm256_storeu_ps(out + d, _mm256_div_ps(
				    _mm256_loadu_ps(or + d), lv));
			for (; d < hd; d++)
				out[d] = or[d] / l;
		}
}

#endif
