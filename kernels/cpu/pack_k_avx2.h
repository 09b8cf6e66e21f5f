/* pack_k_avx2.h: AVX2 kernels on Q2_K, Q3_K, Q5_K and IQ4_XS weights repacked at load. */
#ifndef PHASED_PACK_K_AVX2_H
#define PHASED_PACK_K_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/*
 * quant_pack_fn and quant_packed_fn of each type (see quant.h): tiles of
 * rows in groups of 8 (one row per vector lane) by up to PACK_K2_NR
 * tokens.  Q2_K and Q3_K read activations in ACT_PAIR16 and lay them out
 * once per tile for all its rows, so their tiles are PACK_K2_MR rows high,
 * for a decode step too (laid out again every 16 rows, they cost one-token
 * Q3_K matrices up to an eighth of their time);
 * Q5_K and IQ4_XS read ACT_NATURAL and gain nothing from tiles higher
 * than pack_avx2.h's PACK2_MR (finer work items for the threads).  Any
 * multiple of 16 rows up to PACK_K2_MR works for all four.
 */
#define PACK_K2_MR	64
#define PACK_K2_NR	4
/*
 * Q2_K and Q3_K tiles lay their tokens' activations out on the stack:
 * wider matrices (none of a known model) keep the mapped rows (pmax_cols).
 */
#define PACK_K2_MAX_COLS	32768

size_t	avx2_q2_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q2_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_q3_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q3_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_q5_k_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_q5_k_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);
size_t	avx2_iq4_xs_pack(const uint8_t *, size_t, int64_t, int64_t, uint8_t *);
void	avx2_iq4_xs_packed(const uint8_t *, int64_t, int64_t, int, const struct qact *,
	    int, int, float *, int64_t);

#endif
