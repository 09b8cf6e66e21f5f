/* test-model.c: golden outputs, batch invariance and load errors of the model. */

#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "kvcache.h"
#include "model.h"
#include "quant.h"
#include "tap.h"
#include "testdata.h"
#include "model-testutil.h"
#include "threadpool.h"
#include "tokenizer.h"

#define MAXV		32000
#define N_GREEDY	200
#define INV_PROMPT	105	/* golden prompt + 100 golden tokens */
#define INV_STEPS	20

static char	 shared[1024];
static char	 tmpdir[1024];

/* Greedy decode steps from logits; records tokens and each step's logits. */
static int
decode(const struct model *m, struct kv_pool *pool, struct kv_seq *seq,
    float *logits, int steps, struct threadpool *tp, int32_t *out,
    float *all_logits)
{
	int	nv = model_info(m)->n_vocab, i;
	int32_t	t;

	for (i = 0; i < steps; i++) {
		t = argmax(logits, nv);
		out[i] = t;
		if (prefill(m, pool, seq, &t, 1, 1, tp, logits) != 0)
			return (-1);
		if (all_logits != NULL)
			memcpy(all_logits + (size_t)i * nv, logits, nv * sizeof *logits);
	}
	return (0);
}

/* Load a model or report why not. */
static struct model *
load(const char *file, int kv_f32, int ctx)
{
	struct model_opts	 o = { .n_threads = 2, .kv_type_f32 = kv_f32,
				    .kv_block_size = 0, .ctx = ctx };
	struct model		*m;
	char			 path[1200], *cause = NULL;

	snprintf(path, sizeof path, "%s/models/%s", shared, file);
	m = model_load(path, &o, NULL, NULL, &cause);
	if (m == NULL) {
		diag("%s: %s", path, cause);
		free(cause);
	}
	return (m);
}

/* The stories260K golden prompt: logits and the 200 greedy tokens. */
static void
test_golden(const char *doc, struct threadpool *tp)
{
	double			 pt[64], gt[N_GREEDY + 8], gl[MAXV];
	int32_t			 prompt[64], out[N_GREEDY];
	float			 want[512], logits[512];
	int			 np, ng, nl, i, same = 1, first_bad = -1;
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		 seq;
	const struct model_info	*mi;
	char			*cause = NULL;

	np = json_numbers(doc, "prompt_tokens", pt, 64);
	ng = json_numbers(doc, "greedy_tokens", gt, N_GREEDY + 8);
	nl = json_numbers(doc, "last_position_logits", gl, MAXV);
	is_int(np, 5, "golden: 5 prompt tokens");
	is_int(ng, N_GREEDY, "golden: 200 greedy tokens");
	is_int(nl, 512, "golden: 512 logits");
	if (np != 5 || ng != N_GREEDY || nl != 512)
		return;
	for (i = 0; i < np; i++)
		prompt[i] = (int32_t)pt[i];
	for (i = 0; i < nl; i++)
		want[i] = (float)gl[i];

	m = load("stories260K.gguf", 1, 256);
	if (!ok(m != NULL, "stories260K loads"))
		return;
	mi = model_info(m);
	is_str(mi->arch, "llama", "arch");
	is_int(mi->n_vocab, 512, "512 vocab");
	is_int(mi->n_layers, 5, "5 layers");
	is_int(mi->n_embd, 64, "dim 64");
	is_int(mi->n_ff, 172, "ff 172");
	is_int(mi->n_head, 8, "8 heads");
	is_int(mi->n_head_kv, 4, "4 kv heads");
	is_int(mi->head_dim, 8, "head dim 8");
	is_int(mi->n_ctx_train, 128, "trained context 128");
	is_int(mi->n_ctx, 256, "context 256 as asked");
	is_str(mi->type_name, "F32", "type F32");
	is_int(mi->file_size, 1185376, "file size");
	ok(mi->n_params > 250000 && mi->n_params < 300000,
	    "about 260K parameters (%llu)", (unsigned long long)mi->n_params);
	is_int(tokenizer_n_vocab(model_tokenizer(m)), 512, "tokenizer vocab");

	pool = model_kv_pool_create(m, 32, &cause);
	ok(pool != NULL, "pool of 32 blocks");
	memset(&seq, 0, sizeof seq);
	if (prefill(m, pool, &seq, prompt, np, np, tp, logits) != 0) {
		ok(0, "prefill");
		return;
	}
	near(maxdiff(logits, want, 512), 0.0, 1e-4,
	    "last-position logits match llama.cpp within 1e-4 (max diff %.3g)",
	    maxdiff(logits, want, 512));
	is_int(seq.n_tokens, 5, "sequence holds 5 tokens");
	decode(m, pool, &seq, logits, N_GREEDY, tp, out, NULL);
	for (i = 0; i < N_GREEDY; i++) {
		if (out[i] != (int32_t)gt[i] && first_bad < 0)
			first_bad = i;
		same &= out[i] == (int32_t)gt[i];
	}
	if (!ok(same, "200 greedy tokens equal the golden ones"))
		diag("first difference at %d: %d vs %d", first_bad,
		    out[first_bad], (int)gt[first_bad]);
	is_int(seq.n_tokens, 205, "sequence holds 205 tokens");
	is_int(kv_pool_used_blocks(pool), 13, "205 tokens use 13 blocks");
	kv_seq_release(pool, &seq);
	is_int(kv_pool_used_blocks(pool), 0, "released");
	kv_pool_free(pool);
	model_free(m);

	/* With F16 keys and values the greedy continuation still holds. */
	m = load("stories260K.gguf", 0, 256);
	pool = model_kv_pool_create(m, 32, &cause);
	memset(&seq, 0, sizeof seq);
	prefill(m, pool, &seq, prompt, np, np, tp, logits);
	near(maxdiff(logits, want, 512), 0.0, 2e-2,
	    "F16 KV: logits within 2e-2 (diff %.3g)", maxdiff(logits, want, 512));
	decode(m, pool, &seq, logits, N_GREEDY, tp, out, NULL);
	for (i = 0, same = 0; i < N_GREEDY; i++)
		same += out[i] == (int32_t)gt[i];
	diag("F16 KV: %d of 200 greedy tokens equal the golden ones", same);
	kv_seq_release(pool, &seq);
	kv_pool_free(pool);
	model_free(m);
}

