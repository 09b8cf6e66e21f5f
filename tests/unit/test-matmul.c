/* test-matmul: qmat_mul for every type and variant, and batch invariance. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "matmul.h"
#include "memread.h"
#include "quant.h"
#include "tap.h"
#include "tensor_type.h"
#include "threadpool.h"
#include "util.h"
#include "kernel-testutil.h"

#define MAXTOK	130

static int	bf16_mode;	/* float types use bf16 dot products */
static int	i16_mode;	/* F16 uses 16-bit integer dot products */

static const int ntoks[] = { 1, 2, 3, 7, 33, 64, 130 };
static const int64_t rowcounts[] = { 1, 5, 37 };

/* One type, variant and shape: accuracy, and invariance over n_tok/threads. */
static void
test_shape(struct threadpool *pool, int isa, uint32_t type, int64_t rows, int64_t cols)
{
	const struct tensor_type_info *ti = tensor_type_get(type);
	size_t		 rb = tensor_row_bytes(ti, cols);
	uint8_t		*w = malloc(rows * rb);
	float		*x = malloc(MAXTOK * cols * sizeof *x);
	int64_t		 ldy = rows + 3, r, c;
	float		*y1 = malloc(MAXTOK * ldy * sizeof *y1);
	float		*y = malloc(MAXTOK * ldy * sizeof *y);
	double		*tol = malloc(MAXTOK * rows * sizeof *tol);
	double		*ref = malloc(MAXTOK * rows * sizeof *ref);
	float		*wf = malloc(cols * sizeof *wf);
	struct qmat	*m;
	char		*cause = NULL;
	int		 t, i, bad_acc = 0, bad_inv = 0, bad_thr = 0, nth;
	size_t		 k;

	for (r = 0; r < rows; r++)
		ktu_fill_row(type, w + r * rb, cols);
	for (k = 0; k < (size_t)MAXTOK * cols; k++)
		x[k] = ktu_uniform() * (k % 5 == 0 ? 3.0f : 1.0f);
	/* Reference and a bound on the activation quantization error. */
	for (r = 0; r < rows; r++) {
		dequantize_row(type, w + r * rb, wf, cols);
		for (t = 0; t < MAXTOK; t++) {
			const float *xt = x + (size_t)t * cols;
			double e = 0, sabs = 0, ei = 0;

			for (c = 0; c < cols; c += 32) {
				double amax = 0, wsum = 0, wmax = 0, xsum = 0;
				for (i = 0; i < 32 && c + i < cols; i++) {
					amax = fmax(amax, fabs(xt[c + i]));
					wmax = fmax(wmax, fabs(wf[c + i]));
					wsum += fabs(wf[c + i]);
					xsum += fabs(xt[c + i]);
					sabs += fabs(wf[c + i] * xt[c + i]);
				}
				e += wsum * amax / 127 * 0.5;
				/* Weights to 2^-13 of the largest, activations 1/16382. */
				ei += (wmax * xsum * 0x1p-13 + (wsum + wmax * 32 *
				    0x1p-13) * amax / 16382) * 1.001;
			}
			if (type == TT_F32 || type == TT_F16 || type == TT_BF16)
				e = bf16_mode ? sabs / 128 : 0;
			if ((type == TT_F16 || type == TT_BF16) && i16_mode)
				e = ei;
			ref[t * rows + r] = dot_row_ref(type, w + r * rb, xt, cols);
			tol[t * rows + r] = e + 2e-5 * sabs + 1e-6;
		}
	}
	m = qmat_create(type, rows, cols, w, &cause);
	if (!ok(m != NULL, "%s %s %lldx%lld: qmat_create", quant_isa_name(isa),
	    ti->name, (long long)rows, (long long)cols)) {
		diag("%s", cause);
		free(cause);
		goto out;
	}
	/* Token by token, one thread: the results every batch must reproduce. */
	for (t = 0; t < MAXTOK; t++)
		qmat_mul(NULL, m, x + (size_t)t * cols, 1, y1 + t * ldy, ldy);
	for (t = 0; t < MAXTOK; t++)
		for (r = 0; r < rows; r++)
			if (!(fabs(y1[t * ldy + r] - ref[t * rows + r]) <= tol[t * rows + r])) {
				if (bad_acc++ == 0)
					diag("t %d r %lld: got %.9g want %.9g tol %g", t,
					    (long long)r, y1[t * ldy + r], ref[t * rows + r],
					    tol[t * rows + r]);
			}
	ok(bad_acc == 0, "%s %s %lldx%lld: results match the reference",
	    quant_isa_name(isa), ti->name, (long long)rows, (long long)cols);
	for (nth = 1; nth <= 2; nth++) {
		for (i = 0; i < (int)(sizeof ntoks / sizeof ntoks[0]); i++) {
			int n = ntoks[i];

			memset(y, 0xff, MAXTOK * ldy * sizeof *y);
			qmat_mul(nth == 1 ? NULL : pool, m, x, n, y, ldy);
			for (t = 0; t < n; t++)
				if (memcmp(y + t * ldy, y1 + t * ldy, rows * sizeof *y) != 0) {
					if (nth == 1)
						bad_inv++;
					else
						bad_thr++;
				}
			/* Padding between rows of Y stays untouched. */
			for (t = 0; t < n; t++)
				for (r = rows; r < ldy; r++) {
					uint32_t bits;
					memcpy(&bits, &y[t * ldy + r], 4);
					if (bits != 0xffffffff)
						bad_inv++;
				}
		}
	}
	ok(bad_inv == 0, "%s %s %lldx%lld: bit-identical for every n_tok",
	    quant_isa_name(isa), ti->name, (long long)rows, (long long)cols);
	ok(bad_thr == 0, "%s %s %lldx%lld: bit-identical with 2 threads",
	    quant_isa_name(isa), ti->name, (long long)rows, (long long)cols);
	qmat_free(m);
out:
	free(w);
	free(x);
	free(y1);
	free(y);
	free(tol);
	free(ref);
	free(wf);
}

