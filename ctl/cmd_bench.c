/*
 * cmd_bench.c: phasectl bench, a load generator over the daemon's socket.
 *
 * Requests are sent on their own connections (one per request in flight,
 * reused when a request ends) so that one slow stream never delays the
 * reading of another; a single poll(2) loop watches them all.  Every time is
 * taken on the client with the monotonic clock (at send, at each token
 * event, at the final Done) and the daemon's own t_us of each token is kept
 * next to it, so the two views can be compared.
 *
 * Prompts are exact token-id sequences (prompt_tokens, no BOS): text from a
 * small generator of English paragraphs is tokenized locally with the
 * model's own tokenizer (the file the daemon reports, or --model-file), and
 * each request takes a window of the wanted length from that token stream.
 * When no model file can be read the prompts are a fixed phrase of token ids
 * between 100 and the vocabulary size, repeated.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_http.h"
#include "gguf.h"
#include "phasectl.h"
#include "tokenizer.h"
#include "util.h"

#define B_USAGE "usage: phasectl bench MODEL [--rate R [--burstiness B] | " \
	"--concurrency C] [--requests N | --duration S]\n" \
	"\t[--prompt-len N|A-B] [--output-len N|A-B] [--lengths-file F] " \
	"[--seed S]\n" \
	"\t[--slo-ttft-ms X] [--slo-tbt-ms Y] [--model-file PATH] " \
	"[--timeline FILE] [--quiet] [--url URL]\n" \
	"\t[--scenario interference [--chats K] [--chat-output N] " \
	"[--chat-prompt-len N]\n" \
	"\t [--long-prompt-len L] [--long-output N] [--long-every S] " \
	"[--long-count M]]"

#define B_MAX_INFLIGHT	4096	/* requests in flight at once */
#define B_MAX_TOKENS	(1U << 20)
#define B_FRAMES_PER_FD	64	/* frames read from one fd per poll round */

enum b_mode { BM_CONCURRENCY, BM_RATE, BM_INTERFERENCE };
enum b_kind { BK_NORMAL, BK_CHAT, BK_LONG };

/* A length given as N or A-B (uniform). */
struct b_range {
	uint32_t	lo, hi;
};

struct b_opts {
	const char	*model;
	enum b_mode	 mode;
	double		 rate;		/* requests/s */
	double		 burstiness;	/* gamma shape; 1 is Poisson */
	uint32_t	 concurrency;
	uint32_t	 requests;	/* 0: by duration */
	double		 duration;	/* seconds; 0: by count */
	struct b_range	 prompt_len;
	struct b_range	 output_len;
	const char	*lengths_file;
	uint64_t	 seed;
	double		 slo_ttft_ms;	/* 0: none */
	double		 slo_tbt_ms;
	const char	*model_file;
	const char	*timeline;
	int		 quiet;
	uint32_t	 chats;
	uint32_t	 chat_output;
	uint32_t	 chat_prompt_len;
	uint32_t	 long_prompt_len;
	uint32_t	 long_output;
	double		 long_every;
	uint32_t	 long_count;
	const char	*url;		/* an OpenAI-compatible server */
};

/* One request and everything measured about it. */
struct b_req {
	enum b_kind	 kind;
	uint32_t	 stream;	/* chat stream or long prompt index */
	uint32_t	 prompt_len;
	uint32_t	 output_len;
	double		 arrival_s;	/* planned send time (open loop) */
	struct phased_conn *conn;
	struct bh_conn	*http;		/* --url */
	uint64_t	 id;
	int		 done;
	int		 cancelled;	/* by the bench, at the end of a scenario */
	uint64_t	 send_ns;	/* since the start of the run */
	uint64_t	 done_ns;
	uint64_t	*tok_ns;	/* client time of each token */
	uint64_t	*tok_us;	/* daemon t_us of each token */
	size_t		 n_tok, cap_tok;
	char		*finish;	/* finish reason, or "error" */
	char		*error;
	uint32_t	 d_prompt_tokens;	/* the daemon's Timings */
	uint32_t	 d_output_tokens;
	double		 d_queue_ms, d_prompt_ms, d_ttft_ms, d_e2e_ms;
};

/* The run. */
struct bench {
	struct ctl	*ctl;
	struct b_opts	*o;
	uint64_t	 rng;
	int32_t		*corpus;	/* prompt token stream */
	size_t		 n_corpus;
	int		 from_text;	/* corpus is tokenized text */
	uint32_t	 n_vocab;
	struct b_range	*lengths;	/* --lengths-file: prompt lo, output hi */
	size_t		 n_lengths;
	struct b_req	**reqs;
	size_t		 n_reqs, cap_reqs;
	struct phased_conn **idle;	/* connections free for reuse */
	size_t		 n_idle;
	struct b_req	*inflight[B_MAX_INFLIGHT];
	size_t		 n_inflight;
	uint64_t	 t0;
	uint64_t	 end_ns;	/* last Done */
	int		 chat_busy[256];
	uint32_t	 longs_sent, longs_done;
	int		 chats_cancelled;
	uint64_t	 out_tokens;	/* for the progress line */
	int		 aborted;
};

/* A fixed list of common English words for the paragraph generator. */
static const char *const b_words[] = {
	"the", "a", "little", "girl", "boy", "dog", "cat", "bird", "tree",
	"house", "garden", "river", "sun", "moon", "day", "night", "morning",
	"friend", "mother", "father", "teacher", "town", "road", "school",
	"ball", "book", "box", "flower", "water", "light", "window", "door",
	"happy", "sad", "big", "small", "old", "new", "red", "blue", "green",
	"quiet", "bright", "warm", "cold", "kind", "brave", "tired", "busy",
	"walked", "ran", "saw", "found", "made", "gave", "took", "looked",
	"played", "wanted", "liked", "said", "asked", "helped", "opened",
	"carried", "watched", "heard", "thought", "smiled", "laughed",
	"and", "but", "then", "so", "because", "when", "after", "before",
	"with", "to", "from", "into", "under", "over", "near", "behind",
	"every", "some", "many", "one", "two", "three", "very", "again",
	"together", "slowly", "quickly", "soon", "always", "never", "there",
	"he", "she", "they", "we", "it", "his", "her", "their", "our",
};
#define B_N_WORDS	(sizeof b_words / sizeof b_words[0])

