/*
 * prefetch.h: the software prefetch the x86 tiles share (only for files
 * built for x86 vector extensions).
 */
#ifndef PHASED_PREFETCH_H
#define PHASED_PREFETCH_H

#include <immintrin.h>

/*
 * Prefetch every 64-byte line of the n bytes at p + ahead.  One prefetch
 * per block, when a block is longer than a line, leaves the other lines
 * waiting on memory (the packed AVX2 Q4_0 tile did, with 144-byte
 * blocks).  A one-token tile whose super-blocks are longer than a few
 * lines asks for the header at a super-block's start and for each
 * 32-element block's codes just before it, not for the whole super-block
 * at once: a burst of 20-46 prefetches per super-block made one-token
 * Q5_K slower than no prefetch at all on a 2-core Zen 3.
 */
static inline __attribute__((always_inline)) void
prefetch_lines(const void *p, int ahead, int n)
{
	int	k;

	for (k = 0; k < n; k += 64)
		_mm_prefetch((const char *)p + ahead + k, _MM_HINT_T0);
}

#endif
