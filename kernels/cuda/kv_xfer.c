/* kv_xfer.c: KV transfers between CUDA instances that run beside compute. */

#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kv_xfer.h"
#include "kvcache.h"
#include "log.h"
#include "model.h"
#include "util.h"

/* One stream's completion event. */
struct kvx_event {
	int		 dev;
	int		 dst_rank;	/* -1: a source stream */
	cudaEvent_t	 ev;
};

struct kv_xfer {
	struct kv_xfer		*next;
	struct kvx_list		*list;		/* NULL: not linked */
	const struct kv_pool	*pool;		/* the destination's */
	uint8_t			*map;		/* bit per block of pool written */
	struct kvx_event	 ev[2 * KVX_MAX_RANKS];
	int			 n_ev;
};

/* Set up an empty list. */
void
kvx_list_init(struct kvx_list *l)
{
	pthread_mutex_init(&l->mu, NULL);
	l->head = NULL;
}

/* Unlink what is left (waiting for it) and free the list's lock. */
void
kvx_list_free(struct kvx_list *l)
{
	struct kv_xfer	*x;
	int		 i;

	pthread_mutex_lock(&l->mu);
	while ((x = l->head) != NULL) {
		/* Its owner polls it later; it only leaves the list. */
		for (i = 0; i < x->n_ev; i++)
			if (cudaSetDevice(x->ev[i].dev) == cudaSuccess)
				cudaEventSynchronize(x->ev[i].ev);
		l->head = x->next;
		x->list = NULL;
	}
	pthread_mutex_unlock(&l->mu);
	pthread_mutex_destroy(&l->mu);
}

/* A transfer into the blocks dst_seq holds in dst_pool, linked nowhere. */
struct kv_xfer *
kvx_new(const struct kv_pool *dst_pool, const struct kv_seq *dst_seq)
{
	struct kv_xfer	*x = xcalloc(1, sizeof *x);
	uint32_t	 i, b;

	x->pool = dst_pool;
	x->map = xcalloc((dst_pool->n_blocks + 7) / 8, 1);
	for (i = 0; i < dst_seq->n_blocks; i++) {
		b = dst_seq->blocks[i];
		x->map[b / 8] |= (uint8_t)(1u << (b % 8));
	}
	return (x);
}

/* Record the transfer's completion on stream s of device dev. */
int
kvx_record(struct kv_xfer *x, int dev, cudaStream_t s, int dst_rank,
    char **cause)
{
	struct kvx_event	*e;
	cudaError_t		 err;

	if (x->n_ev == 2 * KVX_MAX_RANKS) {
		set_cause(cause, "cuda: kv transfer over more than %d streams",
		    2 * KVX_MAX_RANKS);
		return (-1);
	}
	e = &x->ev[x->n_ev];
	e->dev = dev;
	e->dst_rank = dst_rank;
	if ((err = cudaSetDevice(dev)) != cudaSuccess ||
	    (err = cudaEventCreateWithFlags(&e->ev,
	    cudaEventDisableTiming)) != cudaSuccess) {
		set_cause(cause, "cuda: kv transfer event: %s",
		    cudaGetErrorString(err));
		return (-1);
	}
	x->n_ev++;
	if ((err = cudaEventRecord(e->ev, s)) != cudaSuccess) {
		set_cause(cause, "cuda: record kv transfer event: %s",
		    cudaGetErrorString(err));
		return (-1);
	}
	return (0);
}

/*
 * Make stream s (device dev) wait for what was queued so far on stream
 * from (device from_dev).
 */
int
kvx_after(int dev, cudaStream_t s, int from_dev, cudaStream_t from,
    char **cause)
{
	cudaEvent_t	ev;
	cudaError_t	err;

	/*
	 * The event belongs to the recording stream's device; it may be
	 * destroyed once waited for (the wait keeps what it needs).
	 */
	if ((err = cudaSetDevice(from_dev)) != cudaSuccess ||
	    (err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) !=
	    cudaSuccess) {
		set_cause(cause, "cuda: kv transfer order: %s",
		    cudaGetErrorString(err));
		return (-1);
	}
	if ((err = cudaEventRecord(ev, from)) == cudaSuccess &&
	    (err = cudaSetDevice(dev)) == cudaSuccess)
		err = cudaStreamWaitEvent(s, ev, 0);
	cudaEventDestroy(ev);
	if (err != cudaSuccess) {
		set_cause(cause, "cuda: kv transfer order: %s",
		    cudaGetErrorString(err));
		return (-1);
	}
	return (0);
}

