/*
 * http_openai.c: the OpenAI API: /v1/completions, /v1/chat/completions
 * (JSON or server-sent events) and /v1/models.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/http.h>

#include "chat_http.h"
#include "http.h"
#include "instance.h"
#include "model.h"
#include "phased.h"
#include "strbuf.h"
#include "util.h"

/* The finish reason as the OpenAI API names it. */
const char *
http_oai_finish(enum finish_reason r)
{
	switch (r) {
	case FINISH_LENGTH:
		return ("length");
	case FINISH_STOP:
	case FINISH_EOS:
		return ("stop");
	case FINISH_CANCELLED:
		return ("abort");
	default:
		return ("error");
	}
}

/* Refuse a field that is present with anything but its neutral value. */
static int
refuse_unless(json_t *o, const char *key, json_t *neutral, const char *why,
    char **cause)
{
	json_t	*v = json_object_get(o, key);
	int	 ok;

	ok = v == NULL || json_is_null(v) || (neutral != NULL &&
	    json_equal(v, neutral));
	if (neutral != NULL)
		json_decref(neutral);
	if (!ok)
		set_cause(cause, "field '%s' is not supported: %s", key, why);
	return (ok ? 0 : -1);
}

/* Read the fields both OpenAI endpoints share into hg; -1 and *cause. */
static int
oai_params(json_t *o, struct hgen *hg, char **cause)
{
	struct sampler_params	*sp = &hg->eg.sp;
	const char		*model = NULL, *user = NULL;
	json_t			*so;
	long long		 x;
	double			 d;
	int			 given;

	if (hj_string(o, "model", &model, cause) != 0)
		return (-1);
	if (model == NULL || *model == '\0') {
		set_cause(cause, "field 'model' is required");
		return (-1);
	}
	hg->model = xstrdup(model);
	if (hj_string(o, "user", &user, cause) != 0 ||
	    hj_priority(o, hg, cause) != 0 ||
	    hj_bool(o, "stream", &hg->stream, cause) != 0)
		return (-1);
	if ((so = json_object_get(o, "stream_options")) != NULL &&
	    !json_is_null(so)) {
		if (!json_is_object(so)) {
			set_cause(cause, "field 'stream_options' must be an "
			    "object");
			return (-1);
		}
		if (hj_bool(so, "include_usage", &hg->include_usage,
		    cause) != 0)
			return (-1);
	}
	if (hj_int(o, "max_tokens", 1, 1 << 20, &x, &given, cause) != 0)
		return (-1);
	if (given)
		hg->eg.max_tokens = (uint32_t)x;
	if (hj_int(o, "max_completion_tokens", 1, 1 << 20, &x, &given,
	    cause) != 0)
		return (-1);
	if (given)
		hg->eg.max_tokens = (uint32_t)x;
	if (hj_number(o, "temperature", 0, SAMPLER_TEMPERATURE_MAX, &d, &given,
	    cause) != 0)
		return (-1);
	if (given)
		sp->temperature = (float)d;
	if (hj_number(o, "top_p", 0, 1, &d, &given, cause) != 0)
		return (-1);
	if (given)
		sp->top_p = (float)d;
	if (hj_number(o, "min_p", 0, 1, &d, &given, cause) != 0)
		return (-1);
	if (given)
		sp->min_p = (float)d;
	if (hj_int(o, "top_k", -1, INT32_MAX, &x, &given, cause) != 0)
		return (-1);
	if (given)
		sp->top_k = x < 0 ? 0 : (int32_t)x;
	if (hj_int(o, "seed", INT64_MIN, INT64_MAX, &x, &given, cause) != 0)
		return (-1);
	if (given)
		sp->seed = (uint64_t)x;
	if (hj_number(o, "repetition_penalty", SAMPLER_PENALTY_MIN,
	    SAMPLER_PENALTY_MAX, &d, &given, cause) != 0)
		return (-1);
	if (given)
		sp->repeat_penalty = (float)d;
	if (hj_number(o, "repeat_penalty", SAMPLER_PENALTY_MIN,
	    SAMPLER_PENALTY_MAX, &d, &given, cause) != 0)
		return (-1);
	if (given)
		sp->repeat_penalty = (float)d;
	if (hj_number(o, "presence_penalty", 0, 0, &d, NULL, cause) != 0 ||
	    hj_number(o, "frequency_penalty", 0, 0, &d, NULL, cause) != 0) {
		free(*cause);
		set_cause(cause, "fields 'presence_penalty' and "
		    "'frequency_penalty' are not supported (only 0): use "
		    "'repetition_penalty'");
		return (-1);
	}
	if (hj_int(o, "n", 1, 1, &x, NULL, cause) != 0) {
		free(*cause);
		set_cause(cause, "field 'n' must be 1: one choice per request");
		return (-1);
	}
	if (hj_int(o, "best_of", 1, 1, &x, NULL, cause) != 0) {
		free(*cause);
		set_cause(cause, "field 'best_of' must be 1");
		return (-1);
	}
	if (refuse_unless(o, "logit_bias", json_object(), "no logit bias",
	    cause) != 0 || refuse_unless(o, "tools", json_array(),
	    "no tool calls", cause) != 0 ||
	    refuse_unless(o, "suffix", json_string(""), "no fill-in-the-middle",
	    cause) != 0)
		return (-1);
	if (hj_stops(o, "stop", &hg->eg, cause) != 0)
		return (-1);
	if (hj_logprobs(o, hg, cause) != 0)
		return (-1);
	return (0);
}

