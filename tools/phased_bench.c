/*
 * bench.c: phased-bench, the offline throughput benchmark.
 *
 * Runs the model in process on the CPU backend, as the daemon's engine
 * would, without a socket: prompt processing (one forward pass of N tokens
 * on a fresh KV cache) and generation (B sequences each decoding one token
 * per forward pass after a short prefill), each repeated and reported as a
 * median with its spread.  It also states where the memory goes (mapped
 * model, KV pool, the rest) and the decode roofline: the weight bytes one
 * decode step must read, divided by the memory bandwidth.  On the CPU that
 * bandwidth is measured by reading those weights alone on the same threads,
 * and again before each generation run, so that each run's share of the
 * memory's pace comes from the same moment of a machine whose speed drifts.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gguf.h"
#include "kvcache.h"
#include "model.h"
#include "amx.h"
#include "quant.h"
#include "util.h"

#define PB_MAX_LIST	16
#define PB_GEN_PREFILL	16	/* prompt tokens before a generation test */
#define PB_MAX_TOKENS	65536
#define PB_READ_PASSES	5	/* reads of the weights per probe, best kept */

static const char pb_usage[] = "usage: phased-bench -m MODEL.gguf "
    "[-p N[,N...]] [-n N] [-b B[,B...]] [-d DEPTH] [-r REPS] [-t THREADS]\n"
    "\t[--bw GBPS] [--bf16 | --exact] [--no-repack] [--no-amx] [--isa NAME]\n"
    "\t[--json] [--backend NAME] [--devices N[,N...]] [--collectives]\n"
    "\t[--graphs | --no-graphs]";

/* How F16/BF16 weights are computed, by QUANT_BF16_DOT_* value. */
static const char *const pb_math[] = {
	"exact (f32 activations)",
	"F16 and BF16 through bf16 dot products (activations rounded to bf16)",
	"BF16, and F16 of bf16 values, through bf16 dot products (activations "
	    "rounded to bf16), other F16 exact",
};
/* The same under the default where F16 takes 16-bit integer products. */
static const char *const pb_math_i16[] = {
	"F16 and BF16 through 16-bit integer dot products (weights and "
	    "activations to 13 bits of their block's largest)",
	"",
	"BF16, and F16 of bf16 values, through bf16 dot products (activations "
	    "rounded to bf16), other F16 through 16-bit integer dot products "
	    "(weights and activations to 13 bits of their block's largest)",
};
static const char *const pb_dot_name[] = { "none", "all", "bf16" };

struct pb_opts {
	const char	*model;
	int		 pp[PB_MAX_LIST];
	int		 n_pp;
	int		 n_gen;
	int		 depth;		/* tokens in the KV before each test */
	int		 batch[PB_MAX_LIST];
	int		 n_batch;
	int		 reps;
	int		 threads;
	double		 bw_gbps;
	int		 bw_given;	/* --bw: no measured roofline */
	int		 json;
	int		 bf16;		/* QUANT_BF16_DOT_*, -1: as the daemon */
	const char	*backend;	/* "cpu" (default) or "cuda" */
	int		 devices[PB_MAX_LIST];	/* gpu ids of the group */
	int		 n_devices;
	int		 collectives;	/* NCCL even for one GPU */
	int		 graphs;	/* decode as CUDA graphs: 1, 0, AUTO */
	int		 no_repack;	/* keep every weight in the mapped file */
	int		 no_amx;	/* keep large batches off the AMX tiles */
	int		 isa;		/* QUANT_ISA_*, QUANT_ISA_AUTO: the best */
};

/* One test's samples and summary, in tokens/s. */
struct pb_result {
	const char	*test;		/* "pp" or "tg" */
	int		 n_tokens;	/* prompt length or tokens generated */
	int		 batch;		/* sequences */
	int		 depth;		/* tokens before the test */
	double		 samples[64];
	int		 n;
	double		 median, min, max, mean, stddev;
	double		 share[64];	/* read time x steps/s, per sample */
	int		 n_share;
};

/* The state shared by the tests. */
struct pb {
	struct pb_opts		*o;
	const struct backend_ops *be;
	struct backend_inst	*bi;
	struct model		*m;
	struct kv_pool		*pool;
	uint32_t		 n_blocks;
	int32_t			*tokens;	/* prompt ids */
	float			*logits;
	uint64_t		 gen_rss_kb;	/* VmRSS during generation */
	uint64_t		 read_bytes;	/* what a read probe reads */
};

