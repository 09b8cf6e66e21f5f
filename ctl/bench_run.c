/* bench_run.c: phasectl bench's poll loop: send, read and time requests. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_http.h"
#include "util.h"

/* Open a connection to the daemon, or reuse an idle one. */
static struct phased_conn *
b_conn(struct bench *b, char *err, size_t errlen)
{
	struct phased_conn	*c;
	Phased__HelloReply	*hr = NULL;

	if (b->n_idle > 0)
		return (b->idle[--b->n_idle]);
	if ((c = phased_connect(b->ctl->socket, err, errlen)) == NULL)
		return (NULL);
	if (phased_hello(c, "phasectl-bench", &hr, err, errlen) != 0) {
		phased_close(c);
		return (NULL);
	}
	if (hr != NULL)
		phased__hello_reply__free_unpacked(hr, NULL);
	return (c);
}

/* A turn is answered: its conversation's history is its prompt and answer. */
static void
b_history(struct bench *b, struct b_req *r)
{
	uint32_t	k = r->stream, n = r->prompt_len + (uint32_t)r->n_tok;

	b->conv_hist[k] = xreallocarray(b->conv_hist[k], n ? n : 1,
	    sizeof **b->conv_hist);
	memcpy(b->conv_hist[k], r->ids, r->prompt_len * sizeof *r->ids);
	if (r->n_tok > 0)
		memcpy(b->conv_hist[k] + r->prompt_len, r->out_ids,
		    r->n_tok * sizeof *r->out_ids);
	b->conv_len[k] = n;
}

/* End a request: record why and when, and free its connection. */
static void
b_finish(struct bench *b, struct b_req *r, const char *finish,
    const char *error, int conn_ok)
{
	size_t	i;

	r->done = 1;
	r->done_ns = now_ns() - b->t0;
	if (r->done_ns > b->end_ns)
		b->end_ns = r->done_ns;
	r->finish = xstrdup(finish);
	if (error != NULL)
		r->error = xstrdup(error);
	if (r->http != NULL) {
		bh_close(r->http);
		r->http = NULL;
	} else if (conn_ok) {
		b->idle = xreallocarray(b->idle, b->n_idle + 1,
		    sizeof *b->idle);
		b->idle[b->n_idle++] = r->conn;
	} else if (r->conn != NULL)
		phased_close(r->conn);
	r->conn = NULL;
	for (i = 0; i < b->n_inflight; i++) {
		if (b->inflight[i] == r) {
			b->inflight[i] = b->inflight[--b->n_inflight];
			break;
		}
	}
	if (r->kind == BK_TURN) {
		b->chat_busy[r->stream] = 0;
		if (strcmp(finish, "error") == 0 || strcmp(finish, "cancelled") == 0)
			b->conv_turns[r->stream] = b->o->turns;	/* it ends */
		else
			b_history(b, r);
	} else if (r->kind == BK_CHAT) {
		b->chat_busy[r->stream] = 0;
		/* A failing chat would be restarted at once, forever. */
		if (strcmp(finish, "error") == 0)
			b->aborted = 1;
	} else if (r->kind == BK_LONG)
		b->longs_done++;
}

/* Send a request with a prompt window from the corpus. */
static void
b_send(struct bench *b, struct b_req *r)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__GenerateRequest	 gr = PHASED__GENERATE_REQUEST__INIT;
	int32_t			*ids;
	size_t			 i, start;
	char			 err[512];

	ids = xreallocarray(NULL, r->prompt_len, sizeof *ids);
	if (r->ids != NULL)
		memcpy(ids, r->ids, r->prompt_len * sizeof *ids);
	else {
		start = b_rand(b) % b->n_corpus;
		for (i = 0; i < r->prompt_len; i++)
			ids[i] = b->corpus[(start + i) % b->n_corpus];
	}
	gr.model = (char *)b->o->model;
	gr.prompt = (char *)"";
	gr.n_prompt_tokens = r->prompt_len;
	gr.prompt_tokens = ids;
	gr.has_add_bos = 1;
	gr.add_bos = 0;
	gr.has_max_tokens = 1;
	gr.max_tokens = r->output_len;
	gr.has_temperature = 1;
	gr.temperature = 0;
	req.body_case = PHASED__REQUEST__BODY_GENERATE;
	req.generate = &gr;
	r->send_ns = now_ns() - b->t0;	/* replaced once connected */
	b->inflight[b->n_inflight++] = r;
	if (r->kind == BK_CHAT || r->kind == BK_TURN)
		b->chat_busy[r->stream] = 1;
	else if (r->kind == BK_LONG)
		b->longs_sent++;
	if (b->o->url != NULL) {
		r->send_ns = now_ns() - b->t0;
		r->http = bh_send(b->o->url, b->o->model, ids, r->prompt_len,
		    r->output_len, err, sizeof err);
		if (r->http != NULL) {
			free(ids);
			return;
		}
	} else if ((r->conn = b_conn(b, err, sizeof err)) != NULL) {
		r->id = phased_next_id(r->conn);
		req.id = r->id;
		r->send_ns = now_ns() - b->t0;
		if (phased_send(r->conn, &req, err, sizeof err) == 0) {
			free(ids);
			return;
		}
	}
	/* Not sent: the daemon is unreachable, so send nothing more. */
	free(ids);
	b_finish(b, r, "error", err, 0);
	b->aborted = 1;
}

