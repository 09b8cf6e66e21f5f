/* tokenizer.c: vocabulary loading, special tokens, pieces and detokenizing. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "log.h"
#include "tok_impl.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

#define KEY_MODEL	"tokenizer.ggml.model"
#define KEY_TOKENS	"tokenizer.ggml.tokens"
#define KEY_SCORES	"tokenizer.ggml.scores"
#define KEY_TYPES	"tokenizer.ggml.token_type"

/* What an unknown token reads as, as SentencePiece writes it. */
#define UNK_SURFACE	" \xe2\x81\x87 "

/*
 * Control tokens that end a turn in common chat vocabularies, for models
 * whose metadata names only EOS.
 */
static const char *const eog_texts[] = {
	"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
	"<|endoftext|>", "<|end_of_text|>", "<EOT>",
};

/* Hash a string (FNV-1a). */
static uint64_t
hash_str(const char *s, size_t len)
{
	uint64_t	h = 0xcbf29ce484222325ULL;
	size_t		i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return (h);
}

/* The text of a token. */
const char *
tok_text(const struct tokenizer *t, int32_t id)
{
	return (t->text + t->tok[id].off);
}

/* Find a token by its text, -1 if there is none. */
int32_t
tok_lookup(const struct tokenizer *t, const char *s, size_t len)
{
	size_t			 i;
	int32_t			 id;

	i = hash_str(s, len) & t->hash_mask;
	while ((id = t->hash[i]) != -1) {
		if (t->tok[id].len == len && memcmp(tok_text(t, id), s, len) == 0)
			return (id);
		i = (i + 1) & t->hash_mask;
	}
	return (-1);
}

/* Fill the text -> id table; of equal texts the last id wins. */
static void
build_hash(struct tokenizer *t)
{
	size_t	size = 16, i;
	int32_t	id, old;

	while (size < (size_t)t->n_vocab * 2)
		size *= 2;
	t->hash = xreallocarray(NULL, size, sizeof *t->hash);
	memset(t->hash, 0xff, size * sizeof *t->hash);
	t->hash_mask = size - 1;
	for (id = 0; id < t->n_vocab; id++) {
		i = hash_str(tok_text(t, id), t->tok[id].len) & t->hash_mask;
		while ((old = t->hash[i]) != -1) {
			if (t->tok[old].len == t->tok[id].len &&
			    memcmp(tok_text(t, old), tok_text(t, id),
			    t->tok[id].len) == 0)
				break;
			i = (i + 1) & t->hash_mask;
		}
		t->hash[i] = id;
	}
}

/* Append an id to an output list. */
void
tok_out_push(struct tok_out *o, int32_t id)
{
	if (o->n == o->cap) {
		o->cap = o->cap ? o->cap * 2 : 64;
		o->ids = xreallocarray(o->ids, o->cap, sizeof *o->ids);
	}
	o->ids[o->n++] = id;
}

/* Start an empty candidate heap with room for cap entries. */
void
tok_heap_init(struct tok_heap *h, size_t cap)
{
	h->n = 0;
	h->cap = cap ? cap : 16;
	h->v = xreallocarray(NULL, h->cap, sizeof *h->v);
}

/* Free a candidate heap. */
void
tok_heap_free(struct tok_heap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}

/* Whether candidate a should pop before b: lower key, then leftmost. */
static int
cand_before(const struct tok_cand *a, const struct tok_cand *b)
{
	if (a->key != b->key)
		return (a->key < b->key);
	return (a->left < b->left);
}

/* Add a candidate to the heap. */
void
tok_heap_push(struct tok_heap *h, const struct tok_cand *c)
{
	size_t	i, parent;

	if (h->n == h->cap) {
		h->cap *= 2;
		h->v = xreallocarray(h->v, h->cap, sizeof *h->v);
	}
	i = h->n++;
	while (i > 0) {
		parent = (i - 1) / 2;
		if (!cand_before(c, &h->v[parent]))
			break;
		h->v[i] = h->v[parent];
		i = parent;
	}
	h->v[i] = *c;
}

