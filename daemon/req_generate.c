/* req_generate.c: generate requests and the engine's events for them. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "engine.h"
#include "gen.h"
#include "instance.h"
#include "log.h"
#include "mailbox.h"
#include "model.h"
#include "phased.h"
#include "req.h"
#include "strbuf.h"
#include "tokenizer.h"
#include "util.h"

struct gen_msg {
	struct mbox_msg		 m;
	struct engine_event	 ev;
};

/* The client cancelled or went away: ask the engine to stop. */
static void
gen_cancel(struct stream *s, const char *why)
{
	struct gen	*g = s->arg;

	if (s->conn == NULL)
		g->stream = NULL;
	engine_cancel(g->inst->engine, g->engine_id, why);
	if (g->stream == NULL)
		stream_free(s);
}

/* The wait breakdown of a summary, in the arrays given for the blame. */
static void
wait_fill(Phased__WaitBreakdown *w, const struct reqtime_summary *s,
    uint64_t *ids, double *ms)
{
	uint32_t	i;

	w->queued_ms = s->wait_ns[WAIT_QUEUED] / 1e6;
	w->prefill_ms = s->wait_ns[WAIT_PREFILL] / 1e6;
	w->decode_ms = s->wait_ns[WAIT_DECODE] / 1e6;
	w->others_prefill_ms = s->wait_ns[WAIT_OTHERS_PREFILL] / 1e6;
	w->preempted_ms = s->wait_ns[WAIT_PREEMPTED] / 1e6;
	w->kv_transfer_ms = s->wait_ns[WAIT_KV_TRANSFER] / 1e6;
	w->client_ms = s->wait_ns[WAIT_CLIENT] / 1e6;
	w->scheduling_ms = s->wait_ns[WAIT_SCHEDULING] / 1e6;
	for (i = 0; i < s->nblamed && i < WAIT_BLAME_MAX; i++) {
		ids[i] = s->blamed[i].id;
		ms[i] = s->blamed[i].ns / 1e6;
	}
	w->n_blamed_ids = w->n_blamed_ms = i;
	w->blamed_ids = ids;
	w->blamed_ms = ms;
}

/* Send a Done built from the engine's final event. */
static void
send_done(struct gen *g, struct engine_event *ev)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__Done		 d = PHASED__DONE__INIT;
	Phased__Timings		 t = PHASED__TIMINGS__INIT;
	struct reqtime_summary	*s = &ev->summary;
	Phased__WaitBreakdown	 w = PHASED__WAIT_BREAKDOWN__INIT;
	uint64_t		 ids[WAIT_BLAME_MAX];
	double			 ms[WAIT_BLAME_MAX];

	t.prompt_tokens = s->prompt_tokens;
	t.output_tokens = s->output_tokens;
	t.queue_ms = s->queue_ns / 1e6;
	t.prompt_ms = s->prefill_ns / 1e6;
	t.ttft_ms = s->ttft_ns / 1e6;
	t.decode_ms = s->decode_ns / 1e6;
	t.e2e_ms = s->e2e_ns / 1e6;
	t.prompt_tps = s->prompt_tps;
	t.output_tps = s->output_tps;
	t.has_tpot_ms = 1;
	t.tpot_ms = s->tpot_ns / 1e6;
	t.has_tbt_max_ms = 1;
	t.tbt_max_ms = s->tbt_max_ns / 1e6;
	t.has_preemptions = 1;
	t.preemptions = s->preemptions;
	wait_fill(&w, s, ids, ms);
	w.has_request_id = 1;
	w.request_id = g->engine_id;
	d.wait = &w;
	d.finish_reason = (char *)finish_reason_names[ev->reason];
	d.timings = &t;
	d.error = ev->error;
	d.has_cached_tokens = 1;
	d.cached_tokens = ev->cached_tokens;
	r.body_case = PHASED__RESPONSE__BODY_DONE;
	r.done = &d;
	stream_send(g->stream, &r);
}

/*
 * Put a token's log probabilities in its event; the alternatives are in
 * one allocation that te->top_logprobs[0] heads.
 */
