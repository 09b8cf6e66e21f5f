/*
 * http_gen.c: generations requested over HTTP.  A request finds its model
 * (waiting while it loads, loading a lazy one), is submitted through the
 * same gen_submit() as the protobuf protocol, and its events come back on
 * the control thread through the gen's ops, where the API's formatter
 * words them.  A client that goes away cancels its request.
 */
#include "config.h"

#include <sys/socket.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>

#include "chat_http.h"
#include "http.h"
#include "instance.h"
#include "log.h"
#include "model.h"
#include "phased.h"
#include "strbuf.h"
#include "util.h"

/* Seconds without output before an SSE stream gets a comment line. */
#define HGEN_KEEPALIVE_S	5
/* "Unlimited" output: the engine stops at the end of the context. */
#define HGEN_MAX_TOKENS_ALL	(1U << 20)

static struct hgen	*waiting;	/* for a model that is loading */
static struct hgen	*live;		/* submitted */
static uint64_t		 next_serial;

static void	hgen_token(struct gen *, struct engine_event *);
static void	hgen_done(struct gen *, struct engine_event *);
static const struct gen_ops hgen_ops = { hgen_token, hgen_done };

/* The formatter of a generation's API. */
static const struct hgen_fmt *
fmt_of(const struct hgen *hg)
{
	return (hg->api == HAPI_OAI_COMPLETION || hg->api == HAPI_OAI_CHAT ?
	    &http_oai_fmt : &http_ollama_fmt);
}

/* A new generation for a request. */
struct hgen *
hgen_new(struct evhttp_request *req, enum hgen_api api,
    const struct http_peer *peer)
{
	struct hgen	*hg;

	hg = xcalloc(1, sizeof *hg);
	hg->g.ops = &hgen_ops;
	hg->req = req;
	hg->api = api;
	hg->peer = *peer;
	hg->eg.uid = peer->uid;
	hg->start_ns = now_ns();
	hg->created = (uint64_t)time(NULL);
	snprintf(hg->id, sizeof hg->id, "%s-%" PRIx64 "%04" PRIx64,
	    api == HAPI_OAI_CHAT ? "chatcmpl" : "cmpl", hg->start_ns,
	    ++next_serial & 0xffff);
	sampler_params_init(&hg->eg.sp);
	hg->eg.max_tokens = HGEN_MAX_TOKENS_ALL;
	hg->n_own_stops = -1;
	hg->text = xcalloc(1, sizeof *hg->text);
	strbuf_init(hg->text);
	return (hg);
}

/* Free a generation. */
void
hgen_free(struct hgen *hg)
{
	int	i;

	free(hg->model);
	free(hg->prompt);
	free(hg->tokens);
	free(hg->out_tokens);
	free(hg->prompt_ids);
	if (hg->messages != NULL)
		json_decref(hg->messages);
	if (hg->lp_content != NULL)
		json_decref(hg->lp_content);
	/* Stops after ours are the chat template's, not allocated. */
	for (i = 0; i < (hg->n_own_stops >= 0 ? hg->n_own_stops :
	    hg->eg.n_stops); i++)
		free(hg->eg.stops[i]);
	strbuf_free(hg->text);
	free(hg->text);
	free(hg);
}

/* Unlink from the waiting or the live list. */
static void
unlink_from(struct hgen **head, struct hgen *hg)
{
	if (hg->prev_live != NULL)
		hg->prev_live->next_live = hg->next_live;
	else if (*head == hg)
		*head = hg->next_live;
	if (hg->next_live != NULL)
		hg->next_live->prev_live = hg->prev_live;
	hg->prev_live = hg->next_live = NULL;
}

/* Link at the head of a list. */
static void
link_to(struct hgen **head, struct hgen *hg)
{
	hg->prev_live = NULL;
	hg->next_live = *head;
	if (*head != NULL)
		(*head)->prev_live = hg;
	*head = hg;
}

/*
 * The client went away.  evhttp keeps the request for us (it is ours until
 * a reply function frees it), so only the engine request is cancelled
 * here; its ENGINE_EV_DONE frees everything.
 */