/* Advance the generator and return 64 random bits (splitmix64). */
static uint64_t
b_rand(struct bench *b)
{
	uint64_t	z;

	z = (b->rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/* A uniform double in (0, 1). */
static double
b_unif(struct bench *b)
{
	return (((b_rand(b) >> 11) + 0.5) / 9007199254740992.0);
}

/* A standard normal deviate (Box-Muller). */
static double
b_normal(struct bench *b)
{
	return (sqrt(-2 * log(b_unif(b))) * cos(2 * M_PI * b_unif(b)));
}

/* A gamma deviate of shape k and scale 1 (Marsaglia and Tsang). */
static double
b_gamma(struct bench *b, double k)
{
	double	d, c, x, v, u;

	if (k < 1)	/* boost: G(k) = G(k + 1) * U^(1/k) */
		return (b_gamma(b, k + 1) * pow(b_unif(b), 1 / k));
	d = k - 1.0 / 3;
	c = 1 / sqrt(9 * d);
	for (;;) {
		do {
			x = b_normal(b);
			v = 1 + c * x;
		} while (v <= 0);
		v = v * v * v;
		u = b_unif(b);
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return (d * v);
	}
}

/* A length drawn from a range. */
static uint32_t
b_pick(struct bench *b, const struct b_range *r)
{
	if (r->hi <= r->lo)
		return (r->lo);
	return (r->lo + (uint32_t)(b_rand(b) % (r->hi - r->lo + 1)));
}

/* Parse N or A-B into a range of lengths in [min, B_MAX_TOKENS]. */
static int
b_parse_range(const char *opt, const char *v, uint32_t min, struct b_range *r)
{
	long long	 lo, hi;
	const char	*dash;
	char		*s, *cause = NULL;
	int		 rc = 0;

	if ((dash = strchr(v, '-')) == NULL) {
		if (parse_int(v, min, B_MAX_TOKENS, &lo, opt, &cause) != 0)
			goto fail;
		r->lo = r->hi = (uint32_t)lo;
		return (0);
	}
	s = xstrndup(v, (size_t)(dash - v));
	rc = parse_int(s, min, B_MAX_TOKENS, &lo, opt, &cause);
	free(s);
	if (rc != 0 || parse_int(dash + 1, lo, B_MAX_TOKENS, &hi, opt,
	    &cause) != 0)
		goto fail;
	r->lo = (uint32_t)lo;
	r->hi = (uint32_t)hi;
	return (0);
fail:
	ctl_fail_cause(cause);
	return (-1);
}

/* Parse the command line into o; -1 after printing a usage error. */
static int
b_parse(int argc, char **argv, struct b_opts *o)
{
	const char	*a, *v;
	int		 i, have_rate = 0, have_conc = 0, have_burst = 0;

	memset(o, 0, sizeof *o);
	o->concurrency = 1;
	o->burstiness = 1;
	o->prompt_len = (struct b_range){ 128, 128 };
	o->output_len = (struct b_range){ 64, 64 };
	o->seed = 1;
	o->chats = 2;
	o->chat_output = 128;
	o->chat_prompt_len = 32;
	o->long_prompt_len = 700;
	o->long_output = 8;
	o->long_every = 10;
	o->long_count = 3;
	if (argc < 1 || argv[0][0] == '-') {
		ctl_fail(CTL_EUSAGE, "%s", B_USAGE);
		return (-1);
	}
	o->model = argv[0];
	for (i = 1; i < argc; i++) {
		a = argv[i];
		if (strcmp(a, "--quiet") == 0) {
			o->quiet = 1;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			ctl_fail(CTL_EUSAGE, "%s\nPrompts are windows of "
			    "English text tokenized with the model file the "
			    "daemon loaded (or --model-file); when it cannot "
			    "be read, a phrase of token ids drawn from "
			    "100..n_vocab is repeated.", B_USAGE);
			return (-1);
		}
		if (i + 1 >= argc) {
			ctl_fail(CTL_EUSAGE, "%s needs a value\n%s", a,
			    B_USAGE);
			return (-1);
		}
		v = argv[++i];
		if (strcmp(a, "--rate") == 0) {
			o->rate = ctl_num(a, v, 1e-6, 1e6);
			have_rate = 1;
		} else if (strcmp(a, "--url") == 0) {
			char	err[512];

			if (bh_url_check(v, err, sizeof err) != 0) {
				ctl_fail(CTL_EUSAGE, "%s", err);
				return (-1);
			}
			o->url = v;
		} else if (strcmp(a, "--burstiness") == 0) {
			o->burstiness = ctl_num(a, v, 1e-3, 1e3);
			have_burst = 1;
		} else if (strcmp(a, "--concurrency") == 0) {
			o->concurrency = (uint32_t)ctl_num(a, v, 1,
			    B_MAX_INFLIGHT);
			have_conc = 1;
		} else if (strcmp(a, "--requests") == 0)
			o->requests = (uint32_t)ctl_num(a, v, 1, 1e7);
		else if (strcmp(a, "--duration") == 0)
			o->duration = ctl_num(a, v, 0.001, 1e6);
		else if (strcmp(a, "--prompt-len") == 0) {
			if (b_parse_range(a, v, 1, &o->prompt_len) != 0)
				return (-1);
		} else if (strcmp(a, "--output-len") == 0) {
			if (b_parse_range(a, v, 1, &o->output_len) != 0)
				return (-1);
		} else if (strcmp(a, "--lengths-file") == 0)
			o->lengths_file = v;
		else if (strcmp(a, "--seed") == 0)
			o->seed = (uint64_t)ctl_num(a, v, 0, 9e15);
		else if (strcmp(a, "--slo-ttft-ms") == 0)
			o->slo_ttft_ms = ctl_num(a, v, 0.001, 1e9);
		else if (strcmp(a, "--slo-tbt-ms") == 0)
			o->slo_tbt_ms = ctl_num(a, v, 0.001, 1e9);
		else if (strcmp(a, "--model-file") == 0)
			o->model_file = v;
		else if (strcmp(a, "--timeline") == 0)
			o->timeline = v;
		else if (strcmp(a, "--scenario") == 0) {
			if (strcmp(v, "interference") != 0) {
				ctl_fail(CTL_EUSAGE, "unknown scenario '%s' "
				    "(valid: interference)", v);
				return (-1);
			}
			o->mode = BM_INTERFERENCE;
		} else if (strcmp(a, "--chats") == 0)
			o->chats = (uint32_t)ctl_num(a, v, 0, 256);
		else if (strcmp(a, "--chat-output") == 0)
			o->chat_output = (uint32_t)ctl_num(a, v, 2, B_MAX_TOKENS);
		else if (strcmp(a, "--chat-prompt-len") == 0)
			o->chat_prompt_len = (uint32_t)ctl_num(a, v, 1,
			    B_MAX_TOKENS);
		else if (strcmp(a, "--long-prompt-len") == 0)
			o->long_prompt_len = (uint32_t)ctl_num(a, v, 1,
			    B_MAX_TOKENS);
		else if (strcmp(a, "--long-output") == 0)
			o->long_output = (uint32_t)ctl_num(a, v, 1, B_MAX_TOKENS);
		else if (strcmp(a, "--long-every") == 0)
			o->long_every = ctl_num(a, v, 0.001, 1e6);
		else if (strcmp(a, "--long-count") == 0)
			o->long_count = (uint32_t)ctl_num(a, v, 0, 1e6);
		else {
			ctl_fail(CTL_EUSAGE, "unknown option %s\n%s", a,
			    B_USAGE);
			return (-1);
		}
	}
	if (have_burst && !have_rate) {
		ctl_fail(CTL_EUSAGE, "--burstiness needs --rate (the mean "
		    "arrival rate)");
		return (-1);
	}
	if (have_rate && have_conc) {
		ctl_fail(CTL_EUSAGE, "--rate and --concurrency are exclusive");
		return (-1);
	}
	if (o->mode != BM_INTERFERENCE && have_rate)
		o->mode = BM_RATE;
	return (0);
}

/* Read --lengths-file: lines of "prompt_tokens output_tokens". */
static int
b_read_lengths(struct bench *b, const char *path)
{
	FILE		*f;
	char		 line[256];
	unsigned long	 p, n;
	size_t		 lineno = 0, cap = 0;
	char		 extra;

	if ((f = fopen(path, "r")) == NULL)
		return (ctl_fail(-1, "%s: %s", path, strerror(errno)));
	while (fgets(line, sizeof line, f) != NULL) {
		lineno++;
		if (line[strspn(line, " \t\r\n")] == '\0' || line[0] == '#')
			continue;
		if (sscanf(line, "%lu %lu %c", &p, &n, &extra) != 2 || p < 1 ||
		    n < 1 || p > B_MAX_TOKENS || n > B_MAX_TOKENS) {
			fclose(f);
			return (ctl_fail(-1, "%s:%zu: want \"prompt_tokens "
			    "output_tokens\" (1..%u each)", path, lineno,
			    B_MAX_TOKENS));
		}
		if (b->n_lengths == cap) {
			cap = cap ? cap * 2 : 64;
			b->lengths = xreallocarray(b->lengths, cap,
			    sizeof *b->lengths);
		}
		b->lengths[b->n_lengths++] = (struct b_range){ p, n };
	}
	fclose(f);
	if (b->n_lengths == 0)
		return (ctl_fail(-1, "%s: no lengths", path));
	return (0);
}

/* Ask the daemon about the model: vocabulary size and file path. */
static int
b_model_info(struct bench *b, char **path)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__ModelsRequest	 mr = PHASED__MODELS_REQUEST__INIT;
	Phased__Response	*r;
	Phased__ModelInfo	*mi;
	size_t			 i;
	int			 rc;

	*path = NULL;
	req.body_case = PHASED__REQUEST__BODY_MODELS;
	req.models = &mr;
	r = ctl_call(b->ctl, &req);
	if ((rc = ctl_check_error(b->ctl, r)) != -1) {
		phased_response_free(r);
		return (-1);
	}
	for (i = 0; i < r->models->n_models; i++) {
		mi = r->models->models[i];
		if (strcmp(mi->name, b->o->model) != 0)
			continue;
		b->n_vocab = mi->has_n_vocab ? mi->n_vocab : 0;
		if (mi->path != NULL)
			*path = xstrdup(mi->path);
		phased_response_free(r);
		return (0);
	}
	phased_response_free(r);
	return (ctl_fail(-1, "model '%s' is not loaded", b->o->model));
}

/* Write n_words of generated English paragraphs into a new string. */
static char *
b_paragraphs(struct bench *b, size_t n_words)
{
	char		*s;
	size_t		 len = 0, cap = n_words * 12 + 16, i, w;
	const char	*word;
	int		 cap_next = 1;

	s = xmalloc(cap);
	for (i = 0; i < n_words; i++) {
		word = b_words[b_rand(b) % B_N_WORDS];
		w = strlen(word);
		if (len + w + 4 >= cap) {
			cap *= 2;
			s = xreallocarray(s, cap, 1);
		}
		if (i > 0)
			s[len++] = ' ';
		memcpy(s + len, word, w);
		if (cap_next && s[len] >= 'a' && s[len] <= 'z')
			s[len] -= 'a' - 'A';
		len += w;
		cap_next = 0;
		/* Sentences of about nine words, paragraphs of five. */
		if (b_rand(b) % 9 == 0) {
			s[len++] = '.';
			cap_next = 1;
			if (b_rand(b) % 5 == 0)
				s[len++] = '\n';
		} else if (b_rand(b) % 12 == 0)
			s[len++] = ',';
	}
	s[len++] = '.';
	s[len] = '\0';
	return (s);
}

/* Build the prompt token stream, at least want tokens long. */
static void
b_corpus(struct bench *b, const char *path, size_t want)
{
	struct gguf_file	*gf;
	struct tokenizer	*t = NULL;
	char			*text, *cause = NULL;
	size_t			 n, i;
	int32_t			*ids = NULL;
	static const int32_t	 phrase[] = { 17, 5, 42, 9, 101, 3, 77, 12, 250,
	    31, 8, 64, 199, 2, 55, 23 };

	if (want < 1024)
		want = 1024;
	if (path != NULL) {
		if ((gf = gguf_open(path, &cause)) != NULL) {
			t = tokenizer_load(gf, &cause);
			gguf_close(gf);
		}
		if (t == NULL) {
			if (!b->o->quiet)
				fprintf(stderr, "phasectl: %s: %s; using "
				    "synthetic token ids\n", path, cause);
			free(cause);
			cause = NULL;
		}
	}
	if (t != NULL) {
		/* Most words are one or two tokens: want words is enough. */
		text = b_paragraphs(b, want);
		if (tokenizer_encode(t, text, strlen(text), 0, 0, &ids, &n,
		    &cause) == 0 && n > 0) {
			b->corpus = ids;
			b->n_corpus = n;
			b->from_text = 1;
			if (b->n_vocab == 0)
				b->n_vocab = (uint32_t)tokenizer_n_vocab(t);
		} else {
			free(cause);
			free(ids);
		}
		free(text);
		tokenizer_free(t);
		if (b->from_text)
			return;
	}
	/* A repeated phrase of ids in 100..n_vocab (or the raw phrase). */
	b->n_corpus = 16;
	b->corpus = xcalloc(b->n_corpus, sizeof *b->corpus);
	for (i = 0; i < b->n_corpus; i++)
		b->corpus[i] = b->n_vocab > 200 ? 100 + (int32_t)((uint32_t)
		    phrase[i] * 7919 % (b->n_vocab - 100)) : phrase[i] %
		    (b->n_vocab > 0 ? (int32_t)b->n_vocab : 256);
}

/* Open a connection to the daemon, or reuse an idle one. */
static struct phased_conn *
b_conn(struct bench *b, char *err, size_t errlen)
{
	struct phased_conn	*c;
	Phased__HelloReply	*hr = NULL;

	if (b->n_idle > 0)
		return (b->idle[--b->n_idle]);
	if ((c = phased_connect(b->ctl->socket, err, errlen)) == NULL)
		return (NULL);
	if (phased_hello(c, "phasectl-bench", &hr, err, errlen) != 0) {
		phased_close(c);
		return (NULL);
	}
	if (hr != NULL)
		phased__hello_reply__free_unpacked(hr, NULL);
	return (c);
}

/* Make a new request record and add it to the run. */
static struct b_req *
b_new(struct bench *b, enum b_kind kind, uint32_t stream, uint32_t plen,
    uint32_t olen)
{
	struct b_req	*r;

	if (b->n_reqs == b->cap_reqs) {
		b->cap_reqs = b->cap_reqs ? b->cap_reqs * 2 : 64;
		b->reqs = xreallocarray(b->reqs, b->cap_reqs, sizeof *b->reqs);
	}
	r = xcalloc(1, sizeof *r);
	r->kind = kind;
	r->stream = stream;
	r->prompt_len = plen;
	r->output_len = olen;
	b->reqs[b->n_reqs++] = r;
	return (r);
}

/* Make a normal request with lengths from the options or the file. */
static struct b_req *
b_new_normal(struct bench *b)
{
	const struct b_range	*l;

	if (b->n_lengths > 0) {
		l = &b->lengths[b->n_reqs % b->n_lengths];
		return (b_new(b, BK_NORMAL, 0, l->lo, l->hi));
	}
	return (b_new(b, BK_NORMAL, 0, b_pick(b, &b->o->prompt_len),
	    b_pick(b, &b->o->output_len)));
}

/* End a request: record why and when, and free its connection. */
static void
b_finish(struct bench *b, struct b_req *r, const char *finish,
    const char *error, int conn_ok)
{
	size_t	i;

	r->done = 1;
	r->done_ns = now_ns() - b->t0;
	if (r->done_ns > b->end_ns)
		b->end_ns = r->done_ns;
	r->finish = xstrdup(finish);
	if (error != NULL)
		r->error = xstrdup(error);
	if (r->http != NULL) {
		bh_close(r->http);
		r->http = NULL;
	} else if (conn_ok) {
		b->idle = xreallocarray(b->idle, b->n_idle + 1,
		    sizeof *b->idle);
		b->idle[b->n_idle++] = r->conn;
	} else if (r->conn != NULL)
		phased_close(r->conn);
	r->conn = NULL;
	for (i = 0; i < b->n_inflight; i++) {
		if (b->inflight[i] == r) {
			b->inflight[i] = b->inflight[--b->n_inflight];
			break;
		}
	}
	if (r->kind == BK_CHAT) {
		b->chat_busy[r->stream] = 0;
		/* A failing chat would be restarted at once, forever. */
		if (strcmp(finish, "error") == 0)
			b->aborted = 1;
	} else if (r->kind == BK_LONG)
		b->longs_done++;
}

/* Send a request with a prompt window from the corpus. */
static void
b_send(struct bench *b, struct b_req *r)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__GenerateRequest	 gr = PHASED__GENERATE_REQUEST__INIT;
	int32_t			*ids;
	size_t			 i, start;
	char			 err[512];

	ids = xreallocarray(NULL, r->prompt_len, sizeof *ids);
	start = b_rand(b) % b->n_corpus;
	for (i = 0; i < r->prompt_len; i++)
		ids[i] = b->corpus[(start + i) % b->n_corpus];
	gr.model = (char *)b->o->model;
	gr.prompt = (char *)"";
	gr.n_prompt_tokens = r->prompt_len;
	gr.prompt_tokens = ids;
	gr.has_add_bos = 1;
	gr.add_bos = 0;
	gr.has_max_tokens = 1;
	gr.max_tokens = r->output_len;
	gr.has_temperature = 1;
	gr.temperature = 0;
	req.body_case = PHASED__REQUEST__BODY_GENERATE;
	req.generate = &gr;
	r->send_ns = now_ns() - b->t0;	/* replaced once connected */
	b->inflight[b->n_inflight++] = r;
	if (r->kind == BK_CHAT)
		b->chat_busy[r->stream] = 1;
	else if (r->kind == BK_LONG)
		b->longs_sent++;
	if (b->o->url != NULL) {
		r->send_ns = now_ns() - b->t0;
		r->http = bh_send(b->o->url, b->o->model, ids, r->prompt_len,
		    r->output_len, err, sizeof err);
		if (r->http != NULL) {
			free(ids);
			return;
		}
	} else if ((r->conn = b_conn(b, err, sizeof err)) != NULL) {
		r->id = phased_next_id(r->conn);
		req.id = r->id;
		r->send_ns = now_ns() - b->t0;
		if (phased_send(r->conn, &req, err, sizeof err) == 0) {
			free(ids);
			return;
		}
	}
	/* Not sent: the daemon is unreachable, so send nothing more. */
	free(ids);
	b_finish(b, r, "error", err, 0);
	b->aborted = 1;
}

