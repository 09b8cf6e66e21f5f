/* cmd_chat.c: phasectl chat (interactive or one turn) and phasectl render. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasectl.h"
#include "strbuf.h"
#include "util.h"

#define CHAT_MAX_STOPS		8
#define CHAT_MAX_TURNS		2048

static const char chat_usage[] = "usage: phasectl chat NAME "
    "[--system TEXT] [-m MESSAGE] [--max-tokens N] [--temp T] [--top-k K] "
    "[--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] "
    "[--stop STR]... [--deadline-ms N] [--priority N] [--logprobs N]";
static const char render_usage[] = "usage: phasectl render NAME "
    "[--system TEXT] [--no-generation-prompt] MESSAGE...";

/* Set by SIGINT: cancel the answer being streamed. */
static volatile sig_atomic_t chat_interrupted;

/* SIGINT while chatting: remember it; the loops look. */
static void
on_sigint(int sig)
{
	(void)sig;
	chat_interrupted = 1;
}

/* Print one token event: text, a JSON line, or a log probability line. */
void
ctl_print_token(struct ctl *ctl, const Phased__TokenEvent *te, int logprobs)
{
	size_t	i;

	if (ctl->json) {
		printf("{\"token_id\":%d,\"text\":", te->token_id);
		json_strn(stdout, (const char *)te->text.data, te->text.len);
		printf(",\"t_ms\":%.3f", te->t_us / 1000.0);
		if (te->has_logprob) {
			printf(",\"logprob\":%.6f,\"top_logprobs\":[",
			    te->logprob);
			for (i = 0; i < te->n_top_logprobs; i++) {
				printf("%s{\"token_id\":%d,\"text\":", i ? "," :
				    "", te->top_logprobs[i]->token_id);
				json_strn(stdout, (const char *)
				    te->top_logprobs[i]->text.data,
				    te->top_logprobs[i]->text.len);
				printf(",\"logprob\":%.6f}",
				    te->top_logprobs[i]->logprob);
			}
			printf("]");
		}
		printf("}\n");
	} else if (logprobs && te->has_logprob) {
		printf("%d\t%.4f\t", te->token_id, te->logprob);
		json_strn(stdout, (const char *)te->text.data, te->text.len);
		for (i = 0; i < te->n_top_logprobs; i++) {
			printf("%s%d:", i ? " " : "\t",
			    te->top_logprobs[i]->token_id);
			json_strn(stdout, (const char *)
			    te->top_logprobs[i]->text.data,
			    te->top_logprobs[i]->text.len);
			printf(":%.4f", te->top_logprobs[i]->logprob);
		}
		printf("\n");
	} else if (te->text.len > 0)
		fwrite(te->text.data, 1, te->text.len, stdout);
	fflush(stdout);
}

/* Parse one of generate's sampling options into a chat request. */
static int
chat_option(const char *o, const char *v, Phased__ChatRequest *cr,
    int *logprobs)
{
	if (strcmp(o, "--max-tokens") == 0) {
		cr->has_max_tokens = 1;
		cr->max_tokens = (uint32_t)ctl_num(o, v, 1, 1 << 24);
	} else if (strcmp(o, "--temp") == 0) {
		cr->has_temperature = 1;
		cr->temperature = (float)ctl_num(o, v, 0, 100);
	} else if (strcmp(o, "--top-k") == 0) {
		cr->has_top_k = 1;
		cr->top_k = (uint32_t)ctl_num(o, v, 0, 1 << 24);
	} else if (strcmp(o, "--top-p") == 0) {
		cr->has_top_p = 1;
		cr->top_p = (float)ctl_num(o, v, 0, 1);
	} else if (strcmp(o, "--min-p") == 0) {
		cr->has_min_p = 1;
		cr->min_p = (float)ctl_num(o, v, 0, 1);
	} else if (strcmp(o, "--repeat-penalty") == 0) {
		cr->has_repeat_penalty = 1;
		cr->repeat_penalty = (float)ctl_num(o, v, 0.01, 100);
	} else if (strcmp(o, "--seed") == 0) {
		cr->has_seed = 1;
		cr->seed = (uint64_t)ctl_num(o, v, 0, 9e15);
	} else if (strcmp(o, "--deadline-ms") == 0) {
		cr->has_deadline_ms = 1;
		cr->deadline_ms = (uint32_t)ctl_num(o, v, 1, 86400000);
	} else if (strcmp(o, "--priority") == 0) {
		cr->has_priority = 1;
		cr->priority = (int32_t)ctl_num(o, v, -1000, 1000);
	} else if (strcmp(o, "--logprobs") == 0) {
		cr->has_logprobs = cr->logprobs = 1;
		cr->has_top_logprobs = 1;
		cr->top_logprobs = (uint32_t)ctl_num(o, v, 0, 1000);
		*logprobs = 1;
	} else
		return (-1);
	return (0);
}

