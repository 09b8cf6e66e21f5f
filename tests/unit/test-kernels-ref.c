/* test-kernels-ref.c: the C reference of the CUDA ops against known values. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor_type.h"
#include "ref.h"
#include "tap.h"
#include "kernel-testutil.h"

/* Store a half little-endian at p. */
static void
put_f16(uint8_t *p, float f)
{
	uint16_t	h = ref_f32_to_f16(f);

	p[0] = h & 0xff;
	p[1] = h >> 8;
}

/* Half and bfloat16 conversions, including rounding and specials. */
static void
test_convert(void)
{
	uint32_t	h, bad = 0;
	float		f;

	is_int(ref_f32_to_f16(1.0f), 0x3c00, "f16 1.0");
	is_int(ref_f32_to_f16(-2.0f), 0xc000, "f16 -2.0");
	is_int(ref_f32_to_f16(65504.0f), 0x7bff, "f16 max");
	is_int(ref_f32_to_f16(65519.0f), 0x7bff, "f16 65519 rounds down");
	is_int(ref_f32_to_f16(65520.0f), 0x7c00, "f16 65520 rounds to inf");
	is_int(ref_f32_to_f16(ldexpf(1, -24)), 0x0001, "f16 smallest subnormal");
	is_int(ref_f32_to_f16(ldexpf(1, -25)), 0x0000, "f16 half of it ties to even");
	is_int(ref_f32_to_f16(ldexpf(3, -26)), 0x0001, "f16 0.75 ulp rounds up");
	is_int(ref_f32_to_f16(0.1f), 0x2e66, "f16 0.1");
	is_int(ref_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00, "f16 tie to even (down)");
	is_int(ref_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02, "f16 tie to even (up)");
	is_int(ref_f32_to_f16(INFINITY), 0x7c00, "f16 inf");
	ok(isnan(ref_f16_to_f32(ref_f32_to_f16(NAN))), "f16 nan stays nan");
	for (h = 0; h < 65536; h++) {
		f = ref_f16_to_f32((uint16_t)h);
		if (isnan(f))
			continue;
		if (ref_f32_to_f16(f) != h)
			bad++;
	}
	is_int(bad, 0, "every non-nan half survives a round trip");
	near(ref_f16_to_f32(0x3555), 0.333251953125, 0, "f16 decode 0x3555");
	is_int(ref_f32_to_bf16(1.0f), 0x3f80, "bf16 1.0");
	is_int(ref_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80, "bf16 tie to even (down)");
	is_int(ref_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82, "bf16 tie to even (up)");
	near(ref_bf16_to_f32(0xc040), -3.0, 0, "bf16 decode -3");
}

