/*
 * ops.cu: the element-wise and per-row ops of a llama forward pass:
 * RMSNorm, RoPE, SwiGLU, residual add, type conversion, embedding lookup
 * and the store of new keys and values into the paged cache.
 *
 * These are memory-bound and simple; each is one kernel with one thread
 * per element (or per 8 elements), except RMSNorm, which gives each row a
 * thread block so the sum of squares is a block reduction.  RoPE computes
 * its angles in double: positions reach the tens of thousands, where a
 * float angle would already be off by 1e-3 radians.
 */
#include "config.h"

#include "cuda_device.h"

#define RMS_THREADS	256

/* One block per row: sum of squares, then scale. */
static __global__ void
rmsnorm_kernel(float *out, const float *x, const float *w, int dim, float eps)
{
	__shared__ float	 part[RMS_THREADS / 32];
	const float		*xr = x + (size_t)blockIdx.x * dim;
	float			*yr = out + (size_t)blockIdx.x * dim;
	float			 ss = 0.0f, r;
	int			 i;

	for (i = threadIdx.x; i < dim; i += blockDim.x)
		ss += xr[i] * xr[i];
	ss = warp_sum(ss);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = ss;
	__syncthreads();
	if (threadIdx.x < 32) {
		ss = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
		ss = warp_sum(ss);
		if (threadIdx.x == 0)
			part[0] = ss;
	}
	__syncthreads();
	r = rsqrtf(part[0] / (float)dim + eps);
	for (i = threadIdx.x; i < dim; i += blockDim.x)
		yr[i] = xr[i] * r * w[i];
}

/* RMS-normalize rows. */
extern "C" int
cuda_rmsnorm_forward(float *out, const float *x, const float *weight,
    int n_rows, int dim, float eps, cuda_stream_t stream)
{
	if (n_rows < 0 || dim <= 0)
		return (int)cudaErrorInvalidValue;
	if (n_rows == 0)
		return 0;
	rmsnorm_kernel<<<n_rows, RMS_THREADS, 0, stream>>>(out, x, weight, dim,
	    eps);
	return launch_result();
}

/* One thread per rotated pair. */
static __global__ void
rope_kernel(float *x, const int32_t *pos, int n_tok, int n_heads,
    int head_dim, int rot_dim, double log_base)
{
	size_t	 i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	int	 half = rot_dim / 2, p, th;
	size_t	 th_idx;
	double	 theta, s, c;
	float	*v, x0, x1;

	if (i >= (size_t)n_tok * n_heads * half)
		return;
	p = (int)(i % half);
	th_idx = i / half;			/* token * n_heads + head */
	th = (int)(th_idx / n_heads);
	v = x + th_idx * head_dim + 2 * p;
	theta = (double)pos[th] * exp(-2.0 * p / rot_dim * log_base);
	sincos(theta, &s, &c);
	x0 = v[0];
	x1 = v[1];
	v[0] = (float)(x0 * c - x1 * s);
	v[1] = (float)(x0 * s + x1 * c);
}

/* Rotate adjacent pairs of q or k in place. */
extern "C" int
cuda_rope_forward(float *x, const int32_t *pos, int n_tok, int n_heads,
    int head_dim, int rot_dim, float base, cuda_stream_t stream)
{
	size_t	n;

	if (n_tok < 0 || n_heads <= 0 || head_dim <= 0 || rot_dim <= 0 ||
	    rot_dim > head_dim || rot_dim % 2 != 0 || !(base > 0.0f))
		return (int)cudaErrorInvalidValue;
	n = (size_t)n_tok * n_heads * (rot_dim / 2);
	if (n == 0)
		return 0;
	rope_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, pos,
	    n_tok, n_heads, head_dim, rot_dim, log((double)base));
	return launch_result();
}

