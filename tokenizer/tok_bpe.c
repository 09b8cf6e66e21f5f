/* tok_bpe.c: byte-level BPE encoding (tokenizer.ggml.model "gpt2"). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_impl.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

/*
 * Byte-level BPE works on bytes dressed up as printable code points: each
 * byte has a stand-in character (GPT-2's table: printable Latin-1 bytes
 * stand for themselves, the rest map to U+0100 upwards), and the
 * vocabulary and merges are written in those characters.  Text is first
 * cut into words by the pre-tokenizer tokenizer.ggml.pre names (tok_pre.c);
 * each word starts as one symbol per byte, and the
 * adjacent pair with the lowest merge rank (the leftmost on a tie) is
 * merged until no listed merge applies.
 */

#define KEY_MERGES	"tokenizer.ggml.merges"
#define KEY_PRE		"tokenizer.ggml.pre"

/* Mix a 64-bit key into a hash (splitmix64's finalizer). */
static uint64_t
hash_u64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (x);
}

/* Build GPT-2's byte <-> stand-in code point tables. */
void
tok_bpe_byte_map(struct tokenizer *t)
{
	uint32_t	next = 256;
	int		b;

	for (b = 0; b < 324; b++)
		t->cp_byte[b] = -1;
	for (b = 0; b < 256; b++) {
		if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
		    b >= 0xae)
			t->byte_cp[b] = b;
		else
			t->byte_cp[b] = next++;
		t->cp_byte[t->byte_cp[b]] = b;
	}
}

/* Find a merge of the pair (a, b). */
static const struct tok_merge *
merge_find(const struct tokenizer *t, int32_t a, int32_t b)
{
	uint64_t	key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t		i;

	i = hash_u64(key) & t->merge_mask;
	while (t->merges[i].key != TOK_MERGE_EMPTY) {
		if (t->merges[i].key == key)
			return (&t->merges[i]);
		i = (i + 1) & t->merge_mask;
	}
	return (NULL);
}

/* Add a merge unless the pair is already listed (the first rank wins). */
static void
merge_add(struct tokenizer *t, int32_t a, int32_t b, int32_t rank,
    int32_t result)
{
	uint64_t	key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t		i;

	i = hash_u64(key) & t->merge_mask;
	while (t->merges[i].key != TOK_MERGE_EMPTY) {
		if (t->merges[i].key == key)
			return;
		i = (i + 1) & t->merge_mask;
	}
	t->merges[i].key = key;
	t->merges[i].rank = rank;
	t->merges[i].result = result;
	t->n_merges++;
}

/* Choose the pre-tokenizer from tokenizer.ggml.pre; an unknown one is refused. */
static int
load_pre(struct tokenizer *t, const struct gguf_file *gf, char **cause)
{
	const struct tok_pre_name	*p;
	char				*name;

	t->pre = TOK_PRE_GPT2;
	if (gguf_find(gf, KEY_PRE) == NULL)
		return (0);
	if ((name = gguf_get_str(gf, KEY_PRE, cause)) == NULL)
		return (-1);
	if ((p = tok_pre_find(name)) == NULL) {
		set_cause(cause, "key '%s': unsupported pre-tokenizer '%.64s'",
		    KEY_PRE, name);
		free(name);
		return (-1);
	}
	t->pre = p->pre;
	t->pre_flags = p->flags;
	t->ignore_merges = (p->flags & TOK_PRE_WHOLE_WORDS) != 0;
	free(name);
	return (0);
}

/* Load the merges and the pre-tokenizer, and map bytes to their tokens. */
int
tok_bpe_load(struct tokenizer *t, const struct gguf_file *gf, char **cause)
{
	const struct gguf_kv	*kv;
	const struct gguf_str	*s;
	const char		*sp;
	char			 joined[TOKENIZER_TEXT_MAX], ch[4];
	uint64_t		 n, i;
	size_t			 size = 16, ll, rl;
	int32_t			 a, b, r;
	int			 c;

	if (load_pre(t, gf, cause) != 0)
		return (-1);
	tok_bpe_byte_map(t);
	for (c = 0; c < 256; c++)
		t->byte_tok[c] = tok_lookup(t, ch, utf8_encode(t->byte_cp[c], ch));

	if ((kv = gguf_get_arr(gf, KEY_MERGES, GGUF_VT_STRING, cause)) == NULL)
		return (-1);
	n = kv->v.arr.n;
	if (n > TOKENIZER_VOCAB_MAX) {
		set_cause(cause, "key '%s': %llu merges exceeds limit %d",
		    KEY_MERGES, (unsigned long long)n, TOKENIZER_VOCAB_MAX);
		return (-1);
	}
	while (size < n * 2)
		size *= 2;
	t->merges = xreallocarray(NULL, size, sizeof *t->merges);
	memset(t->merges, 0xff, size * sizeof *t->merges);
	t->merge_mask = size - 1;

	for (i = 0; i < n; i++) {
		s = &kv->v.arr.strs[i];
		/* The separator is the first space after the first byte. */
		sp = s->len > 1 ? memchr(s->ptr + 1, ' ', s->len - 1) : NULL;
		if (sp == NULL) {
			set_cause(cause, "key '%s': merge %llu is not two tokens "
			    "separated by a space", KEY_MERGES,
			    (unsigned long long)i);
			return (-1);
		}
		ll = sp - s->ptr;
		rl = s->len - ll - 1;
		a = tok_lookup(t, s->ptr, ll);
		b = tok_lookup(t, sp + 1, rl);
		r = -1;
		if (a != -1 && b != -1 && ll + rl <= sizeof joined) {
			memcpy(joined, s->ptr, ll);
			memcpy(joined + ll, sp + 1, rl);
			r = tok_lookup(t, joined, ll + rl);
		}
		if (a == -1 || b == -1 || r == -1) {
			set_cause(cause, "key '%s': merge %llu ('%.*s') %s is not "
			    "in the vocabulary", KEY_MERGES,
			    (unsigned long long)i, (int)(s->len > 64 ? 64 : s->len),
			    s->ptr, a == -1 ? "left side" : b == -1 ? "right side" :
			    "result");
			return (-1);
		}
		merge_add(t, a, b, (int32_t)i, r);
	}
	return (0);
}

