/*
 * matmul.cu: the matrix-product dispatcher (struct cuda_blas).
 *
 * GGUF weights are [n_out][n_in] row-major, activations [n_tok][n_in]; in
 * cuBLAS's column-major terms the weight is an n_in x n_out matrix, so
 * out^T (n_out x n_tok) = op_T(W) * x^T, with no copy or transpose of the
 * weights.  F16 and BF16 weights go to cublasGemmEx with F32 accumulation
 * and F32 output; cuBLAS needs both inputs of one type, so F32
 * activations are first rounded to the weight's type (a small copy next
 * to the weights).  F32 weights use SGEMM in full F32: the default math
 * mode, no TF32.
 *
 * Quantized weights take the direct kernel of qmatmul.cu for small
 * batches: it reads the weights once, but its cost grows with every token
 * it carries, so from 3 to 5 tokens (by type, as measured) the detour
 * through F16 and the tensor cores is already cheaper.  Above the limit
 * slices of weight rows are dequantized to F16 into scratch space and
 * multiplied with cublasGemmEx; a slice is at most DEQ_SLICE_BYTES of F16
 * so scratch stays bounded even for a 128k-row output head.
 */
#include "config.h"

#include <cublas_v2.h>

#include "cuda_device.h"
extern "C" {
#include "util.h"
}

#define DEQ_SLICE_BYTES	((size_t)64 << 20)

struct cuda_blas {
	cublasHandle_t	 handle;
	cudaStream_t	 stream;
	void		*scratch;
	size_t		 scratch_bytes;
	int		 qmv_max_batch;	/* CUDA_QMV_MAX_BATCH_AUTO: by type */
};

/* Create the cuBLAS handle bound to a stream. */
extern "C" int
cuda_blas_create(struct cuda_blas **out, cuda_stream_t stream)
{
	struct cuda_blas	*b;
	cublasStatus_t		 st;

	*out = NULL;
	b = (struct cuda_blas *)xcalloc(1, sizeof *b);
	if ((st = cublasCreate(&b->handle)) != CUBLAS_STATUS_SUCCESS) {
		free(b);
		return CUDA_KERNELS_EBLAS + (int)st;
	}
	if ((st = cublasSetStream(b->handle, stream)) != CUBLAS_STATUS_SUCCESS) {
		cublasDestroy(b->handle);
		free(b);
		return CUDA_KERNELS_EBLAS + (int)st;
	}
	b->stream = stream;
	b->qmv_max_batch = CUDA_QMV_MAX_BATCH_AUTO;
	*out = b;
	return 0;
}

/* Free the handle and the scratch space. */
extern "C" void
cuda_blas_destroy(struct cuda_blas *b)
{
	if (b == NULL)
		return;
	cudaFree(b->scratch);
	cublasDestroy(b->handle);
	free(b);
}

/* Set the largest batch sent to the quantized small-batch kernel. */
extern "C" void
cuda_blas_set_qmv_max_batch(struct cuda_blas *b, int n)
{
	b->qmv_max_batch = n < 0 ? CUDA_QMV_MAX_BATCH_AUTO : n;
}

/* The largest batch the small-batch kernel takes for a weight type. */
static int
qmv_limit(const struct cuda_blas *b, uint32_t t)
{
	if (b->qmv_max_batch != CUDA_QMV_MAX_BATCH_AUTO)
		return b->qmv_max_batch;
	/*
	 * Where the direct kernel stopped winning on Llama-3-8B shapes
	 * (bench-kernels --crossover on an H200): the K types decode the
	 * most per element, so each extra token costs them the most.
	 */
	switch (t) {
	case TT_Q3_K:
	case TT_Q4_K:
	case TT_Q5_K:
		return 2;
	case TT_Q8_0:
	case TT_Q4_0:
	case TT_Q4_1:
		return 3;
	default:
		return 4;
	}
}

/* Bytes of scratch space currently held. */
extern "C" size_t
cuda_blas_scratch_bytes(const struct cuda_blas *b)
{
	return b->scratch_bytes;
}

/*
 * Make the scratch space at least bytes long.  Growing waits for the
 * stream (the old space may still be in use) and happens only while the
 * shapes seen so far grow, i.e. in the first iterations.
 */
static int
scratch_reserve(struct cuda_blas *b, size_t bytes)
{
	cudaError_t	e;

	bytes = (bytes + 255) & ~(size_t)255;
	if (bytes <= b->scratch_bytes)
		return 0;
	if ((e = cudaStreamSynchronize(b->stream)) != cudaSuccess)
		return (int)e;
	cudaFree(b->scratch);
	b->scratch = NULL;
	b->scratch_bytes = 0;
	if ((e = cudaMalloc(&b->scratch, bytes)) != cudaSuccess) {
		b->scratch = NULL;
		return (int)e;
	}
	b->scratch_bytes = bytes;
	return 0;
}