/*
 * Batch invariance: one prefill, chunks of 1, 7 and 64, and a ragged batch
 * beside other sequences must give bit-identical logits and the same
 * greedy tokens.
 */
static void
test_invariance(const char *doc, int kv_f32, struct threadpool *tp)
{
	double			 pt[8], gt[N_GREEDY];
	int32_t			 prompt[INV_PROMPT], other[2][64];
	int32_t			 ref_tok[INV_STEPS], tok[INV_STEPS];
	int32_t			 next[3];
	float			 ref_l0[512], l0[512];
	float			*ref_ls, *ls, ol[3][512];
	static const int	 chunks[] = { 1, 7, 64 };
	const char		*kind = kv_f32 ? "F32 KV" : "F16 KV";
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		 seq, os[2];
	struct fwd_entry	 e[3];
	struct fwd_batch	 b;
	char			*cause = NULL;
	int			 i, c, s, olen[2] = { 37, 3 }, good;

	json_numbers(doc, "prompt_tokens", pt, 8);
	json_numbers(doc, "greedy_tokens", gt, N_GREEDY);
	for (i = 0; i < 5; i++)
		prompt[i] = (int32_t)pt[i];
	for (i = 5; i < INV_PROMPT; i++)
		prompt[i] = (int32_t)gt[i - 5];
	for (i = 0; i < 64; i++) {
		other[0][i] = (int32_t)((i * 37 + 11) % 512);
		other[1][i] = (int32_t)((i * 101 + 3) % 512);
	}
	ref_ls = malloc(INV_STEPS * 512 * sizeof *ref_ls);
	ls = malloc(INV_STEPS * 512 * sizeof *ls);

	m = load("stories260K.gguf", kv_f32, 256);
	if (m == NULL)
		return;
	pool = model_kv_pool_create(m, 64, &cause);

	/* Reference: the whole prompt at once, then greedy steps. */
	memset(&seq, 0, sizeof seq);
	prefill(m, pool, &seq, prompt, INV_PROMPT, INV_PROMPT, tp, ref_l0);
	decode(m, pool, &seq, ref_l0, INV_STEPS, tp, ref_tok, ref_ls);
	kv_seq_release(pool, &seq);
	prefill(m, pool, &seq, prompt, INV_PROMPT, INV_PROMPT, tp, ref_l0);
	kv_seq_release(pool, &seq);

	for (c = 0; c < 3; c++) {
		memset(&seq, 0, sizeof seq);
		prefill(m, pool, &seq, prompt, INV_PROMPT, chunks[c], tp, l0);
		ok(memcmp(l0, ref_l0, sizeof l0) == 0,
		    "%s: chunks of %d: prompt logits bit-identical (max diff %.3g)",
		    kind, chunks[c], maxdiff(l0, ref_l0, 512));
		decode(m, pool, &seq, l0, INV_STEPS, tp, tok, ls);
		ok(memcmp(tok, ref_tok, sizeof tok) == 0,
		    "%s: chunks of %d: same greedy tokens", kind, chunks[c]);
		ok(memcmp(ls, ref_ls, INV_STEPS * 512 * sizeof *ls) == 0,
		    "%s: chunks of %d: decode logits bit-identical", kind,
		    chunks[c]);
		kv_seq_release(pool, &seq);
	}

	/* A ragged batch: the prompt beside sequences of 37 and 3 tokens. */
	memset(&seq, 0, sizeof seq);
	memset(os, 0, sizeof os);
	kv_seq_reserve(pool, &os[0], olen[0]);
	kv_seq_reserve(pool, &os[1], olen[1]);
	kv_seq_reserve(pool, &seq, INV_PROMPT);
	e[0] = (struct fwd_entry){ &os[0], other[0], olen[0], ol[0] };
	e[1] = (struct fwd_entry){ &seq, prompt, INV_PROMPT, l0 };
	e[2] = (struct fwd_entry){ &os[1], other[1], olen[1], ol[2] };
	b.entries = e;
	b.n_seqs = 3;
	if (model_forward(m, pool, &b, tp, &cause) != 0) {
		diag("%s", cause);
		free(cause);
	}
	ok(memcmp(l0, ref_l0, sizeof l0) == 0,
	    "%s: ragged batch: prompt logits bit-identical (max diff %.3g)", kind,
	    maxdiff(l0, ref_l0, 512));
	/* Decode all three together; ours must follow the reference. */
	good = 1;
	for (s = 0; s < INV_STEPS; s++) {
		next[0] = argmax(ol[0], 512);
		next[1] = argmax(l0, 512);
		next[2] = argmax(ol[2], 512);
		good &= next[1] == ref_tok[s];
		for (i = 0; i < 3; i++) {
			kv_seq_reserve(pool, e[i].seq, 1);
			e[i].tokens = &next[i];
			e[i].n_tokens = 1;
		}
		if (model_forward(m, pool, &b, tp, &cause) != 0) {
			diag("%s", cause);
			free(cause);
			cause = NULL;
			good = 0;
			break;
		}
		good &= memcmp(l0, ref_ls + (size_t)s * 512, sizeof l0) == 0;
	}
	ok(good, "%s: decoding in a batch of three: same tokens, bit-identical "
	    "logits", kind);

	/* The others match their own solo runs too. */
	{
		struct kv_seq	 solo;
		float		 sl[512];

		memset(&solo, 0, sizeof solo);
		prefill(m, pool, &solo, other[0], olen[0], 5, tp, sl);
		kv_seq_release(pool, &solo);
		/* ol[0] has moved on; recompute the batch's first logits. */
		kv_seq_release(pool, &os[0]);
		kv_seq_reserve(pool, &os[0], olen[0]);
		e[0].tokens = other[0];
		e[0].n_tokens = olen[0];
		b.entries = e;
		b.n_seqs = 1;
		model_forward(m, pool, &b, tp, &cause);
		ok(memcmp(sl, ol[0], sizeof sl) == 0,
		    "%s: a neighbour alone in chunks of 5 matches", kind);
	}
	kv_seq_release(pool, &os[0]);
	kv_seq_release(pool, &os[1]);
	kv_seq_release(pool, &seq);
	is_int(kv_pool_used_blocks(pool), 0, "%s: all blocks back", kind);

	/* Threads do not change results: one thread gives the same. */
	memset(&seq, 0, sizeof seq);
	prefill(m, pool, &seq, prompt, INV_PROMPT, 7, NULL, l0);
	ok(memcmp(l0, ref_l0, sizeof l0) == 0, "%s: one thread, bit-identical",
	    kind);

	/* A prefill moved to another pool decodes the same there. */
	{
		struct kv_pool	*dp = model_kv_pool_create(m, 64, &cause);
		struct kv_seq	 ds;

		memset(&ds, 0, sizeof ds);
		ok(kv_seq_copy(dp, &ds, pool, &seq, &cause) == 0,
		    "%s: copy the prefill to a decode pool", kind);
		kv_seq_release(pool, &seq);
		decode(m, dp, &ds, l0, INV_STEPS, tp, tok, ls);
		ok(memcmp(tok, ref_tok, sizeof tok) == 0 &&
		    memcmp(ls, ref_ls, INV_STEPS * 512 * sizeof *ls) == 0,
		    "%s: decode after the copy is bit-identical", kind);
		kv_seq_release(dp, &ds);
		kv_pool_free(dp);
	}

	kv_pool_free(pool);
	model_free(m);
	free(ref_ls);
	free(ls);
}

