/* model.c: load a llama-architecture GGUF model: hyperparameters and weights. */

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "log.h"
#include "matmul.h"
#include "model.h"
#include "quant.h"
#include "tensor_type.h"
#include "tokenizer.h"
#include "util.h"

/* Progress bookkeeping while the weights are prepared. */
struct load_ctx {
	struct model	 *m;
	void		(*progress)(void *, double);
	void		 *arg;
	uint64_t	  done;		/* bytes prepared */
	uint64_t	  total;	/* bytes of all tensors */
};

/* Tell the caller how far loading has come. */
static void
load_progress(struct load_ctx *lc, uint64_t bytes)
{
	lc->done += bytes;
	if (lc->progress != NULL && lc->total > 0)
		lc->progress(lc->arg, (double)lc->done / (double)lc->total);
}

/* Read an optional u32 key: absent leaves *v alone, present must be valid. */
static int
get_u32_opt(const struct gguf_file *f, const char *key, uint32_t *v,
    char **cause)
{
	if (gguf_find(f, key) == NULL)
		return (0);
	return (gguf_get_u32(f, key, v, cause));
}

/* Read an optional f32 key. */
static int
get_f32_opt(const struct gguf_file *f, const char *key, float *v, char **cause)
{
	if (gguf_find(f, key) == NULL)
		return (0);
	return (gguf_get_f32(f, key, v, cause));
}

/* Check a u32 hyperparameter lies in [lo, hi]. */
static int
check_range(const char *key, uint32_t v, uint32_t lo, uint32_t hi,
    char **cause)
{
	if (v < lo || v > hi) {
		set_cause(cause, "%s %u out of range %u..%u", key, v, lo, hi);
		return (-1);
	}
	return (0);
}

/* Read and check the llama.* hyperparameters. */
static int
load_hparams(struct model *m, const struct model_opts *o, char **cause)
{
	const struct gguf_file	*f = m->gguf;
	struct model_info	*i = &m->info;
	char			*arch;

	arch = gguf_get_str(f, "general.architecture", cause);
	if (arch == NULL)
		return (-1);
	if (strcmp(arch, "llama") != 0) {
		set_cause(cause, "unsupported architecture '%s'", arch);
		free(arch);
		return (-1);
	}
	free(arch);
	i->arch = "llama";

	if (gguf_find(f, "general.name") != NULL) {
		m->name = gguf_get_str(f, "general.name", cause);
		if (m->name == NULL)
			return (-1);
	} else
		m->name = xstrdup("");
	i->name = m->name;

	if (gguf_get_u32(f, "llama.context_length", &i->n_ctx_train, cause) != 0 ||
	    gguf_get_u32(f, "llama.embedding_length", &i->n_embd, cause) != 0 ||
	    gguf_get_u32(f, "llama.block_count", &i->n_layers, cause) != 0 ||
	    gguf_get_u32(f, "llama.feed_forward_length", &i->n_ff, cause) != 0 ||
	    gguf_get_u32(f, "llama.attention.head_count", &i->n_head, cause) != 0)
		return (-1);
	i->n_head_kv = i->n_head;
	if (get_u32_opt(f, "llama.attention.head_count_kv", &i->n_head_kv,
	    cause) != 0)
		return (-1);
	if (gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon",
	    &i->rms_eps, cause) != 0)
		return (-1);
	i->rope_freq_base = 10000.0f;
	if (get_f32_opt(f, "llama.rope.freq_base", &i->rope_freq_base,
	    cause) != 0)
		return (-1);

	if (check_range("llama.context_length", i->n_ctx_train, 1,
	    MODEL_MAX_CTX, cause) != 0 ||
	    check_range("llama.embedding_length", i->n_embd, 1, MODEL_MAX_EMBD,
	    cause) != 0 ||
	    check_range("llama.block_count", i->n_layers, 1, MODEL_MAX_LAYERS,
	    cause) != 0 ||
	    check_range("llama.feed_forward_length", i->n_ff, 1, MODEL_MAX_FF,
	    cause) != 0 ||
	    check_range("llama.attention.head_count", i->n_head, 1,
	    MODEL_MAX_HEADS, cause) != 0 ||
	    check_range("llama.attention.head_count_kv", i->n_head_kv, 1,
	    MODEL_MAX_HEADS, cause) != 0)
		return (-1);
	if (i->n_embd % i->n_head != 0) {
		set_cause(cause, "llama.attention.head_count %u does not divide "
		    "llama.embedding_length %u", i->n_head, i->n_embd);
		return (-1);
	}
	if (i->n_head % i->n_head_kv != 0) {
		set_cause(cause, "llama.attention.head_count_kv %u does not "
		    "divide llama.attention.head_count %u", i->n_head_kv,
		    i->n_head);
		return (-1);
	}
	i->head_dim = i->n_embd / i->n_head;
	if (check_range("head dimension", i->head_dim, 2, MODEL_MAX_HEAD_DIM,
	    cause) != 0)
		return (-1);
	i->n_rot = i->head_dim;
	if (get_u32_opt(f, "llama.rope.dimension_count", &i->n_rot, cause) != 0)
		return (-1);
	if (i->n_rot < 2 || i->n_rot > i->head_dim || i->n_rot % 2 != 0) {
		set_cause(cause, "llama.rope.dimension_count %u is not an even "
		    "number in 2..%u (the head dimension)", i->n_rot,
		    i->head_dim);
		return (-1);
	}
	if (!(i->rms_eps > 0.0f && i->rms_eps < 1.0f)) {
		set_cause(cause, "llama.attention.layer_norm_rms_epsilon %g out "
		    "of range (0, 1)", (double)i->rms_eps);
		return (-1);
	}
	if (!(i->rope_freq_base > 1.0f && isfinite(i->rope_freq_base))) {
		set_cause(cause, "llama.rope.freq_base %g is not a finite "
		    "number above 1", (double)i->rope_freq_base);
		return (-1);
	}

	if (o->ctx < 0 || o->ctx > MODEL_MAX_CTX) {
		set_cause(cause, "context %d out of range 0..%d", o->ctx,
		    MODEL_MAX_CTX);
		return (-1);
	}
	i->n_ctx = o->ctx != 0 ? (uint32_t)o->ctx : i->n_ctx_train;
	if (i->n_ctx > i->n_ctx_train)
		log_debug("context %u exceeds the trained context %u", i->n_ctx,
		    i->n_ctx_train);

	i->kv.n_layers = i->n_layers;
	i->kv.n_kv_heads = i->n_head_kv;
	i->kv.head_dim = i->head_dim;
	if (o->kv_block_size < 0) {
		set_cause(cause, "kv block size %d is negative", o->kv_block_size);
		return (-1);
	}
	i->kv.block_size = o->kv_block_size != 0 ? (uint32_t)o->kv_block_size :
	    KV_BLOCK_SIZE_DEFAULT;
	i->kv.type = o->kv_type_f32 ? KV_TYPE_F32 : KV_TYPE_F16;
	return (kv_layout_check(&i->kv, cause));
}

