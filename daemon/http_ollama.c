/*
 * http_ollama.c: the Ollama API: /api/generate and /api/chat (NDJSON or
 * one object), /api/tags, /api/ps, /api/show, /api/version.
 */
#include "config.h"

#include <sys/stat.h>

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

/* RFC 3339 time with microseconds, as Ollama writes created_at. */
static json_t *
ollama_time(uint64_t unix_ns)
{
	struct tm	tm;
	time_t		t = (time_t)(unix_ns / 1000000000ULL);
	char		buf[64];

	gmtime_r(&t, &tm);
	snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06uZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	    tm.tm_sec, (unsigned)(unix_ns / 1000 % 1000000));
	return (json_string(buf));
}

/* The wall clock in Unix nanoseconds. */
static uint64_t
unix_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec);
}

/* Read the fields of "options" (Ollama's sampling and limits). */
static int
ollama_options(json_t *o, struct hgen *hg, char **cause)
{
	struct sampler_params	*sp = &hg->eg.sp;
	long long		 x;
	double			 d;
	int			 given;

	if (o == NULL || json_is_null(o))
		return (0);
	if (!json_is_object(o)) {
		set_cause(cause, "field 'options' must be an object");
		return (-1);
	}
	if (hj_int(o, "num_predict", -2, 1 << 20, &x, &given, cause) != 0)
		return (-1);
	if (given && x > 0)
		hg->eg.max_tokens = (uint32_t)x;
	else if (given && x == 0) {
		set_cause(cause, "field 'options.num_predict' must not be 0");
		return (-1);
	}
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
	if (hj_int(o, "top_k", 0, INT32_MAX, &x, &given, cause) != 0)
		return (-1);
	if (given)
		sp->top_k = (int32_t)x;
	if (hj_int(o, "seed", INT64_MIN, INT64_MAX, &x, &given, cause) != 0)
		return (-1);
	if (given)
		sp->seed = (uint64_t)x;
	if (hj_number(o, "repeat_penalty", SAMPLER_PENALTY_MIN,
	    SAMPLER_PENALTY_MAX, &d, &given, cause) != 0)
		return (-1);
	if (given)
		sp->repeat_penalty = (float)d;
	if (hj_int(o, "repeat_last_n", -1, SAMPLER_REPEAT_LAST_N_MAX, &x,
	    &given, cause) != 0)
		return (-1);
	if (given)
		sp->repeat_last_n = x < 0 ? SAMPLER_REPEAT_LAST_N_MAX :
		    (int32_t)x;
	if (hj_number(o, "presence_penalty", 0, 0, &d, NULL, cause) != 0 ||
	    hj_number(o, "frequency_penalty", 0, 0, &d, NULL, cause) != 0) {
		free(*cause);
		set_cause(cause, "options presence_penalty and frequency_penalty "
		    "are not supported (only 0): use repeat_penalty");
		return (-1);
	}
	return (hj_stops(o, "stop", &hg->eg, cause));
}

/* Fields both Ollama generation endpoints share. */
static int
ollama_params(json_t *o, struct hgen *hg, char **cause)
{
	const char	*model = NULL, *format = NULL;
	json_t		*v;

	if (hj_string(o, "model", &model, cause) != 0)
		return (-1);
	if (model == NULL || *model == '\0') {
		set_cause(cause, "field 'model' is required");
		return (-1);
	}
	hg->model = xstrdup(model);
	hg->stream = 1;		/* Ollama streams unless told not to */
	if (hj_bool(o, "stream", &hg->stream, cause) != 0 ||
	    hj_priority(o, hg, cause) != 0 ||
	    hj_bool(o, "raw", &hg->raw, cause) != 0 ||
	    hj_keep_alive(o, "keep_alive", &hg->keep_alive_ms,
	    &hg->has_keep_alive, cause) != 0 ||
	    ollama_options(json_object_get(o, "options"), hg, cause) != 0)
		return (-1);
	v = json_object_get(o, "format");
	if (v != NULL && !json_is_null(v) && !(json_is_string(v) &&
	    (hj_string(o, "format", &format, cause), *format == '\0'))) {
		set_cause(cause, "field 'format' is not supported: no "
		    "constrained output");
		return (-1);
	}
	v = json_object_get(o, "images");
	if (v != NULL && !json_is_null(v) && !(json_is_array(v) &&
	    json_array_size(v) == 0)) {
		set_cause(cause, "field 'images' is not supported: text models "
		    "only");
		return (-1);
	}
	v = json_object_get(o, "tools");
	if (v != NULL && !json_is_null(v) && !(json_is_array(v) &&
	    json_array_size(v) == 0)) {
		set_cause(cause, "field 'tools' is not supported: no tool calls");
		return (-1);
	}
	return (0);
}

