/* model.c: load a GGUF model: tokenizer, weights and their shapes (arch.c reads the keys). */

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

/* Find a tensor and check its shape; cause names it when absent or wrong. */
static const struct gguf_tensor *
get_tensor(struct model *m, const char *name, uint32_t n_dims,
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
	if (m->tensor_used != NULL)
		m->tensor_used[t - m->gguf->tensors] = 1;
	return (t);
}

/*
 * Count the F16 matrices, those computing as BF16 (bf16 values) and those
 * on 16-bit integer products; the BF16 ones and those of them on 16-bit
 * integer products.
 */
static void
count_matrix(struct model *m, const struct qmat *q, uint32_t type)
{
	if (type == TT_BF16) {
		m->n_bf16++;
		if (qmat_i16(q))
			m->n_bf16_i16++;
		return;
	}
	if (type != TT_F16)
		return;
	m->n_f16++;
	if (qmat_bf16_values(q))
		m->n_f16_bf16++;
	if (qmat_i16(q))
		m->n_f16_i16++;
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
	count_matrix(lc->m, q, t->type);
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

/* Load a vector that may be absent (*v stays NULL). */
static int
load_opt_vector(struct load_ctx *lc, const char *name, uint64_t n, float **v,
    char **cause)
{
	if (gguf_find_tensor(lc->m->gguf, name) == NULL)
		return (0);
	*v = load_vector(lc, name, n, cause);
	return (*v == NULL ? -1 : 0);
}

/* RoPE factors divide frequencies: each must be finite and positive. */
static int
check_factors(const struct model *m, const char *name, const float *f,
    char **cause)
{
	uint32_t	j;

	if (f == NULL)
		return (0);
	for (j = 0; j < m->info.n_rot / 2; j++) {
		if (!(isfinite(f[j]) && f[j] > 0.0f)) {
			set_cause(cause, "tensor '%s': factor %u is %g, not a "
			    "finite positive number", name, j, (double)f[j]);
			return (-1);
		}
	}
	return (0);
}

/*
 * A matrix made of some rows of a fused tensor (phi3's attn_qkv and
 * gate+up ffn_up): the tensor's shape is checked whole by the caller.
 */
static struct qmat *
slice_matrix(struct load_ctx *lc, const struct gguf_tensor *t,
    const char *name, uint64_t row0, uint64_t rows, char **cause)
{
	const struct tensor_type_info	*ti = tensor_type_get(t->type);
	struct qmat			*q;
	char				*why = NULL;
	size_t				 rb;

	rb = ti != NULL ? tensor_row_bytes(ti, t->ne[0]) : 0;
	if (rb == 0) {
		set_cause(cause, "tensor '%s': type %s cannot hold a row of %"
		    PRIu64, name, tensor_type_name(t->type), t->ne[0]);
		return (NULL);
	}
	q = qmat_create(t->type, (int64_t)rows, (int64_t)t->ne[0],
	    (const char *)t->data + row0 * rb, &why);
	if (q == NULL) {
		set_cause(cause, "tensor '%s': %s", name, why);
		free(why);
	} else
		count_matrix(lc->m, q, t->type);
	return (q);
}

/* Load one layer's weights as the architecture lays them out. */
static int
load_layer(struct load_ctx *lc, uint32_t n, char **cause)
{
	struct model		*m = lc->m;
	const struct model_info	*i = &m->info;
	const struct model_hparams *hp = &m->hp;
	struct model_layer	*l = &m->layers[n];
	const struct gguf_tensor *t;
	uint64_t		 kvd = (uint64_t)i->head_dim * i->n_head_kv;
	uint64_t		 qd = i->q_dim;
	char			 name[64];

#define NAME(what, kind)	snprintf(name, sizeof name, "blk.%u.%s.%s", n, what, kind)
#define MAT(field, what, cols, rows) do {				\
	NAME(what, "weight");						\
	if ((l->field = load_matrix(lc, name, cols, rows, cause)) == NULL) \
		return (-1);						\
} while (0)
#define VEC(field, what, kind, len) do {				\
	NAME(what, kind);						\
	if ((l->field = load_vector(lc, name, len, cause)) == NULL)	\
		return (-1);						\
} while (0)
	VEC(attn_norm, "attn_norm", "weight", i->n_embd);
	NAME("attn_qkv", "weight");
	if (hp->fused && gguf_find_tensor(m->gguf, name) != NULL) {
		t = get_tensor(m, name, 2, i->n_embd, qd + 2 * kvd, cause);
		if (t == NULL ||
		    (l->wq = slice_matrix(lc, t, name, 0, qd, cause)) == NULL ||
		    (l->wk = slice_matrix(lc, t, name, qd, kvd, cause)) == NULL ||
		    (l->wv = slice_matrix(lc, t, name, qd + kvd, kvd,
		    cause)) == NULL)
			return (-1);
		load_progress(lc, t->nbytes);
	} else {
		MAT(wq, "attn_q", i->n_embd, qd);
		MAT(wk, "attn_k", i->n_embd, kvd);
		MAT(wv, "attn_v", i->n_embd, kvd);
	}
	if (hp->qkv_bias) {
		VEC(bq, "attn_q", "bias", qd);
		VEC(bk, "attn_k", "bias", kvd);
		VEC(bv, "attn_v", "bias", kvd);
	}
	if (hp->qk_norm) {
		VEC(q_norm, "attn_q_norm", "weight", i->head_dim);
		VEC(k_norm, "attn_k_norm", "weight", i->head_dim);
	}
	MAT(wo, "attn_output", qd, i->n_embd);
	if (hp->post_norms)
		VEC(post_attn_norm, "post_attention_norm", "weight", i->n_embd);
	VEC(ffn_norm, "ffn_norm", "weight", i->n_embd);
	if (hp->fused) {
		/* ffn_up holds the gate's rows, then the up rows. */
		NAME("ffn_up", "weight");
		t = get_tensor(m, name, 2, i->n_embd, 2 * (uint64_t)i->n_ff,
		    cause);
		if (t == NULL ||
		    (l->w_gate = slice_matrix(lc, t, name, 0, i->n_ff,
		    cause)) == NULL ||
		    (l->w_up = slice_matrix(lc, t, name, i->n_ff, i->n_ff,
		    cause)) == NULL)
			return (-1);
		load_progress(lc, t->nbytes);
	} else {
		MAT(w_gate, "ffn_gate", i->n_embd, i->n_ff);
		MAT(w_up, "ffn_up", i->n_embd, i->n_ff);
	}
	MAT(w_down, "ffn_down", i->n_ff, i->n_embd);
	if (hp->post_norms)
		VEC(post_ffn_norm, "post_ffw_norm", "weight", i->n_embd);
