/* test-cmd-tokenize.c: phasectl tokenize's output, JSON and exit statuses. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_tokenize.h"
#include "tap.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static char	shared[4096];
static char	out[65536], err[4096];

/* Read what a temporary file holds into buf. */
static void
read_back(FILE *f, char *buf, size_t len)
{
	size_t	n;

	rewind(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* Run cmd_tokenize with stdout and stderr captured into out and err. */
static int
run(int json, int argc, const char **argv)
{
	FILE	*fo = tmpfile(), *fe = tmpfile();
	int	 so, se, rc;

	if (fo == NULL || fe == NULL)
		abort();
	fflush(stdout);
	fflush(stderr);
	so = dup(1);
	se = dup(2);
	dup2(fileno(fo), 1);
	dup2(fileno(fe), 2);
	rc = cmd_tokenize(argc, (char **)argv, json);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	read_back(fo, out, sizeof out);
	read_back(fe, err, sizeof err);
	return (rc);
}

/* Run phasectl tokenize against the shared vocabularies. */
int
main(void)
{
	const char	*env;
	char		 spm[8192], gpt2[8192], model[8192];

	if ((env = getenv("PHASED_SHARED")) != NULL && *env != '\0')
		snprintf(shared, sizeof shared, "%s", env);
	else
		snprintf(shared, sizeof shared, "%s/../shared", TOP_SRCDIR);
	snprintf(spm, sizeof spm, "%s/vocab/ggml-vocab-llama-spm.gguf", shared);
	snprintf(gpt2, sizeof gpt2, "%s/vocab/ggml-vocab-gpt-2.gguf", shared);
	snprintf(model, sizeof model, "%s/models/stories260K.gguf", shared);

	is_int(run(0, 3, (const char *[]){ "-m", spm, "Hello world", NULL }), 0,
	    "vocabulary-only file");
	is_str(out, "15043 3186\n", "ids without bos");
	is_int(run(0, 4, (const char *[]){ "-m", model, "--bos", "Once upon a time", NULL }), 0,
	    "model file with --bos");
	is_str(out, "1 403 407 261 378\n", "stories260K ids with bos");
	is_int(run(0, 4, (const char *[]){ "--special", "-m", spm, "<s>Hi", NULL }), 0,
	    "--special");
	like(out, "1 ", "--special parses <s>");
	is_int(run(0, 3, (const char *[]){ "-m", spm, "", NULL }), 0, "empty text");
	is_str(out, "\n", "empty text gives an empty line");

	is_int(run(1, 3, (const char *[]){ "-m", spm, "Hello world", NULL }), 0, "json");
	is_str(out, "{\"ids\":[15043,3186],\"pieces\":[\"\xe2\x96\x81Hello\",\"\xe2\x96\x81world\"]}\n",
	    "json ids and pieces");
	is_int(run(1, 3, (const char *[]){ "-m", gpt2, "\"a\\b\"", NULL }), 0, "json escaping");
	is_str(out, "{\"ids\":[1,64,59,65,1],\"pieces\":[\"\\\"\",\"a\",\"\\\\\",\"b\",\"\\\"\"]}\n",
	    "json escapes quotes and backslashes");
	is_int(run(1, 4, (const char *[]){ "-m", spm, "--", "--bos", NULL }), 0, "-- ends options");
	like(out, "\"pieces\":[", "-- text tokenized");

	is_int(run(0, 1, (const char *[]){ "hello", NULL }), 2, "no -m is a usage error");
	like(err, "phasectl: usage: phasectl tokenize", "usage message");
	is_int(run(0, 1, (const char *[]){ "-m", NULL }), 2, "-m without a file");
	is_int(run(0, 3, (const char *[]){ "-m", spm, "--bogus", NULL }), 2, "unknown option");
	like(err, "unknown option --bogus", "unknown option named");
	is_int(run(0, 4, (const char *[]){ "-m", spm, "a", "b", NULL }), 2, "two texts");
	is_int(run(0, 3, (const char *[]){ "-m", "/nonexistent.gguf", "x", NULL }), 1,
	    "missing file");
	like(err, "phasectl: /nonexistent.gguf: ", "missing file error");
	done_testing();
}
