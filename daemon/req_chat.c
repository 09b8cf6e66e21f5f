/* req_chat.c: chat, render, tokenize and detokenize requests. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "chat_prompt.h"
#include "conn.h"
#include "engine.h"
#include "gen.h"
#include "instance.h"
#include "model.h"
#include "req.h"
#include "tokenizer.h"
#include "util.h"

/* Most messages in one conversation. */
#define CHAT_MAX_MESSAGES	4096
/* Most tokens one detokenize request takes. */
#define DETOK_MAX_TOKENS	(1U << 20)

/* The protocol's messages as chat_message, malloc'd; NULL after answering. */
static struct chat_message *
messages_of(struct conn *c, uint64_t req_id, Phased__ChatMessage **pm,
    size_t n)
{
	struct chat_message	*m;
	size_t			 i;

	if (n > CHAT_MAX_MESSAGES) {
		conn_send_error(c, req_id, PHASED__ERROR_CODE__ERR_INVALID,
		    "%zu messages given (limit %d)", n, CHAT_MAX_MESSAGES);
		return (NULL);
	}
	m = xcalloc(n > 0 ? n : 1, sizeof *m);
	for (i = 0; i < n; i++) {
		m[i].role = pm[i]->role;
		m[i].content = pm[i]->content;
	}
	return (m);
}

/* Start a chat: render, tokenize and generate to the end of the turn. */
static void
req_chat(struct conn *c, Phased__Request *req)
{
	Phased__ChatRequest	*cr = req->chat;
	struct instance		*in;
	struct engine_gen	 eg;
	struct chat_message	*m;
	int32_t			*ids = NULL;
	uint32_t		 n_ids = 0;
	char			*cause = NULL;

	if ((in = gen_instance(c, req->id, cr->model)) == NULL)
		return;
	if (cr->n_messages == 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "chat has no messages");
		return;
	}
	memset(&eg, 0, sizeof eg);
	if (gen_options(c, req->id, cr->stop, cr->n_stop, cr->has_logprobs &&
	    cr->logprobs, cr->has_top_logprobs, cr->top_logprobs, &eg) != 0)
		return;
	if ((m = messages_of(c, req->id, cr->messages, cr->n_messages)) == NULL)
		return;
	eg.arrival_ns = now_ns();
	if (instance_chat_prompt(in, m, cr->n_messages, &ids, &n_ids, NULL,
	    &cause) != 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "%s", cause);
		free(cause);
		free(m);
		return;
	}
	free(m);
	eg.prompt = ids;
	eg.n_prompt = n_ids;
	eg.max_tokens = cr->has_max_tokens ? cr->max_tokens :
	    GEN_MAX_TOKENS_DEFAULT;
	sampler_params_init(&eg.sp);
	if (cr->has_temperature)
		eg.sp.temperature = cr->temperature;
	if (cr->has_top_k)
		eg.sp.top_k = (int32_t)(cr->top_k > INT32_MAX ? INT32_MAX :
		    cr->top_k);
	if (cr->has_top_p)
		eg.sp.top_p = cr->top_p;
	if (cr->has_min_p)
		eg.sp.min_p = cr->min_p;
	if (cr->has_repeat_penalty)
		eg.sp.repeat_penalty = cr->repeat_penalty;
	if (cr->has_seed)
		eg.sp.seed = cr->seed;
	if (cr->has_deadline_ms && cr->deadline_ms > 0)
		eg.deadline_ns = eg.arrival_ns + cr->deadline_ms * 1000000ULL;
	if (cr->has_priority)
		eg.priority = cr->priority;
	eg.uid = (uint32_t)c->uid;
	instance_chat_gen(in, &eg);
	gen_start(c, req->id, in, &eg);
	free(ids);
}

/* Render a conversation and tokenize it as a chat would. */
static void
req_render(struct conn *c, Phased__Request *req)
{
	Phased__RenderRequest	*rr = req->render;
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__RenderReply	 rp = PHASED__RENDER_REPLY__INIT;
	struct instance		*in;
	struct chat_message	*m;
	int32_t			*ids = NULL;
	uint32_t		 n_ids = 0;
	char			*text = NULL, *cause = NULL;

	if ((in = gen_instance(c, req->id, rr->model)) == NULL)
		return;
	if ((m = messages_of(c, req->id, rr->messages, rr->n_messages)) == NULL)
		return;
	if (!rr->add_generation_prompt) {
		/* Not what a chat would send, so the text only. */
		text = chat_render(in->chat, m, rr->n_messages, 0, &cause);
	} else if (instance_chat_prompt(in, m, rr->n_messages, &ids, &n_ids,
	    &text, &cause) != 0)
		text = NULL;
	free(m);
	if (text == NULL) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "%s", cause);
		free(cause);
		return;
	}
	rp.text = text;
	rp.chat_template = (char *)chat_template_name(in->chat);
	rp.tokens = ids;
	rp.n_tokens = n_ids;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_RENDER;
	r.render = &rp;
	conn_send(c, &r);
	free(text);
	free(ids);
}

