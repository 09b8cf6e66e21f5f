/* bench_workload.c: phasectl bench's random draws, prompts and arrivals. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gguf.h"
#include "rng.h"
#include "tokenizer.h"
#include "util.h"

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
uint64_t
b_rand(struct bench *b)
{
	return (splitmix64(&b->rng));
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

/* Ask the daemon about the model: vocabulary size and file path. */
int
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
void
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

/* Make a new request record and add it to the run. */
struct b_req *
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
struct b_req *
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

/* The planned send time of the next open-loop request, in seconds. */
double
b_next_arrival(struct bench *b, double prev)
{
	double	mean = 1 / b->o->rate, k = b->o->burstiness;

	if (k == 1)
		return (prev - log(b_unif(b)) * mean);
	return (prev + b_gamma(b, k) * mean / k);
}
