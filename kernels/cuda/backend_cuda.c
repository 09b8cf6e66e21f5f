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
#include "cuda_kernels.h"
#include "gguf.h"
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
 * Groups of several devices would need tensor parallelism (NCCL
 * all-reduce after the attention output and the FFN down products); it is
 * not built, so a group must name exactly one device.
 */

/* Tells a pool made here from any other struct kv_pool. */
#define CUDA_POOL_MAGIC	0x63756461u	/* "cuda" */

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
	uint16_t	*kv;		/* per layer: K, then V */
	size_t		 cache_elems;	/* halves in one layer's K (or V) */
};

struct backend_inst {
	const struct model	*m;
	int			 dev;
	cudaStream_t		 stream;
	struct cuda_blas	*blas;

	struct cuda_mat		 tok_embd;
	struct cuda_mat		 output;	/* aliases tok_embd when tied */
	float			*output_norm;
	struct cuda_layer	*layers;

	/* Activations for up to cap_rows stacked tokens. */
	int			 cap_rows;
	float			*act;		/* one allocation for all below */
	float			*x, *xb, *q, *k, *v, *att, *hb, *hb2;

	/* Logits of up to cap_out rows, device and pinned host. */
	int			 cap_out;
	float			*d_out;		/* xo [cap_out][n_embd], then logits */
	float			*h_logits;

	/* Per-call metadata, pinned host staging and its device copy. */
	size_t			 cap_meta;
	uint8_t			*h_meta;
	uint8_t			*d_meta;

	void			*attn_ws;
	size_t			 attn_ws_bytes;
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

/* Copy a GGUF tensor's data as it is to new device memory. */
static int
upload_tensor(const struct model *m, const char *name, void **d,
    uint32_t *type, char **cause)
{
	const struct gguf_tensor	*t;
	char				 what[128];

	t = gguf_find_tensor(m->gguf, name);
	if (t == NULL) {
		set_cause(cause, "cuda: missing tensor '%s'", name);
		return (-1);
	}
	if (!cuda_type_ok(t->type)) {
		set_cause(cause, "cuda: tensor '%s': type %s not supported by "
		    "the cuda kernels", name, tensor_type_name(t->type));
		return (-1);
	}
	snprintf(what, sizeof what, "upload '%s' (%" PRIu64 " bytes)", name,
	    t->nbytes);
	if (cu_failed(cudaMalloc(d, t->nbytes), what, cause))
		return (-1);
	if (cu_failed(cudaMemcpy(*d, t->data, t->nbytes,
	    cudaMemcpyHostToDevice), what, cause)) {
		cudaFree(*d);
		*d = NULL;
		return (-1);
	}
	if (type != NULL)
		*type = t->type;
	return (0);
}

/* Upload a weight of n_out rows of n_in (model_load checked the shape). */
static int
upload_mat(const struct model *m, const char *name, int n_in, int n_out,
    struct cuda_mat *cm, char **cause)
{
	cm->n_in = n_in;
	cm->n_out = n_out;
	return (upload_tensor(m, name, &cm->d, &cm->type, cause));
}

/* Copy n host floats (a norm, already F32 in the model) to the device. */
static int
upload_floats(const float *h, size_t n, float **d, const char *name,
    char **cause)
{
	char	what[128];

	snprintf(what, sizeof what, "upload '%s'", name);
	if (cu_failed(cudaMalloc((void **)d, n * sizeof(float)), what, cause))
		return (-1);
	if (cu_failed(cudaMemcpy(*d, h, n * sizeof(float),
	    cudaMemcpyHostToDevice), what, cause)) {
		cudaFree(*d);
		*d = NULL;
		return (-1);
	}
	return (0);
}

/* Upload every weight of the model. */
static int
upload_weights(struct backend_inst *bi, char **cause)
{
	const struct model	*m = bi->m;
	const struct model_info	*mi = &m->info;
	const int		 dim = mi->n_embd, ff = mi->n_ff;
	const int		 kvd = mi->head_dim * mi->n_head_kv;
	struct cuda_layer	*l;
	char			 name[64];
	uint32_t		 n;

	if (upload_mat(m, "token_embd.weight", dim, mi->n_vocab, &bi->tok_embd,
	    cause) != 0)
		return (-1);
	if (upload_floats(m->output_norm, dim, &bi->output_norm,
	    "output_norm.weight", cause) != 0)
		return (-1);
	if (m->output != m->tok_embd) {
		if (upload_mat(m, "output.weight", dim, mi->n_vocab, &bi->output,
		    cause) != 0)
			return (-1);
	} else
		bi->output = bi->tok_embd;

	bi->layers = xcalloc(mi->n_layers, sizeof *bi->layers);
	for (n = 0; n < mi->n_layers; n++) {
		l = &bi->layers[n];
#define MAT(field, what, n_in, n_out) do {				\
	snprintf(name, sizeof name, "blk.%u.%s.weight", n, what);	\
	if (upload_mat(m, name, n_in, n_out, &l->field, cause) != 0)	\
		return (-1);						\
} while (0)
#define VEC(field, what) do {						\
	snprintf(name, sizeof name, "blk.%u.%s.weight", n, what);	\
	if (upload_floats(m->layers[n].field, dim, &l->field, name,	\
	    cause) != 0)						\
		return (-1);						\
} while (0)
		VEC(attn_norm, "attn_norm");
		MAT(wq, "attn_q", dim, dim);
		MAT(wk, "attn_k", dim, kvd);
		MAT(wv, "attn_v", dim, kvd);
		MAT(wo, "attn_output", dim, dim);
		VEC(ffn_norm, "ffn_norm");
		MAT(w_gate, "ffn_gate", dim, ff);
		MAT(w_up, "ffn_up", dim, ff);
		MAT(w_down, "ffn_down", ff, dim);
#undef MAT
#undef VEC
	}
	return (0);
}

