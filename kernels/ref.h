/*
 * ref.h: the plain C reference of every op the CUDA kernels implement.
 *
 * These are written for clarity, not speed: sums run in double, nothing is
 * fused, and every function is a direct reading of the op's definition.
 * The kernel tests compare each CUDA kernel with its function here.  All
 * pointers are host memory; layouts are the same as the kernels' (see
 * cuda_kernels.h and kernel_defs.h).
 */
#ifndef PHASED_KERNELS_REF_H
#define PHASED_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernel_defs.h"

/* IEEE half and bfloat16 conversions (round to nearest even). */
float		ref_f16_to_f32(uint16_t);
uint16_t	ref_f32_to_f16(float);
float		ref_bf16_to_f32(uint16_t);
uint16_t	ref_f32_to_bf16(float);

/*
 * Dequantize n elements of one row of a GGUF type (F32, F16, BF16, Q8_0,
 * Q4_0, Q4_K, Q6_K) into dst; -1 if the type is not one of these or n is
 * not a multiple of its block size.
 */
int	ref_dequant_row(uint32_t type, const void *row, float *dst, int64_t n);

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for n_rows rows of dim. */
void	ref_rmsnorm_forward(float *out, const float *x, const float *weight,
	    int n_rows, int dim, float eps);

/*
 * Rotate x [n_tok][n_heads][head_dim] in place: pair (2i, 2i+1) of each
 * head, 2i < rot_dim, turns by pos[t] * base^(-2i / rot_dim) radians.
 */
void	ref_rope_forward(float *x, const int32_t *pos, int n_tok, int n_heads,
	    int head_dim, int rot_dim, float base);

/* out[i] = silu(gate[i]) * up[i]. */
void	ref_swiglu_forward(float *out, const float *gate, const float *up,
	    size_t n);

/* out[i] = a[i] + b[i]. */
void	ref_add_forward(float *out, const float *a, const float *b, size_t n);

/*
 * out[t] = row tokens[t] of table [n_vocab][dim] of a GGUF type, as F32;
 * an id outside [0, n_vocab) gives a row of zeros.  -1 for a bad type/dim.
 */
int	ref_embedding_forward(float *out, const void *table, uint32_t type,
	    int dim, int n_vocab, const int32_t *tokens, int n_tok);

/*
 * out [n_tok][n_out] = x [n_tok][n_in] times W^T, W being [n_out][n_in]
 * rows of a GGUF type (the GGUF layout of a weight).  -1 for a bad type.
 */
int	ref_matmul_forward(float *out, const float *x, const void *w,
	    uint32_t wtype, int n_tok, int n_in, int n_out);

/*
 * Store k and v [n_tok][n_kv_heads][head_dim] as F16 into the paged caches
 * at slots[t] (slot = block * KV_BLOCK + token_in_block); slot < 0 skips
 * the token.
 */
void	ref_kv_store_forward(uint16_t *k_cache, uint16_t *v_cache,
	    const float *k, const float *v, const int32_t *slots, int n_tok,
	    int n_kv_heads, int head_dim);

/*
 * Causal attention of the batch described by seqs (see struct attn_seq)
 * over the paged F16 caches: out and q are [n_tok][n_heads][head_dim];
 * block_tables is [n_seqs][max_blocks]; query head h reads kv head
 * h / (n_heads / n_kv_heads).  A row with no visible key gets zeros.
 */
void	ref_attention_forward(float *out, const float *q,
	    const uint16_t *k_cache, const uint16_t *v_cache,
	    const int32_t *block_tables, int max_blocks,
	    const struct attn_seq *seqs, int n_seqs, int n_heads,
	    int n_kv_heads, int head_dim, float scale);

/* ids[r] = the index of the largest logit of row r (the lowest on ties). */
void	ref_argmax_forward(int32_t *ids, const float *logits, int n_rows,
	    int n_vocab);

/*
 * Sample each row from softmax(logits / temp[r]) with the Gumbel-max trick:
 * ids[r] = argmax_i(logits[i] / temp[r] - log(-log(u(seeds[r], i)))).  A
 * temperature <= 0 means argmax.  score[r], if not NULL, gets the winning
 * perturbed value (tests use it to accept near ties).
 */
void	ref_sample_forward(int32_t *ids, float *score, const float *logits,
	    const float *temp, const uint64_t *seeds, int n_rows, int n_vocab);

/* The perturbed value ref_sample_forward compares, for one element. */
float	ref_gumbel_score(float logit, float temp, uint64_t seed, int index);

#endif