/*
 * A type repacked at load by the variant's kernels (the one quant_force_isa
 * chose): the copy is made and stays about the file's size, and its
 * products equal those on the mapped rows up to float rounding (both sum
 * the same integers per sub-block).
 */
static void
test_packed_vs_mapped(struct threadpool *pool, int isa, uint32_t type, int64_t rows,
    int64_t cols)
{
	const char	*in = quant_isa_name(isa);
	const struct tensor_type_info *ti = tensor_type_get(type);
	const int	 n = 37;
	size_t		 rb = tensor_row_bytes(ti, cols), k;
	uint8_t		*w = malloc(rows * rb);
	float		*x = malloc(n * cols * sizeof *x);
	float		*yp = malloc(n * rows * sizeof *yp);
	float		*ym = malloc(n * rows * sizeof *ym);
	float		*wf = malloc(rows * cols * sizeof *wf);
	struct qmat	*mp, *mm;
	const struct qmat *ms[2];
	char		*cause = NULL;
	int64_t		 r, c, bad = 0, groups = (rows + 15) / 16;
	double		 worst = 0;
	int		 t;

	for (r = 0; r < rows; r++) {
		ktu_fill_row(type, w + r * rb, cols);
		dequantize_row(type, w + r * rb, wf + r * cols, cols);
	}
	for (k = 0; k < (size_t)n * cols; k++)
		x[k] = ktu_uniform() * (k % 7 == 0 ? 4.0f : 1.0f);
	mp = qmat_create(type, rows, cols, w, &cause);
	quant_allow_pack(0);
	mm = qmat_create(type, rows, cols, w, &cause);
	quant_allow_pack(1);
	if (!ok(mp != NULL && mm != NULL, "%s %s %lldx%lld: qmat_create", in, ti->name,
	    (long long)rows, (long long)cols))
		goto out;
	ok(qmat_packed_bytes(mp) > 0 && qmat_packed_bytes(mm) == 0,
	    "%s %s %lldx%lld: repacked at load", in, ti->name, (long long)rows,
	    (long long)cols);
	ok(qmat_packed_bytes(mp) <= (size_t)(groups * 16 * rb * 1.04),
	    "%s %s %lldx%lld: repacked copy %zu bytes, within 4%% of %lld rows",
	    in, ti->name, (long long)rows, (long long)cols, qmat_packed_bytes(mp),
	    (long long)(groups * 16));
	/* The read probe takes the copy of one and the mapped rows of the other. */
	ms[0] = mp;
	ms[1] = mm;
	ok(qmat_read_n(pool, 2, ms, NULL) == qmat_packed_bytes(mp) + rows * rb &&
	    qmat_read_n(NULL, 1, &ms[1], NULL) == rows * rb,
	    "%s %s %lldx%lld: qmat_read_n reads the copy (%zu bytes) and the rows "
	    "(%zu)", in, ti->name, (long long)rows, (long long)cols,
	    qmat_packed_bytes(mp), rows * rb);
	qmat_mul(pool, mp, x, n, yp, rows);
	qmat_mul(pool, mm, x, n, ym, rows);
	for (t = 0; t < n; t++)
		for (r = 0; r < rows; r++) {
			double sabs = 0, d = fabs(yp[t * rows + r] - ym[t * rows + r]);

			for (c = 0; c < cols; c++)
				sabs += fabs(wf[r * cols + c] * x[t * cols + c]);
			if (!(d <= 2e-6 * sabs + 1e-7)) {
				if (bad++ == 0)
					diag("t %d r %lld: packed %.9g mapped %.9g", t,
					    (long long)r, yp[t * rows + r], ym[t * rows + r]);
			}
			if (sabs > 0 && d / sabs > worst)
				worst = d / sabs;
		}
	ok(bad == 0, "%s %s %lldx%lld: packed equals mapped within 2e-6 of sum |w x| "
	    "(worst %.2g)", in, ti->name, (long long)rows, (long long)cols, worst);
out:
	qmat_free(mp);
	qmat_free(mm);
	free(cause);
	free(w);
	free(x);
	free(yp);
	free(ym);
	free(wf);
}

/*
 * More threads than CPUs, most of them late to each run: whichever thread
 * takes a chunk of rows, from the front of its own run or the back of
 * another's, every row is computed exactly once, as one thread computes
 * it (Y starts as NaN bits).
 */
static void
test_oversubscribed(void)
{
	const int64_t	 rows = 1000, cols = 256;
	const size_t	 rb = tensor_row_bytes(tensor_type_get(TT_Q8_0), cols);
	uint8_t		*w = malloc(rows * rb);
	float		*x = malloc(2 * cols * sizeof *x);
	float		*y1 = malloc(2 * rows * sizeof *y1);
	float		*y = malloc(2 * rows * sizeof *y);
	struct threadpool *pool;
	struct qmat	*m;
	char		*cause = NULL;
	int64_t		 r;
	int		 i, n, bad = 0;

	for (r = 0; r < rows; r++)
		ktu_fill_row(TT_Q8_0, w + r * rb, cols);
	for (i = 0; i < 2 * cols; i++)
		x[i] = ktu_uniform();
	m = qmat_create(TT_Q8_0, rows, cols, w, &cause);
	pool = m != NULL ? threadpool_create(7, NULL, &cause) : NULL;
	if (!ok(m != NULL && pool != NULL, "7 threads: matrix and pool made")) {
		diag("%s", cause);
		goto out;
	}
	qmat_mul(NULL, m, x, 2, y1, rows);
	for (i = 0; i < 200; i++) {
		n = 1 + i % 2;
		memset(y, 0xff, 2 * rows * sizeof *y);
		qmat_mul(pool, m, x, n, y, rows);
		if (memcmp(y, y1, n * rows * sizeof *y) != 0)
			bad++;
	}
	ok(bad == 0, "7 threads on %d CPUs: every row computed once, bit-identical "
	    "(%d of 200 runs differ)", (int)sysconf(_SC_NPROCESSORS_ONLN), bad);
out:
	if (pool != NULL)
		threadpool_destroy(pool);
	qmat_free(m);
	free(cause);
	free(w);
	free(x);
	free(y1);
	free(y);
}

