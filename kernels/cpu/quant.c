/* quant.c: number formats, dequantization, the portable kernels, dispatch. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "log.h"
#include "quant.h"
#include "tensor_type.h"

/* Decode an IEEE half to single precision. */
float
fp16_to_f32(uint16_t h)
{
	uint32_t	sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t	exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float		f;

	if (exp == 0x1f)
		bits = sign | 0x7f800000 | (man << 13);
	else if (exp != 0)
		bits = sign | ((exp + 112) << 23) | (man << 13);
	else if (man == 0)
		bits = sign;
	else {
		/* Subnormal: man * 2^-24 is exact in single precision. */
		f = (float)man * 0x1p-24f;
		memcpy(&bits, &f, sizeof bits);
		bits |= sign;
	}
	memcpy(&f, &bits, sizeof f);
	return (f);
}

/* Encode single precision as an IEEE half, rounding to nearest even. */
uint16_t
f32_to_fp16(float f)
{
	uint32_t	bits, sign, abs, man, rnd;
	int		exp;

	memcpy(&bits, &f, sizeof bits);
	sign = (bits >> 16) & 0x8000;
	abs = bits & 0x7fffffff;
	if (abs > 0x7f800000)
		return (sign | 0x7e00 | ((abs >> 13) & 0x3ff));	/* NaN */
	if (abs >= 0x477ff000)
		return (sign | 0x7c00);		/* overflows to infinity */
	exp = (int)(abs >> 23) - 127;
	if (exp < -14) {
		/* Subnormal half: shift the implicit bit in and round. */
		if (exp < -25)
			return (sign);
		man = (abs & 0x7fffff) | 0x800000;
		int shift = -exp - 14 + 13;
		uint32_t q = man >> shift, r = man & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		if (r > half || (r == half && (q & 1)))
			q++;
		return (sign | q);
	}
	man = abs & 0x7fffff;
	rnd = man & 0x1fff;
	man >>= 13;
	bits = ((uint32_t)(exp + 15) << 10) | man;
	if (rnd > 0x1000 || (rnd == 0x1000 && (man & 1)))
		bits++;			/* may carry into the exponent: correct */
	return (sign | bits);
}

/* Decode a brain float. */
float
bf16_to_f32(uint16_t h)
{
	uint32_t	bits = (uint32_t)h << 16;
	float		f;

	memcpy(&f, &bits, sizeof f);
	return (f);
}

/* Encode a brain float, rounding to nearest even; NaN stays NaN. */
uint16_t
f32_to_bf16(float f)
{
	uint32_t	bits;

	memcpy(&bits, &f, sizeof bits);
	if ((bits & 0x7fffffff) > 0x7f800000)
		return ((bits >> 16) | 0x40);
	bits += 0x7fff + ((bits >> 16) & 1);
	return (bits >> 16);
}

/* Little-endian 16-bit load from an unaligned pointer. */
static inline uint16_t
ld16(const uint8_t *p)
{
	return ((uint16_t)(p[0] | (p[1] << 8)));
}

/* Code (0..15) of element e (0..255) of a Q4_K super-block. */
static inline int
q4k_code(const uint8_t *b, int e)
{
	const uint8_t	*qs = b + 16;
	int		 j = e / 64, i = e % 64;

	return (i < 32 ? qs[32 * j + i] & 0xf : qs[32 * j + i - 32] >> 4);
}

/* Little-endian 32-bit load from an unaligned pointer. */
static inline uint32_t
ld32(const uint8_t *p)
{
	return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24);
}

