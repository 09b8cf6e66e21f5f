/* http_chat.c: chat messages of an HTTP request into prompt tokens. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "chat_http.h"
#include "http.h"
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

/* Render and tokenize the messages with the model's chat template. */
int
http_chat_tokens(struct hgen *hg, struct instance *in, int32_t **ids,
    size_t *n_ids, int *status, char **cause)
{
	*status = 501;
	set_cause(cause, "chat templates are not available in this build");
	return (-1);
}

/* Add the template in use (and "chat" to caps) for /api/show. */
void
http_chat_show(struct instance *in, json_t *reply, json_t *caps)
{
	json_object_set_new(reply, "template", json_string(""));
}
