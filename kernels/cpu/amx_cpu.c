/*
 * amx_cpu.c: whether the AMX tile unit may be used, and the switch.
 *
 * Built without any instruction-set flags: it runs before anything knows
 * what the CPU has.  Linux hands out the tile data state (8 KB per thread)
 * only to processes that ask for it with arch_prctl(ARCH_REQ_XCOMP_PERM);
 * without the permission the first tile instruction raises SIGILL, so the
 * request must succeed before any kernel is attached.  The permission is
 * per process and covers the threads started before and after it.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "amx.h"
#include "quant.h"
#include "tensor_type.h"

#ifndef ARCH_GET_XCOMP_PERM
#define ARCH_GET_XCOMP_PERM	0x1022
#endif
#ifndef ARCH_REQ_XCOMP_PERM
#define ARCH_REQ_XCOMP_PERM	0x1023
#endif
#define XFEATURE_XTILECFG	17
#define XFEATURE_XTILEDATA	18

static pthread_once_t	amx_once = PTHREAD_ONCE_INIT;
static int		amx_ok;
static int		no_amx;

#if defined(__x86_64__) && defined(__linux__)
/* XCR0: the state components the OS saves and restores. */
static uint64_t
read_xcr0(void)
{
	uint32_t	lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (((uint64_t)hi << 32) | lo);
}
#endif

/* Probe the CPU and the OS and ask for the tile permission (once). */
static void
amx_probe(void)
{
#if defined(__x86_64__) && defined(__linux__)
	const uint64_t	tiles = (1ULL << XFEATURE_XTILECFG) | (1ULL << XFEATURE_XTILEDATA);
	unsigned int	a, b, c, d;
	uint64_t	perm = 0;

	if (!quant_isa_supported(QUANT_ISA_AVX512))
		return;
	/* OSXSAVE first: xgetbv faults without it. */
	if (!__get_cpuid(1, &a, &b, &c, &d) || (c & bit_OSXSAVE) == 0)
		return;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return;
	if ((d & (1U << 24)) == 0 || (d & (1U << 25)) == 0)	/* AMX-TILE, AMX-INT8 */
		return;
	if ((read_xcr0() & tiles) != tiles)
		return;
	if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
		return;
	if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 ||
	    (perm & (1ULL << XFEATURE_XTILEDATA)) == 0)
		return;
	amx_ok = amx_selftest();
#endif
}

/* Whether the AMX kernels can run here (probes on the first call). */
int
quant_amx_supported(void)
{
	pthread_once(&amx_once, amx_probe);
	return (amx_ok);
}

/* Allow the AMX kernels; returns the old setting. */
int
quant_allow_amx(int allow)
{
	return (!__atomic_exchange_n(&no_amx, allow == 0, __ATOMIC_RELAXED));
}

/* Whether the AMX kernels are allowed. */
int
quant_amx_allowed(void)
{
	return (!__atomic_load_n(&no_amx, __ATOMIC_RELAXED));
}

/* Attach the AMX companion of a repacked AVX-512 kernel where it applies. */
void
quant_amx_attach(struct quant_kernel *k, uint32_t type)
{
	k->afn = NULL;
	k->anr = 0;
	if (k->pfn == NULL || !quant_amx_allowed() || !quant_amx_supported())
		return;
	if ((k->afn = amx_packed_kernel(type)) != NULL)
		k->anr = 16;
}