#undef MAT
#undef VEC
#undef NAME
	return (0);
}

/* Load every weight and check every shape. */
static int
load_weights(struct load_ctx *lc, char **cause)
{
	struct model		*m = lc->m;
	struct model_info	*i = &m->info;
	const struct gguf_tensor *t;
	uint32_t		 n;
	uint64_t		 k;
	char			 key[128];

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
	if (gguf_find(m->gguf, arch_key(m, "vocab_size", key, sizeof key)) !=
	    NULL) {
		uint32_t	vs;

		if (gguf_get_u32(m->gguf, key, &vs, cause) != 0)
			return (-1);
		if (vs != i->n_vocab) {
			set_cause(cause, "%s %u but token_embd.weight has %u "
			    "rows", key, vs, i->n_vocab);
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
	if (m->hp.tied_only)
		m->output = m->tok_embd;	/* gemma2: always token_embd */
	else if (gguf_find_tensor(m->gguf, "output.weight") != NULL) {
		m->output = load_matrix(lc, "output.weight", i->n_embd,
		    i->n_vocab, cause);
		if (m->output == NULL)
			return (-1);
	} else
		m->output = m->tok_embd;	/* tied embeddings */
	if (gguf_find_tensor(m->gguf, "output.bias") != NULL &&
	    (m->output_bias = load_vector(lc, "output.bias", i->n_vocab,
	    cause)) == NULL)
		return (-1);
	if (load_opt_vector(lc, "rope_freqs.weight", i->n_rot / 2,
	    &m->rope_freqs, cause) != 0 ||
	    load_opt_vector(lc, "rope_factors_long.weight", i->n_rot / 2,
	    &m->rope_long, cause) != 0 ||
	    load_opt_vector(lc, "rope_factors_short.weight", i->n_rot / 2,
	    &m->rope_short, cause) != 0)
		return (-1);
	if (m->rope_freqs != NULL && (m->rope_long != NULL ||
	    m->rope_short != NULL)) {
		set_cause(cause, "tensor 'rope_freqs.weight' and LongRoPE "
		    "factors are both present");
		return (-1);
	}
	if (check_factors(m, "rope_freqs.weight", m->rope_freqs, cause) != 0 ||
	    check_factors(m, "rope_factors_long.weight", m->rope_long,
	    cause) != 0 ||
	    check_factors(m, "rope_factors_short.weight", m->rope_short,
	    cause) != 0)
		return (-1);

	for (n = 0; n < i->n_layers; n++) {
		if (load_layer(lc, n, cause) != 0)
			return (-1);
	}
	/*
	 * A layer tensor or a bias the architecture has no use for would
	 * change the results if it were skipped, so it is refused (as
	 * llama.cpp refuses any unused tensor); other extras are skipped.
	 */
	for (k = 0; k < m->gguf->n_tensors; k++) {
		const char *tn = m->gguf->tensors[k].name;
		size_t	    tl = strlen(tn);

		if (m->tensor_used[k])
			continue;
		if (strncmp(tn, "blk.", 4) != 0 &&
		    !(tl > 5 && strcmp(tn + tl - 5, ".bias") == 0)) {
			log_debug("tensor '%s' is not used", tn);
			continue;
		}
		set_cause(cause, "tensor '%s' (%s) is not part of the %s "
		    "architecture", tn,
		    tensor_type_name(m->gguf->tensors[k].type) != NULL ?
		    tensor_type_name(m->gguf->tensors[k].type) : "unknown",
		    i->arch);
		return (-1);
	}
	return (0);
}

/*
 * Whether model m, mostly of weight type ty, computes attention with bf16
 * dot products on this CPU: always where every float type may take them
 * (bf16-dot yes); where only BF16 may (auto, on a CPU that issues them
 * fast), for the quantized types, whose products already round their
 * activations to 8-bit integers (bf16 attention moves their logits less
 * than the quantization does), and for the models whose matrices take
 * bf16 dot products: BF16 ones, and F16 ones whose every F16 matrix holds
 * bf16 values, which so compute as their BF16 form does.  Their products
 * already round the activations to bf16.  F32 models, and F16 ones of
 * other values, stay exact there.
 */
static int
attn_bf16_for(const struct model *m, uint32_t ty)
{
	if (!quant_bf16_dot_supported())	/* AVX-512 in use, with bf16 */
		return (0);
	switch (quant_bf16_dot_allowed()) {
	case QUANT_BF16_DOT_ALL:
		return (1);
	case QUANT_BF16_DOT_BF16:
		if (ty == TT_F16)
			return (m->n_f16 > 0 && m->n_f16_bf16 == m->n_f16);
		return (ty != TT_F32);
	default:
		return (0);
	}
}

/*
 * Whether a model mostly of weight type ty computes attention with 16-bit
 * integer products on this CPU: where the kernels run AVX2 (no AVX-512)
 * and F16 weights take those products (bf16-dot auto, on a CPU that
 * issues them fast), for the quantized types, as bf16 attention goes to
 * them where the CPU has bf16 dot products.
 */
static int
attn_i16_for(uint32_t ty)
{
	return (quant_isa() == QUANT_ISA_AVX2 && quant_f16_i16_allowed() &&
	    ty != TT_F32 && ty != TT_F16 && ty != TT_BF16);
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
	m->attn_bf16 = attn_bf16_for(m, best);
	m->attn_i16 = attn_i16_for(best);
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
	if (arch_hparams(m, cause) != 0)
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
	m->tensor_used = xcalloc(m->gguf->n_tensors + 1, 1);
	if (load_weights(&lc, cause) != 0)
		goto fail;
	free(m->tensor_used);
	m->tensor_used = NULL;

	arch_rope_setup(m);
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
			free(l->bq);
			free(l->bk);
			free(l->bv);
			free(l->q_norm);
			free(l->k_norm);
			free(l->post_attn_norm);
			free(l->post_ffn_norm);
		}
		free(m->layers);
	}
	if (m->output != m->tok_embd)
		qmat_free(m->output);
	qmat_free(m->tok_embd);
	free(m->output_norm);
	free(m->output_bias);
	free(m->tensor_used);
	free(m->rope_freqs);
	free(m->rope_long);
	free(m->rope_short);
	free(m->rope[0].inv_freq);
	free(m->rope[1].inv_freq);
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
	arch_rope_setup(m);	/* LongRoPE picks its factors by context */
	return (0);
}

