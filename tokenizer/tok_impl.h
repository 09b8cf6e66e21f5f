/* tok_impl.h: the tokenizer's insides, shared by tokenizer.c and tok_*.c. */
#ifndef PHASED_TOK_IMPL_H
#define PHASED_TOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

struct gguf_file;

enum tok_kind {
	TOK_SPM,		/* tokenizer.ggml.model "llama" */
	TOK_BPE,		/* tokenizer.ggml.model "gpt2" */
};

/* The BPE pre-tokenizer rules (tok_pre.c has each one's patterns). */
enum tok_pre {
	TOK_PRE_GPT2,		/* the GPT-2 split */
	TOK_PRE_LLAMA3,		/* the Llama 3 split */
	TOK_PRE_QWEN2,		/* Llama 3's with single digits */
	TOK_PRE_QWEN35,		/* Qwen 2's with marks in words */
	TOK_PRE_DEEPSEEK_LLM,
	TOK_PRE_DEEPSEEK_CODER,
	TOK_PRE_DEEPSEEK3,
	TOK_PRE_FALCON,
	TOK_PRE_STARCODER,	/* single digits, then GPT-2 */
	TOK_PRE_TEKKEN,		/* words split at case changes */
	TOK_PRE_GPT4O,		/* Tekken's words with contractions, digits in threes */
	TOK_PRE_BLOOM,
	TOK_PRE_VIKING,		/* BLOOM's, then single digits */
	TOK_PRE_MINICPM5,	/* digits in threes, then Llama 3's with whole numbers */
	TOK_PRE_SEED_CODER,	/* Qwen 2's without newlines after punctuation */
	TOK_PRE_COUNT
};

/* What a tokenizer.ggml.pre name implies besides its rule. */
#define TOK_PRE_WHOLE_WORDS	0x01	/* a word that is a token is taken whole */
#define TOK_PRE_BOS		0x02	/* add BOS unless the file says not to */

struct tok_pre_name {
	const char	*name;
	enum tok_pre	 pre;
	int		 flags;		/* TOK_PRE_* */
};

/* One vocabulary entry. */
struct tok_entry {
	uint32_t	off;		/* of its text in tokenizer.text */
	uint32_t	len;
	float		score;
	uint8_t		type;		/* TOKEN_TYPE_* */
	uint8_t		byte;		/* the byte of a TOKEN_TYPE_BYTE token */
	uint8_t		rstrip;		/* matched as a special token, eats the spaces after it */
};

/* A BPE merge in the open-addressing table, keyed by the pair of ids. */
struct tok_merge {
	uint64_t	key;		/* left << 32 | right; TOK_MERGE_EMPTY if free */
	int32_t		rank;
	int32_t		result;
};
#define TOK_MERGE_EMPTY	UINT64_MAX

#define TOK_EOG_MAX	16

/* A set of tokens to find in text, by first byte, longest first. */
struct tok_special {
	int32_t		*ids;
	size_t		 n;
	size_t		 at[257];	/* ids[at[c]] .. ids[at[c + 1]] start with c */
};

struct tokenizer {
	enum tok_kind		 kind;
	enum tok_pre		 pre;
	int			 n_vocab;
	char			*text;		/* every token's text, NUL-terminated */
	struct tok_entry	*tok;

	int32_t			*hash;		/* text -> id; -1 when free */
	size_t			 hash_mask;

	struct tok_merge	*merges;
	size_t			 merge_mask;
	size_t			 n_merges;

	int32_t			 bos, eos, unk, pad, eot, eom;
	int			 add_bos, add_eos;
	int			 add_space_prefix;	/* SPM: " " before the text */
	int			 ignore_merges;		/* BPE: whole-word tokens first */
	int			 pre_flags;		/* BPE: TOK_PRE_* of its name */

	/* SPM: the <0xNN> token of each byte; BPE: its one-character token. */
	int32_t			 byte_tok[256];
	/* BPE: each byte's stand-in code point, and back (-1: none). */
	uint32_t		 byte_cp[256];
	int16_t			 cp_byte[324];

	/*
	 * Tokens the splitter matches in text: control, unknown and
	 * user-defined ones (with parse_special), and user-defined ones
	 * alone (always).
	 */
	struct tok_special	 sp_all;
	struct tok_special	 sp_user;

	int32_t			 eog[TOK_EOG_MAX];
	size_t			 n_eog;
};

/* A growing list of output ids. */
struct tok_out {
	int32_t	*ids;
	size_t	 n;
	size_t	 cap;
};

/*
 * A merge candidate: two adjacent symbols whose joined text is token id.
 * The heap pops the lowest key first (SPM: -score, BPE: rank), then the
 * leftmost pair, which is the order both reference tokenizers use.
 */
struct tok_cand {
	float		key;
	int32_t		left;
	int32_t		right;
	int32_t		id;
	uint32_t	size;		/* joined length, to spot stale entries */
};

struct tok_heap {
	struct tok_cand	*v;
	size_t		 n;
	size_t		 cap;
};

/* A symbol in the doubly linked list a word is merged in. */
struct tok_sym {
	uint32_t	off;
	uint32_t	len;		/* 0 once merged into its left neighbour */
	int32_t		prev;
	int32_t		next;
	int32_t		id;		/* its token, -1 if none */
};

void	 tok_out_push(struct tok_out *, int32_t);
void	 tok_heap_init(struct tok_heap *, size_t cap);
void	 tok_heap_free(struct tok_heap *);
void	 tok_heap_push(struct tok_heap *, const struct tok_cand *);
int	 tok_heap_pop(struct tok_heap *, struct tok_cand *);
int32_t	 tok_lookup(const struct tokenizer *, const char *, size_t);
const char *tok_text(const struct tokenizer *, int32_t);

/* tok_spm.c */
int	 tok_spm_encode(const struct tokenizer *, const char *, size_t,
	    int prefix_space, struct tok_out *, char **cause);

/* tok_bpe.c */
void	 tok_bpe_byte_map(struct tokenizer *);
int	 tok_bpe_load(struct tokenizer *, const struct gguf_file *, char **cause);
int	 tok_bpe_encode(const struct tokenizer *, const char *, size_t,
	    struct tok_out *, char **cause);
size_t	 tok_bpe_piece(const struct tokenizer *, int32_t, char *, size_t);

/* tok_pre.c */
const struct tok_pre_name *tok_pre_find(const char *);
size_t	 tok_pre_split(enum tok_pre, const char *, size_t, size_t **ends);

#endif
