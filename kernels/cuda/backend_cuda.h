/* backend_cuda.h: the CUDA backend (built only with --with-cuda). */
#ifndef PHASED_BACKEND_CUDA_H
#define PHASED_BACKEND_CUDA_H

#include "backend.h"

/*
 * The "cuda" backend: one instance per device group (several devices run
 * tensor-parallel, see backend_cuda.c), weights uploaded once, KV pages in device memory with their block
 * bookkeeping on the host.  create fails with a cause when no device is
 * present.
 */
extern const struct backend_ops backend_cuda_ops;

/*
 * How many KV transfers from other groups into an instance went by NCCL
 * sends and receives and how many by peer copies (for tests and logs).
 */
/* How many decode graphs an instance has captured and replayed. */
void	backend_cuda_graph_counts(const struct backend_inst *,
	    uint64_t *captured, uint64_t *replayed);
/* How many it has dropped because a buffer they point into moved. */
uint64_t backend_cuda_graphs_dropped(const struct backend_inst *);
void	backend_cuda_kv_transfers(const struct backend_inst *, uint64_t *nccl,
	    uint64_t *peer);

#endif