/* Record one token event. */
static void
b_token(struct bench *b, struct b_req *r, const Phased__TokenEvent *t,
    uint64_t at)
{
	if (r->n_tok == r->cap_tok) {
		r->cap_tok = r->cap_tok ? r->cap_tok * 2 : 64;
		r->tok_ns = xreallocarray(r->tok_ns, r->cap_tok,
		    sizeof *r->tok_ns);
		r->tok_us = xreallocarray(r->tok_us, r->cap_tok,
		    sizeof *r->tok_us);
		if (r->kind == BK_TURN)
			r->out_ids = xreallocarray(r->out_ids, r->cap_tok,
			    sizeof *r->out_ids);
	}
	if (r->kind == BK_TURN)
		r->out_ids[r->n_tok] = t->token_id;
	r->tok_ns[r->n_tok] = at;
	r->tok_us[r->n_tok] = t->t_us;
	r->n_tok++;
	b->out_tokens++;
}

/* Read what an HTTP server sent for a request and act on it. */
static void
b_read_http(struct bench *b, struct b_req *r)
{
	Phased__TokenEvent	 te = PHASED__TOKEN_EVENT__INIT;
	struct bh_result	 hr;
	uint64_t		 at;
	uint32_t		 i;

	bh_read(r->http, &hr);
	at = now_ns() - b->t0;
	/* No server times per token: the daemon's view is the client's. */
	te.t_us = (at - r->send_ns) / 1000;
	for (i = 0; i < hr.n_tokens; i++)
		b_token(b, r, &te, at);
	if (!hr.done)
		return;
	r->d_prompt_tokens = hr.prompt_tokens != 0 ? hr.prompt_tokens :
	    r->prompt_len;
	r->d_output_tokens = hr.output_tokens != 0 ? hr.output_tokens :
	    (uint32_t)r->n_tok;
	r->d_queue_ms = hr.queue_ms;
	r->d_prompt_ms = hr.prompt_ms;
	r->d_ttft_ms = hr.ttft_ms;
	r->d_e2e_ms = hr.e2e_ms;
	b_finish(b, r, hr.finish[0] != '\0' ? hr.finish : "stop",
	    hr.error[0] != '\0' ? hr.error : NULL, 1);
}

