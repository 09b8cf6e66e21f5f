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

static const int book[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* Nibble k (0..31) of a 32-element block: low nibbles first. */
static int
nib(const uint8_t *qs, int k)
{
	return (k < 16 ? qs[k] % 16 : qs[k - 16] / 16);
}

/* Bit k of a little-endian bit string. */
static int
bit(const uint8_t *p, int k)
{
	return ((p[k / 8] >> (k % 8)) & 1);
}

/* The 6-bit scale and min of sub-block j of a Q4_K or Q5_K block. */
static void
k_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*mn = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
		*mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

/* Decode the types beyond the first seven. */
static void
decode_more(uint32_t type, const uint8_t *p, double *y, int64_t n)
{
	int64_t	b;
	int	e, j, sc, mn, q, sub;

	switch (type) {
	case TT_Q4_1:
		for (b = 0; b < n / 32; b++, p += 20)
			for (e = 0; e < 32; e++)
				y[32 * b + e] = h2d(p) * nib(p + 4, e) + h2d(p + 2);
		break;
	case TT_Q5_1:
		for (b = 0; b < n / 32; b++, p += 24)
			for (e = 0; e < 32; e++)
				y[32 * b + e] = h2d(p) * (nib(p + 8, e) + 16 * bit(p + 4, e)) +
				    h2d(p + 2);
		break;
	case TT_Q5_0:
		for (b = 0; b < n / 32; b++, p += 22)
			for (e = 0; e < 32; e++)
				y[32 * b + e] = h2d(p) * (nib(p + 6, e) + 16 * bit(p + 2, e) - 16);
		break;
	case TT_IQ4_NL:
		for (b = 0; b < n / 32; b++, p += 18)
			for (e = 0; e < 32; e++)
				y[32 * b + e] = h2d(p) * book[nib(p + 2, e)];
		break;
	case TT_IQ4_XS:
		for (b = 0; b < n / 256; b++, p += 136)
			for (e = 0; e < 256; e++) {
				sub = e / 32;
				sc = (p[4 + sub / 2] >> (4 * (sub % 2))) % 16 +
				    16 * (bit(p + 2, 2 * sub) + 2 * bit(p + 2, 2 * sub + 1));
				y[256 * b + e] = h2d(p) * (sc - 32) *
				    book[nib(p + 8 + 16 * sub, e % 32)];
			}
		break;
	case TT_Q2_K:
		for (b = 0; b < n / 256; b++, p += 84)
			for (e = 0; e < 256; e++) {
				q = (p[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) % 4;
				y[256 * b + e] = h2d(p + 80) * (p[e / 16] % 16) * q -
				    h2d(p + 82) * (p[e / 16] / 16);
			}
		break;
	case TT_Q3_K:
		for (b = 0; b < n / 256; b++, p += 110)
			for (e = 0; e < 256; e++) {
				const uint8_t *s = p + 96;
				sub = e / 16;
				sc = (sub < 8 ? s[sub] % 16 : s[sub - 8] / 16) +
				    16 * ((s[8 + sub % 4] >> (2 * (sub / 4))) % 4);
				q = (p[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) % 4;
				/* hmask[l], bit 4h + j */
				q += 4 * ((p[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) % 2);
				y[256 * b + e] = h2d(p + 108) * (sc - 32) * (q - 4);
			}
		break;
	case TT_Q5_K:
		for (b = 0; b < n / 256; b++, p += 176) {
			const uint8_t *s = p + 4;
			for (j = 0; j < 8; j++) {
				k_scale_min(s, j, &sc, &mn);
				for (e = 0; e < 32; e++) {
					q = (p[48 + 32 * (j / 2) + e] >> (4 * (j & 1))) & 15;
					q += 16 * ((p[16 + e] >> j) & 1);
					y[256 * b + 32 * j + e] = h2d(p) * sc * q - h2d(p + 2) * mn;
				}
			}
		}
		break;
	}
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
				k_scale_min(s, j, &sc, &mn);
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
	default:
		decode_more(type, p, y, n);
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
	roundtrip(TT_Q4_1, 1.0 / 14);
	roundtrip(TT_Q5_0, 1.0 / 15);
	roundtrip(TT_Q5_1, 1.0 / 29);
	roundtrip(TT_Q2_K, 1.0 / 2.5);
	/* Codes -4..3: the extreme opposite the largest one may clip a step. */
	roundtrip(TT_Q3_K, 1.0 / 3.5);
	roundtrip(TT_Q5_K, 1.0 / 28);
	/* The code book's widest gap is 23 of 240. */
	roundtrip(TT_IQ4_NL, 1.0 / 7.5);
	roundtrip(TT_IQ4_XS, 1.0 / 7.5);
	test_f16();
	done_testing();
}