/* Reply 400 in Ollama's style and free hg. */
static void
ollama_bad(struct evhttp_request *req, struct hgen *hg, json_t *o, char *cause)
{
	http_error(req, HTTP_ERR_OLLAMA, 400, NULL, "%s", cause);
	free(cause);
	json_decref(o);
	hgen_free(hg);
}

/*
 * Read an /api/generate body into hg; -1 and *cause if it is refused.
 * Needs no daemon (the fuzz targets).
 */
int
http_ollama_generate_parse(json_t *o, struct hgen *hg, char **cause)
{
	const char	*prompt = NULL, *system = NULL, *suffix = NULL;
	json_t		*ctx, *t;
	size_t		 i;

	if (ollama_params(o, hg, cause) != 0 ||
	    hj_string(o, "prompt", &prompt, cause) != 0 ||
	    hj_string(o, "system", &system, cause) != 0 ||
	    hj_string(o, "suffix", &suffix, cause) != 0)
		return (-1);
	if (suffix != NULL && *suffix != '\0') {
		set_cause(cause, "field 'suffix' is not supported: no "
		    "fill-in-the-middle");
		return (-1);
	}
	ctx = json_object_get(o, "context");
	if (ctx != NULL && !json_is_null(ctx)) {
		if (!json_is_array(ctx)) {
			set_cause(cause, "field 'context' must be an array of "
			    "token ids");
			return (-1);
		}
		hg->tokens = xreallocarray(NULL, json_array_size(ctx) + 1,
		    sizeof *hg->tokens);
		json_array_foreach(ctx, i, t) {
			if (!json_is_integer(t) || json_integer_value(t) < 0 ||
			    json_integer_value(t) > INT32_MAX) {
				set_cause(cause, "field 'context': element %zu "
				    "is not a token id", i);
				return (-1);
			}
			hg->tokens[hg->n_tokens++] =
			    (int32_t)json_integer_value(t);
		}
	}
	if ((prompt == NULL || *prompt == '\0') && hg->n_tokens == 0)
		hg->load_only = 1;
	else {
		/* Without a chat template the system text leads the prompt. */
		xasprintf(&hg->prompt, "%s%s%s", system != NULL ? system : "",
		    system != NULL && *system != '\0' ? "\n\n" : "",
		    prompt != NULL ? prompt : "");
		if (strlen(hg->prompt) == 0 && hg->n_tokens > 0) {
			free(hg->prompt);
			hg->prompt = NULL;
		}
	}
	return (0);
}

/* POST /api/generate */
void
http_ollama_generate(struct evhttp_request *req, const struct http_peer *p)
{
	struct hgen	*hg;
	json_t		*o;
	char		*cause = NULL;

	if ((o = http_body_object(req, HTTP_ERR_OLLAMA)) == NULL)
		return;
	hg = hgen_new(req, HAPI_OLLAMA_GENERATE, p);
	if (http_ollama_generate_parse(o, hg, &cause) != 0) {
		ollama_bad(req, hg, o, cause);
		return;
	}
	json_decref(o);
	hgen_run(hg);
}

