/*
 * ref.c: the plain C reference of the CUDA kernels' ops (see ref.h).
 *
 * Block layouts of the GGUF quantized types, as read here:
 *	Q8_0 (34 bytes, 32 elements): f16 d; int8 qs[32]; x = qs[i] * d.
 *	Q4_0 (18 bytes, 32 elements): f16 d; u8 qs[16]; element i < 16 is the
 *	    low nibble of qs[i], element 16 + i the high nibble; x = (q - 8) * d.
 *	Q4_K (144 bytes, 256 elements): f16 d; f16 dmin; u8 scales[12];
 *	    u8 qs[128].  Eight sub-blocks of 32 with a 6-bit scale sc[j] and a
 *	    6-bit min mn[j]; x = d * sc[j] * q - dmin * mn[j].  Elements
 *	    64g .. 64g+31 are the low nibbles of qs[32g .. 32g+31] (sub-block
 *	    2g), 64g+32 .. 64g+63 their high nibbles (sub-block 2g+1).
 *	Q6_K (210 bytes, 256 elements): u8 ql[128]; u8 qh[64]; int8 sc[16];
 *	    f16 d.  Two halves of 128; in half h, element 32k + l (k < 4,
 *	    l < 32) takes its low 4 bits from ql[64h + l + 32(k & 1)] (low
 *	    nibble for k < 2, high for k >= 2), its high 2 bits from bits 2k..2k+1
 *	    of qh[32h + l], and its scale from sc[8h + 2k + l / 16];
 *	    x = d * sc * (q - 32).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_type.h"
#include "util.h"
#include "ref.h"

/* Convert an IEEE half to float. */
float
ref_f16_to_f32(uint16_t h)
{
	uint32_t	exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	float		f;

	if (exp == 0)
		f = ldexpf((float)man, -24);
	else if (exp == 31)
		f = man != 0 ? NAN : INFINITY;
	else
		f = ldexpf((float)(man | 0x400), (int)exp - 25);
	return ((h & 0x8000) ? -f : f);
}

/* Convert a float to an IEEE half, rounding to nearest even. */
uint16_t
ref_f32_to_f16(float f)
{
	uint32_t	x, ax, e, m, h, rem;
	uint16_t	sign;
	float		v;

	memcpy(&x, &f, sizeof x);
	sign = (x >> 16) & 0x8000;
	ax = x & 0x7fffffff;
	if (ax >= 0x7f800000)		/* inf or nan */
		return (sign | (ax > 0x7f800000 ? 0x7e00 : 0x7c00));
	if (ax >= 0x477ff000)		/* >= 65520 rounds to inf */
		return (sign | 0x7c00);
	if (ax < 0x38800000) {		/* below 2^-14: subnormal half */
		memcpy(&v, &ax, sizeof v);
		/* Scaling by 2^24 is exact; lrintf rounds to even. */
		return (sign | (uint16_t)lrintf(v * 16777216.0f));
	}
	e = (ax >> 23) - 127 + 15;
	m = ax & 0x7fffff;
	h = (e << 10) | (m >> 13);
	rem = m & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
		h++;			/* a carry into the exponent is right */
	return (sign | (uint16_t)h);
}

/* Convert a bfloat16 to float. */
float
ref_bf16_to_f32(uint16_t b)
{
	uint32_t	x = (uint32_t)b << 16;
	float		f;

	memcpy(&f, &x, sizeof f);
	return (f);
}

/* Convert a float to bfloat16, rounding to nearest even. */
uint16_t
ref_f32_to_bf16(float f)
{
	uint32_t	x;

	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffff) > 0x7f800000)
		return ((uint16_t)((x >> 16) | 0x40));	/* keep nan quiet */
	x += 0x7fff + ((x >> 16) & 1);
	return ((uint16_t)(x >> 16));
}

/* Read a little-endian half at p. */
static float
rd_f16(const uint8_t *p)
{
	return (ref_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))));
}

/* Decode the 6-bit scale and min of sub-block j of a Q4_K block. */
static void
q4k_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*mn = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
		*mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

/* Dequantize one Q8_0 block (32 elements). */
static void
deq_q8_0(const uint8_t *b, float *y)
{
	float	d = rd_f16(b);
	int	i;

	for (i = 0; i < 32; i++)
		y[i] = (float)(int8_t)b[2 + i] * d;
}

