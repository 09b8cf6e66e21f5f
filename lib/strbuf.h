/* strbuf.h: a growable byte buffer and JSON string escaping. */
#ifndef PHASED_STRBUF_H
#define PHASED_STRBUF_H

#include <stddef.h>

/*
 * A growable, always NUL-terminated buffer of bytes.  A zeroed struct (or
 * STRBUF_INIT) is an empty buffer; strbuf_free() returns it to that state.
 * Growth aborts through the x* allocators, so the buffer is only for output
 * the daemon itself produces (metrics pages, traces, JSON replies), never
 * for sizes a peer chose.
 */
struct strbuf {
	char	*buf;		/* NULL until the first write */
	size_t	 len;		/* bytes used, excluding the terminating NUL */
	size_t	 cap;		/* bytes allocated */
};
#define STRBUF_INIT { NULL, 0, 0 }

void	 strbuf_init(struct strbuf *);
void	 strbuf_free(struct strbuf *);
void	 strbuf_reset(struct strbuf *);
/* The contents as a C string; "" for an empty buffer, never NULL. */
const char *strbuf_str(const struct strbuf *);
/* Hand the malloc'd string to the caller (who frees it); empties sb. */
char	*strbuf_detach(struct strbuf *, size_t *lenp);
void	 strbuf_reserve(struct strbuf *, size_t more);
void	 strbuf_add(struct strbuf *, const void *, size_t);
void	 strbuf_adds(struct strbuf *, const char *);
void	 strbuf_addc(struct strbuf *, char);
void	 strbuf_printf(struct strbuf *, const char *, ...)
	    __attribute__((format(printf, 2, 3)));

/*
 * Append s (n bytes) as a JSON string literal, quotes included (RFC 8259):
 * '"' and '\\' escaped, control characters as \b \f \n \r \t or \u00XX,
 * DEL and U+2028/U+2029 as \u escapes (so the output is also safe inside
 * JavaScript), valid UTF-8 copied, and every byte of an invalid UTF-8
 * sequence (overlong, surrogate, past U+10FFFF, truncated) replaced by
 * \ufffd so the result is always valid JSON text.
 */
void	 strbuf_json_stringn(struct strbuf *, const char *, size_t);
/* Same for a NUL-terminated string; NULL is written as null. */
void	 strbuf_json_string(struct strbuf *, const char *);
/* Append a finite double, %g with the fewest digits (15 to 17) that round-trip. */
void	 strbuf_double(struct strbuf *, double);
/* Append a JSON number, shortest round-trip form; NaN and infinities: null. */
void	 strbuf_json_double(struct strbuf *, double);

/* Offset of the first byte of s[0..n) that is not valid UTF-8, or -1. */
size_t	 utf8_first_invalid(const char *s, size_t n);
/* A copy of s with each byte that is not valid UTF-8 written as \xNN. */
char	*utf8_sanitize(const char *s);

#endif