static void
hgen_closed(struct evhttp_connection *evc, void *arg)
{
	struct hgen	*hg = arg;

	hg->gone = 1;
	if (hg->submitted) {
		log_debug("http: %s: client went away, cancelling", hg->id);
		engine_cancel(hg->g.inst->engine, hg->g.engine_id,
		    "client went away");
	}
}

/* Whether the client closed its side (seen before evhttp notices). */
static int
peer_closed(struct hgen *hg)
{
	struct evhttp_connection	*evc;
	char				 c;
	int				 fd;

	if (hg->gone || (evc = evhttp_request_get_connection(hg->req)) == NULL)
		return (1);
	fd = bufferevent_getfd(evhttp_connection_get_bufferevent(evc));
	if (fd == -1)
		return (1);
	return (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0);
}

/* Stop watching the connection: the reply is being finished. */
static void
detach_closecb(struct hgen *hg)
{
	struct evhttp_connection	*evc;

	if (hg->req != NULL &&
	    (evc = evhttp_request_get_connection(hg->req)) != NULL)
		evhttp_connection_set_closecb(evc, NULL, NULL);
}

/* Free the request of a client that is gone (evhttp left it to us). */
static void
release_gone(struct hgen *hg)
{
	if (hg->req == NULL)
		return;
	/* Seen by peer_closed() first, the connection may still be up. */
	detach_closecb(hg);
	if (hg->started)
		evhttp_send_reply_end(hg->req);
	else
		evhttp_send_reply(hg->req, 499, "Client Closed Request", NULL);
	hg->req = NULL;
}

/* Begin the streamed reply with the content type of the API. */
void
hgen_stream_head(struct hgen *hg)
{
	struct evkeyvalq	*h = evhttp_request_get_output_headers(hg->req);

	if (hg->started)
		return;
	hg->started = 1;
	if (hg->api == HAPI_OAI_COMPLETION || hg->api == HAPI_OAI_CHAT) {
		evhttp_add_header(h, "Content-Type", "text/event-stream");
		evhttp_add_header(h, "Cache-Control", "no-cache");
	} else
		evhttp_add_header(h, "Content-Type", "application/x-ndjson");
	evhttp_send_reply_start(hg->req, 200, "OK");
	hg->last_write_ns = now_ns();
}

/* Write one piece of a streamed reply. */
void
hgen_write(struct hgen *hg, const char *s, size_t len)
{
	struct evhttp_connection	*evc;
	struct evbuffer			*b;

	if (hg->req == NULL || hg->gone)
		return;
	if ((evc = evhttp_request_get_connection(hg->req)) != NULL &&
	    evbuffer_get_length(bufferevent_get_output(
	    evhttp_connection_get_bufferevent(evc))) > phased->conf.max_output) {
		/* The client does not read: it may not hold our memory. */
		log_warnx("http: %s: client is not reading, cancelling", hg->id);
		hgen_closed(evc, hg);
		return;
	}
	b = evbuffer_new();
	evbuffer_add(b, s, len);
	evhttp_send_reply_chunk(hg->req, b);
	evbuffer_free(b);
	hg->last_write_ns = now_ns();
}

/* An engine token: record it and let the API word it. */
static void
hgen_token(struct gen *g, struct engine_event *ev)
{
	struct hgen	*hg = (struct hgen *)g;

	if (hg->n_out == hg->cap_out) {
		hg->cap_out = hg->cap_out ? hg->cap_out * 2 : 64;
		hg->out_tokens = xreallocarray(hg->out_tokens, hg->cap_out,
		    sizeof *hg->out_tokens);
	}
	hg->out_tokens[hg->n_out++] = ev->token;
	if (hg->gone)
		return;
	if (peer_closed(hg)) {
		hgen_closed(NULL, hg);
		return;
	}
	strbuf_add(hg->text, ev->text != NULL ? ev->text : "", ev->len);
	http_logprobs_add(hg, ev);
	if (hg->stream)
		fmt_of(hg)->delta(hg, ev->text != NULL ? ev->text : "", ev->len,
		    ev);
}

