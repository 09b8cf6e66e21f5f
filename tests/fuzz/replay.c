/*
 * replay.c: a fuzz target as a make check test.  Runs the target's entry
 * point over every file of its seed corpus (FUZZ_CORPUS, or the folder
 * given), one TAP line each; a crash or an abort() of the target's own
 * checks fails the test, and the sanitizer build (configure
 * --enable-sanitizers) also fails it on a leak or a bad access.  The
 * inputs that once found a bug are in the corpus, so this is their
 * regression test.
 */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Read a whole file; NULL if it cannot be read. */
static uint8_t *
slurp(const char *path, size_t *len)
{
	FILE	*f;
	uint8_t	*buf = NULL;
	size_t	 cap = 0, n;

	if ((f = fopen(path, "rb")) == NULL)
		return (NULL);
	*len = 0;
	for (;;) {
		if (*len == cap) {
			cap = cap ? cap * 2 : 4096;
			if ((buf = realloc(buf, cap)) == NULL)
				abort();
		}
		if ((n = fread(buf + *len, 1, cap - *len, f)) == 0)
			break;
		*len += n;
	}
	fclose(f);
	return (buf);
}

int
main(int argc, char **argv)
{
	const char	*dir = argc > 1 ? argv[1] : FUZZ_CORPUS;
	struct dirent	**ents;
	uint8_t		*buf;
	size_t		 len;
	char		 path[4096];
	int		 n, i, runs = 0;

	if ((n = scandir(dir, &ents, NULL, alphasort)) < 0)
		skip_all("no corpus %s", dir);
	for (i = 0; i < n; i++) {
		if (ents[i]->d_name[0] == '.') {
			free(ents[i]);
			continue;
		}
		snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
		buf = slurp(path, &len);
		ok(buf != NULL, "%s read", ents[i]->d_name);
		if (buf != NULL) {
			LLVMFuzzerTestOneInput(buf, len);
			ok(1, "%s: %zu bytes went through", ents[i]->d_name, len);
			runs++;
		}
		free(buf);
		free(ents[i]);
	}
	free(ents);
	ok(runs > 0, "the corpus has inputs (%d)", runs);
	done_testing();
}