/* Read one frame for an in-flight request and act on it. */
static void
b_read(struct bench *b, struct b_req *r)
{
	Phased__Response	*resp;
	const Phased__Timings	*t;
	char			 err[512];
	uint64_t		 at;

	if (r->http != NULL) {
		b_read_http(b, r);
		return;
	}
	if (phased_recv(r->conn, &resp, err, sizeof err) != 0) {
		b_finish(b, r, "error", err, 0);
		return;
	}
	at = now_ns() - b->t0;
	if (resp->id != r->id) {
		if (resp->body_case == PHASED__RESPONSE__BODY_NOTICE &&
		    resp->notice->shutting_down) {
			b->aborted = 1;
			b_finish(b, r, "error", "daemon is shutting down", 0);
		}
		phased_response_free(resp);
		return;
	}
	switch (resp->body_case) {
	case PHASED__RESPONSE__BODY_TOKEN:
		b_token(b, r, resp->token, at);
		break;
	case PHASED__RESPONSE__BODY_DONE:
		t = resp->done->timings;
		r->d_prompt_tokens = t->prompt_tokens;
		r->d_output_tokens = t->output_tokens;
		r->d_queue_ms = t->queue_ms;
		r->d_prompt_ms = t->prompt_ms;
		r->d_ttft_ms = t->ttft_ms;
		r->d_e2e_ms = t->e2e_ms;
		r->d_cached_tokens = resp->done->has_cached_tokens ?
		    resp->done->cached_tokens : 0;
		if (strcmp(resp->done->finish_reason, "error") == 0) {
			snprintf(err, sizeof err, "generation failed: %s",
			    resp->done->error != NULL ? resp->done->error :
			    "no reason given");
			b_finish(b, r, "error", err, 1);
		} else
			b_finish(b, r, resp->done->finish_reason, NULL, 1);
		break;
	case PHASED__RESPONSE__BODY_ERROR:
		snprintf(err, sizeof err, "daemon error (%s): %s",
		    phased_error_name(resp->error->code), resp->error->message);
		b_finish(b, r, "error", err, 1);
		break;
	default:
		b_finish(b, r, "error", "unexpected reply", 0);
		break;
	}
	phased_response_free(resp);
}

/* Whether fd has a frame waiting now. */
static int
b_readable(int fd)
{
	struct pollfd	pfd = { .fd = fd, .events = POLLIN };

	return (poll(&pfd, 1, 0) > 0);
}

/* Print the one-line progress report. */
void
b_progress(struct bench *b, double now_s)
{
	size_t	i, done = 0, errors = 0;

	for (i = 0; i < b->n_reqs; i++) {
		if (b->reqs[i]->done) {
			done++;
			if (strcmp(b->reqs[i]->finish, "error") == 0)
				errors++;
		}
	}
	fprintf(stderr, "bench: %6.1fs sent %zu done %zu in flight %zu "
	    "output tokens %" PRIu64 " (%.1f/s) errors %zu\n", now_s,
	    b->n_reqs, done, b->n_inflight, b->out_tokens,
	    now_s > 0 ? b->out_tokens / now_s : 0.0, errors);
}

/*
 * Cancel the chats still decoding once the last long prompt is answered:
 * what they would add is decoding alone, which the scenario is not about.
 * Their tokens so far still count.
 */
static void
b_cancel_chats(struct bench *b)
{
	Phased__Request	 req = PHASED__REQUEST__INIT;
	Phased__Cancel	 cr = PHASED__CANCEL__INIT;
	struct b_req	*r;
	char		 err[512];
	size_t		 i;

	b->chats_cancelled = 1;
	for (i = 0; i < b->n_inflight; i++) {
		r = b->inflight[i];
		if (r->kind != BK_CHAT)
			continue;
		if (r->http != NULL) {
			/* Closing the connection cancels on the server. */
			r->cancelled = 1;
			b_finish(b, r, "cancelled", NULL, 1);
			i--;
			continue;
		}
		cr.target = r->id;
		req.id = phased_next_id(r->conn);
		req.body_case = PHASED__REQUEST__BODY_CANCEL;
		req.cancel = &cr;
		if (phased_send(r->conn, &req, err, sizeof err) == 0)
			r->cancelled = 1;
	}
}

/*
 * Send conversation k's next turn: its history (the first turn: a prompt
 * of --prompt-len tokens) plus a new user message of --chat-prompt-len.
 */
static void
b_send_turn(struct bench *b, uint32_t k)
{
	struct b_req	*r;
	uint32_t	 add, n, i;
	size_t		 start;

	add = b->conv_turns[k] == 0 ? b->o->prompt_len.lo :
	    b->o->chat_prompt_len;
	n = b->conv_len[k] + add;
	r = b_new(b, BK_TURN, k, n, b->o->output_len.lo);
	r->turn = b->conv_turns[k]++;
	r->ids = xreallocarray(NULL, n, sizeof *r->ids);
	if (b->conv_len[k] > 0)
		memcpy(r->ids, b->conv_hist[k], b->conv_len[k] *
		    sizeof *r->ids);
	start = b_rand(b) % b->n_corpus;
	for (i = 0; i < add; i++)
		r->ids[b->conv_len[k] + i] = b->corpus[(start + i) %
		    b->n_corpus];
	b_send(b, r);
}

