/*
 * kernel_defs.h: definitions the CUDA kernels and their C reference share:
 * the paged KV layout, the per-sequence attention descriptor and the
 * counter-based random numbers used by on-device sampling.
 *
 * This header is plain C and also compiles as CUDA (the random functions
 * are then usable on both host and device), so the reference and the
 * kernels cannot drift apart on these.
 */
#ifndef PHASED_KERNEL_DEFS_H
#define PHASED_KERNEL_DEFS_H

#include <stdint.h>

#ifdef __CUDACC__
#define KDEFS_HD	__host__ __device__ __forceinline__
#else
#define KDEFS_HD	static inline
#endif

/*
 * Tokens per KV block.  K and V of one layer are stored as
 * [block][token_in_block][kv_head][head_dim] in F16, so token t of a
 * sequence lives at slot block_table[t / KV_BLOCK] * KV_BLOCK + t % KV_BLOCK
 * and its vector for kv head h starts at ((slot * n_kv_heads) + h) * head_dim.
 */
#define KV_BLOCK	16

/* Largest head_dim the attention kernels support (a multiple of 8). */
#define ATTN_MAX_HEAD_DIM	256

/*
 * One sequence of an attention batch.  Its q_len new tokens are rows
 * q_start .. q_start + q_len - 1 of the Q and output arrays; their keys and
 * values are already stored in the cache, which holds ctx_len tokens in all
 * (so the new tokens are at positions ctx_len - q_len .. ctx_len - 1).
 * Prefill is q_len == ctx_len, a chunk of a prefill is q_len < ctx_len and
 * decode is q_len == 1.  Attention is causal.
 */
struct attn_seq {
	int32_t	q_start;
	int32_t	q_len;
	int32_t	ctx_len;
	int32_t	reserved;	/* keeps the struct 16 bytes; set to 0 */
};

/* Mix 64 bits (the splitmix64 finalizer). */
KDEFS_HD uint64_t
kdefs_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (x);
}

/*
 * A uniform float in (0, 1) that depends only on (seed, index): sampling
 * with it is reproducible and identical on the host and the device.
 */
KDEFS_HD float
kdefs_uniform(uint64_t seed, uint64_t index)
{
	uint64_t	x;

	x = kdefs_mix64(seed ^ kdefs_mix64(index + 0x9e3779b97f4a7c15ULL));
	return (((float)(x >> 40) + 0.5f) * (1.0f / 16777216.0f));
}

#endif
