/* strbuf.c: a growable byte buffer and JSON string escaping. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "strbuf.h"
#include "unicode.h"
#include "util.h"

/* Make an empty buffer. */
void
strbuf_init(struct strbuf *sb)
{
	sb->buf = NULL;
	sb->len = sb->cap = 0;
}

/* Release the memory and leave an empty buffer. */
void
strbuf_free(struct strbuf *sb)
{
	free(sb->buf);
	strbuf_init(sb);
}

/* Empty the buffer but keep its memory for reuse. */
void
strbuf_reset(struct strbuf *sb)
{
	sb->len = 0;
	if (sb->buf != NULL)
		sb->buf[0] = '\0';
}

/* Return the contents as a C string. */
const char *
strbuf_str(const struct strbuf *sb)
{
	return (sb->buf != NULL ? sb->buf : "");
}

/* Give the string to the caller and empty the buffer. */
char *
strbuf_detach(struct strbuf *sb, size_t *lenp)
{
	char	*s;

	if (sb->buf == NULL)
		s = xstrdup("");
	else
		s = sb->buf;
	if (lenp != NULL)
		*lenp = sb->len;
	strbuf_init(sb);
	return (s);
}

/* Make room for more bytes plus the terminating NUL. */
void
strbuf_reserve(struct strbuf *sb, size_t more)
{
	size_t	need, cap;

	if (more > SIZE_MAX / 2 - sb->len)
		fatalx("strbuf: %zu more bytes past %zu would overflow", more,
		    sb->len);
	need = sb->len + more + 1;
	if (need <= sb->cap)
		return;
	cap = sb->cap != 0 ? sb->cap : 256;
	while (cap < need)
		cap *= 2;
	sb->buf = xreallocarray(sb->buf, cap, 1);
	sb->cap = cap;
	/* A buffer is a string as soon as it has memory, appended to or not. */
	sb->buf[sb->len] = '\0';
}

/* Append n bytes. */
void
strbuf_add(struct strbuf *sb, const void *p, size_t n)
{
	strbuf_reserve(sb, n);
	if (n != 0)
		memcpy(sb->buf + sb->len, p, n);
	sb->len += n;
	sb->buf[sb->len] = '\0';
}

/* Append a C string. */
void
strbuf_adds(struct strbuf *sb, const char *s)
{
	strbuf_add(sb, s, strlen(s));
}

/* Append one byte. */
void
strbuf_addc(struct strbuf *sb, char c)
{
	strbuf_add(sb, &c, 1);
}

/* Append printf-formatted text. */
void
strbuf_printf(struct strbuf *sb, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		fatalx("strbuf_printf: bad format '%s'", fmt);
	strbuf_reserve(sb, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t)n;
}

/* Append a JSON string literal with everything escaped that must be. */
void
strbuf_json_stringn(struct strbuf *sb, const char *s, size_t n)
{
	const unsigned char	*p = (const unsigned char *)s;
	size_t			 i, run, len;
	uint32_t		 cp;

	strbuf_addc(sb, '"');
	i = 0;
	while (i < n) {
		/* Copy runs of plain printable ASCII in one go. */
		run = i;
		while (run < n && p[run] >= 0x20 && p[run] < 0x7f &&
		    p[run] != '"' && p[run] != '\\')
			run++;
		if (run != i) {
			strbuf_add(sb, p + i, run - i);
			i = run;
			continue;
		}
		switch (p[i]) {
		case '"':
			strbuf_adds(sb, "\\\"");
			i++;
			continue;
		case '\\':
			strbuf_adds(sb, "\\\\");
			i++;
			continue;
		case '\b':
			strbuf_adds(sb, "\\b");
			i++;
			continue;
		case '\f':
			strbuf_adds(sb, "\\f");
			i++;
			continue;
		case '\n':
			strbuf_adds(sb, "\\n");
			i++;
			continue;
		case '\r':
			strbuf_adds(sb, "\\r");
			i++;
			continue;
		case '\t':
			strbuf_adds(sb, "\\t");
			i++;
			continue;
		}
		if (p[i] < 0x20 || p[i] == 0x7f) {
			strbuf_printf(sb, "\\u%04x", p[i]);
			i++;
			continue;
		}
		len = utf8_decode(p + i, n - i, &cp);
		if (cp == UC_INVALID) {
			/* One replacement per bad byte keeps resync simple. */
			strbuf_adds(sb, "\\ufffd");
			i++;
			continue;
		}
		if (cp == 0x2028 || cp == 0x2029)
			strbuf_printf(sb, "\\u%04x", cp);
		else
			strbuf_add(sb, p + i, len);
		i += len;
	}
	strbuf_addc(sb, '"');
}

/* Append a NUL-terminated string as a JSON string literal (or null). */
void
strbuf_json_string(struct strbuf *sb, const char *s)
{
	if (s == NULL)
		strbuf_adds(sb, "null");
	else
		strbuf_json_stringn(sb, s, strlen(s));
}

/* Append a finite double in the fewest digits that read back the same. */
void
strbuf_double(struct strbuf *sb, double v)
{
	char	tmp[64];
	int	prec;

	for (prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*g", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	strbuf_adds(sb, tmp);
}

/* Append a double as a JSON number in its shortest round-trip form. */
void
strbuf_json_double(struct strbuf *sb, double v)
{
	if (!isfinite(v))
		strbuf_adds(sb, "null");
	else
		strbuf_double(sb, v);
}

/* Offset of the first byte of s[0..n) that is not valid UTF-8, or -1. */
size_t
utf8_first_invalid(const char *s, size_t n)
{
	const unsigned char	*u = (const unsigned char *)s;
	uint32_t		 cp;
	size_t			 i = 0, len;

	while (i < n) {
		len = utf8_decode(u + i, n - i, &cp);
		if (cp == UC_INVALID)
			return (i);
		i += len;
	}
	return ((size_t)-1);
}

/*
 * A copy of s with each byte that is not valid UTF-8 written as \xNN, so a
 * message quoting client bytes stays a valid protobuf string.
 */
char *
utf8_sanitize(const char *s)
{
	const unsigned char	*u = (const unsigned char *)s;
	uint32_t		 cp;
	size_t			 n = strlen(s), i = 0, o = 0, len;
	char			*out;

	out = xcalloc(1, n * 4 + 1);
	while (i < n) {
		len = utf8_decode(u + i, n - i, &cp);
		if (cp == UC_INVALID) {
			snprintf(out + o, 5, "\\x%02x", u[i]);
			o += 4;
			i++;
			continue;
		}
		memcpy(out + o, s + i, len);
		o += len;
		i += len;
	}
	out[o] = '\0';
	return (out);
}