static void
add_logprobs(struct gen *g, struct engine_event *ev, Phased__TokenEvent *te)
{
	struct tokenizer	*tok = model_tokenizer(g->inst->model);
	struct top_lp {
		Phased__TopLogprob	 m;
		char			 text[TOKENIZER_TEXT_MAX];
	}			*tl;
	int			 i;

	te->has_logprob = 1;
	te->logprob = ev->logprob;
	if (ev->n_top <= 0)
		return;
	tl = xcalloc((size_t)ev->n_top, sizeof *tl);
	te->top_logprobs = xcalloc((size_t)ev->n_top, sizeof *te->top_logprobs);
	te->n_top_logprobs = (size_t)ev->n_top;
	for (i = 0; i < ev->n_top; i++) {
		phased__top_logprob__init(&tl[i].m);
		tl[i].m.token_id = ev->top_ids[i];
		tl[i].m.logprob = ev->top_lps[i];
		tl[i].m.has_text = 1;
		tl[i].m.text.data = (uint8_t *)tl[i].text;
		tl[i].m.text.len = tokenizer_piece(tok, ev->top_ids[i],
		    tl[i].text, sizeof tl[i].text);
		te->top_logprobs[i] = &tl[i].m;
	}
}

/* Deliver one engine event on the control thread. */
static void
gen_deliver(struct mbox_msg *m)
{
	struct gen_msg		*gm = (struct gen_msg *)m;
	struct engine_event	*ev = &gm->ev;
	struct gen		*g = ev->owner;
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__TokenEvent	 te = PHASED__TOKEN_EVENT__INIT;

	if (g->ops != NULL) {
		if (ev->type == ENGINE_EV_TOKEN)
			g->ops->token(g, ev);
		else {
			TAILQ_REMOVE(&g->inst->gens, g, entry);
			instance_touch(g->inst);
			g->ops->done(g, ev);
		}
	} else if (ev->type == ENGINE_EV_TOKEN && g->stream != NULL) {
		te.token_id = ev->token;
		te.text.data = (uint8_t *)ev->text;
		te.text.len = ev->len;
		te.t_us = ev->t_ns / 1000;
		if (ev->has_logprob)
			add_logprobs(g, ev, &te);
		r.body_case = PHASED__RESPONSE__BODY_TOKEN;
		r.token = &te;
		stream_send(g->stream, &r);
		if (te.n_top_logprobs > 0)
			free(te.top_logprobs[0]);
		free(te.top_logprobs);
	} else if (ev->type == ENGINE_EV_DONE) {
		if (g->stream != NULL) {
			send_done(g, ev);
			stream_free(g->stream);
		}
		TAILQ_REMOVE(&g->inst->gens, g, entry);
		instance_touch(g->inst);
		free(g);
	}
	free(ev->text);
	free(ev->error);
	free(gm);
}

/* The engine's event sink: runs on an engine thread. */
void
instance_engine_emit(void *arg, struct engine_event *ev)
{
	struct gen_msg	*gm;

	gm = xmalloc(sizeof *gm);
	gm->m.deliver = gen_deliver;
	gm->ev = *ev;
	mailbox_post(&gm->m);
}

/* Turn a request's sampling fields into sampler parameters. */
static void
sampler_of(const Phased__GenerateRequest *g, struct sampler_params *sp)
{
	sampler_params_init(sp);
	if (g->has_temperature)
		sp->temperature = g->temperature;
	if (g->has_top_k)
		sp->top_k = (int32_t)(g->top_k > INT32_MAX ? INT32_MAX : g->top_k);
	if (g->has_top_p)
		sp->top_p = g->top_p;
	if (g->has_min_p)
		sp->min_p = g->min_p;
	if (g->has_repeat_penalty)
		sp->repeat_penalty = g->repeat_penalty;
	if (g->has_seed)
		sp->seed = g->seed;
}

/* The wire code for the engine's reason to refuse a request. */
static Phased__ErrorCode
engine_err_code(enum engine_err err)
{
	switch (err) {
	case ENGINE_ERR_STOPPING:
		return (PHASED__ERROR_CODE__ERR_SHUTTING_DOWN);
	case ENGINE_ERR_OVERLOADED:
		return (PHASED__ERROR_CODE__ERR_OVERLOADED);
	case ENGINE_ERR_INVALID:
		break;
	}
	return (PHASED__ERROR_CODE__ERR_INVALID);
}

