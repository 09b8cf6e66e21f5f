/*
 * cuda_runtime.h (emulation): the device-side vocabulary of the kernels
 * (qualifiers, thread and block indices, vector types, half and bfloat16,
 * intrinsics, warp shuffles, barriers) mapped onto emu.cc, which runs each
 * thread of a block as a coroutine.  C++ only.
 *
 * Shared memory: __shared__ becomes static, which is right because emu.cc
 * runs one block at a time; dynamic shared memory is emu_dyn_smem (the
 * launch rewrite substitutes it).  Half and bfloat16 conversions use the
 * reference's round-to-nearest-even, as the hardware does.  Vector types
 * carry their CUDA alignment so -fsanitize=alignment catches misaligned
 * vector loads, which fault on a GPU.
 */
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>

#include "cuda_runtime_api.h"

extern "C" {
float		ref_f16_to_f32(uint16_t);
uint16_t	ref_f32_to_f16(float);
float		ref_bf16_to_f32(uint16_t);
uint16_t	ref_f32_to_bf16(float);
}

#define __global__
#define __device__
#define __host__
#define __forceinline__		inline
#define __launch_bounds__(n)
#define __shared__		static

struct dim3 {
	unsigned	x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct emu_uint3 {
	unsigned	x, y, z;
};
/*
 * A launch's arguments converted to the kernel's parameter types and kept
 * by value (launch.py), as CUDA copies them when the launch is queued.
 */
template <class... P>
struct emu_binder {
	std::tuple<P...> operator()(P... p) const { return std::tuple<P...>(p...); }
};
template <class... P>
static inline emu_binder<P...>
emu_args(void (*)(P...))
{
	return emu_binder<P...>();
}

extern emu_uint3	threadIdx, blockIdx;
extern dim3		blockDim, gridDim;
extern void		*emu_dyn_smem;

struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct __half { uint16_t bits; };
struct alignas(4) __half2 { __half x, y; };
struct __nv_bfloat16 { uint16_t bits; };

static inline uint4
make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
	uint4 u = { a, b, c, d };
	return u;
}

static inline float4
make_float4(float a, float b, float c, float d)
{
	float4 f = { a, b, c, d };
	return f;
}

static inline float2
make_float2(float a, float b)
{
	float2 f = { a, b };
	return f;
}

static inline float
__half2float(__half h)
{
	return ref_f16_to_f32(h.bits);
}

static inline __half
__float2half_rn(float f)
{
	__half h;
	h.bits = ref_f32_to_f16(f);
	return h;
}

static inline __half
__ushort_as_half(unsigned short u)
{
	__half h;
	h.bits = u;
	return h;
}

static inline unsigned short
__half_as_ushort(__half h)
{
	return h.bits;
}

static inline float
__bfloat162float(__nv_bfloat16 b)
{
	return ref_bf16_to_f32(b.bits);
}

static inline __nv_bfloat16
__float2bfloat16_rn(float f)
{
	__nv_bfloat16 b;
	b.bits = ref_f32_to_bf16(f);
	return b;
}

static inline float
__uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

template <class T>
static inline T
__ldg(const T *p)
{
	return *p;
}

static inline float
rsqrtf(float x)
{
	return 1.0f / sqrtf(x);
}

static inline int
min(int a, int b)
{
	return a < b ? a : b;
}

static inline int
max(int a, int b)
{
	return a > b ? a : b;
}

void		__syncthreads(void);
uint64_t	emu_shfl(uint64_t, int, int);
void		emu_launch(dim3, dim3, size_t, cudaStream_t,
		    std::function<void()>);

template <class T>
static inline T
__shfl_xor_sync(unsigned, T v, int mask)
{
	uint64_t	u = 0;
	T		r;

	memcpy(&u, &v, sizeof v);
	u = emu_shfl(u, mask, 1);
	memcpy(&r, &u, sizeof r);
	return r;
}

template <class T>
static inline T
__shfl_sync(unsigned, T v, int lane)
{
	uint64_t	u = 0;
	T		r;

	memcpy(&u, &v, sizeof v);
	u = emu_shfl(u, lane, 0);
	memcpy(&r, &u, sizeof r);
	return r;
}

template <class F>
static inline cudaError_t
cudaFuncSetAttribute(F, enum cudaFuncAttribute, int)
{
	return cudaSuccess;
}

#endif
