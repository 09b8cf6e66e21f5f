/* kernel-testutil.h: random weight rows of every type for the kernel tests. */
#ifndef PHASED_KERNEL_TESTUTIL_H
#define PHASED_KERNEL_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "quant.h"
#include "tensor_type.h"

static uint64_t ktu_state = 0x9e3779b97f4a7c15ULL;

/* xorshift64* */
static inline uint64_t
ktu_rand(void)
{
	ktu_state ^= ktu_state >> 12;
	ktu_state ^= ktu_state << 25;
	ktu_state ^= ktu_state >> 27;
	return (ktu_state * 0x2545f4914f6cdd1dULL);
}

/* Uniform in [-1, 1). */
static inline float
ktu_uniform(void)
{
	return ((float)((ktu_rand() >> 40) / (double)(1 << 24)) * 2.0f - 1.0f);
}

/* Fill n elements of a row of a type with random but sane contents. */
static inline void
ktu_fill_row(uint32_t type, uint8_t *p, int64_t n)
{
	const struct tensor_type_info *ti = tensor_type_get(type);
	int64_t	i, nbytes = n / ti->block_elems * ti->block_bytes;
	uint16_t h;
	float f;

	for (i = 0; i < nbytes; i++)
		p[i] = (uint8_t)ktu_rand();
	switch (type) {
	case TT_F32:
		for (i = 0; i < n; i++) {
			f = ktu_uniform();
			memcpy(p + 4 * i, &f, 4);
		}
		break;
	case TT_F16:
		for (i = 0; i < n; i++) {
			h = f32_to_fp16(ktu_uniform());
			memcpy(p + 2 * i, &h, 2);
		}
		break;
	case TT_BF16:
		for (i = 0; i < n; i++) {
			h = f32_to_bf16(ktu_uniform());
			memcpy(p + 2 * i, &h, 2);
		}
		break;
	case TT_Q8_0:
	case TT_Q4_0:
		for (i = 0; i < n / 32; i++) {
			h = f32_to_fp16(0.001f + 0.02f * (ktu_uniform() + 1));
			memcpy(p + i * ti->block_bytes, &h, 2);
		}
		break;
	case TT_Q4_K:
		for (i = 0; i < n / 256; i++) {
			h = f32_to_fp16(0.0005f + 0.002f * (ktu_uniform() + 1));
			memcpy(p + 144 * i, &h, 2);
			h = f32_to_fp16(0.0005f + 0.002f * (ktu_uniform() + 1));
			memcpy(p + 144 * i + 2, &h, 2);
		}
		break;
	case TT_Q6_K:
		for (i = 0; i < n / 256; i++) {
			h = f32_to_fp16(0.0001f + 0.0005f * (ktu_uniform() + 1));
			memcpy(p + 210 * i + 208, &h, 2);
		}
		break;
	case TT_Q4_1:
	case TT_Q5_0:
	case TT_Q5_1:
	case TT_IQ4_NL:
		/* Scale at byte 0; Q4_1 and Q5_1 have a signed min at byte 2. */
		for (i = 0; i < n / 32; i++) {
			h = f32_to_fp16(0.001f + 0.01f * (ktu_uniform() + 1));
			if (type == TT_IQ4_NL)
				h = f32_to_fp16(0.0001f + 0.0005f * (ktu_uniform() + 1));
			memcpy(p + i * ti->block_bytes, &h, 2);
			if (type == TT_Q4_1 || type == TT_Q5_1) {
				h = f32_to_fp16(0.1f * ktu_uniform());
				memcpy(p + i * ti->block_bytes + 2, &h, 2);
			}
		}
		break;
	case TT_Q2_K:
	case TT_Q5_K:
		/* d and dmin: at 80 and 82 (Q2_K), at 0 and 2 (Q5_K). */
		for (i = 0; i < n / 256; i++) {
			size_t o = i * ti->block_bytes + (type == TT_Q2_K ? 80 : 0);
			h = f32_to_fp16(0.0005f + 0.002f * (ktu_uniform() + 1));
			memcpy(p + o, &h, 2);
			h = f32_to_fp16(0.0005f + 0.002f * (ktu_uniform() + 1));
			memcpy(p + o + 2, &h, 2);
		}
		break;
	case TT_Q3_K:
	case TT_IQ4_XS:
		for (i = 0; i < n / 256; i++) {
			h = f32_to_fp16(0.0001f + 0.0005f * (ktu_uniform() + 1));
			memcpy(p + i * ti->block_bytes + (type == TT_Q3_K ? 108 : 0), &h, 2);
		}
		break;
	}
}

static const uint32_t ktu_types[] = {
	TT_F32, TT_F16, TT_BF16, TT_Q8_0, TT_Q4_0, TT_Q4_K, TT_Q6_K,
	TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_Q2_K, TT_Q3_K, TT_Q5_K, TT_IQ4_NL, TT_IQ4_XS
};
#define KTU_NTYPES	(sizeof ktu_types / sizeof ktu_types[0])

/*
 * Parse a comma-separated list of type names (any case) into types, at
 * most max of them; the count, or -1 after naming an unknown type on
 * stderr.
 */
static inline int
ktu_parse_types(const char *list, uint32_t *types, int max)
{
	char	*copy = strdup(list), *str = copy, *tok;
	int	 n = 0, k;

	while (copy != NULL && (tok = strsep(&str, ",")) != NULL && n < max) {
		for (k = 0; k < TT_GGUF_MAX; k++)
			if (tensor_type_get(k) != NULL &&
			    strcasecmp(tensor_type_name(k), tok) == 0)
				break;
		if (k == TT_GGUF_MAX) {
			fprintf(stderr, "unknown type %s\n", tok);
			free(copy);
			return (-1);
		}
		types[n++] = k;
	}
	free(copy);
	return (n);
}

#endif
