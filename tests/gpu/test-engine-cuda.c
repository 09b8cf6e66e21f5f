/* test-engine-cuda.c: the model on the CUDA backend against the CPU backend. */

#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "backend_cuda.h"
#include "comm.h"
#include "cuda_kernels.h"
#include "kvcache.h"
#include "model.h"
#include "../tap.h"
#include "../testdata.h"

#define N_GREEDY	200
#define MAXV		512
/*
 * GPU against CPU.  Both store F16 keys and values, but sums run in other
 * orders, so a key or value now and then rounds to the neighbouring half
 * and every later position sees it: logits (about 20 in size) drift apart
 * by several 1e-3 over a few hundred positions (F16 rather than F32 keys
 * alone move the CPU's by 5e-3).  A wrong kernel moves them by whole units.
 */
#define LOGIT_TOL	1e-3	/* the prompt's last position */
#define STEP_TOL	2e-2	/* any of 200 decode steps */
#define RAGGED_TOL	5e-3	/* the short sequences of the ragged check */
/* A cause for printing, which may be NULL. */
#define STR(s)		((s) != NULL ? (s) : "no cause")
/* Prompt tokens of the synthesized models' check. */
#define SYNTH_PROMPT	24
/* Decode steps of the ragged batch check. */
#define RAGGED_STEPS	12

/* A backend instance with its pool. */
struct run {
	const struct backend_ops *ops;
	struct backend_inst	*bi;
	struct kv_pool		*pool;
};

/* Largest absolute difference of two vectors. */
static double
maxdiff(const float *a, const float *b, int n)
{
	double	d, m = 0.0;
	int	i;

	for (i = 0; i < n; i++) {
		d = fabs((double)a[i] - b[i]);
		if (!(d <= m))
			m = d;		/* NaN sticks */
	}
	return (m);
}

/* Start an instance of a backend on the model, with a pool of n_blocks. */
static int
run_start(struct run *r, const struct backend_ops *ops, const struct model *m,
    const struct backend_config *cfg, uint32_t n_blocks)
{
	char	*cause = NULL;

	memset(r, 0, sizeof *r);
	r->ops = ops;
	r->bi = ops->create(m, cfg, &cause);
	if (r->bi == NULL) {
		diag("%s: create: %s", ops->name, cause);
		free(cause);
		return (-1);
	}
	r->pool = ops->kv_pool_create(r->bi, n_blocks, &cause);
	if (r->pool == NULL) {
		diag("%s: kv pool: %s", ops->name, cause);
		free(cause);
		ops->destroy(r->bi);
		r->bi = NULL;
		return (-1);
	}
	return (0);
}

/* Free an instance and its pool. */
static void
run_stop(struct run *r)
{
	if (r->bi == NULL)
		return;
	r->ops->kv_pool_free(r->bi, r->pool);
	r->ops->destroy(r->bi);
	r->bi = NULL;
}

/* Reserve blocks and run a batch; -1 with a diagnostic on failure. */
static int
run_batch(struct run *r, struct fwd_entry *e, int n)
{
	struct fwd_batch	 b = { e, n };
	char			*cause = NULL;
	int			 i;

	for (i = 0; i < n; i++) {
		if (kv_seq_reserve(r->pool, e[i].seq, e[i].n_tokens) != 0) {
			diag("%s: kv_seq_reserve failed", r->ops->name);
			return (-1);
		}
	}
	if (r->ops->forward(r->bi, r->pool, &b, &cause) != 0) {
		diag("%s: forward: %s", r->ops->name, cause);
		free(cause);
		return (-1);
	}
	return (0);
}

/*
 * Prefill a prompt as one entry and decode n greedy tokens into out;
 * all_logits gets n rows: the prompt's last position, then each step's.
 * Returns the number of tokens produced.
 */
static int
greedy(struct run *r, const int32_t *prompt, int np, int n, int32_t *out,
    float *all_logits)
{
	struct kv_seq		 seq;
	struct fwd_entry	 e;
	int32_t			 tok;
	int			 i = 0;

	memset(&seq, 0, sizeof seq);
	e.seq = &seq;
	e.tokens = prompt;
	e.n_tokens = np;
	e.logits = all_logits;
	if (run_batch(r, &e, 1) != 0)
		goto out;
	for (i = 0; i < n; i++) {
		out[i] = argmax(all_logits + (size_t)i * MAXV, MAXV);
		tok = out[i];
		e.tokens = &tok;
		e.n_tokens = 1;
		e.logits = all_logits + (size_t)(i + 1) * MAXV;
		if (i + 1 < n && run_batch(r, &e, 1) != 0) {
			i++;
			goto out;
		}
	}
out:
	kv_seq_release(r->pool, &seq);
	return (i);
}

/* The golden continuation on both backends, token for token. */
static void
test_greedy(struct run *gpu, struct run *cpu, const char *doc)
{
	double		 pt[16], gt[N_GREEDY + 8];
	int32_t		 prompt[16], tg[N_GREEDY], tc[N_GREEDY];
	float		*lg, *lc;
	double		 d, worst = 0.0;
	int		 np, ng, i, n, same = 1, golden = 1, first = -1;

	np = json_numbers(doc, "prompt_tokens", pt, 16);
	ng = json_numbers(doc, "greedy_tokens", gt, N_GREEDY + 8);
	if (!ok(np == 5 && ng == N_GREEDY, "golden file: 5 prompt tokens, "
	    "200 greedy tokens"))
		return;
	for (i = 0; i < np; i++)
		prompt[i] = (int32_t)pt[i];
	lg = calloc((size_t)(N_GREEDY + 1) * MAXV, sizeof *lg);
	lc = calloc((size_t)(N_GREEDY + 1) * MAXV, sizeof *lc);
	if (lg == NULL || lc == NULL)
		abort();

	n = greedy(gpu, prompt, np, N_GREEDY, tg, lg);
	is_int(n, N_GREEDY, "cuda: 200 greedy steps run");
	is_int(greedy(cpu, prompt, np, N_GREEDY, tc, lc), N_GREEDY,
	    "cpu: 200 greedy steps run");
	if (n != N_GREEDY)
		goto out;

	d = maxdiff(lg, lc, MAXV);
	near(d, 0.0, LOGIT_TOL, "last prompt position: cuda logits within "
	    "%g of cpu (max diff %.3g)", LOGIT_TOL, d);
	for (i = 0; i < N_GREEDY; i++) {
		if (tg[i] != tc[i] && first < 0)
			first = i;
		same &= tg[i] == tc[i];
		golden &= tg[i] == (int32_t)gt[i];
	}
	if (!ok(same, "cuda and cpu greedy tokens identical"))
		diag("first difference at step %d: cuda %d, cpu %d", first,
		    tg[first], tc[first]);
	ok(golden, "cuda greedy tokens equal the golden ones");
	/* Compare the logits of the steps while the two runs agree. */
	for (i = 0; i < N_GREEDY && (first < 0 || i <= first); i++) {
		d = maxdiff(lg + (size_t)i * MAXV, lc + (size_t)i * MAXV, MAXV);
		if (!(d <= worst))
			worst = d;
	}
	near(worst, 0.0, STEP_TOL, "every decode step's logits within %g "
	    "(max diff %.3g)", STEP_TOL, worst);
out:
	free(lg);
	free(lc);
}

