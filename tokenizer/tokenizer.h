/* tokenizer.h: text to token ids and back, from a GGUF vocabulary. */
#ifndef PHASED_TOKENIZER_H
#define PHASED_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct gguf_file;
struct tokenizer;

/*
 * Two families are supported, chosen by tokenizer.ggml.model:
 *
 *	"llama"	SentencePiece-style: pieces merged by score, spaces written
 *		as U+2581, characters without a piece spelled with <0xNN>
 *		byte tokens.
 *	"gpt2"	byte-level BPE: text cut into words by the pre-tokenizer
 *		tokenizer.ggml.pre names (GPT-2's when the key is absent;
 *		tok_pre.c lists the names known), each word merged by rank.
 *		A file naming any other pre-tokenizer is refused.
 *
 * The vocabulary is copied out of the GGUF file, which may be closed
 * after tokenizer_load().  A loaded tokenizer is read-only, so several
 * threads may share it.
 */

/* No vocabulary string may be longer than this; pieces are no longer. */
#define TOKENIZER_TEXT_MAX	1024
/* Most token strings accepted in one vocabulary. */
#define TOKENIZER_VOCAB_MAX	(1 << 24)
/* Longest text tokenizer_encode() accepts, in bytes. */
#define TOKENIZER_INPUT_MAX	((size_t)16 << 20)

/* Token types (tokenizer.ggml.token_type). */
#define TOKEN_TYPE_UNDEFINED	0
#define TOKEN_TYPE_NORMAL	1
#define TOKEN_TYPE_UNKNOWN	2
#define TOKEN_TYPE_CONTROL	3
#define TOKEN_TYPE_USER		4
#define TOKEN_TYPE_UNUSED	5
#define TOKEN_TYPE_BYTE		6

/* Build a tokenizer from a GGUF file's tokenizer.ggml.* keys; NULL and *cause on error. */
struct tokenizer	*tokenizer_load(const struct gguf_file *, char **cause);
void			 tokenizer_free(struct tokenizer *);

int		 tokenizer_n_vocab(const struct tokenizer *);
/* Special token ids, -1 when the vocabulary has none. */
int32_t		 tokenizer_bos(const struct tokenizer *);
int32_t		 tokenizer_eos(const struct tokenizer *);
int32_t		 tokenizer_eot(const struct tokenizer *);
int32_t		 tokenizer_unk(const struct tokenizer *);
int32_t		 tokenizer_pad(const struct tokenizer *);
/* Whether the model wants BOS (EOS) added to a prompt by default. */
int		 tokenizer_add_bos(const struct tokenizer *);
int		 tokenizer_add_eos(const struct tokenizer *);
/* Whether id ends generation: EOS, EOT, EOM or a known end-of-turn token. */
int		 tokenizer_is_eog(const struct tokenizer *, int32_t id);
/* The token's type (TOKEN_TYPE_*), -1 for an id out of range. */
int		 tokenizer_token_type(const struct tokenizer *, int32_t id);
/* "llama" or "gpt2". */
const char	*tokenizer_model(const struct tokenizer *);

/*
 * Encode len bytes of text (any bytes; invalid UTF-8 is kept byte for
 * byte).  add_bos puts BOS first (an error if the vocabulary has none).
 * User-defined tokens are always matched whole, as their tokenizers do;
 * control tokens such as "<s>" only when parse_special is set, otherwise
 * they are ordinary text.  *ids is malloc'd (possibly for zero ids) and
 * the caller frees it.  -1 and *cause on error.
 */
int		 tokenizer_encode(const struct tokenizer *, const char *text,
		    size_t len, int add_bos, int parse_special, int32_t **ids,
		    size_t *n_ids, char **cause);

/*
 * The bytes a token stands for in output: byte tokens as their byte, SPM
 * U+2581 as a space, byte-level BPE text mapped back to bytes, control
 * tokens as nothing.  Writes at most buflen bytes (no NUL) and returns
 * how many; a piece is never longer than TOKENIZER_TEXT_MAX.  A piece may
 * be part of a UTF-8 character: use struct detok to stream text.
 */
size_t		 tokenizer_piece(const struct tokenizer *, int32_t id,
		    char *buf, size_t buflen);
/* The vocabulary string as stored (NUL-terminated), NULL for a bad id. */
const char	*tokenizer_token_text(const struct tokenizer *, int32_t id);

/*
 * Streaming detokenizer: push ids one at a time and get back only whole,
 * valid UTF-8 characters; an incomplete tail waits for the next token or
 * detok_flush().  Invalid bytes come out as U+FFFD, so the output is
 * always valid UTF-8.  As SentencePiece decoding does, the space the
 * encoder put before the text is dropped from the first piece of the
 * stream and from the first piece after each BOS; a stream that continues
 * a prompt turns that off with detok.strip_space = 0 after detok_init().
 * Give detok_push and detok_flush an out buffer of DETOK_OUT_MAX bytes,
 * which always suffices; a smaller one truncates at a character boundary.
 */
#define DETOK_OUT_MAX	(3 * (TOKENIZER_TEXT_MAX + 4))

struct detok {
	const struct tokenizer	*tok;
	unsigned char		 pend[4];	/* an incomplete character */
	uint8_t			 npend;
	uint8_t			 need;		/* its full length */
	uint8_t			 strip_space;	/* drop a leading ' ' next */
};

void		 detok_init(struct detok *, const struct tokenizer *);
size_t		 detok_push(struct detok *, int32_t id, char *out, size_t outlen);
size_t		 detok_flush(struct detok *, char *out, size_t outlen);

#endif