/*
 * Outputs of rows x cols weights of type times 8 tokens under a bf16
 * setting; *bv (may be NULL) gets qmat_bf16_values().
 */
static float *
mul_under(struct threadpool *pool, uint32_t type, const uint8_t *w,
    int64_t rows, int64_t cols, const float *x, int which, int *bv)
{
	float		*y = calloc(8 * rows, sizeof *y);
	struct qmat	*m;
	char		*cause = NULL;

	quant_allow_bf16_dot(which);
	if ((m = qmat_create(type, rows, cols, w, &cause)) == NULL) {
		diag("%s", cause);
		free(cause);
		free(y);
		return (NULL);
	}
	if (bv != NULL)
		*bv = qmat_bf16_values(m);
	qmat_mul(pool, m, x, 8, y, rows);
	qmat_free(m);
	quant_allow_bf16_dot(QUANT_BF16_DOT_NONE);
	return (y);
}

/*
 * QUANT_BF16_DOT_BF16 (bf16-dot auto's choice): BF16 weights give the bits
 * of bf16 dot products, F16 weights the exact bits.
 */
static void
test_bf16_only(struct threadpool *pool)
{
	static const uint32_t	 types[2] = { TT_F16, TT_BF16 };
	const int64_t		 rows = 40;
	float			 x[8 * 96], *none, *all, *only;
	uint8_t			*w;
	size_t			 rb, k;
	int			 i;

	for (k = 0; k < 8 * 96; k++)
		x[k] = ktu_uniform();
	for (i = 0; i < 2; i++) {
		const char *name = tensor_type_get(types[i])->name;

		rb = tensor_row_bytes(tensor_type_get(types[i]), 96);
		w = malloc(rows * rb);
		for (k = 0; k < (size_t)rows; k++)
			ktu_fill_row(types[i], w + k * rb, 96);
		none = mul_under(pool, types[i], w, rows, 96, x, QUANT_BF16_DOT_NONE,
		    NULL);
		all = mul_under(pool, types[i], w, rows, 96, x, QUANT_BF16_DOT_ALL,
		    NULL);
		only = mul_under(pool, types[i], w, rows, 96, x, QUANT_BF16_DOT_BF16,
		    NULL);
		if (ok(none != NULL && all != NULL && only != NULL,
		    "bf16 only: %s made under each setting", name)) {
			ok(memcmp(none, all, 8 * rows * sizeof *x) != 0,
			    "bf16 only: %s bf16 dot products differ from exact", name);
			ok(memcmp(only, i == 0 ? none : all,
			    8 * rows * sizeof *x) == 0,
			    "bf16 only: %s gives the %s bits", name,
			    i == 0 ? "exact" : "bf16 dot product");
		}
		free(none);
		free(all);
		free(only);
		free(w);
	}
}

/*
 * F16 weights that are all bf16 values take, under QUANT_BF16_DOT_BF16,
 * the bits of the same values stored as BF16; one value that is not (the
 * last, in the scan's masked tail) keeps the whole matrix exact.
 */
static void
test_bf16_values(struct threadpool *pool)
{
	const int64_t	 rows = 33, cols = 75;
	float		 x[8 * 75], *fb, *bb, *ex, *fx, *fn;
	uint16_t	*f16, *b16;
	size_t		 k, n = rows * cols;
	int		 bv_f = -1, bv_b = -1, bv_x = -1;

	for (k = 0; k < 8 * (size_t)cols; k++)
		x[k] = ktu_uniform();
	f16 = malloc(n * sizeof *f16);
	b16 = malloc(n * sizeof *b16);
	for (k = 0; k < n; k++) {
		b16[k] = f32_to_bf16(ktu_uniform());
		f16[k] = f32_to_fp16(bf16_to_f32(b16[k]));
		if (fp16_to_f32(f16[k]) != bf16_to_f32(b16[k]))
			b16[k] = f32_to_bf16(fp16_to_f32(f16[k] = 0x3c00));
	}
	fb = mul_under(pool, TT_F16, (uint8_t *)f16, rows, cols, x,
	    QUANT_BF16_DOT_BF16, &bv_f);
	bb = mul_under(pool, TT_BF16, (uint8_t *)b16, rows, cols, x,
	    QUANT_BF16_DOT_BF16, &bv_b);
	ex = mul_under(pool, TT_F16, (uint8_t *)f16, rows, cols, x,
	    QUANT_BF16_DOT_NONE, NULL);
	/* 1 + 2^-10 is no bf16 value. */
	f16[n - 1] = 0x3c01;
	fx = mul_under(pool, TT_F16, (uint8_t *)f16, rows, cols, x,
	    QUANT_BF16_DOT_BF16, &bv_x);
	fn = mul_under(pool, TT_F16, (uint8_t *)f16, rows, cols, x,
	    QUANT_BF16_DOT_NONE, NULL);
	if (ok(fb != NULL && bb != NULL && ex != NULL && fx != NULL &&
	    fn != NULL, "bf16 values: F16 and BF16 %lldx%lld made",
	    (long long)rows, (long long)cols)) {
		ok(bv_f == 1 && bv_b == 0, "bf16 values: F16 of bf16 values "
		    "found so (%d), BF16 not counted (%d)", bv_f, bv_b);
		ok(memcmp(fb, bb, 8 * rows * sizeof *fb) == 0,
		    "bf16 values: F16 gives the bits of BF16");
		ok(memcmp(fb, ex, 8 * rows * sizeof *fb) != 0,
		    "bf16 values: and not the exact bits");
		ok(bv_x == 0 && memcmp(fx, fn, 8 * rows * sizeof *fx) == 0,
		    "bf16 values: one F16 value of 11 bits keeps it exact (%d)",
		    bv_x);
	}
	free(fb);
	free(bb);
	free(ex);
	free(fx);
	free(fn);
	free(f16);
	free(b16);
}

