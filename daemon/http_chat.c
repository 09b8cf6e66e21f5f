/* http_chat.c: chat messages of an HTTP request into prompt tokens. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "chat_http.h"
#include "chat_prompt.h"
#include "http.h"
#include "instance.h"
#include "strbuf.h"
#include "util.h"

/* The text of a message's content: a string or OpenAI's text parts. */
static int
content_ok(json_t *c)
{
	json_t	*part, *t;
	size_t	 i;

	if (json_is_string(c) || json_is_null(c))
		return (1);
	if (!json_is_array(c))
		return (0);
	json_array_foreach(c, i, part) {
		t = json_object_get(part, "type");
		if (!json_is_object(part) || !json_is_string(t) ||
		    strcmp(json_string_value(t), "text") != 0 ||
		    !json_is_string(json_object_get(part, "text")))
			return (0);
	}
	return (1);
}

/* Check a messages array; -1 and *cause naming the bad message. */
int
http_chat_check(json_t *messages, char **cause)
{
	json_t	*m;
	size_t	 i;

	if (!json_is_array(messages) || json_array_size(messages) == 0) {
		set_cause(cause, "field 'messages' must be a non-empty array");
		return (-1);
	}
	json_array_foreach(messages, i, m) {
		if (!json_is_object(m) ||
		    !json_is_string(json_object_get(m, "role"))) {
			set_cause(cause, "messages[%zu] must be an object with a "
			    "string 'role'", i);
			return (-1);
		}
		if (!content_ok(json_object_get(m, "content"))) {
			set_cause(cause, "messages[%zu].content must be a string "
			    "or an array of text parts (images are not "
			    "supported)", i);
			return (-1);
		}
	}
	return (0);
}

/* The text of a content: a string, or its text parts joined. */
static char *
content_text(json_t *c)
{
	struct strbuf	 sb;
	json_t		*part;
	size_t		 i;

	if (json_is_string(c))
		return (xstrdup(json_string_value(c)));
	strbuf_init(&sb);
	strbuf_adds(&sb, "");
	json_array_foreach(c, i, part)
		strbuf_adds(&sb, json_string_value(json_object_get(part,
		    "text")));
	return (strbuf_detach(&sb, NULL));
}

/* Render and tokenize the messages with the model's chat template. */
int
http_chat_tokens(struct hgen *hg, struct instance *in, int32_t **ids,
    size_t *n_ids, int *status, char **cause)
{
	struct chat_message	*m;
	char			**texts;
	json_t			*msg;
	size_t			 n = json_array_size(hg->messages), i;
	uint32_t		 nt = 0;
	int			 rc;

	m = xcalloc(n, sizeof *m);
	texts = xcalloc(n, sizeof *texts);
	json_array_foreach(hg->messages, i, msg) {
		texts[i] = content_text(json_object_get(msg, "content"));
		m[i].role = json_string_value(json_object_get(msg, "role"));
		m[i].content = texts[i];
	}
	rc = instance_chat_prompt(in, m, n, ids, &nt, NULL, cause);
	*n_ids = nt;
	for (i = 0; i < n; i++)
		free(texts[i]);
	free(texts);
	free(m);
	if (rc != 0) {
		*status = 400;
		return (-1);
	}
	/* The turn ends at the template's end of turn, as reason stop. */
	hg->n_own_stops = hg->eg.n_stops;
	instance_chat_gen(in, &hg->eg);
	return (0);
}

/* Add the template in use for /api/show. */
void
http_chat_show(struct instance *in, json_t *reply, json_t *caps)
{
	json_object_set_new(reply, "template", json_string(in != NULL &&
	    in->chat != NULL ? chat_template_name(in->chat) : ""));
}
