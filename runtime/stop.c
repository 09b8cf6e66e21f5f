/* stop.c: stop strings over streamed output text. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "stop.h"
#include "util.h"

/* Copy the stop strings. */
void
stopper_init(struct stopper *s, char *const *stops, int n)
{
	int	i;

	memset(s, 0, sizeof *s);
	for (i = 0; i < n && s->n_stops < STOP_MAX; i++) {
		if (stops[i][0] == '\0')
			continue;
		s->stops[s->n_stops++] = xstrdup(stops[i]);
		if (strlen(stops[i]) > s->stop_max)
			s->stop_max = strlen(stops[i]);
	}
}

/* Free the stop strings and the held text. */
void
stopper_free(struct stopper *s)
{
	int	i;

	for (i = 0; i < s->n_stops; i++)
		free(s->stops[i]);
	free(s->held);
	memset(s, 0, sizeof *s);
}

/* Whether the held text ends with a proper prefix of a stop string; its length. */
static size_t
stop_partial(const struct stopper *s)
{
	size_t	k, len;
	int	i;

	for (k = s->n_held < s->stop_max ? s->n_held : s->stop_max - 1; k > 0;
	    k--) {
		for (i = 0; i < s->n_stops; i++) {
			len = strlen(s->stops[i]);
			if (k < len && memcmp(s->held + s->n_held - k,
			    s->stops[i], k) == 0)
				return (k);
		}
	}
	return (0);
}

/* Add text; emit what no stop string can claim.  1 when one matched. */
int
stopper_push(struct stopper *s, const char *text, size_t len, int final,
    char **out, size_t *outlen)
{
	char	*hit = NULL, *p;
	size_t	 keep, at;
	int	 i;

	if (s->n_stops == 0) {
		*out = xstrndup(text, len);
		*outlen = len;
		return (0);
	}
	s->held = xreallocarray(s->held, s->n_held + len + 1, 1);
	memcpy(s->held + s->n_held, text, len);
	s->n_held += len;
	s->held[s->n_held] = '\0';
	for (i = 0; i < s->n_stops; i++) {
		p = memmem(s->held, s->n_held, s->stops[i], strlen(s->stops[i]));
		if (p != NULL && (hit == NULL || p < hit))
			hit = p;
	}
	if (hit != NULL) {
		at = (size_t)(hit - s->held);
		*out = xstrndup(s->held, at);
		*outlen = at;
		s->n_held = 0;
		return (1);
	}
	keep = final ? 0 : stop_partial(s);
	*outlen = s->n_held - keep;
	*out = xstrndup(s->held, *outlen);
	memmove(s->held, s->held + *outlen, keep);
	s->n_held = keep;
	return (0);
}
