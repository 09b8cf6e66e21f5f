/* test-quant: number formats, dequantization and every dot-product kernel. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "tap.h"
#include "tensor_type.h"
#include "kernel-testutil.h"

/* Little-endian 16-bit field. */
static unsigned
u16(const uint8_t *p)
{
	return (p[0] | (p[1] << 8));
}

/* Half to double, written from the IEEE definition. */
static double
half_value(unsigned h)
{
	int	e = (h >> 10) & 31, m = h & 1023;
	double	s = (h & 0x8000) ? -1 : 1;

	if (e == 0)
		return (s * ldexp(m, -24));
	if (e == 31)
		return (m ? NAN : s * INFINITY);
	return (s * ldexp(1024 + m, e - 25));
}

/* Element i of a row, decoded in double from the format description. */
static double
ref_elem(uint32_t type, const uint8_t *p, int64_t i)
{
	int64_t	b;
	int	k;

	switch (type) {
	case TT_F32: {
		float f;
		memcpy(&f, p + 4 * i, 4);
		return (f);
	}
	case TT_F16:
		return (half_value(u16(p + 2 * i)));
	case TT_BF16: {
		uint32_t bits = (uint32_t)u16(p + 2 * i) << 16;
		float f;
		memcpy(&f, &bits, 4);
		return (f);
	}
	case TT_Q8_0:
		b = i / 32;
		return (half_value(u16(p + 34 * b)) * (int8_t)p[34 * b + 2 + i % 32]);
	case TT_Q4_0: {
		const uint8_t *blk = p + 18 * (i / 32);
		k = i % 32;
		int nib = k < 16 ? blk[2 + k] & 15 : blk[2 + k - 16] >> 4;
		return (half_value(u16(blk)) * (nib - 8));
	}
	case TT_Q4_K: {
		const uint8_t *blk = p + 144 * (i / 256), *s = blk + 4;
		int e = i % 256, sub = e / 32, sc, mn, code;
		/* Bytes 0-3: scales 0-3 (low 6 bits) and high bits of 4-7. */
		if (sub < 4) {
			sc = s[sub] % 64;
			mn = s[sub + 4] % 64;
		} else {
			sc = s[sub + 4] % 16 + 16 * (s[sub - 4] / 64);
			mn = s[sub + 4] / 16 + 16 * (s[sub] / 64);
		}
		/* 64 elements per 32 bytes: first 32 low nibbles, then high. */
		code = blk[16 + 32 * (e / 64) + e % 32];
		code = (e % 64) < 32 ? code % 16 : code / 16;
		return (half_value(u16(blk)) * sc * code - half_value(u16(blk + 2)) * mn);
	}
	case TT_Q6_K: {
		const uint8_t *blk = p + 210 * (i / 256);
		int e = i % 256, half = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
		int lo = blk[64 * half + l + (quarter % 2) * 32];
		lo = quarter >= 2 ? lo / 16 : lo % 16;
		int hi = (blk[128 + 32 * half + l] >> (2 * quarter)) % 4;
		return (half_value(u16(blk + 208)) * (int8_t)blk[192 + e / 16] *
		    (lo + 16 * hi - 32));
	}
	case TT_Q4_1:
	case TT_Q5_1: {
		/* d, m, [qh u32,] qs[16]: x = d * q + m */
		int w = type == TT_Q4_1 ? 20 : 24;
		const uint8_t *blk = p + w * (i / 32);
		const uint8_t *qs = blk + (type == TT_Q4_1 ? 4 : 8);
		k = i % 32;
		int q = k < 16 ? qs[k] % 16 : qs[k - 16] / 16;
		if (type == TT_Q5_1)
			q += 16 * ((blk[4 + k / 8] >> (k % 8)) & 1);
		return (half_value(u16(blk)) * q + half_value(u16(blk + 2)));
	}
	case TT_Q5_0: {
		const uint8_t *blk = p + 22 * (i / 32);
		k = i % 32;
		int q = k < 16 ? blk[6 + k] % 16 : blk[6 + k - 16] / 16;
		q += 16 * ((blk[2 + k / 8] >> (k % 8)) & 1);
		return (half_value(u16(blk)) * (q - 16));
	}
	case TT_IQ4_NL: {
		static const int cb[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
		    1, 13, 25, 38, 53, 69, 89, 113 };
		const uint8_t *blk = p + 18 * (i / 32);
		k = i % 32;
		return (half_value(u16(blk)) * cb[k < 16 ? blk[2 + k] % 16 :
		    blk[2 + k - 16] / 16]);
	}
	case TT_IQ4_XS: {
		static const int cb[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
		    1, 13, 25, 38, 53, 69, 89, 113 };
		const uint8_t *blk = p + 136 * (i / 256);
		int e = i % 256, sub = e / 32, r = e % 32;
		/* 6-bit scale: low 4 bits in scales_l nibbles, high 2 in scales_h. */
		int ls = (blk[4 + sub / 2] >> (4 * (sub % 2))) % 16 +
		    16 * ((u16(blk + 2) >> (2 * sub)) % 4);
		int code = blk[8 + 16 * sub + r % 16];
		code = r < 16 ? code % 16 : code / 16;
		return (half_value(u16(blk)) * (ls - 32) * cb[code]);
	}
	case TT_Q2_K: {
		/* scales[16] (scale | min << 4), qs[64], d, dmin */
		const uint8_t *blk = p + 84 * (i / 256);
		int e = i % 256, half = e / 128, r = e % 128;
		int q = (blk[16 + 32 * half + r % 32] >> (2 * (r / 32))) % 4;
		int sm = blk[e / 16];
		return (half_value(u16(blk + 80)) * (sm % 16) * q -
		    half_value(u16(blk + 82)) * (sm / 16));
	}
	case TT_Q3_K: {
		/* hmask[32], qs[64], scales[12], d; high bit set means +0, clear -4 */
		const uint8_t *blk = p + 110 * (i / 256), *s = blk + 96;
		int e = i % 256, half = e / 128, r = e % 128, sub = e / 16;
		int q = (blk[32 + 32 * half + r % 32] >> (2 * (r / 32))) % 4;
		int hb = (blk[r % 32] >> (4 * half + r / 32)) % 2;
		int sc = (sub < 8 ? s[sub] % 16 : s[sub - 8] / 16) +
		    16 * ((s[8 + sub % 4] >> (2 * (sub / 4))) % 4);
		return (half_value(u16(blk + 108)) * (sc - 32) * (q - (hb ? 0 : 4)));
	}
	case TT_Q5_K: {
		/* d, dmin, scales[12] (as Q4_K), qh[32], qs[128] */
		const uint8_t *blk = p + 176 * (i / 256), *s = blk + 4;
		int e = i % 256, sub = e / 32, sc, mn, code;
		if (sub < 4) {
			sc = s[sub] % 64;
			mn = s[sub + 4] % 64;
		} else {
			sc = s[sub + 4] % 16 + 16 * (s[sub - 4] / 64);
			mn = s[sub + 4] / 16 + 16 * (s[sub] / 64);
		}
		code = blk[48 + 32 * (e / 64) + e % 32];
		code = (e % 64) < 32 ? code % 16 : code / 16;
		code += 16 * ((blk[16 + e % 32] >> sub) % 2);
		return (half_value(u16(blk)) * sc * code - half_value(u16(blk + 2)) * mn);
	}
	}
	return (NAN);
}

