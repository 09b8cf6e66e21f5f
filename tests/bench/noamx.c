/*
 * noamx.c: an LD_PRELOAD shim for benchmarking llama.cpp where its AMX
 * kernels fault (SIGILL on an unconfigured tile): syscall(2) refuses
 * arch_prctl(ARCH_REQ_XCOMP_PERM), so llama.cpp finds AMX unusable and
 * runs its AVX-512 kernels; every other call is passed through.
 *
 * cc -shared -fPIC -O2 -o noamx.so noamx.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/syscall.h>

#define ARCH_REQ_XCOMP_PERM	0x1023

/* syscall(2) with the AMX permission request refused. */
long
syscall(long n, ...)
{
	static long (*real)(long, ...);
	va_list	ap;
	long	a[6];
	int	i;

	va_start(ap, n);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (n == SYS_arch_prctl && a[0] == ARCH_REQ_XCOMP_PERM) {
		errno = EPERM;
		return (-1);
	}
	if (real == NULL)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	return (real(n, a[0], a[1], a[2], a[3], a[4], a[5]));
}
