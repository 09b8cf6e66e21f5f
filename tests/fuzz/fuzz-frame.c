/*
 * fuzz-frame.c: libFuzzer target for the Unix socket protocol: the input
 * is a byte stream as a client would send it, cut into frames by
 * frame_take() as the control thread does, each request decoded by
 * protobuf-c and put through the checks its handler makes before it needs
 * a model: the request table, generate's and chat's stop strings, log
 * probabilities and prompt text, load's key=value options, the chat
 * templates a conversation is rendered with, and the UTF-8 cleaning of
 * error messages that quote the request.  No daemon runs.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "conn.h"
#include "gen.h"
#include "instance.h"
#include "req.h"
#include "strbuf.h"
#include "util.h"

/* The default max-frame-size (phased.conf(5)), small enough to be fuzzed. */
#define FUZZ_MAX_FRAME	(1U << 20)
/* Most chat templates tried per conversation. */
#define FUZZ_TEMPLATES	16

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/*
 * Build an error message as conn_send_error() does, quoting client text,
 * and check that it goes on the wire as valid UTF-8 and decodes again.
 */
static void
check_error_text(uint64_t id, const char *what, const char *quoted)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT, *back;
	Phased__Error		 e = PHASED__ERROR__INIT;
	uint8_t			*buf;
	size_t			 len;
	char			*msg, *clean;

	xasprintf(&msg, "%s %s (see phasectl models)", what, quoted);
	if (utf8_first_invalid(msg, strlen(msg)) != (size_t)-1) {
		clean = utf8_sanitize(msg);
		free(msg);
		msg = clean;
	}
	if (utf8_first_invalid(msg, strlen(msg)) != (size_t)-1)
		abort();	/* a strict decoder would refuse it */
	e.code = PHASED__ERROR_CODE__ERR_INVALID;
	e.message = msg;
	r.id = id;
	r.body_case = PHASED__RESPONSE__BODY_ERROR;
	r.error = &e;
	len = phased__response__get_packed_size(&r);
	buf = xmalloc(len);
	phased__response__pack(&r, buf);
	if ((back = phased__response__unpack(NULL, len, buf)) == NULL ||
	    strcmp(back->error->message, msg) != 0)
		abort();
	phased__response__free_unpacked(back, NULL);
	free(buf);
	free(msg);
}

/* Render a conversation with every chat template. */
static void
render_all(Phased__ChatMessage **pm, size_t n)
{
	static const struct chat_template	*tpl[FUZZ_TEMPLATES];
	static size_t				 n_tpl;
	struct chat_message			*m;
	char					*names, *p, *name, *text, *cause;
	size_t					 i, t;
	int					 gp;

	if (n_tpl == 0) {
		names = xstrdup(chat_template_names());
		for (p = names; (name = strsep(&p, ", ")) != NULL &&
		    n_tpl < FUZZ_TEMPLATES;)
			if (*name != '\0' &&
			    (tpl[n_tpl] = chat_template_by_name(name)) != NULL)
				n_tpl++;
		free(names);
	}
	m = xcalloc(n > 0 ? n : 1, sizeof *m);
	for (i = 0; i < n; i++) {
		m[i].role = pm[i]->role;
		m[i].content = pm[i]->content;
	}
	for (t = 0; t < n_tpl; t++) {
		for (gp = 0; gp < 2; gp++) {
			cause = NULL;
			if ((text = chat_render(tpl[t], m, n, gp,
			    &cause)) == NULL) {
				if (cause == NULL)
					abort();
				free(cause);
				continue;
			}
			if (strlen(text) > CHAT_RENDER_MAX)
				abort();
			free(text);
		}
	}
	free(m);
}

/* The checks of generate and chat before they need their model. */
static void
check_options(char **stop, size_t n_stop, int has_top, uint32_t top)
{
	char	*cause = NULL;

	if (gen_check_options(stop, n_stop, has_top, top, &cause) != 0) {
		if (cause == NULL)
			abort();
		free(cause);
	}
}

/* What a handler checks of one decoded request. */
static void
validate(Phased__Request *req)
{
	struct inst_opts	 o;
	char			*cause = NULL;

	if (req_lookup(req->body_case) == NULL)
		return;		/* the control thread refuses it */
	switch (req->body_case) {
	case PHASED__REQUEST__BODY_GENERATE:
		check_error_text(req->id, "no model", req->generate->model);
		check_options(req->generate->stop, req->generate->n_stop,
		    req->generate->has_top_logprobs,
		    req->generate->top_logprobs);
		if (req->generate->n_prompt_tokens == 0 &&
		    gen_check_prompt(req->generate->prompt, &cause) != 0) {
			check_error_text(req->id, "refused:", cause);
			free(cause);
		}
		break;
	case PHASED__REQUEST__BODY_CHAT:
		check_error_text(req->id, "no model", req->chat->model);
		check_options(req->chat->stop, req->chat->n_stop,
		    req->chat->has_top_logprobs, req->chat->top_logprobs);
		render_all(req->chat->messages, req->chat->n_messages);
		break;
	case PHASED__REQUEST__BODY_RENDER:
		render_all(req->render->messages, req->render->n_messages);
		break;
	case PHASED__REQUEST__BODY_LOAD:
		check_error_text(req->id, "cannot load", req->load->path);
		if (inst_opts_parse(req->load->options,
		    (int)req->load->n_options, &o, &cause) != 0) {
			check_error_text(req->id, "bad option:", cause);
			free(cause);
		} else
			inst_opts_free(&o);
		break;
	case PHASED__REQUEST__BODY_POLICY_SET:
		check_error_text(req->id, "no policy", req->policy_set->policy);
		break;
	default:
		break;
	}
}

/* One input: what a client wrote on its connection. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Phased__Request	*req;
	size_t		 off = 0, used;
	char		 msg[128];

	while (off < size) {
		used = 0;
		switch (frame_take(data + off, size - off, FUZZ_MAX_FRAME,
		    &req, &used, msg, sizeof msg)) {
		case FRAME_MORE:
			return (0);	/* the rest of a frame never came */
		case FRAME_BAD:
			/* The connection is closed after the error. */
			check_error_text(0, "protocol error:", msg);
			return (0);
		case FRAME_OK:
			if (used == 0 || used > size - off || req->id == 0)
				abort();
			validate(req);
			phased__request__free_unpacked(req, NULL);
			off += used;
			break;
		}
	}
	return (0);
}
