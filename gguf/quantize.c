/* quantize.c: f32 rows to the GGUF block formats (round to nearest per block). */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quantize.h"
#include "tensor_type.h"

/*
 * Block layouts (little-endian, as GGUF stores them):
 *   Q8_0  32 elements: f16 d; i8 q[32]			x = d * q
 *   Q4_0  32 elements: f16 d; u8 qs[16]		x = d * (q - 8); element
 *         j in the low nibble of qs[j], element j + 16 in its high nibble
 *   Q4_K 256 elements: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]
 *         eight sub-blocks of 32 with 6-bit scale sc and min m:
 *         x = d * sc * q - dmin * m; each 64 elements take 32 bytes of qs,
 *         the first 32 in the low nibbles, the next 32 in the high ones
 *   Q6_K 256 elements: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
 *         sixteen sub-blocks of 16: x = d * scales[i / 16] * (q - 32) with
 *         6-bit q split over ql (low 4 bits) and qh (high 2 bits)
 *   Q4_1  32 elements: f16 d; f16 m; u8 qs[16]		x = d * q + m
 *   Q5_0  32 elements: f16 d; u32 qh; u8 qs[16]	x = d * (q - 16), bit
 *         j of qh the fifth bit of element j
 *   Q5_1  32 elements: f16 d; f16 m; u32 qh; u8 qs[16]	x = d * q + m
 *   IQ4_NL 32 elements: f16 d; u8 qs[16]		x = d * book[q]
 *   Q2_K 256 elements: u8 scales[16]; u8 qs[64]; f16 d; f16 dmin
 *         sixteen sub-blocks of 16, scale in the low nibble, min in the
 *         high one: x = d * sc * q - dmin * m; each 128 elements take 32
 *         bytes of qs, bit pairs 0-1, 2-3, 4-5, 6-7 for elements 0-31,
 *         32-63, 64-95, 96-127
 *   Q3_K 256 elements: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
 *         sixteen sub-blocks of 16 with 6-bit scales (stored + 32):
 *         x = d * (sc - 32) * (q - 4), the low two bits of q as in Q2_K and
 *         the third in bit 4h + j of hmask[l] (h = e / 128, j, l as in Q2_K)
 *   Q5_K 256 elements: f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 *         as Q4_K with a fifth bit: bit i of qh[l] for element 32i + l
 *   IQ4_XS 256 elements: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
 *         eight sub-blocks of 32 with 6-bit scales (stored + 32; low 4 bits
 *         in scales_l nibbles, high 2 in scales_h): x = d * (sc - 32) *
 *         book[q], nibbles as in Q4_0
 */