/*
 * One output of the 16-bit integer product of F16 (bf16 set: BF16)
 * weights, computed in plain C from its definition (f16_i16_avx512.c,
 * f16_i16_avx2.c): the bits the kernels must give.
 */
static float
i16_ref(const uint16_t *w, const float *x, int64_t cols, int bf16)
{
	const int	frac = bf16 ? 7 : 10, emask = bf16 ? 255 : 31;
	const int	shift = bf16 ? 5 : 2, bias = bf16 ? 127 : 15;
	float		acc = 0;
	int64_t		c, i;

	for (c = 0; c < cols; c += 32) {
		int64_t	n = cols - c < 32 ? cols - c : 32, sum = 0;
		int	emax = bf16 ? 13 : 1;
		float	amax = 0, d, inv, s;

		for (i = 0; i < n; i++) {
			int e = (w[c + i] & 0x7fff) >> frac;

			if ((w[c + i] & 0x7fff) != 0 && e > emax)
				emax = e;
			amax = fmaxf(amax, fabsf(x[c + i]));
		}
		d = amax / 8191;
		inv = amax > 0 ? 8191 / amax : 0;
		s = ldexpf(1, emax - bias - frac - shift);
		for (i = 0; i < n; i++) {
			int	e = (w[c + i] >> frac) & emask, k;
			int64_t	m = (w[c + i] & ((1 << frac) - 1)) |
				    (e != 0 ? 1 << frac : 0);
			long	q = lrintf(x[c + i] * inv);

			k = (e > 1 ? e : 1) - emax + shift;
			if (k >= 0)
				m <<= k;
			else
				m = -k >= 16 ? 0 : (m + (1 << (-k - 1))) >> -k;
			if (w[c + i] & 0x8000)
				m = -m;
			sum += m * q;
		}
		if (sum > INT32_MAX || sum < INT32_MIN)
			return (NAN);	/* the kernels' sums would wrap */
		acc = fmaf((float)sum, s * d, acc);
	}
	return (acc);
}

/*
 * F16 (bf16 set: BF16) weights on 16-bit integer dot products: every tile
 * shape, the mapped rows and the packed copy give the bits of i16_ref,
 * for weights over twenty binades (subnormals, zeros, -0 among them; for
 * BF16 a row of values under 2^-114 too) and activations with an
 * all-zero block.
 */
static void
test_i16_bits(struct threadpool *pool, int bf16)
{
	static const int64_t	 shapes[][2] = { { 37, 75 }, { 50, 300 }, { 16, 1 },
				    { 33, 2050 }, { 3, 96 } };
	static const int	 toks[] = { 1, 2, 5, 13 };
	const uint32_t		 type = bf16 ? TT_BF16 : TT_F16;
	const char		*tn = bf16 ? "bf16" : "f16";
	float			*x, *y;
	uint16_t		*w;
	struct qmat		*m;
	char			*cause = NULL;
	size_t			 sh, k;
	int			 pk, ti, t, bad;
	int64_t			 r, rows, cols;

	for (sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
		rows = shapes[sh][0];
		cols = shapes[sh][1];
		w = malloc(rows * cols * 2);
		x = malloc(13 * cols * sizeof *x);
		y = malloc(13 * rows * sizeof *y);
		for (k = 0; k < (size_t)(rows * cols); k++) {
			float v = ldexpf(ktu_uniform(), (int)(k * 7 % 23) - 18);

			/* BF16: row 2 holds values of 2^-120 to 2^-140. */
			if (bf16 && k / cols == 2)
				v = ldexpf(ktu_uniform(), -120 - (int)(k % 21));
			w[k] = bf16 ? f32_to_bf16(v) : f32_to_fp16(v);
			if (k % 29 == 3)
				w[k] = k % 2 ? 0x8000 : 0;
		}
		for (k = 0; k < (size_t)(13 * cols); k++)
			x[k] = ktu_uniform() * (k % 7 == 0 ? 40.0f : 1.0f);
		/* Token 1's first block is all zeros. */
		for (k = 0; k < 32 && k < (size_t)cols; k++)
			x[cols + k] = 0;
		for (pk = 1; pk >= 0; pk--) {
			quant_allow_pack(pk);
			m = qmat_create(type, rows, cols, w, &cause);
			if (!ok(m != NULL && qmat_i16(m) == 1 &&
			    (qmat_packed_bytes(m) > 0) == pk,
			    "%s i16 %lldx%lld %s: made, on 16-bit integers", tn,
			    (long long)rows, (long long)cols, pk ? "packed" : "mapped")) {
				qmat_free(m);
				continue;
			}
			bad = 0;
			for (ti = 0; ti < (int)(sizeof toks / sizeof toks[0]); ti++) {
				qmat_mul(ti % 2 ? pool : NULL, m, x, toks[ti], y, rows);
				for (t = 0; t < toks[ti]; t++)
					for (r = 0; r < rows; r++) {
						float want = i16_ref(w + r * cols,
						    x + t * cols, cols, bf16);

						if (memcmp(&want, &y[t * rows + r], 4) != 0 &&
						    bad++ == 0)
							diag("n_tok %d t %d r %lld: got %.9g "
							    "want %.9g", toks[ti], t,
							    (long long)r, y[t * rows + r], want);
					}
			}
			ok(bad == 0, "%s i16 %lldx%lld %s: the bits of the plain "
			    "C definition for 1, 2, 5 and 13 tokens", tn, (long long)rows,
			    (long long)cols, pk ? "packed" : "mapped");
			qmat_free(m);
		}
		quant_allow_pack(1);
		free(w);
		free(x);
		free(y);
	}
}

