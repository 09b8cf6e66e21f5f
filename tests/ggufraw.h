/* ggufraw.h: raw GGUF bytes for tests that build files, hostile ones too. */
#ifndef PHASED_GGUFRAW_H
#define PHASED_GGUFRAW_H

#include <stdint.h>
#include <string.h>

#include "util.h"

/* A growing byte buffer. */
struct rawbuf {
	uint8_t	*p;
	size_t	 len;
	size_t	 cap;
};

/* Append raw bytes. */
static __attribute__((unused)) void
raw_put(struct rawbuf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = xreallocarray(b->p, b->cap, 1);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

/* Append one byte. */
static __attribute__((unused)) void
raw_u8(struct rawbuf *b, uint8_t v)
{
	raw_put(b, &v, 1);
}

/* Append a little-endian uint32. */
static __attribute__((unused)) void
raw_u32(struct rawbuf *b, uint32_t v)
{
	raw_put(b, &v, 4);
}

/* Append a little-endian uint64. */
static __attribute__((unused)) void
raw_u64(struct rawbuf *b, uint64_t v)
{
	raw_put(b, &v, 8);
}

/* Append a GGUF string: its length, then its bytes. */
static __attribute__((unused)) void
raw_str(struct rawbuf *b, const char *s)
{
	raw_u64(b, strlen(s));
	raw_put(b, s, strlen(s));
}

#endif
