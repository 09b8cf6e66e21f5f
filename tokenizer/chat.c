/* chat.c: built-in renderers for the common chat template families. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "strbuf.h"
#include "util.h"

enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT };

enum chat_family {
	FAM_CHATML, FAM_LLAMA3, FAM_LLAMA2, FAM_LLAMA2_NOSYS, FAM_MISTRAL_V1,
	FAM_MISTRAL_V3, FAM_MISTRAL_V3_TEKKEN, FAM_MISTRAL_V7,
	FAM_MISTRAL_V7_TEKKEN, FAM_GEMMA, FAM_PHI3, FAM_PHI4, FAM_DEEPSEEK3,
	FAM_DEEPSEEK_R1, FAM_ZEPHYR
};

struct chat_template {
	const char		*name;
	enum chat_family	 family;
	const char *const	*stops;
};

static const char *const stops_chatml[] = { "<|im_end|>", NULL };
static const char *const stops_llama3[] = { "<|eot_id|>", "<|eom_id|>", NULL };
static const char *const stops_eos[] = { "</s>", NULL };
static const char *const stops_gemma[] = { "<end_of_turn>", NULL };
static const char *const stops_phi3[] = { "<|end|>", "<|endoftext|>", NULL };
static const char *const stops_deepseek[] = {
	"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
	NULL
};

static const struct chat_template templates[] = {
	{ "chatml", FAM_CHATML, stops_chatml },
	{ "llama3", FAM_LLAMA3, stops_llama3 },
	{ "llama2", FAM_LLAMA2, stops_eos },
	{ "llama2-nosys", FAM_LLAMA2_NOSYS, stops_eos },
	{ "mistral-v1", FAM_MISTRAL_V1, stops_eos },
	{ "mistral-v3", FAM_MISTRAL_V3, stops_eos },
	{ "mistral-v3-tekken", FAM_MISTRAL_V3_TEKKEN, stops_eos },
	{ "mistral-v7", FAM_MISTRAL_V7, stops_eos },
	{ "mistral-v7-tekken", FAM_MISTRAL_V7_TEKKEN, stops_eos },
	{ "gemma", FAM_GEMMA, stops_gemma },
	{ "phi3", FAM_PHI3, stops_phi3 },
	{ "phi4", FAM_PHI4, stops_chatml },
	{ "deepseek3", FAM_DEEPSEEK3, stops_deepseek },
	{ "deepseek-r1", FAM_DEEPSEEK_R1, stops_deepseek },
	{ "zephyr", FAM_ZEPHYR, stops_eos },
};
#define N_TEMPLATES	(sizeof templates / sizeof templates[0])

/* DeepSeek's full-width markers, spelled out as UTF-8. */
#define DS_USER		"<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT	"<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_EOS		"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

/* A template by its name, NULL if unknown. */
const struct chat_template *
chat_template_by_name(const char *name)
{
	size_t	i;

	if (name == NULL)
		return (NULL);
	for (i = 0; i < N_TEMPLATES; i++)
		if (strcmp(templates[i].name, name) == 0)
			return (&templates[i]);
	return (NULL);
}

/* The template's name. */
const char *
chat_template_name(const struct chat_template *t)
{
	return (t->name);
}

/* Every template name, comma separated. */
const char *
chat_template_names(void)
{
	return ("chatml, llama3, llama2, llama2-nosys, mistral-v1, mistral-v3, "
	    "mistral-v3-tekken, mistral-v7, mistral-v7-tekken, gemma, phi3, "
	    "phi4, deepseek3, deepseek-r1, zephyr");
}

/* The strings that end the assistant's turn. */
const char *const *
chat_template_stops(const struct chat_template *t)
{
	return (t->stops);
}

/* Whether the template text contains s. */
static int
has(const char *jinja, const char *s)
{
	return (strstr(jinja, s) != NULL);
}

/*
 * The family whose markers the template text carries, or NULL.  The
 * markers are those the published templates of each family emit; the
 * order matters where families share one (<|im_start|> is both ChatML's
 * and Phi-4's, [INST] belongs to Llama 2 and every Mistral).
 */
