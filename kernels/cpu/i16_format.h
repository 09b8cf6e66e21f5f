/*
 * i16_format.h: the numbers and packed layout of F16 and BF16 weights on
 * 16-bit integer products, which f16_i16_avx512.c and f16_i16_avx2.c share
 * so that both give the same bits (see the top of f16_i16_avx512.c).
 */
#ifndef PHASED_I16_FORMAT_H
#define PHASED_I16_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "tensor_type.h"

#define IG	16	/* rows per packed group */
#define IB	32	/* columns per block */
#define ISB	4	/* blocks per super-block */
#define ISB_BYTES (64 + ISB * 1024)
#define QMAX	8191	/* largest activation code */

/*
 * The formats' fields: F16 has a 10-bit fraction under a 5-bit exponent
 * (bias 15), BF16 a 7-bit one under 8 bits (bias 127).  The codes of a
 * block's largest binade hold its significand shifted left by SHIFT: 11
 * bits by 2, 8 by 5, at most 8188 either way.  The block's scale is
 * 2^(eref - FRAC - SHIFT - bias), eref being its largest exponent, at
 * least EREF_MIN: its f32 exponent field is eref + SBIAS.  EREF_MIN keeps
 * a BF16 block's scale, 2^(eref - 139), a normal float (exponent field
 * eref - 12 >= 1); any F16 one is.
 */
#define FRAC(ty)	((ty) == TT_F16 ? 10 : 7)
#define EMASK(ty)	((ty) == TT_F16 ? 31 : 255)
#define SHIFT(ty)	((ty) == TT_F16 ? 2 : 5)
#define SBIAS(ty)	((ty) == TT_F16 ? 100 : -12)
#define EREF_MIN(ty)	((ty) == TT_F16 ? 1 : 13)

/* Blocks of a row of cols columns. */
static inline int64_t
nblocks(int64_t cols)
{
	return ((cols + IB - 1) / IB);
}

/* Bytes of one packed group. */
static inline size_t
group_bytes(int64_t cols)
{
	return ((size_t)((nblocks(cols) + ISB - 1) / ISB) * ISB_BYTES);
}

#endif