/*
 * Read an /api/chat body into hg; -1 and *cause if it is refused.  Needs
 * no daemon (the fuzz targets).
 */
int
http_ollama_chat_parse(json_t *o, struct hgen *hg, char **cause)
{
	json_t	*m;

	if (ollama_params(o, hg, cause) != 0)
		return (-1);
	m = json_object_get(o, "messages");
	if (m == NULL || json_is_null(m) || (json_is_array(m) &&
	    json_array_size(m) == 0))
		hg->load_only = 1;
	else if (http_chat_check(m, cause) != 0)
		return (-1);
	else
		hg->messages = json_incref(m);
	hg->raw = 0;
	return (0);
}

/* POST /api/chat */
void
http_ollama_chat(struct evhttp_request *req, const struct http_peer *p)
{
	struct hgen	*hg;
	json_t		*o;
	char		*cause = NULL;

	if ((o = http_body_object(req, HTTP_ERR_OLLAMA)) == NULL)
		return;
	hg = hgen_new(req, HAPI_OLLAMA_CHAT, p);
	if (http_ollama_chat_parse(o, hg, &cause) != 0) {
		ollama_bad(req, hg, o, cause);
		return;
	}
	json_decref(o);
	hgen_run(hg);
}

/* The duration and count fields of a final Ollama object. */
static void
ollama_stats(struct hgen *hg, json_t *o, const struct reqtime_summary *s)
{
	json_object_set_new(o, "total_duration",
	    json_integer((json_int_t)(now_ns() - hg->start_ns)));
	json_object_set_new(o, "load_duration",
	    json_integer((json_int_t)hg->load_ns));
	json_object_set_new(o, "prompt_eval_count",
	    json_integer(s->prompt_tokens));
	json_object_set_new(o, "prompt_eval_duration",
	    json_integer((json_int_t)s->prefill_ns));
	json_object_set_new(o, "eval_count", json_integer(s->output_tokens));
	json_object_set_new(o, "eval_duration",
	    json_integer((json_int_t)s->decode_ns));
}

/* One Ollama object: model, created_at, the text and done. */
static json_t *
ollama_obj(struct hgen *hg, const char *text, size_t len, int done)
{
	json_t	*o;

	o = json_pack("{ss,so}", "model", hg->model, "created_at",
	    ollama_time(unix_ns()));
	if (hg->api == HAPI_OLLAMA_CHAT)
		json_object_set_new(o, "message", json_pack("{ss,ss%}", "role",
		    "assistant", "content", text, len));
	else
		json_object_set_new(o, "response", json_stringn(text, len));
	json_object_set_new(o, "done", json_boolean(done));
	return (o);
}

/* Write one NDJSON line holding o (dropped). */
static void
ndjson_send(struct hgen *hg, json_t *o)
{
	char	*s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
	size_t	 n;

	json_decref(o);
	if (s == NULL)
		return;
	n = strlen(s);
	s[n] = '\n';	/* json_dumps leaves room only for the NUL */
	hgen_write(hg, s, n + 1);
	free(s);
}

/* A stream begins: the head only (NDJSON has no greeting). */
static void
ollama_start(struct hgen *hg)
{
	hgen_stream_head(hg);
}

/* One piece of output text. */
static void
ollama_delta(struct hgen *hg, const char *text, size_t len,
    const struct engine_event *ev)
{
	if (len > 0)
		ndjson_send(hg, ollama_obj(hg, text, len, 0));
}

/* The Ollama name of a finish reason. */
static const char *
ollama_reason(enum finish_reason r)
{
	return (r == FINISH_LENGTH ? "length" : r == FINISH_CANCELLED ?
	    "abort" : "stop");
}