static const struct chat_template *
detect(const char *j)
{
	const struct chat_template *t;

	if ((t = chat_template_by_name(j)) != NULL)
		return (t);
	if (has(j, "<|im_start|>"))
		return (chat_template_by_name(has(j, "<|im_sep|>") ? "phi4" :
		    "chatml"));
	if (strncmp(j, "mistral", 7) == 0 || has(j, "[INST]")) {
		if (has(j, "[SYSTEM_PROMPT]"))
			return (chat_template_by_name(has(j, "[SYSTEM_PROMPT] ") ||
			    has(j, "'[SYSTEM_PROMPT] '") ? "mistral-v7" :
			    "mistral-v7-tekken"));
		/* Mistral's own v1, v3 and v3-tekken templates. */
		if (has(j, "' [INST] ' + system_message") ||
		    has(j, "[AVAILABLE_TOOLS]")) {
			if (has(j, " [INST]"))
				return (chat_template_by_name("mistral-v1"));
			if (has(j, "\"[INST]\""))
				return (chat_template_by_name(
				    "mistral-v3-tekken"));
			return (chat_template_by_name("mistral-v3"));
		}
		return (chat_template_by_name(has(j, "<<SYS>>") ? "llama2" :
		    "llama2-nosys"));
	}
	if (has(j, "<|assistant|>") && has(j, "<|end|>"))
		return (chat_template_by_name("phi3"));
	if (has(j, "<|user|>") && has(j, "<|assistant|>") &&
	    (has(j, "eos_token") || has(j, "</s>")))
		return (chat_template_by_name("zephyr"));
	if (has(j, "<start_of_turn>"))
		return (chat_template_by_name("gemma"));
	if (has(j, "<|start_header_id|>") && has(j, "<|end_header_id|>"))
		return (chat_template_by_name("llama3"));
	if (has(j, DS_USER) && has(j, DS_ASSISTANT))
		return (chat_template_by_name(has(j, "<think>") ?
		    "deepseek-r1" : "deepseek3"));
	return (NULL);
}

/* The family of a template string; ChatML when nothing matches. */
const struct chat_template *
chat_template_detect(const char *jinja)
{
	const struct chat_template *t = NULL;

	if (jinja != NULL && *jinja != '\0')
		t = detect(jinja);
	return (t != NULL ? t : &templates[0]);
}

/* Whether the string names or looks like a known family. */
int
chat_template_recognized(const char *jinja)
{
	return (jinja != NULL && *jinja != '\0' && detect(jinja) != NULL);
}

/* Whether c is white space as Python's str.strip() (ASCII part) sees it. */
static int
is_ws(char c)
{
	return (c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
	    c == '\v' || c == '\f');
}

/* Append s with leading and trailing white space removed. */
static void
add_trim(struct strbuf *sb, const char *s)
{
	const char	*e = s + strlen(s);

	while (s < e && is_ws(*s))
		s++;
	while (e > s && is_ws(e[-1]))
		e--;
	strbuf_add(sb, s, (size_t)(e - s));
}

/* Role text to enum; -1 for anything else. */
static int
role_of(const char *role)
{
	if (strcmp(role, "system") == 0)
		return (ROLE_SYSTEM);
	if (strcmp(role, "user") == 0)
		return (ROLE_USER);
	if (strcmp(role, "assistant") == 0)
		return (ROLE_ASSISTANT);
	return (-1);
}

/* Mistral v1, v3 and v3-tekken: system text opens the next [INST]. */
static void
render_mistral(struct strbuf *sb, enum chat_family f,
    const struct chat_message *m, const int *roles, size_t n)
{
	const char	*lead = f == FAM_MISTRAL_V1 ? " " : "";
	const char	*trail = f == FAM_MISTRAL_V3_TEKKEN ? "" : " ";
	int		 in_turn = 0;
	size_t		 i;

	for (i = 0; i < n; i++) {
		if (!in_turn) {
			strbuf_printf(sb, "%s[INST]%s", lead, trail);
			in_turn = 1;
		}
		switch (roles[i]) {
		case ROLE_SYSTEM:
			strbuf_adds(sb, m[i].content);
			strbuf_adds(sb, "\n\n");
			break;
		case ROLE_USER:
			strbuf_adds(sb, m[i].content);
			strbuf_printf(sb, "%s[/INST]", lead);
			break;
		default:
			strbuf_adds(sb, trail);
			if (f == FAM_MISTRAL_V3)
				add_trim(sb, m[i].content);
			else
				strbuf_adds(sb, m[i].content);
			strbuf_adds(sb, "</s>");
			in_turn = 0;
		}
	}
}

