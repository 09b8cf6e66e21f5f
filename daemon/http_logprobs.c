/* http_logprobs.c: logprobs and top_logprobs of the OpenAI API. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "util.h"

/* Read logprobs / top_logprobs; refused while tokens carry no logprobs. */
int
hj_logprobs(json_t *o, struct hgen *hg, char **cause)
{
	json_t	*v = json_object_get(o, "logprobs");

	if (v == NULL || json_is_null(v) || json_is_false(v) ||
	    (json_is_integer(v) && json_integer_value(v) == 0))
		return (0);
	set_cause(cause, "field 'logprobs' is not supported by this build");
	return (-1);
}

/* The logprobs of one streamed token, or NULL. */
json_t *
http_logprobs_event(struct hgen *hg, const struct engine_event *ev,
    const char *text, size_t len)
{
	return (NULL);
}

/* The logprobs of a whole reply, or NULL. */
json_t *
http_logprobs_final(struct hgen *hg)
{
	return (NULL);
}