/* Link the transfer to its destination's list. */
void
kvx_link(struct kvx_list *l, struct kv_xfer *x)
{
	pthread_mutex_lock(&l->mu);
	x->next = l->head;
	l->head = x;
	x->list = l;
	pthread_mutex_unlock(&l->mu);
}

/* Whether the transfer writes a block of a batch entry's sequence. */
static int
touches(const struct kv_xfer *x, const struct fwd_batch *b)
{
	const struct fwd_entry	*e;
	uint32_t		 i, n, blk;
	int			 k;

	for (k = 0; k < b->n_seqs; k++) {
		e = &b->entries[k];
		n = kv_pool_blocks_for(x->pool, e->seq->n_tokens +
		    (uint32_t)e->n_tokens);
		for (i = 0; i < n && i < e->seq->n_blocks; i++) {
			blk = e->seq->blocks[i];
			if (blk < x->pool->n_blocks &&
			    (x->map[blk / 8] & (1u << (blk % 8))))
				return (1);
		}
	}
	return (0);
}

/*
 * Make rank's compute stream wait for the linked transfers into pool that
 * write a block the batch uses: a moved sequence, or a block of one that
 * was freed (its request cancelled) and handed out again.
 */
int
kvx_order(struct kvx_list *l, const struct kv_pool *pool,
    const struct fwd_batch *b, int rank, int dev, cudaStream_t s,
    char **cause)
{
	struct kv_xfer	*x;
	cudaError_t	 err = cudaSuccess;
	int		 i;

	pthread_mutex_lock(&l->mu);
	for (x = l->head; x != NULL && err == cudaSuccess; x = x->next) {
		if (x->pool != pool || !touches(x, b))
			continue;
		for (i = 0; i < x->n_ev && err == cudaSuccess; i++) {
			if (x->ev[i].dst_rank != rank)
				continue;
			if ((err = cudaSetDevice(dev)) == cudaSuccess)
				err = cudaStreamWaitEvent(s, x->ev[i].ev, 0);
		}
	}
	pthread_mutex_unlock(&l->mu);
	if (err != cudaSuccess) {
		set_cause(cause, "cuda: wait for a kv transfer: %s",
		    cudaGetErrorString(err));
		return (-1);
	}
	return (0);
}

/* Unlink and free a transfer whose events need nothing more. */
static void
kvx_free(struct kv_xfer *x)
{
	struct kv_xfer	**pp;
	int		  i;

	if (x->list != NULL) {
		pthread_mutex_lock(&x->list->mu);
		for (pp = &x->list->head; *pp != NULL; pp = &(*pp)->next)
			if (*pp == x) {
				*pp = x->next;
				break;
			}
		pthread_mutex_unlock(&x->list->mu);
	}
	for (i = 0; i < x->n_ev; i++)
		if (cudaSetDevice(x->ev[i].dev) == cudaSuccess)
			cudaEventDestroy(x->ev[i].ev);
	free(x->map);
	free(x);
}

/* 1: done, 0: still moving, -1: failed; on 1 and -1 x is freed. */
int
kvx_poll(struct kv_xfer *x, int wait, char **cause)
{
	cudaError_t	err = cudaSuccess;
	int		i, rc = 1;

	for (i = 0; i < x->n_ev; i++) {
		if ((err = cudaSetDevice(x->ev[i].dev)) != cudaSuccess)
			break;
		err = wait ? cudaEventSynchronize(x->ev[i].ev) :
		    cudaEventQuery(x->ev[i].ev);
		if (err == cudaErrorNotReady)
			return (0);
		if (err != cudaSuccess)
			break;
	}
	if (err != cudaSuccess) {
		set_cause(cause, "cuda: kv transfer: %s",
		    cudaGetErrorString(err));
		/* Nothing may still write or read the blocks once we return. */
		for (i = 0; i < x->n_ev; i++)
			if (cudaSetDevice(x->ev[i].dev) == cudaSuccess)
				cudaEventSynchronize(x->ev[i].ev);
		rc = -1;
	}
	kvx_free(x);
	return (rc);
}

/* Wait for whatever of the transfer was queued, unlink and free it. */
void
kvx_abort(struct kv_xfer *x)
{
	int	i;

	for (i = 0; i < x->n_ev; i++)
		if (cudaSetDevice(x->ev[i].dev) == cudaSuccess)
			cudaEventSynchronize(x->ev[i].ev);
	kvx_free(x);
}
