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
#include "tap.h"
#include "testdata.h"

static const char *shared, *builddir;
static char tmpdir[] = "/tmp/test-synth.XXXXXX";

struct tshape {
	const char	*name;
	uint64_t	 dim, hidden, layers, heads, kv_heads, vocab;
};

/* The type a tensor should have: the asked one unless its rows do not fit. */
static uint32_t
expect_type(uint32_t want, uint64_t cols)
{
	const struct tensor_type_info *ti = tensor_type_get(want);

	if (cols % ti->block_elems == 0)
		return (want);
	if (ti->block_elems >= 32 && cols % 32 == 0)
		return (TT_Q8_0);
	return (TT_F16);
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

/* Run phased-synth for a shape and type and check what it wrote. */
static void
synth_check(const struct tshape *sh, const char *tname, uint32_t type,
    uint32_t big)
{
	struct gguf_file	*gf;
	char			*cmd, *out, *vocab, *why = NULL, name[64];
	uint64_t		 kv_dim = sh->dim / sh->heads * sh->kv_heads, i;
	uint32_t		 u;
	int			 bad = 0, rc, mb;

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
	T("token_embd.weight", sh->dim, sh->vocab, big);
	T("output_norm.weight", sh->dim, 0, TT_F32);
	T("output.weight", sh->dim, sh->vocab, big);
	for (i = 0; i < sh->layers; i++) {
		/* The _M mix gives these layers the bigger type. */
		mb = i < sh->layers / 8 || i >= 7 * sh->layers / 8 ||
		    (i - sh->layers / 8) % 3 == 2;
#define B(n)	(snprintf(name, sizeof name, "blk.%" PRIu64 "." n, i), name)
		T(B("attn_norm.weight"), sh->dim, 0, TT_F32);
		T(B("attn_q.weight"), sh->dim, sh->dim, type);
		T(B("attn_k.weight"), sh->dim, kv_dim, type);
		T(B("attn_v.weight"), sh->dim, kv_dim, mb ? big : type);
		T(B("attn_output.weight"), sh->dim, sh->dim, type);
		T(B("ffn_norm.weight"), sh->dim, 0, TT_F32);
		T(B("ffn_gate.weight"), sh->dim, sh->hidden, type);
		T(B("ffn_up.weight"), sh->dim, sh->hidden, type);
		T(B("ffn_down.weight"), sh->hidden, sh->dim, mb ? big : type);
#undef B
	}
#undef T
	if (!ok(!bad, "%s %s: every tensor's shape, type and size", sh->name,
	    tname))
		diag("%s", why);
	gguf_close(gf);
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
	xasprintf(&cmd, "%s/phased-synth --shape tiny256 --type Q5_K --vocab "
	    "%s/models/stories260K.gguf -o %s/x.gguf 2>&1 | grep -q "
	    "\"unknown type 'Q5_K'\"", builddir, shared, tmpdir);
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
	static const struct {
		const char	*name;
		uint32_t	 type, big;
	} types[] = {
		{ "F32", TT_F32, TT_F32 }, { "F16", TT_F16, TT_F16 },
		{ "BF16", TT_BF16, TT_BF16 }, { "Q8_0", TT_Q8_0, TT_Q8_0 },
		{ "Q4_0", TT_Q4_0, TT_Q4_0 }, { "Q4_K", TT_Q4_K, TT_Q4_K },
		{ "Q6_K", TT_Q6_K, TT_Q6_K }, { "Q4_K_M", TT_Q4_K, TT_Q6_K },
	};
	size_t	i;

	shared = shared_dir();
	if ((builddir = getenv("top_builddir")) == NULL)
		builddir = ".";
	if (mkdtemp(tmpdir) == NULL)
		skip_all("mkdtemp failed");
	for (i = 0; i < sizeof types / sizeof types[0]; i++) {
		synth_check(&stories, types[i].name, types[i].type, types[i].big);
		synth_check(&tiny, types[i].name, types[i].type, types[i].big);
	}
	check_values();
	check_errors();
	rmdir(tmpdir);
	done_testing();
}