/* Record one token event. */
static void
b_token(struct bench *b, struct b_req *r, const Phased__TokenEvent *t,
    uint64_t at)
{
	if (r->n_tok == r->cap_tok) {
		r->cap_tok = r->cap_tok ? r->cap_tok * 2 : 64;
		r->tok_ns = xreallocarray(r->tok_ns, r->cap_tok,
		    sizeof *r->tok_ns);
		r->tok_us = xreallocarray(r->tok_us, r->cap_tok,
		    sizeof *r->tok_us);
	}
	r->tok_ns[r->n_tok] = at;
	r->tok_us[r->n_tok] = t->t_us;
	r->n_tok++;
	b->out_tokens++;
}

/* Read what an HTTP server sent for a request and act on it. */
static void
b_read_http(struct bench *b, struct b_req *r)
{
	Phased__TokenEvent	 te = PHASED__TOKEN_EVENT__INIT;
	struct bh_result	 hr;
	uint64_t		 at;
	uint32_t		 i;

	bh_read(r->http, &hr);
	at = now_ns() - b->t0;
	/* No server times per token: the daemon's view is the client's. */
	te.t_us = (at - r->send_ns) / 1000;
	for (i = 0; i < hr.n_tokens; i++)
		b_token(b, r, &te, at);
	if (!hr.done)
		return;
	r->d_prompt_tokens = hr.prompt_tokens != 0 ? hr.prompt_tokens :
	    r->prompt_len;
	r->d_output_tokens = hr.output_tokens != 0 ? hr.output_tokens :
	    (uint32_t)r->n_tok;
	r->d_queue_ms = hr.queue_ms;
	r->d_prompt_ms = hr.prompt_ms;
	r->d_ttft_ms = hr.ttft_ms;
	r->d_e2e_ms = hr.e2e_ms;
	b_finish(b, r, hr.finish[0] != '\0' ? hr.finish : "stop",
	    hr.error[0] != '\0' ? hr.error : NULL, 1);
}