/* The IQ4_NL / IQ4_XS code book: a 4-bit code selects one of these. */
const int8_t quant_iq4nl_values[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* Low or high nibble of element k (0..31) of a 32-element nibble block. */
static inline int
nib32(const uint8_t *qs, int k)
{
	return (k < 16 ? qs[k] & 0xf : qs[k - 16] >> 4);
}

/* Six-bit scale k (0..15) of a Q3_K super-block (12 packed bytes). */
static inline int
q3k_scale(const uint8_t *s, int k)
{
	int	lo = k < 8 ? s[k] & 0xf : s[k - 8] >> 4;

	return (lo | ((s[8 + k % 4] >> (2 * (k / 4))) & 3) << 4);
}

/*
 * Value of element e of one block of a type added after the first seven,
 * in double, straight from the GGUF layout (see gguf/quantize.c).
 */
static double
block_value(uint32_t type, const uint8_t *b, int e)
{
	int	h = e / 128, i = e % 128, j = i / 32, l = i % 32, q;
	uint8_t	sc[8], mn[8];

	switch (type) {
	case TT_Q4_1:
		return ((double)fp16_to_f32(ld16(b)) * nib32(b + 4, e) +
		    fp16_to_f32(ld16(b + 2)));
	case TT_Q5_0:
		q = nib32(b + 6, e) | ((ld32(b + 2) >> e) & 1) << 4;
		return ((double)fp16_to_f32(ld16(b)) * (q - 16));
	case TT_Q5_1:
		q = nib32(b + 8, e) | ((ld32(b + 4) >> e) & 1) << 4;
		return ((double)fp16_to_f32(ld16(b)) * q + fp16_to_f32(ld16(b + 2)));
	case TT_IQ4_NL:
		return ((double)fp16_to_f32(ld16(b)) * quant_iq4nl_values[nib32(b + 2, e)]);
	case TT_Q2_K:
		q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
		return ((double)fp16_to_f32(ld16(b + 80)) * (b[e / 16] & 0xf) * q -
		    (double)fp16_to_f32(ld16(b + 82)) * (b[e / 16] >> 4));
	case TT_Q3_K:
		q = ((b[32 + 32 * h + l] >> (2 * j)) & 3) +
		    4 * ((b[l] >> (4 * h + j)) & 1) - 4;
		return ((double)fp16_to_f32(ld16(b + 108)) *
		    (q3k_scale(b + 96, e / 16) - 32) * q);
	case TT_Q5_K:
		i = e % 64;
		q = (i < 32 ? b[48 + 32 * (e / 64) + i] & 0xf :
		    b[48 + 32 * (e / 64) + i - 32] >> 4) |
		    ((b[16 + i % 32] >> (2 * (e / 64) + i / 32)) & 1) << 4;
		q4k_scales(b + 4, sc, mn);
		return ((double)fp16_to_f32(ld16(b)) * sc[e / 32] * q -
		    (double)fp16_to_f32(ld16(b + 2)) * mn[e / 32]);
	case TT_IQ4_XS:
		i = e / 32;
		q = ((b[4 + i / 2] >> (4 * (i % 2))) & 0xf) |
		    ((ld16(b + 2) >> (2 * i)) & 3) << 4;
		return ((double)fp16_to_f32(ld16(b)) * (q - 32) *
		    quant_iq4nl_values[nib32(b + 8 + 16 * i, e % 32)]);
	}
	fatalx("block_value: unsupported tensor type %u", type);
}

/* Decode n elements of a row of any supported type to f32. */
void
dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
	const struct tensor_type_info *ti;
	const uint8_t	*p = src;
	int64_t		 i, b;
	int		 j;

	switch (type) {
	case TT_F32:
		memcpy(dst, src, n * sizeof *dst);
		break;
	case TT_F16:
		for (i = 0; i < n; i++)
			dst[i] = fp16_to_f32(ld16(p + 2 * i));
		break;
	case TT_BF16:
		for (i = 0; i < n; i++)
			dst[i] = bf16_to_f32(ld16(p + 2 * i));
		break;
	case TT_Q8_0:
		for (b = 0; b < n / 32; b++, p += 34) {
			float d = fp16_to_f32(ld16(p));
			for (j = 0; j < 32; j++)
				dst[32 * b + j] = d * (float)(int8_t)p[2 + j];
		}
		break;
	case TT_Q4_0:
		for (b = 0; b < n / 32; b++, p += 18) {
			float d = fp16_to_f32(ld16(p));
			for (j = 0; j < 16; j++) {
				dst[32 * b + j] = d * (float)((p[2 + j] & 0xf) - 8);
				dst[32 * b + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
			}
		}
		break;
	case TT_Q4_K:
		for (b = 0; b < n / 256; b++, p += 144) {
			float	d = fp16_to_f32(ld16(p)), dmin = fp16_to_f32(ld16(p + 2));
			uint8_t	sc[8], mn[8];

			q4k_scales(p + 4, sc, mn);
			for (j = 0; j < 256; j++)
				dst[256 * b + j] = d * sc[j / 32] * (float)q4k_code(p, j) -
				    dmin * mn[j / 32];
		}
		break;
	case TT_Q6_K:
		for (b = 0; b < n / 256; b++, p += 210) {
			float d = fp16_to_f32(ld16(p + 208));
			const int8_t *sc = (const int8_t *)(p + 192);

			for (j = 0; j < 256; j++)
				dst[256 * b + j] = d * sc[j / 16] *
				    (float)(q6k_code(p, j) - 32);
		}
		break;
	default:
		ti = tensor_type_get(type);
		if (ti == NULL)
			fatalx("dequantize_row: unsupported tensor type %u", type);
		for (b = 0; b < n / ti->block_elems; b++, p += ti->block_bytes)
			for (j = 0; j < (int)ti->block_elems; j++)
				dst[b * ti->block_elems + j] = (float)block_value(type, p, j);
	}
}

/* Dot product of a row with x in double precision, decoding element-wise. */
double
dot_row_ref(uint32_t type, const void *row, const float *x, int64_t n)
{
	const struct tensor_type_info *ti;
	const uint8_t	*p = row;
	double		 sum = 0;
	int64_t		 i, b;
	int		 j;

	switch (type) {
	case TT_F32:
		for (i = 0; i < n; i++)
			sum += (double)((const float *)row)[i] * x[i];
		break;
	case TT_F16:
		for (i = 0; i < n; i++)
			sum += (double)fp16_to_f32(ld16(p + 2 * i)) * x[i];
		break;
	case TT_BF16:
		for (i = 0; i < n; i++)
			sum += (double)bf16_to_f32(ld16(p + 2 * i)) * x[i];
		break;
	case TT_Q8_0:
		for (b = 0; b < n / 32; b++, p += 34) {
			double d = fp16_to_f32(ld16(p));
			for (j = 0; j < 32; j++)
				sum += d * (int8_t)p[2 + j] * x[32 * b + j];
		}
		break;
	case TT_Q4_0:
		for (b = 0; b < n / 32; b++, p += 18) {
			double d = fp16_to_f32(ld16(p));
			for (j = 0; j < 16; j++) {
				sum += d * ((p[2 + j] & 0xf) - 8) * x[32 * b + j];
				sum += d * ((p[2 + j] >> 4) - 8) * x[32 * b + j + 16];
			}
		}
		break;
	case TT_Q4_K:
		for (b = 0; b < n / 256; b++, p += 144) {
			double	d = fp16_to_f32(ld16(p)), dmin = fp16_to_f32(ld16(p + 2));
			uint8_t	sc[8], mn[8];

			q4k_scales(p + 4, sc, mn);
			for (j = 0; j < 256; j++)
				sum += (d * sc[j / 32] * q4k_code(p, j) -
				    dmin * mn[j / 32]) * x[256 * b + j];
		}
		break;
	case TT_Q6_K:
		for (b = 0; b < n / 256; b++, p += 210) {
			double d = fp16_to_f32(ld16(p + 208));
			const int8_t *sc = (const int8_t *)(p + 192);

			for (j = 0; j < 256; j++)
				sum += d * sc[j / 16] * (q6k_code(p, j) - 32) *
				    x[256 * b + j];
		}
		break;
	default:
		ti = tensor_type_get(type);
		if (ti == NULL)
			fatalx("dot_row_ref: unsupported tensor type %u", type);
		for (b = 0; b < n / ti->block_elems; b++, p += ti->block_bytes)
			for (j = 0; j < (int)ti->block_elems; j++)
				sum += block_value(type, p, j) * x[b * ti->block_elems + j];
	}
	return (sum);
}

/* Whether a type uses the integer kernels (quantized activations). */
static int
is_int_type(uint32_t type)
{
	return (type != TT_F32 && type != TT_F16 && type != TT_BF16 &&
	    tensor_type_get(type) != NULL);
}

/* Offset of the unsigned codes the kernels use for a weight type. */
int
quant_code_offset(uint32_t type)
{
	switch (type) {
	case TT_Q4_0:
		return (8);
	case TT_Q8_0:
		return (128);	/* codes are the stored int8 plus 128 */
	case TT_Q6_K:
		return (32);
	case TT_Q5_0:
		return (16);
	case TT_Q3_K:
		return (4);
	case TT_IQ4_NL:
	case TT_IQ4_XS:
		return (128);
	case TT_Q2_K:
		return (-1);	/* no offset: bias holds the lane sums, for the mins */
	default:
		return (0);
	}
}

#define ALIGN64(n)	(((n) + 63) & ~(size_t)63)
#define PAD256(n)	(((n) + 255) & ~(int64_t)255)

/* Scratch bytes the prepared activations of a type need. */
size_t
quant_act_bytes(uint32_t type, int layout, int64_t cols, int n_tok)
{
	size_t	n = (size_t)PAD256(cols) * n_tok;

	if (layout == ACT_BF16)
		return (ALIGN64(n * 2) + 64);
	if (layout == ACT_I16)
		return (ALIGN64(n * 2) + ALIGN64(n / 32 * 4) + 64);
	/* Whole groups of tokens, f32 or bf16 values, cols rounded to even. */
	if (layout == ACT_F32X || layout == ACT_BF16X)
		return ((size_t)((cols + 1) & ~(int64_t)1) * (layout == ACT_F32X ? 4 : 2) *
		    ((n_tok + ACT_F32X_TOK - 1) / ACT_F32X_TOK * ACT_F32X_TOK) + 64);
	if (!is_int_type(type))
		return (0);
	return (ALIGN64(n) + ALIGN64(n / 32 * 4) + ALIGN64(n / 4 * 4) +
	    ALIGN64(n / 4 * 4) + ALIGN64(n / 32 * 4) + 64);
}

/* Lay the activation arrays out over buf (64-byte aligned by rounding up). */
void
quant_act_init(struct qact *a, uint32_t type, int layout, const float *x, int64_t cols,
    int n_tok, void *buf)
{
	size_t		 n = (size_t)PAD256(cols) * n_tok;
	uint8_t		*p = buf;

	memset(a, 0, sizeof *a);
	a->cols = cols;
	a->stride = PAD256(cols);
	a->n_tok = n_tok;
	a->layout = layout;
	a->x = x;
	p = (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
	if (layout == ACT_BF16 || layout == ACT_BF16X) {
		a->xb = (uint16_t *)p;
		return;
	}
	if (layout == ACT_I16) {
		a->xb = (uint16_t *)p;
		a->d = (float *)(p + ALIGN64(n * 2));
		return;
	}
	if (layout == ACT_F32X) {
		a->xf = (float *)p;
		return;
	}
	if (!is_int_type(type))
		return;
	a->q = (int8_t *)p;
	p += ALIGN64(n);
	a->d = (float *)p;
	p += ALIGN64(n / 32 * 4);
	a->dl = (float *)p;
	p += ALIGN64(n / 4 * 4);
	a->bias = (int32_t *)p;
	p += ALIGN64(n / 4 * 4);
	a->s = (float *)p;
}

/* Stored position of element e (within its 256-element group) in a layout. */
static inline int
act_pos(int layout, int e)
{
	static const int chunk[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };	/* self-inverse */
	int		 g, k, i;

	switch (layout) {
	case ACT_Q4_0X4:
		g = e / 128;
		k = (e % 128) / 32;
		i = e % 32;
		return (128 * g + (i < 16 ? 16 * k + i : 64 + 16 * k + i - 16));
	case ACT_Q4_KX:
		return (32 * chunk[e / 32] + e % 32);
	default:
		return (e);
	}
}

/* Where element e of a row is stored in a layout. */
int64_t
quant_act_pos(int layout, int64_t e)
{
	return (e / 256 * 256 + act_pos(layout, (int)(e % 256)));
}

/*
 * ACT_BLOCK, ACT_BLOCK16: fold each run of lanes (four codes each) of a
 * token's biases into one, in place (entry b is written after entries
 * lanes * b.. were read), leaving one bias per 32 or 16 elements.
 */
void
quant_act_block_bias(int32_t *bias, int64_t n, int lanes)
{
	int64_t	b;
	int	j, sum;

	for (b = 0; b < n; b++) {
		for (sum = 0, j = 0; j < lanes; j++)
			sum += bias[lanes * b + j];
		bias[b] = sum;
	}
}

/*
 * ACT_PAIR16: for each of a token's nb blocks, the sums of the codes of its
 * two halves (|sum| <= 16 * 127, so each fits an int16), low half first.
 */
void
quant_act_pair16(const int8_t *q, int32_t *bias, int64_t nb)
{
	int64_t	b;
	int	j, s0, s1;

	for (b = 0; b < nb; b++) {
		for (s0 = s1 = 0, j = 0; j < 16; j++) {
			s0 += q[32 * b + j];
			s1 += q[32 * b + 16 + j];
		}
		bias[b] = (int32_t)((uint32_t)(uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16);
	}
}

/*
 * Copy Q4_K rows into the layout of the repacked Q4_K kernels, in groups of
 * pg rows (a lane of a vector each), or only size it.  Per 256-element
 * super-block of a group: the rows' d and dmin (halves, 2pg bytes each),
 * the eight 6-bit sub-block scales and mins as bytes (sc[8][pg],
 * mn[8][pg]), then for each sub-block pair h the eight vectors k whose
 * lane i is bytes 32h+4k..32h+4k+3 of row i's codes: low nibbles are
 * elements 4k.. of sub-block 2h, high nibbles of sub-block 2h+1.  Rows
 * past the end are zeros.
 */
size_t
quant_pack_q4_k(const uint8_t *w, size_t rb, int64_t rows, int64_t cols, int pg,
    uint8_t *dst)
{
	const int64_t	nsb = cols / 256, ng = (rows + pg - 1) / pg;
	const size_t	blk = (size_t)QUANT_Q4K_PACKED_BLOCK(pg);
	int64_t		g, b, r;
	int		i, k, h, e;
	uint8_t		sc[8], mn[8];

	if (dst == NULL)
		return ((size_t)(ng * nsb) * blk);
	for (g = 0; g < ng; g++) {
		for (b = 0; b < nsb; b++) {
			uint8_t *o = dst + (size_t)(g * nsb + b) * blk;

			memset(o, 0, blk);
			for (i = 0; i < pg; i++) {
				const uint8_t *sb;

				if ((r = g * pg + i) >= rows)
					break;
				sb = w + (size_t)r * rb + (size_t)b * 144;
				memcpy(o + 2 * i, sb, 2);
				memcpy(o + QUANT_Q4K_DM(pg) + 2 * i, sb + 2, 2);
				q4k_scales(sb + 4, sc, mn);
				for (k = 0; k < 8; k++) {
					o[QUANT_Q4K_SC(pg) + pg * k + i] = sc[k];
					o[QUANT_Q4K_MN(pg) + pg * k + i] = mn[k];
				}
				for (h = 0; h < 4; h++)
					for (k = 0; k < 8; k++)
						for (e = 0; e < 4; e++)
							o[QUANT_Q4K_Q(pg) + 32 * pg * h + 4 * pg * k +
							    4 * i + e] = sb[16 + 32 * h + 4 * k + e];
			}
		}
	}
	return ((size_t)(ng * nsb) * blk);
}

/* Quantize tokens [t0, t1) of the activations in blocks of 32. */
void
quant_act_fill(struct qact *a, uint32_t type, int t0, int t1)
{
	int64_t	 cols = a->cols, stride = a->stride, nb = stride / 32, b, l;
	int	 off = quant_code_offset(type), t, j;
	int	 pos[256];

	if (a->layout == ACT_BF16) {
		for (t = t0; t < t1; t++) {
			const float	*x = a->x + (size_t)t * cols;
			uint16_t	*xb = a->xb + (size_t)t * stride;

			for (l = 0; l < stride; l++)
				xb[l] = l < cols ? f32_to_bf16(x[l]) : 0;
		}
		return;
	}
	if (!is_int_type(type))
		return;
	for (j = 0; j < 256; j++)
		pos[j] = act_pos(a->layout, j);
	for (t = t0; t < t1; t++) {
		const float	*x = a->x + (size_t)t * cols;
		int8_t		*q = a->q + (size_t)t * stride;
		float		*d = a->d + (size_t)t * nb;
		float		*dl = a->dl + (size_t)t * stride / 4;
		int32_t		*bias = a->bias + (size_t)t * stride / 4;
		float		*s = a->s + (size_t)t * nb;

		for (b = 0; b < nb; b++) {
			int8_t	*qg = q + 256 * (b / 8);
			float	 amax = 0, id, db;
			int	 sum = 0, e0 = 32 * (b % 8);

			if (32 * b >= cols) {
				/* Padding: zero codes, zero scale. */
				for (j = 0; j < 32; j++)
					qg[pos[e0 + j]] = 0;
				d[b] = s[b] = 0;
				continue;
			}
			for (j = 0; j < 32; j++) {
				float v = fabsf(x[32 * b + j]);
				amax = v > amax ? v : amax;
			}
			db = amax / 127.0f;
			id = db > 0 ? 127.0f / amax : 0;
			for (j = 0; j < 32; j++) {
				int v = (int)lrintf(x[32 * b + j] * id);
				v = v > 127 ? 127 : v < -127 ? -127 : v;
				qg[pos[e0 + j]] = (int8_t)v;
				sum += v;
			}
			d[b] = db;
			s[b] = db * (float)sum;
		}
		/* Lanes: the block each belongs to and -off * its code sum. */
		if (a->layout == ACT_Q4_0X4) {
			for (l = 0; l < stride / 8; l++) {
				const int8_t *g = q + 128 * (l / 16) + 4 * (l % 16);
				int sum = 0;
				for (j = 0; j < 4; j++)
					sum += g[j] + g[64 + j];
				dl[l] = d[4 * (l / 16) + (l % 16) / 4];
				bias[l] = -off * sum;
			}
		} else {
			for (l = 0; l < stride / 4; l++) {
				const int8_t *g = q + 4 * l;
				int e = pos[(4 * l) % 256];	/* pos is self-inverse */
				dl[l] = d[8 * (l / 64) + e / 32];
				bias[l] = -off * (g[0] + g[1] + g[2] + g[3]);
			}
		}
		if (a->layout == ACT_BLOCK)
			quant_act_block_bias(bias, nb, 8);
		else if (a->layout == ACT_BLOCK16)
			quant_act_block_bias(bias, 2 * nb, 4);
		else if (a->layout == ACT_PAIR16)
			quant_act_pair16(q, bias, nb);
	}
}

/*
 * Portable kernels.  Integer sums per block are exact; the float
 * accumulation runs over blocks in order, one output at a time.
 */

/* Q4_0 rows against quantized tokens. */
static void
scalar_q4_0(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	int64_t	nb = cols / 32, b;
	int	i, t, j;

	for (i = 0; i < mr; i++) {
		const uint8_t *row = w + (r0 + i) * rb;
		for (t = t0; t < t0 + nr; t++) {
			const int8_t	*q = a->q + (size_t)t * a->stride;
			const float	*d = a->d + (size_t)t * (a->stride / 32);
			float		 acc = 0;

			for (b = 0; b < nb; b++) {
				const uint8_t	*p = row + 18 * b;
				int		 isum = 0;

				for (j = 0; j < 16; j++)
					isum += ((p[2 + j] & 0xf) - 8) * q[32 * b + j] +
					    ((p[2 + j] >> 4) - 8) * q[32 * b + j + 16];
				acc += fp16_to_f32(ld16(p)) * d[b] * (float)isum;
			}
			y[(size_t)t * ldy + r0 + i] = acc;
		}
	}
}

/* Q8_0 rows against quantized tokens. */
static void
scalar_q8_0(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	int64_t	nb = cols / 32, b;
	int	i, t, j;

	for (i = 0; i < mr; i++) {
		const uint8_t *row = w + (r0 + i) * rb;
		for (t = t0; t < t0 + nr; t++) {
			const int8_t	*q = a->q + (size_t)t * a->stride;
			const float	*d = a->d + (size_t)t * (a->stride / 32);
			float		 acc = 0;

			for (b = 0; b < nb; b++) {
				const uint8_t	*p = row + 34 * b;
				int		 isum = 0;

				for (j = 0; j < 32; j++)
					isum += (int8_t)p[2 + j] * q[32 * b + j];
				acc += fp16_to_f32(ld16(p)) * d[b] * (float)isum;
			}
			y[(size_t)t * ldy + r0 + i] = acc;
		}
	}
}

/* Q4_K rows against quantized tokens. */
static void
scalar_q4_k(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	int64_t	sb;
	int	i, t, j, k;

	for (i = 0; i < mr; i++) {
		const uint8_t *row = w + (r0 + i) * rb;
		for (t = t0; t < t0 + nr; t++) {
			const int8_t	*q = a->q + (size_t)t * a->stride;
			const float	*d = a->d + (size_t)t * (a->stride / 32);
			const float	*s = a->s + (size_t)t * (a->stride / 32);
			float		 acc = 0, accm = 0;

			for (sb = 0; sb < cols / 256; sb++) {
				const uint8_t	*p = row + 144 * sb;
				float		 dd = fp16_to_f32(ld16(p));
				float		 dmin = fp16_to_f32(ld16(p + 2));
				uint8_t		 sc[8], mn[8];

				q4k_scales(p + 4, sc, mn);
				for (j = 0; j < 8; j++) {
					const int8_t	*qq = q + 256 * sb + 32 * j;
					const uint8_t	*qs = p + 16 + 32 * (j / 2);
					int		 isum = 0, sh = 4 * (j & 1);

					for (k = 0; k < 32; k++)
						isum += ((qs[k] >> sh) & 0xf) * qq[k];
					acc += dd * sc[j] * d[8 * sb + j] * (float)isum;
					accm += dmin * mn[j] * s[8 * sb + j];
				}
			}
			y[(size_t)t * ldy + r0 + i] = acc - accm;
		}
	}
}

/* Q6_K rows against quantized tokens; each super-block is decoded once. */
static void
scalar_q6_k(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	int64_t	sb;
	int	i, t, j, k, l;
	int8_t	c[256];
	float	acc[4];

	for (i = 0; i < mr; i++) {
		const uint8_t *row = w + (r0 + i) * rb;

		for (t = 0; t < nr; t++)
			acc[t] = 0;
		for (sb = 0; sb < cols / 256; sb++) {
			const uint8_t	*p = row + 210 * sb;
			const int8_t	*sc = (const int8_t *)(p + 192);
			float		 dd = fp16_to_f32(ld16(p + 208));

			/* Codes minus 32, in element order. */
			for (j = 0; j < 2; j++) {
				const uint8_t *ql = p + 64 * j, *qh = p + 128 + 32 * j;
				int8_t *o = c + 128 * j;
				for (l = 0; l < 32; l++) {
					o[l] = (int8_t)(((ql[l] & 0xf) | (qh[l] & 3) << 4) - 32);
					o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) |
					    ((qh[l] >> 2) & 3) << 4) - 32);
					o[l + 64] = (int8_t)(((ql[l] >> 4) |
					    ((qh[l] >> 4) & 3) << 4) - 32);
					o[l + 96] = (int8_t)(((ql[l + 32] >> 4) |
					    ((qh[l] >> 6) & 3) << 4) - 32);
				}
			}
			for (t = 0; t < nr; t++) {
				const int8_t	*q = a->q + (size_t)(t0 + t) * a->stride +
				    256 * sb;
				const float	*d = a->d + (size_t)(t0 + t) * (a->stride / 32) +
				    8 * sb;

				for (j = 0; j < 8; j++) {
					int s0 = 0, s1 = 0;

					for (k = 0; k < 16; k++) {
						s0 += c[32 * j + k] * q[32 * j + k];
						s1 += c[32 * j + 16 + k] * q[32 * j + 16 + k];
					}
					acc[t] += dd * d[j] *
					    (float)(sc[2 * j] * s0 + sc[2 * j + 1] * s1);
				}
			}
		}
		for (t = 0; t < nr; t++)
			y[(size_t)(t0 + t) * ldy + r0 + i] = acc[t];
	}
}

