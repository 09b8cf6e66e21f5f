/*
 * fuzz-gguf.c: libFuzzer target for the GGUF reader and the vocabulary
 * loader: any bytes go through gguf_open_mem(); a file it accepts has each
 * key read with the typed getters and, when it holds a vocabulary, is
 * loaded as a tokenizer that encodes and streams text back.  What must
 * hold: no crash, no leak, no read outside the buffer, and the streamed
 * text is valid UTF-8.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "strbuf.h"
#include "tokenizer.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Read every key with the getter of its type and a few of other types. */
static void
walk_kv(const struct gguf_file *g)
{
	const struct gguf_kv	*kv;
	uint64_t		 i, j, u64;
	uint32_t		 u32;
	float			 f;
	int			 b;
	char			*s, *cause;

	for (i = 0; i < g->n_kv; i++) {
		kv = &g->kv[i];
		if (gguf_find(g, kv->key) == NULL)
			abort();	/* a key it listed must be found */
		cause = NULL;
		if (gguf_get_u32(g, kv->key, &u32, &cause) != 0)
			free(cause);
		cause = NULL;
		if (gguf_get_u64(g, kv->key, &u64, &cause) != 0)
			free(cause);
		cause = NULL;
		if (gguf_get_f32(g, kv->key, &f, &cause) != 0)
			free(cause);
		cause = NULL;
		if (gguf_get_bool(g, kv->key, &b, &cause) != 0)
			free(cause);
		cause = NULL;
		if ((s = gguf_get_str(g, kv->key, &cause)) != NULL)
			free(s);
		else
			free(cause);
		if (kv->type == GGUF_VT_ARRAY && kv->v.arr.type ==
		    GGUF_VT_STRING) {
			for (j = 0; j < kv->v.arr.n; j++)
				if (kv->v.arr.strs[j].len > 0 &&
				    kv->v.arr.strs[j].ptr[0] == 0x7f)
					u32++;	/* touch every string */
		}
	}
}

/* Touch the first and last byte of every tensor's data. */
static void
walk_tensors(const struct gguf_file *g)
{
	volatile uint8_t	sink = 0;
	uint64_t		i;

	for (i = 0; i < g->n_tensors; i++) {
		const struct gguf_tensor *t = &g->tensors[i];

		if (gguf_find_tensor(g, t->name) == NULL)
			abort();
		if (t->nbytes > 0) {
			sink ^= ((const uint8_t *)t->data)[0];
			sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
		}
	}
	(void)sink;
}

/* Encode a few texts and stream the ids back through the detokenizer. */
static void
exercise_tokenizer(const struct tokenizer *tok)
{
	static const char	*texts[] = { "Once upon a time",
	    " hello\n\tworld <s></s> 123", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
	    "\xff\xfe broken \xc3" };
	struct detok		 d;
	char			 out[DETOK_OUT_MAX], piece[TOKENIZER_TEXT_MAX];
	int32_t			*ids;
	size_t			 n, i, k, len;
	int			 special, n_vocab = tokenizer_n_vocab(tok);
	char			*cause;

	for (k = 0; k < sizeof texts / sizeof texts[0]; k++) {
		for (special = 0; special < 2; special++) {
			cause = NULL;
			ids = NULL;
			if (tokenizer_encode(tok, texts[k], strlen(texts[k]),
			    tokenizer_bos(tok) >= 0, special, &ids, &n,
			    &cause) != 0) {
				free(cause);
				free(ids);
				continue;
			}
			detok_init(&d, tok);
			for (i = 0; i < n; i++) {
				if (ids[i] < 0 || ids[i] >= n_vocab)
					abort();	/* an id outside the vocabulary */
				len = detok_push(&d, ids[i], out, sizeof out);
				if (utf8_first_invalid(out, len) != (size_t)-1)
					abort();
				tokenizer_piece(tok, ids[i], piece,
				    sizeof piece);
			}
			len = detok_flush(&d, out, sizeof out);
			if (utf8_first_invalid(out, len) != (size_t)-1)
				abort();
			free(ids);
		}
	}
	/* Every id decodes on its own, bounded by the vocabulary size. */
	for (i = 0; i < (size_t)n_vocab && i < 4096; i++) {
		tokenizer_piece(tok, (int32_t)i, piece, sizeof piece);
		(void)tokenizer_token_text(tok, (int32_t)i);
		(void)tokenizer_is_eog(tok, (int32_t)i);
	}
}

/* One input: a candidate GGUF file. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gguf_file	*g;
	struct tokenizer	*tok;
	char			*cause = NULL;

	if ((g = gguf_open_mem(data, size, &cause)) == NULL) {
		if (cause == NULL)
			abort();	/* a refusal always says why */
		free(cause);
		return (0);
	}
	walk_kv(g);
	walk_tensors(g);
	if ((tok = tokenizer_load(g, &cause)) != NULL) {
		exercise_tokenizer(tok);
		tokenizer_free(tok);
	} else
		free(cause);
	gguf_close(g);
	return (0);
}
