/* tensor_type.h: the GGUF tensor types phased knows and their block layouts. */
#ifndef PHASED_TENSOR_TYPE_H
#define PHASED_TENSOR_TYPE_H

#include <stddef.h>
#include <stdint.h>

/* Values are the GGUF on-disk type numbers. */
enum tensor_type {
	TT_F32 = 0,
	TT_F16 = 1,
	TT_Q4_0 = 2,
	TT_Q4_1 = 3,
	TT_Q5_0 = 6,
	TT_Q5_1 = 7,
	TT_Q8_0 = 8,
	TT_Q2_K = 10,
	TT_Q3_K = 11,
	TT_Q4_K = 12,
	TT_Q5_K = 13,
	TT_Q6_K = 14,
	TT_IQ4_NL = 20,
	TT_IQ4_XS = 23,
	TT_BF16 = 30,
};

/* The highest type number GGUF defines; anything above is out of range. */
#define TT_GGUF_MAX	40

struct tensor_type_info {
	const char	*name;		/* "Q4_K" */
	uint32_t	 block_elems;	/* elements per block */
	uint32_t	 block_bytes;	/* bytes per block */
};

/*
 * Return the layout of a supported type, or NULL for a type phased cannot
 * compute with (the caller names the tensor in its "unsupported tensor
 * type" error).  tensor_type_name() also names known-but-unsupported GGUF
 * types ("IQ2_XS") and returns NULL for numbers GGUF does not define.
 */
const struct tensor_type_info	*tensor_type_get(uint32_t type);
const char			*tensor_type_name(uint32_t type);

/*
 * Bytes for a row of n elements of a supported type; 0 when n is not a
 * multiple of the block size.
 */
static inline uint64_t
tensor_row_bytes(const struct tensor_type_info *ti, uint64_t n)
{
	if (n % ti->block_elems != 0)
		return (0);
	return (n / ti->block_elems * ti->block_bytes);
}

#endif