/*
 * One block of a type added after the first seven as signed codes c with a
 * scale and an additive min per 16 elements: value = sc * c + mn.  The
 * scales are a half times a small integer, so exact in single precision.
 * Returns the number of 16-element sub-blocks.
 */
static int
decode_block(uint32_t type, const uint8_t *b, int8_t *c, float *sc, float *mn)
{
	int	e, k;
	uint8_t	s8[8], m8[8];

	switch (type) {
	case TT_Q4_1:
	case TT_Q5_1:
	case TT_Q5_0:
	case TT_IQ4_NL: {
		float	d = fp16_to_f32(ld16(b));
		float	m = type == TT_Q4_1 || type == TT_Q5_1 ? fp16_to_f32(ld16(b + 2)) : 0;
		const uint8_t *qs = b + (type == TT_Q4_1 ? 4 : type == TT_Q5_0 ? 6 :
		    type == TT_Q5_1 ? 8 : 2);
		uint32_t qh = type == TT_Q5_0 ? ld32(b + 2) : type == TT_Q5_1 ?
		    ld32(b + 4) : 0;

		for (e = 0; e < 32; e++) {
			int q = nib32(qs, e) | ((qh >> e) & 1) << 4;
			c[e] = (int8_t)(type == TT_IQ4_NL ? quant_iq4nl_values[q] :
			    type == TT_Q5_0 ? q - 16 : q);
		}
		sc[0] = sc[1] = d;
		mn[0] = mn[1] = m;
		return (2);
	}
	case TT_Q2_K: {
		float	d = fp16_to_f32(ld16(b + 80)), dmin = fp16_to_f32(ld16(b + 82));

		for (e = 0; e < 256; e++)
			c[e] = (int8_t)((b[16 + 32 * (e / 128) + e % 32] >>
			    (2 * ((e % 128) / 32))) & 3);
		for (k = 0; k < 16; k++) {
			sc[k] = d * (float)(b[k] & 0xf);
			mn[k] = -dmin * (float)(b[k] >> 4);
		}
		return (16);
	}
	case TT_Q3_K: {
		float	d = fp16_to_f32(ld16(b + 108));

		for (e = 0; e < 256; e++) {
			int h = e / 128, j = (e % 128) / 32, l = e % 32;
			c[e] = (int8_t)(((b[32 + 32 * h + l] >> (2 * j)) & 3) +
			    4 * ((b[l] >> (4 * h + j)) & 1) - 4);
		}
		for (k = 0; k < 16; k++) {
			sc[k] = d * (float)(q3k_scale(b + 96, k) - 32);
			mn[k] = 0;
		}
		return (16);
	}
	case TT_Q5_K: {
		float	d = fp16_to_f32(ld16(b)), dmin = fp16_to_f32(ld16(b + 2));

		for (e = 0; e < 256; e++) {
			int j = e / 64, i = e % 64;
			int q = i < 32 ? b[48 + 32 * j + i] & 0xf : b[48 + 32 * j + i - 32] >> 4;
			c[e] = (int8_t)(q | ((b[16 + i % 32] >> (2 * j + i / 32)) & 1) << 4);
		}
		q4k_scales(b + 4, s8, m8);
		for (k = 0; k < 16; k++) {
			sc[k] = d * (float)s8[k / 2];
			mn[k] = -dmin * (float)m8[k / 2];
		}
		return (16);
	}
	case TT_IQ4_XS: {
		float	d = fp16_to_f32(ld16(b));

		for (e = 0; e < 256; e++)
			c[e] = quant_iq4nl_values[nib32(b + 8 + 16 * (e / 32), e % 32)];
		for (k = 0; k < 16; k++) {
			int i = k / 2, ls = ((b[4 + i / 2] >> (4 * (i % 2))) & 0xf) |
			    ((ld16(b + 2) >> (2 * i)) & 3) << 4;
			sc[k] = d * (float)(ls - 32);
			mn[k] = 0;
		}
		return (16);
	}
	}
	return (0);
}

