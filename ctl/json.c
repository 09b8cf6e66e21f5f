/* json.c: writing JSON strings for phasectl's --json output. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "phasectl.h"
#include "unicode.h"

/* Write len bytes as a JSON string literal (RFC 8259), bad UTF-8 as U+FFFD. */
void
json_strn(FILE *f, const char *s, size_t len)
{
	const unsigned char	*p = (const unsigned char *)s;
	size_t			 i, l;
	uint32_t		 cp;

	fputc('"', f);
	for (i = 0; i < len && s != NULL; i++) {
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
			else if (p[i] < 0x80)
				fputc(p[i], f);
			else {
				/* Invalid UTF-8 would make the document invalid. */
				l = utf8_decode(p + i, len - i, &cp);
				if (cp == UC_INVALID)
					fputs("\\ufffd", f);
				else
					fwrite(p + i, 1, l, f);
				i += l - 1;
			}
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