/*
 * A batch longer than one pass takes (model_forward cuts it, splitting
 * entries where a cut falls) gives the same bits as each sequence alone
 * in small chunks, and leaves every sequence at its full length.
 */
static void
test_long_batch(struct threadpool *tp)
{
	enum { NA = 700, NB = 300, NC = 5 };
	static const int	 len[3] = { NA, NB, NC };
	static int32_t		 tok[3][NA];
	float			 ref[3][512], got[3][512];
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		 seq[3];
	struct fwd_entry	 e[3];
	struct fwd_batch	 b = { e, 3 };
	char			*cause = NULL;
	int			 i, s, same = 1, rc;

	m = load("stories260K.gguf", 0, 1024);
	if (m == NULL)
		return;
	pool = model_kv_pool_create(m, 160, &cause);
	for (s = 0; s < 3; s++) {
		for (i = 0; i < len[s]; i++)
			tok[s][i] = (int32_t)((i * (31 + 6 * s) + 7 * s + 1) % 512);
	}
	for (s = 0; s < 3; s++) {
		memset(&seq[s], 0, sizeof seq[s]);
		prefill(m, pool, &seq[s], tok[s], len[s], 64, tp, ref[s]);
		kv_seq_release(pool, &seq[s]);
	}
	for (s = 0; s < 3; s++) {
		memset(&seq[s], 0, sizeof seq[s]);
		kv_seq_reserve(pool, &seq[s], len[s]);
		e[s] = (struct fwd_entry){ &seq[s], tok[s], len[s], got[s] };
	}
	rc = model_forward(m, pool, &b, tp, &cause);
	if (rc != 0) {
		diag("forward: %s", cause);
		free(cause);
	}
	ok(rc == 0, "a batch of %d tokens runs", NA + NB + NC);
	for (s = 0; s < 3; s++) {
		same &= memcmp(got[s], ref[s], sizeof got[s]) == 0;
		same &= seq[s].n_tokens == (uint32_t)len[s];
	}
	ok(same, "long batch: every sequence's logits bit-identical to chunks "
	    "of 64, lengths %u %u %u", seq[0].n_tokens, seq[1].n_tokens,
	    seq[2].n_tokens);
	for (s = 0; s < 3; s++)
		kv_seq_release(pool, &seq[s]);
	is_int(kv_pool_used_blocks(pool), 0, "long batch: all blocks back");
	kv_pool_free(pool);
	model_free(m);
}

