/* backend_cuda.c: the CUDA backend: weights, KV pages, forward pass on GPU. */

#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "backend_cuda.h"
#include "comm.h"
#include "cuda_kernels.h"
#include "gguf.h"
#include "graph.h"
#include "kv_xfer.h"
#include "kvcache.h"
#include "log.h"
#include "model.h"
#include "tensor_type.h"
#include "util.h"

/*
 * An instance lives on one device: the model's weights are uploaded once
 * as they are in the GGUF file (quantized blocks stay quantized, the
 * matrix kernels read them directly), norms as F32.  All work of an
 * instance is queued on its own stream, in order, so no call inside a
 * forward pass waits for the device except the final copy of the logits.
 * Per-call metadata (tokens, positions, KV slots, block tables, attention
 * descriptors) is gathered into one pinned host buffer and sent with one
 * asynchronous copy; since every forward ends by synchronizing the stream,
 * the buffer is free again when the next call fills it.
 *
 * KV pools keep their block bookkeeping on the host in a struct kv_pool
 * with no host storage (data is NULL); the keys and values themselves are
 * F16 on the device, per layer [block][slot][kv_head][head_dim] (the
 * kernels' layout, kernel_defs.h), so blocks are KV_BLOCK tokens.
 *
 * A group of N devices runs the model tensor-parallel (Megatron style),
 * one rank per device, all driven from the engine thread: each rank holds
 * n_head / N query heads and n_head_kv / N KV heads (Q, K, V split by
 * output rows, i.e. columns of the product), n_ff / N FFN columns (gate
 * and up split the same way), and the matching input slices of the
 * attention output and FFN down weights (split by their rows in the
 * x W convention: a slice of every GGUF row, on quantization block
 * boundaries).  Each rank's partial output of those two products is
 * summed by one NCCL all-reduce (F32), after which every rank holds the
 * whole residual stream.  Norms and the token embedding are replicated on
 * every rank, so no collective is needed before the first layer; the
 * output norm and head live on rank 0 only, which computes the logits.
 * Each rank's KV pages hold its own KV heads.  See HACKING for what
 * crosses the interconnect per token.
 */

/* Tells a pool made here from any other struct kv_pool. */
#define CUDA_POOL_MAGIC	0x63756461u	/* "cuda" */

/*
 * CUDA graphs of decode iterations: batches of one token per sequence of
 * power-of-two sizes up to this, block tables rounded up to a power of
 * two, at most CUDA_GRAPH_SLOTS shapes kept (the oldest goes; graph.h).
 */
#define CUDA_GRAPH_MAX_BATCH	64

/* Most devices in a tensor-parallel group. */
#define CUDA_MAX_RANKS	8
_Static_assert(CUDA_MAX_RANKS <= CUDA_GRAPH_MAX_RANKS,
    "a decode graph holds one graph per rank");

/* Smallest row capacity of the activation buffers (grown on demand). */
#define CUDA_MIN_ROWS	64

/*
 * Most bytes of attention workspace.  The kernels split contexts only for
 * batches too small to fill the device, so a large batch that would need
 * more gets none and runs unsplit.
 */
#define CUDA_ATTN_WS_MAX	((size_t)64 << 20)

/* A weight matrix on the device, in its GGUF type. */
struct cuda_mat {
	void		*d;
	uint32_t	 type;
	int		 n_in;		/* elements per row */
	int		 n_out;		/* rows */
};

struct cuda_layer {
	struct cuda_mat	 wq, wk, wv, wo, w_gate, w_up, w_down;
	float		*attn_norm;
	float		*ffn_norm;
};

/* A KV pool: host bookkeeping first, so the two convert freely. */
struct cuda_pool {
	struct kv_pool	 p;
	uint32_t	 magic;
	struct backend_inst *bi;	/* the instance that owns the memory */
	uint16_t	*kv[CUDA_MAX_RANKS]; /* per rank, per layer: K, then V */
	size_t		 cache_elems;	/* halves in one layer's K (or V), per rank */
};

/* One device of an instance: its share of the weights and its buffers. */
struct cuda_rank {
	int			 dev;
	cudaStream_t		 stream;
	struct cuda_blas	*blas;

	struct cuda_mat		 tok_embd;	/* replicated */
	struct cuda_mat		 output;	/* rank 0; aliases tok_embd when tied */
	float			*output_norm;	/* rank 0 */
	struct cuda_layer	*layers;
	size_t			 weight_bytes;	/* device memory of the above */

	/* Activations for up to cap_rows stacked tokens. */
	int			 cap_rows;
	float			*act;		/* one allocation for all below */
	float			*x, *xb, *q, *k, *v, *att, *hb, *hb2;

	uint8_t			*d_meta;	/* cap_meta bytes */

	void			*attn_ws;
	size_t			 attn_ws_bytes;
};

struct backend_inst {
	const struct model	*m;
	int			 n_ranks;
	struct cuda_rank	 r[CUDA_MAX_RANKS];
	struct cuda_comm	*comm;		/* NULL: one rank, no collectives */
	int			 nh, nkv, ff;	/* per rank: heads, kv heads, ffn */

	/* Logits of up to cap_out rows, on rank 0 and pinned host. */
	int			 cap_out;
	float			*d_out;		/* xo [cap_out][n_embd], then logits */
	float			*h_logits;

	/* Per-call metadata, pinned host staging (each rank has a copy). */
	size_t			 cap_meta;
	uint8_t			*h_meta;

	/*
	 * KV transfer into this instance from another group: an NCCL clique
	 * of the source's ranks then this one's, kept for the source's
	 * devices (xfer_devs); xfer_refused when NCCL could not make it
	 * (devices shared by the two groups), so peer copies are used.
	 */
	struct cuda_comm	*xfer;
	int			 xfer_devs[CUDA_MAX_RANKS];
	int			 xfer_refused;
	uint64_t		 n_xfer_nccl, n_xfer_peer;
	/*
	 * Transfer streams, one per rank, made on first use: sends and
	 * copies out of this instance and receives into it go there, apart
	 * from compute; kvx holds the transfers into it not yet polled done.
	 */
	cudaStream_t		 xs[CUDA_MAX_RANKS];
	struct kvx_list		 kvx;

	/*
	 * Decode graphs, one per rank: captured on the second iteration of
	 * a shape, replayed after.  buf_gen changes whenever a buffer a
	 * graph points into is reallocated or a KV pool goes.
	 */
	int			 graphs;
	struct cuda_graphs	 gr;
	uint64_t		 buf_gen;
};

/* Put a CUDA runtime error into cause; true when there was one. */
static int
cu_failed(cudaError_t e, const char *what, char **cause)
{
	if (e == cudaSuccess)
		return (0);
	set_cause(cause, "cuda: %s: %s", what, cudaGetErrorString(e));
	return (1);
}

/* Put a kernel launcher's error into cause; true when there was one. */
static int
kr_failed(int r, const char *what, char **cause)
{
	if (r == 0)
		return (0);
	set_cause(cause, "cuda: %s: %s", what, cuda_kernels_strerror(r));
	return (1);
}

#define CU(call, what) do {						\
	if (cu_failed((call), (what), cause))				\
		goto fail;						\
} while (0)
#define KR(call, what) do {						\
	if (kr_failed((call), (what), cause))				\
		goto fail;						\
} while (0)

/* Whether the matrix kernels take weights of this GGUF type. */
static int
cuda_type_ok(uint32_t type)
{
	switch (type) {
	case TT_F32:
	case TT_F16:
	case TT_BF16:
	case TT_Q8_0:
	case TT_Q4_0:
	case TT_Q4_K:
	case TT_Q6_K:
	case TT_Q4_1:
	case TT_Q5_0:
	case TT_Q5_1:
	case TT_IQ4_NL:
	case TT_Q2_K:
	case TT_Q3_K:
	case TT_Q5_K:
	case TT_IQ4_XS:
		return (1);
	}
	return (0);
}

/* How a weight is shared out among the ranks of a group. */
enum cuda_split {
	SPLIT_NONE,		/* every rank holds all of it */
	SPLIT_OUT,		/* rank r holds rows [r, r + 1) * n_out / N */
	SPLIT_IN		/* rank r holds that slice of every row's n_in */
};