/* The engine's last event: finish the reply and free the generation. */
static void
hgen_done(struct gen *g, struct engine_event *ev)
{
	struct hgen	*hg = (struct hgen *)g;

	unlink_from(&live, hg);
	hg->prompt_tokens = ev->summary.prompt_tokens;
	hg->output_tokens = ev->summary.output_tokens;
	hg->cached_tokens = ev->cached_tokens;
	if (hg->gone)
		release_gone(hg);
	else {
		detach_closecb(hg);
		if (ev->reason == FINISH_ERROR && !hg->started)
			http_error(hg->req, hg->api >= HAPI_OLLAMA_GENERATE ?
			    HTTP_ERR_OLLAMA : HTTP_ERR_OPENAI, 500, NULL,
			    "generation failed: %s", ev->error != NULL ?
			    ev->error : "no reason given");
		else
			fmt_of(hg)->done(hg, ev);
	}
	hgen_free(hg);
}

/* Reply with an error in the generation's style and free it. */
static void
hgen_fail(struct hgen *hg, int status, const char *param, const char *msg)
{
	json_t	*o;
	char	*s;

	detach_closecb(hg);
	if (hg->gone)
		release_gone(hg);
	else if (hg->started) {
		/* The stream's head is out: the error goes in the stream. */
		if (hg->api >= HAPI_OLLAMA_GENERATE)
			o = json_pack("{ss}", "error", msg);
		else
			o = json_pack("{s{ss,ss?}}", "error", "message", msg,
			    "param", param);
		s = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		if (hg->api >= HAPI_OLLAMA_GENERATE) {
			hgen_write(hg, s, strlen(s));
			hgen_write(hg, "\n", 1);
		} else {
			hgen_write(hg, "data: ", 6);
			hgen_write(hg, s, strlen(s));
			hgen_write(hg, "\n\ndata: [DONE]\n\n", 16);
		}
		free(s);
		evhttp_send_reply_end(hg->req);
		hg->req = NULL;
	} else
		http_error(hg->req, hg->api >= HAPI_OLLAMA_GENERATE ?
		    HTTP_ERR_OLLAMA : HTTP_ERR_OPENAI, status, param, "%s", msg);
	hgen_free(hg);
}

/* Apply an Ollama keep_alive to the instance (0 unloads once idle). */
static void
apply_keep_alive(struct hgen *hg, struct instance *in)
{
	if (hg->has_keep_alive)
		in->keep_alive_ms = hg->keep_alive_ms;
}

/* Submit to a ready instance. */
static void
hgen_submit(struct hgen *hg, struct instance *in)
{
	int32_t		*ids = NULL, *all;
	size_t		 n_ids = 0;
	char		*cause = NULL;
	int		 code;

	if (hg->gone) {
		release_gone(hg);
		hgen_free(hg);
		return;
	}
	apply_keep_alive(hg, in);
	if (hg->load_only) {
		/* An empty prompt loads (or with keep_alive 0, unloads). */
		detach_closecb(hg);
		if (hg->has_keep_alive && hg->keep_alive_ms == 0 &&
		    TAILQ_EMPTY(&in->gens)) {
			instance_unload(in->name, NULL);
			http_ollama_load_reply(hg, "unload");
		} else {
			instance_touch(in);
			http_ollama_load_reply(hg, "load");
		}
		hgen_free(hg);
		return;
	}
	if (hg->messages != NULL && !hg->raw) {
		if (http_chat_tokens(hg, in, &ids, &n_ids, &code, &cause) != 0) {
			hgen_fail(hg, code, "messages", cause);
			free(cause);
			return;
		}
	} else if (hg->prompt != NULL) {
		if (gen_tokenize(in, hg->prompt, strlen(hg->prompt), -1, 0,
		    &ids, &n_ids, &cause) != 0) {
			hgen_fail(hg, 400, "prompt", cause);
			free(cause);
			return;
		}
	}
	if (hg->n_tokens > 0) {
		/* Token ids given (or Ollama's context before the prompt). */
		all = xreallocarray(NULL, hg->n_tokens + n_ids, sizeof *all);
		memcpy(all, hg->tokens, hg->n_tokens * sizeof *all);
		if (n_ids > 0)
			memcpy(all + hg->n_tokens, ids, n_ids * sizeof *all);
		free(ids);
		ids = all;
		n_ids += hg->n_tokens;
	}
	hg->eg.prompt = ids;
	hg->eg.n_prompt = (uint32_t)n_ids;
	hg->eg.arrival_ns = now_ns();
	if (gen_submit(in, &hg->eg, &hg->g, &code, &cause) != 0) {
		free(ids);
		hgen_fail(hg, http_status_of(code), NULL, cause);
		free(cause);
		return;
	}
	hg->eg.prompt = NULL;
	hg->prompt_ids = ids;
	hg->n_prompt_ids = n_ids;
	hg->submitted = 1;
	hg->prompt_tokens = (uint32_t)n_ids;
	link_to(&live, hg);
	if (hg->stream)
		fmt_of(hg)->start(hg);
}

