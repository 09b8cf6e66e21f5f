/* backend.h: the interface a compute backend (cpu, cuda) implements. */
#ifndef PHASED_BACKEND_H
#define PHASED_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "model.h"

/*
 * The engine runs a model instance on a device group through these ops
 * only.  A model is loaded once on the host (model_load: hyperparameters,
 * tokenizer, mapped weights); a backend instance makes it runnable on its
 * devices (the CPU instance owns a thread pool; a GPU instance would
 * upload the weights).  KV pools belong to an instance and keep their
 * block bookkeeping on the host (struct kv_pool / kv_seq_reserve /
 * kv_seq_release work the same for every backend); only the storage and
 * the data movement are the backend's.  Every op returns -1 (or NULL)
 * with *cause on failure; ops marked optional may be NULL.
 */
struct backend_inst;
struct kv_xfer;		/* a KV transfer in flight (kv_copy_start) */

/* CUDA graphs where they pay: groups of one device (backend_cuda.c). */
#define BACKEND_GRAPHS_AUTO	(-1)

struct backend_config {
	const int	*devices;	/* cpu: CPU ids to pin to; gpu: ids */
	int		 n_devices;
	int		 n_threads;	/* cpu: threads; 0 = model opts, then all */
	int		 collectives;	/* gpu: NCCL even for one device */
	int		 graphs;	/* gpu: decode as CUDA graphs: 0, 1, AUTO */
	/*
	 * cpu: the CPUs of the model's other groups, whose cores this group
	 * may borrow while they are idle (see borrow); extra threads pinned
	 * to them are started parked.
	 */
	const int	*lend_devices;
	int		 n_lend;
};

struct backend_ops {
	const char	 *name;

	/* Create an instance of a loaded model on a device group. */
	struct backend_inst *(*create)(const struct model *,
			    const struct backend_config *, char **cause);
	/* Destroy an instance; its pools must have been freed. */
	void		(*destroy)(struct backend_inst *);
	/* Allocate a KV pool of n_blocks blocks in the instance's memory. */
	struct kv_pool	*(*kv_pool_create)(struct backend_inst *, uint32_t n_blocks,
			    char **cause);
	/* Free a pool made by kv_pool_create. */
	void		(*kv_pool_free)(struct backend_inst *, struct kv_pool *);
	/* One forward pass over a ragged batch, as model_forward() defines. */
	int		(*forward)(struct backend_inst *, struct kv_pool *,
			    struct fwd_batch *, char **cause);
	/*
	 * Copy src_seq's KV into the empty dst_seq (kv_seq_copy's contract),
	 * possibly between instances, e.g. from a prefill group to a decode
	 * group.  Optional: without it such a move is not offered.
	 */
	int		(*kv_copy)(struct backend_inst *dst,
			    struct kv_pool *dst_pool, struct kv_seq *dst_seq,
			    struct backend_inst *src, const struct kv_pool *src_pool,
			    const struct kv_seq *src_seq, char **cause);
	/*
	 * Start what kv_copy does without waiting for the data: dst_seq
	 * holds its blocks and tokens on return, and the backend orders
	 * the destination's later forward passes over those blocks after
	 * the data lands, but src_seq's blocks are still read until
	 * kv_xfer_poll says the transfer is done, so they must not be
	 * released or written before.  *xfer is NULL when the copy was
	 * done before returning.  On failure nothing is in flight and
	 * dst_seq is empty.  Optional (with kv_xfer_poll): without it
	 * kv_copy is used.
	 */
	int		(*kv_copy_start)(struct backend_inst *dst,
			    struct kv_pool *dst_pool, struct kv_seq *dst_seq,
			    struct backend_inst *src, const struct kv_pool *src_pool,
			    const struct kv_seq *src_seq, struct kv_xfer **xfer,
			    char **cause);
	/*
	 * Whether a transfer kv_copy_start began is over: 1 done, 0 still
	 * moving (never when wait is set: then it blocks until the end),
	 * -1 failed with *cause (nothing in flight any more; the
	 * destination's copy is not usable).  On 1 and -1 xfer is freed.
	 */
	int		(*kv_xfer_poll)(struct kv_xfer *xfer, int wait,
			    char **cause);
	/*
	 * Bytes of device memory the weights take on each device of the
	 * group, in its order, into per_device[0..max-1]; returns how many
	 * devices were filled.  Optional: without it (or 0) the weights are
	 * not in device memory.
	 */
	int		(*weight_bytes)(struct backend_inst *,
			    uint64_t *per_device, int max);
	/*
	 * Run the forward passes that follow on the group's own threads plus
	 * the first n_extra of its lend_devices (0: its own only); returns
	 * the threads now in use.  Results do not depend on the count.
	 * Optional: without it no cores are lent.
	 */
	int		(*borrow)(struct backend_inst *, int n_extra);
	/*
	 * Read every weight matrix a decode step reads once, without
	 * arithmetic, where the forward pass would (model_read_weights);
	 * returns the bytes read.  Optional: a benchmark's measure of how
	 * close decode comes to the memory's pace.
	 */
	uint64_t	(*read_weights)(struct backend_inst *);
};

extern const struct backend_ops backend_cpu_ops;

/*
 * The backend called name ("cpu", "cuda"), or NULL when not built; in
 * libphased_core, which links every backend that was built.
 */
const struct backend_ops *backend_find(const char *name);

#endif
