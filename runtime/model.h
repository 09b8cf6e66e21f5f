/* model.h: a transformer model loaded from GGUF (llama, qwen2, qwen3, gemma2, gemma3, phi3), and its forward pass. */
#ifndef PHASED_MODEL_H
#define PHASED_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

struct gguf_file;
struct qmat;
struct threadpool;
struct tokenizer;

/* Loading options; zero fields take the defaults noted. */
struct model_opts {
	int		 n_threads;	/* CPU threads of an instance; 0 = all */
	int		 kv_type_f32;	/* F32 keys/values instead of F16 */
	int		 kv_block_size;	/* tokens per KV block; 0 = 16 */
	int		 ctx;		/* positions per sequence; 0 = trained */
};

/* Sanity limits on what a model file may declare. */
#define MODEL_MAX_EMBD		65536
#define MODEL_MAX_FF		(1 << 20)
#define MODEL_MAX_LAYERS	1024
#define MODEL_MAX_HEADS		1024
#define MODEL_MAX_HEAD_DIM	1024
#define MODEL_MAX_CTX		(1 << 24)
#define MODEL_MAX_VOCAB		(1 << 24)
/* Most tokens one model_forward() call takes, all entries together. */
#define MODEL_MAX_BATCH_TOKENS	65536

struct model_info {
	const char	*arch;		/* "llama", "qwen2", "gemma3"... */
	const char	*name;		/* general.name, or "" */
	uint64_t	 n_params;
	const char	*type_name;	/* the type holding most weights: "Q4_K" */
	uint64_t	 file_size;
	uint32_t	 n_ctx_train;
	uint32_t	 n_ctx;		/* positions per sequence in use */
	uint32_t	 n_vocab;
	uint32_t	 n_layers;
	uint32_t	 n_embd;
	uint32_t	 n_ff;
	uint32_t	 n_head;
	uint32_t	 n_head_kv;
	uint32_t	 head_dim;
	uint32_t	 n_rot;		/* dimensions of each head RoPE turns */
	float		 rope_freq_base;
	float		 rms_eps;
	struct kv_layout kv;		/* what the KV pools of this model hold */
	uint32_t	 q_dim;		/* n_head * head_dim */
	uint32_t	 n_swa;		/* sliding window of local layers; 0 = none */
};

/*
 * Load a model; progress (may be NULL) is told the fraction done as the
 * weights are prepared.  NULL and *cause on any error, naming the key or
 * tensor at fault.  A loaded model is read-only: several threads may run
 * forward passes on it at once, each with its own pool and sequences.
 */
struct model	*model_load(const char *path, const struct model_opts *,
		    void (*progress)(void *arg, double fraction), void *arg,
		    char **cause);
void		 model_free(struct model *);
const struct model_info *model_info(const struct model *);
struct tokenizer *model_tokenizer(const struct model *);
const struct model_opts *model_opts(const struct model *);
/*
 * Change the positions per sequence (info.n_ctx) of a freshly loaded model,
 * before any pool or forward pass uses it; -1 and *cause if out of range.
 */
int		 model_set_ctx(struct model *, uint32_t n_ctx, char **cause);

/*
 * A KV pool of n_blocks blocks laid out for this model on the CPU (as
 * codes, KV_TYPE_I16, where attention runs on 16-bit integer products).
 */
struct kv_pool	*model_kv_pool_create(const struct model *, uint32_t n_blocks,
		    char **cause);

/*
 * One entry of a forward batch: n_tokens new tokens of a sequence, at the
 * positions following the seq->n_tokens already in its KV.  logits, when
 * not NULL, receives n_vocab floats for the entry's last token.
 */
struct fwd_entry {
	struct kv_seq	*seq;
	const int32_t	*tokens;
	int		 n_tokens;
	float		*logits;
};

struct fwd_batch {
	struct fwd_entry *entries;
	int		 n_seqs;
};

/*
 * Run the model over a ragged batch: every entry's tokens are stacked into
 * one activation matrix, so each weight is read once per call whatever the
 * mix of prefill chunks and decode tokens; attention runs per entry over
 * its own pages.  Each entry's sequence must hold blocks for its new
 * tokens (kv_seq_reserve) and appear once; on success its n_tokens grows
 * by the entry's n_tokens.  Results are batch-invariant: an entry's logits
 * are bit-identical whatever else is in the batch and however its prompt
 * was chunked.  tp may be NULL (one thread).  -1 and *cause on a bad batch,
 * with nothing changed.
 */
int		 model_forward(const struct model *, struct kv_pool *,
		    struct fwd_batch *, struct threadpool *tp, char **cause);

/*
 * Read once, without arithmetic, every weight matrix a decode step reads
 * (each layer's and the output projection), on tp's threads as
 * model_forward() would; returns the bytes read.  tp may be NULL.
 */