/* The cudaDataType of F16/BF16 GGUF types. */
static cudaDataType_t
cu_type(uint32_t t)
{
	return t == TT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* out^T = op_T(A) x^T with A rows of type t, via cublasGemmEx. */
static int
gemm_ex(struct cuda_blas *b, float *out, int ldo, const void *a, const void *x,
    uint32_t t, int n_tok, int n_in, int rows)
{
	const float	one = 1.0f, zero = 0.0f;
	cublasStatus_t	st;

	st = cublasGemmEx(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, rows, n_tok,
	    n_in, &one, a, cu_type(t), n_in, x, cu_type(t), n_in, &zero, out,
	    CUDA_R_32F, ldo, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return st == CUBLAS_STATUS_SUCCESS ? 0 : CUDA_KERNELS_EBLAS + (int)st;
}

/* Multiply activations by the transpose of a GGUF weight. */
extern "C" int
cuda_matmul_forward(struct cuda_blas *b, float *out, const void *x,
    uint32_t x_type, const void *w, uint32_t w_type, int n_tok, int n_in,
    int n_out)
{
	const struct tensor_type_info	*ti = tensor_type_get(w_type);
	const float			 one = 1.0f, zero = 0.0f;
	size_t				 n_x, slice, act_bytes;
	const void			*xc = x;
	uint16_t			*deq;
	cublasStatus_t			 st;
	int				 r, rows, e;

	if (ti == NULL || (x_type != CUDA_ACT_F32 && x_type != CUDA_ACT_BF16) ||
	    n_tok < 0 || n_in <= 0 || n_out < 0 ||
	    tensor_row_bytes(ti, n_in) == 0)
		return (int)cudaErrorInvalidValue;
	if (n_tok == 0 || n_out == 0)
		return 0;
	n_x = (size_t)n_tok * n_in;

	if (w_type == TT_F32) {
		if (x_type != TT_F32) {
			if ((e = scratch_reserve(b, n_x * 4)) != 0 ||
			    (e = cuda_convert_forward(b->scratch, TT_F32, x,
			    x_type, n_x, b->stream)) != 0)
				return e;
			xc = b->scratch;
		}
		st = cublasSgemm(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, n_out,
		    n_tok, n_in, &one, (const float *)w, n_in,
		    (const float *)xc, n_in, &zero, out, n_out);
		return st == CUBLAS_STATUS_SUCCESS ? 0 :
		    CUDA_KERNELS_EBLAS + (int)st;
	}

	if (w_type == TT_F16 || w_type == TT_BF16) {
		if (x_type != w_type) {
			if ((e = scratch_reserve(b, n_x * 2)) != 0 ||
			    (e = cuda_convert_forward(b->scratch, w_type, x,
			    x_type, n_x, b->stream)) != 0)
				return e;
			xc = b->scratch;
		}
		return gemm_ex(b, out, n_out, w, xc, w_type, n_tok, n_in, n_out);
	}

	/* Quantized, small batch: read the blocks directly. */
	if (n_tok <= qmv_limit(b, w_type)) {
		if (x_type != TT_F32) {
			if ((e = scratch_reserve(b, n_x * 4)) != 0 ||
			    (e = cuda_convert_forward(b->scratch, TT_F32, x,
			    x_type, n_x, b->stream)) != 0)
				return e;
			xc = b->scratch;
		}
		return cuda_qmatmul_forward(out, (const float *)xc, w, w_type,
		    n_tok, n_in, n_out, b->stream);
	}

	/* Quantized, large batch: F16 activations, F16 weight slices. */
	slice = DEQ_SLICE_BYTES / ((size_t)n_in * 2);
	if (slice < 64)
		slice = 64;
	if (slice > (size_t)n_out)
		slice = (size_t)n_out;
	act_bytes = (n_x * 2 + 255) & ~(size_t)255;
	if ((e = scratch_reserve(b, act_bytes + slice * n_in * 2)) != 0)
		return e;
	if ((e = cuda_convert_forward(b->scratch, TT_F16, x, x_type, n_x,
	    b->stream)) != 0)
		return e;
	deq = (uint16_t *)((uint8_t *)b->scratch + act_bytes);
	for (r = 0; r < n_out; r += rows) {
		rows = n_out - r < (int)slice ? n_out - r : (int)slice;
		if ((e = cuda_dequant_f16_forward(deq, w, w_type, n_in, r, rows,
		    b->stream)) != 0)
			return e;
		if ((e = gemm_ex(b, out + r, n_out, deq, b->scratch, TT_F16,
		    n_tok, n_in, rows)) != 0)
			return e;
	}
	return 0;
}