/*
 * Three sequences in ragged batches on the GPU (a prompt, a longer prompt
 * in two chunks beside the others' decode steps, a third prompt), each
 * compared with the same sequence run alone on the CPU.
 */
static void
test_ragged(struct run *gpu, struct run *cpu, const char *doc)
{
	double			 gt[N_GREEDY + 8];
	int32_t			 p[3][40], tok[3], ref_tok[3][RAGGED_STEPS];
	int			 plen[3] = { 5, 30, 17 };
	struct kv_seq		 seq[3], copy;
	struct fwd_entry	 e[3];
	float			*lg[3], *ref[3], ladd[MAXV], lcopy[MAXV];
	double			 d, worst = 0.0;
	int			 s, i, step, same = 1, n;
	char			*cause = NULL;

	memset(seq, 0, sizeof seq);
	memset(&copy, 0, sizeof copy);
	memset(lg, 0, sizeof lg);
	memset(ref, 0, sizeof ref);
	if (json_numbers(doc, "greedy_tokens", gt, N_GREEDY + 8) != N_GREEDY)
		return;
	/* Prompts: BOS then stretches of the golden text. */
	for (s = 0; s < 3; s++) {
		p[s][0] = 1;
		for (i = 1; i < plen[s]; i++)
			p[s][i] = (int32_t)gt[(s * 37 + i) % N_GREEDY];
	}
	for (s = 0; s < 3; s++) {
		lg[s] = calloc((size_t)(RAGGED_STEPS + 1) * MAXV, sizeof(float));
		ref[s] = calloc((size_t)(RAGGED_STEPS + 1) * MAXV, sizeof(float));
		if (lg[s] == NULL || ref[s] == NULL)
			abort();
		/* The CPU reference: each sequence alone. */
		n = greedy(cpu, p[s], plen[s], RAGGED_STEPS, ref_tok[s], ref[s]);
		if (n != RAGGED_STEPS) {
			ok(0, "cpu reference of sequence %d", s);
			goto out;
		}
	}

	/* Batch 1: sequence 0 whole, 1 its first 13 tokens, 2 whole. */
	for (s = 0; s < 3; s++) {
		e[s].seq = &seq[s];
		e[s].tokens = p[s];
		e[s].n_tokens = s == 1 ? 13 : plen[s];
		e[s].logits = s == 1 ? NULL : lg[s];
	}
	if (!ok(run_batch(gpu, e, 3) == 0, "ragged prefill of 5, 13 and 17 "
	    "tokens"))
		goto out;
	/* Batch 2: decode 0 and 2 beside the rest of 1's prompt. */
	for (s = 0; s < 3; s++)
		tok[s] = argmax(lg[s], MAXV);
	e[0].tokens = &tok[0];
	e[0].n_tokens = 1;
	e[0].logits = lg[0] + MAXV;
	e[1].tokens = p[1] + 13;
	e[1].n_tokens = plen[1] - 13;
	e[1].logits = lg[1];
	e[2].tokens = &tok[2];
	e[2].n_tokens = 1;
	e[2].logits = lg[2] + MAXV;
	if (!ok(run_batch(gpu, e, 3) == 0, "two decode steps beside a "
	    "prefill chunk of 17"))
		goto out;
	tok[1] = argmax(lg[1], MAXV);
	same &= tok[0] == ref_tok[0][0] && tok[1] == ref_tok[1][0] &&
	    tok[2] == ref_tok[2][0];
	tok[0] = argmax(lg[0] + MAXV, MAXV);
	tok[2] = argmax(lg[2] + MAXV, MAXV);
	/*
	 * Then decode all three together; sequence 1 lags one step behind,
	 * so its step index is one less.
	 */
	for (step = 1; step < RAGGED_STEPS; step++) {
		same &= tok[0] == ref_tok[0][step] &&
		    tok[2] == ref_tok[2][step] &&
		    tok[1] == ref_tok[1][step - 1];
		for (s = 0; s < 3; s++) {
			i = s == 1 ? step : step + 1;
			e[s].tokens = &tok[s];
			e[s].n_tokens = 1;
			e[s].logits = i <= RAGGED_STEPS ?
			    lg[s] + (size_t)i * MAXV : ladd;
		}
		if (run_batch(gpu, e, 3) != 0) {
			ok(0, "batched decode step %d", step);
			goto out;
		}
		for (s = 0; s < 3; s++) {
			i = s == 1 ? step : step + 1;
			if (i <= RAGGED_STEPS)
				tok[s] = argmax(lg[s] + (size_t)i * MAXV, MAXV);
		}
	}
	ok(same, "ragged batches: every sequence's greedy tokens equal its "
	    "run alone on the cpu");
	/* Rows 0 .. RAGGED_STEPS - 1 of every sequence have a reference. */
	for (s = 0; s < 3; s++) {
		for (i = 0; i < RAGGED_STEPS; i++) {
			d = maxdiff(lg[s] + (size_t)i * MAXV,
			    ref[s] + (size_t)i * MAXV, MAXV);
			if (!(d <= worst))
				worst = d;
		}
	}
	near(worst, 0.0, RAGGED_TOL, "ragged batches: logits within %g of the "
	    "cpu (max diff %.3g)", RAGGED_TOL, worst);

	/* kv_copy: a copy of sequence 0 continues exactly like it. */
	if (ok(gpu->ops->kv_copy(gpu->bi, gpu->pool, &copy, gpu->bi,
	    gpu->pool, &seq[0], &cause) == 0, "kv_copy of sequence 0")) {
		is_int(copy.n_tokens, seq[0].n_tokens, "the copy holds %u "
		    "tokens", seq[0].n_tokens);
		e[0].seq = &copy;
		e[0].tokens = &tok[0];
		e[0].n_tokens = 1;
		e[0].logits = lcopy;
		e[1].seq = &seq[0];
		e[1].tokens = &tok[0];
		e[1].n_tokens = 1;
		e[1].logits = ladd;
		if (ok(run_batch(gpu, e, 2) == 0, "decode the copy and the "
		    "original"))
			near(maxdiff(lcopy, ladd, MAXV), 0.0, 1e-5, "the "
			    "copy's logits equal the original's (max diff %.3g)",
			    maxdiff(lcopy, ladd, MAXV));
	} else {
		diag("%s", cause);
		free(cause);
	}
out:
	for (s = 0; s < 3; s++) {
		kv_seq_release(gpu->pool, &seq[s]);
		free(lg[s]);
		free(ref[s]);
	}
	kv_seq_release(gpu->pool, &copy);
	is_int(kv_pool_used_blocks(gpu->pool), 0, "all gpu blocks back");
}

/*
 * A model of another weight type, made by phased-synth: a prompt and
 * teacher-forced decode steps (both backends fed the CPU's tokens) must
 * give logits within tol times their size, and the same argmax wherever
 * the CPU's top two logits are further apart than that.
 */