/* Start a parsed generation: find or load the model and submit. */
void
hgen_run(struct hgen *hg)
{
	struct instance	*in;
	char		*cause = NULL;
	int		 code;

	evhttp_connection_set_closecb(evhttp_request_get_connection(hg->req),
	    hgen_closed, hg);
	if (hg->has_keep_alive && !hg->peer.admin) {
		hgen_fail(hg, 403, "keep_alive", "keep_alive needs admin rights "
		    "(the daemon's user, root or the admin group on the socket, "
		    "the API key over TCP)");
		return;
	}
	if ((in = instance_find(hg->model)) == NULL) {
		if (hg->load_only && hg->has_keep_alive &&
		    hg->keep_alive_ms == 0) {
			detach_closecb(hg);
			http_ollama_load_reply(hg, "unload");
			hgen_free(hg);
			return;
		}
		if (instance_load_lazy(hg->model, &code, &cause) != 0) {
			hgen_fail(hg, http_status_of(code), "model", cause);
			free(cause);
			return;
		}
		in = instance_find(hg->model);
	}
	if (in->state != INST_READY) {
		hg->load_ns = now_ns();
		link_to(&waiting, hg);
		/* SSE streams start now, to carry keep-alives during the load. */
		if (hg->stream && fmt_of(hg)->keepalive != NULL)
			hgen_stream_head(hg);
		return;
	}
	hgen_submit(hg, in);
}

/* A model finished loading (err NULL) or failed: resume its waiters. */
void
http_gen_model_loaded(const char *name, const char *err)
{
	struct hgen	*hg, *next;
	struct instance	*in = err == NULL ? instance_find(name) : NULL;
	char		*msg;

	for (hg = waiting; hg != NULL; hg = next) {
		next = hg->next_live;
		if (strcmp(hg->model, name) != 0)
			continue;
		unlink_from(&waiting, hg);
		hg->load_ns = now_ns() - hg->load_ns;
		if (in == NULL) {
			xasprintf(&msg, "model %s failed to load: %s", name,
			    err != NULL ? err : "unloaded");
			hgen_fail(hg, 500, "model", msg);
			free(msg);
		} else
			hgen_submit(hg, in);
	}
}

/* Once a second: SSE comment lines while a long prefill runs. */
void
http_gen_tick(void)
{
	struct hgen	*hg;
	uint64_t	 now = now_ns();

	for (hg = live; hg != NULL; hg = hg->next_live)
		if (hg->stream && hg->started && !hg->gone &&
		    fmt_of(hg)->keepalive != NULL &&
		    now - hg->last_write_ns > HGEN_KEEPALIVE_S * 1000000000ULL)
			fmt_of(hg)->keepalive(hg);
	for (hg = waiting; hg != NULL; hg = hg->next_live)
		if (hg->stream && !hg->gone && fmt_of(hg)->keepalive != NULL &&
		    hg->started && now - hg->last_write_ns >
		    HGEN_KEEPALIVE_S * 1000000000ULL)
			fmt_of(hg)->keepalive(hg);
}

