/* chat_prompt.c: rendering and tokenizing conversations for an instance. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "chat_prompt.h"
#include "engine.h"
#include "gguf.h"
#include "instance.h"
#include "log.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

/* Read tokenizer.chat_template from a GGUF file; NULL when there is none. */
char *
chat_template_read(const char *path)
{
	struct gguf_file	*f;
	char			*s = NULL, *cause = NULL;

	if ((f = gguf_open(path, &cause)) == NULL) {
		free(cause);
		return (NULL);
	}
	if (gguf_find(f, "tokenizer.chat_template") != NULL &&
	    (s = gguf_get_str(f, "tokenizer.chat_template", &cause)) == NULL)
		free(cause);
	gguf_close(f);
	return (s);
}

/* Choose the instance's template and its end-of-turn tokens. */
void
instance_chat_setup(struct instance *in, const char *gguf_template)
{
	struct tokenizer	*tok = model_tokenizer(in->model);
	const char *const	*stops;
	const char		*from;
	int32_t			*ids = NULL;
	size_t			 n_ids = 0, i;
	int			 type;
	char			*cause = NULL;

	if (in->opts.chat_template != NULL) {
		in->chat = chat_template_by_name(in->opts.chat_template);
		from = "the template option";
	} else if (chat_template_recognized(gguf_template)) {
		in->chat = chat_template_detect(gguf_template);
		from = "the model's chat template";
	} else {
		in->chat = chat_template_detect(NULL);
		from = gguf_template != NULL ? "the default (the model's "
		    "template is not one phased knows)" : "the default (the "
		    "model has no chat template)";
	}
	log_info("model %s: chat template %s from %s", in->name,
	    chat_template_name(in->chat), from);
	in->n_chat_eog = in->n_chat_stops = 0;
	for (stops = chat_template_stops(in->chat); *stops != NULL; stops++) {
		if (tokenizer_encode(tok, *stops, strlen(*stops), 0, 1, &ids,
		    &n_ids, &cause) != 0) {
			free(cause);
			cause = NULL;
			continue;
		}
		type = n_ids == 1 ? tokenizer_token_type(tok, ids[0]) : -1;
		if ((type == TOKEN_TYPE_CONTROL || type == TOKEN_TYPE_USER) &&
		    in->n_chat_eog < ENGINE_MAX_EOG)
			in->chat_eog[in->n_chat_eog++] = ids[0];
		else if (type != TOKEN_TYPE_CONTROL && type != TOKEN_TYPE_USER &&
		    in->n_chat_stops < INST_MAX_CHAT_STOPS)
			in->chat_stops[in->n_chat_stops++] = *stops;
		free(ids);
		ids = NULL;
	}
	for (i = 0; i < (size_t)in->n_chat_eog; i++)
		log_debug("model %s: end of turn token %d", in->name,
		    in->chat_eog[i]);
}

/* Render and tokenize a conversation for the instance. */
int
instance_chat_prompt(struct instance *in, const struct chat_message *m,
    size_t n, int32_t **tokens, uint32_t *n_tokens, char **rendered,
    char **cause)
{
	struct tokenizer	*tok = model_tokenizer(in->model);
	int32_t			*ids = NULL;
	size_t			 n_ids = 0;
	char			*text;

	if ((text = chat_render(in->chat, m, n, 1, cause)) == NULL)
		return (-1);
	if (tokens != NULL) {
		if (tokenizer_encode(tok, text, strlen(text),
		    tokenizer_add_bos(tok), 1, &ids, &n_ids, cause) != 0) {
			free(text);
			return (-1);
		}
		/* A conversation that spells BOS itself keeps only one. */
		if (n_ids >= 2 && ids[0] == tokenizer_bos(tok) &&
		    ids[1] == ids[0]) {
			memmove(ids, ids + 1, (n_ids - 1) * sizeof *ids);
			n_ids--;
		}
		*tokens = ids;
		*n_tokens = (uint32_t)n_ids;
	}
	if (rendered != NULL)
		*rendered = text;
	else
		free(text);
	return (0);
}

/* End a generation at the template's end of turn, with reason stop. */
void
instance_chat_gen(struct instance *in, struct engine_gen *eg)
{
	int	i;

	eg->eog_stop = 1;
	for (i = 0; i < in->n_chat_eog && eg->n_eog_ids < ENGINE_MAX_EOG; i++)
		eg->eog_ids[eg->n_eog_ids++] = in->chat_eog[i];
	for (i = 0; i < in->n_chat_stops && eg->n_stops < ENGINE_MAX_STOPS; i++)
		eg->stops[eg->n_stops++] = (char *)in->chat_stops[i];
}