/* Find a tensor and check its shape; cause names it when absent or wrong. */
static const struct gguf_tensor *
get_tensor(const struct model *m, const char *name, uint32_t n_dims,
    uint64_t ne0, uint64_t ne1, char **cause)
{
	const struct gguf_tensor	*t;
	uint64_t			 ne[2] = { ne0, ne1 };

	t = gguf_find_tensor(m->gguf, name);
	if (t == NULL) {
		set_cause(cause, "missing tensor '%s'", name);
		return (NULL);
	}
	if (gguf_tensor_check(t, n_dims, ne, cause) != 0)
		return (NULL);
	return (t);
}

/* Load a weight matrix stored as ne = [cols, rows]. */
static struct qmat *
load_matrix(struct load_ctx *lc, const char *name, uint64_t cols,
    uint64_t rows, char **cause)
{
	const struct gguf_tensor	*t;
	struct qmat			*q;
	char				*why = NULL;

	t = get_tensor(lc->m, name, 2, cols, rows, cause);
	if (t == NULL)
		return (NULL);
	q = qmat_create(t->type, (int64_t)rows, (int64_t)cols, t->data, &why);
	if (q == NULL) {
		set_cause(cause, "tensor '%s': %s", name, why);
		free(why);
		return (NULL);
	}
	load_progress(lc, t->nbytes);
	return (q);
}

/* Load a vector of n floats (norm weights) into a new f32 array. */
static float *
load_vector(struct load_ctx *lc, const char *name, uint64_t n, char **cause)
{
	const struct gguf_tensor	*t;
	const struct tensor_type_info	*ti;
	float				*v;

	t = get_tensor(lc->m, name, 1, n, 1, cause);
	if (t == NULL)
		return (NULL);
	ti = tensor_type_get(t->type);
	if (ti == NULL || tensor_row_bytes(ti, n) == 0) {
		set_cause(cause, "tensor '%s': type %s cannot hold a row of %"
		    PRIu64, name, tensor_type_name(t->type), n);
		return (NULL);
	}
	v = xreallocarray(NULL, n, sizeof *v);
	dequantize_row(t->type, t->data, v, (int64_t)n);
	load_progress(lc, t->nbytes);
	return (v);
}

