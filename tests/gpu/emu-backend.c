/* emu-backend.c: the calls of emu-backend.h, on the host. */

#include <stdlib.h>

#include "emu-backend.h"

/* Pinned memory is ordinary memory here. */
cudaError_t
cudaMallocHost(void **p, size_t n)
{
	*p = malloc(n);
	return (*p != NULL || n == 0 ? cudaSuccess : cudaErrorMemoryAllocation);
}

/* Free memory from cudaMallocHost. */
cudaError_t
cudaFreeHost(void *p)
{
	free(p);
	return (cudaSuccess);
}
