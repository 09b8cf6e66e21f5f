/*
 * fuzz-http.c: libFuzzer target for the HTTP front end's request bodies:
 * the input is a body as a client would POST it, parsed as a JSON object
 * (http_json_object) and read by the parsers of /v1/completions,
 * /v1/chat/completions, /api/generate and /api/chat into a generation
 * that is then freed unsubmitted.  What must hold: no crash, no leak, a
 * refusal always says why, and what is accepted keeps the limits the
 * engine relies on.  No daemon runs and no model is needed.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

typedef int (*parse_fn)(json_t *, struct hgen *, char **);

static const struct {
	enum hgen_api	 api;
	parse_fn	 parse;
} parsers[] = {
	{ HAPI_OAI_COMPLETION, http_oai_completion_parse },
	{ HAPI_OAI_CHAT, http_oai_chat_parse },
	{ HAPI_OLLAMA_GENERATE, http_ollama_generate_parse },
	{ HAPI_OLLAMA_CHAT, http_ollama_chat_parse },
};

/* What an accepted body must leave in its generation. */
static void
check_accepted(const struct hgen *hg)
{
	int	i;

	if (hg->model == NULL || *hg->model == '\0')
		abort();	/* every endpoint requires a model */
	if (hg->eg.n_stops > ENGINE_MAX_STOPS)
		abort();
	for (i = 0; i < hg->eg.n_stops; i++)
		if (hg->eg.stops[i] == NULL || *hg->eg.stops[i] == '\0' ||
		    strlen(hg->eg.stops[i]) > ENGINE_MAX_STOP_LEN)
			abort();
	if (hg->tokens == NULL && hg->n_tokens != 0)
		abort();
}

/* One input: a request body. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_peer	 peer = { 0, 1 };
	struct hgen		*hg;
	json_t			*o;
	char			*cause = NULL;
	size_t			 i;

	if ((o = http_json_object((const char *)data, size, &cause)) == NULL) {
		if (cause == NULL)
			abort();
		free(cause);
		return (0);
	}
	for (i = 0; i < sizeof parsers / sizeof parsers[0]; i++) {
		hg = hgen_new(NULL, parsers[i].api, &peer);
		cause = NULL;
		if (parsers[i].parse(o, hg, &cause) != 0) {
			if (cause == NULL)
				abort();
			free(cause);
		} else
			check_accepted(hg);
		hgen_free(hg);
	}
	json_decref(o);
	return (0);
}
