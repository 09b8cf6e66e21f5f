/* chat.h: chat templates: a conversation rendered as one model's prompt. */
#ifndef PHASED_CHAT_H
#define PHASED_CHAT_H

#include <stddef.h>

/*
 * There is no Jinja engine here.  A GGUF's tokenizer.chat_template is
 * matched against the markers of the common template families and the
 * conversation is rendered by built-in code for that family:
 *
 *	chatml		<|im_start|>ROLE\nTEXT<|im_end|>\n  (Qwen, SmolLM, ...)
 *	llama3		<|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|>
 *	llama2		[INST] <<SYS>>\nSYS\n<</SYS>>\n\nUSER [/INST] ANSWER </s><s>[INST] ...
 *	llama2-nosys	[INST] USER [/INST]ANSWER</s>[INST] ...  (early Mistral)
 *	mistral-v1	 [INST] USER [/INST] ANSWER</s>
 *	mistral-v3	[INST] USER[/INST] ANSWER</s>
 *	mistral-v3-tekken [INST]USER[/INST]ANSWER</s>
 *	mistral-v7	[SYSTEM_PROMPT] SYS[/SYSTEM_PROMPT][INST] USER[/INST] ANSWER</s>
 *	mistral-v7-tekken the same without the spaces
 *	gemma		<start_of_turn>user\n...<end_of_turn>\n, the assistant
 *			named "model", the system text merged into the first
 *			user turn
 *	phi3		<|ROLE|>\nTEXT<|end|>\n
 *	phi4		<|im_start|>ROLE<|im_sep|>TEXT<|im_end|>
 *	deepseek3	SYS<｜User｜>USER<｜Assistant｜>ANSWER<｜end▁of▁sentence｜>
 *	zephyr		<|ROLE|>\nTEXT</s>\n
 *
 * The rendered text never starts with the BOS token: whoever tokenizes it
 * adds BOS as the vocabulary asks, so a prompt never gets two.  Roles are
 * "system", "user" and "assistant".
 */

struct chat_template;

struct chat_message {
	const char	*role;
	const char	*content;
};

/* Most bytes chat_render() produces. */
#define CHAT_RENDER_MAX		((size_t)16 << 20)

/*
 * The family of a GGUF chat template string (or of a template name given
 * instead); never NULL: NULL, "" and unrecognized text give ChatML.
 */
const struct chat_template *chat_template_detect(const char *jinja);
/* Whether chat_template_detect() recognized the string (not the fallback). */
int		 chat_template_recognized(const char *jinja);
/* A template by its name ("chatml", "llama3", ...), NULL if unknown. */
const struct chat_template *chat_template_by_name(const char *name);
const char	*chat_template_name(const struct chat_template *);
/* Every template name, comma separated, for error messages and help. */
const char	*chat_template_names(void);

/*
 * Render n messages; add_generation_prompt appends the header of the
 * assistant's next turn.  The result is malloc'd; NULL and *cause for an
 * unknown role or a conversation over CHAT_RENDER_MAX.
 */
char		*chat_render(const struct chat_template *,
		    const struct chat_message *, size_t n,
		    int add_generation_prompt, char **cause);

/*
 * The strings that end the assistant's turn, NULL-terminated: the
 * end-of-turn special tokens first.
 */
const char *const *chat_template_stops(const struct chat_template *);

#endif