/* The prompt of /v1/completions: a string, token ids, or one of either. */
static int
oai_prompt(json_t *o, struct hgen *hg, char **cause)
{
	json_t	*p = json_object_get(o, "prompt"), *t;
	size_t	 i;

	if (json_is_array(p) && json_array_size(p) == 1 &&
	    (json_is_string(json_array_get(p, 0)) ||
	    json_is_array(json_array_get(p, 0))))
		p = json_array_get(p, 0);
	if (json_is_string(p)) {
		if (strlen(json_string_value(p)) != json_string_length(p)) {
			set_cause(cause, "field 'prompt' holds a NUL character");
			return (-1);
		}
		hg->prompt = xstrdup(json_string_value(p));
		return (0);
	}
	if (!json_is_array(p)) {
		set_cause(cause, "field 'prompt' must be a string or an array "
		    "of token ids");
		return (-1);
	}
	if (json_array_size(p) == 0 || json_is_string(json_array_get(p, 0)) ||
	    json_is_array(json_array_get(p, 0))) {
		set_cause(cause, "field 'prompt' must hold exactly one prompt "
		    "(batches are not supported)");
		return (-1);
	}
	hg->tokens = xreallocarray(NULL, json_array_size(p),
	    sizeof *hg->tokens);
	json_array_foreach(p, i, t) {
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > INT32_MAX) {
			set_cause(cause, "field 'prompt': element %zu is not a "
			    "token id", i);
			return (-1);
		}
		hg->tokens[hg->n_tokens++] = (int32_t)json_integer_value(t);
	}
	return (0);
}

/*
 * Read a /v1/completions body into hg; -1 and *cause if it is refused.
 * Needs no daemon (the fuzz targets).
 */
int
http_oai_completion_parse(json_t *o, struct hgen *hg, char **cause)
{
	if (oai_params(o, hg, cause) != 0 || oai_prompt(o, hg, cause) != 0 ||
	    hj_bool(o, "echo", &hg->echo, cause) != 0)
		return (-1);
	return (0);
}

/*
 * Check a /v1/chat/completions body and read its parameters into hg; -1
 * and *cause if it is refused.  Needs no daemon (the fuzz targets).
 */
int
http_oai_chat_parse(json_t *o, struct hgen *hg, char **cause)
{
	if (oai_params(o, hg, cause) != 0 ||
	    http_chat_check(json_object_get(o, "messages"), cause) != 0 ||
	    refuse_unless(o, "response_format", json_pack("{ss}", "type",
	    "text"), "only {\"type\": \"text\"}", cause) != 0)
		return (-1);
	hg->messages = json_incref(json_object_get(o, "messages"));
	return (0);
}

