/*
 * http_logprobs.c: logprobs and top_logprobs of the OpenAI API.  Each
 * token's entry is kept in the chat form ({"token", "logprob", "bytes",
 * "top_logprobs"}); /v1/completions gets the legacy arrays built from them.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "instance.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"
#include "strbuf.h"
#include "util.h"

/* Read logprobs / top_logprobs into the engine request. */
int
hj_logprobs(json_t *o, struct hgen *hg, char **cause)
{
	long long	 top = 0;
	int		 on = 0, given;

	if (hg->api == HAPI_OAI_CHAT) {
		if (hj_bool(o, "logprobs", &on, cause) != 0 ||
		    hj_int(o, "top_logprobs", 0, SAMPLER_TOP_LOGPROBS_MAX, &top,
		    &given, cause) != 0)
			return (-1);
		if (given && top > 0 && !on) {
			set_cause(cause, "field 'top_logprobs' needs 'logprobs': "
			    "true");
			return (-1);
		}
	} else {
		if (hj_int(o, "logprobs", 0, SAMPLER_TOP_LOGPROBS_MAX, &top,
		    &given, cause) != 0)
			return (-1);
		on = given;
	}
	hg->logprobs = on;
	hg->eg.logprobs = on;
	hg->eg.top_logprobs = on ? (int)top : 0;
	return (0);
}

/* One token's text as an entry's token and bytes. */
static void
token_fields(json_t *e, struct tokenizer *tok, int32_t id)
{
	char	 buf[TOKENIZER_TEXT_MAX];
	size_t	 n, i;
	json_t	*bytes = json_array(), *t;

	n = tokenizer_piece(tok, id, buf, sizeof buf);
	if (n > sizeof buf)
		n = sizeof buf;
	for (i = 0; i < n; i++)
		json_array_append_new(bytes, json_integer((unsigned char)buf[i]));
	/*
	 * A piece may be part of a UTF-8 character: then its token is empty
	 * and the bytes say it all (jansson refuses invalid UTF-8).
	 */
	t = json_stringn(buf, n);
	json_object_set_new(e, "token", t != NULL ? t : json_string(""));
	json_object_set_new(e, "bytes", bytes);
}

/* Record a token's log probabilities (when asked for). */
void
http_logprobs_add(struct hgen *hg, const struct engine_event *ev)
{
	struct tokenizer	*tok;
	json_t			*e, *top, *t;
	int			 i;

	hg->lp_fresh = 0;
	if (!hg->logprobs || !ev->has_logprob)
		return;
	tok = model_tokenizer(hg->g.inst->model);
	if (hg->lp_content == NULL)
		hg->lp_content = json_array();
	e = json_object();
	token_fields(e, tok, ev->token);
	json_object_set_new(e, "logprob", json_real(ev->logprob));
	top = json_array();
	for (i = 0; i < ev->n_top; i++) {
		t = json_object();
		token_fields(t, tok, ev->top_ids[i]);
		json_object_set_new(t, "logprob", json_real(ev->top_lps[i]));
		json_array_append_new(top, t);
	}
	json_object_set_new(e, "top_logprobs", top);
	json_array_append_new(hg->lp_content, e);
	hg->lp_fresh = 1;
}

/* The legacy completions form of entries [from, to). */
static json_t *
legacy(struct hgen *hg, size_t from, size_t to, size_t offset)
{
	json_t	*toks = json_array(), *lps = json_array(), *tops = json_array();
	json_t	*offs = json_array(), *e, *m, *t;
	size_t	 i, j;

	for (i = from; i < to; i++) {
		e = json_array_get(hg->lp_content, i);
		json_array_append(toks, json_object_get(e, "token"));
		json_array_append(lps, json_object_get(e, "logprob"));
		json_array_append_new(offs, json_integer((json_int_t)offset));
		offset += json_string_length(json_object_get(e, "token"));
		m = json_object();
		json_array_foreach(json_object_get(e, "top_logprobs"), j, t)
			json_object_set(m, json_string_value(json_object_get(t,
			    "token")), json_object_get(t, "logprob"));
		json_array_append_new(tops, m);
	}
	return (json_pack("{so,so,so,so}", "tokens", toks, "token_logprobs",
	    lps, "top_logprobs", tops, "text_offset", offs));
}

/* The logprobs object of the last token (streaming), or NULL. */
json_t *
http_logprobs_last(struct hgen *hg)
{
	size_t	n;

	if (!hg->lp_fresh)
		return (NULL);
	hg->lp_fresh = 0;
	n = json_array_size(hg->lp_content);
	if (hg->api == HAPI_OAI_CHAT)
		return (json_pack("{s[O]}", "content",
		    json_array_get(hg->lp_content, n - 1)));
	/* The offset of the last token: the text before it. */
	return (legacy(hg, n - 1, n, hg->text->len - (hg->text->len > 0 &&
	    n > 0 ? json_string_length(json_object_get(json_array_get(
	    hg->lp_content, n - 1), "token")) : 0)));
}

/* The logprobs object of the whole reply, or NULL. */
json_t *
http_logprobs_final(struct hgen *hg)
{
	size_t	start = hg->echo && hg->prompt != NULL ? strlen(hg->prompt) : 0;

	if (!hg->logprobs)
		return (NULL);
	if (hg->lp_content == NULL)
		hg->lp_content = json_array();
	if (hg->api == HAPI_OAI_CHAT)
		return (json_pack("{sO}", "content", hg->lp_content));
	return (legacy(hg, 0, json_array_size(hg->lp_content), start));
}