/*
 * F16 and BF16 weights on 16-bit integer dot products: the bits of the
 * definition (test_i16_bits); a NaN activation spoils only its own token;
 * a matrix holding an infinity or NaN stays exact, as does an F16 one
 * under bf16-dot yes and a BF16 one under auto where the CPU has bf16 dot
 * products.
 */
static void
test_f16_i16(struct threadpool *pool)
{
	float			*x, *y, *ye;
	uint16_t		*w;
	struct qmat		*m;
	char			*cause = NULL;
	size_t			 k;
	int			 flag, nan_ok;
	int64_t			 r, rows, cols;

	quant_allow_f16_i16(1);
	test_i16_bits(pool, 0);
	test_i16_bits(pool, 1);
	if (quant_bf16_dot_supported()) {
		/* Where bf16 dot products take BF16 (auto), these do not. */
		w = calloc(16 * 64, 2);
		quant_allow_bf16_dot(QUANT_BF16_DOT_BF16);
		m = qmat_create(TT_BF16, 16, 64, w, &cause);
		quant_allow_bf16_dot(QUANT_BF16_DOT_NONE);
		ok(m != NULL && qmat_i16(m) == 0, "bf16 i16: not under bf16 "
		    "dot products for BF16 on %s", quant_isa_name(quant_isa()));
		qmat_free(m);
		free(w);
	}

	/* A NaN activation: its token's outputs are NaN, the others' not. */
	rows = 20;
	cols = 64;
	w = malloc(rows * cols * 2);
	x = malloc(3 * cols * sizeof *x);
	y = malloc(3 * rows * sizeof *y);
	ye = malloc(3 * rows * sizeof *ye);
	for (k = 0; k < (size_t)(rows * cols); k++)
		w[k] = f32_to_fp16(ktu_uniform());
	for (k = 0; k < (size_t)(3 * cols); k++)
		x[k] = ktu_uniform();
	x[cols + 40] = NAN;
	m = qmat_create(TT_F16, rows, cols, w, &cause);
	nan_ok = m != NULL;
	if (m != NULL)
		qmat_mul(pool, m, x, 3, y, rows);
	for (r = 0; nan_ok && r < rows; r++)
		nan_ok = isnan(y[rows + r]) && y[r] == i16_ref(w + r * cols, x, cols, 0) &&
		    y[2 * rows + r] == i16_ref(w + r * cols, x + 2 * cols, cols, 0);
	ok(nan_ok, "f16 i16: a NaN activation makes its own token's outputs NaN");
	qmat_free(m);

	/* An infinity in the weights keeps the matrix exact. */
	w[rows * cols - 1] = 0x7c00;
	x[cols + 40] = 1;
	m = qmat_create(TT_F16, rows, cols, w, &cause);
	flag = m != NULL ? qmat_i16(m) : -1;
	if (m != NULL)
		qmat_mul(pool, m, x, 3, y, rows);
	qmat_free(m);
	quant_allow_f16_i16(0);
	m = qmat_create(TT_F16, rows, cols, w, &cause);
	if (m != NULL)
		qmat_mul(pool, m, x, 3, ye, rows);
	ok(flag == 0 && m != NULL && qmat_i16(m) == 0 &&
	    memcmp(y, ye, 3 * rows * sizeof *y) == 0,
	    "f16 i16: a matrix holding an infinity stays exact (%d)", flag);
	qmat_free(m);
	{
		/* So does a BF16 one holding a NaN. */
		quant_allow_f16_i16(1);
		for (k = 0; k < (size_t)(rows * cols); k++)
			w[k] = f32_to_bf16(ktu_uniform());
		m = qmat_create(TT_BF16, rows, cols, w, &cause);
		flag = m != NULL ? qmat_i16(m) : -1;
		qmat_free(m);
		w[5] = 0x7fc0;
		m = qmat_create(TT_BF16, rows, cols, w, &cause);
		ok(flag == 1 && m != NULL && qmat_i16(m) == 0,
		    "bf16 i16: a matrix holding a NaN stays exact");
		qmat_free(m);
		quant_allow_f16_i16(0);
	}

	/* bf16-dot yes takes F16 to bf16 dot products instead. */
	if (quant_bf16_dot_supported()) {
		quant_allow_f16_i16(1);
		quant_allow_bf16_dot(QUANT_BF16_DOT_ALL);
		m = qmat_create(TT_F16, rows, cols, w, &cause);
		ok(m != NULL && qmat_i16(m) == 0,
		    "f16 i16: not under bf16 dot products for all");
		qmat_free(m);
		quant_allow_bf16_dot(QUANT_BF16_DOT_NONE);
	}
	/* Auto: a measured rate, and the choice it implies. */
	{
		double	rate;
		int	on = quant_f16_i16_auto(&rate);

		ok(quant_isa_supported(QUANT_ISA_AVX2) ? rate > 0.05 &&
		    rate < 20 && on == (rate >= QUANT_I16_MIN_RATE) : rate == 0 && !on,
		    "f16 i16 auto: %s at %.2f of the multiply-add rate, %s",
		    quant_isa_supported(QUANT_ISA_AVX512) ? "vpdpwssd" :
		    "vpmaddwd", rate, on ? "on" : "off");
	}
	quant_allow_f16_i16(0);
	free(w);
	free(x);
	free(y);
	free(ye);
}

/*
 * qmat_mul_n: matrices of several types (two sharing their prepared
 * activations, one kept on the mapped rows) in one run of the pool give
 * the bits qmat_mul gives each alone, and leave the padding between
 * output rows alone.
 */
