/* test-synth.c: phased-synth output re-read and checked tensor by tensor. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "tensor_type.h"
#include "util.h"
#include "kvcache.h"
#include "model.h"
#include "tap.h"
#include "threadpool.h"
#include "testdata.h"

static const char *shared, *builddir;
static char tmpdir[] = "/tmp/test-synth.XXXXXX";

struct tshape {
	const char	*name;
	uint64_t	 dim, hidden, layers, heads, kv_heads, vocab;
};

/*
 * The type a tensor should have: the asked one unless its rows do not fit,
 * then llama-quantize's fallback for it, then F16.
 */
static uint32_t
expect_type(uint32_t want, uint64_t cols)
{
	uint32_t t;

	if (cols % tensor_type_get(want)->block_elems == 0)
		return (want);
	t = want == TT_Q2_K || want == TT_Q3_K || want == TT_IQ4_XS ? TT_IQ4_NL :
	    want == TT_Q4_K ? TT_Q5_0 : want == TT_Q5_K ? TT_Q5_1 :
	    want == TT_Q6_K ? TT_Q8_0 : TT_F16;
	return (cols % tensor_type_get(t)->block_elems == 0 ? t : TT_F16);
}

/* A --type argument and the types it should give. */
struct tmix {
	const char	*name;
	uint32_t	 base;
	int		 mix;	/* 0: every matrix base; 3, 4, 5: Q3/4/5_K_M */
};

/* The matrix types of layer i of n in a mix, written out per llama-quantize. */
static void
mix_types(const struct tmix *tm, uint64_t i, uint64_t n, uint32_t *v, uint32_t *down,
    uint32_t *out)
{
	int	mb = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;

	*v = *down = *out = tm->base;
	if (tm->mix == 3) {
		*v = i < 2 ? TT_Q5_K : TT_Q4_K;
		*down = i < n / 16 ? TT_Q5_K : TT_Q4_K;
		*out = TT_Q4_K;
	} else if (tm->mix != 0 && mb)
		*v = *down = TT_Q6_K;
}

/* Check one tensor exists with the shape, type and size the shape implies. */
static int
check_tensor(struct gguf_file *gf, const char *name, uint64_t cols,
    uint64_t rows, uint32_t want, char **why)
{
	const struct gguf_tensor	*t;
	const struct tensor_type_info	*ti;
	uint64_t			 ne[2] = { cols, rows };
	uint32_t			 type;

	if ((t = gguf_find_tensor(gf, name)) == NULL) {
		xasprintf(why, "no tensor '%s'", name);
		return (-1);
	}
	if (gguf_tensor_check(t, rows == 0 ? 1 : 2, ne, why) != 0)
		return (-1);
	type = rows == 0 ? TT_F32 : expect_type(want, cols);
	if (t->type != type) {
		xasprintf(why, "tensor '%s' is %s, want %s", name,
		    tensor_type_name(t->type), tensor_type_name(type));
		return (-1);
	}
	ti = tensor_type_get(type);
	if (t->nbytes != cols * (rows ? rows : 1) / ti->block_elems *
	    ti->block_bytes) {
		xasprintf(why, "tensor '%s' has %" PRIu64 " bytes", name,
		    t->nbytes);
		return (-1);
	}
	return (0);
}

#define GEN_PROMPT	6
#define GEN_STEPS	8

/* Last prompt logits of the F32 model of the shape being checked. */
static float	*ref_logits;
static int	 ref_n;

/*
 * Load a written model, run a prompt and greedy steps: the logits must be
 * finite, the tokens in the vocabulary, and the prompt's logits close to
 * the F32 model's (same seed, so the same weights before quantization).
 */