/* Take the first candidate off the heap; 0 when it is empty. */
int
tok_heap_pop(struct tok_heap *h, struct tok_cand *out)
{
	struct tok_cand	 last;
	size_t		 i = 0, child;

	if (h->n == 0)
		return (0);
	*out = h->v[0];
	last = h->v[--h->n];
	for (;;) {
		child = 2 * i + 1;
		if (child >= h->n)
			break;
		if (child + 1 < h->n && cand_before(&h->v[child + 1], &h->v[child]))
			child++;
		if (!cand_before(&h->v[child], &last))
			break;
		h->v[i] = h->v[child];
		i = child;
	}
	if (h->n > 0)
		h->v[i] = last;
	return (1);
}

/*
 * Read an optional token id key: 1 if absent, 0 with *out set (-1 for the
 * "none" values -1 and 0xffffffff), -1 and *cause if malformed or out of
 * range.
 */
static int
read_id(const struct gguf_file *gf, const char *key, int n_vocab, int32_t *out,
    char **cause)
{
	const struct gguf_kv	*kv;
	uint32_t		 v;

	*out = -1;
	if ((kv = gguf_find(gf, key)) == NULL)
		return (1);
	switch (kv->type) {
	case GGUF_VT_INT8:
	case GGUF_VT_INT16:
	case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		if (kv->v.i == -1)
			return (0);
		break;
	case GGUF_VT_UINT32:
		if (kv->v.u == UINT32_MAX)
			return (0);
		break;
	case GGUF_VT_UINT64:
		if (kv->v.u == UINT64_MAX || kv->v.u == UINT32_MAX)
			return (0);
		break;
	default:
		break;
	}
	if (gguf_get_u32(gf, key, &v, cause) != 0)
		return (-1);
	if (v >= (uint32_t)n_vocab) {
		set_cause(cause, "key '%s': token id %u out of range (vocabulary "
		    "has %d tokens)", key, v, n_vocab);
		return (-1);
	}
	*out = (int32_t)v;
	return (0);
}

/* Read an optional bool key into *out, leaving it alone when absent. */
static int
read_bool(const struct gguf_file *gf, const char *key, int *out, char **cause)
{
	if (gguf_find(gf, key) == NULL)
		return (0);
	return (gguf_get_bool(gf, key, out, cause));
}

/* The value of a hex digit, -1 if it is not one. */
static int
hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return (c - '0');
	if (c >= 'a' && c <= 'f')
		return (c - 'a' + 10);
	if (c >= 'A' && c <= 'F')
		return (c - 'A' + 10);
	return (-1);
}

/* Parse "<0xNN>" into a byte; -1 if the text is not of that form. */
static int
parse_byte_text(const char *s, size_t len)
{
	int	hi, lo;

	if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
		return (-1);
	if ((hi = hex_digit(s[3])) == -1 || (lo = hex_digit(s[4])) == -1)
		return (-1);
	return (hi << 4 | lo);
}