static void
synth_one(const char *synth, const char *shared, const char *tmp,
    const char *shape, const char *type, double tol, int n_dev, int layers)
{
	struct model_opts	 o = { .n_threads = 2 };
	struct backend_config	 cfg;
	struct run		 gpu, cpu;
	struct model		*m;
	struct kv_seq		 sg, sc;
	struct fwd_entry	 e;
	int32_t			 prompt[SYNTH_PROMPT], t;
	float			*lg, *lc;
	char			 cmd[8192], out[2600], *cause = NULL;
	double			 d, big, worst = 0.0, second;
	int			 s, nv, devs[8], agree = 1, good = 1, j;
	char			 what[64];

	for (j = 0; j < n_dev; j++)
		devs[j] = j;
	snprintf(what, sizeof what, "%s %s on %d device%s", shape, type, n_dev,
	    n_dev > 1 ? "s" : "");
	/* Longer than the small-batch limit: the prompt takes the GEMM path. */
	prompt[0] = 1;
	for (j = 1; j < SYNTH_PROMPT; j++)
		prompt[j] = 3 + (j * 37) % 500;
	snprintf(out, sizeof out, "%s/synth-%s-%s.gguf", tmp, shape, type);
	snprintf(cmd, sizeof cmd, "'%s' --shape %s --type %s --layers %d "
	    "--vocab '%s/models/stories260K.gguf' -o '%s' >/dev/null 2>&1",
	    synth, shape, type, layers, shared, out);
	if (!ok(system(cmd) == 0, "phased-synth %s %s", shape, type))
		return;
	m = model_load(out, &o, NULL, NULL, &cause);
	unlink(out);
	if (!ok(m != NULL, "%s %s loads", shape, type)) {
		diag("%s", STR(cause));
		free(cause);
		return;
	}
	nv = model_info(m)->n_vocab;
	memset(&cfg, 0, sizeof cfg);
	cfg.devices = devs;
	cfg.n_devices = n_dev;
	if (!ok(run_start(&gpu, &backend_cuda_ops, m, &cfg, 8) == 0,
	    "%s: cuda instance", what)) {
		model_free(m);
		return;
	}
	if (run_start(&cpu, &backend_cpu_ops, m, NULL, 8) != 0) {
		run_stop(&gpu);
		model_free(m);
		return;
	}
	lg = calloc(nv, sizeof *lg);
	lc = calloc(nv, sizeof *lc);
	if (lg == NULL || lc == NULL)
		abort();
	memset(&sg, 0, sizeof sg);
	memset(&sc, 0, sizeof sc);
	e.tokens = prompt;
	e.n_tokens = SYNTH_PROMPT;
	for (s = 0; s < 9 && good; s++) {
		e.seq = &sg;
		e.logits = lg;
		good &= run_batch(&gpu, &e, 1) == 0;
		e.seq = &sc;
		e.logits = lc;
		good &= run_batch(&cpu, &e, 1) == 0;
		if (!good)
			break;
		big = 1.0;
		for (j = 0; j < nv; j++)
			big = fabs(lc[j]) > big ? fabs(lc[j]) : big;
		d = maxdiff(lg, lc, nv) / big;
		if (!(d <= worst))
			worst = d;
		t = argmax(lc, nv);
		second = -INFINITY;
		for (j = 0; j < nv; j++) {
			if (j != t && lc[j] > second)
				second = lc[j];
		}
		if (lc[t] - second > 2 * tol * big)
			agree &= argmax(lg, nv) == t;
		e.tokens = &t;
		e.n_tokens = 1;
	}
	ok(good, "%s: prompt and 8 decode steps run", what);
	near(worst, 0.0, tol, "%s: logits within %g of their size "
	    "(max %.3g)", what, tol, worst);
	ok(agree, "%s: same argmax wherever it is clear", what);
	kv_seq_release(gpu.pool, &sg);
	kv_seq_release(cpu.pool, &sc);
	free(lg);
	free(lc);
	run_stop(&gpu);
	run_stop(&cpu);
	model_free(m);
}

/*
 * A split that would cut quantization blocks is refused at create: tiny256
 * Q4_K on two devices gives the attention output rows of 128, half a
 * block.
 */
static void
synth_refused(const char *synth, const char *shared, const char *tmp)
{
	struct model_opts	 o = { .n_threads = 1 };
	struct backend_config	 cfg;
	struct backend_inst	*bi;
	struct model		*m;
	int			 devs[2] = { 0, 1 };
	char			 cmd[8192], out[2600], *cause = NULL;

	snprintf(out, sizeof out, "%s/synth-split.gguf", tmp);
	snprintf(cmd, sizeof cmd, "'%s' --shape tiny256 --type Q4_K --layers 1 "
	    "--vocab '%s/models/stories260K.gguf' -o '%s' >/dev/null 2>&1",
	    synth, shared, out);
	if (system(cmd) != 0 ||
	    (m = model_load(out, &o, NULL, NULL, &cause)) == NULL) {
		ok(0, "tiny256 Q4_K for the split refusal (%s)", STR(cause));
		free(cause);
		unlink(out);
		return;
	}
	unlink(out);
	memset(&cfg, 0, sizeof cfg);
	cfg.devices = devs;
	cfg.n_devices = 2;
	bi = backend_cuda_ops.create(m, &cfg, &cause);
	ok(bi == NULL && cause != NULL && strstr(cause, "'blk.0.attn_output."
	    "weight': rows of 256 split 2 ways are not whole Q4_K blocks of "
	    "256") != NULL, "a split inside Q4_K blocks is refused (%s)",
	    STR(cause));
	if (bi != NULL)
		backend_cuda_ops.destroy(bi);
	free(cause);
	model_free(m);
}

/* Models of every weight type the kernels take, if phased-synth is built. */
static void
test_synth(const char *shared)
{
	static const struct {
		const char	*shape, *type;
		double		 tol;
		int		 n_dev, layers;
	} t[] = {
		/* F16/BF16 products round the activations to the weight type. */
		{ "stories260K", "F16", 5e-3, 1, 2 },
		{ "stories260K", "BF16", 1e-2, 1, 2 },
		/* The CPU's quantized products differ more (about 1e-2). */
		{ "stories260K", "Q8_0", 3e-2, 1, 2 },
		{ "stories260K", "Q4_0", 3e-2, 1, 2 },
		/* Rows of 256: whole K-quant blocks. */
		{ "tiny256", "Q4_K", 4e-2, 1, 2 },
		{ "tiny256", "Q6_K", 4e-2, 1, 2 },
		/* Tensor-parallel: row slices of 128 and 384, whole Q8_0 blocks. */
		{ "tiny256", "Q8_0", 3e-2, 2, 2 },
		/* The TinyLlama-1.1B shape (one of its 22 layers), 2 and 4 ways. */
		{ "tinyllama-1.1b", "F16", 5e-3, 2, 1 },
		{ "tinyllama-1.1b", "F16", 5e-3, 4, 1 },
	};
	const char	*bdir = getenv("top_builddir");
	char		 synth[1200], tmp[1200];
	size_t		 i;

	snprintf(synth, sizeof synth, "%s/phased-synth", bdir ? bdir : ".");
	if (access(synth, X_OK) != 0) {
		diag("no %s: other weight types not tested", synth);
		return;
	}
	snprintf(tmp, sizeof tmp, "%s/test-engine-cuda.XXXXXX",
	    getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(tmp) == NULL) {
		diag("mkdtemp %s failed: other weight types not tested", tmp);
		return;
	}
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		if (t[i].n_dev > 1 && (t[i].n_dev > cuda_device_count() ||
		    !cuda_comm_built())) {
			diag("%s %s on %d devices: too few devices or no nccl",
			    t[i].shape, t[i].type, t[i].n_dev);
			continue;
		}
		synth_one(synth, shared, tmp, t[i].shape, t[i].type, t[i].tol,
		    t[i].n_dev, t[i].layers);
	}
	if (cuda_device_count() >= 2 && cuda_comm_built())
		synth_refused(synth, shared, tmp);
	rmdir(tmp);
}