static void
generate(const struct tshape *sh, const char *tname, const char *path)
{
	struct model_opts	 o = { .n_threads = 1, .kv_type_f32 = 1, .ctx = 64 };
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		 seq;
	struct fwd_entry	 e;
	struct fwd_batch	 b = { &e, 1 };
	struct threadpool	*tp;
	int32_t			 tok[GEN_PROMPT + GEN_STEPS];
	float			*logits;
	char			*cause = NULL;
	double			 dot = 0, na = 0, nb = 0, cosine, min_cos;
	int			 i, j, nv, finite = 1, inrange = 1, n;

	if ((m = model_load(path, &o, NULL, NULL, &cause)) == NULL) {
		ok(0, "%s %s: loads (%s)", sh->name, tname, cause);
		free(cause);
		return;
	}
	ok(1, "%s %s: loads", sh->name, tname);
	tp = threadpool_create(1, NULL, &cause);
	nv = model_info(m)->n_vocab;
	logits = calloc(nv, sizeof *logits);
	pool = model_kv_pool_create(m, 8, &cause);
	memset(&seq, 0, sizeof seq);
	for (i = 0; i < GEN_PROMPT; i++)
		tok[i] = (int32_t)((i * 37 + 5) % nv);
	for (n = GEN_PROMPT, i = 0; pool != NULL && i <= GEN_STEPS; i++) {
		int c = i == 0 ? GEN_PROMPT : 1;

		if (kv_seq_reserve(pool, &seq, c) != 0)
			break;
		e.seq = &seq;
		e.tokens = tok + n - c;
		e.n_tokens = c;
		e.logits = logits;
		if (model_forward(m, pool, &b, tp, &cause) != 0) {
			diag("%s", cause);
			free(cause);
			cause = NULL;
			break;
		}
		for (j = 0; j < nv; j++)
			finite &= isfinite(logits[j]) != 0;
		if (i == 0 && strcmp(tname, "F32") == 0) {
			free(ref_logits);
			ref_logits = malloc(nv * sizeof *ref_logits);
			memcpy(ref_logits, logits, nv * sizeof *logits);
			ref_n = nv;
		}
		if (i == 0 && ref_logits != NULL && ref_n == nv)
			for (j = 0; j < nv; j++) {
				dot += (double)logits[j] * ref_logits[j];
				na += (double)logits[j] * logits[j];
				nb += (double)ref_logits[j] * ref_logits[j];
			}
		if (i == GEN_STEPS)
			break;
		for (j = 1, tok[n] = 0; j < nv; j++)
			if (logits[j] > logits[tok[n]])
				tok[n] = j;
		inrange &= tok[n] >= 0 && tok[n] < nv;
		n++;
	}
	cosine = na > 0 && nb > 0 ? dot / sqrt(na * nb) : 0;
	ok(n == GEN_PROMPT + GEN_STEPS && finite && inrange,
	    "%s %s: generates %d tokens, logits finite", sh->name, tname, GEN_STEPS);
	/*
	 * Against the F32 model: above 0.95 for 4 bits or more, 0.9 for the
	 * 3-bit codes, 0.7 for Q2_K (four levels per weight); a broken kernel
	 * scores near 0.
	 */
	min_cos = strcmp(tname, "Q2_K") == 0 ? 0.7 : strcmp(tname, "Q3_K") == 0 ? 0.9 :
	    0.95;
	ok(cosine > min_cos, "%s %s: prompt logits' cosine to F32's %.4f (> %g)",
	    sh->name, tname, cosine, min_cos);
	if (pool != NULL) {
		kv_seq_release(pool, &seq);
		kv_pool_free(pool);
	}
	free(logits);
	threadpool_destroy(tp);
	model_free(m);
}

