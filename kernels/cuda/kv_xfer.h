/* kv_xfer.h: KV transfers between CUDA instances that run beside compute. */
#ifndef PHASED_KV_XFER_H
#define PHASED_KV_XFER_H

#include <pthread.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kvcache.h"
#include "model.h"

/* Most devices on either side of a transfer (as CUDA_MAX_RANKS). */
#define KVX_MAX_RANKS	8

/*
 * A transfer is queued on transfer streams (one per device of each
 * instance, apart from the compute streams) behind an event of the
 * source's compute streams, so neither side's host thread waits for it.
 * Its completion is an event on each stream that took part: the
 * destination's compute streams wait for the destination's events before
 * any forward pass that touches one of the blocks it writes, and the
 * source's blocks stay the caller's until kvx_poll says the whole transfer
 * is done.
 */
struct kv_xfer;

/* The transfers still linked to a destination instance (see kvx_order). */
struct kvx_list {
	pthread_mutex_t	 mu;
	struct kv_xfer	*head;
};

/* Set up an empty list. */
void		 kvx_list_init(struct kvx_list *);
/* Unlink what is left (waiting for it) and free the list's lock. */
void		 kvx_list_free(struct kvx_list *);

/* A transfer into the blocks dst_seq holds in dst_pool, linked nowhere. */
struct kv_xfer	*kvx_new(const struct kv_pool *dst_pool,
		    const struct kv_seq *dst_seq);
/*
 * Record the transfer's completion on stream s of device dev; dst_rank is
 * the destination rank whose forward passes wait for it, or -1 for a
 * source stream.
 */
int		 kvx_record(struct kv_xfer *, int dev, cudaStream_t s,
		    int dst_rank, char **cause);
/* Make stream s (device dev) wait for what was queued so far on from. */
int		 kvx_after(int dev, cudaStream_t s, int from_dev,
		    cudaStream_t from, char **cause);
/* Link the transfer to its destination's list. */
void		 kvx_link(struct kvx_list *, struct kv_xfer *);
/*
 * Make rank's compute stream s (device dev) wait for every linked transfer
 * into pool that writes a block one of the batch's sequences uses.
 */
int		 kvx_order(struct kvx_list *, const struct kv_pool *pool,
		    const struct fwd_batch *, int rank, int dev, cudaStream_t s,
		    char **cause);
/*
 * 1 when the transfer is done, 0 while it is still moving (never with
 * wait), -1 with *cause when it failed; on 1 and -1 it is unlinked and
 * freed.
 */
int		 kvx_poll(struct kv_xfer *, int wait, char **cause);
/* Wait for whatever of the transfer was queued, unlink and free it. */
void		 kvx_abort(struct kv_xfer *);

#endif