/* The model a generation names, ready; NULL after answering an error. */
struct instance *
gen_instance(struct conn *c, uint64_t req_id, const char *model)
{
	struct instance	*in;

	if ((in = instance_find(model)) == NULL) {
		conn_send_error(c, req_id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "no model %s (see phasectl models)", model);
		return (NULL);
	}
	if (in->state != INST_READY) {
		conn_send_error(c, req_id, PHASED__ERROR_CODE__ERR_INVALID,
		    "model %s is still loading", model);
		return (NULL);
	}
	return (in);
}

/*
 * Check a request's stop strings and log probability count; -1 and
 * *cause when one breaks a limit.  Needs no daemon (the fuzz targets).
 */
int
gen_check_options(char **stop, size_t n_stop, int has_top, uint32_t top,
    char **cause)
{
	size_t	i;

	if (n_stop > ENGINE_MAX_STOPS) {
		set_cause(cause, "%zu stop strings given (limit %d)", n_stop,
		    ENGINE_MAX_STOPS);
		return (-1);
	}
	for (i = 0; i < n_stop; i++) {
		if (*stop[i] == '\0' || strlen(stop[i]) > ENGINE_MAX_STOP_LEN) {
			set_cause(cause, "stop string %zu must be 1 to %d bytes",
			    i + 1, ENGINE_MAX_STOP_LEN);
			return (-1);
		}
	}
	if (has_top && top > SAMPLER_TOP_LOGPROBS_MAX) {
		set_cause(cause, "top_logprobs %u is over the limit of %d", top,
		    SAMPLER_TOP_LOGPROBS_MAX);
		return (-1);
	}
	return (0);
}

/* Check a prompt text's size and encoding; -1 and *cause if refused. */
int
gen_check_prompt(const char *prompt, char **cause)
{
	size_t	len = strlen(prompt), bad;

	if (len > GEN_PROMPT_MAX_BYTES) {
		set_cause(cause, "prompt of %zu bytes is over the limit of %u",
		    len, GEN_PROMPT_MAX_BYTES);
		return (-1);
	}
	if ((bad = utf8_first_invalid(prompt, len)) != (size_t)-1) {
		set_cause(cause, "prompt is not valid UTF-8: byte 0x%02x at "
		    "offset %zu", (unsigned char)prompt[bad], bad);
		return (-1);
	}
	return (0);
}

/*
 * Check a request's stop strings and log probability count and put them
 * in eg; -1 after answering an error.
 */
int
gen_options(struct conn *c, uint64_t req_id, char **stop, size_t n_stop,
    int logprobs, int has_top, uint32_t top, struct engine_gen *eg)
{
	size_t	 i;
	char	*cause = NULL;

	if (gen_check_options(stop, n_stop, has_top, top, &cause) != 0) {
		conn_send_error(c, req_id, PHASED__ERROR_CODE__ERR_INVALID,
		    "%s", cause);
		free(cause);
		return (-1);
	}
	for (i = 0; i < n_stop; i++)
		eg->stops[eg->n_stops++] = stop[i];
	eg->logprobs = logprobs;
	eg->top_logprobs = has_top ? (int)top : 0;
	return (0);
}

/* Tokenize a prompt for an instance; add_bos -1: the model's default. */
int
gen_tokenize(struct instance *in, const char *prompt, size_t len, int add_bos,
    int parse_special, int32_t **ids, size_t *n_ids, char **cause)
{
	struct tokenizer	*tok = model_tokenizer(in->model);
	char			*why = NULL;

	if (len > GEN_PROMPT_MAX_BYTES) {
		set_cause(cause, "prompt of %zu bytes is over the limit of %u",
		    len, GEN_PROMPT_MAX_BYTES);
		return (-1);
	}
	if (add_bos < 0)
		add_bos = tokenizer_add_bos(tok);
	if (tokenizer_encode(tok, prompt, len, add_bos, parse_special, ids,
	    n_ids, &why) != 0) {
		set_cause(cause, "prompt: %s", why);
		free(why);
		return (-1);
	}
	return (0);
}