/* POST /v1/completions */
void
http_oai_completions(struct evhttp_request *req, const struct http_peer *p)
{
	struct hgen	*hg;
	json_t		*o;
	char		*cause = NULL;

	if ((o = http_body_object(req, HTTP_ERR_OPENAI)) == NULL)
		return;
	hg = hgen_new(req, HAPI_OAI_COMPLETION, p);
	if (http_oai_completion_parse(o, hg, &cause) != 0) {
		http_error(req, HTTP_ERR_OPENAI, 400, NULL, "%s", cause);
		free(cause);
		json_decref(o);
		hgen_free(hg);
		return;
	}
	if (hg->echo && hg->prompt != NULL)
		strbuf_adds(hg->text, hg->prompt);
	json_decref(o);
	hgen_run(hg);
}

/* POST /v1/chat/completions */
void
http_oai_chat(struct evhttp_request *req, const struct http_peer *p)
{
	struct hgen	*hg;
	json_t		*o;
	char		*cause = NULL;

	if ((o = http_body_object(req, HTTP_ERR_OPENAI)) == NULL)
		return;
	hg = hgen_new(req, HAPI_OAI_CHAT, p);
	if (http_oai_chat_parse(o, hg, &cause) != 0) {
		http_error(req, HTTP_ERR_OPENAI, 400, NULL, "%s", cause);
		free(cause);
		json_decref(o);
		hgen_free(hg);
		return;
	}
	json_decref(o);
	hgen_run(hg);
}

/* The usage object of a finished request. */
static json_t *
usage_of(const struct hgen *hg)
{
	return (json_pack("{sI,sI,sI,s{sI}}", "prompt_tokens",
	    (json_int_t)hg->prompt_tokens, "completion_tokens",
	    (json_int_t)hg->output_tokens, "total_tokens",
	    (json_int_t)(hg->prompt_tokens + hg->output_tokens),
	    "prompt_tokens_details", "cached_tokens",
	    (json_int_t)hg->cached_tokens));
}

/* A chunk or reply skeleton: id, object, created, model. */
static json_t *
oai_object(const struct hgen *hg, int chunk)
{
	const char	*obj;

	if (hg->api == HAPI_OAI_CHAT)
		obj = chunk ? "chat.completion.chunk" : "chat.completion";
	else
		obj = "text_completion";
	return (json_pack("{ss,ss,sI,ss,ss}", "id", hg->id, "object", obj,
	    "created", (json_int_t)hg->created, "model", hg->model,
	    "system_fingerprint", "phased-" PACKAGE_VERSION));
}

/* Send one SSE event holding o (dropped). */
static void
sse_send(struct hgen *hg, json_t *o)
{
	struct strbuf	 sb;
	char		*s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));

	json_decref(o);
	strbuf_init(&sb);
	strbuf_adds(&sb, "data: ");
	strbuf_adds(&sb, s != NULL ? s : "{}");
	strbuf_adds(&sb, "\n\n");
	hgen_write(hg, strbuf_str(&sb), sb.len);
	strbuf_free(&sb);
	free(s);
}

/* A streamed choice: a text or a delta, with its finish reason. */
static json_t *
oai_choice(const struct hgen *hg, json_t *delta_or_text, const char *finish,
    json_t *logprobs)
{
	json_t	*c;

	c = json_pack("{sI,so,so}", "index", (json_int_t)0, "logprobs",
	    logprobs != NULL ? logprobs : json_null(), "finish_reason",
	    finish != NULL ? json_string(finish) : json_null());
	json_object_set_new(c, hg->api == HAPI_OAI_CHAT ? "delta" : "text",
	    delta_or_text);
	return (c);
}

/* A chunk with one choice (and usage: null when usage is asked for). */
static void
oai_chunk(struct hgen *hg, json_t *choice)
{
	json_t	*o = oai_object(hg, 1);

	json_object_set_new(o, "choices", json_pack("[o]", choice));
	if (hg->include_usage)
		json_object_set_new(o, "usage", json_null());
	sse_send(hg, o);
}

/* Start a stream: headers, and for chat the chunk with the role. */
static void
oai_start(struct hgen *hg)
{
	hgen_stream_head(hg);
	if (hg->api == HAPI_OAI_CHAT)
		oai_chunk(hg, oai_choice(hg, json_pack("{ss,ss}", "role",
		    "assistant", "content", ""), NULL, NULL));
	else if (hg->echo && hg->text->len > 0)
		oai_chunk(hg, oai_choice(hg, json_string(strbuf_str(hg->text)),
		    NULL, NULL));
}