/* Conversions: exact values, rounding, and round trips of every half. */
static void
test_conversions(void)
{
	uint32_t	h, bad = 0;

	is_int(f32_to_fp16(1.0f), 0x3c00, "fp16 1.0");
	is_int(f32_to_fp16(-2.0f), 0xc000, "fp16 -2.0");
	is_int(f32_to_fp16(65504.0f), 0x7bff, "fp16 max");
	is_int(f32_to_fp16(65520.0f), 0x7c00, "fp16 overflow rounds to inf");
	is_int(f32_to_fp16(ldexpf(1, -24)), 0x0001, "fp16 smallest subnormal");
	is_int(f32_to_fp16(ldexpf(1, -26)), 0x0000, "fp16 underflow to zero");
	is_int(f32_to_fp16(1.0f + ldexpf(1, -11)), 0x3c00, "fp16 tie to even (down)");
	is_int(f32_to_fp16(1.0f + 3 * ldexpf(1, -11)), 0x3c02, "fp16 tie to even (up)");
	ok(isnan(fp16_to_f32(f32_to_fp16(NAN))), "fp16 NaN stays NaN");
	for (h = 0; h < 65536; h++) {
		if (((h >> 10) & 31) == 31 && (h & 1023))
			continue;
		if (fp16_to_f32(h) != (float)half_value(h) ||
		    f32_to_fp16(fp16_to_f32(h)) != h)
			bad++;
	}
	is_int(bad, 0, "every half decodes exactly and round-trips");
	is_int(f32_to_bf16(1.0f), 0x3f80, "bf16 1.0");
	is_int(f32_to_bf16(1.00390625f), 0x3f80, "bf16 tie to even");
	is_int(f32_to_bf16(1.01171875f), 0x3f82, "bf16 tie to even (up)");
	near(bf16_to_f32(0xc040), -3.0, 0, "bf16 decode -3");
	ok(isnan(bf16_to_f32(f32_to_bf16(NAN))), "bf16 NaN stays NaN");
}

