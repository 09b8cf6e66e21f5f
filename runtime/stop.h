/* stop.h: stop strings over a request's streamed output text. */
#ifndef PHASED_STOP_H
#define PHASED_STOP_H

#include <stddef.h>

#define STOP_MAX	8	/* stop strings per request */
#define STOP_MAX_LEN	256	/* bytes per stop string */

/*
 * The stop strings of one request and the output text held back because
 * it may be the start of one.  A zeroed struct has no stop strings and
 * passes all text through.
 */
struct stopper {
	char	*stops[STOP_MAX];
	int	 n_stops;
	size_t	 stop_max;	/* longest stop string */
	char	*held;		/* text held back for stops */
	size_t	 n_held;
};

/* Copy up to STOP_MAX stop strings (each non-empty) into s. */
void	 stopper_init(struct stopper *, char *const *stops, int n);
void	 stopper_free(struct stopper *);
/*
 * Add a token's text and return what can be emitted now in *out (malloc'd,
 * NUL-terminated, *outlen bytes): text before a complete stop string, or
 * everything but a tail that may begin one (nothing held back when final).
 * Returns 1 when a stop string matched: the request ends there, the stop
 * string itself is not emitted.
 */
int	 stopper_push(struct stopper *, const char *text, size_t len,
	    int final, char **out, size_t *outlen);

#endif