/* Tokenize text with the model's vocabulary. */
static void
req_tokenize(struct conn *c, Phased__Request *req)
{
	Phased__TokenizeRequest	*tr = req->tokenize;
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__TokenizeReply	 tp = PHASED__TOKENIZE_REPLY__INIT;
	struct instance		*in;
	struct tokenizer	*tok;
	ProtobufCBinaryData	*pieces;
	char			*buf;
	int32_t			*ids = NULL;
	size_t			 n_ids = 0, i, off = 0;
	char			*cause = NULL;
	int			 add_bos;

	if ((in = gen_instance(c, req->id, tr->model)) == NULL)
		return;
	tok = model_tokenizer(in->model);
	add_bos = tr->has_add_bos ? tr->add_bos : tokenizer_add_bos(tok);
	if (tokenizer_encode(tok, (const char *)tr->text.data, tr->text.len,
	    add_bos, tr->has_parse_special && tr->parse_special, &ids, &n_ids,
	    &cause) != 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "text: %s", cause);
		free(cause);
		return;
	}
	pieces = xcalloc(n_ids > 0 ? n_ids : 1, sizeof *pieces);
	buf = xreallocarray(NULL, n_ids > 0 ? n_ids : 1, TOKENIZER_TEXT_MAX);
	for (i = 0; i < n_ids; i++) {
		pieces[i].data = (uint8_t *)buf + off;
		pieces[i].len = tokenizer_piece(tok, ids[i], buf + off,
		    TOKENIZER_TEXT_MAX);
		off += pieces[i].len;
	}
	tp.tokens = ids;
	tp.n_tokens = n_ids;
	tp.pieces = pieces;
	tp.n_pieces = n_ids;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_TOKENIZE;
	r.tokenize = &tp;
	conn_send(c, &r);
	free(buf);
	free(pieces);
	free(ids);
}

/* Turn token ids back into text, as a generation would stream it. */
static void
req_detokenize(struct conn *c, Phased__Request *req)
{
	Phased__DetokenizeRequest *dr = req->detokenize;
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__DetokenizeReply	 dp = PHASED__DETOKENIZE_REPLY__INIT;
	struct instance		*in;
	struct tokenizer	*tok;
	struct detok		 d;
	char			*out;
	size_t			 i, len = 0, cap;
	int			 n_vocab;

	if ((in = gen_instance(c, req->id, dr->model)) == NULL)
		return;
	tok = model_tokenizer(in->model);
	n_vocab = tokenizer_n_vocab(tok);
	if (dr->n_tokens > DETOK_MAX_TOKENS) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "%zu tokens given (limit %u)", dr->n_tokens,
		    DETOK_MAX_TOKENS);
		return;
	}
	for (i = 0; i < dr->n_tokens; i++) {
		if (dr->tokens[i] < 0 || dr->tokens[i] >= n_vocab) {
			conn_send_error(c, req->id,
			    PHASED__ERROR_CODE__ERR_INVALID, "token %d at "
			    "position %zu is out of range 0..%d", dr->tokens[i],
			    i, n_vocab - 1);
			return;
		}
	}
	cap = (dr->n_tokens + 1) * DETOK_OUT_MAX;
	out = xmalloc(cap);
	detok_init(&d, tok);
	for (i = 0; i < dr->n_tokens; i++)
		len += detok_push(&d, dr->tokens[i], out + len, DETOK_OUT_MAX);
	len += detok_flush(&d, out + len, DETOK_OUT_MAX);
	dp.text.data = (uint8_t *)out;
	dp.text.len = len;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_DETOKENIZE;
	r.detokenize = &dp;
	conn_send(c, &r);
	free(out);
}

const struct req_entry req_chat_entry = {
	.name = "chat",
	.body = PHASED__REQUEST__BODY_CHAT,
	.admin = 0,
	.exec = req_chat,
};
const struct req_entry req_render_entry = {
	.name = "render",
	.body = PHASED__REQUEST__BODY_RENDER,
	.admin = 0,
	.exec = req_render,
};
const struct req_entry req_tokenize_entry = {
	.name = "tokenize",
	.body = PHASED__REQUEST__BODY_TOKENIZE,
	.admin = 0,
	.exec = req_tokenize,
};
const struct req_entry req_detokenize_entry = {
	.name = "detokenize",
	.body = PHASED__REQUEST__BODY_DETOKENIZE,
	.admin = 0,
	.exec = req_detokenize,
};
