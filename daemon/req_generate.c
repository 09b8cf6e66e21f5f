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
#include "req.h"
#include "strbuf.h"
#include "tokenizer.h"
#include "util.h"

#define GEN_MAX_TOKENS_DEFAULT	256
#define GEN_PROMPT_MAX_BYTES	(16U << 20)

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

/* Send a Done built from the engine's final event. */
static void
send_done(struct gen *g, struct engine_event *ev)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__Done		 d = PHASED__DONE__INIT;
	Phased__Timings		 t = PHASED__TIMINGS__INIT;
	struct req_summary	*s = &ev->summary;

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
	d.finish_reason = (char *)finish_reason_names[ev->reason];
	d.timings = &t;
	d.error = ev->error;
	r.body_case = PHASED__RESPONSE__BODY_DONE;
	r.done = &d;
	stream_send(g->stream, &r);
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

	if (ev->type == EV_TOKEN && g->stream != NULL) {
		te.token_id = ev->token;
		te.text.data = (uint8_t *)ev->text;
		te.text.len = ev->len;
		te.t_us = ev->t_ns / 1000;
		r.body_case = PHASED__RESPONSE__BODY_TOKEN;
		r.token = &te;
		stream_send(g->stream, &r);
	} else if (ev->type == EV_DONE) {
		if (g->stream != NULL) {
			send_done(g, ev);
			stream_free(g->stream);
		}
		TAILQ_REMOVE(&g->inst->gens, g, entry);
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

/* Start a generation. */
static void
req_generate(struct conn *c, Phased__Request *req)
{
	Phased__GenerateRequest	*gr = req->generate;
	struct instance		*in;
	struct engine_gen	 eg;
	struct tokenizer	*tok;
	struct stream		*s;
	struct gen		*g;
	int32_t			*ids = NULL;
	size_t			 n_ids = 0, i, bad;
	int			 code, add_bos;
	char			*cause = NULL;

	if ((in = instance_find(gr->model)) == NULL) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "no model %s (see phasectl models)", gr->model);
		return;
	}
	if (in->state != INST_READY) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "model %s is still loading", gr->model);
		return;
	}
	if (gr->n_stop > ENGINE_MAX_STOPS) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "%zu stop strings given (limit %d)", gr->n_stop,
		    ENGINE_MAX_STOPS);
		return;
	}
	for (i = 0; i < gr->n_stop; i++) {
		if (*gr->stop[i] == '\0' ||
		    strlen(gr->stop[i]) > ENGINE_MAX_STOP_LEN) {
			conn_send_error(c, req->id,
			    PHASED__ERROR_CODE__ERR_INVALID, "stop string %zu "
			    "must be 1 to %d bytes", i + 1, ENGINE_MAX_STOP_LEN);
			return;
		}
	}
	memset(&eg, 0, sizeof eg);
	eg.arrival_ns = now_ns();
	tok = model_tokenizer(in->model);
	if (gr->n_prompt_tokens > 0) {
		ids = xreallocarray(NULL, gr->n_prompt_tokens, sizeof *ids);
		memcpy(ids, gr->prompt_tokens, gr->n_prompt_tokens * sizeof *ids);
		n_ids = gr->n_prompt_tokens;
	} else {
		if (strlen(gr->prompt) > GEN_PROMPT_MAX_BYTES) {
			conn_send_error(c, req->id,
			    PHASED__ERROR_CODE__ERR_INVALID, "prompt of %zu "
			    "bytes is over the limit of %u", strlen(gr->prompt),
			    GEN_PROMPT_MAX_BYTES);
			return;
		}
		add_bos = gr->has_add_bos ? gr->add_bos : tokenizer_add_bos(tok);
		if ((bad = utf8_first_invalid(gr->prompt,
		    strlen(gr->prompt))) != (size_t)-1) {
			conn_send_error(c, req->id,
			    PHASED__ERROR_CODE__ERR_INVALID, "prompt is not "
			    "valid UTF-8: byte 0x%02x at offset %zu",
			    (unsigned char)gr->prompt[bad], bad);
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
	for (i = 0; i < gr->n_stop; i++)
		eg.stops[eg.n_stops++] = gr->stop[i];
	if (gr->has_deadline_ms && gr->deadline_ms > 0)
		eg.deadline_ns = eg.arrival_ns + gr->deadline_ms * 1000000ULL;

	g = xcalloc(1, sizeof *g);
	g->inst = in;
	if ((s = stream_open(c, req->id, gen_cancel, g)) == NULL) {
		free(g);
		free(ids);
		return;
	}
	g->stream = s;
	g->engine_id = engine_submit(in->engine, &eg, g, &code, &cause);
	free(ids);
	if (g->engine_id == 0) {
		conn_send_error(c, req->id, code, "%s", cause);
		free(cause);
		stream_free(s);
		free(g);
		return;
	}
	TAILQ_INSERT_TAIL(&in->gens, g, entry);
}

const struct req_entry req_generate_entry = {
	.name = "generate",
	.body = PHASED__REQUEST__BODY_GENERATE,
	.admin = 0,
	.exec = req_generate,
};