/*
 * Shutting down: requests still waiting for a model get 503, running ones
 * are cancelled so that their replies end properly within the grace time.
 */
void
http_gen_shutdown(void)
{
	struct hgen	*hg;

	while ((hg = waiting) != NULL) {
		unlink_from(&waiting, hg);
		hgen_fail(hg, 503, NULL, "daemon is shutting down");
	}
	for (hg = live; hg != NULL; hg = hg->next_live)
		engine_cancel(hg->g.inst->engine, hg->g.engine_id,
		    "daemon is shutting down");
}

/* Whether generations are still running (shutdown waits for them). */
int
http_busy(void)
{
	return (live != NULL || waiting != NULL);
}

/* Where a finished request's time went (ms per cause) and whom it blames. */
static json_t *
http_wait(const struct reqtime_summary *s)
{
	json_t		*w = json_object(), *b = json_array();
	char		 key[64];
	uint32_t	 i;
	int		 c;

	for (c = 0; c < WAIT__COUNT; c++) {
		snprintf(key, sizeof key, "%s_ms", wait_cause_names[c]);
		json_object_set_new(w, key, json_real(s->wait_ns[c] / 1e6));
	}
	for (i = 0; i < s->nblamed && i < WAIT_BLAME_MAX; i++)
		json_array_append_new(b, json_pack("{sI,sf}", "id",
		    (json_int_t)s->blamed[i].id, "ms", s->blamed[i].ns / 1e6));
	json_object_set_new(w, "blamed", b);
	return (w);
}

/* Timings of a finished request as a JSON object (the extension). */
json_t *
http_timings(const struct reqtime_summary *s)
{
	return (json_pack("{sI,sI,sf,sf,sf,sf,sf,sf,sf,sf,so}",
	    "prompt_n", (json_int_t)s->prompt_tokens,
	    "predicted_n", (json_int_t)s->output_tokens,
	    "queue_ms", s->queue_ns / 1e6,
	    "prompt_ms", s->prefill_ns / 1e6,
	    "prompt_per_second", s->prompt_tps,
	    "ttft_ms", s->ttft_ns / 1e6,
	    "predicted_ms", s->decode_ns / 1e6,
	    "predicted_per_second", s->output_tps,
	    "tbt_max_ms", s->tbt_max_ns / 1e6,
	    "e2e_ms", s->e2e_ns / 1e6,
	    "wait", http_wait(s)));
}

/* --- JSON fields ----------------------------------------------------------- */

/* A string field; absent or null leaves *out. */
int
hj_string(json_t *o, const char *key, const char **out, char **cause)
{
	json_t	*v = json_object_get(o, key);

	if (v == NULL || json_is_null(v))
		return (0);
	if (!json_is_string(v)) {
		set_cause(cause, "field '%s' must be a string", key);
		return (-1);
	}
	*out = json_string_value(v);
	return (0);
}

/* A boolean field; absent or null leaves *out. */
int
hj_bool(json_t *o, const char *key, int *out, char **cause)
{
	json_t	*v = json_object_get(o, key);

	if (v == NULL || json_is_null(v))
		return (0);
	if (!json_is_boolean(v)) {
		set_cause(cause, "field '%s' must be true or false", key);
		return (-1);
	}
	*out = json_is_true(v);
	return (0);
}

/* A number field within [lo, hi]. */
int
hj_number(json_t *o, const char *key, double lo, double hi, double *out,
    int *given, char **cause)
{
	json_t	*v = json_object_get(o, key);
	double	 x;

	if (given != NULL)
		*given = 0;
	if (v == NULL || json_is_null(v))
		return (0);
	if (!json_is_number(v)) {
		set_cause(cause, "field '%s' must be a number", key);
		return (-1);
	}
	x = json_number_value(v);
	if (!(x >= lo && x <= hi)) {
		set_cause(cause, "field '%s' is %g, out of range %g..%g", key, x,
		    lo, hi);
		return (-1);
	}
	*out = x;
	if (given != NULL)
		*given = 1;
	return (0);
}