/* Dequantize one Q4_0 block (32 elements). */
static void
deq_q4_0(const uint8_t *b, float *y)
{
	float	d = rd_f16(b);
	int	i;

	for (i = 0; i < 16; i++) {
		y[i] = (float)((b[2 + i] & 0x0f) - 8) * d;
		y[16 + i] = (float)((b[2 + i] >> 4) - 8) * d;
	}
}

/* Dequantize one Q4_K block (256 elements). */
static void
deq_q4_k(const uint8_t *b, float *y)
{
	float		 d = rd_f16(b), dmin = rd_f16(b + 2);
	const uint8_t	*scales = b + 4, *qs = b + 16;
	int		 g, l, sc0, mn0, sc1, mn1;

	for (g = 0; g < 4; g++) {
		q4k_scale_min(scales, 2 * g, &sc0, &mn0);
		q4k_scale_min(scales, 2 * g + 1, &sc1, &mn1);
		for (l = 0; l < 32; l++) {
			y[64 * g + l] = d * (float)sc0 *
			    (float)(qs[32 * g + l] & 0x0f) - dmin * (float)mn0;
			y[64 * g + 32 + l] = d * (float)sc1 *
			    (float)(qs[32 * g + l] >> 4) - dmin * (float)mn1;
		}
	}
}

/* Dequantize one Q6_K block (256 elements). */
static void
deq_q6_k(const uint8_t *b, float *y)
{
	const uint8_t	*ql = b, *qh = b + 128;
	const int8_t	*sc = (const int8_t *)(b + 192);
	float		 d = rd_f16(b + 208);
	int		 h, k, l, lo, hi;

	for (h = 0; h < 2; h++) {
		for (k = 0; k < 4; k++) {
			for (l = 0; l < 32; l++) {
				lo = ql[64 * h + l + 32 * (k & 1)];
				lo = k < 2 ? (lo & 0x0f) : (lo >> 4);
				hi = (qh[32 * h + l] >> (2 * k)) & 3;
				y[128 * h + 32 * k + l] = d *
				    (float)sc[8 * h + 2 * k + l / 16] *
				    (float)((lo | (hi << 4)) - 32);
			}
		}
	}
}

