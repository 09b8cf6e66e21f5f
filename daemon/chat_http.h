/* chat_http.h: chat messages of an HTTP request into prompt tokens. */
#ifndef PHASED_CHAT_HTTP_H
#define PHASED_CHAT_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct hgen;
struct instance;

/*
 * Render hg->messages with the instance's chat template and tokenize the
 * result; -1 with *status (an HTTP status) and *cause when it cannot.
 */
int	http_chat_tokens(struct hgen *, struct instance *, int32_t **ids,
	    size_t *n_ids, int *status, char **cause);
/* Check a messages array; -1 and *cause naming the bad message. */
int	http_chat_check(json_t *messages, char **cause);

/* Add the template in use (and "chat" to caps) for /api/show. */
void	http_chat_show(struct instance *, json_t *reply, json_t *caps);

#endif