/* Free the instance's weights and buffers (the device must be current). */
static void
free_device_memory(struct backend_inst *bi)
{
	const struct model_info	*mi = &bi->m->info;
	struct cuda_layer	*l;
	uint32_t		 n;

	if (bi->layers != NULL) {
		for (n = 0; n < mi->n_layers; n++) {
			l = &bi->layers[n];
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
		free(bi->layers);
		bi->layers = NULL;
	}
	if (bi->output.d != bi->tok_embd.d)
		cudaFree(bi->output.d);
	cudaFree(bi->tok_embd.d);
	cudaFree(bi->output_norm);
	cudaFree(bi->act);
	cudaFree(bi->d_out);
	cudaFreeHost(bi->h_logits);
	cudaFree(bi->d_meta);
	cudaFreeHost(bi->h_meta);
	cudaFree(bi->attn_ws);
}

/* Destroy an instance; its pools must have been freed. */
static void
cuda_destroy(struct backend_inst *bi)
{
	if (bi == NULL)
		return;
	if (cudaSetDevice(bi->dev) == cudaSuccess) {
		if (bi->stream != NULL)
			cudaStreamSynchronize(bi->stream);
		free_device_memory(bi);
		if (bi->blas != NULL)
			cuda_blas_destroy(bi->blas);
		if (bi->stream != NULL)
			cudaStreamDestroy(bi->stream);
	} else
		log_warnx("cuda: cannot select device %d to free it", bi->dev);
	free(bi);
}

/* Create an instance on one device: stream, cuBLAS and the weights. */
static struct backend_inst *
cuda_create(const struct model *m, const struct backend_config *cfg,
    char **cause)
{
	const struct model_info	*mi = &m->info;
	struct backend_inst	*bi;
	int			 n_dev, dev = 0;
	char			 what[64];
	const char		*what_beyond;

	n_dev = cuda_device_count();
	if (n_dev < 1) {
		set_cause(cause, "cuda: no cuda device");
		return (NULL);
	}
	if (cfg != NULL && cfg->n_devices > 1) {
		set_cause(cause, "cuda: group of %d devices needs tensor "
		    "parallelism, which is not built (use one device)",
		    cfg->n_devices);
		return (NULL);
	}
	if (cfg != NULL && cfg->n_devices == 1)
		dev = cfg->devices[0];
	if (dev < 0 || dev >= n_dev) {
		set_cause(cause, "cuda: device %d out of range 0..%d", dev,
		    n_dev - 1);
		return (NULL);
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

	bi = xcalloc(1, sizeof *bi);
	bi->m = m;
	bi->dev = dev;
	snprintf(what, sizeof what, "select device %d", dev);
	CU(cudaSetDevice(dev), what);
	CU(cudaStreamCreateWithFlags(&bi->stream, cudaStreamNonBlocking),
	    "create stream");
	KR(cuda_blas_create(&bi->blas, bi->stream), "create cublas handle");
	if (upload_weights(bi, cause) != 0)
		goto fail;
	/*
	 * A copy from pageable memory may return before its DMA is done, and
	 * the instance's stream does not wait for the legacy stream.
	 */
	CU(cudaDeviceSynchronize(), "upload weights");
	log_debug("cuda: %s on device %d", mi->name, dev);
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

/* Free a CUDA pool: device pages and host bookkeeping. */
static void
cuda_kv_pool_free(struct backend_inst *bi, struct kv_pool *p)
{
	struct cuda_pool	*cp = cuda_pool_of(p);

	if (cp == NULL)
		return;
	if (cudaSetDevice(bi->dev) == cudaSuccess) {
		cudaStreamSynchronize(bi->stream);
		cudaFree(cp->kv);
	}
	free(cp->p.free_stack);
	free(cp->p.in_use);
	cp->magic = 0;
	free(cp);
}

/*
 * A pool of n_blocks blocks: the host keeps the block bookkeeping (the same
 * struct kv_pool fields kv_pool_create fills, without host storage), the
 * device holds the pages.
 */
static struct kv_pool *
cuda_kv_pool_create(struct backend_inst *bi, uint32_t n_blocks, char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	struct cuda_pool	*cp;
	struct kv_layout	 l = mi->kv;
	size_t			 per_block, bytes;
	uint32_t		 i;
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
	bytes = per_block * n_blocks;

	cp = xcalloc(1, sizeof *cp);
	cp->magic = CUDA_POOL_MAGIC;
	cp->bi = bi;
	cp->p.layout = l;
	cp->p.n_blocks = n_blocks;
	cp->p.elem_size = 2;
	cp->p.block_bytes = per_block;
	cp->p.layer_bytes = per_block / l.n_layers;
	cp->p.v_offset = cp->p.layer_bytes / 2;
	cp->p.data = NULL;		/* the pages are on the device */
	cp->cache_elems = (size_t)n_blocks * KV_BLOCK * l.n_kv_heads *
	    l.head_dim;
	cp->p.free_stack = xreallocarray(NULL, n_blocks,
	    sizeof *cp->p.free_stack);
	cp->p.in_use = xcalloc(n_blocks, 1);
	for (i = 0; i < n_blocks; i++)
		cp->p.free_stack[i] = n_blocks - 1 - i;
	cp->p.n_free = n_blocks;

	snprintf(what, sizeof what, "allocate kv pool of %u blocks (%zu bytes)",
	    n_blocks, bytes);
	CU(cudaSetDevice(bi->dev), "select device");
	CU(cudaMalloc((void **)&cp->kv, bytes), what);
	/* Unwritten slots are masked, but zeros keep NaN garbage out. */
	CU(cudaMemsetAsync(cp->kv, 0, bytes, bi->stream), what);
	CU(cudaStreamSynchronize(bi->stream), what);
	return (&cp->p);

fail:
	cuda_kv_pool_free(bi, &cp->p);
	return (NULL);
}

/* Keys of a layer in a pool. */
static uint16_t *
pool_k(const struct cuda_pool *cp, uint32_t layer)
{
	return (cp->kv + (size_t)2 * layer * cp->cache_elems);
}

/* Values of a layer in a pool. */
static uint16_t *
pool_v(const struct cuda_pool *cp, uint32_t layer)
{
	return (cp->kv + ((size_t)2 * layer + 1) * cp->cache_elems);
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
 * Make the activation buffers hold rows tokens and the logit buffers n_out
 * rows.  Old buffers may still be read by queued work, so the stream is
 * drained before they go.
 */
static int
ensure_buffers(struct backend_inst *bi, int rows, int n_out, char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	const size_t		 dim = mi->n_embd, ff = mi->n_ff;
	const size_t		 kvd = (size_t)mi->head_dim * mi->n_head_kv;
	size_t			 per_row, per_out;
	float			*p;
	int			 cap;

	if (rows > bi->cap_rows) {
		cap = bi->cap_rows < CUDA_MIN_ROWS ? CUDA_MIN_ROWS : bi->cap_rows;
		while (cap < rows)
			cap = cap > MODEL_MAX_BATCH_TOKENS / 2 ?
			    MODEL_MAX_BATCH_TOKENS : cap * 2;
		per_row = 4 * dim + 2 * kvd + 2 * ff;
		CU(cudaStreamSynchronize(bi->stream), "drain stream");
		cudaFree(bi->act);
		bi->act = NULL;
		bi->cap_rows = 0;
		CU(cudaMalloc((void **)&bi->act, (size_t)cap * per_row *
		    sizeof(float)), "allocate activations");
		bi->cap_rows = cap;
		p = bi->act;
		bi->x = p;	p += (size_t)cap * dim;
		bi->xb = p;	p += (size_t)cap * dim;
		bi->q = p;	p += (size_t)cap * dim;
		bi->att = p;	p += (size_t)cap * dim;
		bi->k = p;	p += (size_t)cap * kvd;
		bi->v = p;	p += (size_t)cap * kvd;
		bi->hb = p;	p += (size_t)cap * ff;
		bi->hb2 = p;
	}
	if (n_out > bi->cap_out) {
		cap = bi->cap_out < 8 ? 8 : bi->cap_out;
		while (cap < n_out)
			cap *= 2;
		per_out = dim + mi->n_vocab;
		CU(cudaStreamSynchronize(bi->stream), "drain stream");
		cudaFree(bi->d_out);
		cudaFreeHost(bi->h_logits);
		bi->d_out = NULL;
		bi->h_logits = NULL;
		bi->cap_out = 0;
		CU(cudaMalloc((void **)&bi->d_out, (size_t)cap * per_out *
		    sizeof(float)), "allocate logits");
		CU(cudaMallocHost((void **)&bi->h_logits, (size_t)cap *
		    mi->n_vocab * sizeof(float)), "allocate pinned logits");
		bi->cap_out = cap;
	}
	return (0);
fail:
	return (-1);
}

/* Make the metadata staging buffers hold bytes. */
static int
ensure_meta(struct backend_inst *bi, size_t bytes, char **cause)
{
	size_t	cap;

	if (bytes <= bi->cap_meta)
		return (0);
	cap = bi->cap_meta < 4096 ? 4096 : bi->cap_meta;
	while (cap < bytes)
		cap *= 2;
	CU(cudaStreamSynchronize(bi->stream), "drain stream");
	cudaFree(bi->d_meta);
	cudaFreeHost(bi->h_meta);
	bi->d_meta = NULL;
	bi->h_meta = NULL;
	bi->cap_meta = 0;
	CU(cudaMalloc((void **)&bi->d_meta, cap), "allocate batch metadata");
	CU(cudaMallocHost((void **)&bi->h_meta, cap),
	    "allocate pinned batch metadata");
	bi->cap_meta = cap;
	return (0);
fail:
	return (-1);
}

/* Make the attention workspace hold bytes (0: none needed). */
static int
ensure_attn_ws(struct backend_inst *bi, size_t bytes, char **cause)
{
	if (bytes <= bi->attn_ws_bytes)
		return (0);
	CU(cudaStreamSynchronize(bi->stream), "drain stream");
	cudaFree(bi->attn_ws);
	bi->attn_ws = NULL;
	bi->attn_ws_bytes = 0;
	CU(cudaMalloc(&bi->attn_ws, bytes), "allocate attention workspace");
	bi->attn_ws_bytes = bytes;
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

/* One forward pass over a ragged batch on the instance's device. */
static int
cuda_forward(struct backend_inst *bi, struct kv_pool *pool,
    struct fwd_batch *b, char **cause)
{
	const struct model_info	*mi = &bi->m->info;
	const int		 dim = mi->n_embd, ff = mi->n_ff;
	const int		 hd = mi->head_dim, nkv = mi->n_head_kv;
	const int		 kvd = hd * nkv;
	struct cuda_pool	*cp = cuda_pool_of(pool);
	struct meta_layout	 ml;
	struct cuda_attention_args aa;
	const struct fwd_entry	*e;
	const struct cuda_layer	*l;
	struct attn_seq		*hs;
	int32_t			*htok, *hpos, *hslot, *htab, *hout;
	float			*xo, *lg;
	uint32_t		 max_blocks = 1, p, layer;
	int			 T, n_out, n, i, row, r, max_q = 1, max_ctx = 1;
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
	if (meta_layout(&ml, T, b->n_seqs, max_blocks, cause) != 0)
		return (-1);

	CU(cudaSetDevice(bi->dev), "select device");
	if (ensure_buffers(bi, T, n_out, cause) != 0 ||
	    ensure_meta(bi, ml.total, cause) != 0)
		return (-1);
	/* Context splits: at most max_ctx / 256 slices (see cuda_kernels.h). */
	ws = max_ctx >= 512 ? cuda_attention_workspace_size(T, mi->n_head, hd,
	    max_ctx / 256) : 0;
	if (ws > CUDA_ATTN_WS_MAX)
		ws = 0;
	if (ensure_attn_ws(bi, ws, cause) != 0)
		return (-1);

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
	CU(cudaMemcpyAsync(bi->d_meta, bi->h_meta, ml.total,
	    cudaMemcpyHostToDevice, bi->stream), "copy batch metadata");

	KR(cuda_embedding_forward(bi->x, bi->tok_embd.d, bi->tok_embd.type, dim,
	    mi->n_vocab, (const int32_t *)(bi->d_meta + ml.tokens), T,
	    bi->stream), "embedding");

	memset(&aa, 0, sizeof aa);
	aa.out = bi->att;
	aa.q = bi->q;
	aa.block_tables = (const int32_t *)(bi->d_meta + ml.tables);
	aa.seqs = (const struct attn_seq *)(bi->d_meta + ml.seqs);
	aa.n_seqs = b->n_seqs;
	aa.n_tok = T;
	aa.max_blocks = (int)max_blocks;
	aa.n_heads = mi->n_head;
	aa.n_kv_heads = nkv;
	aa.head_dim = hd;
	aa.max_q_len = max_q;
	aa.max_ctx_len = max_ctx;
	aa.scale = 1.0f / sqrtf((float)hd);
	aa.workspace = bi->attn_ws;
	aa.workspace_bytes = bi->attn_ws_bytes;
	aa.split_len = 0;

	for (layer = 0; layer < mi->n_layers; layer++) {
		l = &bi->layers[layer];

		KR(cuda_rmsnorm_forward(bi->xb, bi->x, l->attn_norm, T, dim,
		    mi->rms_eps, bi->stream), "attention norm");
		KR(cuda_matmul_forward(bi->blas, bi->q, bi->xb, CUDA_ACT_F32,
		    l->wq.d, l->wq.type, T, dim, dim), "q projection");
		KR(cuda_matmul_forward(bi->blas, bi->k, bi->xb, CUDA_ACT_F32,
		    l->wk.d, l->wk.type, T, dim, kvd), "k projection");
		KR(cuda_matmul_forward(bi->blas, bi->v, bi->xb, CUDA_ACT_F32,
		    l->wv.d, l->wv.type, T, dim, kvd), "v projection");
		KR(cuda_rope_forward(bi->q, (const int32_t *)(bi->d_meta +
		    ml.pos), T, mi->n_head, hd, mi->n_rot, mi->rope_freq_base,
		    bi->stream), "rope q");
		KR(cuda_rope_forward(bi->k, (const int32_t *)(bi->d_meta +
		    ml.pos), T, nkv, hd, mi->n_rot, mi->rope_freq_base,
		    bi->stream), "rope k");
		KR(cuda_kv_store_forward(pool_k(cp, layer), pool_v(cp, layer),
		    bi->k, bi->v, (const int32_t *)(bi->d_meta + ml.slots), T,
		    nkv, hd, bi->stream), "kv store");

		aa.k_cache = pool_k(cp, layer);
		aa.v_cache = pool_v(cp, layer);
		KR(cuda_attention_forward(&aa, bi->stream), "attention");

		KR(cuda_matmul_forward(bi->blas, bi->xb, bi->att, CUDA_ACT_F32,
		    l->wo.d, l->wo.type, T, dim, dim), "attention output");
		KR(cuda_add_forward(bi->x, bi->x, bi->xb, (size_t)T * dim,
		    bi->stream), "attention residual");

		KR(cuda_rmsnorm_forward(bi->xb, bi->x, l->ffn_norm, T, dim,
		    mi->rms_eps, bi->stream), "ffn norm");
		KR(cuda_matmul_forward(bi->blas, bi->hb, bi->xb, CUDA_ACT_F32,
		    l->w_gate.d, l->w_gate.type, T, dim, ff), "ffn gate");
		KR(cuda_matmul_forward(bi->blas, bi->hb2, bi->xb, CUDA_ACT_F32,
		    l->w_up.d, l->w_up.type, T, dim, ff), "ffn up");
		KR(cuda_swiglu_forward(bi->hb, bi->hb, bi->hb2, (size_t)T * ff,
		    bi->stream), "swiglu");
		KR(cuda_matmul_forward(bi->blas, bi->xb, bi->hb, CUDA_ACT_F32,
		    l->w_down.d, l->w_down.type, T, ff, dim), "ffn down");
		KR(cuda_add_forward(bi->x, bi->x, bi->xb, (size_t)T * dim,
		    bi->stream), "ffn residual");
	}

	/*
	 * The output head, only for the last row of entries wanting logits:
	 * those rows are gathered as an embedding lookup with x as an F32
	 * table of T rows.
	 */
	if (n_out > 0) {
		xo = bi->d_out;
		lg = bi->d_out + (size_t)bi->cap_out * dim;
		KR(cuda_embedding_forward(xo, bi->x, TT_F32, dim, T,
		    (const int32_t *)(bi->d_meta + ml.out_rows), n_out,
		    bi->stream), "gather output rows");
		KR(cuda_rmsnorm_forward(xo, xo, bi->output_norm, n_out, dim,
		    mi->rms_eps, bi->stream), "output norm");
		KR(cuda_matmul_forward(bi->blas, lg, xo, CUDA_ACT_F32,
		    bi->output.d, bi->output.type, n_out, dim, mi->n_vocab),
		    "output head");
		CU(cudaMemcpyAsync(bi->h_logits, lg, (size_t)n_out *
		    mi->n_vocab * sizeof(float), cudaMemcpyDeviceToHost,
		    bi->stream), "copy logits");
	}
	/* Also catches errors of kernels that ran after their launch. */
	CU(cudaStreamSynchronize(bi->stream), "forward pass");

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
	cudaStreamSynchronize(bi->stream);
	return (-1);
}

/* Queue a copy of KV pages on dst's stream, between devices if need be. */
static int
copy_run(struct backend_inst *dst, struct backend_inst *src, void *d,
    const void *s, size_t bytes, char **cause)
{
	if (dst->dev == src->dev) {
		if (cu_failed(cudaMemcpyAsync(d, s, bytes,
		    cudaMemcpyDeviceToDevice, dst->stream), "copy kv blocks",
		    cause))
			return (-1);
	} else if (cu_failed(cudaMemcpyPeerAsync(d, dst->dev, s, src->dev,
	    bytes, dst->stream), "copy kv blocks between devices", cause))
		return (-1);
	return (0);
}

/*
 * Copy src_seq's KV into the empty dst_seq: blocks are taken from dst_pool
 * on the host, then each layer's K and V pages are copied on the device
 * (between devices with peer copies when the instances differ).
 */
static int
cuda_kv_copy(struct backend_inst *dst, struct kv_pool *dst_pool,
    struct kv_seq *dst_seq, struct backend_inst *src,
    const struct kv_pool *src_pool, const struct kv_seq *src_seq,
    char **cause)
{
	struct cuda_pool	*dp = cuda_pool_of(dst_pool);
	const struct cuda_pool	*sp = cuda_pool_of(src_pool);
	const struct kv_layout	*dl, *sl;
	const size_t		 blk = (size_t)KV_BLOCK *
				    dst_pool->layout.n_kv_heads *
				    dst_pool->layout.head_dim * sizeof(uint16_t);
	uint32_t		 nb, i, layer, run;
	size_t			 doff, soff;

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

	/* The source's earlier writes are ordered on its stream. */
	CU(cudaSetDevice(src->dev), "select source device");
	CU(cudaStreamSynchronize(src->stream), "drain source stream");
	CU(cudaSetDevice(dst->dev), "select device");
	/* Runs of consecutive block ids on both sides go in one copy. */
	for (i = 0; i < nb; i += run) {
		run = 1;
		while (i + run < nb && dst_seq->blocks[i + run] ==
		    dst_seq->blocks[i] + run && src_seq->blocks[i + run] ==
		    src_seq->blocks[i] + run)
			run++;
		doff = (size_t)dst_seq->blocks[i] * blk;
		soff = (size_t)src_seq->blocks[i] * blk;
		for (layer = 0; layer < dl->n_layers; layer++) {
			if (copy_run(dst, src, (uint8_t *)pool_k(dp, layer) +
			    doff, (const uint8_t *)pool_k(sp, layer) + soff,
			    (size_t)run * blk, cause) != 0 ||
			    copy_run(dst, src, (uint8_t *)pool_v(dp, layer) +
			    doff, (const uint8_t *)pool_v(sp, layer) + soff,
			    (size_t)run * blk, cause) != 0)
				goto fail;
		}
	}
	/* The source may reuse its blocks as soon as this returns. */
	CU(cudaStreamSynchronize(dst->stream), "kv copy");
	dst_seq->n_tokens = src_seq->n_tokens;
	return (0);

fail:
	cudaSetDevice(dst->dev);
	cudaStreamSynchronize(dst->stream);
	kv_seq_release(dst_pool, dst_seq);
	return (-1);
}

const struct backend_ops backend_cuda_ops = {
	.name = "cuda",
	.create = cuda_create,
	.destroy = cuda_destroy,
	.kv_pool_create = cuda_kv_pool_create,
	.kv_pool_free = cuda_kv_pool_free,
	.forward = cuda_forward,
	.kv_copy = cuda_kv_copy,
};
