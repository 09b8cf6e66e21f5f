/* memread.h: stream memory with wide loads and no arithmetic. */
#ifndef PHASED_MEMREAD_H
#define PHASED_MEMREAD_H

#include <stddef.h>
#include <stdint.h>

/*
 * Read len bytes at p once and return their sum as 64-bit words (bytes at
 * the end), so the loads cannot be dropped: 512-bit loads under the
 * AVX-512 variant, 256-bit under AVX2 (QUANT_ISA_* isa), else 8 bytes at a
 * time; with pf > 0 the vector loops prefetch pf bytes ahead.  The memory's
 * pace with nothing else to do, against which the kernels are measured.
 */
uint64_t	mem_read_sum(int isa, const void *p, size_t len, size_t pf);

#endif
