/* arch.c: the architectures phased runs, their GGUF keys and checks, and the RoPE tables. */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "log.h"
#include "model.h"
#include "util.h"

/*
 * What each architecture does beyond plain llama, as llama.cpp's GGUF
 * converter lays it out.  Gemma's RMSNorm weights are stored with the 1
 * already added, so every norm is a plain multiply.
 */
struct arch_desc {
	const char	*name;
	enum model_arch	 id;
	int		 rope_neox, ffn_gelu, post_norms, qk_norm, qkv_bias;
	int		 fused, tied_only, embd_scaled;
	int		 swa;		/* reads attention.sliding_window */
	uint32_t	 swa_period;	/* default local/global pattern */
};

static const struct arch_desc arches[] = {
	{ .name = "llama", .id = MODEL_ARCH_LLAMA },
	{ .name = "qwen2", .id = MODEL_ARCH_QWEN2, .rope_neox = 1,
	  .qkv_bias = 1 },
	{ .name = "qwen3", .id = MODEL_ARCH_QWEN3, .rope_neox = 1,
	  .qk_norm = 1 },
	{ .name = "gemma2", .id = MODEL_ARCH_GEMMA2, .rope_neox = 1,
	  .ffn_gelu = 1, .post_norms = 1, .tied_only = 1, .embd_scaled = 1,
	  .swa = 1, .swa_period = 2 },
	{ .name = "gemma3", .id = MODEL_ARCH_GEMMA3, .rope_neox = 1,
	  .ffn_gelu = 1, .post_norms = 1, .qk_norm = 1, .embd_scaled = 1,
	  .swa = 1, .swa_period = 6 },
	{ .name = "phi3", .id = MODEL_ARCH_PHI3, .rope_neox = 1, .fused = 1,
	  .swa = 1 },
};

/* The key "ARCH.suffix" of the model's architecture. */
const char *
arch_key(const struct model *m, const char *suffix, char *buf, size_t len)
{
	snprintf(buf, len, "%s.%s", m->info.arch, suffix);
	return (buf);
}

/* Read a required u32 key of the architecture. */
static int
get_u32(const struct model *m, const char *suffix, uint32_t *v, char **cause)
{
	char	key[128];

	return (gguf_get_u32(m->gguf, arch_key(m, suffix, key, sizeof key), v,
	    cause));
}

/* Read an optional u32 key: absent leaves *v alone, present must be valid. */
static int
get_u32_opt(const struct model *m, const char *suffix, uint32_t *v,
    char **cause)
{
	char	key[128];

	arch_key(m, suffix, key, sizeof key);
	if (gguf_find(m->gguf, key) == NULL)
		return (0);
	return (gguf_get_u32(m->gguf, key, v, cause));
}

/* Read an optional f32 key. */
static int
get_f32_opt(const struct model *m, const char *suffix, float *v, char **cause)
{
	char	key[128];

	arch_key(m, suffix, key, sizeof key);
	if (gguf_find(m->gguf, key) == NULL)
		return (0);
	return (gguf_get_f32(m->gguf, key, v, cause));
}

/* Check a u32 hyperparameter lies in [lo, hi]. */
static int
check_range(const struct model *m, const char *suffix, uint32_t v,
    uint32_t lo, uint32_t hi, char **cause)
{
	char	key[128];

	if (v < lo || v > hi) {
		set_cause(cause, "%s %u out of range %u..%u",
		    arch_key(m, suffix, key, sizeof key), v, lo, hi);
		return (-1);
	}
	return (0);
}

/* Check an optional f32 key holds a finite positive number (or 0 if zero_ok). */
static int
check_pos(const struct model *m, const char *suffix, float v, int zero_ok,
    char **cause)
{
	char	key[128];

	if (isfinite(v) && (v > 0.0f || (zero_ok && v == 0.0f)))
		return (0);
	set_cause(cause, "%s %g is not a finite positive number",
	    arch_key(m, suffix, key, sizeof key), (double)v);
	return (-1);
}

