/* pack_avx2.h: AVX2 kernels on Q4_0, Q8_0, Q4_K and Q6_K weights repacked at load. */
#ifndef PHASED_PACK_AVX2_H
#define PHASED_PACK_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/*
 * quant_pack_fn and quant_packed_fn (see quant.h): tiles of up to
 * PACK2_MR rows (two groups of 8, one row per vector lane) by PACK2_NR
 * tokens, on activations in ACT_NATURAL.
 */
#define PACK2_MR	16
#define PACK2_NR	4

/*
 * Bytes ahead of a single token's weight streams that the AVX2 kernels
 * prefetch: the hardware prefetcher alone leaves the loads waiting on
 * memory (decode about 1.3x faster on a 2-core Zen 2).  24 KB, two or
 * three packed row groups ahead, decoded 5-16% faster than 8 KB on a
 * 2-core Zen 3 whose memory read 35-47 GB/s.
 */
#define AVX2_PF_DECODE	24576

/* quant_act_fill for the element-order layouts (quant_avx2.c). */
void	avx2_act_fill(struct qact *, uint32_t, int, int);

size_t	avx2_q4_0_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q4_0_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_q8_0_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q8_0_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_q4_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q4_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
/* Q6_K reads ACT_PAIR16 activations. */
size_t	avx2_q6_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q6_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);

#endif