/* Read one frame for an in-flight request and act on it. */
static void
b_read(struct bench *b, struct b_req *r)
{
	Phased__Response	*resp;
	const Phased__Timings	*t;
	char			 err[512];
	uint64_t		 at;

	if (r->http != NULL) {
		b_read_http(b, r);
		return;
	}
	if (phased_recv(r->conn, &resp, err, sizeof err) != 0) {
		b_finish(b, r, "error", err, 0);
		return;
	}
	at = now_ns() - b->t0;
	if (resp->id != r->id) {
		if (resp->body_case == PHASED__RESPONSE__BODY_NOTICE &&
		    resp->notice->shutting_down) {
			b->aborted = 1;
			b_finish(b, r, "error", "daemon is shutting down", 0);
		}
		phased_response_free(resp);
		return;
	}
	switch (resp->body_case) {
	case PHASED__RESPONSE__BODY_TOKEN:
		b_token(b, r, resp->token, at);
		break;
	case PHASED__RESPONSE__BODY_DONE:
		t = resp->done->timings;
		r->d_prompt_tokens = t->prompt_tokens;
		r->d_output_tokens = t->output_tokens;
		r->d_queue_ms = t->queue_ms;
		r->d_prompt_ms = t->prompt_ms;
		r->d_ttft_ms = t->ttft_ms;
		r->d_e2e_ms = t->e2e_ms;
		if (strcmp(resp->done->finish_reason, "error") == 0) {
			snprintf(err, sizeof err, "generation failed: %s",
			    resp->done->error != NULL ? resp->done->error :
			    "no reason given");
			b_finish(b, r, "error", err, 1);
		} else
			b_finish(b, r, resp->done->finish_reason, NULL, 1);
		break;
	case PHASED__RESPONSE__BODY_ERROR:
		snprintf(err, sizeof err, "daemon error (%s): %s",
		    phased_error_name(resp->error->code), resp->error->message);
		b_finish(b, r, "error", err, 1);
		break;
	default:
		b_finish(b, r, "error", "unexpected reply", 0);
		break;
	}
	phased_response_free(resp);
}

