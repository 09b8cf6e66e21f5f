/* test-chat.c: chat template detection and the exact text of each family. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "tap.h"

#include "chat-published.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

/*
 * The conversation llama.cpp's template tests use: a system message and
 * three user turns, one answer padded with spaces to show which formats
 * trim.
 */
static const struct chat_message conv[] = {
	{ "system", "You are a helpful assistant" },
	{ "user", "Hello" },
	{ "assistant", "Hi there" },
	{ "user", "Who are you" },
	{ "assistant", "   I am an assistant   " },
	{ "user", "Another question" },
};
#define N_CONV	(sizeof conv / sizeof conv[0])

#define DS_U	"<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_A	"<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_E	"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

/*
 * The text each family must produce for conv with the generation prompt.
 * Where llama.cpp's tests (tests/test-chat-template.cpp) give the
 * documented output of a family, it is theirs; Llama 2 follows Meta's
 * template (meta-llama/Llama-2-7b-chat-hf: each later turn opened with
 * <s>, text stripped, answers between spaces), DeepSeek its published
 * template (deepseek-ai/DeepSeek-V3, DeepSeek-R1-Distill-*), Zephyr
 * HuggingFaceH4/zephyr-7b-beta's.  No text starts with BOS.
 */
static const struct { const char *name, *want; } rendered[] = {
	{ "chatml", "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n" },
	{ "llama3", "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" },
	{ "llama2", "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]" },
	{ "llama2-nosys", "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]" },
	{ "mistral-v1", " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an assistant   </s> [INST] Another question [/INST]" },
	{ "mistral-v3", "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>[INST] Another question[/INST]" },
	{ "mistral-v3-tekken", "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another question[/INST]" },
	{ "mistral-v7", "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]" },
	{ "mistral-v7-tekken", "[SYSTEM_PROMPT]You are a helpful assistant[/SYSTEM_PROMPT][INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another question[/INST]" },
	{ "gemma", "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n" },
	{ "phi3", "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n" },
	{ "phi4", "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   <|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>" },
	{ "deepseek3", "You are a helpful assistant" DS_U "Hello" DS_A "Hi there" DS_E DS_U "Who are you" DS_A "   I am an assistant   " DS_E DS_U "Another question" DS_A },
	{ "deepseek-r1", "You are a helpful assistant" DS_U "Hello" DS_A "Hi there" DS_E DS_U "Who are you" DS_A "   I am an assistant   " DS_E DS_U "Another question" DS_A "<think>\n" },
	{ "zephyr", "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n<|assistant|>\n" },
};

/*
 * HuggingFaceH4/zephyr-7b-beta's chat_template (tokenizer_config.json),
 * which TinyLlama/TinyLlama-1.1B-Chat-v1.0 ships too.
 */
static const char zephyr_beta[] = "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

/* Published template files (tests/data/chat/README says whose). */
static const struct { const char *file, *family; } files[] = {
	{ "Qwen-Qwen2.5-7B-Instruct.jinja", "chatml" },
	{ "HuggingFaceTB-SmolLM3-3B.jinja", "chatml" },
	{ "meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3" },
	{ "meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3" },
	{ "google-gemma-2-2b-it.jinja", "gemma" },
	{ "microsoft-Phi-3.5-mini-instruct.jinja", "phi3" },
	{ "mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-v3-tekken" },
	{ "Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral-v7-tekken" },
	{ "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-r1" },
	{ "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1" },
};

/* Read a whole file into a malloc'd string, NULL if it cannot be read. */
static char *
slurp(const char *path)
{
	FILE	*f;
	char	*buf;
	long	 n;

	if ((f = fopen(path, "rb")) == NULL)
		return (NULL);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return (NULL);
	}
	buf[n] = '\0';
	fclose(f);
	return (buf);
}

/* Every family renders conv exactly as documented. */
static void
test_render(void)
{
	const struct chat_template *t;
	char	*got, *cause = NULL;
	size_t	 i;

	for (i = 0; i < sizeof rendered / sizeof rendered[0]; i++) {
		t = chat_template_by_name(rendered[i].name);
		if (!ok(t != NULL, "template %s exists", rendered[i].name))
			continue;
		ok(strcmp(chat_template_name(t), rendered[i].name) == 0,
		    "%s: its name", rendered[i].name);
		got = chat_render(t, conv, N_CONV, 1, &cause);
		if (!ok(got != NULL && strcmp(got, rendered[i].want) == 0,
		    "%s: system + turns render as documented",
		    rendered[i].name))
			printf("#   got  [%s]\n#   want [%s]\n",
			    got ? got : cause, rendered[i].want);
		free(got);
		ok(chat_template_stops(t)[0] != NULL,
		    "%s: has an end-of-turn string", rendered[i].name);
	}
}

