/* backend_cuda.h: the CUDA backend (built only with --with-cuda). */
#ifndef PHASED_BACKEND_CUDA_H
#define PHASED_BACKEND_CUDA_H

#include "backend.h"

/*
 * The "cuda" backend: one instance per device (a group names one device
 * id), weights uploaded once, KV pages in device memory with their block
 * bookkeeping on the host.  create fails with a cause when no device is
 * present.
 */
extern const struct backend_ops backend_cuda_ops;

#endif
