/* test-tokenizer.c: tokenizer vectors, round trips, streaming, hostile vocabularies. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "ggufraw.h"
#include "tap.h"
#include "tok_impl.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define SEPARATOR	"\n__ggml_vocab_test__\n"

static char	shared[4096];

/* Read a whole file; NULL if it cannot be read. */
static char *
slurp(const char *path, size_t *len)
{
	FILE	*f;
	char	*buf = NULL;
	size_t	 cap = 0, n = 0, r;

	if ((f = fopen(path, "rb")) == NULL)
		return (NULL);
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = (n + 4096 + 1) * 2;
			buf = xreallocarray(buf, cap, 1);
		}
		if ((r = fread(buf + n, 1, 4096, f)) == 0)
			break;
		n += r;
	}
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return (buf);
}

/* Open a GGUF file under the shared directory and load its tokenizer. */
static struct tokenizer *
load_shared(const char *rel)
{
	struct gguf_file	*gf;
	struct tokenizer	*t;
	char			 path[8192], *cause = NULL;

	snprintf(path, sizeof path, "%s/%s", shared, rel);
	if ((gf = gguf_open(path, &cause)) == NULL) {
		diag("%s: %s", path, cause);
		free(cause);
		return (NULL);
	}
	t = tokenizer_load(gf, &cause);
	if (t == NULL) {
		diag("%s: %s", path, cause);
		free(cause);
	}
	gguf_close(gf);
	return (t);
}

