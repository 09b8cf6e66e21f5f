/* float_avx2.h: AVX2 kernels on F16 and BF16 weights repacked at load. */
#ifndef PHASED_FLOAT_AVX2_H
#define PHASED_FLOAT_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/*
 * quant_pack_fn and quant_packed_fn (see quant.h): rows in blocks of 16
 * (two groups of 8, one row per vector lane), tiles of up to FLOAT2_MR
 * rows (four blocks share each chunk of activations while it is in L1) by
 * FLOAT2_NR tokens, on activations in ACT_F32X filled by
 * avx2_act_fill_f32x.
 */
#define FLOAT2_MR	64
#define FLOAT2_NR	ACT_F32X_TOK

size_t	avx2_f16_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_f16_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_bf16_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_bf16_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
/* Interleave the f32 activations of tokens [t0, t1) (ACT_F32X). */
void	avx2_act_fill_f32x(struct qact *, uint32_t, int, int);

#endif