/* Bad batches are refused with nothing changed. */
static void
test_bad_batches(struct threadpool *tp)
{
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		 a, b2;
	struct fwd_entry	 e[2];
	struct fwd_batch	 b = { e, 1 };
	int32_t			 tok[4] = { 1, 403, 407, 512 }, many[18];
	float			 l[512];
	char			*cause = NULL;

	m = load("stories260K.gguf", 1, 20);
	if (m == NULL)
		return;
	pool = model_kv_pool_create(m, 8, &cause);
	memset(&a, 0, sizeof a);
	memset(&b2, 0, sizeof b2);

	e[0] = (struct fwd_entry){ &a, tok, 3, l };
	ok(model_forward(m, pool, &b, tp, &cause) == -1, "no blocks reserved");
	is_str(cause, "batch entry 0: sequence has kv blocks for 0 tokens, "
	    "needs 3", "unreserved error");
	free(cause);
	cause = NULL;

	kv_seq_reserve(pool, &a, 4);
	e[0].n_tokens = 4;
	ok(model_forward(m, pool, &b, tp, &cause) == -1, "token 512 refused");
	is_str(cause, "batch entry 0: token 512 out of range 0..511",
	    "token range error");
	free(cause);
	cause = NULL;
	is_int(a.n_tokens, 0, "sequence unchanged");

	e[0].n_tokens = 0;
	ok(model_forward(m, pool, &b, tp, &cause) == -1, "empty entry refused");
	is_str(cause, "batch entry 0 has 0 tokens", "empty entry error");
	free(cause);
	cause = NULL;

	e[0].n_tokens = 3;
	e[1] = e[0];
	b.n_seqs = 2;
	ok(model_forward(m, pool, &b, tp, &cause) == -1, "shared seq refused");
	is_str(cause, "batch entries 0 and 1 share a sequence", "shared error");
	free(cause);
	cause = NULL;
	b.n_seqs = 1;

	/* Context of 20: 3 + 18 positions do not fit. */
	ok(model_forward(m, pool, &b, tp, &cause) == 0, "3 tokens run");
	kv_seq_reserve(pool, &a, 18);
	{
		int	i;

		for (i = 0; i < 18; i++)
			many[i] = 300 + i;
		e[0].tokens = many;
		e[0].n_tokens = 18;
		ok(model_forward(m, pool, &b, tp, &cause) == -1,
		    "past the context refused");
		is_str(cause, "batch entry 0: 21 positions exceed the context "
		    "of 20", "context error");
		free(cause);
		cause = NULL;
	}
	is_int(a.n_tokens, 3, "sequence still at 3");
	ok(model_set_ctx(m, 21, &cause) == 0, "context raised to 21");
	ok(model_forward(m, pool, &b, tp, &cause) == 0, "now 21 positions fit");
	is_int(a.n_tokens, 21, "sequence at 21");
	ok(model_set_ctx(m, 0, &cause) == -1, "context 0 refused");
	is_str(cause, "context 0 out of range 1..16777216", "context error");
	free(cause);
	cause = NULL;

	{
		struct kv_layout	 other = model_info(m)->kv;
		struct kv_pool		*op;

		other.n_layers = 4;
		op = kv_pool_create(&other, 4, &cause);
		kv_seq_reserve(op, &b2, 3);
		e[0] = (struct fwd_entry){ &b2, tok, 3, l };
		ok(model_forward(m, op, &b, tp, &cause) == -1,
		    "pool of another model refused");
		like(cause, "does not fit the model", "pool mismatch error");
		free(cause);
		cause = NULL;
		kv_seq_release(op, &b2);
		kv_pool_free(op);
	}
	{	/* a pool of 16-bit codes is read by the AVX2 kernel alone */
		struct kv_layout	 codes = model_info(m)->kv;
		struct kv_pool		*cp;

		codes.type = KV_TYPE_I16;
		cp = kv_pool_create(&codes, 4, &cause);
		kv_seq_reserve(cp, &b2, 3);
		e[0] = (struct fwd_entry){ &b2, tok, 3, l };
		quant_force_isa(QUANT_ISA_SCALAR);
		ok(model_forward(m, cp, &b, tp, &cause) == -1,
		    "I16 pool refused without AVX2");
		is_str(cause, "kv pool of 16-bit codes needs AVX2 attention, "
		    "which this CPU lacks", "I16 pool error");
		free(cause);
		cause = NULL;
		is_int(b2.n_tokens, 0, "nothing stored");
		quant_force_isa(QUANT_ISA_AUTO);
		if (quant_isa_supported(QUANT_ISA_AVX2)) {
			ok(model_forward(m, cp, &b, tp, &cause) == 0,
			    "I16 pool served with AVX2");
			is_int(b2.n_tokens, 3, "3 positions stored as codes");
		} else
			diag("the CPU has no AVX2: I16 pool not served");
		kv_seq_release(cp, &b2);
		kv_pool_free(cp);
	}
	kv_seq_release(pool, &a);
	kv_pool_free(pool);
	model_free(m);
}