/* Run phased-synth for a shape and type and check what it wrote. */
static void
synth_check(const struct tshape *sh, const struct tmix *tm)
{
	const char		*tname = tm->name;
	uint32_t		 type = tm->base, big = tm->mix ? TT_Q6_K : type;
	uint32_t		 tv, td, to;
	struct gguf_file	*gf;
	char			*cmd, *out, *vocab, *why = NULL, name[64];
	uint64_t		 kv_dim = sh->dim / sh->heads * sh->kv_heads, i;
	uint32_t		 u;
	int			 bad = 0, rc;

	xasprintf(&out, "%s/%s-%s.gguf", tmpdir, sh->name, tname);
	xasprintf(&vocab, "%s/models/stories260K.gguf", shared);
	xasprintf(&cmd, "%s/phased-synth --shape %s --type %s --vocab %s "
	    "--seed 7 -o %s 2>/dev/null", builddir, sh->name, tname, vocab,
	    out);
	rc = system(cmd);
	ok(rc == 0, "phased-synth %s %s", sh->name, tname);
	gf = gguf_open(out, &why);
	if (!ok(gf != NULL, "%s %s opens", sh->name, tname)) {
		diag("%s", why);
		goto out;
	}
	ok(gguf_get_u32(gf, "llama.block_count", &u, &why) == 0 &&
	    u == sh->layers, "%s %s: block_count", sh->name, tname);
	ok(gguf_get_u32(gf, "llama.attention.head_count_kv", &u, &why) == 0 &&
	    u == sh->kv_heads, "%s %s: head_count_kv", sh->name, tname);
	ok(gguf_get_arr(gf, "tokenizer.ggml.tokens", GGUF_VT_STRING, &why) !=
	    NULL, "%s %s: vocabulary copied", sh->name, tname);
	ok(gf->n_tensors == 3 + 9 * sh->layers, "%s %s: %" PRIu64 " tensors",
	    sh->name, tname, gf->n_tensors);

#define T(n, c, r, ty) do {						\
	if (!bad && check_tensor(gf, n, c, r, ty, &why) != 0)		\
		bad = 1;						\
} while (0)
	T("token_embd.weight", sh->dim, sh->vocab, type);
	T("output_norm.weight", sh->dim, 0, TT_F32);
	T("output.weight", sh->dim, sh->vocab, big);
	for (i = 0; i < sh->layers; i++) {
		mix_types(tm, i, sh->layers, &tv, &td, &to);
#define B(n)	(snprintf(name, sizeof name, "blk.%" PRIu64 "." n, i), name)
		T(B("attn_norm.weight"), sh->dim, 0, TT_F32);
		T(B("attn_q.weight"), sh->dim, sh->dim, type);
		T(B("attn_k.weight"), sh->dim, kv_dim, type);
		T(B("attn_v.weight"), sh->dim, kv_dim, tv);
		T(B("attn_output.weight"), sh->dim, sh->dim, to);
		T(B("ffn_norm.weight"), sh->dim, 0, TT_F32);
		T(B("ffn_gate.weight"), sh->dim, sh->hidden, type);
		T(B("ffn_up.weight"), sh->dim, sh->hidden, type);
		T(B("ffn_down.weight"), sh->hidden, sh->dim, td);
#undef B
	}
#undef T
	if (!ok(!bad, "%s %s: every tensor's shape, type and size", sh->name,
	    tname))
		diag("%s", why);
	gguf_close(gf);
	generate(sh, tname, out);
out:
	free(why);
	unlink(out);
	free(out);
	free(vocab);
	free(cmd);
}

/* The F32 weights: uniform with std 0.02, norms 1, and the seed matters. */
static void
check_values(void)
{
	struct gguf_file		*gf, *gf2;
	const struct gguf_tensor	*t, *t2;
	char				*cmd, *out, *why = NULL;
	const float			*x;
	double				 sum = 0, sq = 0, mx = 0, sd;
	uint64_t			 i;
	float				 v;

	xasprintf(&out, "%s/values.gguf", tmpdir);
	xasprintf(&cmd, "%s/phased-synth --shape stories260K --type F32 "
	    "--vocab %s/models/stories260K.gguf --seed 9 -o %s.1 2>/dev/null && "
	    "%s/phased-synth --shape stories260K --type F32 --threads 1 "
	    "--vocab %s/models/stories260K.gguf --seed 9 -o %s.2 2>/dev/null && "
	    "%s/phased-synth --shape stories260K --type F32 "
	    "--vocab %s/models/stories260K.gguf --seed 10 -o %s.3 2>/dev/null && "
	    "cmp -s %s.1 %s.2 && ! cmp -s %s.1 %s.3", builddir, shared, out,
	    builddir, shared, out, builddir, shared, out, out, out, out, out);
	ok(system(cmd) == 0, "same seed same file whatever the threads; "
	    "another seed another file");
	free(cmd);
	xasprintf(&cmd, "%s.1", out);
	gf = gguf_open(cmd, &why);
	if (!ok(gf != NULL, "F32 model opens")) {
		diag("%s", why);
		goto out;
	}
	t = gguf_find_tensor(gf, "blk.1.ffn_up.weight");
	x = t->data;
	for (i = 0; i < t->n_elems; i++) {
		memcpy(&v, x + i, 4);
		sum += v;
		sq += (double)v * v;
		if (fabs(v) > mx)
			mx = fabs(v);
	}
	sd = sqrt(sq / t->n_elems - (sum / t->n_elems) * (sum / t->n_elems));
	near(sd, 0.02, 0.001, "weights have std 0.02");
	near(sum / t->n_elems, 0, 0.001, "weights have mean 0");
	ok(mx <= 0.0347, "weights within +-0.0347 (max %g)", mx);
	t = gguf_find_tensor(gf, "blk.2.attn_norm.weight");
	memcpy(&v, (const float *)t->data + 7, 4);
	near(v, 1, 0, "norm weights are 1");
	/* Stories260K: the real model's vocabulary is carried over whole. */
	free(cmd);
	xasprintf(&cmd, "%s/models/stories260K.gguf", shared);
	if ((gf2 = gguf_open(cmd, &why)) != NULL) {
		const struct gguf_kv *a, *b;

		a = gguf_find(gf, "tokenizer.ggml.scores");
		b = gguf_find(gf2, "tokenizer.ggml.scores");
		ok(a != NULL && b != NULL && a->v.arr.n == b->v.arr.n &&
		    memcmp(a->v.arr.data, b->v.arr.data, 4 * a->v.arr.n) == 0,
		    "scores copied exactly");
		t = gguf_find_tensor(gf, "token_embd.weight");
		t2 = gguf_find_tensor(gf2, "token_embd.weight");
		ok(t != NULL && t2 != NULL && t->ne[0] == t2->ne[0] &&
		    t->ne[1] == t2->ne[1], "token_embd has the real model's shape");
		gguf_close(gf2);
	}
	gguf_close(gf);
out:
	for (i = 1; i <= 3; i++) {
		free(cmd);
		xasprintf(&cmd, "%s.%" PRIu64, out, i);
		unlink(cmd);
	}
	free(cmd);
	free(out);
	free(why);
}

