/* bench-model.c: prefill and decode speed of a model on the CPU backend. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvcache.h"
#include "model.h"
#include "sampler.h"
#include "util.h"

/* Run one batch through the backend or die. */
static void
run(const struct backend_ops *be, struct backend_inst *bi, struct kv_pool *pool,
    struct fwd_batch *b)
{
	char	*cause = NULL;
	int	 i;

	for (i = 0; i < b->n_seqs; i++) {
		if (kv_seq_reserve(pool, b->entries[i].seq,
		    b->entries[i].n_tokens) != 0) {
			fprintf(stderr, "kv pool full\n");
			exit(1);
		}
	}
	if (be->forward(bi, pool, b, &cause) != 0) {
		fprintf(stderr, "forward: %s\n", cause);
		exit(1);
	}
}

int
main(int argc, char **argv)
{
	const struct backend_ops *be = backend_find("cpu");
	struct backend_config	 cfg = { 0 };
	struct model_opts	 o = { 0 };
	struct backend_inst	*bi;
	struct model		*m;
	struct kv_pool		*pool;
	struct kv_seq		*seqs;
	struct fwd_entry	*e;
	struct fwd_batch	 b;
	struct sampler_params	 sp;
	struct sampler		*smp;
	int32_t			*prompt, *next;
	float			*logits;
	char			*cause = NULL;
	uint64_t		 t0, t1;
	int			 n_prompt, n_gen, n_seq, nv, i, s;

	if (argc < 2) {
		fprintf(stderr, "usage: bench-model model.gguf [threads "
		    "[prompt [gen [seqs]]]]\n");
		return (1);
	}
	o.n_threads = argc > 2 ? atoi(argv[2]) : 0;
	n_prompt = argc > 3 ? atoi(argv[3]) : 128;
	n_gen = argc > 4 ? atoi(argv[4]) : 64;
	n_seq = argc > 5 ? atoi(argv[5]) : 1;
	if (n_prompt < 1 || n_gen < 1 || n_seq < 1) {
		fprintf(stderr, "counts must be positive\n");
		return (1);
	}
	o.ctx = n_prompt + n_gen;
	if ((m = model_load(argv[1], &o, NULL, NULL, &cause)) == NULL ||
	    (bi = be->create(m, &cfg, &cause)) == NULL ||
	    (pool = be->kv_pool_create(bi, n_seq *
	    kv_layout_blocks_for(&model_info(m)->kv, o.ctx), &cause)) == NULL) {
		fprintf(stderr, "%s\n", cause);
		return (1);
	}
	nv = model_info(m)->n_vocab;
	sampler_params_init(&sp);	/* greedy, as the engine would run it */
	smp = sampler_create(&sp, nv);
	seqs = xcalloc(n_seq, sizeof *seqs);
	e = xcalloc(n_seq, sizeof *e);
	prompt = xcalloc(n_prompt, sizeof *prompt);
	next = xcalloc(n_seq, sizeof *next);
	logits = xcalloc((size_t)n_seq * nv, sizeof *logits);
	for (i = 0; i < n_prompt; i++)
		prompt[i] = (int32_t)((i * 7919 + 1) % nv);

	/* Prefill: each sequence's whole prompt in one batch. */
	for (s = 0; s < n_seq; s++)
		e[s] = (struct fwd_entry){ &seqs[s], prompt, n_prompt,
		    logits + (size_t)s * nv };
	b.entries = e;
	b.n_seqs = n_seq;
	t0 = now_ns();
	run(be, bi, pool, &b);
	t1 = now_ns();
	printf("%s: %s, threads %d (0 = all cpus)\n", argv[1],
	    model_info(m)->type_name, o.n_threads);
	printf("prefill: %d x %d tokens in %.3f ms: %.1f tokens/s\n", n_seq,
	    n_prompt, (t1 - t0) / 1e6, (double)n_seq * n_prompt * 1e9 / (t1 - t0));

	/* Decode: one token per sequence per step, sampled greedily. */
	t0 = now_ns();
	for (i = 0; i < n_gen - 1; i++) {
		for (s = 0; s < n_seq; s++) {
			next[s] = sampler_sample(smp, logits + (size_t)s * nv,
			    NULL, 0);
			e[s].tokens = &next[s];
			e[s].n_tokens = 1;
		}
		run(be, bi, pool, &b);
	}
	t1 = now_ns();
	printf("decode: %d steps x %d seqs in %.3f ms: %.1f tokens/s\n",
	    n_gen - 1, n_seq, (t1 - t0) / 1e6,
	    (double)(n_gen - 1) * n_seq * 1e9 / (t1 - t0));

	for (s = 0; s < n_seq; s++)
		kv_seq_release(pool, &seqs[s]);
	be->kv_pool_free(bi, pool);
	be->destroy(bi);
	model_free(m);
	sampler_free(smp);
	free(seqs);
	free(e);
	free(prompt);
	free(next);
	free(logits);
	return (0);
}
