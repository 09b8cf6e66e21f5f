/* graph.c: per-rank CUDA graphs of decode iterations (graph.h). */

#include "config.h"

#include <string.h>

#include <cuda_runtime_api.h>

#include "graph.h"
#include "util.h"

/* Put a CUDA runtime error into cause; true when there was one. */
static int
graph_failed(cudaError_t e, const char *what, int rank, char **cause)
{
	if (e == cudaSuccess)
		return (0);
	set_cause(cause, "cuda: %s (rank %d): %s", what, rank,
	    cudaGetErrorString(e));
	return (1);
}

/* Destroy a slot's graphs; it keeps its shape. */
void
cuda_graph_drop(struct cuda_graph *g)
{
	int	i;

	for (i = 0; i < g->n_ranks; i++)
		if (g->exec[i] != NULL)
			cudaGraphExecDestroy(g->exec[i]);
	memset(g->exec, 0, sizeof g->exec);
	g->n_ranks = 0;
}

/* Destroy every slot's graphs. */
void
cuda_graphs_free(struct cuda_graphs *gs)
{
	int	i;

	for (i = 0; i < CUDA_GRAPH_SLOTS; i++)
		cuda_graph_drop(&gs->slot[i]);
}

/* The slot of a shape: its own, else a free or the least recently used. */
struct cuda_graph *
cuda_graph_slot(struct cuda_graphs *gs, int batch, uint32_t max_blocks,
    const void *pool)
{
	struct cuda_graph	*g, *old = &gs->slot[0];
	int			 i;

	for (i = 0; i < CUDA_GRAPH_SLOTS; i++) {
		g = &gs->slot[i];
		if (g->batch == batch && g->max_blocks == max_blocks &&
		    g->pool == pool) {
			g->last = ++gs->clock;
			return (g);
		}
		if (g->last < old->last)
			old = g;
	}
	cuda_graph_drop(old);
	memset(old, 0, sizeof *old);
	old->batch = batch;
	old->max_blocks = max_blocks;
	old->pool = pool;
	old->last = ++gs->clock;
	return (old);
}

/* End the captures of ranks [0, n) and throw their graphs away. */
static void
discard_captures(const struct cuda_graph_ranks *rk, int n)
{
	cudaGraph_t	cg;
	int		i;

	for (i = 0; i < n; i++) {
		cg = NULL;
		cudaSetDevice(rk->devs[i]);
		cudaStreamEndCapture(rk->streams[i], &cg);
		if (cg != NULL)
			cudaGraphDestroy(cg);
	}
	cudaGetLastError();
}

/*
 * Start capturing on every rank's stream.  Thread-local mode: another
 * thread's CUDA calls (another model's engine) cannot spoil it, and an
 * unsafe call of this thread fails rather than runs.
 */
int
cuda_graph_capture_begin(const struct cuda_graph_ranks *rk, char **cause)
{
	int	i;

	for (i = 0; i < rk->n; i++) {
		if (graph_failed(cudaSetDevice(rk->devs[i]), "select device",
		    i, cause) || graph_failed(cudaStreamBeginCapture(
		    rk->streams[i], cudaStreamCaptureModeThreadLocal),
		    "begin decode graph capture", i, cause)) {
			discard_captures(rk, i);
			return (-1);
		}
	}
	return (0);
}

/*
 * End every rank's capture (all of them, even after a failure, so that no
 * stream is left capturing) and instantiate each rank's graph; cause is
 * set only for failures found here, not when queued_ok says the work
 * could not be queued.
 */
int
cuda_graph_capture_end(struct cuda_graph *g, const struct cuda_graph_ranks *rk,
    int queued_ok, char **cause)
{
	cudaGraph_t	cg[CUDA_GRAPH_MAX_RANKS];
	cudaError_t	e;
	int		i, rc = queued_ok ? 0 : -1;

	cuda_graph_drop(g);
	for (i = 0; i < rk->n; i++) {
		cg[i] = NULL;
		e = cudaSetDevice(rk->devs[i]);
		if (e == cudaSuccess)
			e = cudaStreamEndCapture(rk->streams[i], &cg[i]);
		if (rc == 0 && graph_failed(e, "end decode graph capture", i,
		    cause))
			rc = -1;
	}
	g->n_ranks = rk->n;
	for (i = 0; i < rk->n && rc == 0; i++) {
		cudaSetDevice(rk->devs[i]);
		if (graph_failed(cudaGraphInstantiate(&g->exec[i], cg[i], 0),
		    "instantiate decode graph", i, cause)) {
			g->exec[i] = NULL;
			rc = -1;
		}
	}
	for (i = 0; i < rk->n; i++)
		if (cg[i] != NULL)
			cudaGraphDestroy(cg[i]);
	if (rc != 0) {
		cuda_graph_drop(g);
		cudaGetLastError();
	}
	return (rc);
}

/*
 * Launch every rank's graph on its stream.  A collective in rank r's graph
 * waits on the device for the other ranks' graphs, launched right after.
 */
int
cuda_graph_launch(const struct cuda_graph *g, const struct cuda_graph_ranks *rk,
    char **cause)
{
	int	i;

	if (g->n_ranks != rk->n) {
		set_cause(cause, "cuda: decode graph of %d ranks launched on %d",
		    g->n_ranks, rk->n);
		return (-1);
	}
	for (i = 0; i < rk->n; i++) {
		if (graph_failed(cudaSetDevice(rk->devs[i]), "select device",
		    i, cause) || graph_failed(cudaGraphLaunch(g->exec[i],
		    rk->streams[i]), "launch decode graph", i, cause))
			return (-1);
	}
	return (0);
}