/* Copy n bytes of host data to new device memory on the current device. */
static int
upload_bytes(const void *h, size_t n, void **d, const char *what,
    char **cause)
{
	if (cu_failed(cudaMalloc(d, n), what, cause))
		return (-1);
	if (cu_failed(cudaMemcpy(*d, h, n, cudaMemcpyHostToDevice), what,
	    cause)) {
		cudaFree(*d);
		*d = NULL;
		return (-1);
	}
	return (0);
}

/*
 * Upload rank's part of a weight of n_out rows of n_in (model_load checked
 * the shape) as a matrix of its own: rows as they are in the GGUF file
 * for SPLIT_OUT, a repacked copy of each row's slice for SPLIT_IN, which
 * must fall on the type's block boundaries.
 */
static int
upload_mat(struct backend_inst *bi, int rank, const char *name, int n_in,
    int n_out, enum cuda_split split, struct cuda_mat *cm, char **cause)
{
	const struct gguf_tensor	*t;
	const struct tensor_type_info	*ti;
	const int			 N = bi->n_ranks;
	const uint8_t			*src;
	uint8_t				*h;
	uint64_t			 row, part;
	char				 what[160];
	int				 i, rc;

	t = gguf_find_tensor(bi->m->gguf, name);
	if (t == NULL) {
		set_cause(cause, "cuda: missing tensor '%s'", name);
		return (-1);
	}
	if (!cuda_type_ok(t->type) || (ti = tensor_type_get(t->type)) == NULL) {
		set_cause(cause, "cuda: tensor '%s': type %s not supported by "
		    "the cuda kernels", name, tensor_type_name(t->type));
		return (-1);
	}
	cm->type = t->type;
	cm->n_in = split == SPLIT_IN ? n_in / N : n_in;
	cm->n_out = split == SPLIT_OUT ? n_out / N : n_out;
	row = tensor_row_bytes(ti, n_in);
	snprintf(what, sizeof what, "upload '%s' (%" PRIu64 " bytes)", name,
	    t->nbytes);
	if (split == SPLIT_NONE || N == 1)
		rc = upload_bytes(t->data, t->nbytes, &cm->d, what, cause);
	else if (split == SPLIT_OUT)
		rc = upload_bytes((const uint8_t *)t->data + (size_t)rank *
		    cm->n_out * row, (size_t)cm->n_out * row, &cm->d, what,
		    cause);
	else {
		part = tensor_row_bytes(ti, cm->n_in);
		if ((n_in % N) != 0 || part == 0) {
			set_cause(cause, "cuda: tensor '%s': rows of %d split "
			    "%d ways are not whole %s blocks of %u", name, n_in,
			    N, ti->name, ti->block_elems);
			return (-1);
		}
		h = xreallocarray(NULL, n_out, part);
		src = (const uint8_t *)t->data + (size_t)rank * part;
		for (i = 0; i < n_out; i++)
			memcpy(h + (size_t)i * part, src + (size_t)i * row, part);
		rc = upload_bytes(h, (size_t)n_out * part, &cm->d, what, cause);
		free(h);
	}
	if (rc == 0)
		bi->r[rank].weight_bytes += split == SPLIT_NONE ? t->nbytes :
		    (size_t)cm->n_out * tensor_row_bytes(ti, cm->n_in);
	return (rc);
}

/* Copy n host floats (a norm, already F32 in the model) to the device. */
static int
upload_floats(struct cuda_rank *rk, const float *h, size_t n, float **d,
    const char *name, char **cause)
{
	char	what[128];

	snprintf(what, sizeof what, "upload '%s'", name);
	if (upload_bytes(h, n * sizeof(float), (void **)d, what, cause) != 0)
		return (-1);
	rk->weight_bytes += n * sizeof(float);
	return (0);
}

/* Upload rank's share of every weight of the model (device is current). */
static int
upload_weights(struct backend_inst *bi, int rank, char **cause)
{
	const struct model	*m = bi->m;
	const struct model_info	*mi = &m->info;
	struct cuda_rank	*rk = &bi->r[rank];
	const int		 dim = mi->n_embd, ff = mi->n_ff;
	const int		 kvd = mi->head_dim * mi->n_head_kv;
	struct cuda_layer	*l;
	char			 name[64];
	uint32_t		 n;

	if (upload_mat(bi, rank, "token_embd.weight", dim, mi->n_vocab,
	    SPLIT_NONE, &rk->tok_embd, cause) != 0)
		return (-1);
	if (rank == 0) {
		if (upload_floats(rk, m->output_norm, dim, &rk->output_norm,
		    "output_norm.weight", cause) != 0)
			return (-1);
		if (m->output != m->tok_embd) {
			if (upload_mat(bi, rank, "output.weight", dim,
			    mi->n_vocab, SPLIT_NONE, &rk->output, cause) != 0)
				return (-1);
		} else
			rk->output = rk->tok_embd;
	}

	rk->layers = xcalloc(mi->n_layers, sizeof *rk->layers);
	for (n = 0; n < mi->n_layers; n++) {
		l = &rk->layers[n];
#define MAT(field, what, n_in, n_out, split) do {			\
	snprintf(name, sizeof name, "blk.%u.%s.weight", n, what);	\
	if (upload_mat(bi, rank, name, n_in, n_out, split, &l->field,	\
	    cause) != 0)						\
		return (-1);						\
} while (0)
#define VEC(field, what) do {						\
	snprintf(name, sizeof name, "blk.%u.%s.weight", n, what);	\
	if (upload_floats(rk, m->layers[n].field, dim, &l->field, name,	\
	    cause) != 0)						\
		return (-1);						\
} while (0)
		VEC(attn_norm, "attn_norm");
		MAT(wq, "attn_q", dim, dim, SPLIT_OUT);
		MAT(wk, "attn_k", dim, kvd, SPLIT_OUT);
		MAT(wv, "attn_v", dim, kvd, SPLIT_OUT);
		MAT(wo, "attn_output", dim, dim, SPLIT_IN);
		VEC(ffn_norm, "ffn_norm");
		MAT(w_gate, "ffn_gate", dim, ff, SPLIT_OUT);
		MAT(w_up, "ffn_up", dim, ff, SPLIT_OUT);
		MAT(w_down, "ffn_down", ff, dim, SPLIT_IN);
#undef MAT
#undef VEC
	}
	return (0);
}

/* Free a rank's weights and buffers (its device must be current). */
static void
free_rank_memory(const struct model_info *mi, struct cuda_rank *rk)
{
	struct cuda_layer	*l;
	uint32_t		 n;

	if (rk->layers != NULL) {
		for (n = 0; n < mi->n_layers; n++) {
			l = &rk->layers[n];
			cudaFree(l->wq.d);
			cudaFree(l->wk.d);
			cudaFree(l->wv.d);
			cudaFree(l->wo.d);
			cudaFree(l->w_gate.d);
			cudaFree(l->w_up.d);
			cudaFree(l->w_down.d);
			cudaFree(l->attn_norm);
			cudaFree(l->ffn_norm);
		}
		free(rk->layers);
		rk->layers = NULL;
	}
	if (rk->output.d != rk->tok_embd.d)
		cudaFree(rk->output.d);
	cudaFree(rk->tok_embd.d);
	cudaFree(rk->output_norm);
	cudaFree(rk->act);
	cudaFree(rk->d_meta);
	cudaFree(rk->attn_ws);
}

