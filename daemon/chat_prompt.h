/* chat_prompt.h: a conversation as an instance's prompt tokens and end of turn. */
#ifndef PHASED_CHAT_PROMPT_H
#define PHASED_CHAT_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "chat.h"

struct instance;
struct engine_gen;

/*
 * Read tokenizer.chat_template from a GGUF file (on the loader thread):
 * a malloc'd string, or NULL when the file has none.
 */
char	*chat_template_read(const char *path);

/*
 * Choose the instance's template (the load's template= option, else the
 * GGUF's string, else ChatML) and find which of its end-of-turn strings
 * are single special tokens of the vocabulary.  Logs the choice.
 */
void	 instance_chat_setup(struct instance *, const char *gguf_template);

/*
 * Render messages with the instance's template (with the assistant's
 * generation prompt) and tokenize them with special tokens parsed and BOS
 * as the vocabulary asks, never twice.  *tokens and *rendered (either may
 * be NULL when not wanted) are malloc'd.  -1 and *cause on a bad message.
 */
int	 instance_chat_prompt(struct instance *, const struct chat_message *,
	    size_t n, int32_t **tokens, uint32_t *n_tokens, char **rendered,
	    char **cause);

/*
 * Make a generation end at the template's end of turn: its tokens and the
 * vocabulary's EOG ids finish with reason stop, its other end strings
 * become stop strings (after the request's own, as room allows).
 */
void	 instance_chat_gen(struct instance *, struct engine_gen *);

#endif