/* Bad calls fail with a cause and change nothing. */
static void
test_errors(const struct model *m, struct run *gpu, struct run *cpu)
{
	struct kv_seq		 seq;
	struct fwd_entry	 e;
	struct fwd_batch	 b = { &e, 1 };
	int32_t			 bad = MAXV, good = 1;
	char			*cause = NULL;
	int			 dev = 99, rc;
	struct backend_config	 cfg = { .devices = &dev, .n_devices = 1 };
	struct backend_inst	*bi;

	memset(&seq, 0, sizeof seq);
	kv_seq_reserve(gpu->pool, &seq, 1);
	e.seq = &seq;
	e.tokens = &bad;
	e.n_tokens = 1;
	e.logits = NULL;
	rc = gpu->ops->forward(gpu->bi, gpu->pool, &b, &cause);
	ok(rc == -1 && cause != NULL &&
	    strstr(cause, "token 512 out of range") != NULL,
	    "a token past the vocabulary is refused (%s)", STR(cause));
	free(cause);
	cause = NULL;
	e.tokens = &good;
	rc = gpu->ops->forward(gpu->bi, cpu->pool, &b, &cause);
	ok(rc == -1 && cause != NULL && strstr(cause, "cuda: kv pool") != NULL,
	    "a cpu pool is refused (%s)", STR(cause));
	free(cause);
	cause = NULL;
	is_int(seq.n_tokens, 0, "nothing stored after refusals");
	kv_seq_release(gpu->pool, &seq);
	bi = gpu->ops->create(m, &cfg, &cause);
	ok(bi == NULL && cause != NULL &&
	    strstr(cause, "cuda: device 99 out of range") != NULL,
	    "device 99 is refused (%s)", STR(cause));
	if (bi != NULL)
		gpu->ops->destroy(bi);
	free(cause);
}

/*
 * stories260K tensor-parallel on n emulated (or real) devices from first:
 * the golden continuation and the ragged batches against the cpu, as for
 * one device.  collectives: run one device through the NCCL path too.
 */
static void
test_tp(const struct model *m, struct run *cpu, const char *doc, int n,
    int first, int collectives)
{
	struct backend_config	 cfg;
	struct run		 tp;
	int			 devs[8], i;

	for (i = 0; i < n; i++)
		devs[i] = first + i;
	memset(&cfg, 0, sizeof cfg);
	cfg.devices = devs;
	cfg.n_devices = n;
	cfg.collectives = collectives;
	diag("tensor-parallel group of %d device%s%s", n, n > 1 ? "s" : "",
	    collectives ? " through nccl" : "");
	if (!ok(run_start(&tp, &backend_cuda_ops, m, &cfg, 64) == 0,
	    "cuda instance on %d device%s", n, n > 1 ? "s" : ""))
		return;
	test_greedy(&tp, cpu, doc);
	test_ragged(&tp, cpu, doc);
	run_stop(&tp);
}

/*
 * After a prefill that outgrows the activation buffers (they move), a
 * decode shape captured before is dropped, run plainly, captured again
 * and replayed, and its logits follow the cpu's: a stale graph would
 * write into freed memory (NaN in the emulation) and read NaN.
 */
static void
test_graph_moved(struct run *gr, struct run *cpu, const char *what)
{
	struct kv_seq		 sg, sc;
	struct fwd_entry	 e;
	int32_t			 prompt[100], tok;
	uint64_t		 c0, c1, r0, r1, d0;
	float			 lg[MAXV], lc[MAXV];
	double			 d, worst = 0.0;
	int			 i, good = 1, same = 1;

	memset(&sg, 0, sizeof sg);
	memset(&sc, 0, sizeof sc);
	prompt[0] = 1;
	for (i = 1; i < 100; i++)
		prompt[i] = 3 + (i * 41) % 500;
	backend_cuda_graph_counts(gr->bi, &c0, &r0);
	d0 = backend_cuda_graphs_dropped(gr->bi);
	/* 100 rows: more than the 64 the buffers hold until now. */
	e.tokens = prompt;
	e.n_tokens = 100;
	for (i = 0; i < 4 && good; i++) {
		e.seq = &sg;
		e.logits = lg;
		good &= run_batch(gr, &e, 1) == 0;
		e.seq = &sc;
		e.logits = lc;
		good &= run_batch(cpu, &e, 1) == 0;
		d = maxdiff(lg, lc, MAXV);
		if (!(d <= worst))
			worst = d;
		tok = argmax(lc, MAXV);
		same &= argmax(lg, MAXV) == tok;
		e.tokens = &tok;
		e.n_tokens = 1;
	}
	backend_cuda_graph_counts(gr->bi, &c1, &r1);
	ok(good, "%s: a 100-token prefill and 3 decode steps run", what);
	/* 101..103 positions: tables of 8 blocks, a shape captured before. */
	ok(backend_cuda_graphs_dropped(gr->bi) == d0 + 1 && c1 == c0 + 1 &&
	    r1 == r0 + 2, "%s: after the buffers moved the stale graph is "
	    "dropped, captured again and replayed (%llu dropped, %llu "
	    "captured, %llu replayed)", what, (unsigned long long)
	    (backend_cuda_graphs_dropped(gr->bi) - d0), (unsigned long long)
	    (c1 - c0), (unsigned long long)(r1 - r0));
	ok(same, "%s: the same greedy tokens as the cpu there", what);
	near(worst, 0.0, STEP_TOL, "%s: logits within %g of the cpu's "
	    "(max diff %.3g)", what, STEP_TOL, worst);
	kv_seq_release(gr->pool, &sg);
	kv_seq_release(cpu->pool, &sc);
}

/*
 * Decode iterations as CUDA graphs on n devices from 0 (collectives: one
 * device through the NCCL path; graphs: 1, or BACKEND_GRAPHS_AUTO): the
 * golden continuation token for token as without graphs and as on the
 * cpu, with graphs captured once per shape (one per rank) and replayed for
 * most of the 200 steps, their replacement after the buffers move, and
 * the ragged batches (whose decode of two sequences replays too).
 */