/* An integer field within [lo, hi]. */
int
hj_int(json_t *o, const char *key, long long lo, long long hi,
    long long *out, int *given, char **cause)
{
	json_t		*v = json_object_get(o, key);
	long long	 x;

	if (given != NULL)
		*given = 0;
	if (v == NULL || json_is_null(v))
		return (0);
	if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
	    fabs(json_real_value(v)) < 9e15)
		x = (long long)json_real_value(v);
	else if (json_is_integer(v))
		x = json_integer_value(v);
	else {
		set_cause(cause, "field '%s' must be an integer", key);
		return (-1);
	}
	if (x < lo || x > hi) {
		set_cause(cause, "field '%s' is %lld, out of range %lld..%lld",
		    key, x, lo, hi);
		return (-1);
	}
	*out = x;
	if (given != NULL)
		*given = 1;
	return (0);
}

/* stop: a string or an array of strings, into the engine's stops. */
int
hj_stops(json_t *o, const char *key, struct engine_gen *eg, char **cause)
{
	json_t	*v = json_object_get(o, key), *s;
	size_t	 i;

	if (v == NULL || json_is_null(v))
		return (0);
	if (json_is_string(v)) {
		if (json_string_length(v) == 0)
			return (0);
		v = json_pack("[O]", v);
	} else if (json_is_array(v))
		json_incref(v);
	else {
		set_cause(cause, "field '%s' must be a string or an array of "
		    "strings", key);
		return (-1);
	}
	if (json_array_size(v) > ENGINE_MAX_STOPS) {
		set_cause(cause, "field '%s' has %zu strings (limit %d)", key,
		    json_array_size(v), ENGINE_MAX_STOPS);
		json_decref(v);
		return (-1);
	}
	json_array_foreach(v, i, s) {
		if (!json_is_string(s) || json_string_length(s) == 0 ||
		    json_string_length(s) > ENGINE_MAX_STOP_LEN ||
		    strlen(json_string_value(s)) != json_string_length(s)) {
			set_cause(cause, "field '%s': string %zu must be 1 to %d "
			    "bytes", key, i + 1, ENGINE_MAX_STOP_LEN);
			json_decref(v);
			return (-1);
		}
		eg->stops[eg->n_stops++] = xstrdup(json_string_value(s));
	}
	json_decref(v);
	return (0);
}

/* A keep_alive value: a duration string or a number of seconds. */
int
hj_keep_alive(json_t *o, const char *key, int64_t *ms, int *given,
    char **cause)
{
	json_t	*v = json_object_get(o, key);
	char	*why = NULL;
	double	 x;

	*given = 0;
	if (v == NULL || json_is_null(v))
		return (0);
	if (json_is_number(v)) {
		x = json_number_value(v);
		if (!(x <= 365 * 86400.0)) {
			set_cause(cause, "field '%s' is %g seconds, over a year",
			    key, x);
			return (-1);
		}
		*ms = x < 0 ? -1 : (int64_t)(x * 1000);
	} else if (json_is_string(v)) {
		if (inst_parse_keep_alive(json_string_value(v), ms, &why) != 0) {
			set_cause(cause, "field '%s': %s", key, why);
			free(why);
			return (-1);
		}
	} else {
		set_cause(cause, "field '%s' must be a duration such as \"5m\" "
		    "or a number of seconds", key);
		return (-1);
	}
	*given = 1;
	return (0);
}

/* "priority": -1000..1000, lower first (as vLLM's), into hg's request. */
int
hj_priority(json_t *o, struct hgen *hg, char **cause)
{
	long long	x;
	int		given;

	if (hj_int(o, "priority", -1000, 1000, &x, &given, cause) != 0)
		return (-1);
	if (given)
		hg->eg.priority = (int32_t)x;
	return (0);
}
