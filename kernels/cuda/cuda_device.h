/*
 * cuda_device.h: device-side helpers shared by the kernels' .cu files:
 * warp reductions, half/bfloat16 loads, and load8<T>(), which dequantizes
 * eight consecutive elements of a weight row of any supported GGUF type.
 *
 * Every kernel that reads weights (embedding, the quantized matrix
 * product, dequantization to F16) is written once over load8<T>, so a
 * block layout is decoded in exactly one place on the device; ref.c holds
 * the host reading of the same layouts, and the tests hold them equal.
 */
#ifndef PHASED_CUDA_DEVICE_H
#define PHASED_CUDA_DEVICE_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

/* tensor_type.h is a C header without C++ guards. */
extern "C" {
#include "tensor_type.h"
}
#include "cuda_kernels.h"

#define FULL_MASK	0xffffffffu

/* Sum over the 32 lanes of a warp; every lane gets the result. */
__device__ __forceinline__ float
warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(FULL_MASK, v, o);
	return v;
}

/* Maximum over the 32 lanes of a warp; every lane gets the result. */
__device__ __forceinline__ float
warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
	return v;
}

/* A half stored at a 2-byte aligned address, as float. */
__device__ __forceinline__ float
ld_f16(const uint8_t *p)
{
	return __half2float(*(const __half *)p);
}

/* Two int8 codes packed in a 16-bit word, low byte first. */
__device__ __forceinline__ void
i8x2(uint16_t u, float d, float *v)
{
	v[0] = (float)(int8_t)(u & 0xff) * d;
	v[1] = (float)(int8_t)(u >> 8) * d;
}

/* Word k (0..3) of a uint4; k is a constant after unrolling. */
__device__ __forceinline__ uint32_t
u4_word(const uint4 &u, int k)
{
	return k == 0 ? u.x : k == 1 ? u.y : k == 2 ? u.z : u.w;
}

/* The two halves packed in a word (low half first), as floats. */
__device__ __forceinline__ void
h2_to_f(uint32_t w, float *v)
{
	v[0] = __half2float(__ushort_as_half((unsigned short)(w & 0xffff)));
	v[1] = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}

/* Two floats as a word of two halves (low half first), rounded to nearest even. */
__device__ __forceinline__ uint32_t
f_to_h2(float a, float b)
{
	return (uint32_t)__half_as_ushort(__float2half_rn(a)) |
	    ((uint32_t)__half_as_ushort(__float2half_rn(b)) << 16);
}

/*
 * Dequantize elements 8c .. 8c+7 of a row into v.  Rows must start at a
 * 16-byte aligned address (GGUF aligns tensor data to at least 32 bytes
 * and every supported row size keeps that alignment when n_in is a
 * multiple of 8 for F32/F16/BF16); the narrowest load used is 16 bits
 * because Q8_0, Q4_0 and Q6_K blocks are only 2-byte aligned.
 */
template <uint32_t T>
__device__ __forceinline__ void load8(const uint8_t *row, int c, float *v);

/* F32: two float4 loads. */
template <>
__device__ __forceinline__ void
load8<TT_F32>(const uint8_t *row, int c, float *v)
{
	const float4	*p = (const float4 *)row + 2 * c;
	float4		 a = __ldg(p), b = __ldg(p + 1);

	v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
	v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

/* F16: one 16-byte load of 8 halves. */
template <>
__device__ __forceinline__ void
load8<TT_F16>(const uint8_t *row, int c, float *v)
{
	uint4	u = __ldg((const uint4 *)row + c);

	for (int k = 0; k < 4; k++)
		h2_to_f(u4_word(u, k), v + 2 * k);
}

/* BF16: one 16-byte load; a bfloat16 is the top half of a float. */
template <>
__device__ __forceinline__ void
load8<TT_BF16>(const uint8_t *row, int c, float *v)
{
	uint4	u = __ldg((const uint4 *)row + c);

	for (int k = 0; k < 4; k++) {
		v[2 * k] = __uint_as_float(u4_word(u, k) << 16);
		v[2 * k + 1] = __uint_as_float(u4_word(u, k) & 0xffff0000u);
	}
}

/* Q8_0: 34-byte blocks of 32; chunk c is quarter c & 3 of block c >> 2. */
template <>
__device__ __forceinline__ void
load8<TT_Q8_0>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 2) * 34;
	const uint16_t	*q = (const uint16_t *)(b + 2 + 8 * (c & 3));
	float		 d = ld_f16(b);

	for (int k = 0; k < 4; k++)
		i8x2(__ldg(q + k), d, v + 2 * k);
}

/*
 * Q4_0: 18-byte blocks of 32; elements 0..15 are the low nibbles of the 16
 * code bytes, 16..31 the high nibbles, so quarter j reads bytes
 * 8(j & 1) .. 8(j & 1) + 7 and takes the high nibble when j >= 2.
 */