/* Send a Cancel for the request being streamed. */
static void
send_cancel(struct ctl *ctl, uint64_t target)
{
	Phased__Request	 req = PHASED__REQUEST__INIT;
	Phased__Cancel	 cl = PHASED__CANCEL__INIT;
	char		 err[256];

	cl.target = target;
	req.body_case = PHASED__REQUEST__BODY_CANCEL;
	req.cancel = &cl;
	req.id = phased_next_id(ctl->conn);
	if (phased_send(ctl->conn, &req, err, sizeof err) != 0)
		ctl_fail(0, "%s", err);
}

/*
 * Send one chat request and stream its answer; the answer's text goes to
 * answer.  SIGINT cancels it.  Returns an exit status.
 */
static int
chat_turn(struct ctl *ctl, Phased__ChatRequest *cr, int logprobs,
    struct strbuf *answer)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__Response	*r;
	struct pollfd		 pfd;
	char			 err[512];
	int			 rc = CTL_OK, ended = 0, cancelled = 0;

	req.body_case = PHASED__REQUEST__BODY_CHAT;
	req.chat = cr;
	req.id = phased_next_id(ctl_conn(ctl));
	chat_interrupted = 0;
	if (phased_send(ctl->conn, &req, err, sizeof err) != 0)
		return (ctl_fail(CTL_EUSAGE, "%s", err));
	while (!ended) {
		/* The signal may have come during a read, not the poll. */
		if (chat_interrupted && !cancelled) {
			send_cancel(ctl, req.id);
			cancelled = 1;
		}
		pfd.fd = phased_fd(ctl->conn);
		pfd.events = POLLIN;
		if (poll(&pfd, 1, -1) == -1) {
			if (errno != EINTR)
				return (ctl_fail(CTL_EUSAGE, "poll: %s",
				    strerror(errno)));
			continue;
		}
		if (phased_recv(ctl->conn, &r, err, sizeof err) != 0)
			return (ctl_fail(CTL_EUSAGE, "%s", err));
		if (r->id != req.id) {
			if (r->body_case == PHASED__RESPONSE__BODY_NOTICE &&
			    r->notice->shutting_down) {
				phased_response_free(r);
				return (ctl_fail(CTL_EUSAGE, "daemon is shutting "
				    "down"));
			}
			phased_response_free(r);
			continue;
		}
		switch (r->body_case) {
		case PHASED__RESPONSE__BODY_TOKEN:
			ctl_print_token(ctl, r->token, logprobs);
			strbuf_add(answer, r->token->text.data,
			    r->token->text.len);
			break;
		case PHASED__RESPONSE__BODY_DONE:
			ended = 1;
			if (ctl->json)
				ctl_print_done_json(r->done);
			else if (!logprobs)
				printf("\n");
			if (strcmp(r->done->finish_reason, "error") == 0) {
				ctl_fail(0, "chat failed: %s",
				    r->done->error != NULL ? r->done->error :
				    "unknown error");
				rc = CTL_EDAEMON;
			}
			break;
		default:
			ended = 1;
			if ((rc = ctl_check_error(ctl, r)) == -1)
				rc = ctl_fail(CTL_EDAEMON, "unexpected reply");
			break;
		}
		phased_response_free(r);
	}
	fflush(stdout);
	return (rc);
}

