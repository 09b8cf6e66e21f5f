/*
 * attn_avx512.h: what the AVX-512 attention kernels share (attn_avx512.c
 * with f32 products, attn_bf16.c with bf16 ones): the tile sizes, e^x,
 * the online softmax step and the final division by the sums.  Each
 * kernel file includes it once.
 */
#ifndef PHASED_ATTN_AVX512_H
#define PHASED_ATTN_AVX512_H

#include <immintrin.h>
#include <math.h>

#include "attn.h"

#define KT	ATTN_KEY_TILE
#define KVEC	(KT / 16)	/* vectors of scores per row */
#define RB	6		/* rows per register block */
#define DCH	4		/* vectors of head_dim per value pass */

#define AI	static inline __attribute__((always_inline))
/* Loops over a block's rows and vectors unrolled, so they live in registers. */
#define UNROLL	_Pragma("GCC unroll 16")

/*
 * Calls of a kernel file's qk_rows and pv_rows with the block's shape as a
 * constant (1..RB rows, 1..DCH vectors), so each is compiled on its own.
 */
#define QK_SWITCH(R, ...)						\
	switch (R) {							\
	case 1: qk_rows(__VA_ARGS__, 1); break;				\
	case 2: qk_rows(__VA_ARGS__, 2); break;				\
	case 3: qk_rows(__VA_ARGS__, 3); break;				\
	case 4: qk_rows(__VA_ARGS__, 4); break;				\
	case 5: qk_rows(__VA_ARGS__, 5); break;				\
	default: qk_rows(__VA_ARGS__, 6); break;			\
	}
#define PV_CASE(R, NV)							\
	case R:								\
		switch (NV) {						\
		case 1: pv_rows(o, ostr, p, v, vstr, lo, hi, sc, R, 1); break; \
		case 2: pv_rows(o, ostr, p, v, vstr, lo, hi, sc, R, 2); break; \
		case 3: pv_rows(o, ostr, p, v, vstr, lo, hi, sc, R, 3); break; \
		default: pv_rows(o, ostr, p, v, vstr, lo, hi, sc, R, 4); break; \
		}							\
		break
/* pv_rows of the caller's o, ostr, p, v, vstr, lo, hi and sc. */
#define PV_SWITCH(R, NV)						\
	switch (R) {							\
	PV_CASE(1, NV);							\
	PV_CASE(2, NV);							\
	PV_CASE(3, NV);							\
	PV_CASE(4, NV);							\
	PV_CASE(5, NV);							\
	default:							\
	PV_CASE(6, NV);							\
	}

/*
 * e^x for sixteen x <= 0: x = n ln 2 + r with |r| <= ln 2 / 2, a degree-5
 * polynomial for e^r scaled by 2^n: 1 + r q(r), q fitted at the Chebyshev
 * nodes of the interval, within 2.2e-7 of e^r when evaluated in floats (as
 * close as the degree-6 Taylor polynomial, one FMA less).  x is
 * first raised to -87 (e^-87 is about 1.6e-38), which keeps -inf and huge
 * negative differences away from the reduction; callers zero the lanes
 * that must be exactly 0.
 */
AI __m512
exp16(__m512 x)
{
	__m512	n, r, p;

	x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
	p = _mm512_set1_ps(0.008363774046301842f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.04187985509634018f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.16666573286056519f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.4999934732913971f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return (_mm512_scalef_ps(p, n));
}

/*
 * One softmax step for R rows of scores s (stride KT) whose keys are slots
 * lo..hi-1 of the tile: soft-cap, mask the rest to -inf, raise the running
 * maxima mx, turn the scores into e^(s - max) in place, and rescale the
 * sixteen-lane running sums ls by the factors left in sc for the values.
 */
static void
softmax_rows(int R, float *s, int lo, int hi, float cap, float *mx, float *ls,
    float *sc)
{
	const __m512	ninf = _mm512_set1_ps(-INFINITY);
	const __m512i	lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
			    10, 11, 12, 13, 14, 15);
	__m512		x[KVEC], m, mold, t, sum;
	__mmask16	keep[KVEC];
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
			x[v] = _mm512_loadu_ps(sr + 16 * v);
			keep[v] = 0xffff;
			if (lo > 16 * v || hi < 16 * v + 16) {
				__m512i idx = _mm512_add_epi32(lane,
				    _mm512_set1_epi32(16 * v));

				keep[v] = _mm512_cmp_epi32_mask(idx,
				    _mm512_set1_epi32(lo), _MM_CMPINT_NLT) &
				    _mm512_cmp_epi32_mask(idx,
				    _mm512_set1_epi32(hi), _MM_CMPINT_LT);
				x[v] = _mm512_mask_mov_ps(ninf, keep[v], x[v]);
			}
		}
		m = x[0];
		UNROLL
		for (v = 1; v < KVEC; v++)
			m = _mm512_max_ps(m, x[v]);
		/*
		 * e^0 is exactly 1: skip it while the maximum holds, and the
		 * reduction too when no lane passes it (most tiles after the
		 * first few).
		 */
		mold = _mm512_set1_ps(mx[r]);
		sc[r] = 1.0f;
		if (_mm512_cmp_ps_mask(m, mold, _CMP_GT_OQ) != 0) {
			f = _mm512_reduce_max_ps(m);
			mnew = mx[r] > f ? mx[r] : f;
			if (mnew != mx[r]) {
				sc[r] = mx[r] == -INFINITY ? 0.0f :
				    _mm512_cvtss_f32(exp16(_mm512_set1_ps(
				    mx[r] - mnew)));
				mx[r] = mnew;
				mold = _mm512_set1_ps(mnew);
			}
		}
		UNROLL
		for (v = 0; v < KVEC; v++) {
			x[v] = exp16(_mm512_sub_ps(x[v], mold));
			if (keep[v] != 0xffff)	/* masked keys weigh 0 */
				x[v] = _mm512_maskz_mov_ps(keep[v], x[v]);
			_mm512_storeu_ps(sr + 16 * v, x[v]);
		}
		sum = x[0];
		UNROLL
		for (v = 1; v < KVEC; v++)
			sum = _mm512_add_ps(sum, x[v]);
		t = _mm512_loadu_ps(ls + (size_t)16 * r);
		if (sc[r] != 1.0f)
			t = _mm512_mul_ps(t, _mm512_set1_ps(sc[r]));
		_mm512_storeu_ps(ls + (size_t)16 * r, _mm512_add_ps(t, sum));
	}
}

/*
 * The outputs of job j: each row's accumulator o (row stride hdp) over the
 * sum of its sixteen-lane softmax sums ls.
 */
static void
store_out(const struct attn_job *j, const float *o, int hdp, const float *ls)
{
	const int	hd = (int)j->pool->layout.head_dim, grp = j->grp;
	int		t, r, d, qi;
	float		*out, l;

	for (t = 0; t < j->n_tok; t++)
		for (r = 0; r < grp; r++) {
			qi = t * grp + r;
			out = j->out + (size_t)t * j->stride + (size_t)r * hd;
			l = 0.0f;
			for (d = 0; d < 16; d++)
				l += ls[(size_t)16 * qi + d];
			for (d = 0; d < hd; d += 16) {
				__mmask16 m = hd - d < 16 ?
				    (__mmask16)((1u << (hd - d)) - 1) : 0xffff;

				_mm512_mask_storeu_ps(out + d, m, _mm512_div_ps(
				    _mm512_loadu_ps(o + (size_t)qi * hdp + d),
				    _mm512_set1_ps(l)));
			}
		}
}

#endif
