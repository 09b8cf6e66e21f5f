/*
 * runtime.cu: error names, device discovery, and reproducible random
 * fills of weights for tests and benchmarks.
 *
 * The random fill writes each type's real block layout: random code bytes
 * everywhere, then block scales chosen so that dequantized values stay
 * within about [-scale, scale] (random bytes in an F16 scale could be
 * inf or nan).
 */
#include "config.h"

#include <cublas_v2.h>

#include "cuda_device.h"

/* Name an error code returned by a launcher. */
extern "C" const char *
cuda_kernels_strerror(int code)
{
	if (code >= CUDA_KERNELS_EBLAS)
		return cublasGetStatusString((cublasStatus_t)(code -
		    CUDA_KERNELS_EBLAS));
	return cudaGetErrorString((cudaError_t)code);
}

/* Number of usable CUDA devices; 0 when there is none or no driver. */
extern "C" int
cuda_device_count(void)
{
	int	n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();	/* do not leave the error sticky */
		return 0;
	}
	return n;
}

/* Fill 8 bytes per thread with random bits. */
static __global__ void
fill_bytes_kernel(uint8_t *dst, size_t n, uint64_t seed)
{
	size_t		i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
	uint64_t	r;

	if (i >= n)
		return;
	r = kdefs_mix64(seed ^ kdefs_mix64(i));
	for (int k = 0; k < 8 && i + k < n; k++)
		dst[i + k] = (uint8_t)(r >> (8 * k));
}

/* Fill floats, halves or bfloat16s uniformly in [-scale, scale]. */
static __global__ void
fill_float_kernel(void *dst, uint32_t type, size_t n, float scale,
    uint64_t seed)
{
	size_t	i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	float	f;

	if (i >= n)
		return;
	f = (2.0f * kdefs_uniform(seed, i) - 1.0f) * scale;
	if (type == TT_F32)
		((float *)dst)[i] = f;
	else if (type == TT_F16)
		((__half *)dst)[i] = __float2half_rn(f);
	else
		((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(f);
}

/* Overwrite a half at byte offset off of every block. */
static __global__ void
fill_scale_kernel(uint8_t *dst, size_t n_blocks, uint32_t block_bytes,
    uint32_t off, float value)
{
	size_t	i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n_blocks)
		*(__half *)(dst + i * block_bytes + off) = __float2half_rn(value);
}

/* Set the half at byte off of every block to value. */
static void
fill_scale(void *dst, size_t n_blocks, uint32_t block_bytes, uint32_t off,
    float value, cuda_stream_t stream)
{
	unsigned	grid = (unsigned)((n_blocks + 255) / 256);

	fill_scale_kernel<<<grid, 256, 0, stream>>>((uint8_t *)dst, n_blocks,
	    block_bytes, off, value);
}

/* Fill a buffer with reproducible random elements of a GGUF type. */
extern "C" int
cuda_fill_random(void *dst, uint32_t type, size_t n_elems, float scale,
    uint64_t seed, cuda_stream_t stream)
{
	const struct tensor_type_info	*ti = tensor_type_get(type);
	size_t				 n_blocks, bytes;
	unsigned			 grid;

	if (ti == NULL || n_elems % ti->block_elems != 0)
		return (int)cudaErrorInvalidValue;
	if (n_elems == 0)
		return 0;
	if (type == TT_F32 || type == TT_F16 || type == TT_BF16) {
		grid = (unsigned)((n_elems + 255) / 256);
		fill_float_kernel<<<grid, 256, 0, stream>>>(dst, type, n_elems,
		    scale, seed);
		return launch_result();
	}
	n_blocks = n_elems / ti->block_elems;
	bytes = n_blocks * ti->block_bytes;
	grid = (unsigned)((bytes / 8 + 256) / 256);
	fill_bytes_kernel<<<grid, 256, 0, stream>>>((uint8_t *)dst, bytes, seed);
	grid = (unsigned)((n_blocks + 255) / 256);
	switch (type) {
	case TT_Q8_0:	/* |q| <= 128 */
		fill_scale_kernel<<<grid, 256, 0, stream>>>((uint8_t *)dst,
		    n_blocks, ti->block_bytes, 0, scale / 128);
		break;
	case TT_Q4_0:	/* |q - 8| <= 8 */
		fill_scale_kernel<<<grid, 256, 0, stream>>>((uint8_t *)dst,
		    n_blocks, ti->block_bytes, 0, scale / 8);
		break;
	case TT_Q4_K:	/* d * 63 * 15 and dmin * 63 */
		fill_scale_kernel<<<grid, 256, 0, stream>>>((uint8_t *)dst,
		    n_blocks, ti->block_bytes, 0, scale / (63 * 15));
		fill_scale_kernel<<<grid, 256, 0, stream>>>((uint8_t *)dst,
		    n_blocks, ti->block_bytes, 2, scale / (63 * 2));
		break;
	case TT_Q6_K:	/* |scale| <= 128, |q - 32| <= 32 */
		fill_scale_kernel<<<grid, 256, 0, stream>>>((uint8_t *)dst,
		    n_blocks, ti->block_bytes, 208, scale / (128 * 32));
		break;
	case TT_Q4_1:	/* d * 15 + m, m = -scale / 2 at most */
	case TT_Q5_1:
		fill_scale(dst, n_blocks, ti->block_bytes, 0,
		    scale / (type == TT_Q4_1 ? 15 : 31), stream);
		fill_scale(dst, n_blocks, ti->block_bytes, 2, scale / 2, stream);
		break;
	case TT_Q5_0:	/* |q - 16| <= 16 */
		fill_scale(dst, n_blocks, ti->block_bytes, 0, scale / 16, stream);
		break;
	case TT_IQ4_NL:	/* |book| <= 127 */
		fill_scale(dst, n_blocks, ti->block_bytes, 0, scale / 127, stream);
		break;
	case TT_IQ4_XS:	/* |scale - 32| <= 32, |book| <= 127 */
		fill_scale(dst, n_blocks, ti->block_bytes, 0, scale / (127 * 32), stream);
		break;
	case TT_Q2_K:	/* d * 15 * 3 and dmin * 15 */
		fill_scale(dst, n_blocks, ti->block_bytes, 80, scale / (15 * 3), stream);
		fill_scale(dst, n_blocks, ti->block_bytes, 82, scale / (15 * 2), stream);
		break;
	case TT_Q3_K:	/* |scale - 32| <= 32, |q - 4| <= 4 */
		fill_scale(dst, n_blocks, ti->block_bytes, 108, scale / (32 * 4), stream);
		break;
	case TT_Q5_K:	/* d * 63 * 31 and dmin * 63 */
		fill_scale(dst, n_blocks, ti->block_bytes, 0, scale / (63 * 31), stream);
		fill_scale(dst, n_blocks, ti->block_bytes, 2, scale / (63 * 2), stream);
		break;

	default:
		return (int)cudaErrorInvalidValue;
	}
	return launch_result();
}
