/*
 * cuda_kernels.h: the C interface of phased's CUDA kernels.
 *
 * Every op has a host launcher named cuda_<op>_forward that enqueues its
 * work on the given stream (NULL: the default stream) and returns 0, a
 * cudaError_t value, or CUDA_KERNELS_EBLAS + a cublasStatus_t value;
 * cuda_kernels_strerror() names either.  Launchers never synchronize
 * unless they say so.  Pointers are device memory unless a comment says
 * otherwise.  The plain C reference of each op is in ref.h, with the same
 * layouts.
 *
 * This header needs no CUDA header: streams are passed as the runtime's
 * opaque struct pointer, which is what cudaStream_t is.
 */
#ifndef PHASED_CUDA_KERNELS_H
#define PHASED_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernel_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st	*cuda_stream_t;

/* Added to a cublasStatus_t so it cannot be taken for a cudaError_t. */
#define CUDA_KERNELS_EBLAS	10000

/* Name an error code returned by a launcher. */
const char	*cuda_kernels_strerror(int);

/* Number of usable CUDA devices; 0 when there is none or no driver. */
int		 cuda_device_count(void);

/*
 * Fill a buffer with n_elems reproducible random elements of a GGUF type
 * (F32, F16, BF16: uniform in [-scale, scale]; quantized types: random
 * codes with block scales chosen so values stay within about scale).  For
 * tests and benchmarks.  n_elems must be a multiple of the block size.
 */
int	cuda_fill_random(void *dst, uint32_t type, size_t n_elems, float scale,
	    uint64_t seed, cuda_stream_t);

/* Element-wise and normalization ops (F32 unless said otherwise). */

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight; out may be x. */
int	cuda_rmsnorm_forward(float *out, const float *x, const float *weight,
	    int n_rows, int dim, float eps, cuda_stream_t);

/*
 * RoPE in place on x [n_tok][n_heads][head_dim]: adjacent pairs
 * (x[2i], x[2i+1]), 2i < rot_dim, rotate by pos[t] * base^(-2i / rot_dim)
 * (the GGUF llama convention).  pos is a device array of n_tok positions.
 */
int	cuda_rope_forward(float *x, const int32_t *pos, int n_tok, int n_heads,
	    int head_dim, int rot_dim, float base, cuda_stream_t);

/* out[i] = silu(gate[i]) * up[i]; out may be gate or up. */
int	cuda_swiglu_forward(float *out, const float *gate, const float *up,
	    size_t n, cuda_stream_t);

/* out[i] = a[i] + b[i] (the residual connection); out may be a or b. */
int	cuda_add_forward(float *out, const float *a, const float *b, size_t n,
	    cuda_stream_t);

/*
 * Convert n elements between F32, F16 and BF16 (GGUF type numbers 0, 1,
 * 30), rounding to nearest even.
 */
int	cuda_convert_forward(void *dst, uint32_t dst_type, const void *src,
	    uint32_t src_type, size_t n, cuda_stream_t);

/*
 * out [n_tok][dim] F32 = rows tokens[t] of table [n_vocab][dim] of type
 * F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K.  An id outside [0, n_vocab)
 * gives zeros (the caller validates ids; a kernel cannot report them).
 */
int	cuda_embedding_forward(float *out, const void *table, uint32_t type,
	    int dim, int n_vocab, const int32_t *tokens, int n_tok,
	    cuda_stream_t);

/*
 * Store k and v [n_tok][n_kv_heads][head_dim] F32 as F16 into the paged
 * caches (see kernel_defs.h) at slots[t]; a negative slot skips the token.
 */
int	cuda_kv_store_forward(uint16_t *k_cache, uint16_t *v_cache,
	    const float *k, const float *v, const int32_t *slots, int n_tok,
	    int n_kv_heads, int head_dim, cuda_stream_t);

/*
 * Matrix products.  A weight is [n_out][n_in] in its GGUF layout (rows of
 * n_in elements, F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K) and
 * out [n_tok][n_out] F32 = x [n_tok][n_in] times its transpose.
 *
 *	F32 weights	cuBLAS SGEMM in full F32 (no TF32).
 *	F16, BF16	cublasGemmEx, F32 accumulation; F32 activations are
 *			first rounded to the weight's type in scratch space.
 *	quantized	n_tok <= the small-batch limit: a kernel reading the
 *			GGUF blocks directly (memory-bound matrix-vector work);
 *			above it: dequantize slices of rows to F16 in scratch
 *			and multiply them with cublasGemmEx (prefill is
 *			compute-bound, the dequantization is amortized).
 *
 * A struct cuda_blas holds the cuBLAS handle, the stream and the scratch
 * space; use one per stream, from one thread at a time.
 */
struct cuda_blas;

/* Activation types cuda_matmul_forward accepts (GGUF numbers). */
#define CUDA_ACT_F32	0
#define CUDA_ACT_BF16	30