/* Copy the token strings, scores and types out of the file, checking them. */
static int
load_vocab(struct tokenizer *t, const struct gguf_file *gf, char **cause)
{
	const struct gguf_kv	*tokens, *scores = NULL, *types = NULL;
	uint64_t		 n, i, total = 0, off = 0;
	int32_t			 type;
	float			 score;
	int			 b;

	if ((tokens = gguf_get_arr(gf, KEY_TOKENS, GGUF_VT_STRING, cause)) == NULL)
		return (-1);
	n = tokens->v.arr.n;
	if (n == 0) {
		set_cause(cause, "key '%s': empty vocabulary", KEY_TOKENS);
		return (-1);
	}
	if (n > TOKENIZER_VOCAB_MAX) {
		set_cause(cause, "key '%s': %llu tokens exceeds limit %d",
		    KEY_TOKENS, (unsigned long long)n, TOKENIZER_VOCAB_MAX);
		return (-1);
	}
	if (gguf_find(gf, KEY_SCORES) != NULL) {
		scores = gguf_get_arr(gf, KEY_SCORES, GGUF_VT_FLOAT32, cause);
		if (scores == NULL)
			return (-1);
		if (scores->v.arr.n != n) {
			set_cause(cause, "key '%s': %llu scores for %llu tokens",
			    KEY_SCORES, (unsigned long long)scores->v.arr.n,
			    (unsigned long long)n);
			return (-1);
		}
	}
	if (gguf_find(gf, KEY_TYPES) != NULL) {
		types = gguf_get_arr(gf, KEY_TYPES, GGUF_VT_INT32, cause);
		if (types == NULL)
			return (-1);
		if (types->v.arr.n != n) {
			set_cause(cause, "key '%s': %llu types for %llu tokens",
			    KEY_TYPES, (unsigned long long)types->v.arr.n,
			    (unsigned long long)n);
			return (-1);
		}
	}

	for (i = 0; i < n; i++) {
		const struct gguf_str *s = &tokens->v.arr.strs[i];

		if (s->len > TOKENIZER_TEXT_MAX) {
			set_cause(cause, "key '%s': token %llu is %llu bytes, "
			    "limit %d", KEY_TOKENS, (unsigned long long)i,
			    (unsigned long long)s->len, TOKENIZER_TEXT_MAX);
			return (-1);
		}
		if (memchr(s->ptr, '\0', s->len) != NULL) {
			set_cause(cause, "key '%s': token %llu contains a NUL "
			    "byte", KEY_TOKENS, (unsigned long long)i);
			return (-1);
		}
		total += s->len + 1;
	}
	if (total > UINT32_MAX) {
		set_cause(cause, "key '%s': %llu bytes of token text exceeds "
		    "limit %u", KEY_TOKENS, (unsigned long long)total, UINT32_MAX);
		return (-1);
	}

	t->n_vocab = (int)n;
	t->text = xmalloc(total);
	t->tok = xcalloc(n, sizeof *t->tok);
	for (i = 0; i < n; i++) {
		const struct gguf_str	*s = &tokens->v.arr.strs[i];
		struct tok_entry	*e = &t->tok[i];

		memcpy(t->text + off, s->ptr, s->len);
		t->text[off + s->len] = '\0';
		e->off = off;
		e->len = s->len;
		off += s->len + 1;

		e->type = TOKEN_TYPE_NORMAL;
		if (types != NULL) {
			type = gguf_arr_i32(types, i);
			if (type < TOKEN_TYPE_UNDEFINED || type > TOKEN_TYPE_BYTE) {
				set_cause(cause, "key '%s': token %llu has type "
				    "%d, want 0 to %d", KEY_TYPES,
				    (unsigned long long)i, type, TOKEN_TYPE_BYTE);
				return (-1);
			}
			e->type = type;
		}
		if (scores != NULL) {
			score = gguf_arr_f32(scores, i);
			if (isnan(score)) {
				set_cause(cause, "key '%s': token %llu has a NaN "
				    "score", KEY_SCORES, (unsigned long long)i);
				return (-1);
			}
			e->score = score;
		}
		if (e->type == TOKEN_TYPE_BYTE) {
			if ((b = parse_byte_text(s->ptr, s->len)) == -1) {
				set_cause(cause, "key '%s': byte token %llu is "
				    "not of the form <0xNN>", KEY_TOKENS,
				    (unsigned long long)i);
				return (-1);
			}
			e->byte = b;
		}
	}
	return (0);
}

/* Compare special tokens: by first byte, then longest first, then id. */
static int
special_cmp(const void *a, const void *b)
{
	const uint64_t	*x = a, *y = b;

	return ((*x > *y) - (*x < *y));
}

/*
 * Collect the tokens the splitter looks for in text, ordered so the
 * longest match at a position is found first: control, unknown and
 * user-defined ones, or with user_only the user-defined ones alone.  The
 * sort key packs first byte, inverted length and id.
 */
static void
build_special(struct tokenizer *t, struct tok_special *sp, int user_only)
{
	uint64_t	*keys;
	size_t		 n = 0, i;
	int32_t		 id;
	int		 c;

	keys = xcalloc(t->n_vocab, sizeof *keys);
	for (id = 0; id < t->n_vocab; id++) {
		switch (t->tok[id].type) {
		case TOKEN_TYPE_CONTROL:
		case TOKEN_TYPE_UNKNOWN:
			if (user_only)
				continue;
			break;
		case TOKEN_TYPE_USER:
			break;
		default:
			continue;
		}
		if (t->tok[id].len == 0)
			continue;
		keys[n++] = (uint64_t)(unsigned char)tok_text(t, id)[0] << 56 |
		    (uint64_t)(TOKENIZER_TEXT_MAX - t->tok[id].len) << 32 |
		    (uint32_t)id;
	}
	qsort(keys, n, sizeof *keys, special_cmp);
	sp->ids = xcalloc(n ? n : 1, sizeof *sp->ids);
	sp->n = n;
	for (i = 0; i < n; i++)
		sp->ids[i] = (int32_t)(keys[i] & 0xffffffff);
	free(keys);

	i = 0;
	for (c = 0; c < 256; c++) {
		sp->at[c] = i;
		while (i < n && (unsigned char)tok_text(t, sp->ids[i])[0] == c)
			i++;
	}
	sp->at[256] = n;
}