/* Append a message to the conversation. */
static void
add_message(Phased__ChatRequest *cr, Phased__ChatMessage *store,
    const char *role, char *content)
{
	Phased__ChatMessage	*m = &store[cr->n_messages];

	phased__chat_message__init(m);
	m->role = (char *)role;
	m->content = content;
	cr->messages[cr->n_messages++] = m;
}

/* Free the text of the conversation's answers and typed lines. */
static void
free_turns(Phased__ChatRequest *cr, int first_owned)
{
	size_t	i;

	for (i = (size_t)first_owned; i < cr->n_messages; i++)
		free(cr->messages[i]->content);
}

/* phasectl chat NAME [options]: a conversation on the terminal or one turn. */
static int
cmd_chat(struct ctl *ctl, int argc, char **argv)
{
	Phased__ChatRequest	 cr = PHASED__CHAT_REQUEST__INIT;
	Phased__ChatMessage	*store;
	struct sigaction	 sa;
	struct strbuf		 answer = STRBUF_INIT;
	char			*stops[CHAT_MAX_STOPS], *line = NULL;
	const char		*sys = NULL, *msg = NULL, *o;
	size_t			 cap = 0;
	ssize_t			 n;
	int			 i, rc = CTL_OK, n_stops = 0, logprobs = 0;
	int			 owned, tty;

	if (argc < 1 || strncmp(argv[0], "-", 1) == 0)
		return (ctl_fail(CTL_EUSAGE, "%s", chat_usage));
	cr.model = argv[0];
	for (i = 1; i < argc; i++) {
		o = argv[i];
		if (i + 1 >= argc)
			return (ctl_fail(CTL_EUSAGE, "%s needs a value\n%s", o,
			    chat_usage));
		if (strcmp(o, "--system") == 0)
			sys = argv[++i];
		else if (strcmp(o, "-m") == 0 || strcmp(o, "--message") == 0)
			msg = argv[++i];
		else if (strcmp(o, "--stop") == 0) {
			if (n_stops == CHAT_MAX_STOPS)
				return (ctl_fail(CTL_EUSAGE, "more than %d "
				    "--stop strings", CHAT_MAX_STOPS));
			stops[n_stops++] = argv[++i];
		} else if (chat_option(o, argv[i + 1], &cr, &logprobs) == 0)
			i++;
		else
			return (ctl_fail(CTL_EUSAGE, "unknown option %s\n%s", o,
			    chat_usage));
	}
	cr.stop = stops;
	cr.n_stop = (size_t)n_stops;
	store = xcalloc(CHAT_MAX_TURNS + 2, sizeof *store);
	cr.messages = xcalloc(CHAT_MAX_TURNS + 2, sizeof *cr.messages);
	if (sys != NULL)
		add_message(&cr, store, "system", (char *)sys);
	owned = (int)cr.n_messages;
	if (msg != NULL) {
		add_message(&cr, store, "user", (char *)msg);
		rc = chat_turn(ctl, &cr, logprobs, &answer);
		strbuf_free(&answer);
		goto out;
	}

	/* Interactive: one user turn per line until end of input. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	tty = isatty(STDIN_FILENO);
	for (;;) {
		if (tty) {
			fputs("> ", stdout);
			fflush(stdout);
		}
		chat_interrupted = 0;
		if ((n = getline(&line, &cap, stdin)) == -1) {
			if (errno == EINTR && chat_interrupted) {
				clearerr(stdin);
				errno = 0;
				fputs("\n", stdout);
				continue;
			}
			break;
		}
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (n == 0)
			continue;
		if (cr.n_messages + 2 > CHAT_MAX_TURNS) {
			rc = ctl_fail(CTL_EUSAGE, "more than %d messages in "
			    "one conversation", CHAT_MAX_TURNS);
			break;
		}
		add_message(&cr, store, "user", xstrdup(line));
		strbuf_reset(&answer);
		if ((rc = chat_turn(ctl, &cr, logprobs, &answer)) == CTL_EUSAGE)
			break;
		if (rc == CTL_EDAEMON) {
			/* Refused or failed: forget the turn, keep talking. */
			free(cr.messages[--cr.n_messages]->content);
			continue;
		}
		/* What was shown, even if cancelled, is the answer kept. */
		add_message(&cr, store, "assistant", strbuf_detach(&answer,
		    NULL));
	}
	if (tty)
		fputs("\n", stdout);
	free(line);
	strbuf_free(&answer);
	free_turns(&cr, owned);