/*
 * Llama 2 as Meta's template writes it: the system text in a <<SYS>>
 * block inside the first [INST], each later user turn opened by BOS, the
 * answers between spaces; the leading BOS is the tokenizer's.  Without
 * <<SYS>> (early Mistral) the system text is prefixed to the user's.
 */
static void
render_llama2(struct strbuf *sb, enum chat_family f,
    const struct chat_message *m, const int *roles, size_t n)
{
	struct strbuf	 sys = STRBUF_INIT;
	int		 first = 1, nosys = f == FAM_LLAMA2_NOSYS;
	size_t		 i;

	for (i = 0; i < n; i++) {
		switch (roles[i]) {
		case ROLE_SYSTEM:
			if (sys.len > 0)
				strbuf_adds(&sys, "\n");
			strbuf_adds(&sys, m[i].content);
			break;
		case ROLE_USER:
			if (!first && !nosys)
				strbuf_adds(sb, "<s>");
			strbuf_adds(sb, "[INST] ");
			if (sys.len > 0 && nosys)
				strbuf_printf(sb, "%s\n", strbuf_str(&sys));
			else if (sys.len > 0)
				strbuf_printf(sb, "<<SYS>>\n%s\n<</SYS>>\n\n",
				    strbuf_str(&sys));
			strbuf_reset(&sys);
			if (nosys)
				strbuf_adds(sb, m[i].content);
			else
				add_trim(sb, m[i].content);
			strbuf_adds(sb, " [/INST]");
			first = 0;
			break;
		default:
			if (nosys)
				strbuf_printf(sb, "%s</s>", m[i].content);
			else {
				strbuf_adds(sb, " ");
				add_trim(sb, m[i].content);
				strbuf_adds(sb, " </s>");
			}
			first = 0;
		}
	}
	strbuf_free(&sys);
}

/* Gemma: no system role, so its text opens the first user turn. */
static void
render_gemma(struct strbuf *sb, const struct chat_message *m,
    const int *roles, size_t n)
{
	struct strbuf	 sys = STRBUF_INIT;
	size_t		 i;

	for (i = 0; i < n; i++) {
		if (roles[i] == ROLE_SYSTEM) {
			add_trim(&sys, m[i].content);
			continue;
		}
		strbuf_printf(sb, "<start_of_turn>%s\n",
		    roles[i] == ROLE_USER ? "user" : "model");
		if (roles[i] == ROLE_USER && sys.len > 0) {
			strbuf_printf(sb, "%s\n\n", strbuf_str(&sys));
			strbuf_reset(&sys);
		}
		add_trim(sb, m[i].content);
		strbuf_adds(sb, "<end_of_turn>\n");
	}
	strbuf_free(&sys);
}

/*
 * DeepSeek V3 and R1: the system texts first, joined by blank lines, then
 * the turns; an answer's reasoning (up to </think>) is not replayed.
 */
static void
render_deepseek(struct strbuf *sb, const struct chat_message *m,
    const int *roles, size_t n)
{
	const char	*c, *p;
	int		 nsys = 0;
	size_t		 i;

	for (i = 0; i < n; i++) {
		if (roles[i] != ROLE_SYSTEM)
			continue;
		if (nsys++ > 0)
			strbuf_adds(sb, "\n\n");
		strbuf_adds(sb, m[i].content);
	}
	for (i = 0; i < n; i++) {
		if (roles[i] == ROLE_USER)
			strbuf_printf(sb, DS_USER "%s", m[i].content);
		else if (roles[i] == ROLE_ASSISTANT) {
			c = m[i].content;
			while ((p = strstr(c, "</think>")) != NULL)
				c = p + strlen("</think>");
			strbuf_printf(sb, DS_ASSISTANT "%s" DS_EOS, c);
		}
	}
}