/* Add an end-of-generation id once. */
static void
add_eog(struct tokenizer *t, int32_t id)
{
	size_t	i;

	if (id < 0)
		return;
	for (i = 0; i < t->n_eog; i++) {
		if (t->eog[i] == id)
			return;
	}
	if (t->n_eog < TOK_EOG_MAX)
		t->eog[t->n_eog++] = id;
}

/* Read the special token ids and the add_* flags. */
static int
load_special(struct tokenizer *t, const struct gguf_file *gf, char **cause)
{
	static const struct {
		const char	*key;
		size_t		 off;
		const char	*spm_default;	/* text looked up when absent */
	} ids[] = {
		{ "tokenizer.ggml.bos_token_id", offsetof(struct tokenizer, bos), "<s>" },
		{ "tokenizer.ggml.eos_token_id", offsetof(struct tokenizer, eos), "</s>" },
		{ "tokenizer.ggml.unknown_token_id", offsetof(struct tokenizer, unk), "<unk>" },
		{ "tokenizer.ggml.padding_token_id", offsetof(struct tokenizer, pad), NULL },
		{ "tokenizer.ggml.eot_token_id", offsetof(struct tokenizer, eot), NULL },
		{ "tokenizer.ggml.eom_token_id", offsetof(struct tokenizer, eom), NULL },
	};
	size_t	 i;
	int32_t	*p, id;
	int	 rc;

	for (i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		p = (int32_t *)((char *)t + ids[i].off);
		rc = read_id(gf, ids[i].key, t->n_vocab, p, cause);
		if (rc == -1)
			return (-1);
		if (rc == 1 && t->kind == TOK_SPM && ids[i].spm_default != NULL)
			*p = tok_lookup(t, ids[i].spm_default,
			    strlen(ids[i].spm_default));
	}

	t->add_bos = t->kind == TOK_SPM || (t->pre_flags & TOK_PRE_BOS);
	t->add_eos = 0;
	t->add_space_prefix = t->kind == TOK_SPM;
	if (read_bool(gf, "tokenizer.ggml.add_bos_token", &t->add_bos, cause) != 0 ||
	    read_bool(gf, "tokenizer.ggml.add_eos_token", &t->add_eos, cause) != 0 ||
	    read_bool(gf, "tokenizer.ggml.add_space_prefix",
	    &t->add_space_prefix, cause) != 0)
		return (-1);
	if (t->bos == -1)
		t->add_bos = 0;
	if (t->eos == -1)
		t->add_eos = 0;
	if (t->kind != TOK_SPM)
		t->add_space_prefix = 0;

	add_eog(t, t->eos);
	add_eog(t, t->eot);
	add_eog(t, t->eom);
	for (i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
		id = tok_lookup(t, eog_texts[i], strlen(eog_texts[i]));
		if (id != -1 && (t->tok[id].type == TOKEN_TYPE_CONTROL ||
		    t->tok[id].type == TOKEN_TYPE_USER))
			add_eog(t, id);
	}
	return (0);
}

/*
 * Phi-3's special tokens strip the whitespace after them when they are
 * matched in text (their added-token entries say rstrip), except <unk>,
 * <s> and <|endoftext|>.  GGUF files do not carry that flag, so, as
 * llama.cpp does, a model whose general.name says Phi-3 gets it.
 */