/* The RoPE scaling keys: linear scaling and LongRoPE; others are refused. */
static int
rope_scaling(struct model *m, char **cause)
{
	struct model_hparams	*hp = &m->hp;
	char			 key[128], *type = NULL;
	float			 factor = 0.0f;

	arch_key(m, "rope.scaling.type", key, sizeof key);
	if (gguf_find(m->gguf, key) != NULL) {
		if ((type = gguf_get_str(m->gguf, key, cause)) == NULL)
			return (-1);
		if (strcmp(type, "none") != 0 && strcmp(type, "linear") != 0 &&
		    strcmp(type, "longrope") != 0) {
			set_cause(cause, "%s '%s' is not supported (none, "
			    "linear, longrope)", key, type);
			free(type);
			return (-1);
		}
	}
	if (get_f32_opt(m, "rope.scaling.factor", &factor, cause) != 0 ||
	    (factor == 0.0f &&
	    get_f32_opt(m, "rope.scale_linear", &factor, cause) != 0) ||
	    check_pos(m, "rope.scaling.factor", factor, 1, cause) != 0)
		goto fail;
	hp->rope_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
	if (type != NULL && strcmp(type, "none") == 0)
		hp->rope_scale = 1.0f;
	hp->rope_attn_factor = 1.0f;
	if (get_f32_opt(m, "rope.scaling.attn_factor", &hp->rope_attn_factor,
	    cause) != 0 ||
	    check_pos(m, "rope.scaling.attn_factor", hp->rope_attn_factor, 0,
	    cause) != 0)
		goto fail;
	hp->n_ctx_orig = m->info.n_ctx_train;
	if (get_u32_opt(m, "rope.scaling.original_context_length",
	    &hp->n_ctx_orig, cause) != 0)
		goto fail;
	free(type);
	return (0);
fail:
	free(type);
	return (-1);
}

/* The attention keys of the Gemma family and phi3's optional window. */
static int
attn_extras(struct model *m, const struct arch_desc *d, char **cause)
{
	struct model_hparams	*hp = &m->hp;
	struct model_info	*i = &m->info;
	float			 qpre = 0.0f;

	hp->q_scale = 1.0f / sqrtf((float)i->head_dim);
	/*
	 * Local layers: Gemma 3 turns them with their own base (10,000
	 * unless stated) and no scaling; elsewhere as the global ones.
	 */
	hp->swa_period = d->swa_period;
	hp->rope_base_swa = i->rope_freq_base;
	hp->rope_scale_swa = hp->rope_scale;
	if (d->id == MODEL_ARCH_GEMMA3) {
		hp->rope_base_swa = 10000.0f;
		hp->rope_scale_swa = 1.0f;
	}
	switch (d->id) {
	case MODEL_ARCH_GEMMA2:
		i->n_swa = 4096;	/* Gemma 2's window when unstated */
		if (get_f32_opt(m, "attn_logit_softcapping", &hp->attn_softcap,
		    cause) != 0 ||
		    get_f32_opt(m, "final_logit_softcapping",
		    &hp->final_softcap, cause) != 0 ||
		    check_pos(m, "attn_logit_softcapping", hp->attn_softcap, 1,
		    cause) != 0 ||
		    check_pos(m, "final_logit_softcapping", hp->final_softcap, 1,
		    cause) != 0)
			return (-1);
		break;
	case MODEL_ARCH_GEMMA3:
		if (get_f32_opt(m, "final_logit_softcapping",
		    &hp->final_softcap, cause) != 0 ||
		    check_pos(m, "final_logit_softcapping", hp->final_softcap, 1,
		    cause) != 0)
			return (-1);
		break;
	default:
		break;
	}
	/* llama, qwen2 and qwen3 attend to the whole context, as llama.cpp. */
	if (d->swa &&
	    get_u32_opt(m, "attention.sliding_window", &i->n_swa, cause) != 0)
		return (-1);
	if (i->n_swa != 0 &&
	    (get_u32_opt(m, "attention.sliding_window_pattern",
	    &hp->swa_period, cause) != 0 ||
	    get_f32_opt(m, "rope.freq_base_swa", &hp->rope_base_swa,
	    cause) != 0))
		return (-1);
	if (!(hp->rope_base_swa > 1.0f && isfinite(hp->rope_base_swa))) {
		set_cause(cause, "%s.rope.freq_base_swa %g is not a finite "
		    "number above 1", i->arch, (double)hp->rope_base_swa);
		return (-1);
	}
	if (d->id == MODEL_ARCH_GEMMA2 || d->id == MODEL_ARCH_GEMMA3) {
		/*
		 * Gemma scales queries by query_pre_attn_scalar, which the
		 * converter does not store: it is the head dimension except
		 * in the 27B models (46 and 62 layers), where it is
		 * n_embd / n_head.  A file that states it wins.
		 */
		if ((d->id == MODEL_ARCH_GEMMA2 && i->n_layers == 46) ||
		    (d->id == MODEL_ARCH_GEMMA3 && i->n_layers == 62))
			qpre = (float)(i->n_embd / i->n_head);
		if (get_f32_opt(m, "attention.query_pre_attn_scalar", &qpre,
		    cause) != 0 ||
		    check_pos(m, "attention.query_pre_attn_scalar", qpre, 1,
		    cause) != 0)
			return (-1);
		if (qpre != 0.0f)
			hp->q_scale = 1.0f / sqrtf(qpre);
	}
	return (0);
}

