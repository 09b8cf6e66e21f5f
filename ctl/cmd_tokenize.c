/* cmd_tokenize.c: phasectl tokenize, offline, from a GGUF file's vocabulary. */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_tokenize.h"
#include "phasectl.h"
#include "gguf.h"
#include "tokenizer.h"
#include "util.h"

#define TOKENIZE_USAGE	"usage: phasectl tokenize -m file.gguf [--bos] [--special] text"

/* Print "phasectl: ..." to stderr and return status. */
static int
tok_fail(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int
tok_fail(int status, const char *fmt, ...)
{
	va_list	ap;

	fputs("phasectl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return (status);
}

/* phasectl tokenize: print the ids (and with json the stored pieces). */
int
cmd_tokenize(int argc, char **argv, int json)
{
	struct gguf_file	*gf;
	struct tokenizer	*t;
	const char		*path = NULL, *text = NULL;
	char			*cause = NULL;
	int32_t			*ids;
	size_t			 n, i;
	int			 bos = 0, special = 0, opts = 1, rc;

	for (i = 0; i < (size_t)argc; i++) {
		if (opts && strcmp(argv[i], "--") == 0)
			opts = 0;
		else if (opts && strcmp(argv[i], "-m") == 0) {
			if (++i == (size_t)argc)
				return (tok_fail(2, "-m needs a file; "
				    TOKENIZE_USAGE));
			path = argv[i];
		} else if (opts && strcmp(argv[i], "--bos") == 0)
			bos = 1;
		else if (opts && strcmp(argv[i], "--special") == 0)
			special = 1;
		else if (opts && argv[i][0] == '-' && argv[i][1] != '\0')
			return (tok_fail(2, "unknown option %s; " TOKENIZE_USAGE,
			    argv[i]));
		else if (text != NULL)
			return (tok_fail(2, "one text only (quote it); "
			    TOKENIZE_USAGE));
		else
			text = argv[i];
	}
	if (path == NULL || text == NULL)
		return (tok_fail(2, TOKENIZE_USAGE));

	if ((gf = gguf_open(path, &cause)) == NULL) {
		rc = tok_fail(1, "%s: %s", path, cause);
		free(cause);
		return (rc);
	}
	t = tokenizer_load(gf, &cause);
	gguf_close(gf);
	if (t == NULL) {
		rc = tok_fail(1, "%s: %s", path, cause);
		free(cause);
		return (rc);
	}
	if (tokenizer_encode(t, text, strlen(text), bos, special, &ids, &n,
	    &cause) != 0) {
		rc = tok_fail(1, "%s: %s", path, cause);
		free(cause);
		tokenizer_free(t);
		return (rc);
	}

	if (json) {
		printf("{\"ids\":[");
		for (i = 0; i < n; i++)
			printf("%s%d", i ? "," : "", ids[i]);
		printf("],\"pieces\":[");
		for (i = 0; i < n; i++) {
			if (i)
				putchar(',');
			json_str(stdout, tokenizer_token_text(t, ids[i]));
		}
		printf("]}\n");
	} else {
		for (i = 0; i < n; i++)
			printf("%s%d", i ? " " : "", ids[i]);
		putchar('\n');
	}
	free(ids);
	tokenizer_free(t);
	return (fflush(stdout) == 0 ? 0 : tok_fail(1, "write error"));
}

/* The command table entry; tokenize needs no daemon. */
static int
ctl_tokenize_exec(struct ctl *ctl, int argc, char **argv)
{
	return (cmd_tokenize(argc, argv, ctl->json));
}

const struct ctl_cmd ctl_tokenize_cmd = {
	.words = { "tokenize" },
	.args = "-m FILE.gguf [--bos] [--special] TEXT",
	.exec = ctl_tokenize_exec,
};