/* Write a patched copy of a shared model; returns its path. */
static char *
patched(const char *file, const void *find, size_t flen, size_t off,
    const void *with, size_t wlen)
{
	static char	 out[1200];
	char		 path[1200];
	char		*buf, *p;
	size_t		 len;
	FILE		*f;

	snprintf(path, sizeof path, "%s/models/%s", shared, file);
	if ((buf = slurp(path, &len)) == NULL)
		return (NULL);
	p = memmem(buf, len, find, flen);
	if (p == NULL) {
		free(buf);
		return (NULL);
	}
	memcpy(p + off, with, wlen);
	snprintf(out, sizeof out, "%s/patched.gguf", tmpdir);
	f = fopen(out, "wb");
	fwrite(buf, 1, len, f);
	fclose(f);
	free(buf);
	return (out);
}

/* A GGUF string as stored: u64 length then the bytes. */
static size_t
gstr(char *dst, const char *s)
{
	uint64_t	n = strlen(s);

	memcpy(dst, &n, 8);
	memcpy(dst + 8, s, n);
	return (8 + n);
}

/* Expect loading path to fail with a message containing want. */
static void
load_fails(const char *path, const char *want)
{
	struct model_opts	 o = { .n_threads = 1 };
	struct model		*m;
	char			*cause = NULL;

	if (path == NULL) {
		ok(0, "patch for '%s' applied", want);
		return;
	}
	m = model_load(path, &o, NULL, NULL, &cause);
	ok(m == NULL, "refused: %s", want);
	like(cause, want, "error says: %s", want);
	free(cause);
	model_free(m);
}