static void
test_graphs(const struct model *m, struct run *cpu, const char *doc, int n,
    int collectives, int graphs)
{
	struct backend_config	 cfg;
	struct run		 gr, off;
	uint64_t		 captured = 0, replayed = 0;
	double			 pt[16], gt[N_GREEDY + 8], d, worst = 0.0;
	int32_t			 prompt[16], tg[N_GREEDY], to[N_GREEDY];
	int32_t			 tc[N_GREEDY];
	float			*lg, *lo, *lc;
	int			 devs[8], i, np, golden = 1;
	char			 what[96];

	for (i = 0; i < n; i++)
		devs[i] = i;
	memset(&cfg, 0, sizeof cfg);
	cfg.devices = devs;
	cfg.n_devices = n;
	cfg.collectives = collectives;
	snprintf(what, sizeof what, "graphs on %d device%s%s", n,
	    n > 1 ? "s" : "", collectives ? " through nccl" : "");
	diag("decode as cuda graphs: %s%s", what, graphs ==
	    BACKEND_GRAPHS_AUTO ? " (by default)" : "");
	cfg.graphs = 0;
	if (!ok(run_start(&off, &backend_cuda_ops, m, &cfg, 64) == 0,
	    "%s: instance without graphs", what))
		return;
	cfg.graphs = graphs;
	if (!ok(run_start(&gr, &backend_cuda_ops, m, &cfg, 64) == 0,
	    "%s: instance", what)) {
		run_stop(&off);
		return;
	}
	np = json_numbers(doc, "prompt_tokens", pt, 16);
	for (i = 0; i < np && i < 16; i++)
		prompt[i] = (int32_t)pt[i];
	if (json_numbers(doc, "greedy_tokens", gt, N_GREEDY + 8) != N_GREEDY)
		golden = 0;
	lg = calloc((size_t)(N_GREEDY + 1) * MAXV, sizeof *lg);
	lo = calloc((size_t)(N_GREEDY + 1) * MAXV, sizeof *lo);
	lc = calloc((size_t)(N_GREEDY + 1) * MAXV, sizeof *lc);
	if (lg == NULL || lo == NULL || lc == NULL)
		abort();
	if (ok(greedy(&gr, prompt, np, N_GREEDY, tg, lg) == N_GREEDY &&
	    greedy(&off, prompt, np, N_GREEDY, to, lo) == N_GREEDY,
	    "%s: 200 greedy steps with and without", what)) {
		ok(memcmp(tg, to, sizeof tg) == 0, "%s: the same 200 greedy "
		    "tokens as without graphs", what);
		d = maxdiff(lg, lo, (N_GREEDY + 1) * MAXV);
		near(d, 0.0, 1e-5, "%s: every step's logits as without "
		    "(max diff %.3g)", what, d);
	}
	backend_cuda_graph_counts(gr.bi, &captured, &replayed);
	/* Block tables of 1, 2, 4, 8 and 16 blocks: 205 positions. */
	ok(captured == 5 && replayed >= 190, "%s: 5 decode graphs captured, "
	    "%llu replays (%llu captured)", what, (unsigned long long)replayed,
	    (unsigned long long)captured);
	backend_cuda_graph_counts(off.bi, &captured, &replayed);
	ok(captured == 0 && replayed == 0, "%s: none without graphs", what);
	/* The cpu's greedy tokens (the golden ones, checked in main). */
	if (greedy(cpu, prompt, np, N_GREEDY, tc, lc) == N_GREEDY) {
		ok(memcmp(tg, tc, sizeof tg) == 0, "%s: the same 200 greedy "
		    "tokens as the cpu", what);
		for (i = 0; i < N_GREEDY; i++)
			golden &= tg[i] == (int32_t)gt[i];
		ok(golden, "%s: they are the golden tokens", what);
		for (i = 0; i < N_GREEDY; i++) {
			d = maxdiff(lg + (size_t)i * MAXV, lc + (size_t)i * MAXV,
			    MAXV);
			if (!(d <= worst))
				worst = d;
		}
		near(worst, 0.0, STEP_TOL, "%s: every step's logits within %g "
		    "of the cpu's (max diff %.3g)", what, STEP_TOL, worst);
	} else
		ok(0, "%s: cpu reference", what);
	test_graph_moved(&gr, cpu, what);
	test_ragged(&gr, cpu, doc);
	free(lg);
	free(lo);
	free(lc);
	run_stop(&gr);
	run_stop(&off);
}

/* The emulation's hook to spoil the next capture; absent on a GPU. */
extern void	emu_spoil_next_capture(void) __attribute__((weak));

/*
 * A capture that fails (here the first rank's of a 2-device group, spoilt
 * by the emulation) turns graphs off for the instance: every iteration
 * still runs, plainly, with the cpu's tokens, and none is captured later.
 */
static void
test_graph_fallback(const struct model *m, struct run *cpu)
{
	struct backend_config	 cfg;
	struct run		 gr;
	uint64_t		 captured = 0, replayed = 0;
	int32_t			 bos = 1, tg[8], tc[8];
	float			*lg, *lc;
	int			 devs[2] = { 0, 1 };

	if (emu_spoil_next_capture == NULL) {
		diag("not the emulation: failed captures not tested");
		return;
	}
	memset(&cfg, 0, sizeof cfg);
	cfg.devices = devs;
	cfg.n_devices = 2;
	cfg.graphs = 1;
	if (!ok(run_start(&gr, &backend_cuda_ops, m, &cfg, 16) == 0,
	    "2 devices, a capture that fails: instance"))
		return;
	lg = calloc(9 * MAXV, sizeof *lg);
	lc = calloc(9 * MAXV, sizeof *lc);
	if (lg == NULL || lc == NULL)
		abort();
	emu_spoil_next_capture();
	ok(greedy(&gr, &bos, 1, 8, tg, lg) == 8 &&
	    greedy(cpu, &bos, 1, 8, tc, lc) == 8 &&
	    memcmp(tg, tc, sizeof tg) == 0, "a failed capture: 8 greedy steps "
	    "still run, with the cpu's tokens");
	backend_cuda_graph_counts(gr.bi, &captured, &replayed);
	ok(captured == 0 && replayed == 0, "a failed capture turns graphs off "
	    "(%llu captured, %llu replayed)", (unsigned long long)captured,
	    (unsigned long long)replayed);
	free(lg);
	free(lc);
	run_stop(&gr);
}

/*
 * By default (BACKEND_GRAPHS_AUTO) a group of several devices decodes
 * without graphs: a few steps capture none.
 */
static void
test_graphs_default_tp(const struct model *m)
{
	struct backend_config	 cfg;
	struct run		 tp;
	uint64_t		 captured = 0, replayed = 0;
	int32_t			 bos = 1, tok[8];
	float			*lg;
	int			 devs[2] = { 0, 1 };

	memset(&cfg, 0, sizeof cfg);
	cfg.devices = devs;
	cfg.n_devices = 2;
	cfg.graphs = BACKEND_GRAPHS_AUTO;
	if (!ok(run_start(&tp, &backend_cuda_ops, m, &cfg, 16) == 0,
	    "2 devices, graphs by default: instance"))
		return;
	lg = calloc(9 * MAXV, sizeof *lg);
	if (lg == NULL)
		abort();
	ok(greedy(&tp, &bos, 1, 8, tok, lg) == 8, "2 devices by default: 8 "
	    "greedy steps");
	backend_cuda_graph_counts(tp.bi, &captured, &replayed);
	ok(captured == 0 && replayed == 0, "2 devices by default: no graph "
	    "(%llu captured)", (unsigned long long)captured);
	free(lg);
	run_stop(&tp);
}