/* Push the pair (l, r) if a merge joins their tokens. */
static void
try_pair(const struct tokenizer *t, const struct tok_sym *sym, int32_t l,
    int32_t r, struct tok_heap *h)
{
	const struct tok_merge	*m;
	struct tok_cand		 c;

	if (l < 0 || r < 0 || sym[l].id == -1 || sym[r].id == -1)
		return;
	if ((m = merge_find(t, sym[l].id, sym[r].id)) == NULL)
		return;
	c.key = (float)m->rank;
	c.left = l;
	c.right = r;
	c.id = m->result;
	c.size = sym[l].len + sym[r].len;
	tok_heap_push(h, &c);
}

/* Encode one pre-tokenized word. */
static int
bpe_word(const struct tokenizer *t, const unsigned char *w, size_t n,
    struct tok_sym *sym, struct tok_heap *heap, char *mapped,
    struct tok_out *out, char **cause)
{
	struct tok_cand	c;
	size_t		i, m = 0;
	int32_t		k, next, id;

	if (t->ignore_merges) {
		/* A word that is a token as a whole is taken as it is. */
		for (i = 0; i < n; i++)
			m += utf8_encode(t->byte_cp[w[i]], mapped + m);
		id = tok_lookup(t, mapped, m);
		if (id != -1 && t->tok[id].type != TOKEN_TYPE_CONTROL &&
		    t->tok[id].type != TOKEN_TYPE_UNKNOWN) {
			tok_out_push(out, id);
			return (0);
		}
	}
	for (i = 0; i < n; i++) {
		sym[i].off = i;
		sym[i].len = 1;
		sym[i].prev = (int32_t)i - 1;
		sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
		sym[i].id = t->byte_tok[w[i]];
	}
	heap->n = 0;
	for (i = 0; i + 1 < n; i++)
		try_pair(t, sym, i, i + 1, heap);
	while (tok_heap_pop(heap, &c)) {
		if (sym[c.left].len == 0 || sym[c.right].len == 0 ||
		    sym[c.left].len + sym[c.right].len != c.size)
			continue;
		sym[c.left].len = c.size;
		sym[c.left].id = c.id;
		sym[c.right].len = 0;
		next = sym[c.right].next;
		sym[c.left].next = next;
		if (next != -1)
			sym[next].prev = c.left;
		try_pair(t, sym, sym[c.left].prev, c.left, heap);
		try_pair(t, sym, c.left, next, heap);
	}
	for (k = 0; k != -1; k = sym[k].next) {
		if ((id = sym[k].id) == -1 && (id = t->unk) == -1) {
			set_cause(cause, "no token for byte 0x%02x and no "
			    "unknown token", w[sym[k].off]);
			return (-1);
		}
		tok_out_push(out, id);
	}
	return (0);
}

/* Encode a run of text (no special tokens in it) with byte-level BPE. */
int
tok_bpe_encode(const struct tokenizer *t, const char *s, size_t len,
    struct tok_out *out, char **cause)
{
	const unsigned char	*u = (const unsigned char *)s;
	struct tok_heap		 heap;
	struct tok_sym		*sym;
	char			*mapped;
	size_t			*ends, n, k, start = 0;
	int			 rc = 0;

	n = tok_pre_split(t->pre, s, len, &ends);
	sym = xreallocarray(NULL, len, sizeof *sym);
	mapped = xreallocarray(NULL, len, 2);
	tok_heap_init(&heap, len);
	for (k = 0; k < n; start = ends[k++]) {
		rc = bpe_word(t, u + start, ends[k] - start, sym, &heap,
		    mapped, out, cause);
		if (rc != 0)
			break;
	}
	tok_heap_free(&heap);
	free(mapped);
	free(sym);
	free(ends);
	return (rc);
}

/* The bytes a BPE token stands for: stand-in characters mapped back. */
size_t
tok_bpe_piece(const struct tokenizer *t, int32_t id, char *buf, size_t buflen)
{
	const unsigned char	*s = (const unsigned char *)tok_text(t, id);
	size_t			 len = t->tok[id].len, i, l, o = 0;
	uint32_t		 cp;

	for (i = 0; i < len; i += l) {
		l = utf8_decode(s + i, len - i, &cp);
		if (cp < 324 && t->cp_byte[cp] != -1) {
			if (o >= buflen)
				break;
			buf[o++] = (char)t->cp_byte[cp];
		} else {
			/* Not a stand-in: keep the character as it is. */
			if (o + l > buflen)
				break;
			memcpy(buf + o, s + i, l);
			o += l;
		}
	}
	return (o);
}
