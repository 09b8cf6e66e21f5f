/* json.c: writing JSON strings for phasectl's --json output. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "phasectl.h"

/* Write len bytes as a JSON string literal, escaping as RFC 8259 asks. */
void
json_strn(FILE *f, const char *s, size_t len)
{
	const unsigned char	*p = (const unsigned char *)s;
	size_t			 i;

	fputc('"', f);
	for (i = 0; i < len; i++) {
		switch (p[i]) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (p[i] < 0x20 || p[i] == 0x7f)
				fprintf(f, "\\u%04x", p[i]);
			else
				fputc(p[i], f);
		}
	}
	fputc('"', f);
}

/* Write a NUL-terminated string as a JSON string literal. */
void
json_str(FILE *f, const char *s)
{
	if (s == NULL)
		fputs("null", f);
	else
		json_strn(f, s, strlen(s));
}