/*
 * KV moved between two groups of two devices (prefill on 0-1, decode on
 * 2-3) continues exactly as it would have in place; groups of other sizes
 * are refused; a group that does not divide the heads is refused.
 */
static void
test_tp_copy(const struct model *m)
{
	struct backend_config	 cfg;
	struct run		 a, b, one, over;
	struct kv_seq		 sa, sb, sc, so;
	int			 dov[2] = { 1, 2 };
	uint64_t		 nccl = 0, peer = 0;
	struct fwd_entry	 e;
	int32_t			 prompt[20], tok = 42;
	int			 da[2] = { 0, 1 }, db[2] = { 2, 3 }, d3[3] = { 0, 1, 2 };
	int			 i, d0 = 0;
	float			 la[MAXV], lb[MAXV];
	char			*cause = NULL;
	struct backend_inst	*bi;

	memset(&sa, 0, sizeof sa);
	memset(&sb, 0, sizeof sb);
	memset(&sc, 0, sizeof sc);
	memset(&so, 0, sizeof so);
	memset(&cfg, 0, sizeof cfg);
	cfg.n_devices = 2;
	cfg.devices = da;
	if (run_start(&a, &backend_cuda_ops, m, &cfg, 16) != 0) {
		ok(0, "group on devices 0-1");
		return;
	}
	cfg.devices = db;
	if (run_start(&b, &backend_cuda_ops, m, &cfg, 16) != 0) {
		ok(0, "group on devices 2-3");
		run_stop(&a);
		return;
	}
	prompt[0] = 1;
	for (i = 1; i < 20; i++)
		prompt[i] = 3 + (i * 29) % 500;
	e.seq = &sa;
	e.tokens = prompt;
	e.n_tokens = 20;
	e.logits = la;
	ok(run_batch(&a, &e, 1) == 0, "prefill of 20 tokens on devices 0-1");
	ok(a.ops->kv_copy(b.bi, b.pool, &sb, a.bi, a.pool, &sa, &cause) == 0,
	    "kv moved from group 0-1 to group 2-3 (%s)", STR(cause));
	free(cause);
	cause = NULL;
	e.tokens = &tok;
	e.n_tokens = 1;
	e.seq = &sa;
	e.logits = la;
	run_batch(&a, &e, 1);
	e.seq = &sb;
	e.logits = lb;
	if (ok(run_batch(&b, &e, 1) == 0, "decode on group 2-3"))
		near(maxdiff(la, lb, MAXV), 0.0, 1e-6, "its logits equal "
		    "those in place (max diff %.3g)", maxdiff(la, lb, MAXV));
	backend_cuda_kv_transfers(b.bi, &nccl, &peer);
	ok(nccl == 1 && peer == 0, "the move went by nccl send and receive "
	    "(%llu by nccl, %llu by peer copies)", (unsigned long long)nccl,
	    (unsigned long long)peer);

	/* Groups sharing device 1 cannot form one clique: peer copies. */
	cfg.devices = dov;
	if (run_start(&over, &backend_cuda_ops, m, &cfg, 16) == 0) {
		ok(a.ops->kv_copy(over.bi, over.pool, &so, a.bi, a.pool, &sa,
		    &cause) == 0, "kv moved from group 0-1 to group 1-2 (%s)",
		    STR(cause));
		free(cause);
		cause = NULL;
		e.seq = &so;
		e.logits = lb;
		tok = 7;
		if (ok(run_batch(&over, &e, 1) == 0, "decode on group 1-2")) {
			e.seq = &sa;
			e.logits = la;
			run_batch(&a, &e, 1);
			near(maxdiff(la, lb, MAXV), 0.0, 1e-6, "its logits equal "
			    "those in place (max diff %.3g)",
			    maxdiff(la, lb, MAXV));
		}
		backend_cuda_kv_transfers(over.bi, &nccl, &peer);
		ok(nccl == 0 && peer == 1, "that move went by peer copies "
		    "(%llu by nccl, %llu by peer copies)",
		    (unsigned long long)nccl, (unsigned long long)peer);
		kv_seq_release(over.pool, &so);
		run_stop(&over);
	} else
		ok(0, "group on devices 1-2");
	cfg.n_devices = 2;

	cfg.devices = &d0;
	cfg.n_devices = 1;
	if (run_start(&one, &backend_cuda_ops, m, &cfg, 16) == 0) {
		ok(one.ops->kv_copy(one.bi, one.pool, &sc, a.bi, a.pool, &sa,
		    &cause) == -1 && cause != NULL && strstr(cause, "from a "
		    "group of 2 devices to one of 1") != NULL, "kv copy from 2 "
		    "devices to 1 is refused (%s)", STR(cause));
		is_int(kv_pool_used_blocks(one.pool), 0, "no block taken by "
		    "the refused copy");
		free(cause);
		cause = NULL;
		run_stop(&one);
	}
	kv_seq_release(a.pool, &sa);
	kv_seq_release(b.pool, &sb);
	run_stop(&a);
	run_stop(&b);

	cfg.devices = d3;
	cfg.n_devices = 3;
	bi = backend_cuda_ops.create(m, &cfg, &cause);
	ok(bi == NULL && cause != NULL && strstr(cause, "a group of 3 devices "
	    "must divide the model's 8 attention heads and 4 kv heads") != NULL,
	    "3 devices are refused (%s)", STR(cause));
	if (bi != NULL)
		backend_cuda_ops.destroy(bi);
	free(cause);
	cause = NULL;
	cfg.devices = da;
	da[1] = 0;
	bi = backend_cuda_ops.create(m, &cfg, &cause);
	ok(bi == NULL && cause != NULL && strstr(cause, "device 0 listed "
	    "twice") != NULL, "a device listed twice is refused (%s)",
	    STR(cause));
	if (bi != NULL)
		backend_cuda_ops.destroy(bi);
	free(cause);
}

/*
 * The emulation's switch for streams that hold their work until waited
 * for (tests/gpu/emu); absent on a real device, where work finishes when
 * it does and only the results are checked.
 */
void	emu_streams_defer(int) __attribute__((weak));
#define DEFERRED	(emu_streams_defer != NULL)

/* Poll a transfer until it ends; 1 when done. */
static int
xfer_end(struct kv_xfer *x)
{
	char	*cause = NULL;
	int	 rc;

	if ((rc = backend_cuda_ops.kv_xfer_poll(x, 0, &cause)) == 0)
		rc = backend_cuda_ops.kv_xfer_poll(x, 1, &cause);
	if (rc != 1)
		diag("kv transfer: %s", STR(cause));
	free(cause);
	return (rc);
}

