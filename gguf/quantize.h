/* quantize.h: f32 rows to the GGUF block formats (round to nearest per block). */
#ifndef PHASED_QUANTIZE_H
#define PHASED_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Encode n elements of src (a multiple of the type's block size) as a row
 * of the given tensor type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) in the standard GGUF layout.
 * The quantizers use no importance matrix.  Returns the bytes written to dst, or 0 when the
 * type is not one of those or n is not a whole number of blocks.
 * Thread-safe: it keeps no state.
 */
size_t	quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