/* The IQ4_NL / IQ4_XS code book. */
static const int8_t iq4_book[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* f32 to IEEE half, round to nearest even, with subnormals, inf and NaN. */
static uint16_t
to_f16(float f)
{
	uint32_t	x, sign, ax, e, m, q, rem, halfway, shift;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	ax = x & 0x7fffffff;
	if (ax >= 0x7f800000)				/* inf, NaN */
		return (sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
	if (ax >= 0x477ff000)				/* rounds past 65504 */
		return (sign | 0x7c00);
	if (ax < 0x38800000) {				/* half subnormal */
		if (ax < 0x33000000)
			return (sign);
		e = ax >> 23;
		m = (ax & 0x7fffff) | 0x800000;
		shift = 126 - e;
		q = m >> shift;
		rem = m & ((1U << shift) - 1);
		halfway = 1U << (shift - 1);
		if (rem > halfway || (rem == halfway && (q & 1)))
			q++;
		return (sign | q);
	}
	/* Normal: rebias the exponent, round away the low 13 mantissa bits. */
	q = ((ax >> 13) - (112 << 10));
	rem = ax & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
		q++;
	return (sign | q);
}

/* IEEE half to f32. */
static float
from_f16(uint16_t h)
{
	uint32_t	sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t	e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
	float		f;

	if (e == 0) {
		f = ldexpf((float)m, -24);
		return (sign ? -f : f);
	}
	if (e == 31)
		x = sign | 0x7f800000 | (m << 13);
	else
		x = sign | ((e + 112) << 23) | (m << 13);
	memcpy(&f, &x, 4);
	return (f);
}

/* f32 to bfloat16, round to nearest even; NaN stays NaN. */
static uint16_t
to_bf16(float f)
{
	uint32_t	x;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return ((x >> 16) | 0x40);
	return ((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* Store a half in two bytes. */
static void
put_f16(uint8_t *p, uint16_t h)
{
	p[0] = h & 0xff;
	p[1] = h >> 8;
}

/* Round to the nearest integer and clamp to [lo, hi]. */
static inline int
qclamp(float v, int lo, int hi)
{
	int	q = (int)lrintf(v);

	return (q < lo ? lo : (q > hi ? hi : q));
}

/* One Q8_0 block. */
static void
q8_0_block(const float *x, uint8_t *out)
{
	float	amax = 0, d, id;
	int	j;

	for (j = 0; j < 32; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	d = from_f16(to_f16(amax / 127));
	id = d != 0 ? 1 / d : 0;
	put_f16(out, to_f16(d));
	for (j = 0; j < 32; j++)
		out[2 + j] = (uint8_t)(int8_t)qclamp(x[j] * id, -127, 127);
}

/* One Q4_0 block: the value of largest magnitude maps to -8. */
static void
q4_0_block(const float *x, uint8_t *out)
{
	float	max = 0, d, id;
	int	j, lo, hi;

	for (j = 0; j < 32; j++) {
		if (fabsf(x[j]) > fabsf(max))
			max = x[j];
	}
	d = from_f16(to_f16(max / -8));
	id = d != 0 ? 1 / d : 0;
	put_f16(out, to_f16(d));
	for (j = 0; j < 16; j++) {
		lo = qclamp(x[j] * id + 8, 0, 15);
		hi = qclamp(x[j + 16] * id + 8, 0, 15);
		out[2 + j] = (uint8_t)(lo | (hi << 4));
	}
}

/*
 * The ranges of a K-quant super-block with mins (Q4_K, Q5_K): per
 * sub-block of 32 the step over [min(0, lo), hi] in `steps` steps and the
 * negated low end, then the super-block scales, written to out[0..3], that
 * let the sub-block ones fit 6 bits.
 */
static void
kmin_ranges(const float *x, float steps, float scale[8], float minv[8],
    float *dp, float *dminp, uint8_t *out)
{
	float	maxs = 0, maxm = 0, mn, mx;
	int	j, i;

	for (j = 0; j < 8; j++) {
		mn = 0;
		mx = x[32 * j];
		for (i = 0; i < 32; i++) {
			mn = fminf(mn, x[32 * j + i]);
			mx = fmaxf(mx, x[32 * j + i]);
		}
		scale[j] = mx > mn ? (mx - mn) / steps : 0;
		minv[j] = -mn;
		maxs = fmaxf(maxs, scale[j]);
		maxm = fmaxf(maxm, minv[j]);
	}
	*dp = from_f16(to_f16(maxs / 63));
	*dminp = from_f16(to_f16(maxm / 63));
	put_f16(out, to_f16(*dp));
	put_f16(out + 2, to_f16(*dminp));
}

/* One Q4_K super-block. */
static void
q4_k_block(const float *x, uint8_t *out)
{
	float	scale[8], minv[8], d, dmin, sd, sm, id;
	uint8_t	sc[8], m[8], *scales = out + 4, *qs = out + 16;
	int	j, i, q, e;

	kmin_ranges(x, 15, scale, minv, &d, &dmin, out);
	for (j = 0; j < 8; j++) {
		/* Round the scale up so the top of the range still fits. */
		sc[j] = d > 0 ? (uint8_t)qclamp(ceilf(scale[j] / d - 0.01f), 0, 63) : 0;
		m[j] = dmin > 0 ? (uint8_t)qclamp(minv[j] / dmin, 0, 63) : 0;
	}
	for (j = 0; j < 4; j++) {
		scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
		scales[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
		scales[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
	}
	memset(qs, 0, 128);
	for (j = 0; j < 8; j++) {
		sd = d * sc[j];
		sm = dmin * m[j];
		id = sd > 0 ? 1 / sd : 0;
		for (i = 0; i < 32; i++) {
			e = 32 * j + i;
			q = qclamp((x[e] + sm) * id, 0, 15);
			/* Sub-blocks 2c and 2c+1 share the 32 bytes of chunk c. */
			qs[32 * (j / 2) + i] |= (uint8_t)(q << (4 * (j & 1)));
		}
	}
}

/* One Q6_K super-block. */
static void
q6_k_block(const float *x, uint8_t *out)
{
	float	scale[16], amax = 0, d, sd, id, max;
	uint8_t	*ql = out, *qh = out + 128;
	int8_t	*scales = (int8_t *)(out + 192);
	int	j, i, q, e, r, l, g, h;

	/* Per sub-block of 16: the value of largest magnitude maps to -32. */
	for (j = 0; j < 16; j++) {
		max = 0;
		for (i = 0; i < 16; i++) {
			if (fabsf(x[16 * j + i]) > fabsf(max))
				max = x[16 * j + i];
		}
		scale[j] = max / -32;
		amax = fmaxf(amax, fabsf(scale[j]));
	}
	d = from_f16(to_f16(amax / 127));
	put_f16(out + 208, to_f16(d));
	memset(ql, 0, 128 + 64);
	for (j = 0; j < 16; j++) {
		scales[j] = (int8_t)(d > 0 ? qclamp(scale[j] / d, -127, 127) : 0);
		sd = d * scales[j];
		id = sd != 0 ? 1 / sd : 0;
		for (i = 0; i < 16; i++) {
			e = 16 * j + i;
			q = qclamp(x[e] * id, -32, 31) + 32;
			/* Each 128 elements: ql 64 bytes, qh 32 bytes. */
			h = e / 128;
			r = e % 128;
			l = r % 32;
			g = r / 32;
			ql[64 * h + l + 32 * (g & 1)] |=
			    (uint8_t)((q & 15) << (g >= 2 ? 4 : 0));
			qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
		}
	}
}

/* Store a 32-bit value little-endian. */
static void
put_u32(uint8_t *p, uint32_t v)
{
	put_f16(p, (uint16_t)v);
	put_f16(p + 2, (uint16_t)(v >> 16));
}

/* Store a 32-element nibble block: element j low, element j + 16 high. */
static void
put_nibbles(uint8_t *qs, const int *q)
{
	int	j;

	for (j = 0; j < 16; j++)
		qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

/*
 * Q4_1 or Q5_1 block (levels 16 or 32): min to max in equal steps,
 * the fifth bits in qh.
 */
static void
qx_1_block(const float *x, uint8_t *out, int levels)
{
	float	mn = x[0], mx = x[0], d, id, m;
	int	j, q[32];
	uint32_t qh = 0;

	for (j = 1; j < 32; j++) {
		mn = fminf(mn, x[j]);
		mx = fmaxf(mx, x[j]);
	}
	d = from_f16(to_f16((mx - mn) / (levels - 1)));
	m = from_f16(to_f16(mn));
	id = d != 0 ? 1 / d : 0;
	put_f16(out, to_f16(d));
	put_f16(out + 2, to_f16(m));
	for (j = 0; j < 32; j++) {
		q[j] = qclamp((x[j] - m) * id, 0, levels - 1);
		qh |= (uint32_t)(q[j] >> 4) << j;
	}
	if (levels == 32) {
		put_u32(out + 4, qh);
		put_nibbles(out + 8, q);
	} else
		put_nibbles(out + 4, q);
}

/* One Q5_0 block: the value of largest magnitude maps to -16. */
static void
q5_0_block(const float *x, uint8_t *out)
{
	float	max = 0, d, id;
	int	j, q[32];
	uint32_t qh = 0;

	for (j = 0; j < 32; j++)
		if (fabsf(x[j]) > fabsf(max))
			max = x[j];
	d = from_f16(to_f16(max / -16));
	id = d != 0 ? 1 / d : 0;
	put_f16(out, to_f16(d));
	for (j = 0; j < 32; j++) {
		q[j] = qclamp(x[j] * id + 16, 0, 31);
		qh |= (uint32_t)(q[j] >> 4) << j;
	}
	put_u32(out + 2, qh);
	put_nibbles(out + 6, q);
}

/* Index of the code-book value nearest to v (the lower one on a tie). */
static int
iq4_nearest(float v)
{
	int	lo = 0, hi = 15, mid;

	/* The book is sorted: bisect on the midpoints between entries. */
	while (lo < hi) {
		mid = (lo + hi) / 2;
		if (v > 0.5f * (iq4_book[mid] + iq4_book[mid + 1]))
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

/*
 * Scale and codes of n values on the IQ4 code book: five candidate
 * scales around max / -127, each refit by least squares to its codes; the
 * one with the smallest squared error wins.  Returns the scale.
 */
static float
iq4_fit(const float *x, int n, int *q)
{
	float	max = 0, best_d = 0, best_err = INFINITY;
	int	j, t, cand[32];

	for (j = 0; j < n; j++)
		if (fabsf(x[j]) > fabsf(max))
			max = x[j];
	if (max == 0) {
		for (j = 0; j < n; j++)
			q[j] = iq4_nearest(0);
		return (0);
	}
	for (t = -4; t <= 4; t += 2) {
		float	id = (-127 + 0.5f * t) / max, d, err = 0;
		double	sqx = 0, sqq = 0;

		for (j = 0; j < n; j++) {
			cand[j] = iq4_nearest(x[j] * id);
			sqx += (double)iq4_book[cand[j]] * x[j];
			sqq += (double)iq4_book[cand[j]] * iq4_book[cand[j]];
		}
		d = sqq > 0 ? (float)(sqx / sqq) : 0;
		for (j = 0; j < n; j++) {
			float e = x[j] - d * iq4_book[cand[j]];
			err += e * e;
		}
		if (err < best_err) {
			best_err = err;
			best_d = d;
			memcpy(q, cand, n * sizeof *q);
		}
	}
	return (best_d);
}

/* One IQ4_NL block. */
static void
iq4_nl_block(const float *x, uint8_t *out)
{
	int	q[32], j;
	float	d = from_f16(to_f16(iq4_fit(x, 32, q))), id = d != 0 ? 1 / d : 0;

	/* Codes again for the scale as stored. */
	for (j = 0; j < 32; j++)
		q[j] = iq4_nearest(x[j] * id);
	put_f16(out, to_f16(d));
	put_nibbles(out + 2, q);
}

/* One IQ4_XS super-block: per 32 a fitted scale, on a 6-bit signed grid. */
static void
iq4_xs_block(const float *x, uint8_t *out)
{
	float	sub[8], amax = 0, d, id, dl, idl;
	int	q[32], j, i, ls;
	uint16_t sh = 0;

	for (i = 0; i < 8; i++) {
		sub[i] = iq4_fit(x + 32 * i, 32, q);
		if (fabsf(sub[i]) > fabsf(amax))
			amax = sub[i];
	}
	d = from_f16(to_f16(amax / -32));
	id = d != 0 ? 1 / d : 0;
	put_f16(out, to_f16(d));
	memset(out + 4, 0, 4);
	for (i = 0; i < 8; i++) {
		ls = qclamp(sub[i] * id, -32, 31) + 32;
		out[4 + i / 2] |= (uint8_t)((ls & 15) << (4 * (i % 2)));
		sh |= (uint16_t)((ls >> 4) << (2 * i));
		dl = d * (ls - 32);
		idl = dl != 0 ? 1 / dl : 0;
		for (j = 0; j < 32; j++)
			q[j] = iq4_nearest(x[32 * i + j] * idl);
		put_nibbles(out + 8 + 16 * i, q);
	}
	put_f16(out + 2, sh);
}

/* One Q2_K super-block: per 16 the range [min(0, lo), hi] in 3 steps. */
static void
q2_k_block(const float *x, uint8_t *out)
{
	float	scale[16], minv[16], maxs = 0, maxm = 0, d, dmin, sd, sm, id, mn, mx;
	uint8_t	*qs = out + 16;
	int	j, i, e, q, sc, m;

	for (j = 0; j < 16; j++) {
		mn = 0;
		mx = x[16 * j];
		for (i = 0; i < 16; i++) {
			mn = fminf(mn, x[16 * j + i]);
			mx = fmaxf(mx, x[16 * j + i]);
		}
		scale[j] = mx > mn ? (mx - mn) / 3 : 0;
		minv[j] = -mn;
		maxs = fmaxf(maxs, scale[j]);
		maxm = fmaxf(maxm, minv[j]);
	}
	d = from_f16(to_f16(maxs / 15));
	dmin = from_f16(to_f16(maxm / 15));
	put_f16(out + 80, to_f16(d));
	put_f16(out + 82, to_f16(dmin));
	memset(qs, 0, 64);
	for (j = 0; j < 16; j++) {
		/* Round the min up and the scale up so the range still fits. */
		m = dmin > 0 ? qclamp(ceilf(minv[j] / dmin - 0.01f), 0, 15) : 0;
		sm = dmin * m;
		sc = d > 0 ? qclamp(ceilf((scale[j] * 3 + sm - minv[j]) / 3 / d - 0.01f),
		    0, 15) : 0;
		out[j] = (uint8_t)(sc | m << 4);
		sd = d * sc;
		id = sd > 0 ? 1 / sd : 0;
		for (i = 0; i < 16; i++) {
			e = 16 * j + i;
			q = qclamp((x[e] + sm) * id, 0, 3);
			qs[32 * (e / 128) + e % 32] |= (uint8_t)(q << (2 * ((e % 128) / 32)));
		}
	}
}

/* One Q3_K super-block: per 16 the value of largest magnitude maps to -4. */
static void
q3_k_block(const float *x, uint8_t *out)
{
	float	scale[16], amax = 0, d, id, sd, isd, max;
	uint8_t	*hm = out, *qs = out + 32, *s = out + 96;
	int	j, i, e, q, l, ls;

	for (j = 0; j < 16; j++) {
		max = 0;
		for (i = 0; i < 16; i++)
			if (fabsf(x[16 * j + i]) > fabsf(max))
				max = x[16 * j + i];
		scale[j] = max / -4;
		if (fabsf(scale[j]) > fabsf(amax))
			amax = scale[j];
	}
	d = from_f16(to_f16(amax / -32));
	id = d != 0 ? 1 / d : 0;
	put_f16(out + 108, to_f16(d));
	memset(out, 0, 108);
	for (j = 0; j < 16; j++) {
		l = qclamp(scale[j] * id, -32, 31);
		ls = l + 32;
		if (j < 8)
			s[j] |= (uint8_t)(ls & 15);
		else
			s[j - 8] |= (uint8_t)((ls & 15) << 4);
		s[8 + j % 4] |= (uint8_t)((ls >> 4) << (2 * (j / 4)));
		sd = d * l;
		isd = sd != 0 ? 1 / sd : 0;
		for (i = 0; i < 16; i++) {
			e = 16 * j + i;
			q = qclamp(x[e] * isd, -4, 3) + 4;
			qs[32 * (e / 128) + e % 32] |= (uint8_t)((q & 3) << (2 * ((e % 128) / 32)));
			if (q & 4)
				hm[e % 32] |= (uint8_t)(1 << (4 * (e / 128) + (e % 128) / 32));
		}
	}
}

/* One Q5_K super-block: as Q4_K with 31 steps. */
static void
q5_k_block(const float *x, uint8_t *out)
{
	float	scale[8], minv[8], d, dmin, sd, sm, id;
	uint8_t	sc[8], m[8], *scales = out + 4, *qh = out + 16, *qs = out + 48;
	int	j, i, q, e;

	kmin_ranges(x, 31, scale, minv, &d, &dmin, out);
	for (j = 0; j < 8; j++) {
		m[j] = dmin > 0 ? (uint8_t)qclamp(ceilf(minv[j] / dmin - 0.01f), 0, 63) : 0;
		sm = dmin * m[j];
		sc[j] = d > 0 ? (uint8_t)qclamp(ceilf((scale[j] * 31 + sm - minv[j]) /
		    31 / d - 0.01f), 0, 63) : 0;
	}
	for (j = 0; j < 4; j++) {
		scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
		scales[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
		scales[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
	}
	memset(qh, 0, 32 + 128);
	for (j = 0; j < 8; j++) {
		sd = d * sc[j];
		sm = dmin * m[j];
		id = sd > 0 ? 1 / sd : 0;
		for (i = 0; i < 32; i++) {
			e = 32 * j + i;
			q = qclamp((x[e] + sm) * id, 0, 31);
			qs[32 * (j / 2) + i] |= (uint8_t)((q & 15) << (4 * (j & 1)));
			qh[i] |= (uint8_t)((q >> 4) << j);
		}
	}
}

/* Encode a row of n elements. */
size_t
quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
	const struct tensor_type_info	*ti;
	uint8_t				*out = dst;
	int64_t				 i, nb;
	uint16_t			 h;

	if ((ti = tensor_type_get(type)) == NULL || n < 0 ||
	    n % ti->block_elems != 0)
		return (0);
	nb = n / ti->block_elems;
	for (i = 0; i < nb; i++) {
		switch (type) {
		case TT_F32:
			memcpy(out + 4 * i, src + i, 4);
			break;
		case TT_F16:
			h = to_f16(src[i]);
			memcpy(out + 2 * i, &h, 2);
			break;
		case TT_BF16:
			h = to_bf16(src[i]);
			memcpy(out + 2 * i, &h, 2);
			break;
		case TT_Q8_0:
			q8_0_block(src + 32 * i, out + 34 * i);
			break;
		case TT_Q4_0:
			q4_0_block(src + 32 * i, out + 18 * i);
			break;
		case TT_Q4_K:
			q4_k_block(src + 256 * i, out + 144 * i);
			break;
		case TT_Q6_K:
			q6_k_block(src + 256 * i, out + 210 * i);
			break;
		case TT_Q4_1:
			qx_1_block(src + 32 * i, out + 20 * i, 16);
			break;
		case TT_Q5_0:
			q5_0_block(src + 32 * i, out + 22 * i);
			break;
		case TT_Q5_1:
			qx_1_block(src + 32 * i, out + 24 * i, 32);
			break;
		case TT_IQ4_NL:
			iq4_nl_block(src + 32 * i, out + 18 * i);
			break;
		case TT_Q2_K:
			q2_k_block(src + 256 * i, out + 84 * i);
			break;
		case TT_Q3_K:
			q3_k_block(src + 256 * i, out + 110 * i);
			break;
		case TT_Q5_K:
			q5_k_block(src + 256 * i, out + 176 * i);
			break;
		case TT_IQ4_XS:
			iq4_xs_block(src + 256 * i, out + 136 * i);
			break;
		default:
			return (0);
		}
	}
	return ((size_t)nb * ti->block_bytes);
}