/* Pack Q4_K 6-bit scales and mins the way the format stores them. */
static void
pack_q4k_scales(uint8_t *s, const int *sc, const int *mn)
{
	int	j;

	for (j = 0; j < 4; j++) {
		s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
		s[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
		s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
	}
}

/* Dequantization of each block type at chosen positions. */
static void
test_dequant(void)
{
	uint8_t	b[256 * 4];
	float	y[256];
	int	sc[8] = { 1, 2, 3, 63, 17, 40, 50, 33 };
	int	mn[8] = { 0, 5, 0, 7, 60, 0, 18, 1 };
	int	i, j, bad;

	/* Q8_0: x = q * d. */
	put_f16(b, 0.5f);
	for (i = 0; i < 32; i++)
		b[2 + i] = (uint8_t)(int8_t)(i - 16);
	ok(ref_dequant_row(TT_Q8_0, b, y, 32) == 0, "q8_0 dequantizes");
	near(y[0], -8.0, 0, "q8_0 element 0");
	near(y[31], 7.5, 0, "q8_0 element 31");
	is_int(ref_dequant_row(TT_Q8_0, b, y, 33), -1, "q8_0 rejects a partial block");

	/* Q4_0: low nibbles are elements 0..15, high nibbles 16..31. */
	put_f16(b, 2.0f);
	for (i = 0; i < 16; i++)
		b[2 + i] = (uint8_t)(i | ((15 - i) << 4));
	ref_dequant_row(TT_Q4_0, b, y, 32);
	near(y[0], -16.0, 0, "q4_0 element 0 (low nibble 0)");
	near(y[15], 14.0, 0, "q4_0 element 15 (low nibble 15)");
	near(y[16], 14.0, 0, "q4_0 element 16 (high nibble of byte 0)");
	near(y[31], -16.0, 0, "q4_0 element 31");

	/* Q4_K: x = d * sc[j] * q - dmin * mn[j], sub-block j = element / 32. */
	memset(b, 0, 144);
	put_f16(b, 0.25f);
	put_f16(b + 2, 0.5f);
	pack_q4k_scales(b + 4, sc, mn);
	for (i = 0; i < 128; i++)
		b[16 + i] = (uint8_t)((i % 16) | ((15 - i % 16) << 4));
	ref_dequant_row(TT_Q4_K, b, y, 256);
	bad = 0;
	for (i = 0; i < 256; i++) {
		int g = i / 64, l = i % 32, q, want_j;
		uint8_t byte = b[16 + 32 * g + l];

		want_j = i / 32;
		q = (i % 64) < 32 ? (byte & 15) : (byte >> 4);
		if (y[i] != 0.25f * sc[want_j] * q - 0.5f * mn[want_j])
			bad++;
	}
	is_int(bad, 0, "q4_k: every element uses its sub-block's scale and min");
	near(y[32 * 7 + 3], 0.25 * 33 * (15 - 3) - 0.5 * 1, 0,
	    "q4_k element 227 (high nibble, sub-block 7)");

	/* Q6_K: check the bit positions with one non-zero code at a time. */
	bad = 0;
	for (i = 0; i < 256; i++) {
		int h = i / 128, k = (i % 128) / 32, l = i % 32;

		memset(b, 0, 210);
		for (j = 0; j < 16; j++)
			b[192 + j] = (uint8_t)(int8_t)(j - 8);
		put_f16(b + 208, 0.125f);
		/* all codes 0 except element i, code 0x2d (lo 0xd, hi 2) */
		b[64 * h + l + 32 * (k & 1)] = k < 2 ? 0x0d : 0xd0;
		b[128 + 32 * h + l] = (uint8_t)(2 << (2 * k));
		ref_dequant_row(TT_Q6_K, b, y, 256);
		for (j = 0; j < 256; j++) {
			float want = 0.125f * (float)(int8_t)b[192 + j / 16] *
			    (j == i ? 0x2d - 32 : -32);
			if (y[j] != want)
				bad++;
		}
	}
	is_int(bad, 0, "q6_k: each code's bits and scale land on its element");

	/* F16 and BF16 rows. */
	put_f16(b, 1.5f);
	put_f16(b + 2, -0.25f);
	ref_dequant_row(TT_F16, b, y, 2);
	ok(y[0] == 1.5f && y[1] == -0.25f, "f16 row");
	b[0] = 0x80; b[1] = 0x3f; b[2] = 0x00; b[3] = 0xc0;
	ref_dequant_row(TT_BF16, b, y, 2);
	ok(y[0] == 1.0f && y[1] == -2.0f, "bf16 row");
	is_int(ref_dequant_row(17, b, y, 256), -1, "iq2_xs is not supported");
}

/* RMSNorm, RoPE, SwiGLU, add. */
static void
test_elementwise(void)
{
	float	x[4] = { 1, 2, 3, 4 }, w[4] = { 1, 1, 2, 0.5f }, o[4];
	float	r[8] = { 1, 0, 1, 0, 1, 2, 3, 4 }, g[2] = { 0, 2 }, u[2] = { 3, 5 };
	int32_t	pos[2] = { 0, 1 };
	double	s = 1 / sqrt(7.5 + 1e-5);

	ref_rmsnorm_forward(o, x, w, 1, 4, 1e-5f);
	near(o[0], s, 1e-7, "rmsnorm element 0");
	near(o[2], 6 * s, 1e-6, "rmsnorm element 2 (weight 2)");
	near(o[3], 2 * s, 1e-6, "rmsnorm element 3 (weight 0.5)");

	/* token 0 at pos 0 is unchanged; token 1 at pos 1 turns pair 0 by 1
	 * radian and pair 1 by 1 * 10000^(-2/4) = 0.01 radian. */
	ref_rope_forward(r, pos, 2, 1, 4, 4, 10000.0f);
	ok(r[0] == 1 && r[1] == 0 && r[2] == 1 && r[3] == 0, "rope at pos 0");
	near(r[4], cos(1.0) - 2 * sin(1.0), 1e-6, "rope pair 0 x");
	near(r[5], sin(1.0) + 2 * cos(1.0), 1e-6, "rope pair 0 y");
	near(r[6], 3 * cos(0.01) - 4 * sin(0.01), 1e-6, "rope pair 1 x");
	near(r[7], 3 * sin(0.01) + 4 * cos(0.01), 1e-6, "rope pair 1 y");

	ref_swiglu_forward(o, g, u, 2);
	near(o[0], 0, 0, "swiglu silu(0) = 0");
	near(o[1], 2 / (1 + exp(-2.0)) * 5, 1e-6, "swiglu silu(2) * 5");
	ref_add_forward(o, x, w, 4);
	ok(o[0] == 2 && o[3] == 4.5f, "add");
}

/* Embedding lookup and matmul with small exact weights. */
static void
test_embedding_matmul(void)
{
	float	table[3 * 32], out[2 * 32], x[2 * 32], y[2 * 3];
	int32_t	tok[3] = { 2, 7, 0 };
	uint8_t	q[3 * 34];
	int	i, j;

	for (i = 0; i < 3 * 32; i++)
		table[i] = (float)i;
	ok(ref_embedding_forward(out, table, TT_F32, 32, 3, tok, 2) == 0,
	    "embedding f32");
	ok(out[0] == 64 && out[31] == 95, "embedding row 2");
	ok(out[32] == 0 && out[63] == 0, "embedding of an id past n_vocab is zeros");

	/* W rows: row o is o+1 everywhere (Q8_0, d = 1). */
	for (i = 0; i < 3; i++) {
		put_f16(q + 34 * i, 1.0f);
		for (j = 0; j < 32; j++)
			q[34 * i + 2 + j] = (uint8_t)(i + 1);
	}
	for (i = 0; i < 64; i++)
		x[i] = i < 32 ? 1.0f : 0.5f;
	ok(ref_matmul_forward(y, x, q, TT_Q8_0, 2, 32, 3) == 0, "matmul q8_0");
	ok(y[0] == 32 && y[1] == 64 && y[2] == 96, "matmul token 0");
	ok(y[3] == 16 && y[4] == 32 && y[5] == 48, "matmul token 1");
	is_int(ref_matmul_forward(y, x, q, TT_Q4_K, 2, 32, 3), -1,
	    "matmul rejects rows that are not whole blocks");
}

/* Paged attention: hand-checkable cases. */
static void
test_attention(void)
{
	/* one kv head, head_dim 8; two blocks, the sequence uses block 1 then 0 */
	uint16_t	kc[2 * KV_BLOCK * 8], vc[2 * KV_BLOCK * 8];
	float		q[3 * 2 * 8], out[3 * 2 * 8], k[8], v[8];
	int32_t		bt[2] = { 1, 0 }, slot;
	struct attn_seq	seq = { 0, 3, 18, 0 };
	int		t, d;

	memset(kc, 0, sizeof kc);
	memset(vc, 0, sizeof vc);
	/* token t: k = 0, v = t in every dim; so softmax is uniform */
	for (t = 0; t < 18; t++) {
		slot = bt[t / KV_BLOCK] * KV_BLOCK + t % KV_BLOCK;
		for (d = 0; d < 8; d++) {
			k[d] = 0;
			v[d] = (float)t;
		}
		ref_kv_store_forward(kc, vc, k, v, &slot, 1, 1, 8);
	}
	for (t = 0; t < 3 * 2 * 8; t++)
		q[t] = 1;
	/* the last 3 of 18 tokens are new: positions 15, 16, 17 */
	ref_attention_forward(out, q, kc, vc, bt, 2, &seq, 1, 2, 1, 8, 0.5f);
	near(out[0], 7.5, 1e-6, "uniform weights: token at pos 15 averages 0..15");
	near(out[8 + 7], 7.5, 1e-6, "head 1 shares the kv head");
	near(out[2 * 16 + 3], 8.5, 1e-6, "token at pos 17 averages 0..17");

	/* make key 17 dominate: only the row that sees it follows it */
	slot = bt[17 / KV_BLOCK] * KV_BLOCK + 17 % KV_BLOCK;
	for (d = 0; d < 8; d++) {
		k[d] = 4;
		v[d] = -1;
	}
	ref_kv_store_forward(kc, vc, k, v, &slot, 1, 1, 8);
	ref_attention_forward(out, q, kc, vc, bt, 2, &seq, 1, 2, 1, 8, 0.5f);
	near(out[16], 8.0, 1e-6, "causal: pos 16 does not see key 17");
	near(out[32], (136 - exp(16.0)) / (exp(16.0) + 17), 1e-6,
	    "pos 17 weighs key 17 by e^16");
}

/* Argmax and Gumbel-max sampling. */
static void
test_sample(void)
{
	float		l[2 * 4] = { 1, 3, 3, 2, -5, -1, -2, -9 }, t[2] = { 0, 0 };
	float		p[3] = { 0, 1, 2 }, tt = 1.0f, sc;
	uint64_t	seeds[2] = { 1, 2 }, s;
	int32_t		ids[2];
	int		counts[3] = { 0, 0, 0 }, n = 20000;
	double		z = exp(0.0) + exp(1.0) + exp(2.0);

	ref_argmax_forward(ids, l, 2, 4);
	ok(ids[0] == 1 && ids[1] == 1, "argmax picks the first of equal maxima");
	ref_sample_forward(ids, NULL, l, t, seeds, 2, 4);
	ok(ids[0] == 1 && ids[1] == 1, "temperature 0 samples the argmax");
	for (s = 0; s < (uint64_t)n; s++) {
		ref_sample_forward(ids, &sc, p, &tt, &s, 1, 3);
		counts[ids[0]]++;
	}
	near((double)counts[0] / n, exp(0.0) / z, 0.015, "sampling frequency of logit 0");
	near((double)counts[1] / n, exp(1.0) / z, 0.015, "sampling frequency of logit 1");
	near((double)counts[2] / n, exp(2.0) / z, 0.015, "sampling frequency of logit 2");
}

/*
 * The types added after the first seven: the reference decoder agrees
 * exactly with the CPU kernels' dequantize_row (written separately) on
 * random blocks with sane scales.
 */
static void
test_dequant_more(void)
{
	static const uint32_t types[] = { TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_IQ4_NL,
	    TT_Q2_K, TT_Q3_K, TT_Q5_K, TT_IQ4_XS };
	uint8_t		row[4 * 1024];
	float		a[1024], c[1024];
	size_t		t;

	for (t = 0; t < sizeof types / sizeof types[0]; t++) {
		ktu_fill_row(types[t], row, 1024);
		dequantize_row(types[t], row, c, 1024);
		ok(ref_dequant_row(types[t], row, a, 1024) == 0 &&
		    memcmp(a, c, sizeof a) == 0, "%s: reference dequantization "
		    "equals the CPU one", tensor_type_name(types[t]));
	}
}

int
main(void)
{
	test_convert();
	test_dequant();
	test_dequant_more();
	test_elementwise();
	test_embedding_matmul();
	test_attention();
	test_sample();
	done_testing();
}
