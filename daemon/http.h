/* http.h: the HTTP front end: OpenAI and Ollama APIs on evhttp. */
#ifndef PHASED_HTTP_H
#define PHASED_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine.h"
#include "gen.h"

struct daemon;
struct evhttp_request;
struct instance;
struct chat_message;
struct strbuf;

/* Bind the Unix socket and the TCP port of the configuration. */
int	http_listen(struct daemon *, char **cause);
/* Start serving on the daemon's event base. */
void	http_start(struct daemon *);
/* Stop accepting; requests from now on get 503. */
void	http_shutdown(void);
/* Close everything (after the engines are gone). */
void	http_stop(void);
/* Whether HTTP generations are still running. */
int	http_busy(void);

/* --- Inside the front end ----------------------------------------------- */

/* Who sent a request. */
struct http_peer {
	int	tcp;		/* 0: the Unix socket */
	int	admin;		/* may load, unload, change keep-alive */
	uint32_t uid;		/* SO_PEERCRED; PHASED_UID_NETWORK over TCP */
};

/* Send a JSON reply and drop the reference to body. */
void	http_reply_json(struct evhttp_request *, int status, json_t *body);
/*
 * Send an error as {"error": {"message", "type", "param", "code"}}, which
 * the OpenAI and the Ollama clients both read (Ollama's "error" string is
 * the message when style is HTTP_ERR_OLLAMA).  param may be NULL.
 */
enum http_err_style { HTTP_ERR_OPENAI, HTTP_ERR_OLLAMA };
void	http_error(struct evhttp_request *, enum http_err_style, int status,
	    const char *param, const char *fmt, ...)
	    __attribute__((format(printf, 5, 6)));
/* The HTTP status for a Phased__ErrorCode. */
int	http_status_of(int code);

/* The API a generation answers in. */
enum hgen_api {
	HAPI_OAI_COMPLETION,	/* POST /v1/completions */
	HAPI_OAI_CHAT,		/* POST /v1/chat/completions */
	HAPI_OLLAMA_GENERATE,	/* POST /api/generate */
	HAPI_OLLAMA_CHAT	/* POST /api/chat */
};

/* One generation requested over HTTP. */
struct hgen {
	struct gen		 g;		/* first: the engine's owner */
	struct evhttp_request	*req;		/* NULL once the client left */
	enum hgen_api		 api;
	struct http_peer	 peer;
	char			*model;
	char			*prompt;	/* text; NULL when tokens given */
	int32_t			*tokens;	/* a prompt of token ids */
	size_t			 n_tokens;
	json_t			*messages;	/* chat */
	int			 raw;		/* Ollama raw: no template */
	struct engine_gen	 eg;		/* sampling, limits, stops */
	int			 n_own_stops;	/* stops[] we allocated */
	int			 stream;
	int			 include_usage;
	int			 echo;
	int			 logprobs;	/* report log probabilities */
	int64_t			 keep_alive_ms;	/* Ollama keep_alive */
	int			 has_keep_alive;
	char			 id[40];	/* cmpl-..., chatcmpl-... */
	uint64_t		 created;	/* Unix seconds */
	uint64_t		 start_ns;
	uint64_t		 load_ns;	/* waiting for the model */
	uint32_t		 prompt_tokens;
	uint32_t		 output_tokens;
	uint32_t		 cached_tokens;	/* from the prefix cache */
	int			 started;	/* the stream's head is sent */
	int			 submitted;
	int			 gone;		/* the client went away */
	int			 load_only;	/* Ollama: empty prompt */
	int32_t			*prompt_ids;	/* as submitted */
	size_t			 n_prompt_ids;
	int32_t			*out_tokens;	/* for Ollama's context */
	size_t			 n_out, cap_out;
	uint64_t		 last_write_ns;
	struct strbuf		*text;		/* output so far */
	json_t			*lp_content;	/* logprobs per token */
	int			 lp_fresh;	/* the last token added one */
	char			*stop_hit;
	struct hgen		*next_wait;	/* waiting for a model load */
	struct hgen		*prev_live, *next_live;
};

/* Start a parsed generation: find or load the model and submit. */
void	hgen_run(struct hgen *);
/* Free a generation that was never submitted. */
void	hgen_free(struct hgen *);
/* A new generation for a request. */
struct hgen *hgen_new(struct evhttp_request *, enum hgen_api,
	    const struct http_peer *);