static void
mark_rstrip(struct tokenizer *t, const struct gguf_file *gf)
{
	static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
	char	*name, *cause = NULL, *c;
	size_t	 k;
	int32_t	 id;
	int	 phi3;

	if (gguf_find(gf, "general.name") == NULL)
		return;
	if ((name = gguf_get_str(gf, "general.name", &cause)) == NULL) {
		free(cause);
		return;
	}
	for (c = name; *c != '\0'; c++) {
		if (*c >= 'A' && *c <= 'Z')
			*c += 'a' - 'A';
	}
	phi3 = strstr(name, "phi-3") != NULL || strstr(name, "phi3") != NULL;
	free(name);
	if (!phi3)
		return;
	for (id = 0; id < t->n_vocab; id++) {
		switch (t->tok[id].type) {
		case TOKEN_TYPE_CONTROL:
		case TOKEN_TYPE_USER:
		case TOKEN_TYPE_UNKNOWN:
			t->tok[id].rstrip = 1;
			break;
		}
	}
	for (k = 0; k < sizeof keep / sizeof keep[0]; k++) {
		if ((id = tok_lookup(t, keep[k], strlen(keep[k]))) != -1)
			t->tok[id].rstrip = 0;
	}
}

/* Build a tokenizer from a GGUF file. */
struct tokenizer *
tokenizer_load(const struct gguf_file *gf, char **cause)
{
	struct tokenizer	*t;
	char			*model;
	int			 b;

	if ((model = gguf_get_str(gf, KEY_MODEL, cause)) == NULL)
		return (NULL);
	t = xcalloc(1, sizeof *t);
	if (strcmp(model, "llama") == 0)
		t->kind = TOK_SPM;
	else if (strcmp(model, "gpt2") == 0)
		t->kind = TOK_BPE;
	else {
		set_cause(cause, "key '%s': unsupported tokenizer '%s' (want "
		    "llama or gpt2)", KEY_MODEL, model);
		free(model);
		free(t);
		return (NULL);
	}
	free(model);

	if (load_vocab(t, gf, cause) != 0)
		goto fail;
	build_hash(t);

	for (b = 0; b < 256; b++)
		t->byte_tok[b] = -1;
	if (t->kind == TOK_SPM) {
		char	name[8];
		int32_t	id;

		/* Byte tokens by type; by their text when types are missing. */
		for (id = t->n_vocab - 1; id >= 0; id--) {
			if (t->tok[id].type == TOKEN_TYPE_BYTE)
				t->byte_tok[t->tok[id].byte] = id;
		}
		for (b = 0; b < 256; b++) {
			if (t->byte_tok[b] != -1)
				continue;
			snprintf(name, sizeof name, "<0x%02X>", b);
			t->byte_tok[b] = tok_lookup(t, name, 6);
		}
	} else if (tok_bpe_load(t, gf, cause) != 0)
		goto fail;

	if (load_special(t, gf, cause) != 0)
		goto fail;
	mark_rstrip(t, gf);
	build_special(t, &t->sp_all, 0);
	build_special(t, &t->sp_user, 1);
	log_debug("tokenizer: %s, %d tokens, %zu merges, bos %d eos %d",
	    tokenizer_model(t), t->n_vocab, t->n_merges, t->bos, t->eos);
	return (t);

fail:
	tokenizer_free(t);
	return (NULL);
}

/* Free a tokenizer. */
void
tokenizer_free(struct tokenizer *t)
{
	if (t == NULL)
		return;
	free(t->text);
	free(t->tok);
	free(t->hash);
	free(t->merges);
	free(t->sp_all.ids);
	free(t->sp_user.ids);
	free(t);
}

/* Number of tokens in the vocabulary. */
int
tokenizer_n_vocab(const struct tokenizer *t)
{
	return (t->n_vocab);
}

/* The BOS id, -1 if none. */
int32_t
tokenizer_bos(const struct tokenizer *t)
{
	return (t->bos);
}

/* The EOS id, -1 if none. */
int32_t
tokenizer_eos(const struct tokenizer *t)
{
	return (t->eos);
}

/* The EOT id, -1 if none. */
int32_t
tokenizer_eot(const struct tokenizer *t)
{
	return (t->eot);
}

/* The unknown-token id, -1 if none. */
int32_t
tokenizer_unk(const struct tokenizer *t)
{
	return (t->unk);
}

/* The padding id, -1 if none. */
int32_t
tokenizer_pad(const struct tokenizer *t)
{
	return (t->pad);
}

