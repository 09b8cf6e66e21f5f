/* emu-backend.c: the calls of emu-backend.h, queued on the emulation's streams. */

#include <stdlib.h>
#include <string.h>

#include "emu-backend.h"

/* A stream of the emulation (emu.cc): deferred when emu_streams_defer is on. */
cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	(void)flags;
	*s = emu_stream_new();
	return (cudaSuccess);
}

/* Free a stream once its work has run. */
cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
	emu_stream_free(s);
	return (cudaSuccess);
}

/* A copy or fill queued on a stream. */
struct emu_copy {
	void		*d;
	const void	*s;
	size_t		 n;
	int		 fill, v;
};

/* Do a queued copy or fill and free its record. */
static void
emu_copy_run(void *arg)
{
	struct emu_copy	*c = arg;

	if (c->fill)
		memset(c->d, c->v, c->n);
	else
		memmove(c->d, c->s, c->n);
	free(c);
}

/* Queue a copy or fill on st. */
static cudaError_t
emu_copy_queue(void *d, const void *s, size_t n, int fill, int v,
    cudaStream_t st)
{
	struct emu_copy	*c;

	if (emu_capturing())
		return (cudaErrorInvalidValue);	/* not recorded */
	if ((c = malloc(sizeof *c)) == NULL)
		return (cudaErrorMemoryAllocation);
	c->d = d;
	c->s = s;
	c->n = n;
	c->fill = fill;
	c->v = v;
	emu_stream_op(st, emu_copy_run, c);
	return (cudaSuccess);
}

/* A copy in stream order (device memory is host memory). */
cudaError_t
cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
    cudaStream_t st)
{
	(void)k;
	return (emu_copy_queue(d, s, n, 0, 0, st));
}

/* A fill in stream order. */
cudaError_t
cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
	return (emu_copy_queue(d, NULL, n, 1, v, st));
}

/* A copy between devices, which are all host memory here. */
cudaError_t
cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n,
    cudaStream_t st)
{
	(void)dd;
	(void)sd;
	return (emu_copy_queue(d, s, n, 0, 0, st));
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