/* Bad arguments fail with a message. */
static void
check_errors(void)
{
	char	*cmd;

	xasprintf(&cmd, "%s/phased-synth --shape nope --type F32 --vocab "
	    "%s/models/stories260K.gguf -o %s/x.gguf 2>&1 | grep -q "
	    "\"unknown shape 'nope'\"", builddir, shared, tmpdir);
	ok(system(cmd) == 0, "unknown shape refused");
	free(cmd);
	xasprintf(&cmd, "%s/phased-synth --shape tiny256 --type IQ2_XS --vocab "
	    "%s/models/stories260K.gguf -o %s/x.gguf 2>&1 | grep -q "
	    "\"unknown type 'IQ2_XS'\"", builddir, shared, tmpdir);
	ok(system(cmd) == 0, "unsupported type refused");
	free(cmd);
	xasprintf(&cmd, "%s/phased-synth --shape tiny256 --type F32 --vocab "
	    "/nonexistent.gguf -o %s/x.gguf 2>&1 | grep -q "
	    "\"/nonexistent.gguf: No such file\"", builddir, tmpdir);
	ok(system(cmd) == 0, "missing vocabulary refused");
	free(cmd);
	xasprintf(&cmd, "test ! -e %s/x.gguf", tmpdir);
	ok(system(cmd) == 0, "nothing written on error");
	free(cmd);
}

/* Run the checks. */
int
main(void)
{
	static const struct tshape stories = { "stories260K", 64, 172, 5, 8, 4, 512 };
	static const struct tshape tiny = { "tiny256", 256, 768, 2, 8, 4, 512 };
	static const struct tmix types[] = {
		{ "F32", TT_F32, 0 }, { "F16", TT_F16, 0 }, { "BF16", TT_BF16, 0 },
		{ "Q8_0", TT_Q8_0, 0 }, { "Q4_0", TT_Q4_0, 0 }, { "Q4_1", TT_Q4_1, 0 },
		{ "Q5_0", TT_Q5_0, 0 }, { "Q5_1", TT_Q5_1, 0 }, { "Q2_K", TT_Q2_K, 0 },
		{ "Q3_K", TT_Q3_K, 0 }, { "Q4_K", TT_Q4_K, 0 }, { "Q5_K", TT_Q5_K, 0 },
		{ "Q6_K", TT_Q6_K, 0 }, { "IQ4_NL", TT_IQ4_NL, 0 },
		{ "IQ4_XS", TT_IQ4_XS, 0 }, { "Q3_K_M", TT_Q3_K, 3 },
		{ "Q4_K_M", TT_Q4_K, 4 }, { "Q5_K_M", TT_Q5_K, 5 },
	};
	size_t	i;

	shared = shared_dir();
	if ((builddir = getenv("top_builddir")) == NULL)
		builddir = ".";
	if (mkdtemp(tmpdir) == NULL)
		skip_all("mkdtemp failed");
	for (i = 0; i < sizeof types / sizeof types[0]; i++)
		synth_check(&stories, &types[i]);
	for (i = 0; i < sizeof types / sizeof types[0]; i++)
		synth_check(&tiny, &types[i]);
	free(ref_logits);
	check_values();
	check_errors();
	rmdir(tmpdir);
	done_testing();
}