/* Whether prompts get BOS by default. */
int
tokenizer_add_bos(const struct tokenizer *t)
{
	return (t->add_bos);
}

/* Whether prompts get EOS by default. */
int
tokenizer_add_eos(const struct tokenizer *t)
{
	return (t->add_eos);
}

/* Whether a token ends generation. */
int
tokenizer_is_eog(const struct tokenizer *t, int32_t id)
{
	size_t	i;

	for (i = 0; i < t->n_eog; i++) {
		if (t->eog[i] == id)
			return (1);
	}
	return (0);
}

/* A token's type, -1 for a bad id. */
int
tokenizer_token_type(const struct tokenizer *t, int32_t id)
{
	if (id < 0 || id >= t->n_vocab)
		return (-1);
	return (t->tok[id].type);
}

/* The name of the tokenizer family. */
const char *
tokenizer_model(const struct tokenizer *t)
{
	return (t->kind == TOK_SPM ? "llama" : "gpt2");
}

/* The stored text of a token. */
const char *
tokenizer_token_text(const struct tokenizer *t, int32_t id)
{
	if (id < 0 || id >= t->n_vocab)
		return (NULL);
	return (tok_text(t, id));
}

/* Copy n bytes into buf as far as they fit; returns the bytes copied. */
static size_t
copy_out(char *buf, size_t buflen, const char *s, size_t n)
{
	if (n > buflen)
		n = buflen;
	memcpy(buf, s, n);
	return (n);
}

/* The output bytes of a token. */
size_t
tokenizer_piece(const struct tokenizer *t, int32_t id, char *buf, size_t buflen)
{
	const struct tok_entry	*e;
	const char		*s;
	size_t			 i, o = 0;
	char			 b;

	if (id < 0 || id >= t->n_vocab)
		return (0);
	e = &t->tok[id];
	s = tok_text(t, id);
	switch (e->type) {
	case TOKEN_TYPE_CONTROL:
		return (0);
	case TOKEN_TYPE_UNKNOWN:
		return (copy_out(buf, buflen, UNK_SURFACE, strlen(UNK_SURFACE)));
	case TOKEN_TYPE_BYTE:
		b = (char)e->byte;
		return (copy_out(buf, buflen, &b, 1));
	case TOKEN_TYPE_USER:
		return (copy_out(buf, buflen, s, e->len));
	}
	if (t->kind == TOK_BPE)
		return (tok_bpe_piece(t, id, buf, buflen));

	/* SPM: U+2581 stands for a space. */
	for (i = 0; i < e->len && o < buflen; ) {
		if (i + 3 <= e->len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
			buf[o++] = ' ';
			i += 3;
		} else
			buf[o++] = s[i++];
	}
	return (o);
}

/* Find the token of a set that matches text at its start, longest first. */
static int32_t
match_special(const struct tokenizer *t, const struct tok_special *sp,
    const char *s, size_t len)
{
	size_t		 i, end;
	int32_t		 id;
	unsigned char	 c = (unsigned char)s[0];

	end = sp->at[c + 1];
	for (i = sp->at[c]; i < end; i++) {
		id = sp->ids[i];
		if (t->tok[id].len <= len &&
		    memcmp(s, tok_text(t, id), t->tok[id].len) == 0)
			return (id);
	}
	return (-1);
}

/*
 * Encode a run of ordinary text.  Every run starts the text or follows a
 * special token, so SPM puts its space prefix on each.
 */
static int
encode_raw(const struct tokenizer *t, const char *s, size_t len,
    struct tok_out *out, char **cause)
{
	if (len == 0)
		return (0);
	if (t->kind == TOK_SPM)
		return (tok_spm_encode(t, s, len, t->add_space_prefix, out,
		    cause));
	return (tok_bpe_encode(t, s, len, out, cause));
}