/* One piece of output text. */
static void
oai_delta(struct hgen *hg, const char *text, size_t len,
    const struct engine_event *ev)
{
	json_t	*lp = http_logprobs_last(hg);

	if (len == 0 && lp == NULL)
		return;
	if (hg->api == HAPI_OAI_CHAT)
		oai_chunk(hg, oai_choice(hg, json_pack("{ss%}", "content", text,
		    len), NULL, lp));
	else
		oai_chunk(hg, oai_choice(hg, json_stringn(text, len), NULL, lp));
}

/* The end: final chunks and [DONE], or the whole reply. */
static void
oai_done(struct hgen *hg, const struct engine_event *ev)
{
	json_t	*o, *choice, *lp;

	if (hg->stream) {
		if (!hg->started)
			oai_start(hg);
		if (ev->reason == FINISH_ERROR) {
			sse_send(hg, json_pack("{s{ss,ss}}", "error", "message",
			    ev->error != NULL ? ev->error : "generation failed",
			    "type", "server_error"));
		} else {
			oai_chunk(hg, oai_choice(hg, hg->api == HAPI_OAI_CHAT ?
			    json_object() : json_string(""),
			    http_oai_finish(ev->reason), NULL));
			if (hg->include_usage) {
				o = oai_object(hg, 1);
				json_object_set_new(o, "choices", json_array());
				json_object_set_new(o, "usage", usage_of(hg));
				json_object_set_new(o, "timings",
				    http_timings(&ev->summary));
				sse_send(hg, o);
			}
		}
		hgen_write(hg, "data: [DONE]\n\n", 14);
		evhttp_send_reply_end(hg->req);
		hg->req = NULL;
		return;
	}
	lp = http_logprobs_final(hg);
	if (hg->api == HAPI_OAI_CHAT)
		choice = json_pack("{sI,s{ss,ss%},so,ss}", "index", (json_int_t)0,
		    "message", "role", "assistant", "content",
		    strbuf_str(hg->text), hg->text->len, "logprobs",
		    lp != NULL ? lp : json_null(), "finish_reason",
		    http_oai_finish(ev->reason));
	else
		choice = json_pack("{sI,ss%,so,ss}", "index", (json_int_t)0,
		    "text", strbuf_str(hg->text), hg->text->len, "logprobs",
		    lp != NULL ? lp : json_null(), "finish_reason",
		    http_oai_finish(ev->reason));
	o = oai_object(hg, 0);
	json_object_set_new(o, "choices", json_pack("[o]", choice));
	json_object_set_new(o, "usage", usage_of(hg));
	json_object_set_new(o, "timings", http_timings(&ev->summary));
	http_reply_json(hg->req, 200, o);
	hg->req = NULL;
}

/* An SSE comment line, which clients ignore, keeps proxies from timing out. */
static void
oai_keepalive(struct hgen *hg)
{
	hgen_write(hg, ": keep-alive\n\n", 14);
}

const struct hgen_fmt http_oai_fmt = {
	.start = oai_start,
	.delta = oai_delta,
	.done = oai_done,
	.keepalive = oai_keepalive,
};

/* GET /v1/models: loaded models and those phased.conf lists. */
void
http_oai_models(struct evhttp_request *req, const struct http_peer *p)
{
	struct instance	*in;
	json_t		*data = json_array();
	json_int_t	 started;
	int		 i;

	/* The daemon's start in Unix seconds (start_ns is monotonic). */
	started = (json_int_t)time(NULL) -
	    (json_int_t)((now_ns() - phased->start_ns) / 1000000000ULL);
	for (in = instance_first(); in != NULL; in = instance_next(in))
		json_array_append_new(data, json_pack("{ss,ss,sI,ss,ss}", "id",
		    in->name, "object", "model", "created", started, "owned_by",
		    "phased", "status", in->state == INST_READY ? "loaded" :
		    "loading"));
	for (i = 0; i < phased->conf.n_models; i++)
		if (instance_find(phased->conf.models[i].name) == NULL)
			json_array_append_new(data, json_pack("{ss,ss,sI,ss,ss}",
			    "id", phased->conf.models[i].name, "object", "model",
			    "created", (json_int_t)0, "owned_by", "phased",
			    "status", "unloaded"));
	http_reply_json(req, 200, json_pack("{ss,so}", "object", "list",
	    "data", data));
}
