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

/*
 * Entry q of the IQ4_NL / IQ4_XS code book (-127, -104, -83, -65, -49, -35,
 * -22, -10, 1, 13, 25, 38, 53, 69, 89, 113), packed in two 64-bit
 * constants so no table in memory is needed.
 */
__device__ __forceinline__ float
iq4_book(int q)
{
	uint64_t w = q < 8 ? 0xF6EADDCFBFAD9881ULL : 0x7159453526190D01ULL;

	return (float)(int8_t)(uint8_t)(w >> (8 * (q & 7)));
}

/* Little-endian 32-bit value of 4 bytes read one at a time (any alignment). */
__device__ __forceinline__ uint32_t
ld_u32b(const uint8_t *p)
{
	return (uint32_t)__ldg(p) | (uint32_t)__ldg(p + 1) << 8 |
	    (uint32_t)__ldg(p + 2) << 16 | (uint32_t)__ldg(p + 3) << 24;
}

/*
 * The 32-element types beyond Q4_0: chunk c is quarter j = c & 3 of block
 * c >> 2, elements 8j..8j+7, the low nibbles of code bytes 8(j & 1).. for
 * j < 2 and their high nibbles for j >= 2; the fifth bit of element e is
 * bit e of qh.  Q4_1 (20 bytes: d, m, qs) and Q5_1 (24: d, m, qh, qs) are
 * d * q + m, Q5_0 (22: d, qh, qs) d * (q - 16), IQ4_NL (18: d, qs)
 * d * book[q].  Blocks are only 2-byte aligned, so bytes are read singly.
 */
template <uint32_t T>
__device__ __forceinline__ void
load8_b32(const uint8_t *row, int c, float *v)
{
	const int	 bb = T == TT_Q4_1 ? 20 : T == TT_Q5_0 ? 22 : T == TT_Q5_1 ? 24 : 18;
	const int	 qo = T == TT_Q4_1 ? 4 : T == TT_Q5_0 ? 6 : T == TT_Q5_1 ? 8 : 2;
	const uint8_t	*b = row + (size_t)(c >> 2) * bb;
	int		 j = c & 3, shift = (j & 2) ? 4 : 0;
	float		 d = ld_f16(b), m = 0;
	uint32_t	 qh = 0;

	if (T == TT_Q4_1 || T == TT_Q5_1)
		m = ld_f16(b + 2);
	if (T == TT_Q5_0 || T == TT_Q5_1)
		qh = ld_u32b(b + qo - 4) >> (8 * j);
	for (int k = 0; k < 8; k++) {
		int q = (__ldg(b + qo + 8 * (j & 1) + k) >> shift) & 15;
		q |= (int)((qh >> k) & 1) << 4;
		if (T == TT_IQ4_NL)
			v[k] = d * iq4_book(q);
		else if (T == TT_Q5_0)
			v[k] = d * (float)(q - 16);
		else
			v[k] = d * (float)q + m;
	}
}

/* Q4_1: see load8_b32. */
template <>
__device__ __forceinline__ void
load8<TT_Q4_1>(const uint8_t *row, int c, float *v) { load8_b32<TT_Q4_1>(row, c, v); }
/* Q5_0: see load8_b32. */
template <>
__device__ __forceinline__ void
load8<TT_Q5_0>(const uint8_t *row, int c, float *v) { load8_b32<TT_Q5_0>(row, c, v); }
/* Q5_1: see load8_b32. */
template <>
__device__ __forceinline__ void
load8<TT_Q5_1>(const uint8_t *row, int c, float *v) { load8_b32<TT_Q5_1>(row, c, v); }
/* IQ4_NL: see load8_b32. */
template <>
__device__ __forceinline__ void
load8<TT_IQ4_NL>(const uint8_t *row, int c, float *v) { load8_b32<TT_IQ4_NL>(row, c, v); }

/*
 * Q2_K (84 bytes: scales[16], qs[64], d, dmin) and Q3_K (110: hmask[32],
 * qs[64], 12 bytes of 6-bit scales, d): in half h element 32j + l takes
 * bits 2j..2j+1 of qs[32h + l]; the 8 elements of a chunk share a 16-element
 * sub-block k.  Q2_K: d * (scales[k] & 15) * q - dmin * (scales[k] >> 4).
 * Q3_K: d * (scale_k - 32) * (q - 4 unless bit 4h + j of hmask[l]).
 */
