/*
 * emu-backend.h: the runtime calls kernels/cuda/backend_cuda.c makes beyond those
 * the kernels' emulation (tests/gpu/emu) serves: streams, asynchronous and
 * peer copies, pinned memory.  Force-included when the backend is compiled
 * for tests/gpu/emu-engine-check.sh; emu-backend.c serves them on the
 * emulation's streams (emu.cc), in order on each.
 */
#ifndef PHASED_EMU_BACKEND_H
#define PHASED_EMU_BACKEND_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define cudaStreamNonBlocking	0x01

cudaError_t	cudaSetDevice(int);
cudaError_t	cudaStreamCreateWithFlags(cudaStream_t *, unsigned int);
cudaError_t	cudaStreamDestroy(cudaStream_t);
cudaError_t	cudaMemcpyAsync(void *, const void *, size_t,
		    enum cudaMemcpyKind, cudaStream_t);
cudaError_t	cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t	cudaMemcpyPeerAsync(void *, int, const void *, int, size_t,
		    cudaStream_t);
cudaError_t	cudaMallocHost(void **, size_t);
cudaError_t	cudaFreeHost(void *);

#ifdef __cplusplus
}
#endif

#endif