/* Read the weights of one decode step once (model.h). */
uint64_t
model_read_weights(const struct model *m, struct threadpool *tp)
{
	const struct qmat	**ms;
	uint64_t		  bytes;
	uint32_t		  l;
	int			  n = 0;

	ms = xcalloc((size_t)m->info.n_layers * 7 + 1, sizeof *ms);
	for (l = 0; l < m->info.n_layers; l++) {
		const struct model_layer *ly = &m->layers[l];
		const struct qmat *lm[] = { ly->wq, ly->wk, ly->wv, ly->wo,
		    ly->w_gate, ly->w_up, ly->w_down };
		size_t	i;

		for (i = 0; i < sizeof lm / sizeof lm[0]; i++)
			if (lm[i] != NULL)
				ms[n++] = lm[i];
	}
	if (m->output != NULL)
		ms[n++] = m->output;
	bytes = qmat_read_n(tp, n, ms, NULL);
	free(ms);
	return (bytes);
}

/*
 * A KV pool of n_blocks blocks laid out for this model on the CPU.  Where
 * attention runs on 16-bit integer products, keys and values asked for as
 * F16 are kept as that kernel's codes instead (KV_TYPE_I16), encoded once
 * when stored rather than by every job that reads them.
 */
struct kv_pool *
model_kv_pool_create(const struct model *m, uint32_t n_blocks, char **cause)
{
	struct kv_layout	l = m->info.kv;

	if (m->attn_i16 && l.type == KV_TYPE_F16 &&
	    l.head_dim % KV_I16_HD_ALIGN == 0)
		l.type = KV_TYPE_I16;
	return (kv_pool_create(&l, n_blocks, cause));
}