static void
test_mul_n(struct threadpool *pool)
{
	static const uint32_t	 types[4] = { TT_Q4_K, TT_Q6_K, TT_Q4_K, TT_Q8_0 };
	static const int64_t	 rows[4] = { 300, 40, 17, 70 };
	static const int	 toks[3] = { 1, 7, 64 };
	const int64_t		 cols = 512;
	const struct qmat	*ms[4];
	struct qmat		*m[4] = { NULL };
	uint8_t			*w[4] = { NULL };
	float			*y[4], *y1[4], *x = NULL;
	int64_t			 ldy[4];
	char			*cause = NULL;
	size_t			 rb, i, k;
	int			 t, n, bad = 0, made = 0;

	x = malloc(64 * cols * sizeof *x);
	for (k = 0; k < 64 * (size_t)cols; k++)
		x[k] = ktu_uniform();
	for (i = 0; i < 4; i++) {
		rb = tensor_row_bytes(tensor_type_get(types[i]), cols);
		w[i] = malloc(rows[i] * rb);
		for (k = 0; k < (size_t)rows[i]; k++)
			ktu_fill_row(types[i], w[i] + k * rb, cols);
		if (i == 3)
			quant_allow_pack(0);
		m[i] = qmat_create(types[i], rows[i], cols, w[i], &cause);
		quant_allow_pack(1);
		made += m[i] != NULL;
		ms[i] = m[i];
		ldy[i] = rows[i] + 5;
		y[i] = malloc(64 * ldy[i] * sizeof *y[i]);
		y1[i] = malloc(64 * ldy[i] * sizeof *y1[i]);
	}
	if (!ok(made == 4, "qmat_mul_n: four matrices made")) {
		diag("%s", cause);
		goto out;
	}
	for (t = 0; t < 3; t++) {
		n = toks[t];
		for (i = 0; i < 4; i++) {
			memset(y[i], 0xff, 64 * ldy[i] * sizeof *y[i]);
			memset(y1[i], 0xff, 64 * ldy[i] * sizeof *y1[i]);
			qmat_mul(NULL, m[i], x, n, y1[i], ldy[i]);
		}
		qmat_mul_n(pool, 4, ms, x, n, y, ldy);
		for (i = 0; i < 4; i++)
			if (memcmp(y[i], y1[i], 64 * ldy[i] * sizeof *y[i]) != 0)
				bad++;
	}
	ok(bad == 0, "qmat_mul_n: Q4_K, Q6_K, Q4_K and mapped Q8_0 at 1, 7 and 64 "
	    "tokens, bit-identical to qmat_mul of each (%d differ)", bad);
out:
	for (i = 0; i < 4; i++) {
		qmat_free(m[i]);
		free(w[i]);
		free(y[i]);
		free(y1[i]);
	}
	free(x);
	free(cause);
}

/*
 * qmat_read_n on mapped rows longer than one of its work items, one with a
 * length that is no multiple of 8: every byte is read exactly once (their
 * sum as words equals the scalar mem_read_sum of each whole matrix) by one
 * thread or two, under every variant.
 */
static void
test_read_sum(struct threadpool *pool)
{
	static const uint32_t	 types[2] = { TT_Q4_0, TT_Q8_0 };
	static const int64_t	 rows[2] = { 30001, 300 }, cols[2] = { 32, 1024 };
	const struct qmat	*ms[2];
	struct qmat		*m[2] = { NULL };
	uint8_t			*w[2] = { NULL };
	uint64_t		 want = 0, got, got1, bytes, bytes1;
	size_t			 rb[2], k;
	char			*cause = NULL;
	int			 i, isa;

	quant_allow_pack(0);
	for (i = 0; i < 2; i++) {
		rb[i] = tensor_row_bytes(tensor_type_get(types[i]), cols[i]);
		w[i] = malloc(rows[i] * rb[i]);
		for (k = 0; k < (size_t)rows[i]; k++)
			ktu_fill_row(types[i], w[i] + k * rb[i], cols[i]);
		if ((m[i] = qmat_create(types[i], rows[i], cols[i], w[i], &cause)) == NULL)
			break;
		ms[i] = m[i];
		want += mem_read_sum(QUANT_ISA_SCALAR, w[i], rows[i] * rb[i], 0);
	}
	quant_allow_pack(1);
	if (!ok(m[0] != NULL && m[1] != NULL, "qmat_read_n: two mapped matrices made")) {
		diag("%s", cause);
		goto out;
	}
	for (isa = 0; isa < QUANT_ISA_COUNT; isa++) {
		if (quant_force_isa(isa) != 0)
			continue;
		bytes = qmat_read_n(pool, 2, ms, &got);
		bytes1 = qmat_read_n(NULL, 2, ms, &got1);
		ok(bytes == rows[0] * rb[0] + rows[1] * rb[1] && bytes1 == bytes &&
		    got == want && got1 == want, "%s: qmat_read_n reads %llu bytes, each "
		    "once (sum %llx, one thread %llx, want %llx)", quant_isa_name(isa),
		    (unsigned long long)bytes, (unsigned long long)got,
		    (unsigned long long)got1, (unsigned long long)want);
	}
	quant_force_isa(QUANT_ISA_AUTO);
out:
	for (i = 0; i < 2; i++) {
		qmat_free(m[i]);
		free(w[i]);
	}
	free(cause);
}