/* Whether fd has a frame waiting now. */
static int
b_readable(int fd)
{
	struct pollfd	pfd = { .fd = fd, .events = POLLIN };

	return (poll(&pfd, 1, 0) > 0);
}

/* The planned send time of the next open-loop request, in seconds. */
static double
b_next_arrival(struct bench *b, double prev)
{
	double	mean = 1 / b->o->rate, k = b->o->burstiness;

	if (k == 1)
		return (prev - log(b_unif(b)) * mean);
	return (prev + b_gamma(b, k) * mean / k);
}

/* Print the one-line progress report. */
static void
b_progress(struct bench *b, double now_s)
{
	size_t	i, done = 0, errors = 0;

	for (i = 0; i < b->n_reqs; i++) {
		if (b->reqs[i]->done) {
			done++;
			if (strcmp(b->reqs[i]->finish, "error") == 0)
				errors++;
		}
	}
	fprintf(stderr, "bench: %6.1fs sent %zu done %zu in flight %zu "
	    "output tokens %" PRIu64 " (%.1f/s) errors %zu\n", now_s,
	    b->n_reqs, done, b->n_inflight, b->out_tokens,
	    now_s > 0 ? b->out_tokens / now_s : 0.0, errors);
}

/*
 * Cancel the chats still decoding once the last long prompt is answered:
 * what they would add is decoding alone, which the scenario is not about.
 * Their tokens so far still count.
 */
static void
b_cancel_chats(struct bench *b)
{
	Phased__Request	 req = PHASED__REQUEST__INIT;
	Phased__Cancel	 cr = PHASED__CANCEL__INIT;
	struct b_req	*r;
	char		 err[512];
	size_t		 i;

	b->chats_cancelled = 1;
	for (i = 0; i < b->n_inflight; i++) {
		r = b->inflight[i];
		if (r->kind != BK_CHAT)
			continue;
		if (r->http != NULL) {
			/* Closing the connection cancels on the server. */
			r->cancelled = 1;
			b_finish(b, r, "cancelled", NULL, 1);
			i--;
			continue;
		}
		cr.target = r->id;
		req.id = phased_next_id(r->conn);
		req.body_case = PHASED__REQUEST__BODY_CANCEL;
		req.cancel = &cr;
		if (phased_send(r->conn, &req, err, sizeof err) == 0)
			r->cancelled = 1;
	}
}

/* Send whatever is due now; return seconds until the next send, or -1. */
static double
b_launch(struct bench *b, double now_s, double *next_arrival)
{
	struct b_opts	*o = b->o;
	struct b_req	*r;
	double		 due;
	uint32_t	 k;

	switch (o->mode) {
	case BM_CONCURRENCY:
		while (b->n_inflight < o->concurrency && !b->aborted &&
		    (o->requests == 0 || b->n_reqs < o->requests) &&
		    (o->duration == 0 || now_s < o->duration))
			b_send(b, b_new_normal(b));
		return (-1);
	case BM_RATE:
		while (!b->aborted && *next_arrival <= now_s &&
		    (o->requests == 0 || b->n_reqs < o->requests) &&
		    (o->duration == 0 || *next_arrival < o->duration) &&
		    b->n_inflight < B_MAX_INFLIGHT) {
			r = b_new_normal(b);
			r->arrival_s = *next_arrival;
			b_send(b, r);
			*next_arrival = b_next_arrival(b, *next_arrival);
		}
		if ((o->requests != 0 && b->n_reqs >= o->requests) ||
		    (o->duration != 0 && *next_arrival >= o->duration))
			return (-1);
		return (*next_arrival - now_s);
	case BM_INTERFERENCE:
		if (b->aborted)
			return (-1);
		while (b->longs_sent < o->long_count &&
		    (due = (b->longs_sent + 1) * o->long_every) <= now_s) {
			r = b_new(b, BK_LONG, b->longs_sent,
			    o->long_prompt_len, o->long_output);
			r->arrival_s = due;
			b_send(b, r);
		}
		/* The chats keep decoding until every long prompt is done. */
		if (b->longs_done >= o->long_count) {
			if (!b->chats_cancelled)
				b_cancel_chats(b);
		} else {
			for (k = 0; k < o->chats; k++)
				if (!b->chat_busy[k])
					b_send(b, b_new(b, BK_CHAT, k,
					    o->chat_prompt_len,
					    o->chat_output));
		}
		if (b->longs_sent < o->long_count)
			return ((b->longs_sent + 1) * o->long_every - now_s);
		return (-1);
	}
	return (-1);
}