template <>
__device__ __forceinline__ void
load8<TT_Q2_K>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 5) * 84;
	int		 e0 = 8 * (c & 31), h = e0 >> 7, j = (e0 >> 5) & 3, l0 = e0 & 31;
	int		 sm = __ldg(b + (e0 >> 4));
	float		 dl = ld_f16(b + 80) * (float)(sm & 15);
	float		 ml = ld_f16(b + 82) * (float)(sm >> 4);

	for (int k = 0; k < 8; k++)
		v[k] = dl * (float)((__ldg(b + 16 + 32 * h + l0 + k) >> (2 * j)) & 3) - ml;
}

template <>
__device__ __forceinline__ void
load8<TT_Q3_K>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 5) * 110, *s = b + 96;
	int		 e0 = 8 * (c & 31), h = e0 >> 7, j = (e0 >> 5) & 3, l0 = e0 & 31;
	int		 sb = e0 >> 4, sc;
	float		 dl;

	sc = sb < 8 ? __ldg(s + sb) & 15 : __ldg(s + sb - 8) >> 4;
	sc |= ((__ldg(s + 8 + sb % 4) >> (2 * (sb / 4))) & 3) << 4;
	dl = ld_f16(b + 108) * (float)(sc - 32);
	for (int k = 0; k < 8; k++) {
		int q = (__ldg(b + 32 + 32 * h + l0 + k) >> (2 * j)) & 3;
		if (!(__ldg(b + l0 + k) & (1 << (4 * h + j))))
			q -= 4;
		v[k] = dl * (float)q;
	}
}

/*
 * Q5_K (176 bytes: d, dmin, scales[12] as Q4_K, qh[32], qs[128]): Q4_K's
 * codes plus a fifth bit, bit i of qh[l] for element 32i + l.
 */
template <>
__device__ __forceinline__ void
load8<TT_Q5_K>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 5) * 176, *s = b + 4;
	int		 e0 = 8 * (c & 31), j = e0 >> 5, g = e0 >> 6, l0 = e0 & 31;
	int		 shift = (e0 & 32) ? 4 : 0, sc, mn;
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
	for (int k = 0; k < 8; k++) {
		int q = (__ldg(b + 48 + 32 * g + l0 + k) >> shift) & 15;
		q |= ((__ldg(b + 16 + l0 + k) >> j) & 1) << 4;
		v[k] = dd * (float)q - dm;
	}
}

/*
 * IQ4_XS (136 bytes: d, scales_h u16, scales_l[4], qs[128]): sub-block j
 * of 32 scaled by d * (6-bit scale - 32), codes in IQ4_NL's nibble order.
 */
template <>
__device__ __forceinline__ void
load8<TT_IQ4_XS>(const uint8_t *row, int c, float *v)
{
	const uint8_t	*b = row + (size_t)(c >> 5) * 136;
	int		 e0 = 8 * (c & 31), j = e0 >> 5, i0 = e0 & 31;
	int		 sh = __ldg(b + 2) | (__ldg(b + 3) << 8), ls;
	int		 shift = i0 >= 16 ? 4 : 0;
	float		 dl;

	ls = ((__ldg(b + 4 + j / 2) >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
	dl = ld_f16(b) * (float)(ls - 32);
	for (int k = 0; k < 8; k++)
		v[k] = dl * iq4_book((__ldg(b + 8 + 16 * j + (i0 & 15) + k) >>
		    shift) & 15);
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
	case TT_Q4_1: F<TT_Q4_1>(__VA_ARGS__); break;			\
	case TT_Q5_0: F<TT_Q5_0>(__VA_ARGS__); break;			\
	case TT_Q5_1: F<TT_Q5_1>(__VA_ARGS__); break;			\
	case TT_IQ4_NL: F<TT_IQ4_NL>(__VA_ARGS__); break;		\
	case TT_Q2_K: F<TT_Q2_K>(__VA_ARGS__); break;			\
	case TT_Q3_K: F<TT_Q3_K>(__VA_ARGS__); break;			\
	case TT_Q5_K: F<TT_Q5_K>(__VA_ARGS__); break;			\
	case TT_IQ4_XS: F<TT_IQ4_XS>(__VA_ARGS__); break;		\
	default: return (int)cudaErrorInvalidValue;			\
	}								\
} while (0)

#endif
