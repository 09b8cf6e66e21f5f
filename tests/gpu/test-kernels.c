/*
 * test-kernels.c: every CUDA kernel against its C reference (kernels/ref.c)
 * on random inputs of several shapes.  Each check prints one TAP line
 * "<kernel> <shape>: max abs err <e>" (tests/gpu/device-check.sh turns them
 * into a table); an element passes when |got - ref| <= tol + |ref| * eps,
 * or for products, within a bound proportional to sum |w| |x|, the scale
 * of the rounding error whatever the cancellation.  Without a device the
 * whole test is skipped.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_type.h"
#include "util.h"
#include "cuda_kernels.h"
#include "ref.h"
#include "../tap.h"

/* Stop the whole test on a failed CUDA call: later results would be noise. */
#define CK(call) do {							\
	int e_ = (int)(call);						\
	if (e_ != 0) {							\
		printf("Bail out! %s:%d: %s: %s\n", __FILE__, __LINE__,	\
		    #call, cuda_kernels_strerror(e_));			\
		exit(1);						\
	}								\
} while (0)

static uint64_t	rng_seed = 20240611, rng_n;

/* A uniform float in [-1, 1). */
static float
frand(void)
{
	return 2.0f * kdefs_uniform(rng_seed, rng_n++) - 1.0f;
}

/* A uniform integer in [0, n). */
static int
irand(int n)
{
	return (int)(kdefs_mix64(rng_seed ^ kdefs_mix64(rng_n++)) % (uint64_t)n);
}

/* Copy host memory to a new device buffer (h NULL: leave it uninitialized). */
static void *
to_dev(const void *h, size_t n)
{
	void	*d;

	CK(cudaMalloc(&d, n > 0 ? n : 1));
	if (h != NULL && n > 0)
		CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
	return d;
}