/* Write one piece of a streamed reply (SSE or NDJSON). */
void	hgen_write(struct hgen *, const char *, size_t);
/* Begin the streamed reply with the content type of the API. */
void	hgen_stream_head(struct hgen *);

/* Reading JSON fields, each naming the field on error (-1, *cause). */
int	hj_string(json_t *, const char *key, const char **out, char **cause);
int	hj_bool(json_t *, const char *key, int *out, char **cause);
int	hj_number(json_t *, const char *key, double lo, double hi,
	    double *out, int *given, char **cause);
int	hj_int(json_t *, const char *key, long long lo, long long hi,
	    long long *out, int *given, char **cause);
/* stop: a string or an array of strings, into the engine's stops. */
int	hj_stops(json_t *, const char *key, struct engine_gen *, char **cause);
/* "priority": -1000..1000, lower first (as vLLM's), into hg's request. */
int	hj_priority(json_t *, struct hgen *, char **cause);
/* A keep_alive value: a duration string or seconds. */
int	hj_keep_alive(json_t *, const char *key, int64_t *ms, int *given,
	    char **cause);

/* Parse the body of a request as a JSON object; NULL after an error reply. */
json_t	*http_body_object(struct evhttp_request *, enum http_err_style);
/* Parse bytes as a JSON object; NULL and *cause.  No daemon needed. */
json_t	*http_json_object(const char *buf, size_t len, char **cause);
/* Read an OpenAI completion / chat body into hg; -1 and *cause. */
int	http_oai_completion_parse(json_t *o, struct hgen *hg, char **cause);
int	http_oai_chat_parse(json_t *o, struct hgen *hg, char **cause);
/* Read an Ollama generate / chat body into hg; -1 and *cause. */
int	http_ollama_generate_parse(json_t *o, struct hgen *hg, char **cause);
int	http_ollama_chat_parse(json_t *o, struct hgen *hg, char **cause);

/* http_openai.c */
void	http_oai_completions(struct evhttp_request *, const struct http_peer *);
void	http_oai_chat(struct evhttp_request *, const struct http_peer *);
void	http_oai_models(struct evhttp_request *, const struct http_peer *);
extern const struct hgen_fmt http_oai_fmt;
/* http_ollama.c */
void	http_ollama_generate(struct evhttp_request *, const struct http_peer *);
void	http_ollama_chat(struct evhttp_request *, const struct http_peer *);
void	http_ollama_tags(struct evhttp_request *, const struct http_peer *);
void	http_ollama_ps(struct evhttp_request *, const struct http_peer *);
void	http_ollama_show(struct evhttp_request *, const struct http_peer *);
void	http_ollama_version(struct evhttp_request *, const struct http_peer *);
extern const struct hgen_fmt http_ollama_fmt;

/* How one API words a generation's stream and its final reply. */
struct hgen_fmt {
	/* The stream was submitted: send what comes first. */
	void	(*start)(struct hgen *);
	/* A piece of output text (and its token) for a streamed reply. */
	void	(*delta)(struct hgen *, const char *text, size_t len,
		    const struct engine_event *);
	/* The end: the last chunks of a stream or the whole reply. */
	void	(*done)(struct hgen *, const struct engine_event *);
	/* A keep-alive while nothing else is sent; NULL: none. */
	void	(*keepalive)(struct hgen *);
};

/* Answer an Ollama load or unload (empty prompt) with done_reason. */
void	http_ollama_load_reply(struct hgen *, const char *reason);
/* http_gen.c, for http.c */
void	http_gen_model_loaded(const char *name, const char *err);
void	http_gen_tick(void);
void	http_gen_shutdown(void);

/* http_logprobs.c: logprobs / top_logprobs of the OpenAI API. */
int	hj_logprobs(json_t *, struct hgen *, char **cause);
/* Record a token's log probabilities (when asked for). */
void	 http_logprobs_add(struct hgen *, const struct engine_event *);
/* The logprobs object of the last token (streaming), or NULL. */
json_t	*http_logprobs_last(struct hgen *);
/* The logprobs object of the whole reply, or NULL. */
json_t	*http_logprobs_final(struct hgen *);

/* Timings of a finished request as a JSON object (the extension). */
json_t	*http_timings(const struct reqtime_summary *);
/* The finish reason as the OpenAI API names it. */
const char *http_oai_finish(enum finish_reason);

#endif
