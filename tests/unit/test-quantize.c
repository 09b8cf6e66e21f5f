/* test-quantize.c: the block quantizers against a double-precision decoder. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quantize.h"
#include "tensor_type.h"
#include "util.h"
#include "tap.h"

/* Half to double, written from the IEEE definition. */
static double
h2d(const uint8_t *p)
{
	unsigned	h = p[0] | (p[1] << 8);
	int		e = (h >> 10) & 31, m = h & 1023;
	double		v;

	if (e == 0)
		v = ldexp(m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexp(1024 + m, e - 25);
	return ((h & 0x8000) ? -v : v);
}

/* Decode a row of any supported type to doubles, straight from the layout. */
static void
decode(uint32_t type, const uint8_t *p, double *y, int64_t n)
{
	int64_t		b, i;
	int		j, sc, mn, l, g, h, q;
	uint32_t	u;
	float		f;

	switch (type) {
	case TT_F32:
		for (i = 0; i < n; i++) {
			memcpy(&f, p + 4 * i, 4);
			y[i] = f;
		}
		break;
	case TT_F16:
		for (i = 0; i < n; i++)
			y[i] = h2d(p + 2 * i);
		break;
	case TT_BF16:
		for (i = 0; i < n; i++) {
			u = (uint32_t)(p[2 * i] | (p[2 * i + 1] << 8)) << 16;
			memcpy(&f, &u, 4);
			y[i] = f;
		}
		break;
	case TT_Q8_0:
		for (b = 0; b < n / 32; b++, p += 34)
			for (j = 0; j < 32; j++)
				y[32 * b + j] = h2d(p) * (int8_t)p[2 + j];
		break;
	case TT_Q4_0:
		for (b = 0; b < n / 32; b++, p += 18)
			for (j = 0; j < 32; j++)
				y[32 * b + j] = h2d(p) * (((j < 16 ? p[2 + j] :
				    p[2 + j - 16] >> 4) & 15) - 8);
		break;
	case TT_Q4_K:
		for (b = 0; b < n / 256; b++, p += 144) {
			const uint8_t *s = p + 4;
			for (j = 0; j < 8; j++) {
				if (j < 4) {
					sc = s[j] & 63;
					mn = s[j + 4] & 63;
				} else {
					sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
					mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
				}
				for (i = 0; i < 32; i++) {
					q = (p[16 + 32 * (j / 2) + i] >> (4 * (j & 1))) & 15;
					y[256 * b + 32 * j + i] = h2d(p) * sc * q -
					    h2d(p + 2) * mn;
				}
			}
		}
		break;
	case TT_Q6_K:
		for (b = 0; b < n / 256; b++, p += 210) {
			for (i = 0; i < 256; i++) {
				h = i / 128;
				l = i % 32;
				g = (i % 128) / 32;
				q = (p[64 * h + l + 32 * (g & 1)] >> (g >= 2 ? 4 : 0)) & 15;
				q |= ((p[128 + 32 * h + l] >> (2 * g)) & 3) << 4;
				y[256 * b + i] = h2d(p + 208) *
				    (int8_t)p[192 + i / 16] * (q - 32);
			}
		}
		break;
	}
}

/* Quantize random rows and check the decoded error against the step size. */
static void
roundtrip(uint32_t type, double rel_tol)
{
	const struct tensor_type_info	*ti = tensor_type_get(type);
	int64_t				 n = 4096, i;
	float				*x;
	double				*y, err, maxerr = 0, rms = 0, amax = 0;
	uint8_t				*q;
	size_t				 nb;
	uint64_t			 s = 12345;

	x = xreallocarray(NULL, n, sizeof *x);
	y = xreallocarray(NULL, n, sizeof *y);
	q = xmalloc(n * 4);
	for (i = 0; i < n; i++) {
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		x[i] = ((double)(s >> 11) / (1ULL << 53) - 0.5) * 0.1;
		/* Some blocks all positive, one all zero, one with a spike. */
		if (i >= 512 && i < 768)
			x[i] = fabsf(x[i]) + 0.01f;
		if (i >= 1024 && i < 1280)
			x[i] = 0;
		if (i == 2000)
			x[i] = 3;
		amax = fmax(amax, fabs(x[i]));
	}
	nb = quantize_row(type, x, q, n);
	is_int(nb, n / ti->block_elems * ti->block_bytes, "%s: %lld bytes",
	    ti->name, (long long)nb);
	decode(type, q, y, n);
	for (i = 0; i < n; i++) {
		err = fabs(y[i] - x[i]);
		rms += err * err;
		/* Errors are measured against the block's own range. */
		if (i >= 1792 && i < 2304)
			continue;
		if (err > maxerr)
			maxerr = err;
	}
	rms = sqrt(rms / n);
	ok(maxerr <= rel_tol * 0.05, "%s: max error %.3g within %.3g",
	    ti->name, maxerr, rel_tol * 0.05);
	for (i = 1024; i < 1280; i++) {
		if (y[i] != 0)
			break;
	}
	ok(i == 1280, "%s: zero block decodes to zero", ti->name);
	near(y[2000], 3, 3 * rel_tol * 2, "%s: spike kept", ti->name);
	diag("%s: rms error %.3g, max %.3g (values in +-0.05)", ti->name, rms,
	    maxerr);
	ok(quantize_row(type, x, q, ti->block_elems + 1) == 0 ||
	    ti->block_elems == 1, "%s: partial block refused", ti->name);
	free(x);
	free(y);
	free(q);
}

/* Half conversion corner cases, decoded independently. */
static void
test_f16(void)
{
	float	in[8] = { 0, -0.0f, 1, 65504, 70000, 6e-8f, 1e-9f, -2.5f };
	double	want[8] = { 0, 0, 1, 65504, INFINITY, 5.960464477539063e-08, 0, -2.5 };
	uint8_t	out[16];
	int	i;

	quantize_row(TT_F16, in, out, 8);
	for (i = 0; i < 8; i++)
		ok(h2d(out + 2 * i) == want[i], "f16 of %g is %g (got %g)",
		    in[i], want[i], h2d(out + 2 * i));
	ok(quantize_row(17, in, out, 256) == 0, "IQ2_XS refused");
}

/* Run the checks. */
int
main(void)
{
	roundtrip(TT_F32, 0);
	roundtrip(TT_F16, 1.0 / 1024);
	roundtrip(TT_BF16, 1.0 / 128);
	roundtrip(TT_Q8_0, 1.0 / 127);
	roundtrip(TT_Q4_0, 1.0 / 7.5);
	roundtrip(TT_Q4_K, 1.0 / 14);
	roundtrip(TT_Q6_K, 1.0 / 31);
	test_f16();
	done_testing();
}