/* Render the turns of a family; the generation prompt is added after. */
static void
render(struct strbuf *sb, enum chat_family f, const struct chat_message *m,
    const int *roles, size_t n)
{
	const char	*sp = f == FAM_MISTRAL_V7 ? " " : "";
	size_t		 i;

	switch (f) {
	case FAM_MISTRAL_V1:
	case FAM_MISTRAL_V3:
	case FAM_MISTRAL_V3_TEKKEN:
		render_mistral(sb, f, m, roles, n);
		return;
	case FAM_LLAMA2:
	case FAM_LLAMA2_NOSYS:
		render_llama2(sb, f, m, roles, n);
		return;
	case FAM_GEMMA:
		render_gemma(sb, m, roles, n);
		return;
	case FAM_DEEPSEEK3:
	case FAM_DEEPSEEK_R1:
		render_deepseek(sb, m, roles, n);
		return;
	default:
		break;
	}
	for (i = 0; i < n; i++) {
		switch (f) {
		case FAM_CHATML:
			strbuf_printf(sb, "<|im_start|>%s\n%s<|im_end|>\n",
			    m[i].role, m[i].content);
			break;
		case FAM_PHI4:
			strbuf_printf(sb, "<|im_start|>%s<|im_sep|>%s<|im_end|>",
			    m[i].role, m[i].content);
			break;
		case FAM_LLAMA3:
			strbuf_printf(sb, "<|start_header_id|>%s"
			    "<|end_header_id|>\n\n", m[i].role);
			add_trim(sb, m[i].content);
			strbuf_adds(sb, "<|eot_id|>");
			break;
		case FAM_PHI3:
			strbuf_printf(sb, "<|%s|>\n%s<|end|>\n", m[i].role,
			    m[i].content);
			break;
		case FAM_ZEPHYR:
			strbuf_printf(sb, "<|%s|>\n%s</s>\n", m[i].role,
			    m[i].content);
			break;
		case FAM_MISTRAL_V7:
		case FAM_MISTRAL_V7_TEKKEN:
			if (roles[i] == ROLE_SYSTEM)
				strbuf_printf(sb, "[SYSTEM_PROMPT]%s%s"
				    "[/SYSTEM_PROMPT]", sp, m[i].content);
			else if (roles[i] == ROLE_USER)
				strbuf_printf(sb, "[INST]%s%s[/INST]", sp,
				    m[i].content);
			else
				strbuf_printf(sb, "%s%s</s>", sp, m[i].content);
			break;
		default:
			break;
		}
	}
}

/* The header of the assistant's next turn, "" where the format has none. */
static const char *
gen_prompt(enum chat_family f)
{
	switch (f) {
	case FAM_CHATML:	return ("<|im_start|>assistant\n");
	case FAM_PHI4:		return ("<|im_start|>assistant<|im_sep|>");
	case FAM_LLAMA3:	return ("<|start_header_id|>assistant"
				    "<|end_header_id|>\n\n");
	case FAM_GEMMA:		return ("<start_of_turn>model\n");
	case FAM_PHI3:
	case FAM_ZEPHYR:	return ("<|assistant|>\n");
	case FAM_DEEPSEEK3:	return (DS_ASSISTANT);
	case FAM_DEEPSEEK_R1:	return (DS_ASSISTANT "<think>\n");
	default:		return ("");
	}
}

/* Render a conversation with a template. */
char *
chat_render(const struct chat_template *t, const struct chat_message *m,
    size_t n, int add_generation_prompt, char **cause)
{
	struct strbuf	 sb = STRBUF_INIT;
	size_t		 i, total = 0;
	int		*roles;

	for (i = 0; i < n; i++) {
		if (m[i].role == NULL || m[i].content == NULL) {
			set_cause(cause, "message %zu has no %s", i + 1,
			    m[i].role == NULL ? "role" : "content");
			return (NULL);
		}
		if (role_of(m[i].role) == -1) {
			set_cause(cause, "message %zu has role \"%.32s\" "
			    "(system, user or assistant)", i + 1, m[i].role);
			return (NULL);
		}
		total += strlen(m[i].content) + 64;
		if (total > CHAT_RENDER_MAX) {
			set_cause(cause, "conversation is over the limit of "
			    "%zu bytes", CHAT_RENDER_MAX);
			return (NULL);
		}
	}
	roles = xreallocarray(NULL, n > 0 ? n : 1, sizeof *roles);
	for (i = 0; i < n; i++)
		roles[i] = role_of(m[i].role);
	strbuf_reserve(&sb, total + 64);
	render(&sb, t->family, m, roles, n);
	if (add_generation_prompt)
		strbuf_adds(&sb, gen_prompt(t->family));
	free(roles);
	if (sb.buf == NULL)
		return (xstrdup(""));
	return (strbuf_detach(&sb, NULL));
}