/* dequantize_row against the double decoder. */
static void
test_dequant(uint32_t type)
{
	int64_t		n = 1024, i;
	uint8_t		*row = malloc(n * 4);
	float		*out = malloc(n * sizeof *out);
	double		 maxerr = 0, e;

	ktu_fill_row(type, row, n);
	dequantize_row(type, row, out, n);
	for (i = 0; i < n; i++) {
		double r = ref_elem(type, row, i);
		e = fabs(out[i] - r) / (fabs(r) + 1e-30);
		if (fabs(out[i] - r) > 1e-6 * fabs(r) + 1e-30 && e > maxerr)
			maxerr = e;
	}
	ok(maxerr == 0, "%s: dequantize_row matches the format (max rel err %g)",
	    tensor_type_name(type), maxerr);
	double d1 = 0, d2;
	for (i = 0; i < n; i++)
		d1 += ref_elem(type, row, i) * (double)((i % 7) - 3) * 0.25;
	float *x = malloc(n * sizeof *x);
	for (i = 0; i < n; i++)
		x[i] = (float)((i % 7) - 3) * 0.25f;
	d2 = dot_row_ref(type, row, x, n);
	near(d2, d1, 1e-9 * (fabs(d1) + 1), "%s: dot_row_ref", tensor_type_name(type));
	free(x);
	free(row);
	free(out);
}

