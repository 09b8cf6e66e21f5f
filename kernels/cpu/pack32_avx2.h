/*
 * pack32_avx2.h: AVX2 kernels on Q4_1, Q5_0, Q5_1 and IQ4_NL weights
 * repacked at load.
 */
#ifndef PHASED_PACK32_AVX2_H
#define PHASED_PACK32_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/*
 * quant_pack_fn and quant_packed_fn (see quant.h): tiles of up to
 * PACK2_MR rows (two groups of 8, one row per vector lane) by PACK2_NR
 * tokens on activations in ACT_NATURAL, the tile shape of pack_avx2.h;
 * IQ4_NL's tiles take up to PACK32_IQ4_NR tokens.
 */
#define PACK32_IQ4_NR	8

size_t	avx2_q4_1_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q4_1_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_q5_0_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q5_0_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_q5_1_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q5_1_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_iq4_nl_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_iq4_nl_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);

#endif