/* Run the workload until every request is done. */
static void
b_run(struct bench *b)
{
	struct pollfd	*pfd;
	struct b_req	*snap[B_MAX_INFLIGHT];
	double		 now_s, wait, next_arrival = 0, next_progress = 1;
	size_t		 i, n;
	int		 timeout, frames;

	pfd = xcalloc(B_MAX_INFLIGHT, sizeof *pfd);
	b->t0 = now_ns();
	for (;;) {
		now_s = (now_ns() - b->t0) / 1e9;
		wait = b_launch(b, now_s, &next_arrival);
		if (b->n_inflight == 0 && wait < 0)
			break;
		if (now_s >= next_progress) {
			if (!b->o->quiet)
				b_progress(b, now_s);
			next_progress = floor(now_s) + 1;
		}
		if (wait < 0 || wait > next_progress - now_s)
			wait = next_progress - now_s;
		timeout = (int)ceil(wait * 1000);
		if (timeout < 0)
			timeout = 0;
		n = b->n_inflight;
		memcpy(snap, b->inflight, n * sizeof *snap);
		for (i = 0; i < n; i++) {
			pfd[i].fd = snap[i]->http != NULL ?
			    bh_fd(snap[i]->http) : phased_fd(snap[i]->conn);
			pfd[i].events = POLLIN;
			pfd[i].revents = 0;
		}
		if (poll(pfd, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			exit(ctl_fail(CTL_EUSAGE, "poll: %s", strerror(errno)));
		}
		for (i = 0; i < n; i++) {
			if (pfd[i].revents == 0)
				continue;
			/* Drain what is there so token times stay exact. */
			frames = 0;
			do {
				b_read(b, snap[i]);
			} while (!snap[i]->done && snap[i]->http == NULL &&
			    ++frames < B_FRAMES_PER_FD && b_readable(pfd[i].fd));
		}
	}
	free(pfd);
}

/* Summary statistics of a sample. */
struct b_stat {
	size_t	n;
	double	mean, p50, p90, p99, max, min;
};

/* Compare doubles for qsort. */
static int
b_cmp(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return ((x > y) - (x < y));
}

/* Sort v and summarize it (nearest-rank percentiles). */
static struct b_stat
b_stats(double *v, size_t n)
{
	struct b_stat	s = { 0 };
	size_t		i;

	if (n == 0)
		return (s);
	qsort(v, n, sizeof *v, b_cmp);
	s.n = n;
	for (i = 0; i < n; i++)
		s.mean += v[i];
	s.mean /= n;
#define B_PCT(p)	v[(size_t)ceil((p) / 100.0 * n) - 1]
	s.p50 = B_PCT(50);
	s.p90 = B_PCT(90);
	s.p99 = B_PCT(99);
#undef B_PCT
	s.min = v[0];
	s.max = v[n - 1];
	return (s);
}

/* A growable sample of doubles. */
struct b_vec {
	double	*v;
	size_t	 n, cap;
};

/* Append x to a sample. */
static void
b_push(struct b_vec *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->v = xreallocarray(s->v, s->cap, sizeof *s->v);
	}
	s->v[s->n++] = x;
}

/* Whether a request ended normally. */
static int
b_ok(const struct b_req *r)
{
	return (r->done && strcmp(r->finish, "error") != 0 &&
	    (strcmp(r->finish, "cancelled") != 0 || r->cancelled));
}

/* The largest gap between two tokens of r, in ms. */
static double
b_max_tbt(const struct b_req *r)
{
	double	m = 0, d;
	size_t	i;

	for (i = 1; i < r->n_tok; i++) {
		d = (r->tok_ns[i] - r->tok_ns[i - 1]) / 1e6;
		if (d > m)
			m = d;
	}
	return (m);
}

/*
 * The gaps a chat stream's user sees: between successive tokens of the
 * stream across its requests, so the wait for the first token of each new
 * turn counts too; a last request cancelled before any token adds the wait
 * from the stream's last token to the cancel.
 */
static void
b_stream_gaps(struct bench *b, struct b_vec *gaps)
{
	struct b_req	*r;
	uint32_t	 k;
	uint64_t	 last;
	size_t		 i, j;
	int		 have;

	for (k = 0; k < b->o->chats; k++) {
		have = 0;
		last = 0;
		for (i = 0; i < b->n_reqs; i++) {
			r = b->reqs[i];
			if (r->kind != BK_CHAT || r->stream != k || !b_ok(r))
				continue;
			for (j = 0; j < r->n_tok; j++) {
				if (have)
					b_push(gaps, (r->tok_ns[j] - last) / 1e6);
				last = r->tok_ns[j];
				have = 1;
			}
			if (r->n_tok == 0 && r->cancelled && have)
				b_push(gaps, (r->done_ns - last) / 1e6);
		}
	}
}

/* Print one statistics row, as text or as a JSON member. */
static void
b_print_stat(int json, const char *name, struct b_stat s, int *first)
{
	if (json) {
		printf("%s\"%s\":{\"n\":%zu,\"mean\":%.3f,\"p50\":%.3f,"
		    "\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f}", *first ? "" :
		    ",", name, s.n, s.mean, s.p50, s.p90, s.p99, s.max);
		*first = 0;
	} else if (s.n == 0)
		printf("%-16s %9s\n", name, "-");
	else
		printf("%-16s %9.2f %9.2f %9.2f %9.2f %9.2f %8zu\n", name,
		    s.mean, s.p50, s.p90, s.p99, s.max, s.n);
}

