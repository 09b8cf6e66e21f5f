/*
 * emu-backend.h: the runtime calls kernels/cuda/backend_cuda.c makes beyond
 * those the kernels' emulation serves (tests/gpu/emu: memory, streams,
 * asynchronous copies, graphs): pinned memory.  Force-included when the
 * backend is compiled for tests/gpu/emu-engine-check.sh; emu-backend.c
 * serves them.
 */
#ifndef PHASED_EMU_BACKEND_H
#define PHASED_EMU_BACKEND_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t	cudaMallocHost(void **, size_t);
cudaError_t	cudaFreeHost(void *);

#ifdef __cplusplus
}
#endif

#endif