/* A model whose output head is tied to its embeddings loads and runs. */
static void
tied(const char *path)
{
	struct model_opts	 o = { .n_threads = 1, .kv_type_f32 = 1 };
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		 seq;
	int32_t			 prompt[5] = { 1, 403, 407, 261, 378 };
	float			 l[512];
	char			*cause = NULL;
	int			 i, fin = 1;

	m = path != NULL ? model_load(path, &o, NULL, NULL, &cause) : NULL;
	if (!ok(m != NULL, "tied output head: loads")) {
		diag("%s", cause ? cause : "patch failed");
		free(cause);
		return;
	}
	ok(m->output == m->tok_embd, "tied output head: shares token_embd");
	pool = model_kv_pool_create(m, 4, &cause);
	memset(&seq, 0, sizeof seq);
	ok(prefill(m, pool, &seq, prompt, 5, 5, NULL, l) == 0,
	    "tied output head: runs");
	for (i = 0; i < 512; i++)
		fin &= isfinite(l[i]);
	ok(fin, "tied output head: finite logits");
	kv_seq_release(pool, &seq);
	kv_pool_free(pool);
	model_free(m);
}

/* Load errors name the key or tensor at fault. */
static void
test_load_errors(void)
{
	char		 key[256], path[1200];
	size_t		 n;
	uint32_t	 u;
	uint64_t	 ne[2];

	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", shared);
	load_fails(path, "unsupported architecture 'gpt2'");
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", shared);
	load_fails(path, "missing tensor 'token_embd.weight'");
	snprintf(path, sizeof path, "%s/models/nonexistent.gguf", shared);
	load_fails(path, "No such file or directory");

	/* Keys: the value follows the key and its u32 type. */
	n = gstr(key, "llama.attention.head_count");
	u = 7;
	load_fails(patched("stories260K.gguf", key, n, n + 4, &u, 4),
	    "llama.attention.head_count 7 does not divide "
	    "llama.embedding_length 64");
	n = gstr(key, "llama.attention.head_count_kv");
	u = 3;
	load_fails(patched("stories260K.gguf", key, n, n + 4, &u, 4),
	    "llama.attention.head_count_kv 3 does not divide "
	    "llama.attention.head_count 8");
	n = gstr(key, "llama.block_count");
	u = 0;
	load_fails(patched("stories260K.gguf", key, n, n + 4, &u, 4),
	    "llama.block_count 0 out of range 1..1024");
	n = gstr(key, "llama.block_count");
	u = 6;
	load_fails(patched("stories260K.gguf", key, n, n + 4, &u, 4),
	    "missing tensor 'blk.5.attn_norm.weight'");

	/* Tensors: a renamed one is missing, a reshaped one named. */
	n = gstr(key, "output_norm.weight");
	load_fails(patched("stories260K.gguf", key, n, n - 1, "x", 1),
	    "missing tensor 'output_norm.weight'");
	n = gstr(key, "blk.0.attn_k.weight");
	ne[0] = 64;
	ne[1] = 16;
	load_fails(patched("stories260K.gguf", key, n, n + 4, ne, 16),
	    "tensor 'blk.0.attn_k.weight' (F32, 4096 bytes) is followed by "
	    "4096 unused bytes before 'blk.0.attn_v.weight' (alignment 32): "
	    "its type or shape does not match its data");
	n = gstr(key, "token_embd.weight");
	ne[0] = 64;
	ne[1] = 256;
	load_fails(patched("stories260K.gguf", key, n, n + 4, ne, 16),
	    "tensor 'token_embd.weight' (F32, 65536 bytes) is followed by "
	    "65536 unused bytes");
	/* The F32 token embedding relabelled Q4_0: 1/7 of its data is read. */
	{
		uint32_t q4_0 = 2;

		load_fails(patched("stories260K.gguf", key, n, n + 20, &q4_0,
		    4), "tensor 'token_embd.weight' (Q4_0, 18432 bytes) is "
		    "followed by 112640 unused bytes");
	}

	/* Without output.weight the head is tied to token_embd. */
	n = gstr(key, "output.weight");
	tied(patched("stories260K.gguf", key, n, n - 1, "x", 1));
	snprintf(path, sizeof path, "%s/patched.gguf", tmpdir);
	unlink(path);
}

