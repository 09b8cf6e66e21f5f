/* synth.c: phased-synth, which writes GGUF models of a shape and architecture with random weights. */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf.h"
#include "gguf_write.h"
#include "log.h"
#include "quantize.h"
#include "rng.h"
#include "tensor_type.h"
#include "util.h"

/* The model shapes phased-synth knows. */
struct shape {
	const char	*name;
	uint32_t	 dim;
	uint32_t	 hidden;
	uint32_t	 layers;
	uint32_t	 heads;
	uint32_t	 kv_heads;
	uint32_t	 vocab;
	uint32_t	 ctx;
	float		 rope_base;
	float		 eps;
	int		 tied;		/* output shares token_embd */
};

static const struct shape shapes[] = {
	{ "stories260K", 64, 172, 5, 8, 4, 512, 512, 10000, 1e-5f, 0 },
	/* Small, with every row a whole number of 256-element blocks. */
	{ "tiny256", 256, 768, 2, 8, 4, 512, 512, 10000, 1e-5f, 0 },
	{ "tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, 10000, 1e-5f, 0 },
	{ "llama-3.2-1b", 2048, 8192, 16, 32, 8, 128256, 8192, 500000, 1e-5f, 1 },
	{ "llama-3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 500000, 1e-5f, 0 },
};

/*
 * The architectures phased-synth writes, with the tensors and keys
 * llama.cpp's converter writes for each.
 */
enum synth_arch { SA_LLAMA, SA_LLAMA3, SA_QWEN2, SA_QWEN3, SA_GEMMA2,
    SA_GEMMA3, SA_PHI3 };
static const char *arch_names[] = { "llama", "llama3", "qwen2", "qwen3",
    "gemma2", "gemma3", "phi3" };

/* Pseudo-types for llama-quantize's usual mixes. */
#define SYNTH_Q3_K_M	1000
#define SYNTH_Q4_K_M	1001
#define SYNTH_Q5_K_M	1002

/* llama.cpp's general.file_type numbers for what we write. */
static uint32_t
file_type(uint32_t type)
{
	switch (type) {
	case TT_F32: return (0);
	case TT_F16: return (1);
	case TT_Q4_0: return (2);
	case TT_Q4_1: return (3);
	case TT_Q8_0: return (7);
	case TT_Q5_0: return (8);
	case TT_Q5_1: return (9);
	case TT_Q2_K: return (10);
	case TT_Q3_K: return (11);		/* Q3_K_S: all Q3_K */
	case SYNTH_Q3_K_M: return (12);
	case TT_Q4_K: return (14);		/* Q4_K_S: all Q4_K */
	case SYNTH_Q4_K_M: return (15);
	case TT_Q5_K: return (16);		/* Q5_K_S: all Q5_K */
	case SYNTH_Q5_K_M: return (17);
	case TT_Q6_K: return (18);
	case TT_IQ4_NL: return (25);
	case TT_IQ4_XS: return (30);
	case TT_BF16: return (32);
	}
	return (0);
}

/* What a weight matrix is for, as the mixes tell them apart. */
enum role {
	R_EMBD, R_OUTPUT, R_ATTN_Q, R_ATTN_K, R_ATTN_V, R_ATTN_OUT, R_FFN_GATE,
	R_FFN_UP, R_FFN_DOWN,
};

/* Whether layer i of n gets the larger type in a _M mix (as llama.cpp picks). */
static int
more_bits(uint32_t i, uint32_t n)
{
	return (i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2);
}

/*
 * The type of a matrix: the asked type for every one, or in a mix the one
 * llama-quantize picks (for a dense model without an importance matrix):
 * Q6_K for the output (and for the embeddings when they are tied to it);
 * attn_v and ffn_down with more bits on the layers more_bits() names
 * (Q6_K in Q4_K_M and Q5_K_M); Q3_K_M's attn_v Q5_K on the first two
 * layers and Q4_K after, its ffn_down Q5_K on the first sixteenth and Q4_K
 * after, its attn_output Q4_K.
 */
static uint32_t
mix_type(uint32_t mix, enum role role, uint32_t layer, uint32_t n_layers, int tied)
{
	uint32_t	base;

	switch (mix) {
	case SYNTH_Q3_K_M: base = TT_Q3_K; break;
	case SYNTH_Q4_K_M: base = TT_Q4_K; break;
	case SYNTH_Q5_K_M: base = TT_Q5_K; break;
	default: return (mix);
	}
	if (role == R_OUTPUT || (role == R_EMBD && tied))
		return (TT_Q6_K);
	if (mix == SYNTH_Q3_K_M) {
		if (role == R_ATTN_V)
			return (layer < 2 ? TT_Q5_K : TT_Q4_K);
		if (role == R_FFN_DOWN)
			return (layer < n_layers / 16 ? TT_Q5_K : TT_Q4_K);
		if (role == R_ATTN_OUT)
			return (TT_Q4_K);
		return (base);
	}
	if ((role == R_ATTN_V || role == R_FFN_DOWN) && more_bits(layer, n_layers))
		return (TT_Q6_K);
	return (base);
}

/* One tensor to generate: its rows of random values (or a constant). */
struct gen {
	uint64_t	 idx;
	uint64_t	 rows;
	uint64_t	 cols;
	uint32_t	 type;
	int		 constant;	/* norm weights, factors: all value */
	float		 value;
};

struct synth {
	uint64_t	 seed;
	int		 threads;
	struct gen	*gens;
	uint64_t	 n_gens;
	uint8_t		*chunk;		/* quantized rows on their way out */
	size_t		 chunk_cap;
	float		**rowbuf;	/* one f32 row per thread */
};

/* A slice of a chunk for one thread. */
struct work {
	struct synth	*s;
	const struct gen *g;
	int		 thread;
	uint64_t	 r0, r1;	/* rows of the tensor */
	uint64_t	 base;		/* first row of the chunk */
	size_t		 row_bytes;
};

/*
 * Fill one row: uniform in [-a, a] with a = 0.02 * sqrt(3), so the standard
 * deviation is 0.02.  Each row has its own stream seeded from the seed,
 * the tensor and the row, so the output does not depend on the threads.
 */
static void
fill_row(uint64_t seed, const struct gen *g, uint64_t row, float *x)
{
	const float	scale = 0.02f * 1.7320508f / 2147483648.0f;
	uint64_t	st, r;
	uint64_t	i;

	if (g->constant) {
		for (i = 0; i < g->cols; i++)
			x[i] = g->value;
		return;
	}
	st = seed ^ (g->idx << 40) ^ (row * 0x632be59bd9b4e019ULL);
	splitmix64(&st);
	for (i = 0; i + 1 < g->cols; i += 2) {
		r = splitmix64(&st);
		x[i] = (float)(int32_t)(uint32_t)r * scale;
		x[i + 1] = (float)(int32_t)(uint32_t)(r >> 32) * scale;
	}
	if (i < g->cols)
		x[i] = (float)(int32_t)(uint32_t)splitmix64(&st) * scale;
}

/* Generate and quantize a slice of rows into the chunk buffer. */
static void *
work_run(void *arg)
{
	struct work	*w = arg;
	float		*x = w->s->rowbuf[w->thread];
	uint64_t	 r;

	for (r = w->r0; r < w->r1; r++) {
		fill_row(w->s->seed, w->g, r, x);
		quantize_row(w->g->type, x, w->s->chunk + (r - w->base) *
		    w->row_bytes, w->g->cols);
	}
	return (NULL);
}

/* Writer callback: produce one tensor chunk by chunk on all threads. */
static int
synth_fill(void *arg, struct gguf_writer *gw, uint64_t idx, char **cause)
{
	struct synth	*s = arg;
	const struct gen *g = &s->gens[idx];
	struct work	 w[16];
	pthread_t	 tid[16];
	size_t		 row_bytes;
	uint64_t	 r, n, per;
	int		 t, nt = s->threads;

	row_bytes = tensor_row_bytes(tensor_type_get(g->type), g->cols);
	n = s->chunk_cap / row_bytes;
	if (n == 0)
		n = 1;
	for (r = 0; r < g->rows; r += n) {
		if (n > g->rows - r)
			n = g->rows - r;
		per = (n + nt - 1) / nt;
		for (t = 0; t < nt; t++) {
			w[t].s = s;
			w[t].g = g;
			w[t].thread = t;
			w[t].base = r;
			w[t].row_bytes = row_bytes;
			w[t].r0 = r + (uint64_t)t * per;
			w[t].r1 = w[t].r0 + per;
			if (w[t].r0 > r + n)
				w[t].r0 = r + n;
			if (w[t].r1 > r + n)
				w[t].r1 = r + n;
			if (t > 0 && pthread_create(&tid[t], NULL, work_run,
			    &w[t]) != 0)
				fatalx("pthread_create failed");
		}
		work_run(&w[0]);
		for (t = 1; t < nt; t++)
			pthread_join(tid[t], NULL);
		if (gguf_writer_put(gw, s->chunk, n * row_bytes, cause) != 0)
			return (-1);
	}
	return (0);
}

/*
 * The type a tensor gets: the wanted one, or the fallback llama-quantize
 * uses when the rows are not a whole number of blocks (Q2_K, Q3_K and
 * IQ4_XS to IQ4_NL, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0), F16 when that
 * does not fit either.
 */
static uint32_t
fit_type(uint32_t want, uint64_t cols, const char *name)
{
	uint32_t	t;

	if (cols % tensor_type_get(want)->block_elems == 0)
		return (want);
	switch (want) {
	case TT_Q2_K:
	case TT_Q3_K:
	case TT_IQ4_XS:
		t = TT_IQ4_NL;
		break;
	case TT_Q4_K:
		t = TT_Q5_0;
		break;
	case TT_Q5_K:
		t = TT_Q5_1;
		break;
	case TT_Q6_K:
		t = TT_Q8_0;
		break;
	default:
		t = TT_F16;
	}
	if (cols % tensor_type_get(t)->block_elems != 0)
		t = TT_F16;
	log_debug("%s: %" PRIu64 " columns, %s instead of %s", name, cols,
	    tensor_type_name(t), tensor_type_name(want));
	return (t);
}

/* Add a tensor description and remember how to generate it. */
static void
add(struct gguf_writer *gw, struct synth *s, const char *name, uint64_t cols,
    uint64_t rows, uint32_t type, int *fallbacks)
{
	struct gen	*g;
	uint64_t	 ne[2] = { cols, rows };
	uint32_t	 t;

	t = rows == 0 ? TT_F32 : fit_type(type, cols, name);
	if (t != type)
		(*fallbacks)++;
	s->gens = xreallocarray(s->gens, s->n_gens + 1, sizeof *s->gens);
	g = &s->gens[s->n_gens];
	g->idx = gguf_writer_add_tensor(gw, name, rows == 0 ? 1 : 2, ne, t);
	g->rows = rows == 0 ? 1 : rows;
	g->cols = cols;
	g->type = t;
	g->constant = rows == 0;
	g->value = 1.0f;
	s->n_gens++;
}

/* Add a vector of n floats: random (biases) or all value (norms, factors). */
static void
add_vec(struct gguf_writer *gw, struct synth *s, const char *name, uint64_t n,
    int random, float value)
{
	int	fallbacks = 0;

	add(gw, s, name, n, 0, TT_F32, &fallbacks);
	s->gens[s->n_gens - 1].constant = !random;
	s->gens[s->n_gens - 1].value = value;
}

/* Print the usage and exit. */
static __attribute__((noreturn)) void
usage(void)
{
	fprintf(stderr, "usage: phased-synth --shape name --type type "
	    "--vocab file.gguf [--arch name] [--window n] [--seed n] "
	    "[--layers n] [--threads n] -o out.gguf\n");
	exit(1);
}

/* Parse the arguments, describe the model, then generate and write it. */
int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "shape", required_argument, NULL, 's' },
		{ "type", required_argument, NULL, 't' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "seed", required_argument, NULL, 'S' },
		{ "layers", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 'j' },
		{ "output", required_argument, NULL, 'o' },
		{ "verbose", no_argument, NULL, 'V' },
		{ "arch", required_argument, NULL, 'a' },
		{ "window", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	const struct shape	*sh = NULL;
	struct shape		 shp;
	struct synth		 s;
	struct gguf_writer	*gw;
	struct gguf_file	*vf;
	const struct gguf_kv	*tok;
	const char		*shape_name = NULL, *type_name = NULL;
	const char		*vocab = NULL, *out = NULL;
	char			*cause = NULL, name[96];
	long long		 v;
	uint64_t		 seed = 1, size, t0;
	uint32_t		 type = 0, layers = 0, kv_dim, i, n;
	int			 ch, threads = 2, fallbacks = 0, verbose = 0;
	size_t			 k;
	const char		*arch_name = "llama", *A;
	enum synth_arch		 arch = SA_LLAMA;
	uint32_t		 window = 0, hd, nrot;
	char			 key[128];

	log_init(1, 0, "phased-synth");
	while ((ch = getopt_long(argc, argv, "o:V", opts, NULL)) != -1) {
		switch (ch) {
		case 's':
			shape_name = optarg;
			break;
		case 't':
			type_name = optarg;
			break;
		case 'v':
			vocab = optarg;
			break;
		case 'S':
			if (parse_int(optarg, 0, INT64_MAX, &v, "seed",
			    &cause) != 0)
				fatalx("%s", cause);
			seed = v;
			break;
		case 'l':
			if (parse_int(optarg, 1, 1024, &v, "layers",
			    &cause) != 0)
				fatalx("%s", cause);
			layers = v;
			break;
		case 'j':
			if (parse_int(optarg, 1, 16, &v, "threads",
			    &cause) != 0)
				fatalx("%s", cause);
			threads = v;
			break;
		case 'o':
			out = optarg;
			break;
		case 'V':
			verbose++;
			break;
		case 'a':
			arch_name = optarg;
			break;
		case 'w':
			if (parse_int(optarg, 1, UINT32_MAX, &v, "window",
			    &cause) != 0)
				fatalx("%s", cause);
			window = v;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || shape_name == NULL || type_name == NULL ||
	    vocab == NULL || out == NULL)
		usage();
	log_setverbose(verbose);

	for (k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		if (strcmp(shapes[k].name, shape_name) == 0)
			sh = &shapes[k];
	}
	if (sh == NULL)
		fatalx("unknown shape '%s' (stories260K, tiny256, "
		    "tinyllama-1.1b, llama-3.2-1b, llama-3-8b)", shape_name);
	for (k = 0; k < sizeof arch_names / sizeof arch_names[0]; k++) {
		if (strcmp(arch_names[k], arch_name) == 0)
			break;
	}
	if (k == sizeof arch_names / sizeof arch_names[0])
		fatalx("unknown architecture '%s' (llama, llama3, qwen2, qwen3, "
		    "gemma2, gemma3, phi3)", arch_name);
	arch = (enum synth_arch)k;
	if (window == 0)
		window = arch == SA_GEMMA2 ? 4096 : 1024;
	if (strcasecmp(type_name, "Q3_K_M") == 0)
		type = SYNTH_Q3_K_M;
	else if (strcasecmp(type_name, "Q4_K_M") == 0)
		type = SYNTH_Q4_K_M;
	else if (strcasecmp(type_name, "Q5_K_M") == 0)
		type = SYNTH_Q5_K_M;
	else {
		for (type = 0; type <= TT_GGUF_MAX; type++) {
			if (tensor_type_get(type) != NULL &&
			    strcasecmp(tensor_type_name(type), type_name) == 0)
				break;
		}
		if (type > TT_GGUF_MAX)
			fatalx("unknown type '%s' (F32, F16, BF16, Q8_0, Q4_0, "
			    "Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
			    "IQ4_XS, Q3_K_M, Q4_K_M, Q5_K_M)", type_name);
	}

	if ((vf = gguf_open(vocab, &cause)) == NULL)
		fatalx("%s", cause);
	if ((tok = gguf_get_arr(vf, "tokenizer.ggml.tokens", GGUF_VT_STRING,
	    &cause)) == NULL)
		fatalx("%s: %s", vocab, cause);
	shp = *sh;
	if (tok->v.arr.n == 0 || tok->v.arr.n > UINT32_MAX)
		fatalx("%s: %" PRIu64 " tokens", vocab, tok->v.arr.n);
	if (tok->v.arr.n != shp.vocab)
		log_info("vocabulary of %" PRIu64 " tokens instead of %u",
		    tok->v.arr.n, shp.vocab);
	shp.vocab = tok->v.arr.n;
	if (layers != 0)
		shp.layers = layers;
	kv_dim = shp.dim / shp.heads * shp.kv_heads;

	hd = shp.dim / shp.heads;
	/* Phi-4-mini turns three quarters of each head. */
	nrot = arch == SA_PHI3 ? (hd * 3 / 4) & ~1U : hd;
	A = arch == SA_LLAMA3 ? "llama" : arch_names[arch];
#define KEY(suffix)	(snprintf(key, sizeof key, "%s." suffix, A), key)
	gw = gguf_writer_new();
	gguf_writer_add_str(gw, "general.architecture", A);
	snprintf(name, sizeof name, "synthetic %s %s %s", arch_name, shp.name,
	    type_name);
	gguf_writer_add_str(gw, "general.name", name);
	gguf_writer_add_u32(gw, "general.file_type", file_type(type));
	gguf_writer_add_u32(gw, KEY("context_length"), shp.ctx);
	gguf_writer_add_u32(gw, KEY("embedding_length"), shp.dim);
	gguf_writer_add_u32(gw, KEY("block_count"), shp.layers);
	gguf_writer_add_u32(gw, KEY("feed_forward_length"), shp.hidden);
	gguf_writer_add_u32(gw, KEY("attention.head_count"), shp.heads);
	gguf_writer_add_u32(gw, KEY("attention.head_count_kv"), shp.kv_heads);
	gguf_writer_add_f32(gw, KEY("rope.freq_base"), shp.rope_base);
	gguf_writer_add_f32(gw, KEY("attention.layer_norm_rms_epsilon"),
	    shp.eps);
	gguf_writer_add_u32(gw, KEY("rope.dimension_count"), nrot);
	gguf_writer_add_u32(gw, KEY("vocab_size"), shp.vocab);
	if (arch == SA_QWEN3 || arch == SA_GEMMA2 || arch == SA_GEMMA3) {
		gguf_writer_add_u32(gw, KEY("attention.key_length"), hd);
		gguf_writer_add_u32(gw, KEY("attention.value_length"), hd);
	}
	if (arch == SA_GEMMA2 || arch == SA_GEMMA3)
		gguf_writer_add_u32(gw, KEY("attention.sliding_window"), window);
	if (arch == SA_GEMMA2) {
		gguf_writer_add_f32(gw, KEY("attn_logit_softcapping"), 50.0f);
		gguf_writer_add_f32(gw, KEY("final_logit_softcapping"), 30.0f);
	}
	if (arch == SA_PHI3) {
		/* LongRoPE: the long factors apply past half the context. */
		gguf_writer_add_u32(gw, KEY("rope.scaling.original_context_length"),
		    shp.ctx / 2);
		gguf_writer_add_f32(gw, KEY("rope.scaling.attn_factor"), 1.1f);
	}
#undef KEY
	for (i = 0; i < vf->n_kv; i++) {
		if (strncmp(vf->kv[i].key, "tokenizer.", 10) == 0)
			gguf_writer_copy_kv(gw, &vf->kv[i]);
	}

	memset(&s, 0, sizeof s);
	s.seed = seed;
	s.threads = threads;
	n = shp.layers;
#define MIX(role, l)	mix_type(type, role, l, n, shp.tied)
	add(gw, &s, "token_embd.weight", shp.dim, shp.vocab, MIX(R_EMBD, 0),
	    &fallbacks);
	add(gw, &s, "output_norm.weight", shp.dim, 0, TT_F32, &fallbacks);
	if (arch == SA_LLAMA3)
		add_vec(gw, &s, "rope_freqs.weight", nrot / 2, 0, 2.0f);
	if (arch == SA_PHI3) {
		add_vec(gw, &s, "rope_factors_long.weight", nrot / 2, 0, 4.0f);
		add_vec(gw, &s, "rope_factors_short.weight", nrot / 2, 0, 1.0f);
	}
	if (!shp.tied && arch != SA_GEMMA2)
		add(gw, &s, "output.weight", shp.dim, shp.vocab, MIX(R_OUTPUT, 0),
		    &fallbacks);
	for (i = 0; i < n; i++) {
#define BLK(n)	(snprintf(name, sizeof name, "blk.%u." n, i), name)
		add(gw, &s, BLK("attn_norm.weight"), shp.dim, 0, TT_F32,
		    &fallbacks);
		if (arch == SA_PHI3)
			add(gw, &s, BLK("attn_qkv.weight"), shp.dim,
			    shp.dim + 2 * kv_dim, MIX(R_ATTN_V, i), &fallbacks);
		else {
			add(gw, &s, BLK("attn_q.weight"), shp.dim, shp.dim,
			    MIX(R_ATTN_Q, i), &fallbacks);
			add(gw, &s, BLK("attn_k.weight"), shp.dim, kv_dim,
			    MIX(R_ATTN_K, i), &fallbacks);
			add(gw, &s, BLK("attn_v.weight"), shp.dim, kv_dim,
			    MIX(R_ATTN_V, i), &fallbacks);
		}
		if (arch == SA_QWEN2) {
			add_vec(gw, &s, BLK("attn_q.bias"), shp.dim, 1, 0);
			add_vec(gw, &s, BLK("attn_k.bias"), kv_dim, 1, 0);
			add_vec(gw, &s, BLK("attn_v.bias"), kv_dim, 1, 0);
		}
		if (arch == SA_QWEN3 || arch == SA_GEMMA3) {
			add_vec(gw, &s, BLK("attn_q_norm.weight"), hd, 0, 1.0f);
			add_vec(gw, &s, BLK("attn_k_norm.weight"), hd, 0, 1.0f);
		}
		add(gw, &s, BLK("attn_output.weight"), shp.dim, shp.dim,
		    MIX(R_ATTN_OUT, i), &fallbacks);
		if (arch == SA_GEMMA2 || arch == SA_GEMMA3)
			add_vec(gw, &s, BLK("post_attention_norm.weight"),
			    shp.dim, 0, 1.0f);
		add(gw, &s, BLK("ffn_norm.weight"), shp.dim, 0, TT_F32,
		    &fallbacks);
		if (arch == SA_PHI3)
			add(gw, &s, BLK("ffn_up.weight"), shp.dim,
			    2 * shp.hidden, MIX(R_FFN_UP, i), &fallbacks);
		else {
			add(gw, &s, BLK("ffn_gate.weight"), shp.dim,
			    shp.hidden, MIX(R_FFN_GATE, i), &fallbacks);
			add(gw, &s, BLK("ffn_up.weight"), shp.dim, shp.hidden,
			    MIX(R_FFN_UP, i), &fallbacks);
		}
		add(gw, &s, BLK("ffn_down.weight"), shp.hidden, shp.dim,
		    MIX(R_FFN_DOWN, i), &fallbacks);
		if (arch == SA_GEMMA2 || arch == SA_GEMMA3)
			add_vec(gw, &s, BLK("post_ffw_norm.weight"), shp.dim,
			    0, 1.0f);
#undef BLK
	}
#undef MIX
	if (fallbacks != 0)
		log_info("%d tensors with rows that do not fit %s blocks were "
		    "written in a fallback type", fallbacks, type_name);

	s.chunk_cap = 8 << 20;
	s.chunk = xmalloc(s.chunk_cap > 16384 ? s.chunk_cap : 16384);
	s.rowbuf = xcalloc(threads, sizeof *s.rowbuf);
	for (ch = 0; ch < threads; ch++)
		s.rowbuf[ch] = xreallocarray(NULL,
		    shp.dim > shp.hidden ? shp.dim : shp.hidden, sizeof(float));
	/* A row bigger than the chunk still gets a buffer of its own. */
	for (k = 0; k < s.n_gens; k++) {
		size_t rb = tensor_row_bytes(tensor_type_get(s.gens[k].type),
		    s.gens[k].cols);
		if (rb > s.chunk_cap) {
			s.chunk_cap = rb;
			s.chunk = xreallocarray(s.chunk, rb, 1);
		}
	}

	t0 = now_ns();
	if (gguf_writer_open(gw, out, &cause) != 0)
		fatalx("%s", cause);
	for (k = 0; k < s.n_gens; k++) {
		if (synth_fill(&s, gw, s.gens[k].idx, &cause) != 0)
			fatalx("%s", cause);
	}
	if (gguf_writer_close(gw, &size, &cause) != 0)
		fatalx("%s", cause);
	fprintf(stderr, "phased-synth: wrote %s: %s %s %s, %u layers, %" PRIu64
	    " tensors, %" PRIu64 " bytes (%.1f MiB) in %.2f s\n", out,
	    arch_name, shp.name, type_name, shp.layers, s.n_gens, size,
	    size / 1048576.0, (now_ns() - t0) / 1e9);

	gguf_writer_free(gw);
	gguf_close(vf);
	for (ch = 0; ch < threads; ch++)
		free(s.rowbuf[ch]);
	free(s.rowbuf);
	free(s.chunk);
	free(s.gens);
	return (0);
}