uint64_t	 model_read_weights(const struct model *, struct threadpool *tp);

/*
 * Check a batch as model_forward() does before running anything: entries,
 * token ids, context, reserved blocks, no sequence twice, a pool laid out
 * for the model; *total gets the batch's token count.  Backends share it.
 */
int		 model_batch_check(const struct model_info *,
		    const struct kv_pool *, const struct fwd_batch *, int *total,
		    char **cause);

/*
 * NULL when the forward pass of every backend can run this model (the
 * plain llama architecture); otherwise the first feature beyond it, for a
 * backend that implements only that to name in its refusal.
 */
const char	*model_beyond_llama(const struct model *);

/*
 * Internals shared by model.c, arch.c and forward.c.
 */
enum model_arch {
	MODEL_ARCH_LLAMA,
	MODEL_ARCH_QWEN2,
	MODEL_ARCH_QWEN3,
	MODEL_ARCH_GEMMA2,
	MODEL_ARCH_GEMMA3,
	MODEL_ARCH_PHI3
};

/* How an architecture's forward pass differs from plain llama. */
struct model_hparams {
	enum model_arch	 arch;
	int		 rope_neox;	/* rotate halves, not adjacent pairs */
	int		 ffn_gelu;	/* GELU (tanh) gate, not SiLU */
	int		 post_norms;	/* norms after attention and after the FFN */
	int		 qk_norm;	/* per-head RMSNorm of Q and K */
	int		 qkv_bias;	/* biases on Q, K and V */
	int		 fused;		/* attn_qkv and a gate+up ffn_up */
	int		 tied_only;	/* the output head is always token_embd */
	float		 embd_scale;	/* embeddings times this (1 = none) */
	float		 q_scale;	/* queries times this before the scores */
	float		 attn_softcap;	/* 0 = none */
	float		 final_softcap;	/* 0 = none */
	uint32_t	 swa_period;	/* local layers: l % period < period - 1,
					   all when 0 (with a window) */
	float		 rope_scale;	/* linear position scale of global layers */
	float		 rope_attn_factor; /* cos and sin times this */
	float		 rope_base_swa;	/* RoPE base of local layers */
	float		 rope_scale_swa; /* their linear position scale */
	uint32_t	 n_ctx_orig;	/* LongRoPE: long factors beyond this */
};

/* One RoPE table: per-pair inverse frequencies and the cos/sin factor. */
struct model_rope {
	double		*inv_freq;	/* n_rot / 2 */
	float		 mscale;
};

struct model_layer {
	struct qmat	*wq, *wk, *wv, *wo;
	struct qmat	*w_gate, *w_up, *w_down;
	float		*attn_norm;	/* n_embd */
	float		*ffn_norm;	/* n_embd */
	float		*bq, *bk, *bv;	/* q_dim, kv_dim, kv_dim or NULL */
	float		*q_norm, *k_norm; /* head_dim or NULL */
	float		*post_attn_norm, *post_ffn_norm; /* n_embd or NULL */
	int		 swa;		/* a local (sliding-window) layer */
};

struct model {
	struct gguf_file	*gguf;		/* weights may point into it */
	struct tokenizer	*tok;
	struct model_opts	 opts;
	struct model_info	 info;
	char			*name;
	struct qmat		*tok_embd;	/* n_vocab rows of n_embd */
	struct qmat		*output;	/* the same when tied */
	float			*output_norm;
	struct model_layer	*layers;
	float			*output_bias;	/* n_vocab or NULL */
	struct model_hparams	 hp;
	float			*rope_freqs;	/* n_rot / 2 factors or NULL */
	float			*rope_long, *rope_short; /* LongRoPE or NULL */
	struct model_rope	 rope[2];	/* global layers, local layers */
	int			 attn_bf16;	/* attn_run_bf16 on the CPU */
	int			 attn_i16;	/* F16 pools made I16 */
	uint32_t		 n_f16;		/* F16 weight matrices */
	uint32_t		 n_f16_bf16;	/* of them, holding bf16 values */
	uint32_t		 n_f16_i16;	/* of them, on 16-bit integers */
	uint32_t		 n_bf16;	/* BF16 weight matrices */
	uint32_t		 n_bf16_i16;	/* of them, on 16-bit integers */
	uint8_t			*tensor_used;	/* while loading: per tensor */
};

/* arch.c: the architectures' keys and their checks. */
int		 arch_hparams(struct model *, char **cause);
/* arch.c: (re)build the RoPE tables for the context in use. */
void		 arch_rope_setup(struct model *);
/* arch.c: the key "ARCH.suffix" of the model's architecture. */
const char	*arch_key(const struct model *, const char *suffix, char *buf,
		    size_t len);

#endif