/* Print a usage or setup error and exit. */
static void __attribute__((noreturn, format(printf, 1, 2)))
pb_die(const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "phased-bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

/* Parse a comma-separated list of integers in [min, max]. */
static int
pb_list(const char *opt, const char *v, int min, int max, int *out)
{
	char		*s, *p, *tok, *cause = NULL;
	long long	 n;
	int		 k = 0;

	s = p = xstrdup(v);
	while ((tok = strsep(&p, ",")) != NULL) {
		if (k == PB_MAX_LIST)
			pb_die("%s: more than %d values", opt, PB_MAX_LIST);
		if (parse_int(tok, min, max, &n, opt, &cause) != 0)
			pb_die("%s", cause);
		out[k++] = (int)n;
	}
	free(s);
	return (k);
}

/* Force the kernels' variant named by --isa, or exit. */
static int
pb_isa(const char *name)
{
	int	isa = quant_isa_by_name(name);

	if (isa < 0)
		pb_die("--isa %s: unknown (scalar, avx2 or avx512)", name);
	if (quant_force_isa(isa) != 0)
		pb_die("--isa %s: not supported by this CPU", name);
	return (isa);
}

/* Parse the command line. */
static void
pb_parse(int argc, char **argv, struct pb_opts *o)
{
	const char	*a;
	char		*cause = NULL;
	long long	 n;
	int		 i;

	memset(o, 0, sizeof *o);
	o->pp[0] = 512;
	o->n_pp = 1;
	o->n_gen = 128;
	o->batch[0] = 1;
	o->batch[1] = 4;
	o->batch[2] = 16;
	o->batch[3] = 64;
	o->n_batch = 4;
	o->reps = 5;
	o->bw_gbps = 31;
	o->graphs = BACKEND_GRAPHS_AUTO;	/* the daemon's default */
	o->bf16 = -1;				/* and bf16-dot auto */
	o->isa = QUANT_ISA_AUTO;
	for (i = 1; i < argc; i++) {
		a = argv[i];
		if (strcmp(a, "--json") == 0) {
			o->json = 1;
			continue;
		}
		if (strcmp(a, "--bf16") == 0) {
			o->bf16 = QUANT_BF16_DOT_ALL;
			continue;
		}
		if (strcmp(a, "--exact") == 0) {
			o->bf16 = QUANT_BF16_DOT_NONE;
			continue;
		}
		if (strcmp(a, "--collectives") == 0) {
			o->collectives = 1;
			continue;
		}
		if (strcmp(a, "--graphs") == 0 ||
		    strcmp(a, "--no-graphs") == 0) {
			o->graphs = a[2] == 'g';
			continue;
		}
		if (strcmp(a, "--no-repack") == 0) {
			o->no_repack = 1;
			continue;
		}
		if (strcmp(a, "--no-amx") == 0) {
			o->no_amx = 1;
			continue;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fprintf(stderr, "%s\n", pb_usage);
			exit(0);
		}
		if (i + 1 >= argc)
			pb_die("%s needs a value\n%s", a, pb_usage);
		if (strcmp(a, "-m") == 0)
			o->model = argv[++i];
		else if (strcmp(a, "-p") == 0)
			o->n_pp = pb_list(a, argv[++i], 0, PB_MAX_TOKENS, o->pp);
		else if (strcmp(a, "-b") == 0)
			o->n_batch = pb_list(a, argv[++i], 1, 1024, o->batch);
		else if (strcmp(a, "--backend") == 0)
			o->backend = argv[++i];
		else if (strcmp(a, "--isa") == 0)
			o->isa = pb_isa(argv[++i]);
		else if (strcmp(a, "--devices") == 0)
			o->n_devices = pb_list(a, argv[++i], 0, 255, o->devices);
		else if (strcmp(a, "-n") == 0 || strcmp(a, "-r") == 0 ||
		    strcmp(a, "-t") == 0 || strcmp(a, "-d") == 0) {
			if (parse_int(argv[++i], a[1] == 'r' ? 1 : 0,
			    a[1] == 'r' ? 64 : PB_MAX_TOKENS, &n, a, &cause) != 0)
				pb_die("%s", cause);
			if (a[1] == 'n')
				o->n_gen = (int)n;
			else if (a[1] == 'd')
				o->depth = (int)n;
			else if (a[1] == 'r')
				o->reps = (int)n;
			else
				o->threads = (int)n;
		} else if (strcmp(a, "--bw") == 0) {
			if (parse_float(argv[++i], 0.001, 1e6, &o->bw_gbps, a,
			    &cause) != 0)
				pb_die("%s", cause);
			o->bw_given = 1;
		} else
			pb_die("unknown option %s\n%s", a, pb_usage);
	}
	if (o->model == NULL)
		pb_die("%s", pb_usage);
}

/* A field of /proc/self/status in kB ("VmRSS"), or 0. */
static uint64_t
pb_status_kb(const char *field)
{
	FILE		*f;
	char		 line[256];
	size_t		 len = strlen(field);
	uint64_t	 v = 0;

	if ((f = fopen("/proc/self/status", "r")) == NULL)
		return (0);
	while (fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, field, len) == 0 && line[len] == ':') {
			v = strtoull(line + len + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return (v);
}

/*
 * Bytes of weights one decode step reads: every tensor except the token
 * embedding, of which only one row per token is looked up (unless the
 * output projection shares it).
 */
static uint64_t
pb_weight_bytes(const struct model *m)
{
	const struct gguf_file	*f = m->gguf;
	uint64_t		 sum = 0;
	uint64_t		 i;
	int			 tied;

	tied = gguf_find_tensor(f, "output.weight") == NULL;
	for (i = 0; i < f->n_tensors; i++) {
		if (!tied && strcmp(f->tensors[i].name,
		    "token_embd.weight") == 0)
			continue;
		sum += f->tensors[i].nbytes;
	}
	return (sum);
}

/* Reserve KV for each entry and run one forward pass, or die. */
static void
pb_forward(struct pb *p, struct fwd_batch *b)
{
	char	*cause = NULL;
	int	 i;

	for (i = 0; i < b->n_seqs; i++)
		if (kv_seq_reserve(p->pool, b->entries[i].seq,
		    (uint32_t)b->entries[i].n_tokens) != 0)
			pb_die("KV pool of %u blocks is full", p->n_blocks);
	if (p->be->forward(p->bi, p->pool, b, &cause) != 0)
		pb_die("forward: %s", cause);
}

/* Compare doubles for qsort. */
static int
pb_cmp(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return ((x > y) - (x < y));
}

/* Median of n doubles (sorted in place). */
static double
pb_median(double *v, int n)
{
	qsort(v, n, sizeof *v, pb_cmp);
	return (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

/* Fill in the summary of a result's samples. */
static void
pb_summarize(struct pb_result *r)
{
	double	s[64], var = 0;
	int	i;

	memcpy(s, r->samples, r->n * sizeof *s);
	r->median = pb_median(s, r->n);
	r->min = s[0];
	r->max = s[r->n - 1];
	r->mean = 0;
	for (i = 0; i < r->n; i++)
		r->mean += s[i];
	r->mean /= r->n;
	for (i = 0; i < r->n; i++)
		var += (s[i] - r->mean) * (s[i] - r->mean);
	r->stddev = r->n > 1 ? sqrt(var / (r->n - 1)) : 0;
}

/*
 * Nanoseconds the backend takes to read a decode step's weights alone, the
 * best of PB_READ_PASSES reads, or 0 where it cannot say.
 */
static double
pb_read_ns(struct pb *p)
{
	uint64_t	t0, best = 0;
	int		i;

	if (p->be->read_weights == NULL)
		return (0);
	for (i = 0; i < PB_READ_PASSES; i++) {
		t0 = now_ns();
		p->read_bytes = p->be->read_weights(p->bi);
		t0 = now_ns() - t0;
		if (i == 0 || t0 < best)
			best = t0;
	}
	return ((double)best);
}

/*
 * Prompt processing: n tokens in one forward pass on a sequence that holds
 * depth tokens already (put there untimed).
 */
static double
pb_pp_once(struct pb *p, int depth, int n)
{
	struct kv_seq		 seq;
	struct fwd_entry	 e;
	struct fwd_batch	 b = { &e, 1 };
	uint64_t		 t0, t1;

	memset(&seq, 0, sizeof seq);
	if (depth > 0) {
		e = (struct fwd_entry){ &seq, p->tokens, depth, p->logits };
		pb_forward(p, &b);
	}
	e = (struct fwd_entry){ &seq, p->tokens + depth, n, p->logits };
	t0 = now_ns();
	pb_forward(p, &b);
	t1 = now_ns();
	kv_seq_release(p->pool, &seq);
	return (n * 1e9 / (double)(t1 - t0));
}

/* Index of the largest of n floats. */
static int32_t
pb_argmax(const float *v, uint32_t n)
{
	uint32_t	i, best = 0;

	for (i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return ((int32_t)best);
}

/*
 * Generation: nb sequences decode n tokens each, one per forward pass,
 * after a prompt of pre tokens each.
 */
static double
pb_tg_once(struct pb *p, int nb, int pre, int n)
{
	struct kv_seq		*seqs;
	struct fwd_entry	*e;
	struct fwd_batch	 b;
	int32_t			*next;
	uint32_t		 nv = model_info(p->m)->n_vocab;
	uint64_t		 t0, t1;
	int			 s, i;

	seqs = xcalloc(nb, sizeof *seqs);
	e = xcalloc(nb, sizeof *e);
	next = xcalloc(nb, sizeof *next);
	for (s = 0; s < nb; s++)
		e[s] = (struct fwd_entry){ &seqs[s], p->tokens + s, pre,
		    p->logits + (size_t)s * nv };
	b.entries = e;
	b.n_seqs = nb;
	pb_forward(p, &b);	/* the prompt, not timed */
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		/* Greedy, so each step depends on the last as in serving. */
		for (s = 0; s < nb; s++) {
			next[s] = pb_argmax(p->logits + (size_t)s * nv, nv);
			e[s].tokens = &next[s];
			e[s].n_tokens = 1;
		}
		pb_forward(p, &b);
	}
	t1 = now_ns();
	p->gen_rss_kb = pb_status_kb("VmRSS");
	for (s = 0; s < nb; s++)
		kv_seq_release(p->pool, &seqs[s]);
	free(seqs);
	free(e);
	free(next);
	return ((double)nb * n * 1e9 / (double)(t1 - t0));
}

/* Print one result row. */
static void
pb_print(const struct pb_opts *o, const struct pb_result *r, int first)
{
	char	name[64];
	double	sh[64], med = 0;
	int	i;

	if (r->n_share > 0) {
		memcpy(sh, r->share, r->n_share * sizeof *sh);
		med = pb_median(sh, r->n_share);
	}
	if (o->json) {
		printf("%s{\"test\":\"%s\",\"n_tokens\":%d,\"batch\":%d,"
		    "\"depth\":%d,\"reps\":%d,\"tps_median\":%.3f,"
		    "\"tps_min\":%.3f,\"tps_max\":%.3f,\"tps_mean\":%.3f,"
		    "\"tps_stddev\":%.3f,\"samples\":[", first ? "" : ",",
		    r->test, r->n_tokens, r->batch, r->depth, r->n, r->median,
		    r->min, r->max, r->mean, r->stddev);
		for (i = 0; i < r->n; i++)
			printf("%s%.3f", i ? "," : "", r->samples[i]);
		printf("]");
		if (r->n_share > 0) {
			printf(",\"read_share_median\":%.4f,\"read_share_min\":"
			    "%.4f,\"read_share_max\":%.4f,\"read_share\":[", med,
			    sh[0], sh[r->n_share - 1]);
			for (i = 0; i < r->n_share; i++)
				printf("%s%.4f", i ? "," : "", r->share[i]);
			printf("]");
		}
		printf("}");
		return;
	}
	if (strcmp(r->test, "pp") == 0)
		snprintf(name, sizeof name, "pp%d", r->n_tokens);
	else
		snprintf(name, sizeof name, "tg%d batch %d", r->n_tokens,
		    r->batch);
	if (r->depth > 0)
		snprintf(name + strlen(name), sizeof name - strlen(name),
		    " @ d%d", r->depth);
	printf("%-18s %10.2f %10.2f %10.2f %9.2f %5d\n", name, r->median,
	    r->min, r->max, r->stddev, r->n);
	if (r->n_share > 0)
		printf("  read share %.0f%% (%.0f-%.0f%%): steps/s times the "
		    "time its weights take to read alone, just before each run\n",
		    100 * med, 100 * sh[0], 100 * sh[r->n_share - 1]);
	fflush(stdout);
}

int
main(int argc, char **argv)
{
	struct pb_opts		 o;
	struct pb		 p;
	struct model_opts	 mo;
	struct backend_config	 cfg;
	const struct model_info	*mi;
	struct pb_result	 r;
	char			*cause = NULL;
	uint64_t		 rss_load, hwm_load, wbytes, kv_bytes, map_bytes;
	uint64_t		 rss_gen, hwm_end, rss_warm, t_load;
	int64_t			 overhead;
	uint32_t		 blocks;
	int			 i, k, pmax = 1, bmax = 1, ctx, pre, first = 1;
	int			 attn_bf16, attn_i16, i16 = 0;
	double			 roof, read_ns, t_read;

	pb_parse(argc, argv, &o);
	memset(&p, 0, sizeof p);
	p.o = &o;
	for (i = 0; i < o.n_pp; i++)
		if (o.pp[i] > pmax)
			pmax = o.pp[i];
	for (i = 0; i < o.n_batch; i++)
		if (o.batch[i] > bmax)
			bmax = o.batch[i];
	/* A generation test's prompt: the depth, or a short one. */
	pre = o.depth > PB_GEN_PREFILL ? o.depth : PB_GEN_PREFILL;
	ctx = pre + o.n_gen;
	if (o.depth + pmax > ctx)
		ctx = o.depth + pmax;
	memset(&mo, 0, sizeof mo);
	mo.n_threads = o.threads;
	mo.ctx = ctx;
	if ((p.be = backend_find(o.backend != NULL ? o.backend : "cpu")) ==
	    NULL)
		pb_die("backend %s is not built", o.backend != NULL ?
		    o.backend : "cpu");
	if (o.bf16 == QUANT_BF16_DOT_ALL && !quant_bf16_dot_supported())
		pb_die("--bf16: %s has no bf16 dot products", o.isa ==
		    QUANT_ISA_AUTO ? "this CPU" : "the --isa set");
	if (o.bf16 == -1) {
		o.bf16 = quant_bf16_dot_auto(NULL);
		i16 = quant_f16_i16_auto(NULL);
	}
	quant_allow_bf16_dot(o.bf16);
	quant_allow_f16_i16(i16);
	if (o.no_repack)
		quant_allow_pack(0);
	if (o.no_amx)
		quant_allow_amx(0);
	t_load = now_ns();
	if ((p.m = model_load(o.model, &mo, NULL, NULL, &cause)) == NULL)
		pb_die("%s: %s", o.model, cause);
	t_load = now_ns() - t_load;
	memset(&cfg, 0, sizeof cfg);
	cfg.n_threads = o.threads;
	if (o.n_devices > 0) {
		cfg.devices = o.devices;
		cfg.n_devices = o.n_devices;
	}
	cfg.collectives = o.collectives;
	cfg.graphs = o.graphs;
	if ((p.bi = p.be->create(p.m, &cfg, &cause)) == NULL)
		pb_die("%s: %s", o.model, cause);
	mi = model_info(p.m);
	rss_load = pb_status_kb("VmRSS");
	hwm_load = pb_status_kb("VmHWM");

	/* One pool big enough for the largest test, made once. */
	p.n_blocks = kv_layout_blocks_for(&mi->kv, o.depth + pmax);
	blocks = (uint32_t)bmax * kv_layout_blocks_for(&mi->kv, pre + o.n_gen);
	if (o.n_gen > 0 && blocks > p.n_blocks)
		p.n_blocks = blocks;
	if ((p.pool = p.be->kv_pool_create(p.bi, p.n_blocks, &cause)) == NULL)
		pb_die("KV pool of %u blocks: %s", p.n_blocks, cause);
	kv_bytes = (uint64_t)p.n_blocks * p.pool->block_bytes;
	map_bytes = p.m->gguf->size;
	wbytes = pb_weight_bytes(p.m);

	k = o.depth + pmax > pre + bmax ? o.depth + pmax : pre + bmax;
	p.tokens = xcalloc(k, sizeof *p.tokens);
	for (i = 0; i < k; i++)	/* spread over the vocabulary, skipping specials */
		p.tokens[i] = (int32_t)(3 + (uint64_t)i * 7919 %
		    (mi->n_vocab > 3 ? mi->n_vocab - 3 : 1));
	p.logits = xcalloc((size_t)bmax * mi->n_vocab, sizeof *p.logits);

	/* Warm up: fault the weights in and start the threads. */
	pb_pp_once(&p, 0, pmax < 16 ? pmax : 16);
	rss_warm = pb_status_kb("VmRSS");
	/* The roofline: the bandwidth given, or the weights read alone now. */
	read_ns = o.bw_given ? 0 : pb_read_ns(&p);
	if (read_ns > 0) {
		o.bw_gbps = (double)p.read_bytes / read_ns;
		roof = 1e9 / read_ns;
	} else
		roof = o.bw_gbps * 1e9 / (double)wbytes;

	/* The CPU's attention kernel; other backends compute their own. */
	attn_i16 = p.pool->layout.type == KV_TYPE_I16;
	attn_bf16 = strcmp(p.be->name, "cpu") == 0 && p.m->attn_bf16 &&
	    !attn_i16;
	if (o.json) {
		printf("{\"model\":\"");
		for (i = 0; o.model[i] != '\0'; i++)
			printf(o.model[i] == '"' || o.model[i] == '\\' ?
			    "\\%c" : "%c", o.model[i]);
		printf("\",\"type\":\"%s\",\"n_params\":%" PRIu64 ","
		    "\"threads\":%d,\"ctx\":%d,\"load_s\":%.3f,\"isa\":\"%s\","
		    "\"bf16_dot\":\"%s\","
		    "\"attn_bf16\":%s,\"attn_int16\":%s,\"f16_matrices\":%u,"
		    "\"f16_bf16_values\":%u,\"f16_int16\":%u,\"bf16_matrices\":%u,"
		    "\"bf16_int16\":%u,\"results\":[", mi->type_name, mi->n_params,
		    o.threads, ctx, t_load / 1e9, quant_isa_name(quant_isa()),
		    pb_dot_name[o.bf16],
		    attn_bf16 ? "true" : "false", attn_i16 ? "true" : "false",
		    p.m->n_f16, p.m->n_f16_bf16, p.m->n_f16_i16, p.m->n_bf16,
		    p.m->n_bf16_i16);
	} else {
		printf("model %s: %s, %.3f M parameters, file %.1f MiB, "
		    "loaded in %.2f s\n", o.model, mi->type_name, mi->n_params / 1e6,
		    map_bytes / 1048576.0, t_load / 1e9);
		printf("threads %d (0 = all CPUs), ctx %d, %d repetitions, "
		    "kernels %s%s\n", o.threads, ctx, o.reps,
		    quant_isa_name(quant_isa()), o.isa == QUANT_ISA_AUTO ? "" :
		    " (--isa)");
		printf("float weights: %s\n", i16 && o.bf16 != QUANT_BF16_DOT_ALL ?
		    pb_math_i16[o.bf16] : pb_math[o.bf16]);
		if (strcmp(p.be->name, "cpu") == 0 && p.m->n_f16 > 0 &&
		    o.bf16 == QUANT_BF16_DOT_BF16)
			printf("F16 matrices of bf16 values: %u of %u\n",
			    p.m->n_f16_bf16, p.m->n_f16);
		if (strcmp(p.be->name, "cpu") == 0 && p.m->n_f16 > 0 && i16)
			printf("F16 matrices on 16-bit integer products: %u of %u\n",
			    p.m->n_f16_i16, p.m->n_f16);
		if (strcmp(p.be->name, "cpu") == 0 && p.m->n_bf16_i16 > 0)
			printf("BF16 matrices on 16-bit integer products: %u of %u\n",
			    p.m->n_bf16_i16, p.m->n_bf16);
		printf("attention: %s\n", attn_bf16 ? "bf16 dot products "
		    "(queries, keys, values and weights rounded to bf16)" :
		    attn_i16 ? "16-bit integer dot products (queries, keys, "
		    "values and weights to about 12 bits of their largest)" :
		    "exact (f32 products)");
		if (read_ns > 0)
			printf("decode roofline: the %.1f MiB of weight matrices "
			    "a step reads, read alone in %.2f ms (%.1f GB/s, best "
			    "of %d) = %.1f steps/s (tokens/s at batch 1)\n",
			    p.read_bytes / 1048576.0, read_ns / 1e6, o.bw_gbps,
			    PB_READ_PASSES, roof);
		else
			printf("decode roofline: %.1f MiB of weights read per "
			    "step / %.1f GB/s = %.1f steps/s (tokens/s at batch "
			    "1)\n", wbytes / 1048576.0, o.bw_gbps, roof);
		printf("%-18s %10s %10s %10s %9s %5s\n", "test (tokens/s)",
		    "median", "min", "max", "stddev", "reps");
	}

	for (i = 0; i < o.n_pp; i++) {
		if (o.pp[i] == 0)
			continue;
		memset(&r, 0, sizeof r);
		r.test = "pp";
		r.n_tokens = o.pp[i];
		r.batch = 1;
		r.depth = o.depth;
		for (k = 0; k < o.reps; k++)
			r.samples[r.n++] = pb_pp_once(&p, o.depth, o.pp[i]);
		pb_summarize(&r);
		pb_print(&o, &r, first);
		first = 0;
	}
	for (i = 0; i < o.n_batch && o.n_gen > 0; i++) {
		memset(&r, 0, sizeof r);
		r.test = "tg";
		r.n_tokens = o.n_gen;
		r.batch = o.batch[i];
		r.depth = o.depth > 0 ? pre : 0;
		for (k = 0; k < o.reps; k++) {
			t_read = read_ns > 0 ? pb_read_ns(&p) : 0;
			r.samples[r.n++] = pb_tg_once(&p, o.batch[i], pre,
			    o.n_gen);
			/* Its steps/s times the weights' read time. */
			if (t_read > 0)
				r.share[r.n_share++] = t_read / 1e9 *
				    r.samples[r.n - 1] / o.batch[i];
		}
		pb_summarize(&r);
		pb_print(&o, &r, first);
		first = 0;
	}

	rss_gen = p.gen_rss_kb;
	hwm_end = pb_status_kb("VmHWM");
	/* Negative when part of the mapping is not resident. */
	overhead = (int64_t)(rss_gen * 1024) - (int64_t)(map_bytes + kv_bytes);
	if (o.json) {
		printf("],\"memory\":{\"model_mapped_bytes\":%" PRIu64 ","
		    "\"kv_bytes\":%" PRIu64 ",\"kv_blocks\":%u,"
		    "\"rss_after_load_kb\":%" PRIu64 ",\"hwm_after_load_kb\":%"
		    PRIu64 ",\"rss_after_warmup_kb\":%" PRIu64 ",\"rss_during_generation_kb\":%" PRIu64 ","
		    "\"hwm_end_kb\":%" PRIu64 ",\"overhead_bytes\":%" PRId64 "},"
		    "\"roofline\":{\"weight_bytes_per_step\":%" PRIu64 ","
		    "\"bandwidth_gbps\":%.3f,\"max_steps_per_s\":%.3f,"
		    "\"measured\":%s,\"read_bytes\":%" PRIu64 ",\"read_ms\":%.6f}}\n",
		    map_bytes, kv_bytes, p.n_blocks, rss_load, hwm_load,
		    rss_warm, rss_gen, hwm_end, overhead, wbytes, o.bw_gbps, roof,
		    read_ns > 0 ? "true" : "false", p.read_bytes, read_ns / 1e6);
	} else {
		printf("memory: model mapped %.1f MiB, KV pool %.1f MiB "
		    "(%u blocks)\n", map_bytes / 1048576.0,
		    kv_bytes / 1048576.0, p.n_blocks);
		printf("  VmRSS after load %.1f MiB (VmHWM %.1f MiB; the "
		    "mapping is faulted in on first use), after one warm-up "
		    "pass %.1f MiB\n", rss_load / 1024.0, hwm_load / 1024.0,
		    rss_warm / 1024.0);
		if (rss_gen > 0)
			printf("  VmRSS during generation %.1f MiB = mapped "
			    "model %.1f + KV %.1f + overhead %.1f MiB "
			    "(VmHWM %.1f MiB)\n", rss_gen / 1024.0,
			    map_bytes / 1048576.0, kv_bytes / 1048576.0,
			    overhead / 1048576.0, hwm_end / 1024.0);
	}
	p.be->kv_pool_free(p.bi, p.pool);
	p.be->destroy(p.bi);
	model_free(p.m);
	free(p.tokens);
	free(p.logits);
	return (0);
}