/*
 * cuda_blas_set_qmv_max_batch's value for the per-type limits (qmv_limit
 * in matmul.cu): the largest batch at which the direct kernel beat
 * dequantize + cuBLAS on an H200 (tests/gpu/bench-kernels --crossover).
 */
#define CUDA_QMV_MAX_BATCH_AUTO	(-1)

int	cuda_blas_create(struct cuda_blas **, cuda_stream_t);
void	cuda_blas_destroy(struct cuda_blas *);
/* Set the largest n_tok of the quantized small-batch path for every type
 * (0: never use it; CUDA_QMV_MAX_BATCH_AUTO: each type's measured limit). */
void	cuda_blas_set_qmv_max_batch(struct cuda_blas *, int);
/* Bytes of scratch space currently held. */
size_t	cuda_blas_scratch_bytes(const struct cuda_blas *);

int	cuda_matmul_forward(struct cuda_blas *, float *out, const void *x,
	    uint32_t x_type, const void *w, uint32_t w_type, int n_tok,
	    int n_in, int n_out);

/*
 * The quantized small-batch kernel alone: out [n_tok][n_out] = x W^T with
 * any weight type above and F32 x, n_tok any (passes of 8 tokens).
 */
int	cuda_qmatmul_forward(float *out, const float *x, const void *w,
	    uint32_t w_type, int n_tok, int n_in, int n_out, cuda_stream_t);

/*
 * Dequantize rows [row0, row0 + n_rows) of a weight with rows of n_in
 * elements into dst [n_rows][n_in] F16.
 */
int	cuda_dequant_f16_forward(uint16_t *dst, const void *w, uint32_t w_type,
	    int n_in, int row0, int n_rows, cuda_stream_t);

/*
 * Paged causal attention for a mixed batch of sequences (prefill, chunked
 * prefill and decode together; see struct attn_seq).  Works FlashAttention
 * style: keys and values stream through shared memory 32 tokens at a time
 * with an online softmax, so no attention matrix is ever stored.  One
 * thread block serves up to 16 query rows (token, head) of one sequence
 * that share a kv head, so grouped-query heads read each K/V tile once.
 * When the batch has too few rows to fill the device (decode of few, long
 * sequences) the context is split into slices of split_len tokens whose
 * partial results a second kernel combines; that needs workspace.
 */
struct cuda_attention_args {
	float			*out;		/* [n_tok][n_heads][head_dim] */
	const float		*q;		/* [n_tok][n_heads][head_dim] */
	const uint16_t		*k_cache;	/* F16, kernel_defs.h layout */
	const uint16_t		*v_cache;
	const int32_t		*block_tables;	/* [n_seqs][max_blocks] */
	const struct attn_seq	*seqs;		/* [n_seqs] */
	int			 n_seqs;
	int			 n_tok;		/* rows of q and out */
	int			 max_blocks;
	int			 n_heads;
	int			 n_kv_heads;	/* divides n_heads */
	int			 head_dim;	/* multiple of 8, <= 256 */
	int			 max_q_len;	/* >= every seqs[].q_len */
	int			 max_ctx_len;	/* >= every seqs[].ctx_len */
	float			 scale;		/* usually 1 / sqrt(head_dim) */
	void			*workspace;	/* may be NULL: no split */
	size_t			 workspace_bytes;
	int			 split_len;	/* 0: choose; < 0: never split;
						   else a multiple of 32 */
};

/*
 * Workspace bytes for splitting a batch of n_tok rows into n_splits.
 * Automatic splitting (split_len 0) uses at most max_ctx_len / 256 slices
 * and quietly does without when the workspace is smaller than it needs.
 */
size_t	cuda_attention_workspace_size(int n_tok, int n_heads, int head_dim,
	    int n_splits);

int	cuda_attention_forward(const struct cuda_attention_args *,
	    cuda_stream_t);

/*
 * Token choice.  ids[r] = argmax of row r of logits [n_rows][n_vocab]
 * (the lowest index on ties), for greedy decoding.
 */
int	cuda_argmax_forward(int32_t *ids, const float *logits, int n_rows,
	    int n_vocab, cuda_stream_t);

/*
 * Sample each row from softmax(logits / temp[r]) on the device with the
 * Gumbel-max trick: one pass, no sort, no copy of the logits; the noise
 * comes from kdefs_uniform(seeds[r], i) so a run is reproducible and
 * equals ref_sample_forward.  temp[r] <= 0 means argmax.  temp and seeds
 * are device arrays.  Top-k and top-p need the sorted head of the
 * distribution: the engine applies them on the host to the rows that ask
 * for them (copying those rows' logits); plain and greedy sampling, the
 * common case, never leave the device.
 */
int	cuda_sample_forward(int32_t *ids, const float *logits, const float *temp,
	    const uint64_t *seeds, int n_rows, int n_vocab, cuda_stream_t);

#ifdef __cplusplus
}
#endif

#endif