/* Load every weight and check every shape. */
static int
load_weights(struct load_ctx *lc, char **cause)
{
	struct model		*m = lc->m;
	struct model_info	*i = &m->info;
	const struct gguf_tensor *t;
	struct model_layer	*l;
	uint64_t		 kv_dim = (uint64_t)i->head_dim * i->n_head_kv;
	uint32_t		 n;
	char			 name[64];

	t = gguf_find_tensor(m->gguf, "token_embd.weight");
	if (t == NULL) {
		set_cause(cause, "missing tensor 'token_embd.weight'");
		return (-1);
	}
	if (t->n_dims != 2 || t->ne[0] != i->n_embd) {
		set_cause(cause, "tensor 'token_embd.weight': shape [%" PRIu64
		    ", %" PRIu64 "], expected [%u, n_vocab]", t->ne[0],
		    t->n_dims > 1 ? t->ne[1] : 1, i->n_embd);
		return (-1);
	}
	if (t->ne[1] != (uint64_t)tokenizer_n_vocab(m->tok)) {
		set_cause(cause, "vocabulary has %d tokens but "
		    "token_embd.weight has %" PRIu64 " rows",
		    tokenizer_n_vocab(m->tok), t->ne[1]);
		return (-1);
	}
	i->n_vocab = (uint32_t)t->ne[1];
	if (gguf_find(m->gguf, "llama.vocab_size") != NULL) {
		uint32_t	vs;

		if (gguf_get_u32(m->gguf, "llama.vocab_size", &vs, cause) != 0)
			return (-1);
		if (vs != i->n_vocab) {
			set_cause(cause, "llama.vocab_size %u but "
			    "token_embd.weight has %u rows", vs, i->n_vocab);
			return (-1);
		}
	}
	m->tok_embd = load_matrix(lc, "token_embd.weight", i->n_embd, i->n_vocab,
	    cause);
	if (m->tok_embd == NULL)
		return (-1);
	m->output_norm = load_vector(lc, "output_norm.weight", i->n_embd, cause);
	if (m->output_norm == NULL)
		return (-1);
	if (gguf_find_tensor(m->gguf, "output.weight") != NULL) {
		m->output = load_matrix(lc, "output.weight", i->n_embd,
		    i->n_vocab, cause);
		if (m->output == NULL)
			return (-1);
	} else
		m->output = m->tok_embd;	/* tied embeddings */

	m->layers = xcalloc(i->n_layers, sizeof *m->layers);
	for (n = 0; n < i->n_layers; n++) {
		l = &m->layers[n];
#define MAT(field, what, cols, rows) do {				\
	snprintf(name, sizeof name, "blk.%u.%s.weight", n, what);	\
	if ((l->field = load_matrix(lc, name, cols, rows, cause)) == NULL) \
		return (-1);						\
} while (0)
#define VEC(field, what, len) do {					\
	snprintf(name, sizeof name, "blk.%u.%s.weight", n, what);	\
	if ((l->field = load_vector(lc, name, len, cause)) == NULL)	\
		return (-1);						\
} while (0)
		VEC(attn_norm, "attn_norm", i->n_embd);
		MAT(wq, "attn_q", i->n_embd, i->n_embd);
		MAT(wk, "attn_k", i->n_embd, kv_dim);
		MAT(wv, "attn_v", i->n_embd, kv_dim);
		MAT(wo, "attn_output", i->n_embd, i->n_embd);
		VEC(ffn_norm, "ffn_norm", i->n_embd);
		MAT(w_gate, "ffn_gate", i->n_embd, i->n_ff);
		MAT(w_up, "ffn_up", i->n_embd, i->n_ff);
		MAT(w_down, "ffn_down", i->n_ff, i->n_embd);
#undef MAT
#undef VEC
	}
	return (0);
}

/* Count parameters and find the type that holds most of them. */
static void
summarize(struct model *m)
{
	const struct gguf_file	*f = m->gguf;
	uint64_t		 per_type[TT_GGUF_MAX + 1];
	uint64_t		 i;
	uint32_t		 ty, best = 0;

	memset(per_type, 0, sizeof per_type);
	m->info.n_params = 0;
	for (i = 0; i < f->n_tensors; i++) {
		m->info.n_params += f->tensors[i].n_elems;
		/* Norms and other vectors do not say how a model is stored. */
		if (f->tensors[i].n_dims >= 2 &&
		    f->tensors[i].type <= TT_GGUF_MAX)
			per_type[f->tensors[i].type] += f->tensors[i].n_elems;
	}
	for (ty = 0; ty <= TT_GGUF_MAX; ty++) {
		if (per_type[ty] > per_type[best])
			best = ty;
	}
	m->info.type_name = tensor_type_name(best);
	if (m->info.type_name == NULL)
		m->info.type_name = "unknown";
	m->info.file_size = f->size;
}

