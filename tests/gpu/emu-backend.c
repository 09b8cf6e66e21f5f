/* emu-backend.c: the calls of emu-backend.h, done in order on the host. */

#include <stdlib.h>
#include <string.h>

#include "emu-backend.h"

/* A stream handle: any distinct non-NULL pointer will do. */
static char	emu_stream_token;

/* Work runs when it is launched, so every stream is the same one. */
cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	(void)flags;
	*s = (cudaStream_t)(void *)&emu_stream_token;
	return (cudaSuccess);
}

/* Nothing to free for a stream. */
cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
	(void)s;
	return (cudaSuccess);
}

/* A copy done now: earlier work on the stream has already run. */
cudaError_t
cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
    cudaStream_t st)
{
	(void)st;
	if (emu_capturing())
		return (cudaErrorInvalidValue);	/* not recorded */
	return (cudaMemcpy(d, s, n, k));
}

/* A fill done now. */
cudaError_t
cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
	(void)st;
	if (emu_capturing())
		return (cudaErrorInvalidValue);
	memset(d, v, n);
	return (cudaSuccess);
}

/* A copy between devices, which are all host memory here. */
cudaError_t
cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n,
    cudaStream_t st)
{
	(void)dd;
	(void)sd;
	(void)st;
	memmove(d, s, n);
	return (cudaSuccess);
}

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