/* Without the generation prompt, and the end-of-turn strings. */
static void
test_details(void)
{
	const struct chat_template *t;
	struct chat_message	 bad[] = { { "user", "hi" }, { "tool", "x" } };
	char	*got, *cause = NULL;

	t = chat_template_by_name("chatml");
	got = chat_render(t, conv + 1, 1, 0, &cause);
	ok(got != NULL && strcmp(got, "<|im_start|>user\nHello<|im_end|>\n")
	    == 0, "chatml without the generation prompt");
	free(got);
	got = chat_render(t, conv, 0, 1, &cause);
	ok(got != NULL && strcmp(got, "<|im_start|>assistant\n") == 0,
	    "chatml: no messages is just the generation prompt");
	free(got);
	/*
	 * No messages and no generation prompt: an empty string, not the
	 * unterminated buffer the first reservation left (fuzz-frame found
	 * it through a render request; the heap was sent to the client).
	 * Dirty a freed chunk first so that a reused one shows the bug
	 * without a sanitizer too.
	 */
	{
		char	*dirty = malloc(256);
		size_t	 k;

		memset(dirty, 'x', 256);
		free(dirty);
		for (k = 0; k < 4; k++) {
			got = chat_render(chat_template_by_name(k % 2 ? "llama3" :
			    "chatml"), conv, 0, 0, &cause);
			ok(got != NULL && got[0] == '\0', "no messages and no "
			    "generation prompt render as \"\" (%zu)", k);
			free(got);
		}
	}
	ok(strcmp(chat_template_stops(t)[0], "<|im_end|>") == 0 &&
	    chat_template_stops(t)[1] == NULL, "chatml ends at <|im_end|>");
	ok(strcmp(chat_template_stops(chat_template_by_name("llama3"))[0],
	    "<|eot_id|>") == 0, "llama3 ends at <|eot_id|>");
	ok(strcmp(chat_template_stops(chat_template_by_name("gemma"))[0],
	    "<end_of_turn>") == 0, "gemma ends at <end_of_turn>");
	ok(strcmp(chat_template_stops(chat_template_by_name("phi3"))[0],
	    "<|end|>") == 0, "phi3 ends at <|end|>");

	got = chat_render(t, bad, 2, 1, &cause);
	ok(got == NULL && cause != NULL && strcmp(cause, "message 2 has role "
	    "\"tool\" (system, user or assistant)") == 0,
	    "an unknown role is refused by position and name");
	free(cause);
	cause = NULL;
	bad[1].role = "user";
	bad[1].content = NULL;
	got = chat_render(t, bad, 2, 1, &cause);
	ok(got == NULL && cause != NULL &&
	    strcmp(cause, "message 2 has no content") == 0,
	    "a message without content is refused");
	free(cause);

	/* Gemma: a system message after the first turn waits for a user. */
	{
		struct chat_message m[] = { { "user", "a" },
		    { "system", " s " }, { "assistant", "b" }, { "user", "c" } };
		got = chat_render(chat_template_by_name("gemma"), m, 4, 0,
		    &cause);
		ok(got != NULL && strcmp(got, "<start_of_turn>user\na"
		    "<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n"
		    "<start_of_turn>user\ns\n\nc<end_of_turn>\n") == 0,
		    "gemma merges a late system message into the next user "
		    "turn");
		free(got);
	}
	/* DeepSeek R1 does not replay an answer's reasoning. */
	{
		struct chat_message m[] = { { "user", "a" },
		    { "assistant", "<think>\nhm\n</think>\n\nb" } };
		got = chat_render(chat_template_by_name("deepseek-r1"), m, 2, 0,
		    &cause);
		ok(got != NULL && strcmp(got, DS_U "a" DS_A "\n\nb" DS_E) == 0,
		    "deepseek-r1 drops the reasoning of past answers");
		free(got);
	}
}

/* Detection on published templates, names and the fallback. */
static void
test_detect(void)
{
	const struct chat_template *t;
	char	 path[1024], *text;
	size_t	 i;

	for (i = 0; i < sizeof published / sizeof published[0]; i++) {
		t = chat_template_detect(published[i].jinja);
		if (!ok(strcmp(chat_template_name(t), published[i].family) == 0,
		    "%s detected as %s", published[i].model,
		    published[i].family))
			printf("#   got %s\n", chat_template_name(t));
		ok(chat_template_recognized(published[i].jinja),
		    "%s is recognized", published[i].model);
	}
	for (i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/tests/data/chat/%s", TOP_SRCDIR,
		    files[i].file);
		text = slurp(path);
		if (!ok(text != NULL, "read %s", path))
			continue;
		t = chat_template_detect(text);
		if (!ok(strcmp(chat_template_name(t), files[i].family) == 0,
		    "%s detected as %s", files[i].file, files[i].family))
			printf("#   got %s\n", chat_template_name(t));
		free(text);
	}
	ok(strcmp(chat_template_name(chat_template_detect(zephyr_beta)),
	    "zephyr") == 0, "zephyr-7b-beta detected as zephyr");
	ok(strcmp(chat_template_name(chat_template_detect(NULL)), "chatml")
	    == 0, "no template falls back to chatml");
	ok(strcmp(chat_template_name(chat_template_detect("{{ messages }}")),
	    "chatml") == 0, "an unrecognized template falls back to chatml");
	ok(!chat_template_recognized("{{ messages }}") &&
	    !chat_template_recognized(NULL), "and is not recognized");
	ok(strcmp(chat_template_name(chat_template_detect("gemma")), "gemma")
	    == 0, "a template name is taken as itself");
	ok(chat_template_by_name("jinja") == NULL, "unknown name is NULL");
}

int
main(void)
{
	test_render();
	test_details();
	test_detect();
	done_testing();
}