/* The end: the final object of the stream, or the whole reply. */
static void
ollama_done(struct hgen *hg, const struct engine_event *ev)
{
	json_t	*o, *ctx;
	size_t	 i;

	if (ev->reason == FINISH_ERROR && hg->stream) {
		if (!hg->started)
			ollama_start(hg);
		ndjson_send(hg, json_pack("{ss}", "error", ev->error != NULL ?
		    ev->error : "generation failed"));
		evhttp_send_reply_end(hg->req);
		hg->req = NULL;
		return;
	}
	if (hg->stream)
		o = ollama_obj(hg, "", 0, 1);
	else
		o = ollama_obj(hg, strbuf_str(hg->text), hg->text->len, 1);
	json_object_set_new(o, "done_reason",
	    json_string(ollama_reason(ev->reason)));
	if (hg->api == HAPI_OLLAMA_GENERATE) {
		/* The context continues the conversation in a next request. */
		ctx = json_array();
		for (i = 0; i < hg->n_prompt_ids; i++)
			json_array_append_new(ctx,
			    json_integer(hg->prompt_ids[i]));
		for (i = 0; i < hg->n_out; i++)
			json_array_append_new(ctx,
			    json_integer(hg->out_tokens[i]));
		json_object_set_new(o, "context", ctx);
	}
	ollama_stats(hg, o, &ev->summary);
	if (hg->stream) {
		if (!hg->started)
			ollama_start(hg);
		ndjson_send(hg, o);
		evhttp_send_reply_end(hg->req);
	} else
		http_reply_json(hg->req, 200, o);
	hg->req = NULL;
}

const struct hgen_fmt http_ollama_fmt = {
	.start = ollama_start,
	.delta = ollama_delta,
	.done = ollama_done,
	.keepalive = NULL,
};

/* Answer an Ollama load or unload (empty prompt) with done_reason. */
void
http_ollama_load_reply(struct hgen *hg, const char *reason)
{
	json_t	*o = ollama_obj(hg, "", 0, 1);

	json_object_set_new(o, "done_reason", json_string(reason));
	http_reply_json(hg->req, 200, o);
	hg->req = NULL;
}

/* A human parameter count such as "260K" or "7.2B". */
static json_t *
param_size(uint64_t n)
{
	char	buf[32];

	if (n >= 1000000000ULL)
		snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
	else if (n >= 1000000ULL)
		snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
	else
		snprintf(buf, sizeof buf, "%.0fK", n / 1e3);
	return (json_string(buf));
}

/* A model entry of /api/tags and /api/ps. */
static json_t *
model_entry(const char *name, const char *path, struct instance *in, int ps)
{
	const struct model_info	*mi = NULL;
	struct stat		 st;
	json_t			*o, *det;
	uint64_t		 size = 0, exp;

	if (in != NULL && in->model != NULL)
		mi = model_info(in->model);
	if (stat(path, &st) == 0)
		size = (uint64_t)st.st_size;
	det = json_pack("{ss,ss,ss}", "format", "gguf", "family",
	    mi != NULL ? mi->arch : "", "quantization_level",
	    mi != NULL ? mi->type_name : "");
	json_object_set_new(det, "families", mi != NULL ?
	    json_pack("[s]", mi->arch) : json_null());
	json_object_set_new(det, "parameter_size", mi != NULL ?
	    param_size(mi->n_params) : json_string(""));
	json_object_set_new(det, "parent_model", json_string(""));
	o = json_pack("{ss,ss,sI,ss,so}", "name", name, "model", name, "size",
	    (json_int_t)size, "digest", "", "details", det);
	json_object_set_new(o, "modified_at", ollama_time(
	    (uint64_t)st.st_mtime * 1000000000ULL));
	if (ps && in != NULL) {
		json_object_set_new(o, "size_vram", json_integer(0));
		exp = in->keep_alive_ms < 0 ? unix_ns() +
		    3650ULL * 86400 * 1000000000ULL : unix_ns() +
		    (uint64_t)in->keep_alive_ms * 1000000ULL -
		    (now_ns() - in->last_used_ns);
		json_object_set_new(o, "expires_at", ollama_time(exp));
	}
	return (o);
}