/* Record the last progress fraction. */
static void
on_progress(void *arg, double f)
{
	double	*last = arg;

	if (f < *last)
		*last = 99;	/* must never go back */
	else
		*last = f;
}

/* The random F16 model with the full Llama 2 vocabulary generates. */
static void
test_tiny_random(struct threadpool *tp)
{
	const struct backend_ops *be = &backend_cpu_ops;
	struct backend_config	 cfg = { .n_threads = 2 };
	struct backend_inst	*bi;
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		 seq;
	struct fwd_entry	 e;
	struct fwd_batch	 b = { &e, 1 };
	int32_t			*ids = NULL, out[2][24], t;
	size_t			 n_ids = 0;
	float			*l;
	char			*cause = NULL;
	int			 run, i, good = 1;
	double			 prog = -1;

	m = load("llama-2-tiny-random.gguf", 0, 0);
	if (!ok(m != NULL, "llama-2-tiny-random loads"))
		return;
	is_int(model_info(m)->n_vocab, 32000, "32000 vocab");
	is_str(model_info(m)->type_name, "F16", "type F16");
	is_int(model_info(m)->n_ctx, 4096, "trained context by default");
	is_int(model_info(m)->kv.type, KV_TYPE_F16, "F16 KV by default");
	is_int(model_info(m)->kv.block_size, 16, "block size 16 by default");
	ok(tokenizer_encode(model_tokenizer(m), "Hello world", 11, 1, 0, &ids,
	    &n_ids, &cause) == 0 && n_ids >= 2, "prompt tokenized (%zu ids)",
	    n_ids);
	l = malloc(32000 * sizeof *l);

	bi = be->create(m, &cfg, &cause);
	ok(bi != NULL, "cpu instance with 2 threads");
	pool = be->kv_pool_create(bi, 16, &cause);
	for (run = 0; run < 2; run++) {
		memset(&seq, 0, sizeof seq);
		kv_seq_reserve(pool, &seq, n_ids);
		e = (struct fwd_entry){ &seq, ids, (int)n_ids, l };
		good &= be->forward(bi, pool, &b, &cause) == 0;
		for (i = 0; i < 24 && good; i++) {
			t = argmax(l, 32000);
			out[run][i] = t;
			good &= isfinite(l[t]) && t >= 0 && t < 32000;
			kv_seq_reserve(pool, &seq, 1);
			e = (struct fwd_entry){ &seq, &t, 1, l };
			good &= be->forward(bi, pool, &b, &cause) == 0;
		}
		kv_seq_release(pool, &seq);
	}
	ok(good, "24 tokens generated twice without error");
	ok(memcmp(out[0], out[1], sizeof out[0]) == 0, "deterministic");
	be->kv_pool_free(bi, pool);
	be->destroy(bi);
	model_free(m);
	free(ids);
	free(l);

	/* Progress is reported and ends at 1. */
	{
		struct model_opts	 o = { 0 };
		char			 path[1200];

		snprintf(path, sizeof path, "%s/models/llama-2-tiny-random.gguf",
		    shared);
		m = model_load(path, &o, on_progress, &prog, &cause);
		ok(m != NULL && prog == 1.0, "progress reaches 1");
		model_free(m);
	}
	(void)tp;
}

/*
 * Synthesize a model with phased-synth and check it loads, reports its
 * type, runs, and stays batch-invariant (one prefill vs chunks of 4).
 */