/* Load a model. */
struct model *
model_load(const char *path, const struct model_opts *o,
    void (*progress)(void *, double), void *arg, char **cause)
{
	struct model		*m;
	struct model_opts	 defaults;
	struct load_ctx		 lc;
	char			*why = NULL;
	uint32_t		 j;
	uint64_t		 i;

	if (o == NULL) {
		memset(&defaults, 0, sizeof defaults);
		o = &defaults;
	}
	m = xcalloc(1, sizeof *m);
	m->opts = *o;
	m->gguf = gguf_open(path, cause);
	if (m->gguf == NULL)
		goto fail;
	if (load_hparams(m, o, cause) != 0)
		goto fail;
	m->tok = tokenizer_load(m->gguf, &why);
	if (m->tok == NULL) {
		set_cause(cause, "tokenizer: %s", why);
		free(why);
		goto fail;
	}

	memset(&lc, 0, sizeof lc);
	lc.m = m;
	lc.progress = progress;
	lc.arg = arg;
	for (i = 0; i < m->gguf->n_tensors; i++)
		lc.total += m->gguf->tensors[i].nbytes;
	if (load_weights(&lc, cause) != 0)
		goto fail;

	m->rope_inv_freq = xreallocarray(NULL, m->info.n_rot / 2,
	    sizeof *m->rope_inv_freq);
	for (j = 0; j < m->info.n_rot / 2; j++) {
		m->rope_inv_freq[j] = pow((double)m->info.rope_freq_base,
		    -2.0 * j / m->info.n_rot);
	}
	summarize(m);
	if (progress != NULL)
		progress(arg, 1.0);
	log_debug("%s: %s, %" PRIu64 " parameters, %s, %u layers, %u vocab",
	    path, m->info.arch, m->info.n_params, m->info.type_name,
	    m->info.n_layers, m->info.n_vocab);
	return (m);

fail:
	model_free(m);
	return (NULL);
}

/* Free a model and everything it holds. */
void
model_free(struct model *m)
{
	uint32_t	n;

	if (m == NULL)
		return;
	if (m->layers != NULL) {
		for (n = 0; n < m->info.n_layers; n++) {
			struct model_layer *l = &m->layers[n];

			qmat_free(l->wq);
			qmat_free(l->wk);
			qmat_free(l->wv);
			qmat_free(l->wo);
			qmat_free(l->w_gate);
			qmat_free(l->w_up);
			qmat_free(l->w_down);
			free(l->attn_norm);
			free(l->ffn_norm);
		}
		free(m->layers);
	}
	if (m->output != m->tok_embd)
		qmat_free(m->output);
	qmat_free(m->tok_embd);
	free(m->output_norm);
	free(m->rope_inv_freq);
	if (m->tok != NULL)
		tokenizer_free(m->tok);
	free(m->name);
	if (m->gguf != NULL)
		gguf_close(m->gguf);
	free(m);
}

/* The model's shape and summary. */
const struct model_info *
model_info(const struct model *m)
{
	return (&m->info);
}

/* The model's tokenizer (owned by the model). */
struct tokenizer *
model_tokenizer(const struct model *m)
{
	return (m->tok);
}

/* The options the model was loaded with. */
const struct model_opts *
model_opts(const struct model *m)
{
	return (&m->opts);
}

/* Change the positions per sequence of a freshly loaded model. */
int
model_set_ctx(struct model *m, uint32_t n_ctx, char **cause)
{
	if (n_ctx < 1 || n_ctx > MODEL_MAX_CTX) {
		set_cause(cause, "context %u out of range 1..%d", n_ctx,
		    MODEL_MAX_CTX);
		return (-1);
	}
	m->info.n_ctx = n_ctx;
	m->opts.ctx = (int)n_ctx;
	return (0);
}

/* A KV pool of n_blocks blocks laid out for this model. */
struct kv_pool *
model_kv_pool_create(const struct model *m, uint32_t n_blocks, char **cause)
{
	return (kv_pool_create(&m->info.kv, n_blocks, cause));
}