template <>
__device__ __forceinline__ void
load8<TT_Q4_0>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 2) * 18;
	const uint16_t	*q = (const uint16_t *)(b + 2 + 8 * (c & 1));
	int		 shift = (c & 2) ? 4 : 0;
	float		 d = ld_f16(b);

	for (int k = 0; k < 4; k++) {
		uint32_t u = __ldg(q + k);
		v[2 * k] = (float)((int)((u >> shift) & 15) - 8) * d;
		v[2 * k + 1] = (float)((int)((u >> (8 + shift)) & 15) - 8) * d;
	}
}

/*
 * Q4_K: 144-byte blocks of 256 (d, dmin, 12 bytes of 6-bit scales and
 * mins, 128 code bytes).  Elements 64g .. 64g+31 are the low nibbles of
 * code bytes 32g .. 32g+31 (sub-block 2g), the next 32 their high nibbles
 * (sub-block 2g+1).  Sub-block j < 4 keeps its scale and min in the low 6
 * bits of bytes j and j+4; j >= 4 keeps the low 4 bits in byte j+4 (scale
 * low nibble, min high nibble) and the top 2 bits in bits 6-7 of bytes
 * j-4 (scale) and j (min).
 */
template <>
__device__ __forceinline__ void
load8<TT_Q4_K>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 5) * 144, *s = b + 4;
	int		 e0 = 8 * (c & 31), j = e0 >> 5, g = e0 >> 6;
	int		 shift = (e0 & 32) ? 4 : 0, sc, mn;
	uint2		 u = __ldg((const uint2 *)(b + 16 + 32 * g + (e0 & 31)));
	float		 dd, dm;

	if (j < 4) {
		sc = __ldg(s + j) & 63;
		mn = __ldg(s + j + 4) & 63;
	} else {
		sc = (__ldg(s + j + 4) & 15) | ((__ldg(s + j - 4) >> 6) << 4);
		mn = (__ldg(s + j + 4) >> 4) | ((__ldg(s + j) >> 6) << 4);
	}
	dd = ld_f16(b) * (float)sc;
	dm = ld_f16(b + 2) * (float)mn;
	for (int k = 0; k < 8; k++)
		v[k] = dd * (float)(((k < 4 ? u.x : u.y) >> (8 * (k & 3) +
		    shift)) & 15) - dm;
}

/*
 * Q6_K: 210-byte blocks of 256 (ql[128], qh[64], int8 scales[16], d).  In
 * half h (128 elements), element 32k + l takes its low 4 bits from
 * ql[64h + l + 32(k & 1)] (low nibble for k < 2, high for k >= 2), bits
 * 2k..2k+1 of qh[32h + l] as its top 2 bits, and scale 8h + 2k + l / 16;
 * the code is offset by 32.
 */
template <>
__device__ __forceinline__ void
load8<TT_Q6_K>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 5) * 210;
	int		 e0 = 8 * (c & 31), h = e0 >> 7, k = (e0 >> 5) & 3;
	int		 l0 = e0 & 31;
	const uint16_t	*ql = (const uint16_t *)(b + 64 * h + l0 + 32 * (k & 1));
	const uint16_t	*qh = (const uint16_t *)(b + 128 + 32 * h + l0);
	int		 lshift = (k & 2) ? 4 : 0, hshift = 2 * k;
	float		 d = ld_f16(b + 208) *
			    (float)(int8_t)__ldg(b + 192 + 8 * h + 2 * k + l0 / 16);

	for (int i = 0; i < 4; i++) {
		uint32_t lo = __ldg(ql + i), hi = __ldg(qh + i);
		int q0 = (int)((lo >> lshift) & 15) |
		    (int)(((hi >> hshift) & 3) << 4);
		int q1 = (int)((lo >> (8 + lshift)) & 15) |
		    (int)(((hi >> (8 + hshift)) & 3) << 4);
		v[2 * i] = d * (float)(q0 - 32);
		v[2 * i + 1] = d * (float)(q1 - 32);
	}
}

/* Return the last launch error as a launcher's result. */
static inline int
launch_result(void)
{
	return (int)cudaGetLastError();
}

/* Whether a device pointer is aligned to a bytes. */
static inline int
is_aligned(const void *p, size_t a)
{
	return ((uintptr_t)p % a) == 0;
}

/*
 * Call f<T>(args...) for a weight type known at run time; returns
 * cudaErrorInvalidValue for a type without a load8.
 */
#define DISPATCH_WEIGHT_TYPE(type, F, ...) do {				\
	switch (type) {							\
	case TT_F32:  F<TT_F32>(__VA_ARGS__); break;			\
	case TT_F16:  F<TT_F16>(__VA_ARGS__); break;			\
	case TT_BF16: F<TT_BF16>(__VA_ARGS__); break;			\
	case TT_Q8_0: F<TT_Q8_0>(__VA_ARGS__); break;			\
	case TT_Q4_0: F<TT_Q4_0>(__VA_ARGS__); break;			\
	case TT_Q4_K: F<TT_Q4_K>(__VA_ARGS__); break;			\
	case TT_Q6_K: F<TT_Q6_K>(__VA_ARGS__); break;			\
	default: return (int)cudaErrorInvalidValue;			\
	}								\
} while (0)

#endif
