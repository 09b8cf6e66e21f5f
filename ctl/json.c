/* json.c: writing JSON strings for phasectl's --json output. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "phasectl.h"
#include "strbuf.h"

/* Write len bytes as a JSON string literal, escaped as strbuf_json_stringn. */
void
json_strn(FILE *f, const char *s, size_t len)
{
	struct strbuf	sb = STRBUF_INIT;

	strbuf_json_stringn(&sb, s != NULL ? s : "", s != NULL ? len : 0);
	fwrite(sb.buf, 1, sb.len, f);
	strbuf_free(&sb);
}

/* Write a NUL-terminated string as a JSON string literal (or null). */
void
json_str(FILE *f, const char *s)
{
	if (s == NULL)
		fputs("null", f);
	else
		json_strn(f, s, strlen(s));
}