/* Collect the samples and print the report. */
static int
b_report(struct bench *b)
{
	struct b_opts	*o = b->o;
	struct b_vec	 ttft = { 0 }, tbt = { 0 }, tpot = { 0 }, e2e = { 0 };
	struct b_vec	 dttft = { 0 }, dtbt = { 0 }, ctbt = { 0 };
	struct b_vec	 lttft = { 0 }, dqueue = { 0 }, cttft = { 0 };
	struct b_vec	 cgap = { 0 };
	struct b_req	*r;
	const char	*reasons[16];
	size_t		 counts[16], n_reasons = 0, i, j, ok = 0, errors = 0;
	size_t		 good = 0, n_long = 0;
	uint64_t	 p_tok = 0, o_tok = 0, start = UINT64_MAX;
	double		 dur, x;
	int		 json = b->ctl->json, first = 1;
	const char	*mode;

	for (i = 0; i < b->n_reqs; i++) {
		r = b->reqs[i];
		if (r->send_ns < start)
			start = r->send_ns;
		for (j = 0; j < n_reasons; j++)
			if (strcmp(reasons[j], r->finish) == 0)
				break;
		if (j == n_reasons && n_reasons < 16) {
			reasons[n_reasons] = r->finish;
			counts[n_reasons++] = 0;
		}
		if (j < n_reasons)
			counts[j]++;
		if (!b_ok(r)) {
			errors++;
			continue;
		}
		ok++;
		p_tok += r->d_prompt_tokens;
		o_tok += r->n_tok;
		b_push(&e2e, (r->done_ns - r->send_ns) / 1e6);
		b_push(&dqueue, r->d_queue_ms);
		if (r->n_tok > 0) {
			x = (r->tok_ns[0] - r->send_ns) / 1e6;
			b_push(&ttft, x);
			b_push(&dttft, r->tok_us[0] / 1e3);
			if (r->kind == BK_LONG)
				b_push(&lttft, x);
			else if (r->kind == BK_CHAT)
				b_push(&cttft, x);
		}
		if (r->kind == BK_LONG)
			n_long++;
		if (r->n_tok > 1)
			b_push(&tpot, (r->tok_ns[r->n_tok - 1] - r->tok_ns[0]) /
			    1e6 / (r->n_tok - 1));
		for (j = 1; j < r->n_tok; j++) {
			x = (r->tok_ns[j] - r->tok_ns[j - 1]) / 1e6;
			b_push(&tbt, x);
			b_push(&dtbt, (r->tok_us[j] - r->tok_us[j - 1]) / 1e3);
			if (r->kind == BK_CHAT)
				b_push(&ctbt, x);
		}
		/* Goodput: TTFT and every token gap within the SLOs. */
		if (r->n_tok > 0 && (o->slo_ttft_ms == 0 ||
		    (r->tok_ns[0] - r->send_ns) / 1e6 <= o->slo_ttft_ms) &&
		    (o->slo_tbt_ms == 0 || b_max_tbt(r) <= o->slo_tbt_ms))
			good++;
	}
	if (start == UINT64_MAX)
		start = 0;
	dur = b->end_ns > start ? (b->end_ns - start) / 1e9 : 0;
	mode = o->mode == BM_INTERFERENCE ? "interference" : o->mode ==
	    BM_RATE ? (o->burstiness == 1 ? "poisson" : "gamma") :
	    "concurrency";
	if (json) {
		printf("{\"model\":");
		json_str(stdout, o->model);
		printf(",\"mode\":\"%s\",\"prompt_source\":\"%s\","
		    "\"requests\":%zu,\"completed\":%zu,\"errors\":%zu,"
		    "\"finish_reasons\":{", mode, b->from_text ? "text" :
		    "synthetic", b->n_reqs, ok, errors);
		for (j = 0; j < n_reasons; j++) {
			printf("%s", j ? "," : "");
			json_str(stdout, reasons[j]);
			printf(":%zu", counts[j]);
		}
		printf("},\"duration_s\":%.3f,\"request_throughput\":%.4f,"
		    "\"prompt_tokens\":%" PRIu64 ",\"output_tokens\":%" PRIu64
		    ",\"prompt_tps\":%.2f,\"output_tps\":%.2f,"
		    "\"goodput\":%.4f,\"slo_ttft_ms\":%.3f,\"slo_tbt_ms\":%.3f,",
		    dur, dur > 0 ? ok / dur : 0, p_tok, o_tok,
		    dur > 0 ? p_tok / dur : 0, dur > 0 ? o_tok / dur : 0,
		    dur > 0 ? good / dur : 0, o->slo_ttft_ms, o->slo_tbt_ms);
		if (o->mode == BM_RATE)
			printf("\"rate\":%.4f,\"burstiness\":%.4f,", o->rate,
			    o->burstiness);
		else if (o->mode == BM_CONCURRENCY)
			printf("\"concurrency\":%u,", o->concurrency);
		printf("\"latency_ms\":{");
	} else {
		printf("model %s, %s load, prompts from %s\n", o->model, mode,
		    b->from_text ? "tokenized text" : "synthetic token ids");
		printf("requests %zu: %zu completed, %zu errors (", b->n_reqs,
		    ok, errors);
		for (j = 0; j < n_reasons; j++)
			printf("%s%s %zu", j ? ", " : "", reasons[j],
			    counts[j]);
		printf(")\nduration %.3f s\n", dur);
		printf("throughput %.3f requests/s, prompt %.1f tokens/s, "
		    "output %.1f tokens/s\n", dur > 0 ? ok / dur : 0,
		    dur > 0 ? p_tok / dur : 0, dur > 0 ? o_tok / dur : 0);
		printf("goodput %.3f requests/s (SLO: TTFT <= ", dur > 0 ?
		    good / dur : 0);
		if (o->slo_ttft_ms > 0)
			printf("%.1f ms", o->slo_ttft_ms);
		else
			printf("any");
		printf(", every TBT <= ");
		if (o->slo_tbt_ms > 0)
			printf("%.1f ms)\n", o->slo_tbt_ms);
		else
			printf("any)\n");
		printf("tokens: prompt %" PRIu64 ", output %" PRIu64 "\n",
		    p_tok, o_tok);
		printf("%-16s %9s %9s %9s %9s %9s %8s\n", "ms", "mean", "p50",
		    "p90", "p99", "max", "n");
	}
	b_print_stat(json, "ttft", b_stats(ttft.v, ttft.n), &first);
	b_print_stat(json, "tbt", b_stats(tbt.v, tbt.n), &first);
	b_print_stat(json, "tpot", b_stats(tpot.v, tpot.n), &first);
	b_print_stat(json, "e2e", b_stats(e2e.v, e2e.n), &first);
	b_print_stat(json, "daemon_ttft", b_stats(dttft.v, dttft.n), &first);
	b_print_stat(json, "daemon_tbt", b_stats(dtbt.v, dtbt.n), &first);
	b_print_stat(json, "daemon_queue", b_stats(dqueue.v, dqueue.n),
	    &first);
	if (json)
		printf("}");
	if (o->mode == BM_INTERFERENCE) {
		first = 1;
		if (json)
			printf(",\"interference\":{\"chats\":%u,"
			    "\"chat_output\":%u,\"long_prompt_len\":%u,"
			    "\"long_every_s\":%.3f,\"long_count\":%u,"
			    "\"long_completed\":%zu,", o->chats,
			    o->chat_output, o->long_prompt_len,
			    o->long_every, o->long_count, n_long);
		else
			printf("interference: %u chats of %u tokens, %zu of %u "
			    "long prompts of %u tokens every %.1f s\n",
			    o->chats, o->chat_output, n_long, o->long_count,
			    o->long_prompt_len, o->long_every);
		b_stream_gaps(b, &cgap);
		b_print_stat(json, "chat_tbt", b_stats(ctbt.v, ctbt.n), &first);
		b_print_stat(json, "chat_ttft", b_stats(cttft.v, cttft.n),
		    &first);
		b_print_stat(json, "chat_stream_gap", b_stats(cgap.v, cgap.n),
		    &first);
		b_print_stat(json, "long_ttft", b_stats(lttft.v, lttft.n),
		    &first);
		if (json)
			printf("}");
	}
	if (json)
		printf("}\n");
	free(ttft.v);
	free(tbt.v);
	free(tpot.v);
	free(e2e.v);
	free(dttft.v);
	free(dtbt.v);
	free(ctbt.v);
	free(lttft.v);
	free(cttft.v);
	free(cgap.v);
	free(dqueue.v);
	if (fflush(stdout) != 0)
		return (ctl_fail(CTL_EUSAGE, "write error"));
	return (errors > 0 ? CTL_EDAEMON : CTL_OK);
}

