/* bench_http.h: phasectl bench's transport to OpenAI-compatible servers. */
#ifndef PHASECTL_BENCH_HTTP_H
#define PHASECTL_BENCH_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct bh_conn;

/* What one read of a streaming completion found. */
struct bh_result {
	uint32_t	 n_tokens;	/* text chunks (tokens) that arrived */
	int		 done;		/* the stream ended ([DONE] or close) */
	char		 finish[32];	/* finish_reason, or "error" */
	char		 error[512];
	uint32_t	 prompt_tokens;	/* from usage, when sent */
	uint32_t	 output_tokens;
	double		 queue_ms, prompt_ms, ttft_ms, e2e_ms; /* timings, if any */
};

/* Check a base URL (http://HOST:PORT[/PREFIX]); -1 with err. */
int	 bh_url_check(const char *url, char *err, size_t errlen);
/* Whether the server at url lists model in GET /models; -1 with err. */
int	 bh_model_check(const char *url, const char *model, char *err,
	    size_t errlen);
/*
 * Send a streaming POST /completions with token ids (greedy, max_tokens,
 * usage asked for); NULL with err when the server cannot be reached.
 */
struct bh_conn *bh_send(const char *url, const char *model,
	    const int32_t *ids, size_t n, uint32_t max_tokens, char *err,
	    size_t errlen);
/* The socket to poll for input. */
int	 bh_fd(struct bh_conn *);
/* Read what is there without blocking and parse whole events. */
void	 bh_read(struct bh_conn *, struct bh_result *);
/* Close (cancels the request on servers that notice). */
void	 bh_close(struct bh_conn *);

#endif