/* Copy a device buffer back to host memory. */
static void
from_dev(void *h, const void *d, size_t n)
{
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

/* Random floats scaled by s. */
static float *
rand_floats(size_t n, float s)
{
	float	*x = xreallocarray(NULL, n, sizeof *x);
	size_t	 i;

	for (i = 0; i < n; i++)
		x[i] = frand() * s;
	return x;
}

/* Store a half little-endian. */
static void
put_f16(uint8_t *p, float f)
{
	uint16_t	h = ref_f32_to_f16(f);

	p[0] = h & 0xff;
	p[1] = h >> 8;
}

/*
 * n_elems random elements of a type in host memory: floats in
 * [-scale, scale], or random code bytes with sane block scales.
 */
static void *
rand_weights(uint32_t type, size_t n_elems, float scale)
{
	const struct tensor_type_info	*ti = tensor_type_get(type);
	size_t				 nb = n_elems / ti->block_elems, i;
	uint8_t				*b;

	b = xmalloc(nb * ti->block_bytes);
	for (i = 0; i < nb * ti->block_bytes; i++)
		b[i] = (uint8_t)irand(256);
	for (i = 0; i < nb; i++) {
		uint8_t	*p = b + i * ti->block_bytes;
		float	 f = frand() * scale;

		switch (type) {
		case TT_F32:
			memcpy(p, &f, 4);
			break;
		case TT_F16:
			put_f16(p, f);
			break;
		case TT_BF16: {
			uint16_t h = ref_f32_to_bf16(f);
			p[0] = h & 0xff;
			p[1] = h >> 8;
			break;
		}
		case TT_Q8_0:
			put_f16(p, scale / 128 * (0.5f + fabsf(f) / scale));
			break;
		case TT_Q4_0:
			put_f16(p, scale / 8 * (0.5f + fabsf(f) / scale));
			break;
		case TT_Q4_K:
			put_f16(p, scale / (63 * 15));
			put_f16(p + 2, scale / (63 * 2));
			break;
		case TT_Q6_K:
			put_f16(p + 208, scale / (128 * 32));
			break;
		case TT_Q4_1:
		case TT_Q5_1:
			put_f16(p, scale / (type == TT_Q4_1 ? 15 : 31));
			put_f16(p + 2, -scale / 2);
			break;
		case TT_Q5_0:
			put_f16(p, scale / 16);
			break;
		case TT_IQ4_NL:
		case TT_IQ4_XS:
			put_f16(p, scale / (127 * (type == TT_IQ4_XS ? 32 : 1)));
			break;
		case TT_Q2_K:
			put_f16(p + 80, scale / (15 * 3));
			put_f16(p + 82, scale / (15 * 2));
			break;
		case TT_Q3_K:
			put_f16(p + 108, scale / (32 * 4));
			break;
		case TT_Q5_K:
			put_f16(p, scale / (63 * 31));
			put_f16(p + 2, scale / (63 * 2));
			break;
		}
	}
	return b;
}

/* Compare got and want with |err| <= tol[i] and print the table line. */
static void
check_tolv(const char *kernel, const char *shape, const float *got,
    const float *want, const double *tolv, double tol, double eps, size_t n)
{
	double	err, max = 0, lim;
	size_t	i, bad = 0, first = 0;

	for (i = 0; i < n; i++) {
		err = fabs((double)got[i] - want[i]);
		lim = tolv != NULL ? tolv[i] : tol + fabs(want[i]) * eps;
		if (isnan(err))
			err = INFINITY;
		if (err > max)
			max = err;
		if (!(err <= lim)) {
			if (bad++ == 0)
				first = i;
		}
	}
	ok(bad == 0, "%s %s: max abs err %.3g", kernel, shape, max);
	if (bad != 0)
		diag("%zu of %zu outside the tolerance; first at %zu: got %.9g, "
		    "want %.9g", bad, n, first, got[first], want[first]);
}

/* Compare with tolerance tol + |ref| * eps. */
static void
check(const char *kernel, const char *shape, const float *got,
    const float *want, size_t n, double tol, double eps)
{
	check_tolv(kernel, shape, got, want, NULL, tol, eps, n);
}

/* RMSNorm over several row counts and widths. */
static void
test_rmsnorm(void)
{
	static const int	 shapes[][2] = { { 1, 64 }, { 7, 4096 }, { 3, 5000 } };
	char			 sh[64];
	float			*x, *w, *want, *got, *dx, *dw, *dy;
	size_t			 k, n;

	for (k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		n = (size_t)shapes[k][0] * shapes[k][1];
		x = rand_floats(n, 3.0f);
		w = rand_floats(shapes[k][1], 1.0f);
		want = xmalloc(n * 4);
		got = xmalloc(n * 4);
		dx = to_dev(x, n * 4);
		dw = to_dev(w, shapes[k][1] * 4);
		dy = to_dev(NULL, n * 4);
		CK(cuda_rmsnorm_forward(dy, dx, dw, shapes[k][0], shapes[k][1],
		    1e-5f, NULL));
		from_dev(got, dy, n * 4);
		ref_rmsnorm_forward(want, x, w, shapes[k][0], shapes[k][1], 1e-5f);
		snprintf(sh, sizeof sh, "%dx%d", shapes[k][0], shapes[k][1]);
		check("rmsnorm", sh, got, want, n, 1e-6, 1e-5);
		/* in place */
		CK(cuda_rmsnorm_forward(dx, dx, dw, shapes[k][0], shapes[k][1],
		    1e-5f, NULL));
		from_dev(got, dx, n * 4);
		snprintf(sh, sizeof sh, "%dx%d/inplace", shapes[k][0],
		    shapes[k][1]);
		check("rmsnorm", sh, got, want, n, 1e-6, 1e-5);
		cudaFree(dx); cudaFree(dw); cudaFree(dy);
		free(x); free(w); free(want); free(got);
	}
}

/* RoPE on q-shaped arrays, full and partial rotation, large positions. */
static void
test_rope(void)
{
	static const struct { int tok, heads, hd, rot; float base; } c[] = {
		{ 5, 4, 64, 64, 10000.0f }, { 3, 2, 128, 64, 500000.0f },
		{ 2, 8, 8, 8, 10000.0f }, { 17, 8, 128, 128, 500000.0f },
	};
	char	 sh[64];
	float	*x, *got, *dx;
	int32_t	 pos[32], *dpos;
	size_t	 k, n;
	int	 t;

	for (k = 0; k < sizeof c / sizeof c[0]; k++) {
		n = (size_t)c[k].tok * c[k].heads * c[k].hd;
		x = rand_floats(n, 2.0f);
		got = xmalloc(n * 4);
		for (t = 0; t < c[k].tok; t++)
			pos[t] = t == 0 ? 0 : irand(32768);
		dx = to_dev(x, n * 4);
		dpos = to_dev(pos, c[k].tok * 4);
		CK(cuda_rope_forward(dx, dpos, c[k].tok, c[k].heads, c[k].hd,
		    c[k].rot, c[k].base, NULL));
		from_dev(got, dx, n * 4);
		ref_rope_forward(x, pos, c[k].tok, c[k].heads, c[k].hd, c[k].rot,
		    c[k].base);
		snprintf(sh, sizeof sh, "%dx%dx%d/rot%d", c[k].tok, c[k].heads,
		    c[k].hd, c[k].rot);
		check("rope", sh, got, x, n, 1e-6, 1e-6);
		cudaFree(dx); cudaFree(dpos);
		free(x); free(got);
	}
}

/* SwiGLU and the residual add. */
static void
test_elementwise(void)
{
	size_t	 n = 100003;
	float	*g = rand_floats(n, 12.0f), *u = rand_floats(n, 2.0f);
	float	*want = xmalloc(n * 4), *got = xmalloc(n * 4);
	float	*dg = to_dev(g, n * 4), *du = to_dev(u, n * 4);
	float	*dy = to_dev(NULL, n * 4);

	CK(cuda_swiglu_forward(dy, dg, du, n, NULL));
	from_dev(got, dy, n * 4);
	ref_swiglu_forward(want, g, u, n);
	check("swiglu", "100003", got, want, n, 1e-7, 1e-6);
	CK(cuda_add_forward(dg, dg, du, n, NULL));
	from_dev(got, dg, n * 4);
	ref_add_forward(want, g, u, n);
	check("add", "100003/inplace", got, want, n, 0, 0);
	cudaFree(dg); cudaFree(du); cudaFree(dy);
	free(g); free(u); free(want); free(got);
}

/* F32/F16/BF16 conversions must round exactly like the reference. */
static void
test_convert(void)
{
	size_t		 n = 65536 + 4096, i, bad;
	float		*x = xmalloc(n * 4), *back = xmalloc(n * 4);
	uint16_t	*h = xmalloc(n * 2), *hb = xmalloc(n * 2);
	void		*dx, *dh, *db, *df;

	for (i = 0; i < n; i++) {
		if (i < 65536) {	/* every half, and its upper neighbours */
			x[i] = ref_f16_to_f32((uint16_t)i);
			if (isnan(x[i]))
				x[i] = 1.0f;
			if (i % 3 == 1)
				x[i] = nextafterf(x[i], INFINITY);
		} else
			x[i] = ldexpf(frand(), irand(60) - 30);
	}
	dx = to_dev(x, n * 4);
	dh = to_dev(NULL, n * 2);
	db = to_dev(NULL, n * 2);
	df = to_dev(NULL, n * 4);

	CK(cuda_convert_forward(dh, TT_F16, dx, TT_F32, n, NULL));
	from_dev(h, dh, n * 2);
	for (i = bad = 0; i < n; i++)
		bad += h[i] != ref_f32_to_f16(x[i]);
	is_int(bad, 0, "convert f32->f16 69632: mismatches %zu", bad);

	CK(cuda_convert_forward(db, TT_BF16, dx, TT_F32, n, NULL));
	from_dev(hb, db, n * 2);
	for (i = bad = 0; i < n; i++)
		bad += hb[i] != ref_f32_to_bf16(x[i]);
	is_int(bad, 0, "convert f32->bf16 69632: mismatches %zu", bad);

	CK(cuda_convert_forward(df, TT_F32, dh, TT_F16, n, NULL));
	from_dev(back, df, n * 4);
	for (i = bad = 0; i < n; i++)
		bad += back[i] != ref_f16_to_f32(h[i]);
	is_int(bad, 0, "convert f16->f32 69632: mismatches %zu", bad);

	CK(cuda_convert_forward(db, TT_BF16, dh, TT_F16, n, NULL));
	from_dev(hb, db, n * 2);
	for (i = bad = 0; i < n; i++)
		bad += hb[i] != ref_f32_to_bf16(ref_f16_to_f32(h[i]));
	is_int(bad, 0, "convert f16->bf16 69632: mismatches %zu", bad);

	CK(cuda_convert_forward(df, TT_F32, db, TT_BF16, n, NULL));
	from_dev(back, df, n * 4);
	for (i = bad = 0; i < n; i++)
		bad += back[i] != ref_bf16_to_f32(hb[i]);
	is_int(bad, 0, "convert bf16->f32 69632: mismatches %zu", bad);
	is_int(cuda_convert_forward(df, TT_Q8_0, dx, TT_F32, n, NULL), 1,
	    "convert refuses a quantized type");

	cudaFree(dx); cudaFree(dh); cudaFree(db); cudaFree(df);
	free(x); free(back); free(h); free(hb);
}

static const uint32_t all_types[] = { TT_F32, TT_F16, TT_BF16, TT_Q8_0,
	TT_Q4_0, TT_Q4_K, TT_Q6_K, TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_IQ4_NL, TT_Q2_K,
	TT_Q3_K, TT_Q5_K, TT_IQ4_XS };
#define N_TYPES	(sizeof all_types / sizeof all_types[0])

/* Embedding rows of every type, with ids out of range. */
static void
test_embedding(void)
{
	int32_t	 tok[6] = { 0, 36, 5, 37, -1, 12 }, *dtok;
	int	 dim = 512, vocab = 37, nt = 6;
	float	*want = xmalloc((size_t)nt * dim * 4), *got = xmalloc((size_t)nt * dim * 4);
	float	*dy;
	void	*tab, *dtab;
	char	 sh[64];
	size_t	 k;

	dtok = to_dev(tok, sizeof tok);
	dy = to_dev(NULL, (size_t)nt * dim * 4);
	for (k = 0; k < N_TYPES; k++) {
		const struct tensor_type_info *ti = tensor_type_get(all_types[k]);

		tab = rand_weights(all_types[k], (size_t)vocab * dim, 1.0f);
		dtab = to_dev(tab, tensor_row_bytes(ti, dim) * vocab);
		CK(cuda_embedding_forward(dy, dtab, all_types[k], dim, vocab, dtok,
		    nt, NULL));
		from_dev(got, dy, (size_t)nt * dim * 4);
		ref_embedding_forward(want, tab, all_types[k], dim, vocab, tok, nt);
		snprintf(sh, sizeof sh, "%s/%dx%d", ti->name, nt, dim);
		check("embedding", sh, got, want, (size_t)nt * dim, 1e-7, 1e-6);
		cudaFree(dtab);
		free(tab);
	}
	cudaFree(dtok); cudaFree(dy);
	free(want); free(got);
}

/* New keys and values land in their slots, as F16, bit for bit. */
static void
test_kv_store(void)
{
	int		 n_kv = 2, hd = 64, nblk = 4, nt = 10, t;
	size_t		 cache = (size_t)nblk * KV_BLOCK * n_kv * hd, i, bad = 0;
	int32_t		 slots[10], *dslots;
	uint16_t	*kc = xmalloc(cache * 2), *vc = xmalloc(cache * 2);
	uint16_t	*gk = xmalloc(cache * 2), *gv = xmalloc(cache * 2);
	float		*k = rand_floats((size_t)nt * n_kv * hd, 4.0f);
	float		*v = rand_floats((size_t)nt * n_kv * hd, 4.0f);
	void		*dkc, *dvc, *dk, *dv;

	for (i = 0; i < cache; i++) {
		kc[i] = (uint16_t)irand(0x7c00);
		vc[i] = (uint16_t)irand(0x7c00);
	}
	for (t = 0; t < nt; t++)
		slots[t] = t == 4 ? -1 : (t * 7 + 3) % (nblk * KV_BLOCK);
	dkc = to_dev(kc, cache * 2);
	dvc = to_dev(vc, cache * 2);
	dk = to_dev(k, (size_t)nt * n_kv * hd * 4);
	dv = to_dev(v, (size_t)nt * n_kv * hd * 4);
	dslots = to_dev(slots, sizeof slots);
	CK(cuda_kv_store_forward(dkc, dvc, dk, dv, dslots, nt, n_kv, hd, NULL));
	from_dev(gk, dkc, cache * 2);
	from_dev(gv, dvc, cache * 2);
	ref_kv_store_forward(kc, vc, k, v, slots, nt, n_kv, hd);
	for (i = 0; i < cache; i++)
		bad += (gk[i] != kc[i]) + (gv[i] != vc[i]);
	is_int(bad, 0, "kv_store 10x2x64: mismatches %zu", bad);
	cudaFree(dkc); cudaFree(dvc); cudaFree(dk); cudaFree(dv); cudaFree(dslots);
	free(kc); free(vc); free(gk); free(gv); free(k); free(v);
}

/* Dequantize a whole weight on the host, optionally rounding to F16. */
static float *
host_dequant(const void *w, uint32_t type, int n_in, int n_out, int round16)
{
	const struct tensor_type_info	*ti = tensor_type_get(type);
	float				*d = xmalloc((size_t)n_in * n_out * 4);
	size_t				 i;
	int				 o;

	for (o = 0; o < n_out; o++)
		ref_dequant_row(type, (const uint8_t *)w +
		    (size_t)o * tensor_row_bytes(ti, n_in), d + (size_t)o * n_in,
		    n_in);
	if (round16)
		for (i = 0; i < (size_t)n_in * n_out; i++)
			d[i] = ref_f16_to_f32(ref_f32_to_f16(d[i]));
	return d;
}

/* Per-output tolerance: rel * sum_i |w_i| |x_i| + 1e-6. */
static double *
prod_tol(const float *wd, const float *x, int n_tok, int n_in, int n_out,
    double rel)
{
	double	*tol = xreallocarray(NULL, (size_t)n_tok * n_out, sizeof *tol);
	double	 s;
	int	 t, o, i;

	for (t = 0; t < n_tok; t++)
		for (o = 0; o < n_out; o++) {
			s = 0;
			for (i = 0; i < n_in; i++)
				s += fabs(wd[(size_t)o * n_in + i] *
				    x[(size_t)t * n_in + i]);
			tol[(size_t)t * n_out + o] = rel * s + 1e-6;
		}
	return tol;
}

/* Round floats through F16 or BF16 (a copy). */
static float *
rounded(const float *x, size_t n, uint32_t type)
{
	float	*y = xmalloc(n * 4);
	size_t	 i;

	for (i = 0; i < n; i++)
		y[i] = type == TT_F16 ? ref_f16_to_f32(ref_f32_to_f16(x[i])) :
		    type == TT_BF16 ? ref_bf16_to_f32(ref_f32_to_bf16(x[i])) : x[i];
	return y;
}

/* The direct (small-batch) kernel for every type and several batches. */
static void
test_qmatmul(void)
{
	static const int	 toks[] = { 1, 3, 8, 13 };
	int			 n_in = 512, n_out = 67, nt, tk;
	char			 sh[64];
	size_t			 k;

	for (k = 0; k < N_TYPES; k++) {
		const struct tensor_type_info *ti = tensor_type_get(all_types[k]);
		void	*w = rand_weights(all_types[k], (size_t)n_in * n_out, 1.0f);
		void	*dw = to_dev(w, tensor_row_bytes(ti, n_in) * n_out);
		float	*wd = host_dequant(w, all_types[k], n_in, n_out, 0);

		for (tk = 0; tk < 4; tk++) {
			nt = toks[tk];
			float	*x = rand_floats((size_t)nt * n_in, 1.0f);
			float	*want = xmalloc((size_t)nt * n_out * 4);
			float	*got = xmalloc((size_t)nt * n_out * 4);
			float	*dx = to_dev(x, (size_t)nt * n_in * 4);
			float	*dy = to_dev(NULL, (size_t)nt * n_out * 4);
			double	*tol = prod_tol(wd, x, nt, n_in, n_out, 1e-5);

			CK(cuda_qmatmul_forward(dy, dx, dw, all_types[k], nt, n_in,
			    n_out, NULL));
			from_dev(got, dy, (size_t)nt * n_out * 4);
			ref_matmul_forward(want, x, w, all_types[k], nt, n_in, n_out);
			snprintf(sh, sizeof sh, "%s/%dx%dx%d", ti->name, nt, n_in,
			    n_out);
			check_tolv("qmatmul", sh, got, want, tol, 0, 0,
			    (size_t)nt * n_out);
			cudaFree(dx); cudaFree(dy);
			free(x); free(want); free(got); free(tol);
		}
		cudaFree(dw);
		free(w); free(wd);
	}
}

/*
 * One cuda_matmul_forward case.  The reference sees what the device path
 * computes with: activations rounded to the type cuBLAS is fed and, on the
 * dequantize + GEMM path, weights rounded to F16.
 */
static void
matmul_case(struct cuda_blas *b, uint32_t wt, uint32_t xt, int nt, int n_in,
    int n_out, const char *path)
{
	const struct tensor_type_info *ti = tensor_type_get(wt);
	int		 deq = strcmp(path, "deq+gemm") == 0;
	uint32_t	 feed = wt == TT_F16 || wt == TT_BF16 ? wt :
			    deq ? TT_F16 : wt == TT_F32 ? TT_F32 : xt;
	void		*w = rand_weights(wt, (size_t)n_in * n_out, 1.0f);
	void		*dw = to_dev(w, tensor_row_bytes(ti, n_in) * n_out);
	float		*wd = host_dequant(w, wt, n_in, n_out, deq);
	float		*x0 = rand_floats((size_t)nt * n_in, 1.0f);
	float		*x = rounded(x0, (size_t)nt * n_in, xt);	/* as given */
	float		*xf = rounded(x, (size_t)nt * n_in, feed);	/* as used */
	float		*want = xmalloc((size_t)nt * n_out * 4);
	float		*got = xmalloc((size_t)nt * n_out * 4);
	uint16_t	*xb = xmalloc((size_t)nt * n_in * 2);
	double		*tol = prod_tol(wd, xf, nt, n_in, n_out,
			    wt == TT_F32 ? 1e-5 : 1e-4);
	void		*dx;
	float		*dy = to_dev(NULL, (size_t)nt * n_out * 4);
	char		 sh[96];
	size_t		 i;

	if (xt == CUDA_ACT_BF16) {
		for (i = 0; i < (size_t)nt * n_in; i++)
			xb[i] = ref_f32_to_bf16(x[i]);
		dx = to_dev(xb, (size_t)nt * n_in * 2);
	} else
		dx = to_dev(x, (size_t)nt * n_in * 4);
	/* The path named, whatever batch the dispatcher would send it. */
	cuda_blas_set_qmv_max_batch(b, deq ? 0 : 1 << 20);
	CK(cuda_matmul_forward(b, dy, dx, xt, dw, wt, nt, n_in, n_out));
	cuda_blas_set_qmv_max_batch(b, CUDA_QMV_MAX_BATCH_AUTO);
	from_dev(got, dy, (size_t)nt * n_out * 4);
	ref_matmul_forward(want, xf, wd, TT_F32, nt, n_in, n_out);
	snprintf(sh, sizeof sh, "%s*%s/%dx%dx%d/%s", ti->name,
	    xt == CUDA_ACT_BF16 ? "bf16" : "f32", nt, n_in, n_out, path);
	check_tolv("matmul", sh, got, want, tol, 0, 0, (size_t)nt * n_out);
	cudaFree(dw); cudaFree(dx); cudaFree(dy);
	free(w); free(wd); free(x0); free(x); free(xf); free(want); free(got);
	free(xb); free(tol);
}

/* Whether the dispatcher takes a quantized product of nt tokens through
 * dequantize + cuBLAS (it needs scratch space) rather than the direct
 * kernel (F32 activations need none). */
static int
takes_dequant(uint32_t wt, int nt)
{
	const struct tensor_type_info *ti = tensor_type_get(wt);
	struct cuda_blas	*b;
	void			*w = rand_weights(wt, (size_t)256 * 32, 1.0f);
	void			*dw = to_dev(w, tensor_row_bytes(ti, 256) * 32);
	float			*x = rand_floats((size_t)nt * 256, 1.0f);
	void			*dx = to_dev(x, (size_t)nt * 256 * 4);
	float			*dy = to_dev(NULL, (size_t)nt * 32 * 4);
	int			 deq;

	CK(cuda_blas_create(&b, NULL));
	CK(cuda_matmul_forward(b, dy, dx, CUDA_ACT_F32, dw, wt, nt, 256, 32));
	CK(cudaDeviceSynchronize());
	deq = cuda_blas_scratch_bytes(b) > 0;
	cuda_blas_destroy(b);
	cudaFree(dw); cudaFree(dx); cudaFree(dy);
	free(w); free(x);
	return deq;
}

/* The per-type limits of the direct kernel, as cuda_kernels.h gives them. */
static void
test_qmv_limits(void)
{
	static const struct { uint32_t t; int last; } lim[] = {
		{ TT_Q4_K, 2 }, { TT_Q3_K, 2 }, { TT_Q5_K, 2 },
		{ TT_Q8_0, 3 }, { TT_Q4_0, 3 }, { TT_Q4_1, 3 },
		{ TT_Q6_K, 4 }, { TT_Q5_0, 4 }, { TT_IQ4_XS, 4 },
	};
	size_t	i;

	for (i = 0; i < sizeof lim / sizeof lim[0]; i++) {
		const char *name = tensor_type_name(lim[i].t);

		ok(!takes_dequant(lim[i].t, lim[i].last) &&
		    takes_dequant(lim[i].t, lim[i].last + 1),
		    "matmul %s: the direct kernel up to %d tokens, "
		    "dequantize + cuBLAS from %d", name, lim[i].last,
		    lim[i].last + 1);
	}
}

/* The dispatcher: cuBLAS paths, the quantized paths, and bad arguments. */
static void
test_matmul(void)
{
	struct cuda_blas	*b;
	float			*dy;

	CK(cuda_blas_create(&b, NULL));
	matmul_case(b, TT_F32, CUDA_ACT_F32, 5, 256, 96, "sgemm");
	matmul_case(b, TT_F32, CUDA_ACT_BF16, 3, 256, 96, "sgemm");
	matmul_case(b, TT_F16, CUDA_ACT_F32, 7, 512, 130, "gemmex");
	matmul_case(b, TT_F16, CUDA_ACT_F32, 64, 1024, 256, "gemmex");
	matmul_case(b, TT_BF16, CUDA_ACT_BF16, 9, 512, 130, "gemmex");
	matmul_case(b, TT_BF16, CUDA_ACT_F32, 1, 2048, 300, "gemmex");
	matmul_case(b, TT_Q8_0, CUDA_ACT_F32, 1, 4096, 256, "qmv");
	matmul_case(b, TT_Q4_K, CUDA_ACT_F32, 3, 1024, 100, "qmv");
	matmul_case(b, TT_Q8_0, CUDA_ACT_BF16, 2, 512, 64, "qmv");
	matmul_case(b, TT_Q8_0, CUDA_ACT_F32, 40, 512, 96, "deq+gemm");
	matmul_case(b, TT_Q4_0, CUDA_ACT_F32, 17, 512, 96, "deq+gemm");
	matmul_case(b, TT_Q4_K, CUDA_ACT_F32, 33, 512, 96, "deq+gemm");
	matmul_case(b, TT_Q6_K, CUDA_ACT_BF16, 20, 768, 80, "deq+gemm");
	/* 8192-wide rows: 4096 rows per slice, so two slices */
	matmul_case(b, TT_Q8_0, CUDA_ACT_F32, 20, 8192, 4200, "deq+gemm");
	matmul_case(b, TT_Q6_K, CUDA_ACT_F32, 64, 512, 50, "qmv");
	/* The types beyond the first seven, both paths each. */
	matmul_case(b, TT_Q4_1, CUDA_ACT_F32, 3, 512, 70, "qmv");
	matmul_case(b, TT_Q5_0, CUDA_ACT_F32, 2, 512, 70, "qmv");
	matmul_case(b, TT_Q5_1, CUDA_ACT_F32, 1, 512, 70, "qmv");
	matmul_case(b, TT_IQ4_NL, CUDA_ACT_F32, 3, 512, 70, "qmv");
	matmul_case(b, TT_Q2_K, CUDA_ACT_F32, 3, 512, 70, "qmv");
	matmul_case(b, TT_Q3_K, CUDA_ACT_F32, 2, 768, 70, "qmv");
	matmul_case(b, TT_Q5_K, CUDA_ACT_F32, 1, 512, 70, "qmv");
	matmul_case(b, TT_IQ4_XS, CUDA_ACT_F32, 3, 512, 70, "qmv");
	matmul_case(b, TT_Q4_1, CUDA_ACT_F32, 33, 256, 40, "deq+gemm");
	matmul_case(b, TT_Q5_0, CUDA_ACT_BF16, 33, 256, 40, "deq+gemm");
	matmul_case(b, TT_Q5_1, CUDA_ACT_F32, 33, 256, 40, "deq+gemm");
	matmul_case(b, TT_IQ4_NL, CUDA_ACT_F32, 33, 256, 40, "deq+gemm");
	matmul_case(b, TT_Q2_K, CUDA_ACT_F32, 33, 512, 40, "deq+gemm");
	matmul_case(b, TT_Q3_K, CUDA_ACT_BF16, 33, 256, 40, "deq+gemm");
	matmul_case(b, TT_Q5_K, CUDA_ACT_F32, 33, 256, 40, "deq+gemm");
	matmul_case(b, TT_IQ4_XS, CUDA_ACT_F32, 33, 512, 40, "deq+gemm");

	dy = to_dev(NULL, 64);
	is_int(cuda_matmul_forward(b, dy, dy, CUDA_ACT_F32, dy, 17, 1, 256, 1),
	    1, "matmul refuses an unsupported weight type");
	is_int(cuda_matmul_forward(b, dy, dy, CUDA_ACT_F32, dy, TT_Q4_K, 1, 100,
	    1), 1, "matmul refuses rows that are not whole blocks");
	is_int(cuda_matmul_forward(b, dy, dy, CUDA_ACT_F32, dy, TT_F16, 0, 256,
	    4), 0, "matmul of no tokens is a no-op");
	cudaFree(dy);
	cuda_blas_destroy(b);
}

/* F16 dequantization of a row range matches the reference to one F16 ulp. */
static void
test_dequant_f16(void)
{
	int		 n_in = 512, n_out = 9, row0 = 2, rows = 5;
	char		 sh[64];
	size_t		 k, i, n = (size_t)rows * n_in;

	for (k = 3; k < N_TYPES; k++) {
		const struct tensor_type_info *ti = tensor_type_get(all_types[k]);
		void		*w = rand_weights(all_types[k], (size_t)n_in * n_out, 1.0f);
		void		*dw = to_dev(w, tensor_row_bytes(ti, n_in) * n_out);
		float		*wd = host_dequant(w, all_types[k], n_in, n_out, 1);
		uint16_t	*h = xmalloc(n * 2);
		float		*got = xmalloc(n * 4);
		void		*dd = to_dev(NULL, n * 2);

		CK(cuda_dequant_f16_forward(dd, dw, all_types[k], n_in, row0, rows,
		    NULL));
		from_dev(h, dd, n * 2);
		for (i = 0; i < n; i++)
			got[i] = ref_f16_to_f32(h[i]);
		snprintf(sh, sizeof sh, "%s/rows%d-%d", ti->name, row0,
		    row0 + rows - 1);
		check("dequant_f16", sh, got, wd + (size_t)row0 * n_in, n, 6e-8,
		    1.0 / 1024);
		cudaFree(dw); cudaFree(dd);
		free(w); free(wd); free(h); free(got);
	}
}

/*
 * One attention batch: random F16 pages handed out in shuffled order,
 * random queries (scaled up so the softmax is peaked), checked against
 * the reference.
 */
static void
attn_case(const char *name, int n_seqs, const int *q_len, const int *ctx,
    int n_heads, int n_kv, int hd, int split_len, int with_ws)
{
	struct cuda_attention_args	 a;
	struct attn_seq			 seqs[8];
	int32_t				*bt, *perm;
	uint16_t			*kc, *vc;
	float				*q, *want, *got;
	size_t				 cache, ws_bytes = 0;
	int				 s, i, j, nblk = 0, max_blocks = 0, n_tok = 0;
	int				 max_q = 0, max_ctx = 0, tmp;
	char				 sh[128], split[32];
	void				*dws = NULL;

	for (s = 0; s < n_seqs; s++) {
		seqs[s].q_start = n_tok;
		seqs[s].q_len = q_len[s];
		seqs[s].ctx_len = ctx[s];
		seqs[s].reserved = 0;
		n_tok += q_len[s];
		j = (ctx[s] + KV_BLOCK - 1) / KV_BLOCK;
		nblk += j;
		if (j > max_blocks)
			max_blocks = j;
		if (q_len[s] > max_q)
			max_q = q_len[s];
		if (ctx[s] > max_ctx)
			max_ctx = ctx[s];
	}
	nblk += 3;	/* blocks nobody owns */
	perm = xreallocarray(NULL, nblk, sizeof *perm);
	for (i = 0; i < nblk; i++)
		perm[i] = i;
	for (i = nblk - 1; i > 0; i--) {
		j = irand(i + 1);
		tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp;
	}
	bt = xcalloc((size_t)n_seqs * max_blocks, sizeof *bt);
	for (s = 0, j = 0; s < n_seqs; s++)
		for (i = 0; i < (ctx[s] + KV_BLOCK - 1) / KV_BLOCK; i++)
			bt[(size_t)s * max_blocks + i] = perm[j++];
	cache = (size_t)nblk * KV_BLOCK * n_kv * hd;
	kc = xmalloc(cache * 2);
	vc = xmalloc(cache * 2);
	for (size_t e = 0; e < cache; e++) {
		kc[e] = ref_f32_to_f16(frand());
		vc[e] = ref_f32_to_f16(frand());
	}
	q = rand_floats((size_t)n_tok * n_heads * hd, 3.0f);
	want = xmalloc((size_t)n_tok * n_heads * hd * 4);
	got = xmalloc((size_t)n_tok * n_heads * hd * 4);

	memset(&a, 0, sizeof a);
	a.out = to_dev(NULL, (size_t)n_tok * n_heads * hd * 4);
	a.q = to_dev(q, (size_t)n_tok * n_heads * hd * 4);
	a.k_cache = to_dev(kc, cache * 2);
	a.v_cache = to_dev(vc, cache * 2);
	a.block_tables = to_dev(bt, (size_t)n_seqs * max_blocks * 4);
	a.seqs = to_dev(seqs, (size_t)n_seqs * sizeof seqs[0]);
	a.n_seqs = n_seqs;
	a.n_tok = n_tok;
	a.max_blocks = max_blocks;
	a.n_heads = n_heads;
	a.n_kv_heads = n_kv;
	a.head_dim = hd;
	a.max_q_len = max_q;
	a.max_ctx_len = max_ctx;
	a.scale = 1.0f / sqrtf((float)hd);
	a.split_len = split_len;
	if (with_ws) {
		ws_bytes = cuda_attention_workspace_size(n_tok, n_heads, hd,
		    (max_ctx + 31) / 32);
		dws = to_dev(NULL, ws_bytes);
		a.workspace = dws;
		a.workspace_bytes = ws_bytes;
	}
	CK(cuda_attention_forward(&a, NULL));
	from_dev(got, a.out, (size_t)n_tok * n_heads * hd * 4);
	ref_attention_forward(want, q, kc, vc, bt, max_blocks, seqs, n_seqs,
	    n_heads, n_kv, hd, a.scale);
	if (split_len == 0)
		snprintf(split, sizeof split, "split=auto");
	else if (split_len < 0)
		snprintf(split, sizeof split, "nosplit");
	else
		snprintf(split, sizeof split, "split=%d", split_len);
	snprintf(sh, sizeof sh, "%s/s%d/h%d:%d/d%d/%s", name, n_seqs, n_heads,
	    n_kv, hd, split);
	check("attention", sh, got, want, (size_t)n_tok * n_heads * hd, 1e-5,
	    1e-4);

	cudaFree(a.out); cudaFree((void *)a.q); cudaFree((void *)a.k_cache);
	cudaFree((void *)a.v_cache); cudaFree((void *)a.block_tables);
	cudaFree((void *)a.seqs); cudaFree(dws);
	free(perm); free(bt); free(kc); free(vc); free(q); free(want); free(got);
}

/* Prefill, chunked prefill, decode, mixed batches, split contexts. */
static void
test_attention(void)
{
	struct cuda_attention_args	a;
	int	q1[] = { 37 }, c1[] = { 37 };
	int	q3[] = { 20, 1, 1 }, c3[] = { 50, 300, 1 };
	int	q4[] = { 1, 1, 1, 1 }, c4[] = { 3000, 1000, 17, 2500 };
	int	qa[] = { 5 }, ca[] = { 40 };
	int	qb[] = { 10, 6 }, cb[] = { 10, 6 };
	int	qc[] = { 17 }, cc[] = { 33 };
	int	qd[] = { 40, 1 }, cd[] = { 600, 700 };

	attn_case("prefill", 1, q1, c1, 4, 2, 64, -1, 0);
	attn_case("mixed", 3, q3, c3, 8, 2, 128, -1, 0);
	attn_case("mixed", 3, q3, c3, 8, 2, 128, 64, 1);
	attn_case("mixed", 3, q3, c3, 8, 2, 128, 0, 1);
	attn_case("decode", 4, q4, c4, 32, 8, 128, -1, 0);
	attn_case("decode", 4, q4, c4, 32, 8, 128, 0, 1);
	attn_case("decode", 4, q4, c4, 32, 8, 128, 96, 1);
	attn_case("chunk", 1, qa, ca, 2, 1, 256, -1, 0);
	attn_case("chunk", 1, qa, ca, 2, 1, 256, 32, 1);
	attn_case("prefill", 2, qb, cb, 8, 4, 8, -1, 0);
	attn_case("chunk", 1, qc, cc, 3, 3, 96, -1, 0);
	attn_case("chunk", 2, qd, cd, 32, 8, 128, 128, 1);
	attn_case("chunk", 2, qd, cd, 32, 8, 128, 0, 1);

	memset(&a, 0, sizeof a);
	a.n_seqs = 1;
	a.n_tok = 1;
	a.n_heads = 4;
	a.n_kv_heads = 4;
	a.head_dim = 12;
	a.max_q_len = 1;
	a.max_ctx_len = 1;
	is_int(cuda_attention_forward(&a, NULL), 1,
	    "attention refuses a head_dim that is not a multiple of 8");
	a.head_dim = 64;
	a.n_kv_heads = 3;
	is_int(cuda_attention_forward(&a, NULL), 1,
	    "attention refuses kv heads that do not divide the heads");
	a.n_kv_heads = 4;
	a.split_len = 48;
	is_int(cuda_attention_forward(&a, NULL), 1,
	    "attention refuses a slice that is not a multiple of 32");
}

/* Argmax with ties and extremes, and seeded sampling. */
static void
test_sample(void)
{
	int		 nv = 128256, nr = 5, r, i, bad = 0;
	float		*l = rand_floats((size_t)nr * nv, 8.0f), temps[6];
	int32_t		 want[6], got[6], *dids;
	uint64_t	 seeds[6];
	float		 best[6], *dl, *dt;
	uint64_t	*ds;

	l[2 * (size_t)nv + 100] = 50.0f;	/* a tie: the lower index wins */
	l[2 * (size_t)nv + 50000] = 50.0f;
	l[3 * (size_t)nv + nv - 1] = 60.0f;	/* the very last element */
	for (i = 0; i < nv; i++)
		l[4 * (size_t)nv + i] = -INFINITY;
	dl = to_dev(l, (size_t)nr * nv * 4);
	dids = to_dev(NULL, sizeof got);
	CK(cuda_argmax_forward(dids, dl, nr, nv, NULL));
	from_dev(got, dids, nr * 4);
	ref_argmax_forward(want, l, nr, nv);
	for (r = 0; r < nr; r++)
		bad += got[r] != want[r];
	is_int(bad, 0, "argmax 5x128256: rows differing %d (row 2 got %d)", bad,
	    got[2]);
	cudaFree(dl);
	free(l);

	nv = 32000;
	nr = 6;
	l = rand_floats((size_t)nr * nv, 5.0f);
	for (r = 0; r < nr; r++) {
		temps[r] = r % 3 == 0 ? 0.0f : 0.5f * r;
		seeds[r] = kdefs_mix64(1000 + r);
	}
	dl = to_dev(l, (size_t)nr * nv * 4);
	dt = to_dev(temps, sizeof temps);
	ds = to_dev(seeds, sizeof seeds);
	CK(cuda_sample_forward(dids, dl, dt, ds, nr, nv, NULL));
	from_dev(got, dids, nr * 4);
	ref_sample_forward(want, best, l, temps, seeds, nr, nv);
	bad = 0;
	for (r = 0; r < nr; r++) {
		float v;

		if (got[r] == want[r])
			continue;
		/* a near tie may fall either way with 1-ulp logf differences */
		v = got[r] >= 0 && got[r] < nv ? ref_gumbel_score(l[(size_t)r *
		    nv + got[r]], temps[r], seeds[r], got[r]) : -INFINITY;
		if (!(v >= best[r] - 1e-5f * fmaxf(1.0f, fabsf(best[r]))))
			bad++;
	}
	is_int(bad, 0, "sample 6x32000: rows off the reference %d", bad);
	cudaFree(dl); cudaFree(dt); cudaFree(ds); cudaFree(dids);
	free(l);
}

int
main(void)
{
	struct cudaDeviceProp	prop;

	if (cuda_device_count() <= 0)
		skip_all("no CUDA device");
	CK(cudaGetDeviceProperties(&prop, 0));
	diag("device 0: %s, %d SMs, compute %d.%d", prop.name,
	    prop.multiProcessorCount, prop.major, prop.minor);

	test_rmsnorm();
	test_rope();
	test_elementwise();
	test_convert();
	test_embedding();
	test_kv_store();
	test_qmatmul();
	test_matmul();
	test_qmv_limits();
	test_dequant_f16();
	test_attention();
	test_sample();
	done_testing();
}
