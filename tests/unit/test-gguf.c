/* test-gguf.c: the GGUF reader on real files. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tensor_type.h"
#include "util.h"
#include "tap.h"
#include "testdata.h"

static const char *shared;

/* Build a path under the shared data directory. */
static char *
shared_path(const char *rel)
{
	char	*p;

	xasprintf(&p, "%s/%s", shared, rel);
	return (p);
}

/* Open the stories260K model and check the keys a loader reads. */
static void
test_stories(void)
{
	struct gguf_file		*gf;
	const struct gguf_tensor	*t;
	const struct gguf_kv		*kv;
	char				*path, *cause = NULL, *s;
	uint32_t			 u;
	float				 f;
	uint64_t			 want[2] = { 64, 512 };

	path = shared_path("models/stories260K.gguf");
	gf = gguf_open(path, &cause);
	if (!ok(gf != NULL, "open stories260K.gguf")) {
		diag("%s", cause);
		free(cause);
		free(path);
		return;
	}
	diag("version %u, %" PRIu64 " kvs, %" PRIu64 " tensors, data at %" PRIu64,
	    gf->version, gf->n_kv, gf->n_tensors, gf->data_offset);
	s = gguf_get_str(gf, "general.architecture", &cause);
	is_str(s, "llama", "general.architecture");
	free(s);
	ok(gguf_get_u32(gf, "llama.embedding_length", &u, &cause) == 0 &&
	    u == 64, "embedding_length 64");
	ok(gguf_get_u32(gf, "llama.block_count", &u, &cause) == 0 && u == 5,
	    "block_count 5");
	f = 0;
	ok(gguf_get_f32(gf, "llama.attention.layer_norm_rms_epsilon", &f,
	    &cause) == 0, "rms epsilon");
	near(f, 1e-5, 1e-9, "rms epsilon 1e-5");
	kv = gguf_get_arr(gf, "tokenizer.ggml.tokens", GGUF_VT_STRING, &cause);
	ok(kv != NULL && kv->v.arr.n == 512, "512 tokens");
	if (kv != NULL)
		diag("token 300 '%.*s'", (int)kv->v.arr.strs[300].len,
		    kv->v.arr.strs[300].ptr);
	kv = gguf_get_arr(gf, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, &cause);
	ok(kv != NULL && kv->v.arr.n == 512, "512 scores");
	ok(gguf_get_arr(gf, "tokenizer.ggml.scores", GGUF_VT_INT32, &cause) ==
	    NULL, "scores as int32 fails");
	like(cause, "is an array of float32, want an array of int32",
	    "wrong element type named");
	free(cause);
	cause = NULL;
	ok(gguf_get_u32(gf, "no.such.key", &u, &cause) != 0, "missing key");
	like(cause, "missing key 'no.such.key'", "missing key named");
	free(cause);
	cause = NULL;
	ok(gguf_get_u32(gf, "general.architecture", &u, &cause) != 0,
	    "string as u32 fails");
	like(cause, "has type string, want an integer", "wrong type named");
	free(cause);
	cause = NULL;

	t = gguf_find_tensor(gf, "token_embd.weight");
	ok(t != NULL && t->type == TT_F32, "token_embd.weight F32");
	if (t != NULL) {
		ok(gguf_tensor_check(t, 2, want, &cause) == 0, "token_embd shape");
		want[1] = 511;
		ok(gguf_tensor_check(t, 2, want, &cause) != 0, "wrong shape fails");
		like(cause, "tensor 'token_embd.weight': shape [64, 512], "
		    "expected [64, 511]", "shape error names both shapes");
		free(cause);
		cause = NULL;
		ok(t->nbytes == 64 * 512 * 4, "nbytes");
		ok((const uint8_t *)t->data + t->nbytes <= gf->map + gf->size,
		    "data inside file");
	}
	gguf_close(gf);
	free(path);
}

/* Open a file and print a few keys. */
static void
test_open_print(const char *rel)
{
	struct gguf_file	*gf;
	char			*path, *cause = NULL, *s;
	uint64_t		 i;

	path = shared_path(rel);
	gf = gguf_open(path, &cause);
	if (!ok(gf != NULL, "open %s", rel)) {
		diag("%s", cause);
		free(cause);
		free(path);
		return;
	}
	diag("%s: v%u, %" PRIu64 " kvs, %" PRIu64 " tensors", rel,
	    gf->version, gf->n_kv, gf->n_tensors);
	for (i = 0; i < gf->n_kv; i++) {
		if (gf->kv[i].type == GGUF_VT_STRING)
			diag("  %s = '%.*s'", gf->kv[i].key,
			    (int)(gf->kv[i].v.s.len > 60 ? 60 : gf->kv[i].v.s.len),
			    gf->kv[i].v.s.ptr);
		else if (gf->kv[i].type == GGUF_VT_ARRAY)
			diag("  %s = [%s x %" PRIu64 "]", gf->kv[i].key,
			    gguf_vtype_name(gf->kv[i].v.arr.type),
			    gf->kv[i].v.arr.n);
	}
	s = gguf_get_str(gf, "tokenizer.ggml.model", &cause);
	ok(s != NULL, "%s: tokenizer.ggml.model '%s'", rel, s ? s : "");
	free(s);
	free(cause);
	gguf_close(gf);
	free(path);
}

/* Opening something that is not there or not a file fails cleanly. */
static void
test_open_errors(void)
{
	char	*cause = NULL;

	ok(gguf_open("/nonexistent/x.gguf", &cause) == NULL, "missing file");
	like(cause, "/nonexistent/x.gguf: No such file", "missing file named");
	free(cause);
	cause = NULL;
	ok(gguf_open("/", &cause) == NULL, "directory");
	like(cause, "not a regular file", "directory refused");
	free(cause);
	cause = NULL;
	ok(gguf_open("/dev/null", &cause) == NULL, "/dev/null");
	free(cause);
}

/* Run the checks. */
int
main(void)
{
	shared = shared_dir();
	test_stories();
	test_open_print("models/llama-2-tiny-random.gguf");
	test_open_print("vocab/ggml-vocab-llama-spm.gguf");
	test_open_print("vocab/ggml-vocab-gpt-2.gguf");
	test_open_errors();
	done_testing();
}