/* Every kernel variant on single rows against the double reference. */
static void
test_dots(uint32_t type, int isa)
{
	int64_t		 n = 2048, i;
	int		 rep, fails = 0, tight_fails = 0;
	uint8_t		*row = malloc(n * 4);
	float		*x = malloc(n * sizeof *x), *xq = malloc(n * sizeof *xq);
	float		 y;
	struct qact	 a;
	struct quant_kernel k = quant_kernel_get(isa, type);
	void		*buf = malloc(quant_act_bytes(type, k.layout, n, 1) + 64);
	double		 worst = 0;

	for (rep = 0; rep < 20; rep++) {
		double ref, refq, tol, tolq, sabs = 0, qerr = 0;

		ktu_fill_row(type, row, n);
		for (i = 0; i < n; i++)
			x[i] = ktu_uniform() * (rep % 3 == 0 ? 100.0f : 1.0f);
		if (rep == 1)
			for (i = 0; i < 64; i++)
				x[i] = 0;	/* an all-zero block */
		quant_act_init(&a, type, k.layout, x, n, 1, buf);
		quant_act_fill(&a, type, 0, 1);
		k.fn(row, 0, n, 0, 1, &a, 0, 1,
		    &y, 1);
		ref = dot_row_ref(type, row, x, n);
		for (i = 0; i < n; i++) {
			double w = ref_elem(type, row, i);
			sabs += fabs(w * x[i]);
			if (a.q != NULL) {
				xq[i] = a.q[quant_act_pos(k.layout, i)] * a.d[i / 32];
				qerr += fabs(w) * a.d[i / 32] * 0.5;
			} else if (a.xb != NULL) {
				/* bf16 dot: activations and weights rounded. */
				xq[i] = bf16_to_f32(a.xb[i]);
				qerr += fabs(w * x[i]) / 128;
			} else
				xq[i] = x[i];
		}
		/* Exact arithmetic on the quantized activations... */
		refq = dot_row_ref(type, row, xq, n);
		if (a.xb != NULL) {
			refq = 0;
			for (i = 0; i < n; i++)
				refq += (double)bf16_to_f32(f32_to_bf16((float)ref_elem(type,
				    row, i))) * xq[i];
		}
		tolq = 2e-5 * sabs + 1e-6;
		if (fabs(y - refq) > tolq)
			tight_fails++;
		/* ...and within the quantization error of the true product. */
		tol = qerr + 2e-5 * sabs + 1e-6;
		if (fabs(y - ref) > tol)
			fails++;
		if (fabs(y - refq) / (sabs + 1e-30) > worst)
			worst = fabs(y - refq) / (sabs + 1e-30);
	}
	ok(fails == 0 && tight_fails == 0,
	    "%s %s%s: dot products within tolerance (worst %.3g of sum |w x|)",
	    quant_isa_name(isa), tensor_type_name(type),
	    k.layout == ACT_BF16 ? " (bf16 dot)" : "", worst);
	free(buf);
	free(row);
	free(x);
	free(xq);
}

/*
 * A variant's activation quantizer (fill, or pfill for its repacked kernel)
 * gives exactly the portable one's output for the layout it fills.
 */
static void
test_fill_layout(uint32_t type, int isa, int layout, quant_fill_fn fill, const char *what)
{
	int64_t		 cols = 96 * 8 + 32 * 3, i;	/* a partial last group */
	int		 n = 3;
	size_t		 bytes = quant_act_bytes(type, layout, cols, n) + 64;
	float		*x = malloc(cols * n * sizeof *x);
	void		*b1 = calloc(1, bytes), *b2 = calloc(1, bytes);
	struct qact	 a1, a2;
	size_t		 nq, nbias;
	int		 t, same = 1;

	for (i = 0; i < cols * n; i++)
		x[i] = ktu_uniform() * (i % 100 == 0 ? 50 : 1);
	for (i = 0; i < 32; i++)
		x[cols + i] = 0;		/* an all-zero block */
	quant_act_init(&a1, type, layout, x, cols, n, b1);
	quant_act_init(&a2, type, layout, x, cols, n, b2);
	quant_act_fill(&a1, type, 0, n);
	fill(&a2, type, 0, n);
	nq = (size_t)a1.stride * n;
	/* The folded layouts keep only their first entries of each token's biases. */
	nbias = layout == ACT_BLOCK || layout == ACT_PAIR16 ? (size_t)a1.stride / 32 :
	    layout == ACT_BLOCK16 ? (size_t)a1.stride / 16 : (size_t)a1.stride / 4;
	for (t = 0; t < n; t++)
		same &= memcmp(a1.bias + (size_t)t * a1.stride / 4,
		    a2.bias + (size_t)t * a1.stride / 4, nbias * 4) == 0;
	ok(same && memcmp(a1.q, a2.q, nq) == 0 && memcmp(a1.d, a2.d, nq / 32 * 4) == 0 &&
	    memcmp(a1.s, a2.s, nq / 32 * 4) == 0 && memcmp(a1.dl, a2.dl, nq / 4 * 4) == 0,
	    "%s %s: %s activation quantizer matches the portable one",
	    quant_isa_name(isa), tensor_type_name(type), what);
	free(x);
	free(b1);
	free(b2);
}

/*
 * The repacked bf16-dot kernel's activations (ACT_BF16X): every token's
 * column pairs rounded to bf16 at the word quant.h gives, in groups of
 * ACT_F32X_TOK tokens, a missing last column zero.
 */