/*
 * One transfer beside compute from a to dst: prefill on a, start the move,
 * prefill and decode another copy of the prompt on a while the move is
 * still pending (the emulation's streams hold it), decode the moved
 * sequence on dst, which must wait for the data on the device.  Each
 * round its own prompt (seed), so that blocks of an earlier round that
 * are handed out again do not already hold the content.
 */
static void
async_round(struct run *a, struct run *dst, int seed, const char *what)
{
	struct kv_seq		 sa, sb, sr;
	struct fwd_entry	 e;
	struct kv_xfer		*x = NULL;
	int32_t			 prompt[40], tok = 42;
	float			 la[MAXV], lb[MAXV];
	char			*cause = NULL;
	int			 i;

	memset(&sa, 0, sizeof sa);
	memset(&sb, 0, sizeof sb);
	memset(&sr, 0, sizeof sr);
	prompt[0] = 1;
	for (i = 1; i < 40; i++)
		prompt[i] = 3 + (i * 31 + seed * 7) % 500;
	e.seq = &sa;
	e.tokens = prompt;
	e.n_tokens = 40;
	e.logits = la;
	if (!ok(run_batch(a, &e, 1) == 0, "%s: prefill of 40 tokens", what))
		return;
	if (!ok(backend_cuda_ops.kv_copy_start(dst->bi, dst->pool, &sb, a->bi,
	    a->pool, &sa, &x, &cause) == 0 && x != NULL, "%s: transfer "
	    "started (%s)", what, STR(cause))) {
		free(cause);
		kv_seq_release(a->pool, &sa);
		return;
	}
	ok(sb.n_tokens == 40 && sb.n_blocks == kv_pool_blocks_for(dst->pool,
	    40), "%s: the destination holds 40 tokens in %u blocks at once",
	    what, sb.n_blocks);
	if (DEFERRED)
		is_int(backend_cuda_ops.kv_xfer_poll(x, 0, &cause), 0,
		    "%s: still moving when the call returned", what);
	/* The source computes other work meanwhile. */
	e.seq = &sr;
	e.tokens = prompt;
	e.n_tokens = 40;
	run_batch(a, &e, 1);
	e.tokens = &tok;
	e.n_tokens = 1;
	ok(run_batch(a, &e, 1) == 0, "%s: the source prefilled and decoded "
	    "another sequence meanwhile", what);
	if (DEFERRED)
		is_int(backend_cuda_ops.kv_xfer_poll(x, 0, &cause), 0,
		    "%s: the transfer did not wait for the source's compute",
		    what);
	e.seq = &sb;
	e.logits = lb;
	if (ok(run_batch(dst, &e, 1) == 0, "%s: decode of the moved sequence",
	    what))
		near(maxdiff(la, lb, MAXV), 0.0, 1e-6, "%s: its logits equal "
		    "those of the copy left in place (max diff %.3g)", what,
		    maxdiff(la, lb, MAXV));
	ok(xfer_end(x) == 1, "%s: the transfer ended", what);
	kv_seq_release(a->pool, &sa);
	kv_seq_release(a->pool, &sr);
	kv_seq_release(dst->pool, &sb);
	is_int(kv_pool_used_blocks(a->pool), 0, "%s: every source block "
	    "back in its pool", what);
	is_int(kv_pool_used_blocks(dst->pool), 0, "%s: every destination "
	    "block back in its pool", what);
}

/*
 * What holding the source's blocks until the end prevents: with streams
 * that hold their work, blocks released and refilled while the transfer
 * is pending reach the destination with the new content.
 */
static void
async_reuse(struct run *a, struct run *dst)
{
	struct kv_seq		 sa, sb, sz;
	struct fwd_entry	 e;
	struct kv_xfer		*x = NULL;
	int32_t			 prompt[40], other[40], tok = 42;
	float			 la[MAXV], lb[MAXV];
	uint32_t		 first;
	char			*cause = NULL;
	int			 i;

	memset(&sa, 0, sizeof sa);
	memset(&sb, 0, sizeof sb);
	memset(&sz, 0, sizeof sz);
	prompt[0] = other[0] = 1;
	for (i = 1; i < 40; i++) {
		prompt[i] = 3 + (i * 31) % 500;
		other[i] = 5 + (i * 17) % 500;
	}
	/* The reference: the prompt and one step, moved and waited for. */
	e.seq = &sa;
	e.tokens = prompt;
	e.n_tokens = 40;
	e.logits = la;
	run_batch(a, &e, 1);
	if (!ok(backend_cuda_ops.kv_copy_start(dst->bi, dst->pool, &sb, a->bi,
	    a->pool, &sa, &x, &cause) == 0 && x != NULL, "early reuse: "
	    "transfer started (%s)", STR(cause))) {
		free(cause);
		kv_seq_release(a->pool, &sa);
		return;
	}
	first = sa.blocks[0];
	kv_seq_release(a->pool, &sa);
	e.seq = &sz;
	e.tokens = other;
	run_batch(a, &e, 1);
	ok(sz.blocks[0] == first, "early reuse: the released block %u went "
	    "to another sequence", first);
	e.seq = &sb;
	e.tokens = &tok;
	e.n_tokens = 1;
	e.logits = lb;
	memset(&sa, 0, sizeof sa);
	run_batch(dst, &e, 1);
	xfer_end(x);
	/* What the moved sequence should have given. */
	e.seq = &sa;
	e.tokens = prompt;
	e.n_tokens = 40;
	e.logits = la;
	run_batch(a, &e, 1);
	e.tokens = &tok;
	e.n_tokens = 1;
	run_batch(a, &e, 1);
	ok(maxdiff(la, lb, MAXV) > 1e-2, "early reuse: the destination got "
	    "the new content (max diff %.3g): the held blocks are needed",
	    maxdiff(la, lb, MAXV));
	kv_seq_release(a->pool, &sa);
	kv_seq_release(a->pool, &sz);
	kv_seq_release(dst->pool, &sb);
}

/* A move into a pool without room is refused and takes nothing. */
static void
async_full(struct run *a, struct run *dst)
{
	struct kv_seq		 sa, sb, fill;
	struct fwd_entry	 e;
	struct kv_xfer		*x = NULL;
	int32_t			 prompt[40];
	float			 la[MAXV];
	uint32_t		 used;
	char			*cause = NULL;
	int			 i, rc;

	memset(&sa, 0, sizeof sa);
	memset(&sb, 0, sizeof sb);
	memset(&fill, 0, sizeof fill);
	for (i = 0; i < 40; i++)
		prompt[i] = 1 + i;
	e.seq = &sa;
	e.tokens = prompt;
	e.n_tokens = 40;
	e.logits = la;
	run_batch(a, &e, 1);
	kv_seq_reserve(dst->pool, &fill, (dst->pool->n_blocks - 1) *
	    dst->pool->layout.block_size);
	used = kv_pool_used_blocks(a->pool);
	rc = backend_cuda_ops.kv_copy_start(dst->bi, dst->pool, &sb, a->bi,
	    a->pool, &sa, &x, &cause);
	ok(rc == -1 && x == NULL && cause != NULL && strstr(cause, "kv copy of 3 blocks: pool has 1 free") != NULL,
	    "a move of 3 blocks into a pool with 1 free is refused (%s)",
	    STR(cause));
	ok(sb.n_blocks == 0 && sb.n_tokens == 0 &&
	    kv_pool_used_blocks(dst->pool) == dst->pool->n_blocks - 1 &&
	    kv_pool_used_blocks(a->pool) == used && sa.n_tokens == 40,
	    "the refused move took no block and left the source as it was");
	free(cause);
	kv_seq_release(a->pool, &sa);
	kv_seq_release(dst->pool, &fill);
}