/* GET /api/tags: every model phased can serve by name. */
void
http_ollama_tags(struct evhttp_request *req, const struct http_peer *p)
{
	struct instance		*in;
	struct config_model	*cm;
	json_t			*a = json_array();
	int			 i;

	for (in = instance_first(); in != NULL; in = instance_next(in))
		json_array_append_new(a, model_entry(in->name, in->path, in, 0));
	for (i = 0; i < phased->conf.n_models; i++) {
		cm = &phased->conf.models[i];
		if (instance_find(cm->name) == NULL)
			json_array_append_new(a, model_entry(cm->name, cm->path,
			    NULL, 0));
	}
	http_reply_json(req, 200, json_pack("{so}", "models", a));
}

/* GET /api/ps: the models resident now. */
void
http_ollama_ps(struct evhttp_request *req, const struct http_peer *p)
{
	struct instance	*in;
	json_t		*a = json_array();

	for (in = instance_first(); in != NULL; in = instance_next(in))
		if (in->state == INST_READY)
			json_array_append_new(a, model_entry(in->name, in->path,
			    in, 1));
	http_reply_json(req, 200, json_pack("{so}", "models", a));
}

/* POST /api/show: details, template in use, capabilities. */
void
http_ollama_show(struct evhttp_request *req, const struct http_peer *p)
{
	const struct model_info	*mi;
	struct instance		*in;
	const char		*name = NULL, *path = NULL;
	json_t			*o, *r, *info, *caps;
	char			*cause = NULL, key[96];
	int			 i;

	if ((o = http_body_object(req, HTTP_ERR_OLLAMA)) == NULL)
		return;
	if (hj_string(o, "model", &name, &cause) != 0 ||
	    (name == NULL && hj_string(o, "name", &name, &cause) != 0)) {
		http_error(req, HTTP_ERR_OLLAMA, 400, NULL, "%s", cause);
		free(cause);
		json_decref(o);
		return;
	}
	if (name == NULL) {
		http_error(req, HTTP_ERR_OLLAMA, 400, "model", "field 'model' "
		    "is required");
		json_decref(o);
		return;
	}
	in = instance_find(name);
	if (in != NULL)
		path = in->path;
	for (i = 0; path == NULL && i < phased->conf.n_models; i++)
		if (strcmp(phased->conf.models[i].name, name) == 0)
			path = phased->conf.models[i].path;
	if (path == NULL) {
		http_error(req, HTTP_ERR_OLLAMA, 404, "model", "model '%s' not "
		    "found", name);
		json_decref(o);
		return;
	}
	r = model_entry(name, path, in, 0);
	info = json_object();
	caps = json_pack("[s]", "completion");
	if (in != NULL && in->model != NULL) {
		mi = model_info(in->model);
		json_object_set_new(info, "general.architecture",
		    json_string(mi->arch));
		json_object_set_new(info, "general.parameter_count",
		    json_integer((json_int_t)mi->n_params));
		snprintf(key, sizeof key, "%s.context_length", mi->arch);
		json_object_set_new(info, key, json_integer(mi->n_ctx));
		json_object_set_new(info, "tokenizer.ggml.vocab_size",
		    json_integer(mi->n_vocab));
	}
	http_chat_show(in, r, caps);
	json_object_set_new(r, "model_info", info);
	json_object_set_new(r, "capabilities", caps);
	json_object_set_new(r, "modelfile", json_string(""));
	json_object_set_new(r, "parameters", json_string(""));
	json_object_del(r, "name");
	json_object_del(r, "model");
	json_decref(o);
	http_reply_json(req, 200, r);
}

/* GET /api/version */
void
http_ollama_version(struct evhttp_request *req, const struct http_peer *p)
{
	http_reply_json(req, 200, json_pack("{ss}", "version",
	    PACKAGE_VERSION));
}