/* Whether a type's values have an additive min per sub-block. */
static inline int
has_min(uint32_t type)
{
	return (type == TT_Q4_1 || type == TT_Q5_1 || type == TT_Q2_K || type == TT_Q5_K);
}

/*
 * Rows of the types added after the first seven against quantized tokens:
 * each block is decoded once per row, then per token and 16-element
 * sub-block the exact integer sums of c * q and of q are scaled in f32.
 */
static void
scalar_generic(uint32_t type, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    int mr, const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	const struct tensor_type_info *ti = tensor_type_get(type);
	const int	 be = (int)ti->block_elems, mins = has_min(type);
	int64_t		 b;
	int		 i, t, k, e, nsub;
	int8_t		 c[256];
	float		 sc[16], mn[16], acc[4];

	for (i = 0; i < mr; i++) {
		const uint8_t *row = w + (r0 + i) * rb;

		for (t = 0; t < nr; t++)
			acc[t] = 0;
		for (b = 0; b < cols / be; b++) {
			nsub = decode_block(type, row + b * ti->block_bytes, c, sc, mn);
			for (t = 0; t < nr; t++) {
				const int8_t	*q = a->q + (size_t)(t0 + t) * a->stride + b * be;
				const float	*d = a->d + (size_t)(t0 + t) * (a->stride / 32) +
				    b * (be / 32);

				for (k = 0; k < nsub; k++) {
					int isum = 0, qsum = 0;

					for (e = 16 * k; e < 16 * k + 16; e++) {
						isum += c[e] * q[e];
						qsum += q[e];
					}
					acc[t] += sc[k] * d[k / 2] * (float)isum;
					if (mins)
						acc[t] += mn[k] * d[k / 2] * (float)qsum;
				}
			}
		}
		for (t = 0; t < nr; t++)
			y[(size_t)(t0 + t) * ldy + r0 + i] = acc[t];
	}
}