/* Write every request's token times as one JSON object to path. */
static int
b_timeline(struct bench *b, const char *path)
{
	FILE		*f;
	struct b_req	*r;
	size_t		 i, j;
	static const char *const kinds[] = { "normal", "chat", "long" };

	if ((f = fopen(path, "w")) == NULL)
		return (ctl_fail(-1, "%s: %s", path, strerror(errno)));
	fprintf(f, "{\"model\":");
	json_str(f, b->o->model);
	fprintf(f, ",\"requests\":[\n");
	for (i = 0; i < b->n_reqs; i++) {
		r = b->reqs[i];
		fprintf(f, "%s{\"kind\":\"%s\",\"stream\":%u,"
		    "\"prompt_tokens\":%u,\"output_len\":%u,\"finish\":",
		    i ? ",\n" : "", kinds[r->kind], r->stream, r->prompt_len,
		    r->output_len);
		json_str(f, r->finish != NULL ? r->finish : "none");
		fprintf(f, ",\"send_ms\":%.3f,\"done_ms\":%.3f,\"tokens_ms\":[",
		    r->send_ns / 1e6, r->done_ns / 1e6);
		for (j = 0; j < r->n_tok; j++)
			fprintf(f, "%s%.3f", j ? "," : "", r->tok_ns[j] / 1e6);
		fprintf(f, "],\"daemon_us\":[");
		for (j = 0; j < r->n_tok; j++)
			fprintf(f, "%s%" PRIu64, j ? "," : "", r->tok_us[j]);
		fprintf(f, "]}");
	}
	fprintf(f, "\n]}\n");
	if (fclose(f) != 0)
		return (ctl_fail(-1, "%s: %s", path, strerror(errno)));
	return (0);
}

/* Free everything the run holds. */
static void
b_free(struct bench *b)
{
	size_t	i;

	for (i = 0; i < b->n_reqs; i++) {
		if (b->reqs[i]->conn != NULL)
			phased_close(b->reqs[i]->conn);
		free(b->reqs[i]->tok_ns);
		free(b->reqs[i]->tok_us);
		free(b->reqs[i]->finish);
		free(b->reqs[i]->error);
		free(b->reqs[i]);
	}
	for (i = 0; i < b->n_idle; i++)
		phased_close(b->idle[i]);
	free(b->idle);
	free(b->reqs);
	free(b->corpus);
	free(b->lengths);
}

/* phasectl bench MODEL [options] */
static int
cmd_bench(struct ctl *ctl, int argc, char **argv)
{
	struct b_opts	 o;
	struct bench	 b;
	char		*path = NULL;
	size_t		 want, i;
	int		 rc;

	if (b_parse(argc, argv, &o) != 0)
		return (CTL_EUSAGE);
	memset(&b, 0, sizeof b);
	b.ctl = ctl;
	b.o = &o;
	b.rng = o.seed;
	if (o.lengths_file != NULL && b_read_lengths(&b, o.lengths_file) != 0) {
		b_free(&b);
		return (CTL_EUSAGE);
	}
	if (o.mode != BM_INTERFERENCE && o.requests == 0 && o.duration == 0)
		o.requests = b.n_lengths > 0 ? (uint32_t)b.n_lengths : 10;
	if (o.url != NULL) {
		char	err[512];

		/* Servers may name their model otherwise (llama-server). */
		if (bh_model_check(o.url, o.model, err, sizeof err) != 0)
			ctl_fail(0, "warning: %s", err);
	} else if (b_model_info(&b, &path) != 0) {
		b_free(&b);
		return (CTL_EDAEMON);
	}
	want = o.prompt_len.hi;
	if (o.long_prompt_len > want)
		want = o.long_prompt_len;
	for (i = 0; i < b.n_lengths; i++)
		if (b.lengths[i].lo > want)
			want = b.lengths[i].lo;
	b_corpus(&b, o.model_file != NULL ? o.model_file : path, 2 * want);
	free(path);
	b_run(&b);
	if (!o.quiet)
		b_progress(&b, (now_ns() - b.t0) / 1e9);
	/* Show the first daemon error, which usually says it all. */
	for (i = 0; i < b.n_reqs; i++) {
		if (b.reqs[i]->error != NULL && !b_ok(b.reqs[i])) {
			ctl_fail(0, "request %zu: %s", i, b.reqs[i]->error);
			break;
		}
	}
	if (o.timeline != NULL && b_timeline(&b, o.timeline) != 0) {
		b_free(&b);
		return (CTL_EUSAGE);
	}
	rc = b_report(&b);
	b_free(&b);
	return (rc);
}

const struct ctl_cmd ctl_bench_cmd = {
	.words = { "bench" },
	.args = "MODEL [--rate R [--burstiness B] | --concurrency C] "
	    "[--requests N | --duration S] [--prompt-len N|A-B] "
	    "[--output-len N|A-B] [--scenario interference] ...",
	.exec = cmd_bench,
};