/* silu(gate) * up. */
static __global__ void
swiglu_kernel(float *out, const float *gate, const float *up, size_t n)
{
	size_t	i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	float	g;

	if (i < n) {
		g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

/* Gate with SiLU and multiply. */
extern "C" int
cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n,
    cuda_stream_t stream)
{
	if (n == 0)
		return 0;
	swiglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(out,
	    gate, up, n);
	return launch_result();
}

/* a + b. */
static __global__ void
add_kernel(float *out, const float *a, const float *b, size_t n)
{
	size_t	i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = a[i] + b[i];
}

/* Add two vectors. */
extern "C" int
cuda_add_forward(float *out, const float *a, const float *b, size_t n,
    cuda_stream_t stream)
{
	if (n == 0)
		return 0;
	add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(out, a, b,
	    n);
	return launch_result();
}

/* Read element i of an F32, F16 or BF16 array. */
__device__ __forceinline__ float
ld_any(const void *p, uint32_t type, size_t i)
{
	if (type == TT_F32)
		return ((const float *)p)[i];
	if (type == TT_F16)
		return __half2float(((const __half *)p)[i]);
	return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

/* Convert between F32, F16 and BF16, one element per thread. */
static __global__ void
convert_kernel(void *dst, uint32_t dt, const void *src, uint32_t st, size_t n)
{
	size_t	i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	float	f;

	if (i >= n)
		return;
	f = ld_any(src, st, i);
	if (dt == TT_F32)
		((float *)dst)[i] = f;
	else if (dt == TT_F16)
		((__half *)dst)[i] = __float2half_rn(f);
	else
		((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(f);
}

/* Whether a type is one cuda_convert_forward handles. */
static int
float_type(uint32_t t)
{
	return t == TT_F32 || t == TT_F16 || t == TT_BF16;
}

/* Convert n elements between F32, F16 and BF16. */
extern "C" int
cuda_convert_forward(void *dst, uint32_t dst_type, const void *src,
    uint32_t src_type, size_t n, cuda_stream_t stream)
{
	if (!float_type(dst_type) || !float_type(src_type))
		return (int)cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	convert_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(dst,
	    dst_type, src, src_type, n);
	return launch_result();
}

/* Dequantize one embedding row per blockIdx.y, 8 elements per thread. */
template <uint32_t T>
static __global__ void
embedding_kernel(float *out, const uint8_t *table, size_t row_bytes, int dim,
    int n_vocab, const int32_t *tokens)
{
	int	 c = blockIdx.x * blockDim.x + threadIdx.x, id;
	float	 v[8];
	float4	*o;

	if (c >= dim / 8)
		return;
	id = tokens[blockIdx.y];
	o = (float4 *)(out + (size_t)blockIdx.y * dim) + 2 * c;
	if (id < 0 || id >= n_vocab) {
		o[0] = o[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		return;
	}
	load8<T>(table + (size_t)id * row_bytes, c, v);
	o[0] = make_float4(v[0], v[1], v[2], v[3]);
	o[1] = make_float4(v[4], v[5], v[6], v[7]);
}

/* Launch the embedding kernel for one weight type. */
template <uint32_t T>
static void
embedding_launch(float *out, const void *table, size_t row_bytes, int dim,
    int n_vocab, const int32_t *tokens, int n_tok, cuda_stream_t stream)
{
	dim3	grid((dim / 8 + 127) / 128, n_tok);

	embedding_kernel<T><<<grid, 128, 0, stream>>>(out,
	    (const uint8_t *)table, row_bytes, dim, n_vocab, tokens);
}

/* Look up embedding rows, dequantized to F32. */
extern "C" int
cuda_embedding_forward(float *out, const void *table, uint32_t type, int dim,
    int n_vocab, const int32_t *tokens, int n_tok, cuda_stream_t stream)
{
	const struct tensor_type_info	*ti = tensor_type_get(type);
	uint64_t			 rb;

	if (ti == NULL || dim <= 0 || dim % 8 != 0 || n_tok < 0 ||
	    n_tok > 65535 || (rb = tensor_row_bytes(ti, dim)) == 0 ||
	    !is_aligned(table, 16) || !is_aligned(out, 16))
		return (int)cudaErrorInvalidValue;
	if (n_tok == 0)
		return 0;
	DISPATCH_WEIGHT_TYPE(type, embedding_launch, out, table, rb, dim,
	    n_vocab, tokens, n_tok, stream);
	return launch_result();
}

/* Store one element of k and v as F16 at its token's slot. */
static __global__ void
kv_store_kernel(__half *kc, __half *vc, const float *k, const float *v,
    const int32_t *slots, int n_tok, int width)
{
	size_t	i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, dst;
	int	t, slot;

	if (i >= (size_t)n_tok * width)
		return;
	t = (int)(i / width);
	if ((slot = slots[t]) < 0)
		return;
	dst = (size_t)slot * width + i % width;
	kc[dst] = __float2half_rn(k[i]);
	vc[dst] = __float2half_rn(v[i]);
}

/* Write new keys and values into their cache slots as F16. */
extern "C" int
cuda_kv_store_forward(uint16_t *k_cache, uint16_t *v_cache, const float *k,
    const float *v, const int32_t *slots, int n_tok, int n_kv_heads,
    int head_dim, cuda_stream_t stream)
{
	size_t	n;

	if (n_tok < 0 || n_kv_heads <= 0 || head_dim <= 0)
		return (int)cudaErrorInvalidValue;
	n = (size_t)n_tok * n_kv_heads * head_dim;
	if (n == 0)
		return 0;
	kv_store_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
	    (__half *)k_cache, (__half *)v_cache, k, v, slots, n_tok,
	    n_kv_heads * head_dim);
	return launch_result();
}