static void
test_fill_bf16x(uint32_t type, int64_t cols, int n_tok)
{
	struct quant_kernel	 k = quant_kernel_get(QUANT_ISA_AVX512, type);
	const int64_t		 np = (cols + 1) / 2;
	const int		 g = n_tok < ACT_F32X_TOK ? n_tok : ACT_F32X_TOK;
	struct qact		 a;
	float			*x = malloc((size_t)cols * n_tok * sizeof *x);
	void			*buf;
	int64_t			 p, bad = 0;
	int			 t;

	buf = malloc(quant_act_bytes(type, ACT_BF16X, cols, n_tok) + 64);
	if (x == NULL || buf == NULL)
		abort();
	for (t = 0; t < n_tok * cols; t++)
		x[t] = (float)((t * 7919) % 2001 - 1000) / 37.0f;
	quant_act_init(&a, type, ACT_BF16X, x, cols, n_tok, buf);
	ok(k.playout == ACT_BF16X && k.pfill != NULL, "%s (bf16 dot): the repacked "
	    "kernel takes ACT_BF16X", tensor_type_name(type));
	if (k.pfill != NULL)
		k.pfill(&a, type, 0, n_tok);
	for (t = 0; t < n_tok; t++)
		for (p = 0; p < np; p++) {
			const uint32_t	*w = (const uint32_t *)a.xb;
			uint32_t	 want = f32_to_bf16(x[t * cols + 2 * p]) |
					     (2 * p + 1 < cols ? (uint32_t)f32_to_bf16(
					     x[t * cols + 2 * p + 1]) << 16 : 0);

			bad += w[(size_t)(t / g) * g * np + p * g + t % g] != want;
		}
	ok(bad == 0, "%s (bf16 dot): %d tokens of %lld columns at their ACT_BF16X "
	    "words (%lld wrong)", tensor_type_name(type), n_tok, (long long)cols,
	    (long long)bad);
	free(x);
	free(buf);
}

/* test_fill_layout for a type's kernel, and its repacked kernel's if it has one. */
static void
test_fill(uint32_t type, int isa)
{
	struct quant_kernel k = quant_kernel_get(isa, type);

	test_fill_layout(type, isa, k.layout, k.fill, "the");
	if (k.pfill != NULL && k.playout != ACT_F32X && k.playout != ACT_BF16X)
		test_fill_layout(type, isa, k.playout, k.pfill, "the repacked kernel's");
}

int
main(void)
{
	size_t	i;
	int	isa;

	test_conversions();
	for (i = 0; i < KTU_NTYPES; i++)
		test_dequant(ktu_types[i]);
	for (isa = 0; isa < QUANT_ISA_COUNT; isa++)
		ok(quant_isa_by_name(quant_isa_name(isa)) == isa, "variant %s: found by name",
		    quant_isa_name(isa));
	ok(quant_isa_by_name("avx9") == -1 && quant_isa_by_name("") == -1,
	    "unknown variant names: -1");
	for (isa = 0; isa < QUANT_ISA_COUNT; isa++) {
		if (!quant_isa_supported(isa)) {
			diag("variant %s: not supported by this CPU, skipped",
			    quant_isa_name(isa));
			continue;
		}
		for (i = 0; i < KTU_NTYPES; i++)
			test_dots(ktu_types[i], isa);
		for (i = 3; i < KTU_NTYPES; i++)
			test_fill(ktu_types[i], isa);
	}
	if (quant_bf16_dot_supported()) {
		quant_allow_bf16_dot(QUANT_BF16_DOT_ALL);
		test_dots(TT_F16, QUANT_ISA_AVX512);
		test_dots(TT_BF16, QUANT_ISA_AVX512);
		test_fill_bf16x(TT_BF16, 75, 13);
		test_fill_bf16x(TT_F16, 2050, 30);
		test_fill_bf16x(TT_BF16, 96, 5);
		quant_allow_bf16_dot(QUANT_BF16_DOT_NONE);
	} else
		diag("bf16 dot products: not supported by this CPU, skipped");
	done_testing();
}