/* Encode text into token ids. */
int
tokenizer_encode(const struct tokenizer *t, const char *text, size_t len,
    int add_bos, int parse_special, int32_t **ids, size_t *n_ids, char **cause)
{
	struct tok_out		 out = { NULL, 0, 0 };
	const struct tok_special *sp = parse_special ? &t->sp_all : &t->sp_user;
	size_t			 i, start = 0;
	int32_t			 id;

	*ids = NULL;
	*n_ids = 0;
	if (len > TOKENIZER_INPUT_MAX) {
		set_cause(cause, "text of %zu bytes exceeds limit %zu", len,
		    TOKENIZER_INPUT_MAX);
		return (-1);
	}
	if (add_bos) {
		if (t->bos == -1) {
			set_cause(cause, "vocabulary has no bos token");
			return (-1);
		}
		tok_out_push(&out, t->bos);
	}

	/*
	 * Split the text around special tokens; what lies between is encoded
	 * as ordinary text.
	 */
	for (i = 0; i < len && sp->n != 0; ) {
		id = match_special(t, sp, text + i, len - i);
		if (id == -1) {
			i++;
			continue;
		}
		if (encode_raw(t, text + start, i - start, &out, cause) != 0)
			goto fail;
		tok_out_push(&out, id);
		i += t->tok[id].len;
		if (t->tok[id].rstrip) {
			while (i < len && (text[i] == ' ' ||
			    (text[i] >= '\t' && text[i] <= '\r')))
				i++;
		}
		start = i;
	}
	if (encode_raw(t, text + start, len - start, &out, cause) != 0)
		goto fail;

	if (out.ids == NULL)
		out.ids = xmalloc(sizeof *out.ids);
	*ids = out.ids;
	*n_ids = out.n;
	return (0);

fail:
	free(out.ids);
	return (-1);
}

/* Append n bytes to the detokenizer's output if they fit. */
static void
detok_emit(char *out, size_t outlen, size_t *o, const void *p, size_t n)
{
	if (*o + n > outlen)
		return;
	memcpy(out + *o, p, n);
	*o += n;
}

/* Feed bytes through the UTF-8 reassembly. */
static size_t
detok_feed(struct detok *d, const unsigned char *p, size_t n, char *out,
    size_t outlen)
{
	static const char	 repl[3] = { '\xef', '\xbf', '\xbd' };
	size_t			 i, o = 0, l;
	unsigned char		 b;

	for (i = 0; i < n; i++) {
		b = p[i];
		if (d->npend != 0) {
			if (utf8_cont_ok(d->pend[0], d->npend, b)) {
				d->pend[d->npend++] = b;
				if (d->npend == d->need) {
					detok_emit(out, outlen, &o, d->pend,
					    d->npend);
					d->npend = 0;
				}
				continue;
			}
			/* A broken sequence: replace it, then start again at b. */
			detok_emit(out, outlen, &o, repl, sizeof repl);
			d->npend = 0;
		}
		l = utf8_lead_len(b);
		if (l == 1)
			detok_emit(out, outlen, &o, &b, 1);
		else if (l == 0)
			detok_emit(out, outlen, &o, repl, sizeof repl);
		else {
			d->pend[0] = b;
			d->npend = 1;
			d->need = l;
		}
	}
	return (o);
}

/* Start a detokenizer at the beginning of a text. */
void
detok_init(struct detok *d, const struct tokenizer *t)
{
	memset(d, 0, sizeof *d);
	d->tok = t;
	d->strip_space = t->add_space_prefix;
}

/* Detokenize one more token. */
size_t
detok_push(struct detok *d, int32_t id, char *out, size_t outlen)
{
	const struct tokenizer	*t = d->tok;
	char			 piece[TOKENIZER_TEXT_MAX];
	const char		*p = piece;
	size_t			 n;

	if (id < 0 || id >= t->n_vocab)
		return (0);
	if (id == t->bos) {
		d->strip_space = t->add_space_prefix;
		return (0);
	}
	if (t->tok[id].type == TOKEN_TYPE_CONTROL)
		return (0);
	n = tokenizer_piece(t, id, piece, sizeof piece);
	if (d->strip_space) {
		if (n > 0 && piece[0] == ' ') {
			p++;
			n--;
		}
		d->strip_space = 0;
	}
	return (detok_feed(d, (const unsigned char *)p, n, out, outlen));
}

/* Emit what is left: an incomplete character becomes U+FFFD. */
size_t
detok_flush(struct detok *d, char *out, size_t outlen)
{
	size_t	o = 0;

	if (d->npend != 0) {
		detok_emit(out, outlen, &o, "\xef\xbf\xbd", 3);
		d->npend = 0;
	}
	return (o);
}