/* Destroy an instance; its pools must have been freed. */
static void
cuda_destroy(struct backend_inst *bi)
{
	struct cuda_rank	*rk;
	int			 i;

	if (bi == NULL)
		return;
	kvx_list_free(&bi->kvx);
	for (i = 0; i < bi->n_ranks; i++) {
		if (bi->xs[i] != NULL && cudaSetDevice(bi->r[i].dev) ==
		    cudaSuccess)
			cudaStreamDestroy(bi->xs[i]);
	}
	cuda_graphs_free(&bi->gr);
	for (i = 0; i < bi->n_ranks; i++) {
		rk = &bi->r[i];
		if (cudaSetDevice(rk->dev) != cudaSuccess) {
			log_warnx("cuda: cannot select device %d to free it",
			    rk->dev);
			continue;
		}
		if (rk->stream != NULL)
			cudaStreamSynchronize(rk->stream);
		if (i == 0) {
			cudaFree(bi->d_out);
			cudaFreeHost(bi->h_logits);
			cudaFreeHost(bi->h_meta);
		}
		free_rank_memory(&bi->m->info, rk);
		if (rk->blas != NULL)
			cuda_blas_destroy(rk->blas);
		if (rk->stream != NULL)
			cudaStreamDestroy(rk->stream);
	}
	cuda_comm_free(bi->comm);
	cuda_comm_free(bi->xfer);
	free(bi);
}

/* Check that a group of n devices can split the model; the cause if not. */
static int
check_split(const struct model_info *mi, int n, char **cause)
{
	if (mi->n_head_kv % n != 0 || mi->n_head % n != 0) {
		set_cause(cause, "cuda: a group of %d devices must divide the "
		    "model's %u attention heads and %u kv heads", n,
		    mi->n_head, mi->n_head_kv);
		return (-1);
	}
	if (mi->n_ff % n != 0) {
		set_cause(cause, "cuda: a group of %d devices must divide the "
		    "model's %u ffn columns", n, mi->n_ff);
		return (-1);
	}
	return (0);
}

/*
 * Create an instance on a group of devices: per device a stream, cuBLAS
 * and its share of the weights, and an NCCL clique when there are several
 * (or when the config asks for the collectives on one device).
 */
static struct backend_inst *
cuda_create(const struct model *m, const struct backend_config *cfg,
    char **cause)
{
	const struct model_info	*mi = &m->info;
	struct backend_inst	*bi;
	struct cuda_rank	*rk;
	int			 n_dev, devs[CUDA_MAX_RANKS], n = 1, i, j;
	char			 what[64];
	const char		*what_beyond;

	n_dev = cuda_device_count();
	if (n_dev < 1) {
		set_cause(cause, "cuda: no cuda device");
		return (NULL);
	}
	devs[0] = 0;
	if (cfg != NULL && cfg->n_devices > CUDA_MAX_RANKS) {
		set_cause(cause, "cuda: group of %d devices, at most %d",
		    cfg->n_devices, CUDA_MAX_RANKS);
		return (NULL);
	}
	if (cfg != NULL && cfg->n_devices >= 1) {
		n = cfg->n_devices;
		for (i = 0; i < n; i++) {
			devs[i] = cfg->devices[i];
			if (devs[i] < 0 || devs[i] >= n_dev) {
				set_cause(cause, "cuda: device %d out of range "
				    "0..%d", devs[i], n_dev - 1);
				return (NULL);
			}
			for (j = 0; j < i; j++)
				if (devs[j] == devs[i]) {
					set_cause(cause, "cuda: device %d "
					    "listed twice in a group", devs[i]);
					return (NULL);
				}
		}
	}
	if ((what_beyond = model_beyond_llama(m)) != NULL) {
		set_cause(cause, "cuda: %s model needs %s, which this backend "
		    "lacks (use the cpu backend)", mi->arch, what_beyond);
		return (NULL);
	}
	if (mi->kv.block_size != KV_BLOCK) {
		set_cause(cause, "cuda: kv block size %u, the kernels use %d",
		    mi->kv.block_size, KV_BLOCK);
		return (NULL);
	}
	if (mi->kv.type != KV_TYPE_F16) {
		set_cause(cause, "cuda: kv type must be F16 on the device");
		return (NULL);
	}
	if (mi->head_dim % 8 != 0 || mi->head_dim > ATTN_MAX_HEAD_DIM) {
		set_cause(cause, "cuda: head dimension %u is not a multiple of "
		    "8 in 8..%d", mi->head_dim, ATTN_MAX_HEAD_DIM);
		return (NULL);
	}
	if (check_split(mi, n, cause) != 0)
		return (NULL);

	bi = xcalloc(1, sizeof *bi);
	bi->m = m;
	kvx_list_init(&bi->kvx);
	bi->n_ranks = n;
	bi->nh = (int)mi->n_head / n;
	bi->nkv = (int)mi->n_head_kv / n;
	bi->ff = (int)mi->n_ff / n;
	for (i = 0; i < n; i++)
		bi->r[i].dev = devs[i];
	/*
	 * By default graphs only where one device runs the group: see
	 * phasectl(8), cuda-graphs, for why not on several.
	 */
	bi->graphs = cfg != NULL && (cfg->graphs == BACKEND_GRAPHS_AUTO ?
	    n == 1 : cfg->graphs != 0);
	if ((n > 1 || (cfg != NULL && cfg->collectives)) &&
	    (bi->comm = cuda_comm_create(devs, n, cause)) == NULL)
		goto fail;
	for (i = 0; i < n; i++) {
		rk = &bi->r[i];
		snprintf(what, sizeof what, "select device %d", rk->dev);
		CU(cudaSetDevice(rk->dev), what);
		CU(cudaStreamCreateWithFlags(&rk->stream,
		    cudaStreamNonBlocking), "create stream");
		KR(cuda_blas_create(&rk->blas, rk->stream),
		    "create cublas handle");
		if (upload_weights(bi, i, cause) != 0)
			goto fail;
		/*
		 * A copy from pageable memory may return before its DMA is
		 * done, and the rank's stream does not wait for the legacy
		 * stream.
		 */
		CU(cudaDeviceSynchronize(), "upload weights");
	}
	log_debug("cuda: %s on %d device%s from %d", mi->name, n,
	    n > 1 ? "s" : "", devs[0]);
	return (bi);

fail:
	cuda_destroy(bi);
	return (NULL);
}

/*
 * The pool behind a struct kv_pool, or NULL if it is not a CUDA pool.  Host
 * pools always have storage, so the magic is read only from pools that
 * have none, which only this file makes.
 */
static struct cuda_pool *
cuda_pool_of(const struct kv_pool *p)
{
	struct cuda_pool	*cp = (struct cuda_pool *)p;

	if (p == NULL || p->data != NULL || cp->magic != CUDA_POOL_MAGIC)
		return (NULL);
	return (cp);
}

/* Free a CUDA pool: device pages of every rank and host bookkeeping. */
static void
cuda_kv_pool_free(struct backend_inst *bi, struct kv_pool *p)
{
	struct cuda_pool	*cp = cuda_pool_of(p);
	int			 i;

	if (cp == NULL)
		return;
	bi->buf_gen++;		/* graphs may point into its pages */
	for (i = 0; i < bi->n_ranks; i++) {
		if (cudaSetDevice(bi->r[i].dev) == cudaSuccess) {
			cudaStreamSynchronize(bi->r[i].stream);
			cudaFree(cp->kv[i]);
		}
	}
	free(cp->p.free_stack);
	free(cp->p.in_use);
	cp->magic = 0;
	free(cp);
}

/*
 * A pool of n_blocks blocks: the host keeps the block bookkeeping (the same
 * struct kv_pool fields kv_pool_create fills, without host storage), each
 * rank's device holds the pages of its own KV heads, at the same block
 * ids, so one block table serves every rank.
 */