int
main(void)
{
	struct threadpool	*pool;
	struct qmat		*m;
	char			*cause = NULL;
	float			 row[256], buf[256] = { 0 };
	uint8_t			 w[144 * 2];
	size_t			 i, j;
	int			 isa;

	pool = threadpool_create(2, NULL, &cause);
	if (pool == NULL)
		skip_all("no thread pool: %s", cause);

	/* Argument errors. */
	m = qmat_create(TT_Q4_K, 4, 100, buf, &cause);
	ok(m == NULL, "qmat_create rejects columns not a multiple of the block");
	like(cause, "not a multiple of the block size 256", "error names the block size");
	free(cause);
	cause = NULL;
	m = qmat_create(17, 4, 256, buf, &cause);
	ok(m == NULL, "qmat_create rejects an unsupported type");
	like(cause, "not supported", "error says the type is not supported");
	free(cause);
	cause = NULL;

	/* qmat_get_row decodes the right row. */
	ktu_fill_row(TT_Q4_K, w, 512);
	m = qmat_create(TT_Q4_K, 2, 256, w, &cause);
	qmat_get_row(m, 1, row);
	dequantize_row(TT_Q4_K, w + 144, buf, 256);
	ok(memcmp(row, buf, sizeof row) == 0, "qmat_get_row returns row 1");
	is_int(qmat_rows(m), 2, "qmat_rows");
	qmat_free(m);

	for (isa = 0; isa < QUANT_ISA_COUNT; isa++) {
		if (quant_force_isa(isa) != 0) {
			diag("variant %s: not supported by this CPU, skipped",
			    quant_isa_name(isa));
			continue;
		}
		for (i = 0; i < KTU_NTYPES; i++)
			for (j = 0; j < sizeof rowcounts / sizeof rowcounts[0]; j++)
				test_shape(pool, isa, ktu_types[i], rowcounts[j],
				    j == 2 ? 768 : 512);
		/* Rows that end in a partial group of blocks. */
		for (i = 0; i < KTU_NTYPES; i++)
			if (tensor_type_get(ktu_types[i])->block_elems == 32 ||
			    tensor_type_get(ktu_types[i])->block_elems == 1) {
				test_shape(pool, isa, ktu_types[i], 6, 160);
				test_shape(pool, isa, ktu_types[i], 3, 96);
			}
	}
	/*
	 * The AVX-512 kernels on the mapped rows too: the types that are
	 * repacked at load above (qmat_packed_bytes says which) also keep
	 * their kernels on the file's own layout.
	 */
	if (quant_force_isa(QUANT_ISA_AVX512) == 0) {
		char	 wbuf[2 * 18 * 16];
		void	*fw;

		memset(wbuf, 0, sizeof wbuf);
		m = qmat_create(TT_Q4_0, 2, 512, wbuf, &cause);
		ok(m != NULL && qmat_packed_bytes(m) > 0,
		    "avx512 Q4_0: repacked at load");
		qmat_free(m);
		quant_allow_pack(0);
		m = qmat_create(TT_Q4_0, 2, 512, wbuf, &cause);
		ok(m != NULL && qmat_packed_bytes(m) == 0,
		    "avx512 Q4_0: quant_allow_pack(0) keeps the mapped rows");
		qmat_free(m);
		diag("avx512 on the mapped rows (no repacking)");
		for (i = 0; i < KTU_NTYPES; i++)
			for (j = 0; j < sizeof rowcounts / sizeof rowcounts[0]; j++)
				test_shape(pool, QUANT_ISA_AVX512, ktu_types[i],
				    rowcounts[j], j == 2 ? 768 : 512);
		quant_allow_pack(1);
		/*
		 * F16 and BF16 are repacked in groups of 16 rows by an even
		 * number of columns, and a prompt's tiles take two groups;
		 * odd widths and partial groups reach the tails of the kernels.
		 */
		fw = calloc(17 * 75, 2);
		m = qmat_create(TT_F16, 17, 75, fw, &cause);
		ok(m != NULL && qmat_packed_bytes(m) == 2 * 16 * 76 * 2,
		    "avx512 F16: repacked at load in 16-row groups");
		qmat_free(m);
		free(fw);
		for (i = 0; i < 2; i++) {
			uint32_t ft = i == 0 ? TT_F16 : TT_BF16;

			test_shape(pool, QUANT_ISA_AVX512, ft, 33, 75);
			/* A two-group tile whose second group is partial. */
			test_shape(pool, QUANT_ISA_AVX512, ft, 20, 75);
			test_shape(pool, QUANT_ISA_AVX512, ft, 16, 1);
			test_shape(pool, QUANT_ISA_AVX512, ft, 40, 2050);
		}
		/* Every repacked type against its kernel on the mapped rows. */
		for (i = 0; i < KTU_NTYPES; i++) {
			int bl = tensor_type_get(ktu_types[i])->block_elems;

			if (bl == 1)
				continue;
			test_packed_vs_mapped(pool, QUANT_ISA_AVX512, ktu_types[i], 40,
			    bl == 256 ? 768 : 160);
			test_packed_vs_mapped(pool, QUANT_ISA_AVX512, ktu_types[i], 16, 256);
		}
	}
	/*
	 * The AVX2 kernels repack fewer types: those (qmat_packed_bytes says
	 * which) on the mapped rows too, and packed against mapped.
	 */
	if (quant_force_isa(QUANT_ISA_AVX2) == 0) {
		for (i = 0; i < KTU_NTYPES; i++) {
			const struct tensor_type_info *ti = tensor_type_get(ktu_types[i]);
			void	*zw = calloc(16, tensor_row_bytes(ti, 256));

			m = qmat_create(ktu_types[i], 16, 256, zw, &cause);
			j = m != NULL && qmat_packed_bytes(m) > 0;
			qmat_free(m);
			free(zw);
			if (!j)
				continue;
			diag("avx2 %s on the mapped rows (no repacking)", ti->name);
			quant_allow_pack(0);
			for (j = 0; j < sizeof rowcounts / sizeof rowcounts[0]; j++)
				test_shape(pool, QUANT_ISA_AVX2, ktu_types[i], rowcounts[j],
				    j == 2 ? 768 : 512);
			quant_allow_pack(1);
			test_packed_vs_mapped(pool, QUANT_ISA_AVX2, ktu_types[i], 40, 768);
			test_packed_vs_mapped(pool, QUANT_ISA_AVX2, ktu_types[i], 13, 256);
		}
		/*
		 * Q2_K and Q3_K tiles hold their activations on the stack: a
		 * matrix wider than they allow keeps its mapped rows.
		 */
		for (j = 0; j < 2; j++) {
			uint32_t type = j == 0 ? TT_Q2_K : TT_Q3_K;
			const struct tensor_type_info *ti = tensor_type_get(type);
			int64_t	 wide = 32768 + 256;
			void	*zw = calloc(8, tensor_row_bytes(ti, wide));

			m = qmat_create(type, 8, 32768, zw, &cause);
			ok(m != NULL && qmat_packed_bytes(m) > 0,
			    "avx2 %s 8x32768: repacked", ti->name);
			qmat_free(m);
			m = qmat_create(type, 8, wide, zw, &cause);
			ok(m != NULL && qmat_packed_bytes(m) == 0,
			    "avx2 %s 8x%lld: too wide for the tiles, mapped rows kept",
			    ti->name, (long long)wide);
			qmat_free(m);
			free(zw);
		}
	}
	/* bf16-dot auto: a measured rate, and the setting it implies. */
	{
		double	rate;
		int	which = quant_bf16_dot_auto(&rate);

		if (!quant_bf16_dot_supported())
			ok(which == QUANT_BF16_DOT_NONE && rate == 0,
			    "bf16 dot auto: none without the instructions");
		else
			ok(rate > 0.05 && rate < 20 && which == (rate >= 0.75 ?
			    QUANT_BF16_DOT_BF16 : QUANT_BF16_DOT_NONE),
			    "bf16 dot auto: vdpbf16ps at %.2f of the multiply-add "
			    "rate, %s", rate, which == QUANT_BF16_DOT_NONE ?
			    "none" : "BF16 weights");
	}
	/*
	 * A forced variant answers for itself: no bf16 dot products below
	 * AVX-512, no 16-bit integer products on the scalar kernels.
	 */
	{
		double	rate = 1;
		int	which;

		if (quant_force_isa(QUANT_ISA_AVX2) == 0) {
			which = quant_bf16_dot_auto(&rate);
			ok(!quant_bf16_dot_supported() &&
			    which == QUANT_BF16_DOT_NONE && rate == 0,
			    "forced avx2: no bf16 dot products (auto %d, rate %g)",
			    which, rate);
		}
		quant_force_isa(QUANT_ISA_SCALAR);
		rate = 1;
		which = quant_f16_i16_auto(&rate);
		ok(which == 0 && rate == 0, "forced scalar: no 16-bit integer "
		    "products (auto %d, rate %g)", which, rate);
		quant_force_isa(QUANT_ISA_AUTO);
	}
	/* bf16 dot products for the float types, where the CPU has them. */
	if (quant_bf16_dot_supported()) {
		quant_force_isa(QUANT_ISA_AVX512);
		quant_allow_bf16_dot(QUANT_BF16_DOT_ALL);
		bf16_mode = 1;
		for (j = 0; j < sizeof rowcounts / sizeof rowcounts[0]; j++) {
			test_shape(pool, QUANT_ISA_AVX512, TT_F16, rowcounts[j], 512);
			test_shape(pool, QUANT_ISA_AVX512, TT_BF16, rowcounts[j], 512);
		}
		test_shape(pool, QUANT_ISA_AVX512, TT_F16, 6, 160);
		test_shape(pool, QUANT_ISA_AVX512, TT_BF16, 3, 96);
		test_shape(pool, QUANT_ISA_AVX512, TT_F16, 33, 75);
		test_shape(pool, QUANT_ISA_AVX512, TT_BF16, 40, 2050);
		/* Decode tiles of four groups, whole and cut short. */
		test_shape(pool, QUANT_ISA_AVX512, TT_BF16, 64, 130);
		test_shape(pool, QUANT_ISA_AVX512, TT_F16, 150, 96);
		bf16_mode = 0;
		quant_allow_bf16_dot(QUANT_BF16_DOT_NONE);
		test_bf16_only(pool);
		test_bf16_values(pool);
	} else
		diag("bf16 dot products: not supported by this CPU, skipped");
	/* F16 and BF16 on 16-bit integer dot products, AVX-512 VNNI and AVX2. */
	for (isa = QUANT_ISA_AVX512; isa >= QUANT_ISA_AVX2; isa--) {
		if (quant_force_isa(isa) != 0) {
			diag("f16 16-bit integer products on %s: not supported by "
			    "this CPU, skipped", quant_isa_name(isa));
			continue;
		}
		quant_allow_f16_i16(1);
		i16_mode = 1;
		for (j = 0; j < sizeof rowcounts / sizeof rowcounts[0]; j++)
			test_shape(pool, isa, TT_F16, rowcounts[j], j == 2 ? 768 : 512);
		test_shape(pool, isa, TT_F16, 33, 75);
		test_shape(pool, isa, TT_F16, 20, 75);
		test_shape(pool, isa, TT_F16, 16, 1);
		test_shape(pool, isa, TT_F16, 40, 2050);
		test_shape(pool, isa, TT_F16, 150, 96);
		quant_allow_pack(0);
		test_shape(pool, isa, TT_F16, 37, 768);
		quant_allow_pack(1);
		test_shape(pool, isa, TT_BF16, 33, 75);
		test_shape(pool, isa, TT_BF16, 40, 2050);
		test_shape(pool, isa, TT_BF16, 150, 96);
		i16_mode = 0;
		quant_allow_f16_i16(0);
		test_f16_i16(pool);
	}
	quant_force_isa(QUANT_ISA_AUTO);
	test_oversubscribed();
	test_mul_n(pool);
	test_read_sum(pool);
	threadpool_destroy(pool);
	done_testing();
}