/* Submit a generation owned by g and track it on its instance. */
int
gen_submit(struct instance *in, struct engine_gen *eg, struct gen *g,
    int *code, char **cause)
{
	enum engine_err	 err;

	g->inst = in;
	/* The user's share under fair scheduling, from phased.conf. */
	eg->weight = config_user_weight(&phased->conf, eg->uid);
	g->engine_id = engine_submit(in->engine, eg, g, &err, cause);
	if (g->engine_id == 0) {
		*code = engine_err_code(err);
		return (-1);
	}
	TAILQ_INSERT_TAIL(&in->gens, g, entry);
	instance_touch(in);
	return (0);
}

/*
 * Submit a prepared generation and stream its events to the client; the
 * caller keeps eg's memory.  Errors are answered here.
 */
void
gen_start(struct conn *c, uint64_t req_id, struct instance *in,
    struct engine_gen *eg)
{
	struct stream	*s;
	struct gen	*g;
	int		 code;
	char		*cause = NULL;

	g = xcalloc(1, sizeof *g);
	g->inst = in;
	if ((s = stream_open(c, req_id, gen_cancel, g)) == NULL) {
		free(g);
		return;
	}
	g->stream = s;
	if (gen_submit(in, eg, g, &code, &cause) != 0) {
		conn_send_error(c, req_id, code, "%s", cause);
		free(cause);
		stream_free(s);
		free(g);
		return;
	}
}

/* Start a generation. */
static void
req_generate(struct conn *c, Phased__Request *req)
{
	Phased__GenerateRequest	*gr = req->generate;
	struct instance		*in;
	struct engine_gen	 eg;
	struct tokenizer	*tok;
	int32_t			*ids = NULL;
	size_t			 n_ids = 0;
	int			 add_bos;
	char			*cause = NULL;

	if ((in = gen_instance(c, req->id, gr->model)) == NULL)
		return;
	memset(&eg, 0, sizeof eg);
	if (gen_options(c, req->id, gr->stop, gr->n_stop, gr->has_logprobs &&
	    gr->logprobs, gr->has_top_logprobs, gr->top_logprobs, &eg) != 0)
		return;
	eg.arrival_ns = now_ns();
	tok = model_tokenizer(in->model);
	if (gr->n_prompt_tokens > 0) {
		ids = xreallocarray(NULL, gr->n_prompt_tokens, sizeof *ids);
		memcpy(ids, gr->prompt_tokens, gr->n_prompt_tokens * sizeof *ids);
		n_ids = gr->n_prompt_tokens;
	} else {
		add_bos = gr->has_add_bos ? gr->add_bos : tokenizer_add_bos(tok);
		if (gen_check_prompt(gr->prompt, &cause) != 0) {
			conn_send_error(c, req->id,
			    PHASED__ERROR_CODE__ERR_INVALID, "%s", cause);
			free(cause);
			return;
		}
		if (tokenizer_encode(tok, gr->prompt, strlen(gr->prompt),
		    add_bos, gr->has_parse_special && gr->parse_special, &ids,
		    &n_ids, &cause) != 0) {
			conn_send_error(c, req->id,
			    PHASED__ERROR_CODE__ERR_INVALID, "prompt: %s", cause);
			free(cause);
			return;
		}
	}
	eg.prompt = ids;
	eg.n_prompt = (uint32_t)n_ids;
	eg.max_tokens = gr->has_max_tokens ? gr->max_tokens :
	    GEN_MAX_TOKENS_DEFAULT;
	sampler_of(gr, &eg.sp);
	if (gr->has_deadline_ms && gr->deadline_ms > 0)
		eg.deadline_ns = eg.arrival_ns + gr->deadline_ms * 1000000ULL;
	if (gr->has_priority)
		eg.priority = gr->priority;
	eg.uid = (uint32_t)c->uid;
	gen_start(c, req->id, in, &eg);
	free(ids);
}

const struct req_entry req_generate_entry = {
	.name = "generate",
	.body = PHASED__REQUEST__BODY_GENERATE,
	.admin = 0,
	.exec = req_generate,
};
