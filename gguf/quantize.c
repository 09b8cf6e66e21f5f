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
 */

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

/* One Q4_K super-block. */
static void
q4_k_block(const float *x, uint8_t *out)
{
	float	scale[8], minv[8], maxs = 0, maxm = 0, d, dmin, sd, sm, id;
	float	mn, mx;
	uint8_t	sc[8], m[8], *scales = out + 4, *qs = out + 16;
	int	j, i, q, e;

	/* Per sub-block: the range [min(0, lo), hi] over 16 steps. */
	for (j = 0; j < 8; j++) {
		mn = 0;
		mx = x[32 * j];
		for (i = 0; i < 32; i++) {
			mn = fminf(mn, x[32 * j + i]);
			mx = fmaxf(mx, x[32 * j + i]);
		}
		scale[j] = mx > mn ? (mx - mn) / 15 : 0;
		minv[j] = -mn;
		maxs = fmaxf(maxs, scale[j]);
		maxm = fmaxf(maxm, minv[j]);
	}
	/* Super-block scales so that the sub-block ones fit 6 bits. */
	d = from_f16(to_f16(maxs / 63));
	dmin = from_f16(to_f16(maxm / 63));
	put_f16(out, to_f16(d));
	put_f16(out + 2, to_f16(dmin));
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
		default:
			return (0);
		}
	}
	return ((size_t)nb * ti->block_bytes);
}