/*
 * KV transfers beside compute (kv_copy_start, kv_xfer_poll) on streams
 * that hold their work until it is waited for: by NCCL between groups 0-1
 * and 2-3, by peer copies into group 1-2, and within one instance.
 */
static void
test_async_copy(const struct model *m)
{
	struct backend_config	 cfg;
	struct run		 a, b, over;
	int			 da[2] = { 0, 1 }, db[2] = { 2, 3 };
	int			 dov[2] = { 1, 2 };
	uint64_t		 nccl = 0, peer = 0;

	if (DEFERRED)
		emu_streams_defer(1);
	memset(&cfg, 0, sizeof cfg);
	cfg.n_devices = 2;
	cfg.devices = da;
	if (run_start(&a, &backend_cuda_ops, m, &cfg, 16) == 0) {
		cfg.devices = db;
		if (run_start(&b, &backend_cuda_ops, m, &cfg, 16) == 0) {
			async_round(&a, &b, 1, "nccl 0-1 to 2-3");
			backend_cuda_kv_transfers(b.bi, &nccl, &peer);
			ok(nccl == 1 && peer == 0, "that move went by nccl "
			    "(%llu by nccl, %llu by peer copies)",
			    (unsigned long long)nccl, (unsigned long long)peer);
			if (DEFERRED)
				async_reuse(&a, &b);
			async_full(&a, &b);
			run_stop(&b);
		} else
			ok(0, "group on devices 2-3");
		cfg.devices = dov;
		if (run_start(&over, &backend_cuda_ops, m, &cfg, 16) == 0) {
			async_round(&a, &over, 2, "peer copies 0-1 to 1-2");
			backend_cuda_kv_transfers(over.bi, &nccl, &peer);
			ok(nccl == 0 && peer == 1, "that move went by peer "
			    "copies (%llu by nccl, %llu by peer copies)",
			    (unsigned long long)nccl, (unsigned long long)peer);
			run_stop(&over);
		} else
			ok(0, "group on devices 1-2");
		async_round(&a, &a, 3, "within group 0-1");
		run_stop(&a);
	} else
		ok(0, "group on devices 0-1");
	if (DEFERRED)
		emu_streams_defer(0);
}

/* Architectures the device kernels lack are refused at create, by name. */
static void
test_refused_arch(const char *shared)
{
	static const char	*names[] = { "qwen2", "gemma2", "mistral-hd",
				    "llama3" };
	static const char	*want[] = { "qwen2 model needs its own",
				    "gemma2 model needs its own",
				    "attention.key_length",
				    "rope frequency factors" };
	struct model_opts	 o = { .n_threads = 1 };
	struct backend_config	 cfg;
	struct backend_inst	*bi;
	struct model		*m;
	char			 path[1200], *cause = NULL;
	int			 dev = 0;
	size_t			 i;

	memset(&cfg, 0, sizeof cfg);
	cfg.devices = &dev;
	cfg.n_devices = 1;
	cfg.n_threads = 0;
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(path, sizeof path, "%s/models/arch/%s.gguf", shared,
		    names[i]);
		if ((m = model_load(path, &o, NULL, NULL, &cause)) == NULL) {
			diag("%s: %s", path, cause);
			free(cause);
			cause = NULL;
			continue;
		}
		bi = backend_cuda_ops.create(m, &cfg, &cause);
		ok(bi == NULL && cause != NULL &&
		    strstr(cause, want[i]) != NULL, "cuda refuses %s (%s)",
		    names[i], STR(cause));
		if (bi != NULL)
			backend_cuda_ops.destroy(bi);
		free(cause);
		cause = NULL;
		model_free(m);
	}
}

int
main(void)
{
	struct model_opts	 o;
	struct model		*m;
	struct run		 gpu, cpu;
	struct backend_config	 cfg;
	char			 shared[1024], path[1200], *doc, *cause = NULL;
	int			 dev = 0;

	if (cuda_device_count() < 1)
		skip_all("no CUDA device");
	snprintf(shared, sizeof shared, "%s", shared_dir());
	snprintf(path, sizeof path, "%s/golden/stories260K-once-upon-a-time.json",
	    shared);
	if ((doc = slurp(path, NULL)) == NULL)
		skip_all("no %s", path);

	memset(&o, 0, sizeof o);
	o.n_threads = 2;
	o.ctx = 256;
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
	m = model_load(path, &o, NULL, NULL, &cause);
	if (m == NULL)
		skip_all("cannot load %s: %s", path, cause);
	is_int(model_info(m)->n_vocab, MAXV, "stories260K: 512 tokens");

	memset(&cfg, 0, sizeof cfg);	/* no graphs: the plain path */
	cfg.devices = &dev;
	cfg.n_devices = 1;
	cfg.n_threads = 0;
	if (!ok(run_start(&gpu, &backend_cuda_ops, m, &cfg, 64) == 0,
	    "cuda instance on device 0 with 64 blocks") ||
	    !ok(run_start(&cpu, &backend_cpu_ops, m, NULL, 64) == 0,
	    "cpu instance with 64 blocks")) {
		run_stop(&gpu);
		model_free(m);
		free(doc);
		done_testing();
	}

	test_greedy(&gpu, &cpu, doc);
	test_ragged(&gpu, &cpu, doc);
	test_errors(m, &gpu, &cpu);
	test_graphs(m, &cpu, doc, 1, 0, 1);
	/* One device through the tensor-parallel (NCCL) code path. */
	if (cuda_comm_built()) {
		test_tp(m, &cpu, doc, 1, 0, 1);
		test_graphs(m, &cpu, doc, 1, 1, BACKEND_GRAPHS_AUTO);
	} else
		diag("no nccl: the collectives path is not tested");
	if (cuda_device_count() >= 4 && cuda_comm_built()) {
		test_tp(m, &cpu, doc, 2, 0, 0);
		test_tp(m, &cpu, doc, 4, 0, 0);
		test_graphs(m, &cpu, doc, 2, 0, 1);
		test_graphs(m, &cpu, doc, 4, 0, 1);
		test_graphs_default_tp(m);
		test_graph_fallback(m, &cpu);
		test_tp_copy(m);
		test_async_copy(m);
	} else
		diag("fewer than 4 devices or no nccl: tensor parallelism "
		    "not tested");
	test_synth(shared);
	test_refused_arch(shared);

	run_stop(&gpu);
	run_stop(&cpu);
	model_free(m);
	free(doc);
	done_testing();
}