/* Instantiate scalar_generic for one type. */
#define GENERIC(fn, type)						\
static void								\
fn(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,	\
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)	\
{									\
	scalar_generic(type, w, rb, cols, r0, mr, a, t0, nr, y, ldy);	\
}
GENERIC(scalar_q4_1, TT_Q4_1)
GENERIC(scalar_q5_0, TT_Q5_0)
GENERIC(scalar_q5_1, TT_Q5_1)
GENERIC(scalar_q2_k, TT_Q2_K)
GENERIC(scalar_q3_k, TT_Q3_K)
GENERIC(scalar_q5_k, TT_Q5_K)
GENERIC(scalar_iq4_nl, TT_IQ4_NL)
GENERIC(scalar_iq4_xs, TT_IQ4_XS)

/* f16 to f32 table for the portable F16 kernel, built once. */
static float		*f16_table;
static pthread_once_t	 f16_once = PTHREAD_ONCE_INIT;

/* Fill the f16 table. */
static void
f16_table_init(void)
{
	uint32_t	i;

	f16_table = malloc(65536 * sizeof *f16_table);
	if (f16_table == NULL)
		fatal("malloc");
	for (i = 0; i < 65536; i++)
		f16_table[i] = fp16_to_f32(i);
}

/* Weight c of a float row. */
static inline float
float_at(uint32_t type, const uint8_t *row, int64_t c)
{
	float	v;

	if (type == TT_F32) {
		memcpy(&v, row + 4 * c, 4);
		return (v);
	}
	if (type == TT_F16)
		return (f16_table[ld16(row + 2 * c)]);
	return (bf16_to_f32(ld16(row + 2 * c)));
}

