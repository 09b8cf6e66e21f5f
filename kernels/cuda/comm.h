/*
 * comm.h: collectives and point-to-point transfers between the GPUs of a
 * tensor-parallel group, and between groups, through NCCL.
 *
 * A struct cuda_comm is one NCCL clique made in this process for a list of
 * devices (ncclCommInitAll), one rank per device in the order given.  The
 * backend drives every rank from one thread, so calls for several ranks
 * that must meet (an all-reduce on every rank, a send and its receive) go
 * between cuda_comm_group_start and cuda_comm_group_end, as NCCL requires.
 * Work is queued on the given stream like a kernel; nothing here waits for
 * the device.  In a build without NCCL, cuda_comm_create fails with a
 * cause and nothing else may be called.  Every call returns 0, or -1 with
 * *cause.
 */
#ifndef PHASED_CUDA_COMM_H
#define PHASED_CUDA_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

struct cuda_comm;

/* Whether this build has NCCL (collectives between devices). */
int	cuda_comm_built(void);

/* A clique of n ranks on devices devs[0..n-1], all distinct. */
struct cuda_comm *cuda_comm_create(const int *devs, int n, char **cause);
/* Free a clique; nothing of it may be queued. */
void	cuda_comm_free(struct cuda_comm *);
/* Ranks in a clique. */
int	cuda_comm_size(const struct cuda_comm *);

/* Open and close a group of calls for several ranks. */
int	cuda_comm_group_start(char **cause);
int	cuda_comm_group_end(char **cause);

/*
 * In place, buf [count] of GGUF type TT_F32, TT_F16 or TT_BF16 becomes the
 * sum over every rank of the clique.
 */
int	cuda_comm_all_reduce_sum(struct cuda_comm *, int rank, void *buf,
	    size_t count, uint32_t type, cuda_stream_t, char **cause);
/* Send bytes from rank to peer, or receive them at rank from peer. */
int	cuda_comm_send(struct cuda_comm *, int rank, int peer, const void *buf,
	    size_t bytes, cuda_stream_t, char **cause);
int	cuda_comm_recv(struct cuda_comm *, int rank, int peer, void *buf,
	    size_t bytes, cuda_stream_t, char **cause);

#endif
