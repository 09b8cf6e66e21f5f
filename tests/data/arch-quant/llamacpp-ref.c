/*
 * llamacpp-ref.c: llama.cpp's outputs for a model, as reference outputs
 * for test-arch.  Built against llama.cpp's library (see README here),
 * never by the project's build.
 *
 * usage: llamacpp-ref model.gguf cases.json f16|f32 what which > out.json
 *
 * For each case of cases.json (a document of ../shared/golden/arch) it
 * feeds the case's prompt ids, then takes 32 greedy tokens (an end of
 * generation is kept and ends them), and prints the document again with
 * llama.cpp's last prompt logits and greedy tokens; "what" describes the
 * model, "which" the llama.cpp (its commit).  weights_fnv1a, the FNV-1a
 * hash of every tensor's bytes in the file's order, names the weights the
 * outputs belong to.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gguf.h>
#include <jansson.h>
#include <llama.h>

#define N_GREEDY	32

/* Drop llama.cpp's log lines below errors. */
static void
quiet(enum ggml_log_level level, const char *text, void *arg)
{
	(void)arg;
	if (level >= GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

/* FNV-1a (64 bits) of the bytes of every tensor of a GGUF file, in order. */
static unsigned long long
weights_fnv1a(const char *path)
{
	struct gguf_init_params	 p = { .no_alloc = true, .ctx = NULL };
	struct gguf_context	*g;
	unsigned long long	 h = 0xcbf29ce484222325ULL;
	FILE			*f;
	size_t			 n;
	int64_t			 i;
	int			 c;

	if ((g = gguf_init_from_file(path, p)) == NULL ||
	    (f = fopen(path, "rb")) == NULL) {
		fprintf(stderr, "%s: not readable as GGUF\n", path);
		exit(1);
	}
	for (i = 0; i < gguf_get_n_tensors(g); i++) {
		fseek(f, (long)(gguf_get_data_offset(g) +
		    gguf_get_tensor_offset(g, i)), SEEK_SET);
		for (n = gguf_get_tensor_size(g, i); n > 0; n--) {
			if ((c = getc(f)) == EOF) {
				fprintf(stderr, "%s: truncated\n", path);
				exit(1);
			}
			h = (h ^ (unsigned)c) * 0x100000001b3ULL;
		}
	}
	fclose(f);
	gguf_free(g);
	return (h);
}

/* Index of the largest of n logits. */
static int
argmax(const float *l, int n)
{
	int	i, b = 0;

	for (i = 1; i < n; i++)
		if (l[i] > l[b])
			b = i;
	return (b);
}

/* One case: its logits and greedy tokens from a fresh cache. */
static json_t *
run_case(struct llama_context *ctx, const struct llama_vocab *vocab,
    json_t *c)
{
	json_t		*ids = json_object_get(c, "prompt_ids");
	json_t		*out, *ll, *gr;
	llama_token	*tok, t;
	const float	*l;
	int		 n = (int)json_array_size(ids), nv, i;

	nv = llama_vocab_n_tokens(vocab);
	tok = calloc(n, sizeof *tok);
	for (i = 0; i < n; i++)
		tok[i] = (llama_token)json_integer_value(
		    json_array_get(ids, i));
	llama_memory_clear(llama_get_memory(ctx), 1);
	if (llama_decode(ctx, llama_batch_get_one(tok, n)) != 0) {
		fprintf(stderr, "decode of the prompt failed\n");
		exit(1);
	}
	l = llama_get_logits_ith(ctx, -1);
	out = json_object();
	json_object_set(out, "prompt", json_object_get(c, "prompt"));
	json_object_set(out, "prompt_ids", ids);
	ll = json_array();
	for (i = 0; i < nv; i++)
		json_array_append_new(ll, json_real(l[i]));
	gr = json_array();
	for (i = 0; i < N_GREEDY; i++) {
		t = argmax(l, nv);
		json_array_append_new(gr, json_integer(t));
		if (llama_vocab_is_eog(vocab, t))
			break;
		if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
			fprintf(stderr, "decode of token %d failed\n", i);
			exit(1);
		}
		l = llama_get_logits_ith(ctx, -1);
	}
	json_object_set_new(out, "greedy", gr);
	json_object_set_new(out, "last_logits", ll);
	free(tok);
	return (out);
}

int
main(int argc, char **argv)
{
	struct llama_model_params	 mp = llama_model_default_params();
	struct llama_context_params	 cp = llama_context_default_params();
	struct llama_model		*model;
	struct llama_context		*ctx;
	json_error_t			 err;
	json_t				*doc, *cases, *out, *oc;
	size_t				 i;

	if (argc != 6 || (strcmp(argv[3], "f16") && strcmp(argv[3], "f32"))) {
		fprintf(stderr, "usage: llamacpp-ref model.gguf cases.json "
		    "f16|f32 what which\n");
		return (2);
	}
	if ((doc = json_load_file(argv[2], 0, &err)) == NULL) {
		fprintf(stderr, "%s: %s\n", argv[2], err.text);
		return (1);
	}
	llama_log_set(quiet, NULL);
	llama_backend_init();
	mp.n_gpu_layers = 0;
	if ((model = llama_model_load_from_file(argv[1], mp)) == NULL) {
		fprintf(stderr, "%s: load failed\n", argv[1]);
		return (1);
	}
	cp.n_ctx = 256;
	cp.n_batch = 256;
	cp.n_ubatch = 256;
	cp.n_threads = cp.n_threads_batch = 2;
	cp.type_k = cp.type_v = strcmp(argv[3], "f16") ? GGML_TYPE_F32 :
	    GGML_TYPE_F16;
	if ((ctx = llama_init_from_model(model, cp)) == NULL) {
		fprintf(stderr, "context failed\n");
		return (1);
	}
	out = json_object();
	json_object_set_new(out, "model", json_string(argv[4]));
	json_object_set_new(out, "reference", json_sprintf("llama.cpp (%s), "
	    "CPU, %s KV cache, greedy", argv[5], strcmp(argv[3], "f16") ?
	    "F32" : "F16"));
	json_object_set_new(out, "weights_fnv1a", json_sprintf("%016llx",
	    weights_fnv1a(argv[1])));
	oc = json_array();
	cases = json_object_get(doc, "cases");
	for (i = 0; i < json_array_size(cases); i++)
		json_array_append_new(oc, run_case(ctx,
		    llama_model_get_vocab(model), json_array_get(cases, i)));
	json_object_set_new(out, "cases", oc);
	json_dumpf(out, stdout, JSON_REAL_PRECISION(7));
	putchar('\n');
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	json_decref(out);
	json_decref(doc);
	return (0);
}