/* Float-weight rows (F32, F16, BF16) against f32 tokens. */
static void
scalar_float(uint32_t type, const uint8_t *w, size_t rb, int64_t cols, int64_t r0,
    int mr, const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	int64_t	c;
	int	i, t, k;

	for (i = 0; i < mr; i++) {
		const uint8_t *row = w + (r0 + i) * rb;
		for (t = t0; t < t0 + nr; t++) {
			const float	*x = a->x + (size_t)t * cols;
			float		 acc[8] = { 0 }, sum;

			/* Eight partial sums keep the rounding error small. */
			for (c = 0; c + 8 <= cols; c += 8)
				for (k = 0; k < 8; k++)
					acc[k] += float_at(type, row, c + k) * x[c + k];
			for (k = 0; c + k < cols; k++)
				acc[k] += float_at(type, row, c + k) * x[c + k];
			sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
			    ((acc[4] + acc[5]) + (acc[6] + acc[7]));
			y[(size_t)t * ldy + r0 + i] = sum;
		}
	}
}

/* F32 rows. */
static void
scalar_f32(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	scalar_float(TT_F32, w, rb, cols, r0, mr, a, t0, nr, y, ldy);
}

/* F16 rows. */
static void
scalar_f16(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	scalar_float(TT_F16, w, rb, cols, r0, mr, a, t0, nr, y, ldy);
}