/* The IQ4_NL / IQ4_XS code book. */
static const int8_t iq4_values[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/*
 * Dequantize one block of a 32-element type: Q4_1 and Q5_1 (d * q + m),
 * Q5_0 (d * (q - 16)), IQ4_NL (d * book[q]).  Codes: element i < 16 in the
 * low nibble of qs[i], i >= 16 in the high nibble of qs[i - 16]; the fifth
 * bit of element i is bit i of the 32-bit qh.
 */
static void
deq_b32(uint32_t type, const uint8_t *b, float *y)
{
	float		d = rd_f16(b), m = 0;
	const uint8_t	*qs, *qh = NULL;
	uint32_t	h = 0;
	int		i, q;

	switch (type) {
	case TT_Q4_1:
		m = rd_f16(b + 2);
		qs = b + 4;
		break;
	case TT_Q5_0:
		qh = b + 2;
		qs = b + 6;
		break;
	case TT_Q5_1:
		m = rd_f16(b + 2);
		qh = b + 4;
		qs = b + 8;
		break;
	default:
		qs = b + 2;
		break;
	}
	if (qh != NULL)
		h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
		    (uint32_t)qh[3] << 24;
	for (i = 0; i < 32; i++) {
		q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
		q |= (int)((h >> i) & 1) << 4;
		if (type == TT_IQ4_NL)
			y[i] = d * (float)iq4_values[q];
		else if (type == TT_Q5_0)
			y[i] = d * (float)(q - 16);
		else
			y[i] = d * (float)q + m;
	}
}

/*
 * Dequantize one Q2_K block (scales[16]: scale low nibble, min high;
 * qs[64]; d; dmin) or Q3_K block (hmask[32]; qs[64]; 12 bytes of 6-bit
 * scales; d).  In half h, element 32j + l takes bits 2j..2j+1 of
 * qs[32h + l]; Q3_K subtracts 4 unless bit 4h + j of hmask[l] is set.
 */
static void
deq_q23_k(uint32_t type, const uint8_t *b, float *y)
{
	int	h, j, l, e, q, k, sc;
	float	d, dmin;

	for (h = 0; h < 2; h++)
		for (j = 0; j < 4; j++)
			for (l = 0; l < 32; l++) {
				e = 128 * h + 32 * j + l;
				k = e / 16;
				if (type == TT_Q2_K) {
					q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
					d = rd_f16(b + 80);
					dmin = rd_f16(b + 82);
					y[e] = d * (float)(b[k] & 15) * (float)q -
					    dmin * (float)(b[k] >> 4);
					continue;
				}
				q = (b[32 + 32 * h + l] >> (2 * j)) & 3;
				if (!(b[l] & (1 << (4 * h + j))))
					q -= 4;
				sc = k < 8 ? b[96 + k] & 15 : b[96 + k - 8] >> 4;
				sc |= ((b[104 + k % 4] >> (2 * (k / 4))) & 3) << 4;
				y[e] = rd_f16(b + 108) * (float)(sc - 32) * (float)q;
			}
}

/*
 * Dequantize one Q5_K block: Q4_K's layout with qh[32] between the scales
 * and the codes; bit i of qh[l] is the fifth bit of element 32i + l.
 */
static void
deq_q5_k(const uint8_t *b, float *y)
{
	float	d = rd_f16(b), dmin = rd_f16(b + 2);
	int	j, l, sc, mn, q;

	for (j = 0; j < 8; j++) {
		q4k_scale_min(b + 4, j, &sc, &mn);
		for (l = 0; l < 32; l++) {
			q = b[48 + 32 * (j / 2) + l];
			q = (j & 1) ? q >> 4 : q & 15;
			q |= ((b[16 + l] >> j) & 1) << 4;
			y[32 * j + l] = d * (float)sc * (float)q - dmin * (float)mn;
		}
	}
}

/*
 * Dequantize one IQ4_XS block (d; scales_h u16; scales_l[4]; qs[128]):
 * sub-block j of 32 has the 6-bit scale (nibble j of scales_l) | (bits
 * 2j..2j+1 of scales_h) << 4, minus 32, and IQ4_NL's nibble order.
 */
static void
deq_iq4_xs(const uint8_t *b, float *y)
{
	float		d = rd_f16(b);
	unsigned	sh = b[2] | (b[3] << 8);
	int		j, i, ls, q;

	for (j = 0; j < 8; j++) {
		ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
		for (i = 0; i < 32; i++) {
			q = i < 16 ? b[8 + 16 * j + i] & 15 : b[8 + 16 * j + i - 16] >> 4;
			y[32 * j + i] = d * (float)(ls - 32) * (float)iq4_values[q];
		}
	}
}

/* Dequantize n elements of a row of a GGUF type into dst. */
int
ref_dequant_row(uint32_t type, const void *row, float *dst, int64_t n)
{
	const struct tensor_type_info	*ti = tensor_type_get(type);
	const uint8_t			*p = row;
	int64_t				 i;

	if (ti == NULL || n < 0 || n % ti->block_elems != 0)
		return (-1);
	for (i = 0; i < n; i += ti->block_elems) {
		switch (type) {
		case TT_F32:
			memcpy(&dst[i], p, sizeof(float));
			break;
		case TT_F16:
			dst[i] = rd_f16(p);
			break;
		case TT_BF16:
			dst[i] = ref_bf16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
			break;
		case TT_Q8_0:
			deq_q8_0(p, &dst[i]);
			break;
		case TT_Q4_0:
			deq_q4_0(p, &dst[i]);
			break;
		case TT_Q4_K:
			deq_q4_k(p, &dst[i]);
			break;
		case TT_Q6_K:
			deq_q6_k(p, &dst[i]);
			break;
		case TT_Q4_1:
		case TT_Q5_0:
		case TT_Q5_1:
		case TT_IQ4_NL:
			deq_b32(type, p, &dst[i]);
			break;
		case TT_Q2_K:
		case TT_Q3_K:
			deq_q23_k(type, p, &dst[i]);
			break;
		case TT_Q5_K:
			deq_q5_k(p, &dst[i]);
			break;
		case TT_IQ4_XS:
			deq_iq4_xs(p, &dst[i]);
			break;
		default:
			return (-1);
		}
		p += ti->block_bytes;
	}
	return (0);
}

/* RMS-normalize each row and scale it by weight. */
void
ref_rmsnorm_forward(float *out, const float *x, const float *weight,
    int n_rows, int dim, float eps)
{
	double	ss, r;
	int	i, j;

	for (i = 0; i < n_rows; i++) {
		ss = 0;
		for (j = 0; j < dim; j++)
			ss += (double)x[(size_t)i * dim + j] * x[(size_t)i * dim + j];
		r = 1.0 / sqrt(ss / dim + eps);
		for (j = 0; j < dim; j++)
			out[(size_t)i * dim + j] =
			    (float)(x[(size_t)i * dim + j] * r * weight[j]);
	}
}

/* Rotate adjacent pairs of every head by position-dependent angles. */
void
ref_rope_forward(float *x, const int32_t *pos, int n_tok, int n_heads,
    int head_dim, int rot_dim, float base)
{
	double	 theta, c, s, x0, x1;
	float	*v;
	int	 t, h, i;

	for (t = 0; t < n_tok; t++) {
		for (h = 0; h < n_heads; h++) {
			v = x + ((size_t)t * n_heads + h) * head_dim;
			for (i = 0; 2 * i < rot_dim; i++) {
				theta = pos[t] * pow(base, -2.0 * i / rot_dim);
				c = cos(theta);
				s = sin(theta);
				x0 = v[2 * i];
				x1 = v[2 * i + 1];
				v[2 * i] = (float)(x0 * c - x1 * s);
				v[2 * i + 1] = (float)(x0 * s + x1 * c);
			}
		}
	}
}

/* Gate with SiLU and multiply. */
void
ref_swiglu_forward(float *out, const float *gate, const float *up, size_t n)
{
	double	g;
	size_t	i;

	for (i = 0; i < n; i++) {
		g = gate[i];
		out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
	}
}

/* Add two vectors. */
void
ref_add_forward(float *out, const float *a, const float *b, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

/* Look up embedding rows, dequantized to F32. */
int
ref_embedding_forward(float *out, const void *table, uint32_t type, int dim,
    int n_vocab, const int32_t *tokens, int n_tok)
{
	const struct tensor_type_info	*ti = tensor_type_get(type);
	uint64_t			 rb;
	int				 t;

	if (ti == NULL || dim <= 0 || (rb = tensor_row_bytes(ti, dim)) == 0)
		return (-1);
	for (t = 0; t < n_tok; t++) {
		if (tokens[t] < 0 || tokens[t] >= n_vocab) {
			memset(out + (size_t)t * dim, 0, (size_t)dim * sizeof *out);
			continue;
		}
		if (ref_dequant_row(type, (const uint8_t *)table +
		    (size_t)tokens[t] * rb, out + (size_t)t * dim, dim) != 0)
			return (-1);
	}
	return (0);
}

/* Multiply activations by the transpose of a GGUF weight. */
int
ref_matmul_forward(float *out, const float *x, const void *w, uint32_t wtype,
    int n_tok, int n_in, int n_out)
{
	const struct tensor_type_info	*ti = tensor_type_get(wtype);
	float				*row;
	double				 sum;
	uint64_t			 rb;
	int				 o, t, i;

	if (ti == NULL || n_in <= 0 || (rb = tensor_row_bytes(ti, n_in)) == 0)
		return (-1);
	row = xreallocarray(NULL, (size_t)n_in, sizeof *row);
	for (o = 0; o < n_out; o++) {
		ref_dequant_row(wtype, (const uint8_t *)w + (size_t)o * rb, row,
		    n_in);
		for (t = 0; t < n_tok; t++) {
			sum = 0;
			for (i = 0; i < n_in; i++)
				sum += (double)row[i] * x[(size_t)t * n_in + i];
			out[(size_t)t * n_out + o] = (float)sum;
		}
	}
	free(row);
	return (0);
}

/* Write new keys and values into their cache slots as F16. */
void
ref_kv_store_forward(uint16_t *k_cache, uint16_t *v_cache, const float *k,
    const float *v, const int32_t *slots, int n_tok, int n_kv_heads,
    int head_dim)
{
	size_t	n = (size_t)n_kv_heads * head_dim, i;
	int	t;

	for (t = 0; t < n_tok; t++) {
		if (slots[t] < 0)
			continue;
		for (i = 0; i < n; i++) {
			k_cache[(size_t)slots[t] * n + i] =
			    ref_f32_to_f16(k[(size_t)t * n + i]);
			v_cache[(size_t)slots[t] * n + i] =
			    ref_f32_to_f16(v[(size_t)t * n + i]);
		}
	}
}

/* Causal softmax attention over paged F16 keys and values. */
void
ref_attention_forward(float *out, const float *q, const uint16_t *k_cache,
    const uint16_t *v_cache, const int32_t *block_tables, int max_blocks,
    const struct attn_seq *seqs, int n_seqs, int n_heads, int n_kv_heads,
    int head_dim, float scale)
{
	const struct attn_seq	*sq;
	const float		*qv;
	const int32_t		*bt;
	double			*p, *acc, m, l, dot;
	float			*ov;
	size_t			 kv;
	int			 s, i, h, t, d, pos, group = n_heads / n_kv_heads;

	for (s = 0; s < n_seqs; s++) {
		sq = &seqs[s];
		bt = block_tables + (size_t)s * max_blocks;
		p = xreallocarray(NULL, (size_t)sq->ctx_len + 1, sizeof *p);
		acc = xreallocarray(NULL, (size_t)head_dim, sizeof *acc);
		for (i = 0; i < sq->q_len; i++) {
			pos = sq->ctx_len - sq->q_len + i;
			for (h = 0; h < n_heads; h++) {
				qv = q + ((size_t)(sq->q_start + i) * n_heads + h) *
				    head_dim;
				ov = out + ((size_t)(sq->q_start + i) * n_heads + h) *
				    head_dim;
				m = -INFINITY;
				for (t = 0; t <= pos; t++) {
					kv = (((size_t)bt[t / KV_BLOCK] * KV_BLOCK +
					    t % KV_BLOCK) * n_kv_heads + h / group) *
					    head_dim;
					dot = 0;
					for (d = 0; d < head_dim; d++)
						dot += (double)qv[d] *
						    ref_f16_to_f32(k_cache[kv + d]);
					p[t] = dot * scale;
					if (p[t] > m)
						m = p[t];
				}
				l = 0;
				for (d = 0; d < head_dim; d++)
					acc[d] = 0;
				for (t = 0; t <= pos; t++) {
					kv = (((size_t)bt[t / KV_BLOCK] * KV_BLOCK +
					    t % KV_BLOCK) * n_kv_heads + h / group) *
					    head_dim;
					p[t] = exp(p[t] - m);
					l += p[t];
					for (d = 0; d < head_dim; d++)
						acc[d] += p[t] *
						    ref_f16_to_f32(v_cache[kv + d]);
				}
				for (d = 0; d < head_dim; d++)
					ov[d] = l > 0 ? (float)(acc[d] / l) : 0.0f;
			}
		}
		free(acc);
		free(p);
	}
}

/* Pick the largest logit of each row. */
void
ref_argmax_forward(int32_t *ids, const float *logits, int n_rows, int n_vocab)
{
	const float	*x;
	int		 r, i, best;

	for (r = 0; r < n_rows; r++) {
		x = logits + (size_t)r * n_vocab;
		best = 0;
		for (i = 1; i < n_vocab; i++)
			if (x[i] > x[best])
				best = i;
		ids[r] = best;
	}
}

/* The Gumbel-perturbed, temperature-scaled value of one logit. */
float
ref_gumbel_score(float logit, float temp, uint64_t seed, int index)
{
	float	u;

	if (temp <= 0.0f)
		return (logit);
	u = kdefs_uniform(seed, (uint64_t)index);
	return (logit / temp - logf(-logf(u)));
}

/* Sample each row by the Gumbel-max trick (argmax at temperature <= 0). */
void
ref_sample_forward(int32_t *ids, float *score, const float *logits,
    const float *temp, const uint64_t *seeds, int n_rows, int n_vocab)
{
	const float	*x;
	float		 v, best_v;
	int		 r, i, best;

	for (r = 0; r < n_rows; r++) {
		x = logits + (size_t)r * n_vocab;
		best = 0;
		best_v = ref_gumbel_score(x[0], temp[r], seeds[r], 0);
		for (i = 1; i < n_vocab; i++) {
			v = ref_gumbel_score(x[i], temp[r], seeds[r], i);
			if (v > best_v) {
				best = i;
				best_v = v;
			}
		}
		ids[r] = best;
		if (score != NULL)
			score[r] = best_v;
	}
}