/* Read and check the hyperparameters of the file's architecture. */
int
arch_hparams(struct model *m, char **cause)
{
	const struct gguf_file	*f = m->gguf;
	const struct model_opts	*o = &m->opts;
	struct model_info	*i = &m->info;
	struct model_hparams	*hp = &m->hp;
	const struct arch_desc	*d = NULL;
	char			*arch, key[128];
	uint32_t		 vlen, n;
	size_t			 k;

	arch = gguf_get_str(f, "general.architecture", cause);
	if (arch == NULL)
		return (-1);
	for (k = 0; k < sizeof arches / sizeof arches[0]; k++) {
		if (strcmp(arch, arches[k].name) == 0)
			d = &arches[k];
	}
	if (d == NULL) {
		set_cause(cause, "unsupported architecture '%s' (llama, qwen2, "
		    "qwen3, gemma2, gemma3, phi3)", arch);
		free(arch);
		return (-1);
	}
	free(arch);
	i->arch = d->name;
	hp->arch = d->id;
	hp->rope_neox = d->rope_neox;
	hp->ffn_gelu = d->ffn_gelu;
	hp->post_norms = d->post_norms;
	hp->qk_norm = d->qk_norm;
	hp->qkv_bias = d->qkv_bias;
	hp->fused = d->fused;
	hp->tied_only = d->tied_only;

	if (gguf_find(f, "general.name") != NULL) {
		m->name = gguf_get_str(f, "general.name", cause);
		if (m->name == NULL)
			return (-1);
	} else
		m->name = xstrdup("");
	i->name = m->name;

	if (get_u32(m, "context_length", &i->n_ctx_train, cause) != 0 ||
	    get_u32(m, "embedding_length", &i->n_embd, cause) != 0 ||
	    get_u32(m, "block_count", &i->n_layers, cause) != 0 ||
	    get_u32(m, "feed_forward_length", &i->n_ff, cause) != 0 ||
	    get_u32(m, "attention.head_count", &i->n_head, cause) != 0)
		return (-1);
	i->n_head_kv = i->n_head;
	if (get_u32_opt(m, "attention.head_count_kv", &i->n_head_kv,
	    cause) != 0)
		return (-1);
	if (gguf_get_f32(f, arch_key(m, "attention.layer_norm_rms_epsilon",
	    key, sizeof key), &i->rms_eps, cause) != 0)
		return (-1);
	i->rope_freq_base = 10000.0f;
	if (get_f32_opt(m, "rope.freq_base", &i->rope_freq_base, cause) != 0)
		return (-1);

	if (check_range(m, "context_length", i->n_ctx_train, 1, MODEL_MAX_CTX,
	    cause) != 0 ||
	    check_range(m, "embedding_length", i->n_embd, 1, MODEL_MAX_EMBD,
	    cause) != 0 ||
	    check_range(m, "block_count", i->n_layers, 1, MODEL_MAX_LAYERS,
	    cause) != 0 ||
	    check_range(m, "feed_forward_length", i->n_ff, 1, MODEL_MAX_FF,
	    cause) != 0 ||
	    check_range(m, "attention.head_count", i->n_head, 1,
	    MODEL_MAX_HEADS, cause) != 0 ||
	    check_range(m, "attention.head_count_kv", i->n_head_kv, 1,
	    MODEL_MAX_HEADS, cause) != 0)
		return (-1);
	/* The head dimension is key_length when stated, else the width's share. */
	arch_key(m, "attention.key_length", key, sizeof key);
	if (gguf_find(f, key) != NULL) {
		if (gguf_get_u32(f, key, &i->head_dim, cause) != 0)
			return (-1);
		if (check_range(m, "attention.key_length", i->head_dim, 2,
		    MODEL_MAX_HEAD_DIM, cause) != 0)
			return (-1);
	} else {
		if (i->n_embd % i->n_head != 0) {
			set_cause(cause, "%s.attention.head_count %u does not "
			    "divide %s.embedding_length %u (and no %s)",
			    i->arch, i->n_head, i->arch, i->n_embd, key);
			return (-1);
		}
		i->head_dim = i->n_embd / i->n_head;
		if (i->head_dim < 2 || i->head_dim > MODEL_MAX_HEAD_DIM) {
			set_cause(cause, "head dimension %u (%s.embedding_length "
			    "/ head_count) out of range 2..%d", i->head_dim,
			    i->arch, MODEL_MAX_HEAD_DIM);
			return (-1);
		}
	}
	if (i->n_head % i->n_head_kv != 0) {
		set_cause(cause, "%s.attention.head_count_kv %u does not divide "
		    "%s.attention.head_count %u", i->arch, i->n_head_kv, i->arch,
		    i->n_head);
		return (-1);
	}
	vlen = i->head_dim;
	if (get_u32_opt(m, "attention.value_length", &vlen, cause) != 0)
		return (-1);
	if (vlen != i->head_dim) {
		set_cause(cause, "%s.attention.value_length %u differs from the "
		    "key length %u, which is not supported", i->arch, vlen,
		    i->head_dim);
		return (-1);
	}
	i->q_dim = i->n_head * i->head_dim;
	i->n_rot = i->head_dim;
	if (get_u32_opt(m, "rope.dimension_count", &i->n_rot, cause) != 0)
		return (-1);
	if (i->n_rot < 2 || i->n_rot > i->head_dim || i->n_rot % 2 != 0) {
		set_cause(cause, "%s.rope.dimension_count %u is not an even "
		    "number in 2..%u (the head dimension)", i->arch, i->n_rot,
		    i->head_dim);
		return (-1);
	}
	if (!(i->rms_eps > 0.0f && i->rms_eps < 1.0f)) {
		set_cause(cause, "%s.attention.layer_norm_rms_epsilon %g out "
		    "of range (0, 1)", i->arch, (double)i->rms_eps);
		return (-1);
	}
	if (!(i->rope_freq_base > 1.0f && isfinite(i->rope_freq_base))) {
		set_cause(cause, "%s.rope.freq_base %g is not a finite "
		    "number above 1", i->arch, (double)i->rope_freq_base);
		return (-1);
	}
	hp->embd_scale = d->embd_scaled ? sqrtf((float)i->n_embd) : 1.0f;
	if (rope_scaling(m, cause) != 0 || attn_extras(m, d, cause) != 0)
		return (-1);

	if (o->ctx < 0 || o->ctx > MODEL_MAX_CTX) {
		set_cause(cause, "context %d out of range 0..%d", o->ctx,
		    MODEL_MAX_CTX);
		return (-1);
	}
	i->n_ctx = o->ctx != 0 ? (uint32_t)o->ctx : i->n_ctx_train;
	if (i->n_ctx > i->n_ctx_train)
		log_debug("context %u exceeds the trained context %u", i->n_ctx,
		    i->n_ctx_train);

	m->layers = xcalloc(i->n_layers, sizeof *m->layers);
	/* Local layers: all when the period is 0, else all but each last. */
	for (n = 0; n < i->n_layers; n++)
		m->layers[n].swa = i->n_swa != 0 && (hp->swa_period == 0 ||
		    n % hp->swa_period < hp->swa_period - 1);

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

/* Fill one RoPE table: base^(-2j/n_rot) times the linear scale over factors. */
static void
rope_table(const struct model *m, struct model_rope *r, double base,
    double scale, const float *factors)
{
	uint32_t	nrot = m->info.n_rot, j;

	if (r->inv_freq == NULL)
		r->inv_freq = xreallocarray(NULL, nrot / 2, sizeof *r->inv_freq);
	for (j = 0; j < nrot / 2; j++) {
		r->inv_freq[j] = scale * pow(base, -2.0 * j / nrot);
		if (factors != NULL)
			r->inv_freq[j] /= factors[j];
	}
}

/*
 * Build the RoPE tables.  Global layers use the file's base, linear scale
 * and per-pair factors (Llama 3's rope_freqs; LongRoPE's long factors
 * when the context in use exceeds the original one, the short ones
 * otherwise); local layers use their own base, unscaled.
 */
void
arch_rope_setup(struct model *m)
{
	const struct model_hparams *hp = &m->hp;
	const float		*factors = m->rope_freqs;

	if (factors == NULL)
		factors = m->info.n_ctx > hp->n_ctx_orig && m->rope_long != NULL ?
		    m->rope_long : m->rope_short;
	rope_table(m, &m->rope[0], m->info.rope_freq_base, hp->rope_scale,
	    factors);
	m->rope[0].mscale = hp->rope_attn_factor;
	if (hp->arch == MODEL_ARCH_GEMMA3) {
		rope_table(m, &m->rope[1], hp->rope_base_swa,
		    hp->rope_scale_swa, NULL);
		m->rope[1].mscale = 1.0f;
	} else {
		rope_table(m, &m->rope[1], hp->rope_base_swa,
		    hp->rope_scale_swa, factors);
		m->rope[1].mscale = hp->rope_attn_factor;
	}
}

/* The first feature of the model beyond the plain llama forward pass. */
const char *
model_beyond_llama(const struct model *m)
{
	const struct model_info	*i = &m->info;

	if (m->hp.arch != MODEL_ARCH_LLAMA)
		return ("its own forward pass");
	if (i->q_dim != i->n_embd)
		return ("an attention.key_length other than embedding_length / "
		    "head_count");
	if (m->rope_freqs != NULL || m->rope_long != NULL ||
	    m->rope_short != NULL)
		return ("rope frequency factors");
	if (m->hp.rope_scale != 1.0f || m->hp.rope_attn_factor != 1.0f)
		return ("rope scaling or an attention factor");
	if (m->output_bias != NULL)
		return ("an output bias");
	return (NULL);
}