static struct kv_pool *
cuda_kv_pool_create(struct backend_inst *bi, uint32_t n_blocks, char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	struct cuda_pool	*cp;
	struct kv_layout	 l = mi->kv;
	size_t			 per_block, bytes;
	uint32_t		 i;
	int			 r;
	char			 what[96];

	l.type = KV_TYPE_F16;
	if (kv_layout_check(&l, cause) != 0)
		return (NULL);
	/* Slots (block * KV_BLOCK + offset) are int32 on the device. */
	if (n_blocks < 1 || n_blocks > INT32_MAX / KV_BLOCK) {
		set_cause(cause, "kv pool of %u blocks out of range 1..%d",
		    n_blocks, INT32_MAX / KV_BLOCK);
		return (NULL);
	}
	per_block = kv_layout_block_bytes(&l);
	if (per_block > SIZE_MAX / n_blocks) {
		set_cause(cause, "kv pool of %u blocks of %zu bytes is too large",
		    n_blocks, per_block);
		return (NULL);
	}
	/* The layout counts every head; a rank holds 1 / N of them. */
	bytes = per_block / bi->n_ranks * n_blocks;

	cp = xcalloc(1, sizeof *cp);
	cp->magic = CUDA_POOL_MAGIC;
	cp->bi = bi;
	cp->p.layout = l;
	cp->p.n_blocks = n_blocks;
	cp->p.elem_size = 2;
	cp->p.block_bytes = per_block;
	cp->p.layer_bytes = per_block / l.n_layers;
	cp->p.v_offset = cp->p.layer_bytes / 2;
	cp->p.data = NULL;		/* the pages are on the devices */
	cp->cache_elems = (size_t)n_blocks * KV_BLOCK * bi->nkv * l.head_dim;
	cp->p.free_stack = xreallocarray(NULL, n_blocks,
	    sizeof *cp->p.free_stack);
	cp->p.in_use = xcalloc(n_blocks, 1);
	for (i = 0; i < n_blocks; i++)
		cp->p.free_stack[i] = n_blocks - 1 - i;
	cp->p.n_free = n_blocks;

	for (r = 0; r < bi->n_ranks; r++) {
		snprintf(what, sizeof what, "allocate kv pool of %u blocks "
		    "(%zu bytes) on device %d", n_blocks, bytes, bi->r[r].dev);
		CU(cudaSetDevice(bi->r[r].dev), "select device");
		CU(cudaMalloc((void **)&cp->kv[r], bytes), what);
		/* Unwritten slots are masked, but zeros keep NaN garbage out. */
		CU(cudaMemsetAsync(cp->kv[r], 0, bytes, bi->r[r].stream), what);
		CU(cudaStreamSynchronize(bi->r[r].stream), what);
	}
	return (&cp->p);

fail:
	cuda_kv_pool_free(bi, &cp->p);
	return (NULL);
}

/* Keys of a layer in rank's pages of a pool. */
static uint16_t *
pool_k(const struct cuda_pool *cp, int rank, uint32_t layer)
{
	return (cp->kv[rank] + (size_t)2 * layer * cp->cache_elems);
}

/* Values of a layer in rank's pages of a pool. */
static uint16_t *
pool_v(const struct cuda_pool *cp, int rank, uint32_t layer)
{
	return (cp->kv[rank] + ((size_t)2 * layer + 1) * cp->cache_elems);
}

/* Check a batch as model_forward does and count the rows wanting logits. */
static int
check_batch(const struct model_info *mi, const struct kv_pool *pool,
    const struct fwd_batch *b, int *total, int *n_out, char **cause)
{
	int	n;

	if (model_batch_check(mi, pool, b, total, cause) != 0)
		return (-1);
	*n_out = 0;
	for (n = 0; n < b->n_seqs; n++)
		if (b->entries[n].logits != NULL)
			(*n_out)++;
	return (0);
}

/*
 * Make a rank's activation buffers hold rows tokens (its device is
 * current).  Old buffers may still be read by queued work, so the stream
 * is drained before they go.
 */
static int
ensure_rows(struct backend_inst *bi, struct cuda_rank *rk, int rows,
    char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	const size_t		 dim = mi->n_embd, ff = bi->ff;
	const size_t		 qd = (size_t)mi->head_dim * bi->nh;
	const size_t		 kvd = (size_t)mi->head_dim * bi->nkv;
	size_t			 per_row;
	float			*p;
	int			 cap;

	if (rows <= rk->cap_rows)
		return (0);
	cap = rk->cap_rows < CUDA_MIN_ROWS ? CUDA_MIN_ROWS : rk->cap_rows;
	while (cap < rows)
		cap = cap > MODEL_MAX_BATCH_TOKENS / 2 ?
		    MODEL_MAX_BATCH_TOKENS : cap * 2;
	per_row = 2 * dim + 2 * qd + 2 * kvd + 2 * ff;
	CU(cudaStreamSynchronize(rk->stream), "drain stream");
	cudaFree(rk->act);
	rk->act = NULL;
	rk->cap_rows = 0;
	bi->buf_gen++;
	CU(cudaMalloc((void **)&rk->act, (size_t)cap * per_row *
	    sizeof(float)), "allocate activations");
	rk->cap_rows = cap;
	p = rk->act;
	rk->x = p;	p += (size_t)cap * dim;
	rk->xb = p;	p += (size_t)cap * dim;
	rk->q = p;	p += (size_t)cap * qd;
	rk->att = p;	p += (size_t)cap * qd;
	rk->k = p;	p += (size_t)cap * kvd;
	rk->v = p;	p += (size_t)cap * kvd;
	rk->hb = p;	p += (size_t)cap * ff;
	rk->hb2 = p;
	return (0);
fail:
	return (-1);
}

/* Make the logit buffers (rank 0, current) hold n_out rows. */
static int
ensure_out(struct backend_inst *bi, int n_out, char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	size_t			 per_out;
	int			 cap;

	if (n_out <= bi->cap_out)
		return (0);
	cap = bi->cap_out < 8 ? 8 : bi->cap_out;
	while (cap < n_out)
		cap *= 2;
	per_out = mi->n_embd + mi->n_vocab;
	CU(cudaStreamSynchronize(bi->r[0].stream), "drain stream");
	cudaFree(bi->d_out);
	cudaFreeHost(bi->h_logits);
	bi->d_out = NULL;
	bi->h_logits = NULL;
	bi->cap_out = 0;
	bi->buf_gen++;
	CU(cudaMalloc((void **)&bi->d_out, (size_t)cap * per_out *
	    sizeof(float)), "allocate logits");
	CU(cudaMallocHost((void **)&bi->h_logits, (size_t)cap *
	    mi->n_vocab * sizeof(float)), "allocate pinned logits");
	bi->cap_out = cap;
	return (0);
fail:
	return (-1);
}

/*
 * Make the metadata staging buffer and every rank's device copy hold
 * bytes; leaves no particular device current.
 */
static int
ensure_meta(struct backend_inst *bi, size_t bytes, char **cause)
{
	size_t	cap;
	int	i;

	if (bytes <= bi->cap_meta)
		return (0);
	cap = bi->cap_meta < 4096 ? 4096 : bi->cap_meta;
	while (cap < bytes)
		cap *= 2;
	for (i = 0; i < bi->n_ranks; i++) {
		CU(cudaSetDevice(bi->r[i].dev), "select device");
		CU(cudaStreamSynchronize(bi->r[i].stream), "drain stream");
		cudaFree(bi->r[i].d_meta);
		bi->r[i].d_meta = NULL;
	}
	bi->cap_meta = 0;
	bi->buf_gen++;
	CU(cudaSetDevice(bi->r[0].dev), "select device");
	cudaFreeHost(bi->h_meta);
	bi->h_meta = NULL;
	CU(cudaMallocHost((void **)&bi->h_meta, cap),
	    "allocate pinned batch metadata");
	for (i = 0; i < bi->n_ranks; i++) {
		CU(cudaSetDevice(bi->r[i].dev), "select device");
		CU(cudaMalloc((void **)&bi->r[i].d_meta, cap),
		    "allocate batch metadata");
	}
	bi->cap_meta = cap;
	return (0);
fail:
	return (-1);
}

/* Make a rank's attention workspace hold bytes (0: none needed). */
static int
ensure_attn_ws(struct backend_inst *bi, struct cuda_rank *rk, size_t bytes,
    char **cause)
{
	if (bytes <= rk->attn_ws_bytes)
		return (0);
	bi->buf_gen++;
	CU(cudaStreamSynchronize(rk->stream), "drain stream");
	cudaFree(rk->attn_ws);
	rk->attn_ws = NULL;
	rk->attn_ws_bytes = 0;
	CU(cudaMalloc(&rk->attn_ws, bytes), "allocate attention workspace");
	rk->attn_ws_bytes = bytes;
	return (0);
fail:
	return (-1);
}