/* Print bytes as a C-escaped string into a diagnostic. */
static void
diag_bytes(const char *what, const char *s, size_t n)
{
	size_t	i;

	printf("# %s: \"", what);
	for (i = 0; i < n; i++) {
		unsigned char c = s[i];

		if (c == '\n')
			printf("\\n");
		else if (c == '\t')
			printf("\\t");
		else if (c < 0x20 || c == '"' || c == '\\')
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	printf("\"\n");
}

/* Print an id list into a diagnostic. */
static void
diag_ids(const char *what, const int32_t *ids, size_t n)
{
	size_t	i;

	printf("# %s:", what);
	for (i = 0; i < n; i++)
		printf(" %d", ids[i]);
	printf("\n");
}

/* Encode with the defaults of the reference vectors; aborts the test on error. */
static int32_t *
enc(const struct tokenizer *t, const char *s, size_t len, int bos, int special,
    size_t *n)
{
	int32_t	*ids;
	char	*cause = NULL;

	if (tokenizer_encode(t, s, len, bos, special, &ids, n, &cause) != 0) {
		diag("encode failed: %s", cause);
		free(cause);
		*n = 0;
		return (xcalloc(1, sizeof *ids));
	}
	return (ids);
}

/* Whether a buffer is complete, valid UTF-8. */
static int
valid_utf8(const char *s, size_t n)
{
	size_t		i, l;
	uint32_t	cp;

	for (i = 0; i < n; i += l) {
		l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
		if (cp == UC_INVALID)
			return (0);
	}
	return (1);
}

/*
 * Decode ids through the streaming detokenizer into a malloc'd buffer;
 * *stream_ok is cleared if any single push produced invalid UTF-8.
 */
static char *
decode_all(const struct tokenizer *t, const int32_t *ids, size_t n,
    size_t *len, int *stream_ok)
{
	struct detok	 d;
	char		 out[DETOK_OUT_MAX], *buf;
	size_t		 i, o = 0, k;

	buf = xmalloc(n * DETOK_OUT_MAX + DETOK_OUT_MAX + 1);
	detok_init(&d, t);
	for (i = 0; i < n; i++) {
		k = detok_push(&d, ids[i], out, sizeof out);
		if (!valid_utf8(out, k))
			*stream_ok = 0;
		memcpy(buf + o, out, k);
		o += k;
	}
	k = detok_flush(&d, out, sizeof out);
	memcpy(buf + o, out, k);
	o += k;
	buf[o] = '\0';
	*len = o;
	return (buf);
}

/* Parse one line of expected ids. */
static size_t
parse_ids(const char *line, int32_t *ids, size_t max)
{
	const char	*p = line;
	char		*end;
	size_t		 n = 0;
	long		 v;

	for (;;) {
		while (*p == ' ')
			p++;
		if (*p == '\0' || *p == '\n')
			break;
		v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (n < max)
			ids[n++] = (int32_t)v;
		p = end;
	}
	return (n);
}

/*
 * Run one vocabulary's .inp/.out vectors.  Inputs are each followed by
 * "\n__ggml_vocab_test__\n" (so an input's own trailing newlines are kept
 * and only the one before the marker belongs to the separator); the .out
 * file has one line of ids per input.  With round_trip, also check that
 * detokenizing gives the input back.
 */
static void
run_vectors(const struct tokenizer *t, const char *base, int round_trip)
{
	char		 path[8192], *inp, *out, *p, *sep, *line, *next, *dec;
	size_t		 ilen, olen, n, want_n, dlen, i, count = 0, failed = 0;
	size_t		 rt_failed = 0;
	int32_t		*ids, want[4096];
	int		 same, stream_ok = 1;

	snprintf(path, sizeof path, "%s/vocab/%s.inp", shared, base);
	inp = slurp(path, &ilen);
	snprintf(path, sizeof path, "%s/vocab/%s.out", shared, base);
	out = slurp(path, &olen);
	if (!ok(inp != NULL && out != NULL, "%s: read vectors", base)) {
		free(inp);
		free(out);
		return;
	}

	p = inp;
	line = out;
	while ((sep = strstr(p, SEPARATOR)) != NULL) {
		if (line == NULL || *line == '\0') {
			ok(0, "%s: .out has a line for input %zu", base, count);
			break;
		}
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		want_n = parse_ids(line, want, sizeof want / sizeof want[0]);
		ids = enc(t, p, sep - p, 0, 0, &n);
		same = n == want_n;
		for (i = 0; same && i < n; i++)
			same = ids[i] == want[i];
		if (!ok(same, "%s: vector %zu", base, count)) {
			diag_bytes("input", p, sep - p);
			diag_ids("got", ids, n);
			diag_ids("want", want, want_n);
			failed++;
		}
		if (round_trip) {
			dec = decode_all(t, ids, n, &dlen, &stream_ok);
			if (dlen != (size_t)(sep - p) || memcmp(dec, p, dlen) != 0) {
				diag_bytes("round trip of", p, sep - p);
				diag_bytes("gave", dec, dlen);
				rt_failed++;
			}
			free(dec);
			/* With BOS the leading space goes too. */
			free(ids);
			ids = enc(t, p, sep - p, 1, 0, &n);
			dec = decode_all(t, ids, n, &dlen, &stream_ok);
			if (dlen != (size_t)(sep - p) || memcmp(dec, p, dlen) != 0) {
				diag_bytes("round trip with bos of", p, sep - p);
				diag_bytes("gave", dec, dlen);
				rt_failed++;
			}
			free(dec);
		}
		free(ids);
		count++;
		p = sep + strlen(SEPARATOR);
		line = next;
	}
	ok(count >= 40, "%s: %zu vectors read", base, count);
	is_int(failed, 0, "%s: all vectors pass", base);
	if (round_trip) {
		is_int(rt_failed, 0, "%s: decode(encode(x)) == x", base);
		ok(stream_ok, "%s: every streamed push is whole UTF-8", base);
	}
	free(inp);
	free(out);
}

/* Check that an id list equals the expected one. */
static void
is_ids(const int32_t *got, size_t n, const int32_t *want, size_t want_n,
    const char *what)
{
	int	same = n == want_n;
	size_t	i;

	for (i = 0; same && i < n; i++)
		same = got[i] == want[i];
	if (!ok(same, "%s", what)) {
		diag_ids("got", got, n);
		diag_ids("want", want, want_n);
	}
}

/* The SentencePiece vocabulary: metadata, special tokens, streaming. */
static void
test_spm(void)
{
	struct tokenizer	*t;
	struct detok		 d;
	char			 out[DETOK_OUT_MAX], piece[64];
	int32_t			*ids;
	size_t			 n, k, i;
	int			 found;
	static const int32_t	 hello[] = { 15043 };
	static const int32_t	 bos_hello[] = { 1, 15043, 2 };

	t = load_shared("vocab/ggml-vocab-llama-spm.gguf");
	if (!ok(t != NULL, "spm: load"))
		return;
	is_int(tokenizer_n_vocab(t), 32000, "spm: n_vocab");
	is_int(tokenizer_bos(t), 1, "spm: bos from metadata");
	is_int(tokenizer_eos(t), 2, "spm: eos from metadata");
	is_int(tokenizer_unk(t), 0, "spm: unk from metadata");
	ok(tokenizer_add_bos(t), "spm: add_bos_token");
	ok(tokenizer_is_eog(t, 2), "spm: eos ends generation");
	ok(!tokenizer_is_eog(t, 1), "spm: bos does not");
	is_str(tokenizer_model(t), "llama", "spm: model");
	is_str(tokenizer_token_text(t, 15043), "\xe2\x96\x81Hello", "spm: stored text");
	ok(tokenizer_token_text(t, 32000) == NULL, "spm: text of bad id");
	n = tokenizer_piece(t, 15043, piece, sizeof piece);
	ok(n == 6 && memcmp(piece, " Hello", 6) == 0, "spm: piece maps U+2581 to space");
	n = tokenizer_piece(t, 3 + 0x41, piece, sizeof piece);
	ok(n == 1 && piece[0] == 'A', "spm: byte token piece");
	is_int(tokenizer_piece(t, 2, piece, sizeof piece), 0, "spm: control piece is empty");
	is_int(tokenizer_piece(t, 15043, piece, 3), 3, "spm: piece truncates to buflen");

	run_vectors(t, "ggml-vocab-llama-spm.gguf", 1);

	/* BOS added on request. */
	ids = enc(t, "Hello", 5, 1, 0, &n);
	ok(n == 2 && ids[0] == 1 && ids[1] == 15043, "spm: add_bos puts bos first");
	free(ids);

	/* Special tokens only when asked. */
	ids = enc(t, "<s>Hello</s>", 12, 0, 1, &n);
	is_ids(ids, n, bos_hello, 3, "spm: <s> and </s> parsed with parse_special");
	free(ids);
	ids = enc(t, "<s>Hello</s>", 12, 0, 0, &n);
	found = 0;
	for (i = 0; i < n; i++)
		found |= ids[i] == 1 || ids[i] == 2;
	ok(n > 3 && !found, "spm: <s> is plain text without parse_special");
	free(ids);
	ids = enc(t, "Hello", 5, 0, 1, &n);
	is_ids(ids, n, hello, 1, "spm: parse_special on plain text");
	free(ids);

	/* 中 through its byte tokens, one at a time. */
	detok_init(&d, t);
	d.strip_space = 0;
	k = detok_push(&d, 3 + 0xe4, out, sizeof out);
	is_int(k, 0, "detok: <0xE4> held back");
	k = detok_push(&d, 3 + 0xb8, out, sizeof out);
	is_int(k, 0, "detok: <0xB8> held back");
	k = detok_push(&d, 3 + 0xad, out, sizeof out);
	ok(k == 3 && memcmp(out, "\xe4\xb8\xad", 3) == 0, "detok: <0xAD> completes U+4E2D");
	is_int(detok_flush(&d, out, sizeof out), 0, "detok: nothing left");

	/* An emoji, then an interrupted sequence. */
	static const unsigned char llama[] = { 0xf0, 0x9f, 0xa6, 0x99 };
	detok_init(&d, t);
	for (i = 0, k = 0; i < 4; i++) {
		n = detok_push(&d, 3 + llama[i], out, sizeof out);
		if (i < 3)
			k += n;
	}
	ok(k == 0 && n == 4 && memcmp(out, llama, 4) == 0, "detok: U+1F999 only when whole");
	detok_init(&d, t);
	detok_push(&d, 3 + 0xe4, out, sizeof out);
	k = detok_push(&d, 3 + 'A', out, sizeof out);
	ok(k == 4 && memcmp(out, "\xef\xbf\xbd" "A", 4) == 0, "detok: broken sequence becomes U+FFFD");
	detok_push(&d, 3 + 0xe4, out, sizeof out);
	detok_push(&d, 3 + 0xb8, out, sizeof out);
	k = detok_flush(&d, out, sizeof out);
	ok(k == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "detok: flush replaces an incomplete tail");
	detok_push(&d, 3 + 0xff, out, sizeof out);
	k = detok_push(&d, 3 + 0x80, out, sizeof out);
	ok(k == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "detok: stray continuation byte becomes U+FFFD");

	/* Leading space: dropped at the start and after BOS, kept mid-stream. */
	detok_init(&d, t);
	k = detok_push(&d, 15043, out, sizeof out);
	ok(k == 5 && memcmp(out, "Hello", 5) == 0, "detok: first piece loses its space");
	k = detok_push(&d, 15043, out, sizeof out);
	ok(k == 6 && memcmp(out, " Hello", 6) == 0, "detok: later piece keeps it");
	detok_push(&d, 1, out, sizeof out);
	k = detok_push(&d, 15043, out, sizeof out);
	ok(k == 5 && memcmp(out, "Hello", 5) == 0, "detok: piece after bos loses it");
	detok_init(&d, t);
	d.strip_space = 0;
	k = detok_push(&d, 15043, out, sizeof out);
	ok(k == 6 && memcmp(out, " Hello", 6) == 0, "detok: strip_space = 0 continues a text");
	is_int(detok_push(&d, 2, out, sizeof out), 0, "detok: eos writes nothing");

	tokenizer_free(t);
}

/* The GPT-2 vocabulary. */
static void
test_gpt2(void)
{
	struct tokenizer	*t;
	struct detok		 d;
	char			 piece[64], out[DETOK_OUT_MAX], *dec;
	int32_t			*ids;
	size_t			 n, dlen, k, i, total;
	int			 stream_ok = 1;
	static const int32_t	 eot[] = { 15496, 50256, 15496 };
	static const char	 llama[] = "\xf0\x9f\xa6\x99 \xe4\xb8\xad";

	t = load_shared("vocab/ggml-vocab-gpt-2.gguf");
	if (!ok(t != NULL, "gpt2: load"))
		return;
	is_int(tokenizer_n_vocab(t), 50257, "gpt2: n_vocab");
	is_int(tokenizer_bos(t), 50256, "gpt2: bos");
	is_int(tokenizer_eos(t), 50256, "gpt2: eos");
	ok(!tokenizer_add_bos(t), "gpt2: no bos by default");
	ok(tokenizer_is_eog(t, 50256), "gpt2: <|endoftext|> ends generation");
	is_str(tokenizer_model(t), "gpt2", "gpt2: model");

	run_vectors(t, "ggml-vocab-gpt-2.gguf", 0);

	/* Ġ stands for a space. */
	ids = enc(t, " Hello", 6, 0, 0, &n);
	k = n == 1 ? tokenizer_piece(t, ids[0], piece, sizeof piece) : 0;
	ok(k == 6 && memcmp(piece, " Hello", 6) == 0, "gpt2: piece maps stand-ins to bytes");
	free(ids);

	ids = enc(t, "Hello<|endoftext|>Hello", 23, 0, 1, &n);
	is_ids(ids, n, eot, 3, "gpt2: <|endoftext|> parsed with parse_special");
	free(ids);
	ids = enc(t, "Hello<|endoftext|>Hello", 23, 0, 0, &n);
	ok(n > 3, "gpt2: <|endoftext|> is plain text without parse_special");
	free(ids);

	/* Byte-level BPE is lossless, invalid UTF-8 included. */
	static const char raw[] = "a\xff\xfe b\xe4\xb8 \xc0\x80z";
	ids = enc(t, raw, sizeof raw - 1, 0, 0, &n);
	total = 0;
	for (i = 0; i < n; i++)
		total += tokenizer_piece(t, ids[i], piece + total, sizeof piece - total);
	ok(total == sizeof raw - 1 && memcmp(piece, raw, total) == 0, "gpt2: pieces give back invalid UTF-8");
	dec = decode_all(t, ids, n, &dlen, &stream_ok);
	ok(valid_utf8(dec, dlen), "gpt2: detok output is valid UTF-8 for invalid input");
	free(dec);
	free(ids);

	/* Partial-character tokens are held back while streaming. */
	ids = enc(t, llama, sizeof llama - 1, 0, 0, &n);
	ok(n > 2, "gpt2: emoji and CJK split into byte-level tokens (%zu)", n);
	dec = decode_all(t, ids, n, &dlen, &stream_ok);
	ok(stream_ok, "gpt2: every streamed push is whole UTF-8");
	ok(dlen == sizeof llama - 1 && memcmp(dec, llama, dlen) == 0, "gpt2: round trip");
	free(dec);
	free(ids);

	detok_init(&d, t);
	ids = enc(t, " Hello", 6, 0, 0, &n);
	k = detok_push(&d, ids[0], out, sizeof out);
	ok(k == 6 && memcmp(out, " Hello", 6) == 0, "gpt2: no leading space rule");
	free(ids);
	tokenizer_free(t);
}

/*
 * The other shared BPE vocabularies, each with its own pre-tokenizer:
 * deepseek-llm's six passes and falcon's three.
 */
static void
test_bpe_vocabs(void)
{
	static const struct {
		const char	*file;
		int		 n_vocab;
	} v[] = {
		{ "ggml-vocab-deepseek-llm.gguf", 102400 },
		{ "ggml-vocab-falcon.gguf", 65024 },
	};
	struct tokenizer	*t;
	char			 rel[256];
	size_t			 i;

	for (i = 0; i < sizeof v / sizeof v[0]; i++) {
		snprintf(rel, sizeof rel, "vocab/%s", v[i].file);
		t = load_shared(rel);
		if (!ok(t != NULL, "%s: load", v[i].file))
			continue;
		is_int(tokenizer_n_vocab(t), v[i].n_vocab, "%s: n_vocab", v[i].file);
		run_vectors(t, v[i].file, 0);
		tokenizer_free(t);
	}
}

/* stories260K's 512-token vocabulary against the golden prompt. */
static void
test_stories(void)
{
	struct tokenizer	*t;
	char			 path[8192], *json, *p, *end;
	size_t			 len, n, want_n = 0;
	int32_t			*ids, want[64];

	t = load_shared("models/stories260K.gguf");
	if (!ok(t != NULL, "stories260K: load"))
		return;
	is_int(tokenizer_n_vocab(t), 512, "stories260K: n_vocab");
	is_int(tokenizer_pad(t), -1, "stories260K: padding id 0xffffffff means none");
	snprintf(path, sizeof path, "%s/golden/stories260K-once-upon-a-time.json",
	    shared);
	json = slurp(path, &len);
	p = json != NULL ? strstr(json, "\"prompt_tokens\"") : NULL;
	if (p != NULL && (p = strchr(p, '[')) != NULL) {
		for (p++; want_n < 64; p = end) {
			while (*p == ' ' || *p == '\n' || *p == ',')
				p++;
			want[want_n] = strtol(p, &end, 10);
			if (end == p)
				break;
			want_n++;
		}
	}
	if (ok(want_n > 1 && want[0] == 1, "stories260K: golden prompt tokens read")) {
		ids = enc(t, "Once upon a time", 16, 0, 0, &n);
		is_ids(ids, n, want + 1, want_n - 1, "stories260K: \"Once upon a time\"");
		free(ids);
		ids = enc(t, "Once upon a time", 16, tokenizer_add_bos(t), 0, &n);
		is_ids(ids, n, want, want_n, "stories260K: with bos as the model wants");
		free(ids);
	}
	free(json);
	tokenizer_free(t);
}

/* The value after "key": in JSON text from p, or NULL. */
static char *
json_value(char *p, const char *key)
{
	char	pat[64];

	snprintf(pat, sizeof pat, "\"%s\"", key);
	if ((p = strstr(p, pat)) == NULL)
		return (NULL);
	p += strlen(pat);
	while (*p == ' ' || *p == ':')
		p++;
	return (p);
}

/*
 * The models of every architecture in the shared set (their vocabulary is
 * stories260K's): each golden case's prompt encodes to its prompt_ids, BOS
 * as the model wants it.
 */
static void
test_arch_prompts(void)
{
	static const char *const arch[] = {
		"gemma2", "gemma3", "llama3", "mistral-hd", "phi3", "qwen2",
		"qwen3",
	};
	struct tokenizer	*t;
	char			 rel[512], path[8192], *json, *p, *q, *end;
	char			 prompt[256];
	size_t			 a, len, n, want_n, cases;
	int32_t			*ids, want[256];

	for (a = 0; a < sizeof arch / sizeof arch[0]; a++) {
		snprintf(rel, sizeof rel, "models/arch/%s.gguf", arch[a]);
		t = load_shared(rel);
		snprintf(path, sizeof path, "%s/golden/arch/%s.json", shared, arch[a]);
		json = slurp(path, &len);
		if (!ok(t != NULL && json != NULL, "%s: load vocabulary and golden", arch[a])) {
			tokenizer_free(t);
			free(json);
			continue;
		}
		cases = 0;
		for (p = json; (p = json_value(p, "prompt")) != NULL; p = q) {
			if (*p++ != '"' || (q = strchr(p, '"')) == NULL ||
			    (size_t)(q - p) >= sizeof prompt)
				break;
			memcpy(prompt, p, q - p);
			prompt[q - p] = '\0';
			if ((q = json_value(q, "prompt_ids")) == NULL || *q++ != '[')
				break;
			for (want_n = 0; want_n < 256; q = end) {
				while (*q == ' ' || *q == ',')
					q++;
				want[want_n] = strtol(q, &end, 10);
				if (end == q)
					break;
				want_n++;
			}
			ids = enc(t, prompt, strlen(prompt), tokenizer_add_bos(t), 0, &n);
			snprintf(rel, sizeof rel, "%s: \"%s\"", arch[a], prompt);
			is_ids(ids, n, want, want_n, rel);
			free(ids);
			cases++;
		}
		ok(cases >= 4, "%s: %zu golden prompts", arch[a], cases);
		free(json);
		tokenizer_free(t);
	}
}

/* A GGUF file under construction, in memory. */
struct gw {
	struct rawbuf	 raw;
	uint64_t	 n_kv;
};

/* Start a key of a type. */
static void
gw_key(struct gw *g, const char *key, uint32_t type)
{
	raw_str(&g->raw, key);
	raw_u32(&g->raw, type);
	g->n_kv++;
}

/* Add a string key. */
static void
gw_kv_str(struct gw *g, const char *key, const char *v)
{
	gw_key(g, key, GGUF_VT_STRING);
	raw_str(&g->raw, v);
}

/* Add a uint32 key. */
static void
gw_kv_u32(struct gw *g, const char *key, uint32_t v)
{
	gw_key(g, key, GGUF_VT_UINT32);
	raw_u32(&g->raw, v);
}

/* Add an array of strings. */
static void
gw_kv_strs(struct gw *g, const char *key, const char *const *v, size_t n)
{
	size_t	i;

	gw_key(g, key, GGUF_VT_ARRAY);
	raw_u32(&g->raw, GGUF_VT_STRING);
	raw_u64(&g->raw, n);
	for (i = 0; i < n; i++)
		raw_str(&g->raw, v[i]);
}

/* An array of 4-byte elements (int32 or float32). */
static void
gw_kv_arr4(struct gw *g, const char *key, uint32_t type, const void *v, size_t n)
{
	gw_key(g, key, GGUF_VT_ARRAY);
	raw_u32(&g->raw, type);
	raw_u64(&g->raw, n);
	raw_put(&g->raw, v, 4 * n);
}

/* Finish: the header, then the key/values; returns a malloc'd file. */
static unsigned char *
gw_finish(struct gw *g, size_t *len)
{
	struct rawbuf	f = { NULL, 0, 0 };

	raw_put(&f, "GGUF", 4);
	raw_u32(&f, 3);
	raw_u64(&f, 0);
	raw_u64(&f, g->n_kv);
	raw_put(&f, g->raw.p, g->raw.len);
	free(g->raw.p);
	memset(g, 0, sizeof *g);
	*len = f.len;
	return (f.p);
}

/* A small valid SPM vocabulary, with knobs to break it. */
enum {
	BAD_NONE,
	BAD_SCORES_SHORT,
	BAD_TYPES_LONG,
	BAD_BOS_RANGE,
	BAD_TYPES_FLOAT,
	BAD_TOKENS_INT,
	BAD_TYPE_VALUE,
	BAD_MODEL,
	BAD_BYTE_TEXT,
	BAD_NAN,
	BAD_NO_TOKENS,
	BAD_BOS_STRING,
	BAD_ADD_BOS_INT,
	VAR_PHI3,		/* valid, named like a Phi-3 model */
};

static const char *const tiny_tokens[] = {
	"<unk>", "<s>", "</s>", "<0x41>", "<0xE4>", "<0xB8>", "<0xAD>",
	"\xe2\x96\x81", "a", "b", "\xe2\x96\x81\x61", "ab", "\xe2\x96\x81\x61\x62",
	"<|u|>", "<c>",
};
#define TINY_N	(sizeof tiny_tokens / sizeof tiny_tokens[0])
static const int32_t tiny_types[TINY_N] = {
	2, 3, 3, 6, 6, 6, 6, 1, 1, 1, 1, 1, 1, 4, 3,
};

/* Build the small SPM vocabulary as a GGUF file, broken as asked. */
static unsigned char *
tiny_spm(int bad, size_t *len)
{
	struct gw	 g = { { NULL, 0, 0 }, 0 };
	float		 scores[TINY_N];
	int32_t		 types[TINY_N];
	size_t		 i;
	static const char *const bad_byte[] = { "<unk>", "<0xZ1>" };
	static const int32_t bad_byte_types[] = { 2, 6 };

	for (i = 0; i < TINY_N; i++) {
		scores[i] = -(float)i;
		types[i] = tiny_types[i];
	}
	gw_kv_str(&g, "general.architecture", "llama");
	if (bad == VAR_PHI3)
		gw_kv_str(&g, "general.name", "Phi-3-mini-4k-instruct");
	gw_kv_str(&g, "tokenizer.ggml.model", bad == BAD_MODEL ? "bert" : "llama");
	if (bad == BAD_BYTE_TEXT) {
		gw_kv_strs(&g, "tokenizer.ggml.tokens", bad_byte, 2);
		gw_kv_arr4(&g, "tokenizer.ggml.token_type", GGUF_VT_INT32,
		    bad_byte_types, 2);
		return (gw_finish(&g, len));
	}
	if (bad == BAD_TOKENS_INT)
		gw_kv_arr4(&g, "tokenizer.ggml.tokens", GGUF_VT_INT32, types, TINY_N);
	else if (bad != BAD_NO_TOKENS)
		gw_kv_strs(&g, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
	if (bad == BAD_NAN)
		scores[5] = NAN;
	gw_kv_arr4(&g, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, scores,
	    bad == BAD_SCORES_SHORT ? TINY_N - 1 : TINY_N);
	if (bad == BAD_TYPE_VALUE)
		types[7] = 9;
	if (bad == BAD_TYPES_FLOAT)
		gw_kv_arr4(&g, "tokenizer.ggml.token_type", GGUF_VT_FLOAT32,
		    scores, TINY_N);
	else if (bad == BAD_TYPES_LONG) {
		int32_t	more[TINY_N + 1];

		memcpy(more, types, sizeof types);
		more[TINY_N] = 1;
		gw_kv_arr4(&g, "tokenizer.ggml.token_type", GGUF_VT_INT32,
		    more, TINY_N + 1);
	} else
		gw_kv_arr4(&g, "tokenizer.ggml.token_type", GGUF_VT_INT32,
		    types, TINY_N);
	if (bad == BAD_BOS_STRING)
		gw_kv_str(&g, "tokenizer.ggml.bos_token_id", "1");
	else
		gw_kv_u32(&g, "tokenizer.ggml.bos_token_id",
		    bad == BAD_BOS_RANGE ? TINY_N : 1);
	gw_kv_u32(&g, "tokenizer.ggml.eos_token_id", 2);
	if (bad == BAD_ADD_BOS_INT)
		gw_kv_u32(&g, "tokenizer.ggml.add_bos_token", 1);
	return (gw_finish(&g, len));
}

/* Load a tokenizer from memory; returns it, or NULL with *cause set. */
static struct tokenizer *
load_mem(const unsigned char *buf, size_t len, char **cause)
{
	struct gguf_file	*gf;
	struct tokenizer	*t;

	*cause = NULL;
	if ((gf = gguf_open_mem(buf, len, cause)) == NULL)
		return (NULL);
	t = tokenizer_load(gf, cause);
	gguf_close(gf);
	return (t);
}

/* Expect a broken SPM vocabulary to be refused with a particular message. */
static void
expect_bad(int bad, const char *want, const char *what)
{
	struct tokenizer	*t;
	unsigned char		*buf;
	size_t			 len;
	char			*cause;

	buf = tiny_spm(bad, &len);
	t = load_mem(buf, len, &cause);
	ok(t == NULL, "hostile: %s refused", what);
	like(cause, want, "hostile: %s error", what);
	tokenizer_free(t);
	free(cause);
	free(buf);
}

/* A small valid GPT-2 style vocabulary with the given merges. */
static unsigned char *
tiny_bpe(const char *const *merges, size_t n_merges, const char *pre, size_t *len)
{
	struct gw	 g = { { NULL, 0, 0 }, 0 };
	static const char *const tokens[] = {
		"a", "b", "c", "ab", "abc", "\xc4\xa0", "\xc4\xa0\x61", "<|end|>",
	};
	static const int32_t types[] = { 1, 1, 1, 1, 1, 1, 1, 3 };

	gw_kv_str(&g, "tokenizer.ggml.model", "gpt2");
	if (pre != NULL)
		gw_kv_str(&g, "tokenizer.ggml.pre", pre);
	gw_kv_strs(&g, "tokenizer.ggml.tokens", tokens, 8);
	gw_kv_arr4(&g, "tokenizer.ggml.token_type", GGUF_VT_INT32, types, 8);
	gw_kv_strs(&g, "tokenizer.ggml.merges", merges, n_merges);
	gw_kv_u32(&g, "tokenizer.ggml.eos_token_id", 7);
	return (gw_finish(&g, len));
}

/* Vocabularies built in memory: valid ones and hostile ones. */
static void
test_tiny(void)
{
	struct tokenizer	*t;
	unsigned char		*buf;
	char			*cause;
	int32_t			*ids;
	size_t			 len, n;
	static const int32_t	 want_ab[] = { 12, 10, 7, 9 };
	static const int32_t	 want_user[] = { 10, 13, 7, 9 };
	static const int32_t	 want_bytes[] = { 7, 3, 4, 5, 6 };
	static const int32_t	 want_bpe[] = { 4, 6, 7, 3 };
	static const char *const good[] = { "a b", "ab c", "\xc4\xa0 a" };
	static const char *const nospace[] = { "a b", "abc" };
	static const char *const missing[] = { "a b", "ab x" };
	static const char *const noresult[] = { "a b", "b c" };

	buf = tiny_spm(BAD_NONE, &len);
	t = load_mem(buf, len, &cause);
	if (ok(t != NULL, "tiny spm: loads")) {
		is_int(tokenizer_n_vocab(t), TINY_N, "tiny spm: n_vocab");
		/* "▁a" (score -10) merges before "ab" (-11), then "▁ab". */
		ids = enc(t, "ab a b", 6, 0, 0, &n);
		is_ids(ids, n, want_ab, 4, "tiny spm: merges by score");
		free(ids);
		ids = enc(t, "a<|u|><c>b", 10, 0, 0, &n);
		ok(n > 3 && ids[1] == 13 && ids[n - 1] != 14, "tiny spm: user token always, control not");
		free(ids);
		ids = enc(t, "a<|u|><c>b", 10, 0, 1, &n);
		is_ids(ids, n, (const int32_t[]){ 10, 13, 14, 7, 9 }, 5,
		    "tiny spm: control token with parse_special, space prefix after it");
		free(ids);
		ids = enc(t, "a<|u|>b", 7, 0, 0, &n);
		is_ids(ids, n, want_user, 4, "tiny spm: space prefix after a user token");
		free(ids);
		ids = enc(t, "A\xe4\xb8\xad", 4, 0, 0, &n);
		is_ids(ids, n, want_bytes, 5, "tiny spm: byte fallback");
		free(ids);
		ids = enc(t, "\xff", 1, 0, 0, &n);
		ok(n == 2 && ids[1] == 0, "tiny spm: byte without a token is unknown");
		free(ids);
	} else
		diag("%s", cause);
	tokenizer_free(t);
	free(cause);
	free(buf);

	/* Phi-3's special tokens eat the whitespace after them; others do not. */
	buf = tiny_spm(VAR_PHI3, &len);
	t = load_mem(buf, len, &cause);
	if (ok(t != NULL, "tiny phi-3: loads")) {
		ids = enc(t, "a<c>\n b<|u|> \tb", 15, 0, 1, &n);
		is_ids(ids, n, (const int32_t[]){ 10, 14, 7, 9, 13, 7, 9 }, 7,
		    "tiny phi-3: whitespace after special tokens stripped");
		free(ids);
		ids = enc(t, "<s> a", 5, 0, 1, &n);
		is_ids(ids, n, (const int32_t[]){ 1, 7, 10 }, 3,
		    "tiny phi-3: <s> keeps the space after it");
		free(ids);
	} else
		diag("%s", cause);
	tokenizer_free(t);
	free(cause);
	free(buf);
	buf = tiny_spm(BAD_NONE, &len);
	t = load_mem(buf, len, &cause);
	if (ok(t != NULL, "tiny spm: loads again")) {
		ids = enc(t, "a<c> b", 6, 0, 1, &n);
		is_ids(ids, n, (const int32_t[]){ 10, 14, 7, 7, 9 }, 5,
		    "tiny spm: other models keep the space after a special token");
		free(ids);
	} else
		diag("%s", cause);
	tokenizer_free(t);
	free(cause);
	free(buf);

	expect_bad(BAD_SCORES_SHORT, "14 scores for 15 tokens", "short scores array");
	expect_bad(BAD_TYPES_LONG, "16 types for 15 tokens", "long token_type array");
	expect_bad(BAD_BOS_RANGE, "token id 15 out of range (vocabulary has 15 tokens)", "bos id out of range");
	expect_bad(BAD_TYPES_FLOAT, "'tokenizer.ggml.token_type' is an array of float32, want an array of int32", "float token types");
	expect_bad(BAD_TOKENS_INT, "'tokenizer.ggml.tokens' is an array of int32, want an array of string", "int tokens");
	expect_bad(BAD_TYPE_VALUE, "token 7 has type 9", "token type 9");
	expect_bad(BAD_MODEL, "unsupported tokenizer 'bert'", "unknown model");
	expect_bad(BAD_BYTE_TEXT, "byte token 1 is not of the form <0xNN>", "bad byte token");
	expect_bad(BAD_NAN, "token 5 has a NaN score", "NaN score");
	expect_bad(BAD_NO_TOKENS, "tokenizer.ggml.tokens", "missing tokens");
	expect_bad(BAD_BOS_STRING, "tokenizer.ggml.bos_token_id", "string bos id");
	expect_bad(BAD_ADD_BOS_INT, "tokenizer.ggml.add_bos_token", "integer add_bos_token");

	buf = tiny_bpe(good, 3, NULL, &len);
	t = load_mem(buf, len, &cause);
	if (ok(t != NULL, "tiny bpe: loads")) {
		ids = enc(t, "abc a<|end|>ab", 14, 0, 1, &n);
		is_ids(ids, n, want_bpe, 4, "tiny bpe: merges by rank, control token");
		free(ids);
		ok(tokenizer_is_eog(t, 7), "tiny bpe: eos ends generation");
		ok(tokenizer_bos(t) == -1 && !tokenizer_add_bos(t), "tiny bpe: no bos");
		ok(tokenizer_encode(t, "a", 1, 1, 0, &ids, &n, &cause) == -1, "tiny bpe: add_bos without bos fails");
		like(cause, "no bos token", "tiny bpe: add_bos error");
		free(ids);
	} else
		diag("%s", cause);
	tokenizer_free(t);
	free(cause);
	free(buf);

	static const struct {
		const char *const	*merges;
		size_t			 n;
		const char		*pre;
		const char		*want;
		const char		*what;
	} bad_bpe[] = {
		{ nospace, 2, NULL, "merge 1 is not two tokens separated by a space", "merge without space" },
		{ missing, 2, NULL, "merge 1 ('ab x') right side is not in the vocabulary", "merge of unknown token" },
		{ noresult, 2, NULL, "merge 1 ('b c') result is not in the vocabulary", "merge to unknown token" },
		{ good, 3, "qwen9", "unsupported pre-tokenizer 'qwen9'", "unknown pre-tokenizer" },
	};
	for (size_t i = 0; i < sizeof bad_bpe / sizeof bad_bpe[0]; i++) {
		buf = tiny_bpe(bad_bpe[i].merges, bad_bpe[i].n, bad_bpe[i].pre, &len);
		t = load_mem(buf, len, &cause);
		ok(t == NULL, "hostile bpe: %s refused", bad_bpe[i].what);
		like(cause, bad_bpe[i].want, "hostile bpe: %s error", bad_bpe[i].what);
		tokenizer_free(t);
		free(cause);
		free(buf);
	}
}

/*
 * Each pre-tokenizer's words for tricky inputs: contractions, digits, CJK,
 * emoji, whitespace runs, marks, punctuation.  The expected words are what
 * the published patterns give under a Unicode-aware regex engine (the
 * tokenizers' JavaScript port, transformers.js).  The same rules were
 * checked on whole vocabularies, by token ids, outside this suite (the
 * files are too big to ship): llama.cpp's vectors, 46 inputs each, pass
 * for gpt-2, mpt (and gpt-neox, which names no pre-tokenizer),
 * deepseek-llm, deepseek-coder, falcon, starcoder, refact, phi-3 and
 * llama-spm; qwen2's on Qwen 3's vocabulary and llama-bpe's on Llama 3's;
 * and 175 inputs per rule match transformers.js on the Qwen 3, Llama 3,
 * DeepSeek V3, GPT-4o and Gemma 3 vocabularies, except 3 qwen2 inputs in
 * decomposed form that Qwen's NFC normalizer composes first (llama.cpp
 * does not normalize either).
 */
static const char *const split_in[] = {
	"Hello World's 12345 dogs!!\n\n  end",
	"HTTPServer iPhone McDONALD'S they're",
	"\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	"\xf0\x9f\xa6\x99 emoji \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd x\xc2\xb2",
	"  \t leading\r\n\r\n trailing  ",
	"na\xc3\xafve caf\xc3\xa9 \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	"3.14 \xd9\xa3\xd9\xa4\xd9\xa5 $100 ~a `b` (c)",
	"\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88 \xe2\x80\x98q\xe2\x80\x99 /path/\n",
};
static const struct {
	enum tok_pre	 pre;
	const char	*name;
	const char	*want[8];
} split_want[] = {
	{ TOK_PRE_GPT2, "gpt2", {
	    "Hello| World|'s| 12345| dogs|!!|\n\n | end",
	    "HTTPServer| iPhone| McDONALD|'|S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95|\xe0\xa5\x8d|\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d|\xe0\xa4\xb0|\xe0\xa4\xbf|\xe0\xa4\xaf",
	    "3|.|14| \xd9\xa3\xd9\xa4\xd9\xa5| $|100| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80|\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/|\n",
	} },
	{ TOK_PRE_LLAMA3, "llama3", {
	    "Hello| World|'s| |123|45| dogs|!!\n\n| | end",
	    "HTTPServer| iPhone| McDONALD|'S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95|\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d\xe0\xa4\xb0|\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|14| |\xd9\xa3\xd9\xa4\xd9\xa5| $|100| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/\n",
	} },
	{ TOK_PRE_QWEN2, "qwen2", {
	    "Hello| World|'s| |1|2|3|4|5| dogs|!!\n\n| | end",
	    "HTTPServer| iPhone| McDONALD|'S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95|\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d\xe0\xa4\xb0|\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|1|4| |\xd9\xa3|\xd9\xa4|\xd9\xa5| $|1|0|0| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/\n",
	} },
	{ TOK_PRE_QWEN35, "qwen35", {
	    "Hello| World|'s| |1|2|3|4|5| dogs|!!\n\n| | end",
	    "HTTPServer| iPhone| McDONALD|'S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|1|4| |\xd9\xa3|\xd9\xa4|\xd9\xa5| $|1|0|0| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/\n",
	} },
	{ TOK_PRE_DEEPSEEK_LLM, "deepseek-llm", {
	    "Hello| World|'|s| |12345| dogs|!!|\n|\n| | end",
	    "HTTPServer| iPhone| McDONALD|'|S| they|'|re",
	    "\xe4\xb8\xad\xe6\x96\x87|abc|\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| |\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r|\n|\r|\n| trailing|  ",
	    "na|\xc3\xaf|ve| caf|\xc3\xa9| |\xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|14| |\xd9\xa3\xd9\xa4\xd9\xa5| $|100| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80|\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| |\xe2\x80\x98|q|\xe2\x80\x99| /|path|/|\n",
	} },
	{ TOK_PRE_DEEPSEEK_CODER, "deepseek-coder", {
	    "Hello| World|'|s| |1|2|3|4|5| dogs|!!|\n|\n| | end",
	    "HTTPServer| iPhone| McDONALD|'|S| they|'|re",
	    "\xe4\xb8\xad\xe6\x96\x87|abc|\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| |\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r|\n|\r|\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| |\xe0\xa4\x95|\xe0\xa5\x8d|\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d|\xe0\xa4\xb0|\xe0\xa4\xbf|\xe0\xa4\xaf",
	    "3|.|1|4| |\xd9\xa3|\xd9\xa4|\xd9\xa5| $|1|0|0| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80|\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| |\xe2\x80\x98|q|\xe2\x80\x99| /|path|/|\n",
	} },
	{ TOK_PRE_DEEPSEEK3, "deepseek-v3", {
	    "Hello| World|'s| |123|45| dogs|!!\n\n| | end",
	    "HTTPServer| iPhone| McDONALD|'S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87|abc|\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|14| |\xd9\xa3\xd9\xa4\xd9\xa5| $|100| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/\n",
	} },
	{ TOK_PRE_FALCON, "falcon", {
	    "Hello| World|'|s| |123|45| dogs|!!|\n\n | end",
	    "HTTPServer| iPhone| McDONALD|'|S| they|'|re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95|\xe0\xa5\x8d|\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d|\xe0\xa4\xb0|\xe0\xa4\xbf|\xe0\xa4\xaf",
	    "3|.|14| \xd9\xa3\xd9\xa4\xd9\xa5| |$|100| |~|a| |`|b|`| |(|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80|\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| |\xe2\x80\x98|q|\xe2\x80\x99| |/|path|/|\n",
	} },
	{ TOK_PRE_STARCODER, "starcoder", {
	    "Hello| World|'s| |1|2|3|4|5| dogs|!!|\n\n | end",
	    "HTTPServer| iPhone| McDONALD|'|S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95|\xe0\xa5\x8d|\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d|\xe0\xa4\xb0|\xe0\xa4\xbf|\xe0\xa4\xaf",
	    "3|.|1|4| |\xd9\xa3|\xd9\xa4|\xd9\xa5| $|1|0|0| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80|\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/|\n",
	} },
	{ TOK_PRE_TEKKEN, "tekken", {
	    "Hello| World|'s| |1|2|3|4|5| dogs|!!\n\n| | end",
	    "HTTPServer| i|Phone| Mc|DONALD|'S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|1|4| |\xd9\xa3|\xd9\xa4|\xd9\xa5| $|1|0|0| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/\n",
	} },
	{ TOK_PRE_GPT4O, "gpt-4o", {
	    "Hello| World's| |123|45| dogs|!!\n\n| | end",
	    "HTTPServer| i|Phone| Mc|DONALD'S| they're",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|14| |\xd9\xa3\xd9\xa4\xd9\xa5| $|100| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/\n",
	} },
	{ TOK_PRE_BLOOM, "bloom", {
	    "Hello| World's| 12345| dogs|!!\n\n | end",
	    "HTTPServer| iPhone| McDONALD'S| they're",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|14| \xd9\xa3\xd9\xa4\xd9\xa5| $100| ~a| `b`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80|\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98q\xe2\x80\x99| /path/|\n",
	} },
	{ TOK_PRE_VIKING, "viking", {
	    "Hello| World's| |1|2|3|4|5| dogs|!!\n\n | end",
	    "HTTPServer| iPhone| McDONALD'S| they're",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4\xe0\xa5\x8d\xe0\xa4\xb0\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|1|4| |\xd9\xa3|\xd9\xa4|\xd9\xa5| $|1|0|0| ~a| `b`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80|\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98q\xe2\x80\x99| /path/|\n",
	} },
	{ TOK_PRE_MINICPM5, "minicpm5", {
	    "Hello| World|'s| |123|45| dogs|!!\n\n| | end",
	    "HTTPServer| iPhone| McDONALD|'S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95|\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d\xe0\xa4\xb0|\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|14| |\xd9\xa3\xd9\xa4\xd9\xa5| $|100| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/\n",
	} },
	{ TOK_PRE_SEED_CODER, "seed-coder", {
	    "Hello| World|'s| |1|2|3|4|5| dogs|!!|\n\n| | end",
	    "HTTPServer| iPhone| McDONALD|'S| they|'re",
	    "\xe4\xb8\xad\xe6\x96\x87" "abc\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a| \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
	    "\xf0\x9f\xa6\x99| emoji| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| x|\xc2\xb2",
	    "  \t| leading|\r\n\r\n| trailing|  ",
	    "na\xc3\xafve| caf\xc3\xa9| \xe0\xa4\x95|\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xa4|\xe0\xa5\x8d\xe0\xa4\xb0|\xe0\xa4\xbf\xe0\xa4\xaf",
	    "3|.|1|4| |\xd9\xa3|\xd9\xa4|\xd9\xa5| $|1|0|0| ~|a| `|b|`| (|c|)",
	    "\xef\xbc\xa6\xef\xbc\xb5\xef\xbc\xac\xef\xbc\xac|\xe3\x80\x80\xef\xbd\x97\xef\xbd\x89\xef\xbd\x84\xef\xbd\x94\xef\xbd\x88| \xe2\x80\x98|q|\xe2\x80\x99| /|path|/|\n",
	} },
};

/* Check a pre-tokenizer split; want lists the words separated by '|'. */
static void
check_split_named(enum tok_pre pre, const char *name, const char *text,
    const char *want)
{
	char	 got[1024];
	size_t	*ends, n, i, o = 0, start = 0;

	n = tok_pre_split(pre, text, strlen(text), &ends);
	for (i = 0; i < n && o + (ends[i] - start) + 2 < sizeof got; i++) {
		if (i > 0)
			got[o++] = '|';
		memcpy(got + o, text + start, ends[i] - start);
		o += ends[i] - start;
		start = ends[i];
	}
	got[o] = '\0';
	if (!ok(strcmp(got, want) == 0, "%s split", name)) {
		diag_bytes("input", text, strlen(text));
		diag_bytes("got", got, o);
		diag_bytes("want", want, strlen(want));
	}
	free(ends);
}

/* check_split_named for the two rules the hand-worked examples use. */
static void
check_split(enum tok_pre pre, const char *text, const char *want)
{
	check_split_named(pre, pre == TOK_PRE_LLAMA3 ? "llama3" : "gpt2", text,
	    want);
}

/* The pre-tokenizer regexes, by hand-worked examples. */
static void
test_split(void)
{
	struct tokenizer	*t;
	unsigned char		*buf;
	char			*cause;
	int32_t			*ids;
	size_t			 len, n;
	static const char *const merges[] = { "a b" };
	size_t			 i, k;

	for (i = 0; i < sizeof split_want / sizeof split_want[0]; i++) {
		for (k = 0; k < sizeof split_in / sizeof split_in[0]; k++)
			check_split_named(split_want[i].pre, split_want[i].name,
			    split_in[k], split_want[i].want[k]);
	}
	/* Random text: every rule's words cover it exactly, none empty. */
	static const char *const bits[] = {
		" ", "  ", "\n", "\r\n", "\t", "a", "Zz", "'s", "'LL", "7", "42",
		"\xe4\xb8\xad", "\xe3\x82\xab", "\xea\xb0\x80", "\xcc\x81",
		"\xc3\x89", "\xf0\x9f\xa6\x99", "!", "...", "$", "/", "\xff",
		"\xe3\x80\x80", "\xef\xbc\x81", "\xd9\xa3",
	};
	uint32_t	 x = 12345;
	size_t		*ends, nw, w, bad = 0, round, tl;
	char		 text[512];
	int		 pre;

	for (pre = 0; pre < TOK_PRE_COUNT; pre++) {
		for (round = 0; round < 200; round++) {
			for (tl = 0; tl < sizeof text - 8; ) {
				x ^= x << 13, x ^= x >> 17, x ^= x << 5;
				if (x % 23 == 0)
					break;
				k = strlen(bits[x % (sizeof bits / sizeof bits[0])]);
				memcpy(text + tl, bits[x % (sizeof bits / sizeof bits[0])], k);
				tl += k;
			}
			nw = tok_pre_split((enum tok_pre)pre, text, tl, &ends);
			for (w = 0; w < nw; w++) {
				if (ends[w] <= (w ? ends[w - 1] : 0))
					break;
			}
			if (w != nw || (tl > 0 ? nw == 0 || ends[nw - 1] != tl : nw != 0))
				bad++;
			free(ends);
		}
	}
	is_int(bad, 0, "pre: words of random text cover it exactly, for every rule");

	check_split(TOK_PRE_GPT2, "Hello world", "Hello| world");
	check_split(TOK_PRE_GPT2, "   Hello", "  | Hello");
	check_split(TOK_PRE_GPT2, "I'm x'RE", "I|'m| x|'|RE");
	check_split(TOK_PRE_GPT2, "12345 3.14", "12345| 3|.|14");
	check_split(TOK_PRE_GPT2, "a\n\n b", "a|\n\n| b");
	check_split(TOK_PRE_GPT2, "hello!!\n\nworld", "hello|!!|\n|\n|world");
	check_split(TOK_PRE_GPT2, "(Hello", "(|Hello");
	check_split(TOK_PRE_GPT2, "  \tx  ", "  |\t|x|  ");
	check_split(TOK_PRE_GPT2, "F\xc3\xbchrer \xd0\xbd\xd0\xb0",
	    "F\xc3\xbchrer| \xd0\xbd\xd0\xb0");
	check_split(TOK_PRE_GPT2, "\xe1\x9e\x80\xe1\x9e\xb6", "\xe1\x9e\x80|\xe1\x9e\xb6");
	check_split(TOK_PRE_GPT2, "a\xff" "b", "a|\xff|b");

	check_split(TOK_PRE_LLAMA3, "Hello world", "Hello| world");
	check_split(TOK_PRE_LLAMA3, "I'm x'RE", "I|'m| x|'RE");
	check_split(TOK_PRE_LLAMA3, "12345 3.14", "123|45| |3|.|14");
	check_split(TOK_PRE_LLAMA3, "a\n\n b", "a|\n\n| b");
	check_split(TOK_PRE_LLAMA3, "hello!!\n\nworld", "hello|!!\n\n|world");
	check_split(TOK_PRE_LLAMA3, "(Hello", "(Hello");
	check_split(TOK_PRE_LLAMA3, "  \tx  ", "  |\tx|  ");
	check_split(TOK_PRE_LLAMA3, "x \n\t y", "x| \n|\t| y");

	/* llama-bpe and tekken take whole-word tokens before merging. */
	static const char *const whole[] = { "llama-bpe", "tekken" };
	for (i = 0; i < 2; i++) {
		buf = tiny_bpe(merges, 1, whole[i], &len);
		t = load_mem(buf, len, &cause);
		if (ok(t != NULL, "%s pre: loads", whole[i])) {
			ids = enc(t, "abc", 3, 0, 0, &n);
			ok(n == 1 && ids[0] == 4, "%s pre: whole-word token without a merge path", whole[i]);
			free(ids);
		} else
			diag("%s", cause);
		tokenizer_free(t);
		free(cause);
		free(buf);
	}

	/* Other names merge as listed: "abc" has no path past "ab". */
	buf = tiny_bpe(merges, 1, "qwen2", &len);
	t = load_mem(buf, len, &cause);
	if (ok(t != NULL, "qwen2 pre: loads")) {
		ids = enc(t, "abc", 3, 0, 0, &n);
		ok(n == 2 && ids[0] == 3 && ids[1] == 2, "qwen2 pre: merges only");
		free(ids);
	} else
		diag("%s", cause);
	tokenizer_free(t);
	free(cause);
	free(buf);

	/* Every name the common GGUF files carry loads. */
	static const char *const known[] = {
		"gpt-2", "default", "mpt", "olmo", "llama-bpe", "llama3",
		"dbrx", "smaug-bpe", "glm4", "qwen2", "deepseek-r1-qwen",
		"stablelm2", "qwen35", "deepseek-llm", "deepseek-coder",
		"deepseek-v3", "falcon", "starcoder", "refact", "command-r",
		"smollm", "exaone", "tekken", "gpt-4o", "llama4", "bloom",
		"poro-chat", "viking", "bailingmoe", "seed-coder", "minicpm5",
	};
	for (i = k = 0; i < sizeof known / sizeof known[0]; i++) {
		buf = tiny_bpe(merges, 1, known[i], &len);
		t = load_mem(buf, len, &cause);
		if (t == NULL) {
			diag("%s: %s", known[i], cause);
			k++;
		}
		tokenizer_free(t);
		free(cause);
		free(buf);
	}
	is_int(k, 0, "pre: all %zu known names load", sizeof known / sizeof known[0]);
}

/*
 * Corrupt the small vocabularies byte by byte: whatever the reader
 * accepts, the tokenizer must either refuse with a cause or encode and
 * decode without tripping the sanitizers.
 */
static void
test_mutations(void)
{
	static const char *const merges[] = { "a b", "ab c", "\xc4\xa0 a" };
	struct tokenizer	*t;
	struct detok		 d;
	unsigned char		*orig, *buf;
	char			*cause, out[DETOK_OUT_MAX];
	int32_t			*ids;
	size_t			 len, n, i, round, loaded = 0, refused = 0, nocause = 0;
	uint32_t		 x = 88172645U;
	int			 kind;

	for (kind = 0; kind < 2; kind++) {
		orig = kind == 0 ? tiny_spm(BAD_NONE, &len) :
		    tiny_bpe(merges, 3, "llama-bpe", &len);
		buf = xmalloc(len);
		for (round = 0; round < 1500; round++) {
			memcpy(buf, orig, len);
			for (i = 0; i < 1 + round % 4; i++) {
				x ^= x << 13, x ^= x >> 17, x ^= x << 5;
				buf[24 + x % (len - 24)] ^= 1 << (x >> 8) % 8;
			}
			t = load_mem(buf, len, &cause);
			if (t == NULL) {
				refused++;
				if (cause == NULL)
					nocause++;
				free(cause);
				continue;
			}
			loaded++;
			if (tokenizer_encode(t, "ab a<c>\xe4\xb8\xad<|end|>", 17,
			    tokenizer_bos(t) != -1, 1, &ids, &n, &cause) == 0) {
				detok_init(&d, t);
				for (i = 0; i < n; i++)
					detok_push(&d, ids[i], out, sizeof out);
				detok_flush(&d, out, sizeof out);
				free(ids);
			} else
				free(cause);
			tokenizer_free(t);
		}
		free(buf);
		free(orig);
	}
	ok(loaded > 0 && refused > 0, "mutations: %zu loaded, %zu refused", loaded, refused);
	is_int(nocause, 0, "mutations: every refusal has a cause");
}

/* The random-weight model's full Llama 2 vocabulary, without add_bos_token. */
static void
test_tiny_random(void)
{
	struct tokenizer	*t;
	int32_t			*ids;
	size_t			 n;

	t = load_shared("models/llama-2-tiny-random.gguf");
	if (!ok(t != NULL, "llama-2-tiny-random: load"))
		return;
	ok(tokenizer_add_bos(t), "llama-2-tiny-random: SPM adds bos by default");
	ids = enc(t, "Hello world", 11, tokenizer_add_bos(t), 0, &n);
	ok(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186,
	    "llama-2-tiny-random: \"Hello world\"");
	free(ids);
	tokenizer_free(t);
}

/*
 * Random bytes through both shared vocabularies: encoding never fails,
 * the pieces give the bytes back exactly (SPM less its prefix space), and
 * the detokenizer turns any id sequence into valid UTF-8.
 */
static void
test_random(void)
{
	static const char *const files[] = {
		"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf",
	};
	struct tokenizer	*t;
	char			 text[512], back[512 * 4 + 16], *dec;
	int32_t			*ids, rid[64];
	size_t			 f, round, len, n, i, o, dlen, bad, bad_utf8;
	uint32_t		 x = 2463534242U;
	int			 stream_ok;

	for (f = 0; f < 2; f++) {
		if ((t = load_shared(files[f])) == NULL) {
			ok(0, "random: load %s", files[f]);
			continue;
		}
		bad = bad_utf8 = 0;
		for (round = 0; round < 300; round++) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			len = x % 300;
			for (i = 0; i < len; i++) {
				x ^= x << 13, x ^= x >> 17, x ^= x << 5;
				/* Half the rounds lean on ASCII and spaces. */
				text[i] = round % 2 ? (char)x : " ab<s>\xc3\xa9"[x % 9];
			}
			ids = enc(t, text, len, 0, 0, &n);
			for (i = o = 0; i < n; i++)
				o += tokenizer_piece(t, ids[i], back + o, sizeof back - o);
			if (f == 0 && len > 0 && o > 0 && back[0] == ' ') {
				memmove(back, back + 1, o - 1);
				o--;
			}
			if (o != len || memcmp(back, text, len) != 0) {
				if (bad++ == 0)
					diag_bytes("pieces differ for", text, len);
			}
			free(ids);

			for (i = 0; i < 64; i++) {
				x ^= x << 13, x ^= x >> 17, x ^= x << 5;
				rid[i] = x % (tokenizer_n_vocab(t) + 2) - 1;
			}
			stream_ok = 1;
			dec = decode_all(t, rid, 64, &dlen, &stream_ok);
			if (!stream_ok || !valid_utf8(dec, dlen))
				bad_utf8++;
			free(dec);
		}
		is_int(bad, 0, "random: %s pieces give the bytes back", files[f]);
		is_int(bad_utf8, 0, "random: %s detok of random ids is valid UTF-8", files[f]);
		tokenizer_free(t);
	}
}

/* Run every group of assertions against the shared data and in-memory files. */
int
main(void)
{
	const char	*env;

	if ((env = getenv("PHASED_SHARED")) != NULL && *env != '\0')
		snprintf(shared, sizeof shared, "%s", env);
	else if ((env = getenv("top_srcdir")) != NULL && *env != '\0')
		snprintf(shared, sizeof shared, "%s/../shared", env);
	else
		snprintf(shared, sizeof shared, "%s/../shared", TOP_SRCDIR);

	test_spm();
	test_gpt2();
	test_bpe_vocabs();
	test_stories();
	test_arch_prompts();
	test_tiny();
	test_split();
	test_random();
	test_mutations();
	test_tiny_random();
	done_testing();
}
