/* backend_cpu.c: the CPU backend: a thread pool per instance, host KV pools. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "kvcache.h"
#include "model.h"
#include "threadpool.h"
#include "util.h"

/* Most threads a CPU instance starts. */
#define CPU_MAX_THREADS	1024

struct backend_inst {
	const struct model	*model;
	struct threadpool	*tp;
	int			 n_own;		/* threads of the group itself */
};

/* Create a CPU instance: a thread pool, optionally pinned to CPUs. */
static struct backend_inst *
cpu_create(const struct model *m, const struct backend_config *cfg,
    char **cause)
{
	struct backend_inst	*bi;
	const int		*cpus = NULL;
	int			*all = NULL;
	long			 online;
	int			 n, n_lend = 0;

	n = cfg != NULL ? cfg->n_threads : 0;
	if (n == 0)
		n = model_opts(m)->n_threads;
	if (n == 0 && cfg != NULL && cfg->n_devices > 0)
		n = cfg->n_devices;
	if (n == 0) {
		online = sysconf(_SC_NPROCESSORS_ONLN);
		n = online > 0 ? (online < CPU_MAX_THREADS ? (int)online :
		    CPU_MAX_THREADS) : 1;
	}
	if (n < 1 || n > CPU_MAX_THREADS) {
		set_cause(cause, "cpu threads %d out of range 1..%d", n,
		    CPU_MAX_THREADS);
		return (NULL);
	}
	if (cfg != NULL && cfg->n_devices > 0) {
		if (cfg->n_devices != n) {
			set_cause(cause, "%d cpus given for %d threads",
			    cfg->n_devices, n);
			return (NULL);
		}
		cpus = cfg->devices;
		/* Borrowable threads follow the group's own, pinned, parked. */
		if (cfg->n_lend > 0 && cfg->lend_devices != NULL &&
		    n + cfg->n_lend <= CPU_MAX_THREADS) {
			n_lend = cfg->n_lend;
			all = xcalloc((size_t)(n + n_lend), sizeof *all);
			memcpy(all, cpus, (size_t)n * sizeof *all);
			memcpy(all + n, cfg->lend_devices,
			    (size_t)n_lend * sizeof *all);
			cpus = all;
		}
	}

	bi = xcalloc(1, sizeof *bi);
	bi->model = m;
	bi->n_own = n;
	bi->tp = threadpool_create(n + n_lend, cpus, cause);
	free(all);
	if (bi->tp == NULL) {
		free(bi);
		return (NULL);
	}
	threadpool_set_active(bi->tp, n);
	return (bi);
}

/* Destroy a CPU instance. */
static void
cpu_destroy(struct backend_inst *bi)
{
	if (bi == NULL)
		return;
	threadpool_destroy(bi->tp);
	free(bi);
}

/* A KV pool in host memory. */
static struct kv_pool *
cpu_kv_pool_create(struct backend_inst *bi, uint32_t n_blocks, char **cause)
{
	return (model_kv_pool_create(bi->model, n_blocks, cause));
}

/* Free a host KV pool. */
static void
cpu_kv_pool_free(struct backend_inst *bi, struct kv_pool *p)
{
	kv_pool_free(p);
}

/* Forward pass on the instance's threads. */
static int
cpu_forward(struct backend_inst *bi, struct kv_pool *p, struct fwd_batch *b,
    char **cause)
{
	return (model_forward(bi->model, p, b, bi->tp, cause));
}

/* Copy a sequence's KV between host pools. */
static int
cpu_kv_copy(struct backend_inst *dst, struct kv_pool *dp, struct kv_seq *ds,
    struct backend_inst *src, const struct kv_pool *sp,
    const struct kv_seq *ss, char **cause)
{
	return (kv_seq_copy(dp, ds, sp, ss, cause));
}

/* Use the group's own threads plus n_extra borrowed ones. */
static int
cpu_borrow(struct backend_inst *bi, int n_extra)
{
	return (threadpool_set_active(bi->tp, bi->n_own + n_extra));
}

/* Read the weights of one decode step on the instance's threads. */
static uint64_t
cpu_read_weights(struct backend_inst *bi)
{
	return (model_read_weights(bi->model, bi->tp));
}

const struct backend_ops backend_cpu_ops = {
	.name = "cpu",
	.create = cpu_create,
	.destroy = cpu_destroy,
	.kv_pool_create = cpu_kv_pool_create,
	.kv_pool_free = cpu_kv_pool_free,
	.forward = cpu_forward,
	.kv_copy = cpu_kv_copy,
	.borrow = cpu_borrow,
	.read_weights = cpu_read_weights,
};