/* Round n up to a multiple of 16 (keeps metadata arrays aligned). */
static size_t
align16(size_t n)
{
	return ((n + 15) & ~(size_t)15);
}

/*
 * Offsets of the metadata arrays inside the staging buffer of one call:
 * tokens, positions and KV slots per row, block tables, attention
 * descriptors and output rows per entry.
 */
struct meta_layout {
	size_t	tokens, pos, slots, tables, seqs, out_rows, total;
};

/* Lay out the metadata of T rows, n entries of up to max_blocks blocks. */
static int
meta_layout(struct meta_layout *ml, int T, int n, uint32_t max_blocks,
    char **cause)
{
	uint64_t	tables = (uint64_t)n * max_blocks * sizeof(int32_t);

	if (tables > SIZE_MAX / 4) {
		set_cause(cause, "cuda: block tables of %d entries of %u blocks "
		    "are too large", n, max_blocks);
		return (-1);
	}
	ml->tokens = 0;
	ml->pos = align16(ml->tokens + (size_t)T * sizeof(int32_t));
	ml->slots = align16(ml->pos + (size_t)T * sizeof(int32_t));
	ml->tables = align16(ml->slots + (size_t)T * sizeof(int32_t));
	ml->seqs = align16(ml->tables + (size_t)tables);
	ml->out_rows = align16(ml->seqs + (size_t)n * sizeof(struct attn_seq));
	ml->total = align16(ml->out_rows + (size_t)n * sizeof(int32_t));
	return (0);
}

/* Sum every rank's partial xb [T][dim] over the group (NCCL, one group). */
static int
all_reduce_xb(struct backend_inst *bi, int T, char **cause)
{
	const size_t	n = (size_t)T * bi->m->info.n_embd;
	int		i;

	if (bi->comm == NULL)
		return (0);
	if (cuda_comm_group_start(cause) != 0)
		return (-1);
	for (i = 0; i < bi->n_ranks; i++) {
		if (cu_failed(cudaSetDevice(bi->r[i].dev), "select device",
		    cause) || cuda_comm_all_reduce_sum(bi->comm, i, bi->r[i].xb,
		    n, TT_F32, bi->r[i].stream, cause) != 0) {
			cuda_comm_group_end(NULL);
			return (-1);
		}
	}
	return (cuda_comm_group_end(cause));
}

/* Synchronize every rank's stream; the first error goes to cause. */
static int
sync_ranks(struct backend_inst *bi, const char *what, char **cause)
{
	int	i, rc = 0;

	for (i = 0; i < bi->n_ranks; i++) {
		if (cudaSetDevice(bi->r[i].dev) != cudaSuccess ||
		    cu_failed(cudaStreamSynchronize(bi->r[i].stream), what,
		    rc == 0 ? cause : NULL))
			rc = -1;
	}
	return (rc);
}

/*
 * Queue the layers and the output head of a forward pass whose metadata
 * (ml) is on every rank: the work a CUDA graph captures.  Every stream
 * operation here must be one a capture records (kernels, cuBLAS, NCCL).
 */
static int
enqueue_body(struct backend_inst *bi, struct cuda_pool *cp,
    const struct meta_layout *ml, int T, int n_out,
    struct cuda_attention_args *a, char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	const int		 dim = mi->n_embd, ff = bi->ff;
	const int		 hd = mi->head_dim, nkv = bi->nkv;
	const int		 qd = hd * bi->nh, kvd = hd * nkv;
	struct cuda_attention_args aa = *a;
	struct cuda_rank	*rk;
	const struct cuda_layer	*l;
	const int32_t		*dpos;
	float			*xo, *lg;
	uint32_t		 layer;
	int			 i;

	for (layer = 0; layer < mi->n_layers; layer++) {
		/* Attention: each rank its heads, then one all-reduce. */
		for (i = 0; i < bi->n_ranks; i++) {
			rk = &bi->r[i];
			l = &rk->layers[layer];
			dpos = (const int32_t *)(rk->d_meta + ml->pos);
			CU(cudaSetDevice(rk->dev), "select device");
			KR(cuda_rmsnorm_forward(rk->xb, rk->x, l->attn_norm, T,
			    dim, mi->rms_eps, rk->stream), "attention norm");
			KR(cuda_matmul_forward(rk->blas, rk->q, rk->xb,
			    CUDA_ACT_F32, l->wq.d, l->wq.type, T, dim, qd),
			    "q projection");
			KR(cuda_matmul_forward(rk->blas, rk->k, rk->xb,
			    CUDA_ACT_F32, l->wk.d, l->wk.type, T, dim, kvd),
			    "k projection");
			KR(cuda_matmul_forward(rk->blas, rk->v, rk->xb,
			    CUDA_ACT_F32, l->wv.d, l->wv.type, T, dim, kvd),
			    "v projection");
			KR(cuda_rope_forward(rk->q, dpos, T, bi->nh, hd,
			    mi->n_rot, mi->rope_freq_base, rk->stream),
			    "rope q");
			KR(cuda_rope_forward(rk->k, dpos, T, nkv, hd, mi->n_rot,
			    mi->rope_freq_base, rk->stream), "rope k");
			KR(cuda_kv_store_forward(pool_k(cp, i, layer),
			    pool_v(cp, i, layer), rk->k, rk->v,
			    (const int32_t *)(rk->d_meta + ml->slots), T, nkv,
			    hd, rk->stream), "kv store");

			aa.out = rk->att;
			aa.q = rk->q;
			aa.block_tables = (const int32_t *)(rk->d_meta +
			    ml->tables);
			aa.seqs = (const struct attn_seq *)(rk->d_meta +
			    ml->seqs);
			aa.workspace = rk->attn_ws;
			aa.workspace_bytes = rk->attn_ws_bytes;
			aa.k_cache = pool_k(cp, i, layer);
			aa.v_cache = pool_v(cp, i, layer);
			KR(cuda_attention_forward(&aa, rk->stream), "attention");

			KR(cuda_matmul_forward(rk->blas, rk->xb, rk->att,
			    CUDA_ACT_F32, l->wo.d, l->wo.type, T, qd, dim),
			    "attention output");
		}
		if (all_reduce_xb(bi, T, cause) != 0)
			goto fail;

		/* FFN: each rank its columns, then one all-reduce. */
		for (i = 0; i < bi->n_ranks; i++) {
			rk = &bi->r[i];
			l = &rk->layers[layer];
			CU(cudaSetDevice(rk->dev), "select device");
			KR(cuda_add_forward(rk->x, rk->x, rk->xb,
			    (size_t)T * dim, rk->stream), "attention residual");
			KR(cuda_rmsnorm_forward(rk->xb, rk->x, l->ffn_norm, T,
			    dim, mi->rms_eps, rk->stream), "ffn norm");
			KR(cuda_matmul_forward(rk->blas, rk->hb, rk->xb,
			    CUDA_ACT_F32, l->w_gate.d, l->w_gate.type, T, dim,
			    ff), "ffn gate");
			KR(cuda_matmul_forward(rk->blas, rk->hb2, rk->xb,
			    CUDA_ACT_F32, l->w_up.d, l->w_up.type, T, dim, ff),
			    "ffn up");
			KR(cuda_swiglu_forward(rk->hb, rk->hb, rk->hb2,
			    (size_t)T * ff, rk->stream), "swiglu");
			KR(cuda_matmul_forward(rk->blas, rk->xb, rk->hb,
			    CUDA_ACT_F32, l->w_down.d, l->w_down.type, T, ff,
			    dim), "ffn down");
		}
		if (all_reduce_xb(bi, T, cause) != 0)
			goto fail;
		for (i = 0; i < bi->n_ranks; i++) {
			rk = &bi->r[i];
			CU(cudaSetDevice(rk->dev), "select device");
			KR(cuda_add_forward(rk->x, rk->x, rk->xb,
			    (size_t)T * dim, rk->stream), "ffn residual");
		}
	}

	/*
	 * The output head, on rank 0, only for the last row of entries
	 * wanting logits: those rows are gathered as an embedding lookup with
	 * x as an F32 table of T rows.
	 */
	rk = &bi->r[0];
	CU(cudaSetDevice(rk->dev), "select device");
	if (n_out > 0) {
		xo = bi->d_out;
		lg = bi->d_out + (size_t)bi->cap_out * dim;
		KR(cuda_embedding_forward(xo, rk->x, TT_F32, dim, T,
		    (const int32_t *)(rk->d_meta + ml->out_rows), n_out,
		    rk->stream), "gather output rows");
		KR(cuda_rmsnorm_forward(xo, xo, rk->output_norm, n_out, dim,
		    mi->rms_eps, rk->stream), "output norm");
		KR(cuda_matmul_forward(rk->blas, lg, xo, CUDA_ACT_F32,
		    rk->output.d, rk->output.type, n_out, dim, mi->n_vocab),
		    "output head");
	}
	return (0);
fail:
	return (-1);
}

