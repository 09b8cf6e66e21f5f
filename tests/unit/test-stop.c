/* test-stop.c: stop strings over streamed text, held tails, first match. */

#include <stdlib.h>
#include <string.h>

#include "stop.h"
#include "tap.h"

/*
 * Push the pieces in order (the last one final) and return everything
 * emitted, concatenated; *stopped is 1 when a stop string matched, *at the
 * piece where it did.
 */
static char *
run(char *const *stops, int n, const char *const *pieces, int np,
    int *stopped, int *at, char *firsts)
{
	struct stopper	 s;
	char		*all, *out;
	size_t		 len, alen = 0;
	int		 i;

	all = calloc(1, 1024);
	stopper_init(&s, stops, n);
	*stopped = 0;
	*at = -1;
	for (i = 0; i < np && !*stopped; i++) {
		*stopped = stopper_push(&s, pieces[i], strlen(pieces[i]),
		    i == np - 1, &out, &len);
		if (firsts != NULL)
			firsts[i] = len == 0 ? '-' : out[0];
		memcpy(all + alen, out, len);
		alen += len;
		free(out);
		if (*stopped)
			*at = i;
	}
	stopper_free(&s);
	return (all);
}

int
main(void)
{
	char		*stops[] = { "STOP", "\n\n", "" }, *got;
	char		 firsts[8];
	int		 stopped, at;

	{
		const char *p[] = { "a", "b", "c" };

		got = run(NULL, 0, p, 3, &stopped, &at, firsts);
		is_str(got, "abc", "no stop strings: text passes through");
		ok(!stopped, "no stop strings: never stops");
		ok(memcmp(firsts, "abc", 3) == 0, "no stop strings: nothing held");
		free(got);
	}
	{
		const char *p[] = { "Hello S", "TO", "P there" };

		got = run(stops, 3, p, 3, &stopped, &at, firsts);
		is_str(got, "Hello ", "stop across tokens: text before it only");
		ok(stopped && at == 2, "stop across tokens: matched at the third");
		ok(memcmp(firsts, "H-", 2) == 0,
		    "stop across tokens: a possible start is held back");
		free(got);
	}
	{
		const char *p[] = { "one S", "o on", " and on" };

		got = run(stops, 3, p, 3, &stopped, &at, firsts);
		is_str(got, "one So on and on", "false start: held text released");
		ok(!stopped, "false start: no stop");
		ok(firsts[1] == 'S', "false start: released with the next token");
		free(got);
	}
	{
		const char *p[] = { "x\n", "\nSTOP" };

		got = run(stops, 3, p, 2, &stopped, &at, NULL);
		is_str(got, "x", "earliest stop string wins");
		ok(stopped && at == 1, "earliest stop: matched at the second");
		free(got);
	}
	{
		const char *p[] = { "end ST" };

		got = run(stops, 3, p, 1, &stopped, &at, NULL);
		is_str(got, "end ST", "final piece: the held tail is flushed");
		ok(!stopped, "final piece: no stop");
		free(got);
	}
	{
		const char *p[] = { "STOP" };

		got = run(stops, 3, p, 1, &stopped, &at, NULL);
		is_str(got, "", "stop at once: nothing emitted");
		ok(stopped, "stop at once: stopped");
		free(got);
	}
	{
		struct stopper	 s;
		char		*many[STOP_MAX + 2];
		int		 i;

		for (i = 0; i < STOP_MAX + 2; i++)
			many[i] = "z";
		stopper_init(&s, many, STOP_MAX + 2);
		is_int(s.n_stops, STOP_MAX, "at most STOP_MAX stop strings kept");
		stopper_free(&s);
		stopper_init(&s, stops, 3);
		is_int(s.n_stops, 2, "empty stop strings ignored");
		is_int((int)s.stop_max, 4, "longest stop string measured");
		stopper_free(&s);
	}
	done_testing();
}
