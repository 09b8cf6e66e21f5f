/*
 * graph.h: decode iterations of the CUDA backend as CUDA graphs, one graph
 * per rank of a group, kept per shape.
 *
 * A shape is a batch size, a block table width and the KV pool the work
 * reads; a struct cuda_graph holds, for one shape, each rank's executable
 * graph, captured on that rank's stream (NCCL collectives included: every
 * rank's capture is open while the collectives of all ranks are queued in
 * one NCCL group, so each rank's graph records its own share) and launched
 * on it, rank after rank.  A graph also remembers the buffer generation it
 * was captured at, so the backend drops it when a buffer it points into
 * has moved.  Every call returns 0, or -1 with *cause.
 */
#ifndef PHASED_CUDA_GRAPH_H
#define PHASED_CUDA_GRAPH_H

#include <stdint.h>

#include <cuda_runtime_api.h>

/* Most ranks of a group, shapes kept per instance. */
#define CUDA_GRAPH_MAX_RANKS	8
#define CUDA_GRAPH_SLOTS	16

struct cuda_graph {
	int		 batch;		/* sequences, one token each */
	uint32_t	 max_blocks;	/* block table width */
	const void	*pool;		/* the KV pool it reads and writes */
	uint64_t	 gen;		/* buffer generation of its capture */
	uint64_t	 last;		/* use stamp, for replacement */
	int		 n_ranks;	/* 0: seen, not captured */
	cudaGraphExec_t	 exec[CUDA_GRAPH_MAX_RANKS];
};

struct cuda_graphs {
	struct cuda_graph	 slot[CUDA_GRAPH_SLOTS];
	uint64_t		 clock;
	uint64_t		 n_captured;	/* shapes captured */
	uint64_t		 n_replayed;	/* iterations replayed */
	uint64_t		 n_dropped;	/* graphs dropped as stale */
};

/* The ranks a graph runs on: device and stream of each. */
struct cuda_graph_ranks {
	int		 n;
	const int	*devs;
	cudaStream_t	*streams;
};

/*
 * The slot of a shape, stamped as used: its own, else a free or the least
 * recently used one (its graphs destroyed), reset to the shape.
 */
struct cuda_graph *cuda_graph_slot(struct cuda_graphs *, int batch,
	    uint32_t max_blocks, const void *pool);
/* Destroy a slot's graphs; it stays assigned to its shape, uncaptured. */
void	cuda_graph_drop(struct cuda_graph *);
/* Destroy every slot's graphs. */
void	cuda_graphs_free(struct cuda_graphs *);

/* Start capturing every rank's stream (thread-local mode). */
int	cuda_graph_capture_begin(const struct cuda_graph_ranks *, char **cause);
/*
 * End every rank's capture and, when the work was queued without error
 * (queued_ok), instantiate the graphs into g; on any failure g holds none
 * and nothing captured has run.
 */
int	cuda_graph_capture_end(struct cuda_graph *,
	    const struct cuda_graph_ranks *, int queued_ok, char **cause);
/* Launch g's graph on every rank's stream, rank after rank. */
int	cuda_graph_launch(const struct cuda_graph *,
	    const struct cuda_graph_ranks *, char **cause);

#endif