/*
 * Queue the body of a forward pass: as it is, or, for a decode shape
 * (graph), as the replay of its graphs, one per rank, which are captured
 * the second time the shape comes (the first run has grown every buffer
 * and scratch space the work needs, so that nothing is allocated while
 * capturing) and again whenever a buffer they point into has moved.  A
 * capture that fails turns graphs off for the instance, with a warning,
 * and the work runs plainly: nothing captured has run.
 */
static int
run_body(struct backend_inst *bi, struct cuda_pool *cp,
    const struct meta_layout *ml, int T, int n_out,
    struct cuda_attention_args *aa, int graph, char **cause)
{
	struct cuda_graph	*g;
	struct cuda_graph_ranks	 rk;
	cudaStream_t		 streams[CUDA_MAX_RANKS];
	int			 devs[CUDA_MAX_RANKS], i, rc;
	char			*why = NULL;

	if (!graph)
		return (enqueue_body(bi, cp, ml, T, n_out, aa, cause));
	rk.n = bi->n_ranks;
	rk.devs = devs;
	rk.streams = streams;
	for (i = 0; i < bi->n_ranks; i++) {
		devs[i] = bi->r[i].dev;
		streams[i] = bi->r[i].stream;
	}
	g = cuda_graph_slot(&bi->gr, T, (uint32_t)aa->max_blocks, cp);
	if (g->n_ranks > 0 && g->gen != bi->buf_gen) {
		cuda_graph_drop(g);
		bi->gr.n_dropped++;
	}
	if (g->n_ranks == 0 && g->gen != bi->buf_gen) {
		/* First sight (at this buffer generation): run it plainly. */
		g->gen = bi->buf_gen;
		return (enqueue_body(bi, cp, ml, T, n_out, aa, cause));
	}
	if (g->n_ranks == 0) {
		if (cuda_graph_capture_begin(&rk, &why) == 0) {
			rc = enqueue_body(bi, cp, ml, T, n_out, aa, &why);
			rc = cuda_graph_capture_end(g, &rk, rc == 0,
			    why == NULL ? &why : NULL);
		} else
			rc = -1;
		if (rc != 0) {
			log_warnx("cuda: decode graphs turned off: %s",
			    why != NULL ? why : "capture failed");
			free(why);
			bi->graphs = 0;
			return (enqueue_body(bi, cp, ml, T, n_out, aa, cause));
		}
		bi->gr.n_captured++;
	}
	if (cuda_graph_launch(g, &rk, cause) != 0)
		return (-1);
	bi->gr.n_replayed++;
	return (0);
}

/*
 * One forward pass over a ragged batch on the instance's devices: every
 * rank's work is queued in turn on its stream, the two all-reduces of each
 * layer between them.
 */
static int
cuda_forward(struct backend_inst *bi, struct kv_pool *pool,
    struct fwd_batch *b, char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	const int		 dim = mi->n_embd;
	const int		 hd = mi->head_dim, nkv = bi->nkv;
	struct cuda_pool	*cp = cuda_pool_of(pool);
	struct cuda_rank	*rk;
	struct meta_layout	 ml;
	struct cuda_attention_args aa;
	const struct fwd_entry	*e;
	struct attn_seq		*hs;
	int32_t			*htok, *hpos, *hslot, *htab, *hout;
	float			*lg;
	uint32_t		 max_blocks = 1, p;
	int			 T, n_out, n, i, row, r, max_q = 1, max_ctx = 1;
	int			 graph;
	size_t			 ws;

	if (cp == NULL || cp->bi != bi) {
		set_cause(cause, "cuda: kv pool does not belong to this "
		    "instance");
		return (-1);
	}
	if (check_batch(mi, pool, b, &T, &n_out, cause) != 0)
		return (-1);
	if (b->n_seqs == 0)
		return (0);
	for (n = 0; n < b->n_seqs; n++) {
		e = &b->entries[n];
		p = e->seq->n_tokens + e->n_tokens;
		if (kv_pool_blocks_for(pool, p) > max_blocks)
			max_blocks = kv_pool_blocks_for(pool, p);
		if (e->n_tokens > max_q)
			max_q = e->n_tokens;
		if ((int)p > max_ctx)
			max_ctx = (int)p;
	}
	/*
	 * A decode iteration of a common size may run as a graph: its block
	 * tables are widened to a power of two, and the longest context to
	 * their span, so that one graph serves many iterations.
	 */
	graph = bi->graphs && max_q == 1 && n_out == T &&
	    T <= CUDA_GRAPH_MAX_BATCH &&
	    (T & (T - 1)) == 0;
	if (graph) {
		p = 1;
		while (p < max_blocks)
			p *= 2;
		max_blocks = p;
		max_ctx = (int)(max_blocks * KV_BLOCK);
	}
	if (meta_layout(&ml, T, b->n_seqs, max_blocks, cause) != 0)
		return (-1);

	if (ensure_meta(bi, ml.total, cause) != 0)
		return (-1);
	/* Context splits: at most max_ctx / 256 slices (see cuda_kernels.h). */
	ws = max_ctx >= 512 ? cuda_attention_workspace_size(T, bi->nh, hd,
	    max_ctx / 256) : 0;
	if (ws > CUDA_ATTN_WS_MAX)
		ws = 0;
	for (i = 0; i < bi->n_ranks; i++) {
		CU(cudaSetDevice(bi->r[i].dev), "select device");
		if (ensure_rows(bi, &bi->r[i], T, cause) != 0 ||
		    ensure_attn_ws(bi, &bi->r[i], ws, cause) != 0 ||
		    (i == 0 && ensure_out(bi, n_out, cause) != 0))
			return (-1);
	}

	/* Gather the metadata into pinned memory and send it in one copy. */
	htok = (int32_t *)(bi->h_meta + ml.tokens);
	hpos = (int32_t *)(bi->h_meta + ml.pos);
	hslot = (int32_t *)(bi->h_meta + ml.slots);
	htab = (int32_t *)(bi->h_meta + ml.tables);
	hs = (struct attn_seq *)(bi->h_meta + ml.seqs);
	hout = (int32_t *)(bi->h_meta + ml.out_rows);
	for (n = row = r = 0; n < b->n_seqs; n++) {
		e = &b->entries[n];
		for (i = 0; i < e->n_tokens; i++, row++) {
			p = e->seq->n_tokens + i;
			htok[row] = e->tokens[i];
			hpos[row] = (int32_t)p;
			hslot[row] = (int32_t)(e->seq->blocks[p / KV_BLOCK] *
			    KV_BLOCK + p % KV_BLOCK);
		}
		p = kv_pool_blocks_for(pool, e->seq->n_tokens + e->n_tokens);
		for (i = 0; i < (int)max_blocks; i++) {
			htab[(size_t)n * max_blocks + i] = i < (int)p ?
			    (int32_t)e->seq->blocks[i] : 0;
		}
		hs[n].q_start = row - e->n_tokens;
		hs[n].q_len = e->n_tokens;
		hs[n].ctx_len = (int32_t)(e->seq->n_tokens + e->n_tokens);
		hs[n].reserved = 0;
		if (e->logits != NULL)
			hout[r++] = row - 1;
	}
	/* KV still arriving from another group is waited for on the device. */
	for (i = 0; i < bi->n_ranks; i++)
		if (kvx_order(&bi->kvx, pool, b, i, bi->r[i].dev,
		    bi->r[i].stream, cause) != 0)
			goto fail;
	for (i = 0; i < bi->n_ranks; i++) {
		rk = &bi->r[i];
		CU(cudaSetDevice(rk->dev), "select device");
		CU(cudaMemcpyAsync(rk->d_meta, bi->h_meta, ml.total,
		    cudaMemcpyHostToDevice, rk->stream), "copy batch metadata");
		/* The embedding is replicated: no collective before layer 0. */
		KR(cuda_embedding_forward(rk->x, rk->tok_embd.d,
		    rk->tok_embd.type, dim, mi->n_vocab,
		    (const int32_t *)(rk->d_meta + ml.tokens), T, rk->stream),
		    "embedding");
	}

	memset(&aa, 0, sizeof aa);
	aa.n_seqs = b->n_seqs;
	aa.n_tok = T;
	aa.max_blocks = (int)max_blocks;
	aa.n_heads = bi->nh;
	aa.n_kv_heads = nkv;
	aa.head_dim = hd;
	aa.max_q_len = max_q;
	aa.max_ctx_len = max_ctx;
	aa.scale = 1.0f / sqrtf((float)hd);
	aa.split_len = 0;

	if (run_body(bi, cp, &ml, T, n_out, &aa, graph, cause) != 0)
		goto fail;
	rk = &bi->r[0];
	CU(cudaSetDevice(rk->dev), "select device");
	if (n_out > 0) {
		lg = bi->d_out + (size_t)bi->cap_out * dim;
		CU(cudaMemcpyAsync(bi->h_logits, lg, (size_t)n_out *
		    mi->n_vocab * sizeof(float), cudaMemcpyDeviceToHost,
		    rk->stream), "copy logits");
	}
	/* Also catches errors of kernels that ran after their launch. */
	if (sync_ranks(bi, "forward pass", cause) != 0)
		goto fail;

	for (n = r = 0; n < b->n_seqs; n++) {
		e = &b->entries[n];
		if (e->logits == NULL)
			continue;
		memcpy(e->logits, bi->h_logits + (size_t)r * mi->n_vocab,
		    mi->n_vocab * sizeof(float));
		r++;
	}
	for (n = 0; n < b->n_seqs; n++)
		b->entries[n].seq->n_tokens += b->entries[n].n_tokens;
	return (0);

fail:
	/*
	 * Nothing on the host changed; queued work may still run, so let
	 * it finish before the caller reuses the buffers.
	 */
	sync_ranks(bi, "forward pass", NULL);
	return (-1);
}

