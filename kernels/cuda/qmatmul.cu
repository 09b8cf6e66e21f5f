/*
 * qmatmul.cu: products with weights read straight from their GGUF blocks,
 * and dequantization of weight rows to F16 for cuBLAS.
 *
 * The small-batch product (decode: 1 to a few tokens per step) is
 * memory-bound: all that matters is streaming the weight bytes once at full
 * bandwidth.  Each warp owns one output row and walks it in chunks of 8
 * elements, lane i taking chunks i, i+32, ...; consecutive lanes thus read
 * consecutive bytes of the row (a whole number of blocks per warp step),
 * so loads coalesce whatever the block size.  Up to 8 tokens share one pass
 * over the weights, each chunk being dequantized once and multiplied into
 * every token's accumulator; larger batches take several passes (the
 * matmul dispatcher sends big batches to dequantize + cuBLAS instead).
 * Activations are F32 and stay in L1/L2: they are tiny next to the weights.
 */
#include "config.h"

#include "cuda_device.h"

#define QMV_WARPS	4	/* rows (warps) per thread block */
#define QMV_TOK		8	/* tokens per pass over the weights */

/* out[t][row] = dot(W[row], x[t]) for nt <= NB tokens; one warp per row. */
template <uint32_t T, int NB>
static __global__ void __launch_bounds__(QMV_WARPS * 32)
qmv_kernel(float *out, const uint8_t *w, size_t row_bytes, const float *x,
    int n_in, int n_out, int nt)
{
	int		 row = blockIdx.x * QMV_WARPS + threadIdx.y;
	int		 lane = threadIdx.x, n_chunks = n_in / 8, c, b;
	const uint8_t	*wr;
	float		 acc[NB], v[8];

	if (row >= n_out)
		return;
	wr = w + (size_t)row * row_bytes;
#pragma unroll
	for (b = 0; b < NB; b++)
		acc[b] = 0.0f;
#pragma unroll 2
	for (c = lane; c < n_chunks; c += 32) {
		load8<T>(wr, c, v);
#pragma unroll
		for (b = 0; b < NB; b++) {
			if (b < nt) {
				const float4 *xp = (const float4 *)(x +
				    (size_t)b * n_in) + 2 * c;
				float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
				acc[b] += v[0] * x0.x + v[1] * x0.y +
				    v[2] * x0.z + v[3] * x0.w +
				    v[4] * x1.x + v[5] * x1.y +
				    v[6] * x1.z + v[7] * x1.w;
			}
		}
	}
#pragma unroll
	for (b = 0; b < NB; b++) {
		if (b < nt) {
			acc[b] = warp_sum(acc[b]);
			if (lane == 0)
				out[(size_t)b * n_out + row] = acc[b];
		}
	}
}

/* Launch passes of up to QMV_TOK tokens for one weight type. */
template <uint32_t T>
static void
qmv_launch(float *out, const void *w, size_t row_bytes, const float *x,
    int n_tok, int n_in, int n_out, cuda_stream_t stream)
{
	dim3	block(32, QMV_WARPS), grid((n_out + QMV_WARPS - 1) / QMV_WARPS);
	int	t, nt;

	for (t = 0; t < n_tok; t += QMV_TOK) {
		nt = n_tok - t < QMV_TOK ? n_tok - t : QMV_TOK;
		if (nt == 1)
			qmv_kernel<T, 1><<<grid, block, 0, stream>>>(
			    out + (size_t)t * n_out, (const uint8_t *)w,
			    row_bytes, x + (size_t)t * n_in, n_in, n_out, 1);
		else
			qmv_kernel<T, QMV_TOK><<<grid, block, 0, stream>>>(
			    out + (size_t)t * n_out, (const uint8_t *)w,
			    row_bytes, x + (size_t)t * n_in, n_in, n_out, nt);
	}
}

/* Check the shape and alignment shared by the weight-reading kernels. */
static int
weight_args_ok(const void *w, uint32_t w_type, int n_in, uint64_t *rb)
{
	const struct tensor_type_info	*ti = tensor_type_get(w_type);

	if (ti == NULL || n_in <= 0 || n_in % 8 != 0 ||
	    (*rb = tensor_row_bytes(ti, n_in)) == 0 || !is_aligned(w, 16))
		return 0;
	return 1;
}

/* Multiply F32 activations by the transpose of a weight of any type. */
extern "C" int
cuda_qmatmul_forward(float *out, const float *x, const void *w,
    uint32_t w_type, int n_tok, int n_in, int n_out, cuda_stream_t stream)
{
	uint64_t	rb;

	if (!weight_args_ok(w, w_type, n_in, &rb) || n_tok < 0 || n_out < 0 ||
	    !is_aligned(x, 16))
		return (int)cudaErrorInvalidValue;
	if (n_tok == 0 || n_out == 0)
		return 0;
	DISPATCH_WEIGHT_TYPE(w_type, qmv_launch, out, w, rb, x, n_tok, n_in,
	    n_out, stream);
	return launch_result();
}

/* Dequantize 8 elements per thread into F16 rows. */
template <uint32_t T>
static __global__ void
dequant_f16_kernel(__half *dst, const uint8_t *w, size_t row_bytes, int n_in,
    int n_rows)
{
	size_t	i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	int	n_chunks = n_in / 8, row, c;
	float	v[8];

	if (i >= (size_t)n_rows * n_chunks)
		return;
	row = (int)(i / n_chunks);
	c = (int)(i % n_chunks);
	load8<T>(w + (size_t)row * row_bytes, c, v);
	((uint4 *)(dst + (size_t)row * n_in))[c] = make_uint4(f_to_h2(v[0], v[1]),
	    f_to_h2(v[2], v[3]), f_to_h2(v[4], v[5]), f_to_h2(v[6], v[7]));
}

/* Launch the dequantization for one weight type. */
template <uint32_t T>
static void
dequant_launch(uint16_t *dst, const void *w, size_t row_bytes, int n_in,
    int n_rows, cuda_stream_t stream)
{
	size_t	n = (size_t)n_rows * (n_in / 8);

	dequant_f16_kernel<T><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
	    (__half *)dst, (const uint8_t *)w, row_bytes, n_in, n_rows);
}

/* Dequantize a range of weight rows to F16. */
extern "C" int
cuda_dequant_f16_forward(uint16_t *dst, const void *w, uint32_t w_type,
    int n_in, int row0, int n_rows, cuda_stream_t stream)
{
	uint64_t	rb;

	if (!weight_args_ok(w, w_type, n_in, &rb) || row0 < 0 || n_rows < 0 ||
	    !is_aligned(dst, 16))
		return (int)cudaErrorInvalidValue;
	if (n_rows == 0)
		return 0;
	DISPATCH_WEIGHT_TYPE(w_type, dequant_launch, dst,
	    (const uint8_t *)w + (size_t)row0 * rb, rb, n_in, n_rows, stream);
	return launch_result();
}
