/* tok_spm.c: SentencePiece-style encoding (tokenizer.ggml.model "llama"). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

/*
 * The text is cut into UTF-8 characters, spaces written as U+2581, and
 * adjacent pieces are merged greedily: always the pair whose joined text
 * is the vocabulary token with the highest score (the leftmost on a tie),
 * until no adjacent pair forms a token.  A character left without a token
 * is spelled with its <0xNN> byte tokens.  A heap of candidate pairs keeps
 * this O(n log n); candidates made stale by an earlier merge are skipped
 * when they come up.
 */

/* Whether the encoder may produce a token by merging. */
static int
mergeable(const struct tokenizer *t, int32_t id)
{
	switch (t->tok[id].type) {
	case TOKEN_TYPE_UNDEFINED:
	case TOKEN_TYPE_NORMAL:
	case TOKEN_TYPE_USER:
		return (1);
	}
	return (0);
}

/* Push the pair (l, r) if their joined text is a token. */
static void
try_pair(const struct tokenizer *t, const char *buf, const struct tok_sym *sym,
    int32_t l, int32_t r, struct tok_heap *h)
{
	struct tok_cand	c;
	int32_t		id;
	size_t		len;

	if (l < 0 || r < 0)
		return;
	len = sym[l].len + sym[r].len;
	if (len > TOKENIZER_TEXT_MAX)
		return;
	id = tok_lookup(t, buf + sym[l].off, len);
	if (id == -1 || !mergeable(t, id))
		return;
	c.key = -t->tok[id].score;
	c.left = l;
	c.right = r;
	c.id = id;
	c.size = len;
	tok_heap_push(h, &c);
}

/* Emit a symbol's token, or its bytes when it has none. */
static int
emit_sym(const struct tokenizer *t, const char *buf, const struct tok_sym *s,
    struct tok_out *out, char **cause)
{
	int32_t		id = s->id;
	uint32_t	i;
	unsigned char	b;

	if (id == -1) {
		id = tok_lookup(t, buf + s->off, s->len);
		if (id != -1 && !mergeable(t, id))
			id = -1;
	}
	if (id != -1) {
		tok_out_push(out, id);
		return (0);
	}
	for (i = 0; i < s->len; i++) {
		b = (unsigned char)buf[s->off + i];
		if ((id = t->byte_tok[b]) == -1 && (id = t->unk) == -1) {
			set_cause(cause, "no token for byte 0x%02x and no "
			    "unknown token", b);
			return (-1);
		}
		tok_out_push(out, id);
	}
	return (0);
}

/* Encode a run of text (no special tokens in it) the SentencePiece way. */
int
tok_spm_encode(const struct tokenizer *t, const char *s, size_t len,
    int prefix_space, struct tok_out *out, char **cause)
{
	struct tok_heap	 heap;
	struct tok_sym	*sym;
	struct tok_cand	 c;
	char		*buf;
	size_t		 i, n = 0, blen = 0, l;
	uint32_t	 cp;
	int32_t		 k, next;
	int		 rc = 0;

	/* Escape: every space (and the prefix) becomes U+2581. */
	buf = xmalloc(3 * (len + 1));
	if (prefix_space) {
		memcpy(buf, "\xe2\x96\x81", 3);
		blen = 3;
	}
	for (i = 0; i < len; i++) {
		if (s[i] == ' ') {
			memcpy(buf + blen, "\xe2\x96\x81", 3);
			blen += 3;
		} else
			buf[blen++] = s[i];
	}

	sym = xreallocarray(NULL, blen, sizeof *sym);
	for (i = 0; i < blen; i += l) {
		l = utf8_decode((const unsigned char *)buf + i, blen - i, &cp);
		sym[n].off = i;
		sym[n].len = l;
		sym[n].prev = (int32_t)n - 1;
		sym[n].next = i + l < blen ? (int32_t)n + 1 : -1;
		sym[n].id = -1;
		n++;
	}

	tok_heap_init(&heap, n);
	for (i = 0; i + 1 < n; i++)
		try_pair(t, buf, sym, i, i + 1, &heap);
	while (tok_heap_pop(&heap, &c)) {
		if (sym[c.left].len == 0 || sym[c.right].len == 0 ||
		    sym[c.left].len + sym[c.right].len != c.size)
			continue;
		/* Merge the right symbol into the left one. */
		sym[c.left].len = c.size;
		sym[c.left].id = c.id;
		sym[c.right].len = 0;
		next = sym[c.right].next;
		sym[c.left].next = next;
		if (next != -1)
			sym[next].prev = c.left;
		try_pair(t, buf, sym, sym[c.left].prev, c.left, &heap);
		try_pair(t, buf, sym, c.left, next, &heap);
	}

	for (k = n > 0 ? 0 : -1; k != -1; k = sym[k].next) {
		if ((rc = emit_sym(t, buf, &sym[k], out, cause)) != 0)
			break;
	}
	tok_heap_free(&heap);
	free(sym);
	free(buf);
	return (rc);
}
