/* unicode.h: the little Unicode the tokenizers need. */
#ifndef PHASED_UNICODE_H
#define PHASED_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Major general categories; everything unlisted (C*) is UCAT_OTHER. */
enum ucat {
	UCAT_OTHER = 0,
	UCAT_LETTER,		/* L* */
	UCAT_MARK,		/* M* */
	UCAT_NUMBER,		/* N* */
	UCAT_PUNCT,		/* P* */
	UCAT_SYMBOL,		/* S* */
	UCAT_SEPARATOR,		/* Z* */
};

struct ucat_range {
	uint32_t	lo;
	uint32_t	hi;
	uint8_t		cat;	/* enum ucat */
};

/*
 * The case of a letter, for splitting words where the case changes:
 * Lu and Lt are upper, Ll lower, Lm and Lo count as both.
 */
enum ulcase {
	ULC_NONE = 0,		/* not a letter */
	ULC_UPPER = 1,
	ULC_LOWER = 2,
	ULC_BOTH = 3,		/* ULC_UPPER | ULC_LOWER */
};

/* Generated into unicode_tables.c: sorted, disjoint ranges. */
extern const struct ucat_range	ucat_ranges[];
extern const size_t		ucat_nranges;
extern const struct ucat_range	ulc_ranges[];	/* cat is an enum ulcase */
extern const size_t		ulc_nranges;

/* The general category of a code point. */
enum ucat	 ucat_of(uint32_t cp);
/* The case of a letter, ULC_NONE for anything else. */
enum ulcase	 uc_letter_case(uint32_t cp);
/* Whether a code point has the White_Space property (regex \s). */
int		 uc_is_space(uint32_t cp);

/*
 * Decode one UTF-8 sequence at s (n > 0 bytes available).  Returns its
 * length and sets *cp; an invalid or truncated sequence counts as one byte
 * with *cp = UC_INVALID, so every byte of the input is covered exactly once.
 */
#define UC_INVALID	0xFFFFFFFFU
size_t		 utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Encode a code point (<= 0x10FFFF) into buf (4 bytes); returns the length. */
size_t		 utf8_encode(uint32_t cp, char *buf);
/*
 * How many bytes the sequence starting with lead byte b should have (1 to
 * 4), or 0 when b cannot start a sequence.
 */
size_t		 utf8_lead_len(unsigned char b);
/* Whether b may follow the first `pos` bytes of a sequence led by lead. */
int		 utf8_cont_ok(unsigned char lead, size_t pos, unsigned char b);

#endif
