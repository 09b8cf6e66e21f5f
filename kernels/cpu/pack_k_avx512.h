/* pack_k_avx512.h: AVX-512 kernels on Q2_K, Q3_K, Q5_K and IQ4_XS weights repacked at load. */
#ifndef PHASED_PACK_K_AVX512_H
#define PHASED_PACK_K_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/*
 * quant_pack_fn and quant_packed_fn of each type (see quant.h): tiles of
 * up to PACK_K_MR rows (two groups of 16) by PACK_K_NR tokens.  Q2_K and
 * Q3_K read activations in ACT_BLOCK16, Q5_K and IQ4_XS in ACT_BLOCK.
 */
#define PACK_K_MR	32
#define PACK_K_NR	6

/*
 * Bytes ahead that a one-token tile (decode) prefetches its group's
 * stream of repacked weights.  A single token does so little work per
 * byte that the stream is bound by memory latency; fetching 8 KB ahead
 * rather than one block ahead keeps more lines in flight (about 1.3x the
 * single-thread matrix rate for Q4_0 and Q8_0 on a 2-core AVX-512 machine,
 * less for the K-quants).
 */
#ifndef PF_DECODE
#define PF_DECODE	8192
#endif

size_t	avx512_q2_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx512_q2_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx512_q3_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx512_q3_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx512_q5_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx512_q5_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx512_iq4_xs_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx512_iq4_xs_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);

#endif