static void
synth_one(struct threadpool *tp, const char *synth, const char *shape,
    const char *type, const char *want_type)
{
	struct model_opts o = { .n_threads = 2 };
	struct model	*m;
	struct kv_pool	*pool;
	struct kv_seq	 seq;
	int32_t		 prompt[6] = { 1, 403, 407, 261, 378, 300 }, t;
	float		*l, *l1;
	char		 cmd[4096], out[1200], *cause = NULL;
	int		 good, s, nv;

	snprintf(out, sizeof out, "%s/synth-%s.gguf", tmpdir, type);
	snprintf(cmd, sizeof cmd, "'%s' --shape %s --type %s --layers 1 "
	    "--vocab '%s/models/stories260K.gguf' -o '%s' >/dev/null 2>&1",
	    synth, shape, type, shared, out);
	if (!ok(system(cmd) == 0, "phased-synth %s %s", shape, type))
		return;
	m = model_load(out, &o, NULL, NULL, &cause);
	if (!ok(m != NULL, "synthesized %s %s loads", shape, type)) {
		diag("%s", cause);
		free(cause);
		unlink(out);
		return;
	}
	is_str(model_info(m)->type_name, want_type, "%s %s: type reported",
	    shape, type);
	nv = model_info(m)->n_vocab;
	l = malloc(nv * sizeof *l);
	l1 = malloc(nv * sizeof *l1);
	pool = model_kv_pool_create(m, 8, &cause);
	memset(&seq, 0, sizeof seq);
	good = prefill(m, pool, &seq, prompt, 6, 6, tp, l1) == 0;
	kv_seq_release(pool, &seq);
	good &= prefill(m, pool, &seq, prompt, 6, 4, tp, l) == 0;
	ok(good && memcmp(l, l1, nv * sizeof *l) == 0,
	    "%s %s: chunked prefill bit-identical", shape, type);
	for (s = 0; s < 8 && good; s++) {
		t = argmax(l, nv);
		good &= isfinite(l[t]);
		good &= prefill(m, pool, &seq, &t, 1, 1, tp, l) == 0;
	}
	ok(good, "%s %s: 8 decode steps", shape, type);
	kv_seq_release(pool, &seq);
	kv_pool_free(pool);
	model_free(m);
	free(l);
	free(l1);
	unlink(out);
}

/* Synthesized models of every type, if phased-synth is built. */
static void
test_synth(struct threadpool *tp)
{
	static const char *types[] = { "F32", "F16", "BF16", "Q8_0", "Q4_0",
	    "Q4_K", "Q6_K", "Q4_K_M" };
	const char	*bdir = getenv("top_builddir");
	char		 synth[1200];
	size_t		 i;

	snprintf(synth, sizeof synth, "%s/phased-synth", bdir ? bdir : ".");
	if (access(synth, X_OK) != 0) {
		diag("no %s: synthesized models not tested", synth);
		return;
	}
	/*
	 * Rows of 64 do not fit K-quant blocks: as llama-quantize does, Q4_K
	 * falls back to Q5_0 and Q6_K to Q8_0.
	 */
	for (i = 0; i < sizeof types / sizeof types[0]; i++)
		synth_one(tp, synth, "stories260K", types[i],
		    i < 5 ? types[i] : i == 6 ? "Q8_0" : "Q5_0");
	/* One layer of TinyLlama's shape has rows of 2048 and 5632. */
	synth_one(tp, synth, "tinyllama-1.1b", "Q4_K", "Q4_K");
	synth_one(tp, synth, "tinyllama-1.1b", "Q6_K", "Q6_K");
	synth_one(tp, synth, "tinyllama-1.1b", "Q4_K_M", "Q4_K");
}

int
main(void)
{
	struct threadpool	*tp;
	char			 path[1200], *doc, *cause = NULL;

	snprintf(shared, sizeof shared, "%s", shared_dir());
	snprintf(path, sizeof path, "%s/golden/stories260K-once-upon-a-time.json",
	    shared);
	if ((doc = slurp(path, NULL)) == NULL)
		skip_all("no %s", path);
	snprintf(tmpdir, sizeof tmpdir, "%s/test-model.XXXXXX",
	    getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(tmpdir) == NULL)
		skip_all("mkdtemp: %s", strerror(errno));

	tp = threadpool_create(2, NULL, &cause);
	if (tp == NULL)
		skip_all("threadpool: %s", cause);

	test_golden(doc, tp);
	test_invariance(doc, 1, tp);
	test_invariance(doc, 0, tp);
	/* Where AVX-512 attention took over, the generic one stays covered. */
	if (quant_isa() == QUANT_ISA_AVX512 &&
	    quant_force_isa(QUANT_ISA_AVX2) == 0) {
		diag("golden and invariance again with the AVX2 variant");
		test_golden(doc, tp);
		test_invariance(doc, 1, tp);
		test_invariance(doc, 0, tp);
		quant_force_isa(QUANT_ISA_AUTO);
	}
	test_long_batch(tp);
	test_bad_batches(tp);
	test_load_errors();
	test_tiny_random(tp);
	test_synth(tp);

	threadpool_destroy(tp);
	rmdir(tmpdir);
	free(doc);
	done_testing();
}