/* Queue a copy of KV pages on stream st of dst's device, from src's. */
static int
copy_run(const struct cuda_rank *dst, const struct cuda_rank *src,
    cudaStream_t st, void *d, const void *s, size_t bytes, char **cause)
{
	if (dst->dev == src->dev) {
		if (cu_failed(cudaMemcpyAsync(d, s, bytes,
		    cudaMemcpyDeviceToDevice, st), "copy kv blocks", cause))
			return (-1);
	} else if (cu_failed(cudaMemcpyPeerAsync(d, dst->dev, s, src->dev,
	    bytes, st), "copy kv blocks between devices", cause))
		return (-1);
	return (0);
}

/*
 * The NCCL clique for moving KV from src's devices to dst's (src ranks
 * first), made on first use and kept while the source's devices are the
 * same; NULL when NCCL is absent or refuses them, the peer copies' cue.
 */
static struct cuda_comm *
xfer_comm(struct backend_inst *dst, const struct backend_inst *src)
{
	int	devs[2 * CUDA_MAX_RANKS], i, same = dst->xfer != NULL ||
		    dst->xfer_refused;
	char	*cause = NULL;

	if (!cuda_comm_built())
		return (NULL);
	for (i = 0; i < src->n_ranks; i++)
		same &= dst->xfer_devs[i] == src->r[i].dev;
	if (same)
		return (dst->xfer);
	cuda_comm_free(dst->xfer);
	dst->xfer = NULL;
	for (i = 0; i < src->n_ranks; i++) {
		devs[i] = src->r[i].dev;
		devs[src->n_ranks + i] = dst->r[i].dev;
		dst->xfer_devs[i] = src->r[i].dev;
	}
	dst->xfer = cuda_comm_create(devs, 2 * src->n_ranks, &cause);
	dst->xfer_refused = dst->xfer == NULL;
	if (dst->xfer == NULL)
		log_debug("cuda: kv transfer by peer copies: %s", cause);
	free(cause);
	return (dst->xfer);
}

/*
 * Queue the NCCL sends (on the source ranks' transfer streams) and
 * receives (on ours) of one layer's K and V runs, rank r to rank r, in one
 * group.
 */
static int
xfer_layer(struct cuda_comm *cc, struct backend_inst *dst,
    struct cuda_pool *dp, const struct kv_seq *dst_seq,
    const struct backend_inst *src, const struct cuda_pool *sp,
    const struct kv_seq *src_seq, uint32_t nb, uint32_t layer, size_t blk,
    char **cause)
{
	const int	N = dst->n_ranks;
	uint32_t	i, run;
	size_t		doff, soff, bytes;
	int		r, kv;
	uint8_t		*d;
	const uint8_t	*s;

	if (cuda_comm_group_start(cause) != 0)
		return (-1);
	for (r = 0; r < N; r++) {
		for (i = 0; i < nb; i += run) {
			run = 1;
			while (i + run < nb && dst_seq->blocks[i + run] ==
			    dst_seq->blocks[i] + run && src_seq->blocks[i +
			    run] == src_seq->blocks[i] + run)
				run++;
			doff = (size_t)dst_seq->blocks[i] * blk;
			soff = (size_t)src_seq->blocks[i] * blk;
			bytes = (size_t)run * blk;
			for (kv = 0; kv < 2; kv++) {
				d = (uint8_t *)(kv ? pool_v(dp, r, layer) :
				    pool_k(dp, r, layer)) + doff;
				s = (const uint8_t *)(kv ? pool_v(sp, r, layer) :
				    pool_k(sp, r, layer)) + soff;
				if (cuda_comm_send(cc, r, N + r, s, bytes,
				    src->xs[r], cause) != 0 ||
				    cuda_comm_recv(cc, N + r, r, d, bytes,
				    dst->xs[r], cause) != 0) {
					cuda_comm_group_end(NULL);
					return (-1);
				}
			}
		}
	}
	return (cuda_comm_group_end(cause));
}

/* Make rank's transfer stream of bi, on first use. */
static int
xfer_stream(struct backend_inst *bi, int rank, char **cause)
{
	if (bi->xs[rank] != NULL)
		return (0);
	CU(cudaSetDevice(bi->r[rank].dev), "select device");
	CU(cudaStreamCreateWithFlags(&bi->xs[rank], cudaStreamNonBlocking),
	    "create kv transfer stream");
	return (0);
fail:
	return (-1);
}

/* Wait for what was queued on the transfer streams of bi. */
static void
xfer_drain(struct backend_inst *bi)
{
	int	i;

	for (i = 0; i < bi->n_ranks; i++)
		if (bi->xs[i] != NULL && cudaSetDevice(bi->r[i].dev) ==
		    cudaSuccess)
			cudaStreamSynchronize(bi->xs[i]);
}

/*
 * Start copying src_seq's KV into the empty dst_seq: blocks are taken
 * from dst_pool on the host, then each layer's K and V pages are queued,
 * rank by rank, on the transfer streams behind the source's compute
 * streams: between two groups with NCCL sends and receives (peer copies
 * where NCCL is absent or the groups share a device), within one instance
 * by device copies.  Nothing waits on the host: the destination's forward
 * passes over the blocks wait for the transfer on the device (kvx_order)
 * and the caller keeps src_seq's blocks until cuda_kv_xfer_poll says it is
 * done.  Both groups must split the heads alike, that is, have as many
 * devices.
 */
