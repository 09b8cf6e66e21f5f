/* bench-tokenizer.c: encoding speed of the shared vocabularies on 100 KB texts. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"
#include "util.h"

#define TEXT_SIZE	(100 * 1024)

/* Fill buf with len bytes of a kind of text. */
static void
make_text(const char *kind, char *buf, size_t len)
{
	static const char prose[] = "Once upon a time, in a land far away, "
	    "there lived a little llama \xf0\x9f\xa6\x99 who liked numbers "
	    "like 3.14159 and 1234567, words in \xd0\x91\xd1\x8a\xd0\xbb"
	    "\xd0\xb3\xd0\xb0\xd1\x80\xd1\x81\xd0\xba\xd0\xb8 and "
	    "\xe4\xb8\xad\xe6\x96\x87, and  odd   spacing.\n";
	uint32_t	x = 12345;
	size_t		i;

	for (i = 0; i < len; i++) {
		if (strcmp(kind, "prose") == 0)
			buf[i] = prose[i % (sizeof prose - 1)];
		else if (strcmp(kind, "letters") == 0)
			buf[i] = 'a' + (i % 7 == 3);
		else if (strcmp(kind, "spaces") == 0)
			buf[i] = ' ';
		else {
			x = x * 1103515245 + 12345;
			buf[i] = (char)(x >> 16);
		}
	}
}

/* Time encoding each kind of text with each vocabulary; argv[1] is the repeat count. */
int
main(int argc, char **argv)
{
	static const char *const kinds[] = { "prose", "letters", "spaces", "random" };
	static const char *const files[] = {
		"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf",
	};
	struct gguf_file	*gf;
	struct tokenizer	*t;
	const char		*shared;
	char			 path[4096], *cause = NULL, *text;
	int32_t			*ids;
	size_t			 n, f, k;
	uint64_t		 t0, t1;
	int			 rep, reps = argc > 1 ? atoi(argv[1]) : 3;

	if ((shared = getenv("PHASED_SHARED")) == NULL)
		shared = "../shared";
	text = xmalloc(TEXT_SIZE);
	for (f = 0; f < sizeof files / sizeof files[0]; f++) {
		snprintf(path, sizeof path, "%s/%s", shared, files[f]);
		if ((gf = gguf_open(path, &cause)) == NULL) {
			fprintf(stderr, "%s: %s\n", path, cause);
			return (1);
		}
		t0 = now_ns();
		if ((t = tokenizer_load(gf, &cause)) == NULL) {
			fprintf(stderr, "%s: %s\n", path, cause);
			return (1);
		}
		t1 = now_ns();
		gguf_close(gf);
		printf("%s: load %.1f ms\n", files[f], (t1 - t0) / 1e6);
		for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
			uint64_t best = UINT64_MAX;

			make_text(kinds[k], text, TEXT_SIZE);
			for (rep = 0; rep < reps; rep++) {
				t0 = now_ns();
				if (tokenizer_encode(t, text, TEXT_SIZE, 0, 1, &ids,
				    &n, &cause) != 0) {
					fprintf(stderr, "encode: %s\n", cause);
					return (1);
				}
				t1 = now_ns();
				free(ids);
				if (t1 - t0 < best)
					best = t1 - t0;
			}
			printf("  %-8s %d KB -> %7zu tokens in %7.2f ms (%.1f MB/s)\n",
			    kinds[k], TEXT_SIZE / 1024, n, best / 1e6,
			    TEXT_SIZE / (best / 1e9) / 1e6);
		}
		tokenizer_free(t);
	}
	free(text);
	return (0);
}