out:
	free(cr.messages);
	free(store);
	return (rc);
}

/* phasectl render NAME [--system TEXT] MESSAGE...: user, assistant, ... */
static int
cmd_render(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__RenderRequest	 rr = PHASED__RENDER_REQUEST__INIT;
	Phased__ChatMessage	*store, **ptrs;
	Phased__Response	*r;
	int			 i, rc, k = 0, turn = 0;
	size_t			 j;

	if (argc < 1 || *argv[0] == '-')
		return (ctl_fail(CTL_EUSAGE, "%s", render_usage));
	rr.model = argv[0];
	store = xcalloc((size_t)argc + 1, sizeof *store);
	ptrs = xcalloc((size_t)argc + 1, sizeof *ptrs);
	for (i = 1; i < argc; i++) {
		phased__chat_message__init(&store[k]);
		if (strcmp(argv[i], "--system") == 0 && i + 1 < argc) {
			store[k].role = (char *)"system";
			store[k].content = argv[++i];
		} else if (strcmp(argv[i], "--no-generation-prompt") == 0) {
			rr.has_add_generation_prompt = 1;
			rr.add_generation_prompt = 0;
			continue;
		} else {
			store[k].role = (char *)(turn++ % 2 == 0 ? "user" :
			    "assistant");
			store[k].content = argv[i];
		}
		ptrs[k] = &store[k];
		k++;
	}
	rr.messages = ptrs;
	rr.n_messages = (size_t)k;
	req.body_case = PHASED__REQUEST__BODY_RENDER;
	req.render = &rr;
	r = ctl_call(ctl, &req);
	free(ptrs);
	free(store);
	if ((rc = ctl_check_error(ctl, r)) != -1) {
		phased_response_free(r);
		return (rc);
	}
	if (r->body_case != PHASED__RESPONSE__BODY_RENDER) {
		phased_response_free(r);
		return (ctl_fail(CTL_EDAEMON, "unexpected reply"));
	}
	if (ctl->json) {
		printf("{\"chat_template\":");
		json_str(stdout, r->render->chat_template);
		printf(",\"text\":");
		json_str(stdout, r->render->text);
		printf(",\"tokens\":[");
		for (j = 0; j < r->render->n_tokens; j++)
			printf("%s%d", j ? "," : "", r->render->tokens[j]);
		printf("]}\n");
	} else
		fputs(r->render->text, stdout);
	phased_response_free(r);
	return (CTL_OK);
}

const struct ctl_cmd ctl_chat_cmd = {
	.words = { "chat" },
	.args = "NAME [--system TEXT] [-m MESSAGE] [--max-tokens N] [--temp T] "
	    "[--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] "
	    "[--seed S] [--stop STR]... [--logprobs N]",
	.exec = cmd_chat,
};

const struct ctl_cmd ctl_render_cmd = {
	.words = { "render" },
	.args = "NAME [--system TEXT] [--no-generation-prompt] MESSAGE...",
	.exec = cmd_render,
};