/* BF16 rows. */
static void
scalar_bf16(const uint8_t *w, size_t rb, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy)
{
	scalar_float(TT_BF16, w, rb, cols, r0, mr, a, t0, nr, y, ldy);
}

/* The portable kernel of a type. */
struct quant_kernel
quant_kernel_scalar(uint32_t type)
{
	struct quant_kernel	k = { .mr = 4, .nr = 4, .layout = ACT_NATURAL,
	    .fill = quant_act_fill };

	switch (type) {
	case TT_F32:
		k.fn = scalar_f32;
		break;
	case TT_F16:
		pthread_once(&f16_once, f16_table_init);
		k.fn = scalar_f16;
		break;
	case TT_BF16:
		k.fn = scalar_bf16;
		break;
	case TT_Q8_0:
		k.fn = scalar_q8_0;
		break;
	case TT_Q4_0:
		k.fn = scalar_q4_0;
		break;
	case TT_Q4_K:
		k.fn = scalar_q4_k;
		break;
	case TT_Q6_K:
		k.fn = scalar_q6_k;
		break;
	case TT_Q4_1: k.fn = scalar_q4_1; break;
	case TT_Q5_0: k.fn = scalar_q5_0; break;
	case TT_Q5_1: k.fn = scalar_q5_1; break;
	case TT_Q2_K: k.fn = scalar_q2_k; break;
	case TT_Q3_K: k.fn = scalar_q3_k; break;
	case TT_Q5_K: k.fn = scalar_q5_k; break;
	case TT_IQ4_NL: k.fn = scalar_iq4_nl; break;
	case TT_IQ4_XS: k.fn = scalar_iq4_xs; break;
	}
	return (k);
}

/* Set by quant_force_isa(); atomics keep concurrent readers well defined. */
static int	forced_isa = QUANT_ISA_AUTO;
static int	best_isa = -1;
static int	bf16_dot;
static int	f16_i16;
static int	no_pack;

/* Allow weights to be repacked at load; returns the old setting. */
int
quant_allow_pack(int allow)
{
	return (!__atomic_exchange_n(&no_pack, allow == 0, __ATOMIC_RELAXED));
}

/* Whether weights may be repacked at load. */
int
quant_pack_allowed(void)
{
	return (!__atomic_load_n(&no_pack, __ATOMIC_RELAXED));
}