/* Send whatever is due now; return seconds until the next send, or -1. */
static double
b_launch(struct bench *b, double now_s, double *next_arrival)
{
	struct b_opts	*o = b->o;
	struct b_req	*r;
	double		 due;
	uint32_t	 k;

	switch (o->mode) {
	case BM_CONCURRENCY:
		while (b->n_inflight < o->concurrency && !b->aborted &&
		    (o->requests == 0 || b->n_reqs < o->requests) &&
		    (o->duration == 0 || now_s < o->duration))
			b_send(b, b_new_normal(b));
		return (-1);
	case BM_RATE:
		while (!b->aborted && *next_arrival <= now_s &&
		    (o->requests == 0 || b->n_reqs < o->requests) &&
		    (o->duration == 0 || *next_arrival < o->duration) &&
		    b->n_inflight < B_MAX_INFLIGHT) {
			r = b_new_normal(b);
			r->arrival_s = *next_arrival;
			b_send(b, r);
			*next_arrival = b_next_arrival(b, *next_arrival);
		}
		if ((o->requests != 0 && b->n_reqs >= o->requests) ||
		    (o->duration != 0 && *next_arrival >= o->duration))
			return (-1);
		return (*next_arrival - now_s);
	case BM_MULTITURN:
		/* Closed loop: a conversation's next turn follows its answer. */
		for (k = 0; k < o->conversations && !b->aborted; k++)
			if (!b->chat_busy[k] && b->conv_turns[k] < o->turns)
				b_send_turn(b, k);
		return (-1);
	case BM_INTERFERENCE:
		if (b->aborted)
			return (-1);
		while (b->longs_sent < o->long_count &&
		    (due = (b->longs_sent + 1) * o->long_every) <= now_s) {
			r = b_new(b, BK_LONG, b->longs_sent,
			    o->long_prompt_len, o->long_output);
			r->arrival_s = due;
			b_send(b, r);
		}
		/* The chats keep decoding until every long prompt is done. */
		if (b->longs_done >= o->long_count) {
			if (!b->chats_cancelled)
				b_cancel_chats(b);
		} else {
			for (k = 0; k < o->chats; k++)
				if (!b->chat_busy[k])
					b_send(b, b_new(b, BK_CHAT, k,
					    o->chat_prompt_len,
					    o->chat_output));
		}
		if (b->longs_sent < o->long_count)
			return ((b->longs_sent + 1) * o->long_every - now_s);
		return (-1);
	}
	return (-1);
}

/* Run the workload until every request is done. */
void
b_run(struct bench *b)
{
	struct pollfd	*pfd;
	struct b_req	*snap[B_MAX_INFLIGHT];
	double		 now_s, wait, next_arrival = 0, next_progress = 1;
	size_t		 i, n;
	int		 timeout, frames;

	pfd = xcalloc(B_MAX_INFLIGHT, sizeof *pfd);
	b->t0 = now_ns();
	for (;;) {
		now_s = (now_ns() - b->t0) / 1e9;
		wait = b_launch(b, now_s, &next_arrival);
		if (b->n_inflight == 0 && wait < 0)
			break;
		if (now_s >= next_progress) {
			if (!b->o->quiet)
				b_progress(b, now_s);
			next_progress = floor(now_s) + 1;
		}
		if (wait < 0 || wait > next_progress - now_s)
			wait = next_progress - now_s;
		timeout = (int)ceil(wait * 1000);
		if (timeout < 0)
			timeout = 0;
		n = b->n_inflight;
		memcpy(snap, b->inflight, n * sizeof *snap);
		for (i = 0; i < n; i++) {
			pfd[i].fd = snap[i]->http != NULL ?
			    bh_fd(snap[i]->http) : phased_fd(snap[i]->conn);
			pfd[i].events = POLLIN;
			pfd[i].revents = 0;
		}
		if (poll(pfd, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			exit(ctl_fail(CTL_EUSAGE, "poll: %s", strerror(errno)));
		}
		for (i = 0; i < n; i++) {
			if (pfd[i].revents == 0)
				continue;
			/* Drain what is there so token times stay exact. */
			frames = 0;
			do {
				b_read(b, snap[i]);
			} while (!snap[i]->done && snap[i]->http == NULL &&
			    ++frames < B_FRAMES_PER_FD && b_readable(pfd[i].fd));
		}
	}
	free(pfd);
}