static int
cuda_kv_copy_start(struct backend_inst *dst, struct kv_pool *dst_pool,
    struct kv_seq *dst_seq, struct backend_inst *src,
    const struct kv_pool *src_pool, const struct kv_seq *src_seq,
    struct kv_xfer **xfer, char **cause)
{
	struct cuda_pool	*dp = cuda_pool_of(dst_pool);
	const struct cuda_pool	*sp = cuda_pool_of(src_pool);
	const struct kv_layout	*dl, *sl;
	size_t			 blk, doff, soff;
	uint32_t		 nb, i, layer, run;
	int			 rank;
	struct cuda_comm	*cc = NULL;
	struct kv_xfer		*x = NULL;

	*xfer = NULL;
	if (dp == NULL || sp == NULL || dp->bi != dst || sp->bi != src) {
		set_cause(cause, "cuda: kv copy between pools not of the cuda "
		    "instances given");
		return (-1);
	}
	dl = &dst_pool->layout;
	sl = &src_pool->layout;
	if (dl->n_layers != sl->n_layers || dl->n_kv_heads != sl->n_kv_heads ||
	    dl->head_dim != sl->head_dim || dl->block_size != sl->block_size ||
	    dl->type != sl->type) {
		set_cause(cause, "cuda: kv copy between pools of different "
		    "layouts");
		return (-1);
	}
	if (dst->n_ranks != src->n_ranks) {
		set_cause(cause, "cuda: kv copy from a group of %d devices to "
		    "one of %d (the heads are split differently)", src->n_ranks,
		    dst->n_ranks);
		return (-1);
	}
	if (dst_seq->n_blocks != 0 || dst_seq->n_tokens != 0) {
		set_cause(cause, "cuda: kv copy into a sequence that is not "
		    "empty");
		return (-1);
	}
	if (src_seq->n_tokens == 0)
		return (0);
	nb = kv_pool_blocks_for(src_pool, src_seq->n_tokens);
	if (kv_seq_reserve(dst_pool, dst_seq, src_seq->n_tokens) != 0) {
		set_cause(cause, "cuda: kv copy of %u blocks: pool has %u free",
		    nb, kv_pool_free_blocks(dst_pool));
		return (-1);
	}

	/*
	 * Behind the source's earlier writes (its compute streams) and any
	 * transfer still moving its blocks (its transfer streams).  The
	 * destination's blocks were free: no work of its own is pending on
	 * them, so its compute streams, busy with other sequences, are not
	 * waited for.
	 */
	for (rank = 0; rank < dst->n_ranks; rank++) {
		if (xfer_stream(src, rank, cause) != 0 ||
		    xfer_stream(dst, rank, cause) != 0 ||
		    kvx_after(src->r[rank].dev, src->xs[rank],
		    src->r[rank].dev, src->r[rank].stream, cause) != 0)
			goto fail;
	}
	x = kvx_new(dst_pool, dst_seq);
	blk = (size_t)KV_BLOCK * dst->nkv * dl->head_dim * sizeof(uint16_t);
	if (dst != src && (cc = xfer_comm(dst, src)) != NULL) {
		for (layer = 0; layer < dl->n_layers; layer++)
			if (xfer_layer(cc, dst, dp, dst_seq, src, sp, src_seq, nb,
			    layer, blk, cause) != 0)
				goto fail;
		for (rank = 0; rank < dst->n_ranks; rank++)
			if (kvx_record(x, src->r[rank].dev, src->xs[rank], -1,
			    cause) != 0 || kvx_record(x, dst->r[rank].dev,
			    dst->xs[rank], rank, cause) != 0)
				goto fail;
		dst->n_xfer_nccl++;
	} else if (dst != src)
		dst->n_xfer_peer++;
	for (rank = 0; rank < dst->n_ranks && (dst == src || cc == NULL);
	    rank++) {
		if (dst != src && kvx_after(dst->r[rank].dev, dst->xs[rank],
		    src->r[rank].dev, src->xs[rank], cause) != 0)
			goto fail;
		CU(cudaSetDevice(dst->r[rank].dev), "select device");
		/* Runs of consecutive block ids on both sides go in one copy. */
		for (i = 0; i < nb; i += run) {
			run = 1;
			while (i + run < nb && dst_seq->blocks[i + run] ==
			    dst_seq->blocks[i] + run && src_seq->blocks[i +
			    run] == src_seq->blocks[i] + run)
				run++;
			doff = (size_t)dst_seq->blocks[i] * blk;
			soff = (size_t)src_seq->blocks[i] * blk;
			for (layer = 0; layer < dl->n_layers; layer++) {
				if (copy_run(&dst->r[rank], &src->r[rank],
				    dst->xs[rank],
				    (uint8_t *)pool_k(dp, rank, layer) + doff,
				    (const uint8_t *)pool_k(sp, rank, layer) +
				    soff, (size_t)run * blk, cause) != 0 ||
				    copy_run(&dst->r[rank], &src->r[rank],
				    dst->xs[rank],
				    (uint8_t *)pool_v(dp, rank, layer) + doff,
				    (const uint8_t *)pool_v(sp, rank, layer) +
				    soff, (size_t)run * blk, cause) != 0)
					goto fail;
			}
		}
		/* The copies read the source too: one event covers both. */
		if (kvx_record(x, dst->r[rank].dev, dst->xs[rank], rank,
		    cause) != 0)
			goto fail;
	}
	dst_seq->n_tokens = src_seq->n_tokens;
	kvx_link(&dst->kvx, x);
	*xfer = x;
	return (0);

fail:
	/* Whatever was queued ends before the blocks change hands. */
	xfer_drain(dst);
	xfer_drain(src);
	if (x != NULL)
		kvx_abort(x);
	kv_seq_release(dst_pool, dst_seq);
	return (-1);
}

/* Whether a transfer cuda_kv_copy_start began is over (see backend.h). */
static int
cuda_kv_xfer_poll(struct kv_xfer *x, int wait, char **cause)
{
	return (kvx_poll(x, wait, cause));
}

/* Copy src_seq's KV into the empty dst_seq and wait until it is there. */
static int
cuda_kv_copy(struct backend_inst *dst, struct kv_pool *dst_pool,
    struct kv_seq *dst_seq, struct backend_inst *src,
    const struct kv_pool *src_pool, const struct kv_seq *src_seq,
    char **cause)
{
	struct kv_xfer	*x;

	if (cuda_kv_copy_start(dst, dst_pool, dst_seq, src, src_pool, src_seq,
	    &x, cause) != 0)
		return (-1);
	if (x != NULL && kvx_poll(x, 1, cause) != 1) {
		kv_seq_release(dst_pool, dst_seq);
		return (-1);
	}
	return (0);
}

/* How many decode graphs bi has captured and replayed. */
void
backend_cuda_graph_counts(const struct backend_inst *bi, uint64_t *captured,
    uint64_t *replayed)
{
	*captured = bi->gr.n_captured;
	*replayed = bi->gr.n_replayed;
}

/* How many decode graphs bi has dropped as stale. */
uint64_t
backend_cuda_graphs_dropped(const struct backend_inst *bi)
{
	return (bi->gr.n_dropped);
}

/* How many KV transfers into bi went by NCCL and by peer copies. */
void
backend_cuda_kv_transfers(const struct backend_inst *bi, uint64_t *nccl,
    uint64_t *peer)
{
	*nccl = bi->n_xfer_nccl;
	*peer = bi->n_xfer_peer;
}

/* Device memory of each rank's share of the weights. */
static int
cuda_weight_bytes(struct backend_inst *bi, uint64_t *per_device, int max)
{
	int	i;

	for (i = 0; i < bi->n_ranks && i < max; i++)
		per_device[i] = bi->r[i].weight_bytes;
	return (i);
}

const struct backend_ops backend_cuda_ops = {
	.name = "cuda",
	.create = cuda_create,
	.destroy = cuda_destroy,
	.kv_pool_create = cuda_kv_pool_create,
	.kv_pool_free = cuda_kv_pool_free,
	.forward = cuda_forward,
	.kv_copy = cuda_kv_copy,
	.kv_copy_start = cuda_kv_copy_start,
	.kv_xfer_poll = cuda_kv_xfer_poll,
	.weight_bytes = cuda_weight_bytes,
};