/* Set which weights may take bf16 dot products; returns the old setting. */
int
quant_allow_bf16_dot(int which)
{
	if (which != QUANT_BF16_DOT_ALL && which != QUANT_BF16_DOT_BF16)
		which = QUANT_BF16_DOT_NONE;
	return (__atomic_exchange_n(&bf16_dot, which, __ATOMIC_RELAXED));
}

/* Whether bf16 dot products are allowed. */
int
quant_bf16_dot_allowed(void)
{
	return (__atomic_load_n(&bf16_dot, __ATOMIC_RELAXED));
}

/* Allow F16 weights 16-bit integer dot products; returns the old setting. */
int
quant_allow_f16_i16(int allow)
{
	return (__atomic_exchange_n(&f16_i16, allow != 0, __ATOMIC_RELAXED));
}

/* Whether F16 weights may take 16-bit integer dot products. */
int
quant_f16_i16_allowed(void)
{
	return (__atomic_load_n(&f16_i16, __ATOMIC_RELAXED));
}

/* Whether 16-bit integer products of F16 weights pay on this CPU. */
int
quant_f16_i16_auto(double *rate)
{
	double	r = 0;

	if (quant_isa() >= QUANT_ISA_AVX512)
		r = float_avx512_i16_rate();
	else if (quant_isa() == QUANT_ISA_AVX2)
		r = float_avx2_i16_rate();
	if (rate != NULL)
		*rate = r;
	return (r >= QUANT_I16_MIN_RATE);
}

/* Whether the variant in use is AVX-512 on a CPU with AVX512-BF16. */
int
quant_bf16_dot_supported(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return (quant_isa() >= QUANT_ISA_AVX512 &&
	    __builtin_cpu_supports("avx512bf16"));
#else
	return (0);
#endif
}

/* Whether matrices of type take bf16 dot products (see quant.h). */
int
quant_bf16_dot_takes(uint32_t type)
{
	const int	dot = quant_bf16_dot_allowed();

	return (((type == TT_F16 && dot == QUANT_BF16_DOT_ALL) ||
	    (type == TT_BF16 && dot != QUANT_BF16_DOT_NONE)) &&
	    quant_bf16_dot_supported());
}

/* The bf16 dot setting this CPU is worth by default (see quant.h). */
int
quant_bf16_dot_auto(double *rate)
{
	double	r = 0;

	if (quant_bf16_dot_supported())
		r = float_avx512_bf16_rate();
	if (rate != NULL)
		*rate = r;
	return (r >= 0.75 ? QUANT_BF16_DOT_BF16 : QUANT_BF16_DOT_NONE);
}

#if defined(__x86_64__) || defined(__i386__)
/* Whether the CPU has F16C; clang's __builtin_cpu_supports has no "f16c". */
static int
cpu_has_f16c(void)
{
	unsigned int	a, b, c, d;

	return (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0);
}
#endif

/* Whether the CPU (and OS) can run a variant. */
int
quant_isa_supported(int isa)
{
	switch (isa) {
	case QUANT_ISA_SCALAR:
		return (1);
#if defined(__x86_64__) || defined(__i386__)
	case QUANT_ISA_AVX2:
		return (__builtin_cpu_supports("avx2") &&
		    __builtin_cpu_supports("fma") && cpu_has_f16c());
	case QUANT_ISA_AVX512:
		return (quant_isa_supported(QUANT_ISA_AVX2) &&
		    __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") &&
		    __builtin_cpu_supports("avx512dq") &&
		    __builtin_cpu_supports("avx512vnni"));
#endif
	default:
		return (0);
	}
}

/* The variant in use: forced, or the best the CPU supports. */
int
quant_isa(void)
{
	int	isa;

	if ((isa = __atomic_load_n(&forced_isa, __ATOMIC_RELAXED)) != QUANT_ISA_AUTO)
		return (isa);
	if ((isa = __atomic_load_n(&best_isa, __ATOMIC_RELAXED)) == -1) {
		for (isa = QUANT_ISA_COUNT - 1; isa > 0; isa--)
			if (quant_isa_supported(isa))
				break;
		__atomic_store_n(&best_isa, isa, __ATOMIC_RELAXED);
	}
	return (isa);
}

/* Force a variant (tests); -1 when the CPU lacks it. */
int
quant_force_isa(int isa)
{
	if (isa != QUANT_ISA_AUTO && (isa < 0 || isa >= QUANT_ISA_COUNT ||
	    !quant_isa_supported(isa)))
		return (-1);
	__atomic_store_n(&forced_isa, isa, __ATOMIC_RELAXED);
	return (0);
}

/* The variant of a name, or -1 for none. */
int
quant_isa_by_name(const char *name)
{
	int	isa;

	for (isa = 0; isa < QUANT_ISA_COUNT; isa++)
		if (strcmp(name, quant_isa_name(isa)) == 0)
			return (isa);
	return (-1);
}

/* Name of a variant. */
const char *
quant_isa_name(int isa)
{
	static const char *names[] = { "scalar", "avx2", "avx512" };

	if (isa < 0 || isa >= QUANT_ISA_COUNT)
		return ("unknown");
	return (names[isa]);
}

/* The kernel of a variant for a type, falling back to a lesser variant. */
struct quant_kernel
quant_kernel_get(int isa, uint32_t type)
{
	struct quant_kernel	k = { .fn = NULL };

	if (isa >= QUANT_ISA_AVX512)
		k = quant_kernel_avx512(type);
	if (k.fn == NULL && isa >= QUANT_ISA_AVX2)
		k = quant_kernel_avx2(type);
	if (k.fn == NULL)
		k = quant_kernel_scalar(type);
	return (k);
}
