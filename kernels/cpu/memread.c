/*
 * memread.c: stream memory with wide loads and no arithmetic.
 *
 * Four independent accumulators keep enough loads in flight; the vector
 * loops are compiled for their instruction sets by attribute and only
 * called for a variant quant_isa_supported() allowed.  On a 2-core Zen 3
 * the loop of 8-byte loads read a fifth less than the AVX2 one.
 */
#include "config.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "memread.h"
#include "quant.h"

#if defined(__x86_64__)
/* Sum len bytes (a multiple of 256) with 512-bit loads. */
__attribute__((target("avx512f")))
static uint64_t
read_avx512(const uint8_t *p, size_t len, size_t pf)
{
	__m512i	a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	__m256i	h;
	__m128i	l;
	size_t	i;

	for (i = 0; i < len; i += 256) {
		if (pf != 0) {
			_mm_prefetch((const char *)p + i + pf, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 64, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 128, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 192, _MM_HINT_T0);
		}
		a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
		a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
		a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
		a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
	}
	a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
	/*
	 * Not _mm512_reduce_add_epi64: it ends on a signed scalar addition,
	 * whose wrap is undefined behaviour (the sums here wrap by design).
	 */
	h = _mm256_add_epi64(_mm512_castsi512_si256(a0),
	    _mm512_extracti64x4_epi64(a0, 1));
	l = _mm_add_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	return ((uint64_t)_mm_cvtsi128_si64(l) + (uint64_t)_mm_extract_epi64(l, 1));
}

/* Sum len bytes (a multiple of 256) with 256-bit loads. */
__attribute__((target("avx2")))
static uint64_t
read_avx2(const uint8_t *p, size_t len, size_t pf)
{
	__m256i	a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	__m128i	h;
	size_t	i;

	for (i = 0; i < len; i += 128) {
		if (pf != 0) {
			_mm_prefetch((const char *)p + i + pf, _MM_HINT_T0);
			_mm_prefetch((const char *)p + i + pf + 64, _MM_HINT_T0);
		}
		a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	h = _mm_add_epi64(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1));
	return ((uint64_t)_mm_cvtsi128_si64(h) + (uint64_t)_mm_extract_epi64(h, 1));
}
#endif

/* Read len bytes once (memread.h). */
uint64_t
mem_read_sum(int isa, const void *src, size_t len, size_t pf)
{
	const uint8_t	*p = src;
	size_t		 body = len & ~(size_t)255, i;
	uint64_t	 s = 0, w;

#if defined(__x86_64__)
	if (isa >= QUANT_ISA_AVX512)
		s = read_avx512(p, body, pf);
	else if (isa >= QUANT_ISA_AVX2)
		s = read_avx2(p, body, pf);
	else
#endif
		body = 0;
	for (i = body; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, 8);
		s += w;
	}
	for (; i < len; i++)
		s += p[i];
	return (s);
}
