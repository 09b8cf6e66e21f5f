/*
 * bench_http.c: phasectl bench over HTTP.  One connection per request
 * carries a streaming POST /completions with the prompt as token ids;
 * the server-sent events are parsed as they arrive (chunked transfer
 * decoded by hand, the JSON by jansson) and each text chunk counts as a
 * token, which is how phased, llama-server and vLLM stream.  The API key,
 * when the server needs one, comes from OPENAI_API_KEY.
 */
#include "config.h"

#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_http.h"
#include "strbuf.h"
#include "util.h"

#define BH_MAX_RESPONSE	(64U << 20)	/* a reply may not grow past this */

struct bh_conn {
	int		 fd;
	struct strbuf	 in;		/* raw bytes not yet consumed */
	struct strbuf	 body;		/* decoded body not yet parsed */
	int		 have_head;
	int		 status;
	int		 chunked;
	long long	 chunk_left;	/* -1: at a chunk-size line */
	int		 eof;
	int		 done;
};

struct bh_url {
	char	host[256];
	char	port[16];
	char	prefix[512];
};

/* Split http://HOST[:PORT][/PREFIX]. */
static int
url_parse(const char *url, struct bh_url *u, char *err, size_t errlen)
{
	const char	*p, *slash, *colon;
	size_t		 hl;

	if (strncmp(url, "http://", 7) != 0) {
		snprintf(err, errlen, "url '%s' must start with http:// "
		    "(https is not supported)", url);
		return (-1);
	}
	p = url + 7;
	slash = strchr(p, '/');
	if (slash == NULL)
		slash = p + strlen(p);
	colon = memchr(p, ':', (size_t)(slash - p));
	hl = (size_t)((colon != NULL ? colon : slash) - p);
	if (hl == 0 || hl >= sizeof u->host) {
		snprintf(err, errlen, "url '%s' has no host", url);
		return (-1);
	}
	memcpy(u->host, p, hl);
	u->host[hl] = '\0';
	if (colon != NULL) {
		if ((size_t)(slash - colon - 1) >= sizeof u->port ||
		    slash == colon + 1) {
			snprintf(err, errlen, "url '%s' has a bad port", url);
			return (-1);
		}
		memcpy(u->port, colon + 1, (size_t)(slash - colon - 1));
		u->port[slash - colon - 1] = '\0';
	} else
		snprintf(u->port, sizeof u->port, "80");
	snprintf(u->prefix, sizeof u->prefix, "%s", slash);
	while (u->prefix[0] != '\0' && u->prefix[strlen(u->prefix) - 1] == '/')
		u->prefix[strlen(u->prefix) - 1] = '\0';
	return (0);
}

/* Check a base URL; -1 with err. */
int
bh_url_check(const char *url, char *err, size_t errlen)
{
	struct bh_url	u;

	return (url_parse(url, &u, err, errlen));
}

/* Connect to the server (blocking), then switch to non-blocking. */
static int
url_connect(const struct bh_url *u, char *err, size_t errlen)
{
	struct addrinfo	 hints, *res, *ai;
	int		 fd = -1, e, on = 1;

	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	if ((e = getaddrinfo(u->host, u->port, &hints, &res)) != 0) {
		snprintf(err, errlen, "%s:%s: %s", u->host, u->port,
		    gai_strerror(e));
		return (-1);
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd == -1)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
		errno = e;
	}
	if (fd == -1)
		snprintf(err, errlen, "connect %s:%s: %s", u->host, u->port,
		    strerror(errno));
	else
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
	freeaddrinfo(res);
	return (fd);
}

/* Write all of s; -1 with err. */
static int
write_all(int fd, const char *s, size_t len, char *err, size_t errlen)
{
	ssize_t	n;

	while (len > 0) {
		if ((n = write(fd, s, len)) == -1) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "write: %s", strerror(errno));
			return (-1);
		}
		s += n;
		len -= (size_t)n;
	}
	return (0);
}

/* Send one request (with a JSON body or none) on a new connection. */
static struct bh_conn *
request(const char *url, const char *method, const char *path,
    const char *body, char *err, size_t errlen)
{
	struct bh_url	 u;
	struct bh_conn	*c;
	struct strbuf	 req;
	const char	*key = getenv("OPENAI_API_KEY");
	int		 fd, rc;

	if (url_parse(url, &u, err, errlen) != 0 ||
	    (fd = url_connect(&u, err, errlen)) == -1)
		return (NULL);
	strbuf_init(&req);
	strbuf_printf(&req, "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\n"
	    "Connection: close\r\nAccept: text/event-stream, application/json"
	    "\r\n", method, u.prefix, path, u.host, u.port);
	if (key != NULL && *key != '\0')
		strbuf_printf(&req, "Authorization: Bearer %s\r\n", key);
	if (body != NULL)
		strbuf_printf(&req, "Content-Type: application/json\r\n"
		    "Content-Length: %zu\r\n", strlen(body));
	strbuf_adds(&req, "\r\n");
	if (body != NULL)
		strbuf_adds(&req, body);
	rc = write_all(fd, strbuf_str(&req), req.len, err, errlen);
	strbuf_free(&req);
	if (rc != 0) {
		close(fd);
		return (NULL);
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	c = xcalloc(1, sizeof *c);
	c->fd = fd;
	c->chunk_left = -1;
	strbuf_init(&c->in);
	strbuf_init(&c->body);
	return (c);
}

/* Drop the first n bytes of a buffer. */
static void
consume(struct strbuf *sb, size_t n)
{
	if (n == 0)
		return;
	memmove(sb->buf, sb->buf + n, sb->len - n);
	sb->len -= n;
	sb->buf[sb->len] = '\0';
}

/* Parse the status line and headers once they are all there. */
static int
parse_head(struct bh_conn *c)
{
	char	*end, *line, *next;

	if ((end = strstr(strbuf_str(&c->in), "\r\n\r\n")) == NULL)
		return (0);
	*end = '\0';
	if (sscanf(c->in.buf, "HTTP/%*d.%*d %d", &c->status) != 1)
		c->status = -1;
	for (line = strchr(c->in.buf, '\n'); line != NULL; line = next) {
		line++;
		next = strchr(line, '\n');
		if (strncasecmp(line, "Transfer-Encoding:", 18) == 0 &&
		    strcasestr(line, "chunked") != NULL)
			c->chunked = 1;
	}
	consume(&c->in, (size_t)(end - c->in.buf) + 4);
	c->have_head = 1;
	return (1);
}

/* Move decoded body bytes from in to body (chunked or not). */
static void
decode_body(struct bh_conn *c)
{
	char		*crlf, *end;
	long long	 n;

	if (!c->chunked) {
		strbuf_add(&c->body, c->in.buf, c->in.len);
		consume(&c->in, c->in.len);
		return;
	}
	for (;;) {
		if (c->chunk_left < 0) {
			if ((crlf = strstr(strbuf_str(&c->in), "\r\n")) == NULL)
				return;
			n = strtoll(c->in.buf, &end, 16);
			if (end == c->in.buf || n < 0) {
				c->eof = 1;	/* malformed: stop reading */
				return;
			}
			consume(&c->in, (size_t)(crlf - c->in.buf) + 2);
			if (n == 0) {
				c->eof = 1;
				return;
			}
			c->chunk_left = n;
		}
		if (c->in.len < (size_t)c->chunk_left + 2)
			return;
		strbuf_add(&c->body, c->in.buf, (size_t)c->chunk_left);
		consume(&c->in, (size_t)c->chunk_left + 2);
		c->chunk_left = -1;
	}
}

/* Read what the socket has now; 0 at EOF or error, else 1. */
static int
fill(struct bh_conn *c)
{
	char	buf[65536];
	ssize_t	n;

	for (;;) {
		n = read(c->fd, buf, sizeof buf);
		if (n > 0) {
			strbuf_add(&c->in, buf, (size_t)n);
			if (c->in.len > BH_MAX_RESPONSE)
				return (0);
			continue;
		}
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return (1);
		return (0);
	}
}

/* The error message of a JSON error body, or the body itself. */
static void
error_text(const char *body, size_t len, char *out, size_t outlen)
{
	json_t		*o, *e;
	const char	*m = NULL;

	o = json_loadb(body, len, 0, NULL);
	e = json_object_get(o, "error");
	if (json_is_string(e))
		m = json_string_value(e);
	else if (json_is_string(json_object_get(e, "message")))
		m = json_string_value(json_object_get(e, "message"));
	snprintf(out, outlen, "%.*s", m != NULL ? (int)strlen(m) :
	    (int)(len > 300 ? 300 : len), m != NULL ? m : body);
	json_decref(o);
}

/* A number of a JSON object, 0 when absent. */
static double
num(json_t *o, const char *k)
{
	json_t	*v = json_object_get(o, k);

	return (json_is_number(v) ? json_number_value(v) : 0);
}

/* Act on one SSE event's data. */
static void
sse_event(struct bh_conn *c, const char *data, struct bh_result *r)
{
	json_t		*o, *ch, *u, *t, *fr;
	const char	*text;

	if (strcmp(data, "[DONE]") == 0) {
		c->done = 1;
		return;
	}
	if ((o = json_loads(data, 0, NULL)) == NULL)
		return;
	if (json_object_get(o, "error") != NULL) {
		snprintf(r->finish, sizeof r->finish, "error");
		error_text(data, strlen(data), r->error, sizeof r->error);
	}
	ch = json_array_get(json_object_get(o, "choices"), 0);
	if (ch != NULL) {
		text = json_string_value(json_object_get(ch, "text"));
		if (text != NULL && *text != '\0')
			r->n_tokens++;
		fr = json_object_get(ch, "finish_reason");
		if (json_is_string(fr) && strcmp(r->finish, "error") != 0)
			snprintf(r->finish, sizeof r->finish, "%s",
			    json_string_value(fr));
	}
	if (json_is_object(u = json_object_get(o, "usage"))) {
		r->prompt_tokens = (uint32_t)num(u, "prompt_tokens");
		r->output_tokens = (uint32_t)num(u, "completion_tokens");
	}
	if (json_is_object(t = json_object_get(o, "timings"))) {
		r->queue_ms = num(t, "queue_ms");
		r->prompt_ms = num(t, "prompt_ms");
		r->ttft_ms = num(t, "ttft_ms");
		r->e2e_ms = num(t, "e2e_ms");
	}
	json_decref(o);
}

/* Read what is there without blocking and parse whole events. */
void
bh_read(struct bh_conn *c, struct bh_result *r)
{
	char	*sep, *line, *next;
	size_t	 n;

	memset(r, 0, sizeof *r);
	if (!fill(c))
		c->eof = 1;
	if (!c->have_head && !parse_head(c)) {
		if (c->eof) {
			r->done = 1;
			snprintf(r->finish, sizeof r->finish, "error");
			snprintf(r->error, sizeof r->error, "connection closed "
			    "before a reply");
		}
		return;
	}
	decode_body(c);
	if (c->status != 200) {
		if (!c->eof)
			return;
		r->done = 1;
		snprintf(r->finish, sizeof r->finish, "error");
		n = (size_t)snprintf(r->error, sizeof r->error, "HTTP %d: ",
		    c->status);
		if (n < sizeof r->error)
			error_text(strbuf_str(&c->body), c->body.len,
			    r->error + n, sizeof r->error - n);
		return;
	}
	while ((sep = strstr(strbuf_str(&c->body), "\n\n")) != NULL) {
		*sep = '\0';
		for (line = c->body.buf; line != NULL; line = next) {
			if ((next = strchr(line, '\n')) != NULL)
				*next++ = '\0';
			if (*line != '\0' && line[strlen(line) - 1] == '\r')
				line[strlen(line) - 1] = '\0';
			if (strncmp(line, "data:", 5) == 0)
				sse_event(c, line + 5 + (line[5] == ' '), r);
		}
		consume(&c->body, (size_t)(sep - c->body.buf) + 2);
	}
	if (c->done || c->eof) {
		r->done = 1;
		if (r->finish[0] == '\0' && !c->done) {
			snprintf(r->finish, sizeof r->finish, "error");
			snprintf(r->error, sizeof r->error, "the stream ended "
			    "without data: [DONE]");
		}
	}
}

/* The socket to poll for input. */
int
bh_fd(struct bh_conn *c)
{
	return (c->fd);
}

/* Close (cancels the request on servers that notice). */
void
bh_close(struct bh_conn *c)
{
	if (c == NULL)
		return;
	close(c->fd);
	strbuf_free(&c->in);
	strbuf_free(&c->body);
	free(c);
}

/* Send a streaming POST /completions with token ids. */
struct bh_conn *
bh_send(const char *url, const char *model, const int32_t *ids, size_t n,
    uint32_t max_tokens, char *err, size_t errlen)
{
	struct bh_conn	*c;
	json_t		*o, *p;
	char		*body;
	size_t		 i;

	p = json_array();
	for (i = 0; i < n; i++)
		json_array_append_new(p, json_integer(ids[i]));
	o = json_pack("{ss,so,sI,sf,sb,s{sb}}", "model", model, "prompt", p,
	    "max_tokens", (json_int_t)max_tokens, "temperature", 0.0,
	    "stream", 1, "stream_options", "include_usage", 1);
	body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	c = request(url, "POST", "/completions", body, err, errlen);
	free(body);
	return (c);
}

/* Whether the server at url lists model in GET /models. */
int
bh_model_check(const char *url, const char *model, char *err, size_t errlen)
{
	struct bh_conn	*c;
	struct pollfd	 pfd;
	json_t		*o, *m;
	size_t		 i;
	int		 found = 0;

	if ((c = request(url, "GET", "/models", NULL, err, errlen)) == NULL)
		return (-1);
	pfd.fd = c->fd;
	pfd.events = POLLIN;
	while (!c->eof && poll(&pfd, 1, 30000) > 0)
		if (!fill(c))
			c->eof = 1;
	if (!parse_head(c) || c->status != 200) {
		snprintf(err, errlen, "GET %s/models: %s", url, c->have_head ?
		    "the server refused" : "no reply");
		bh_close(c);
		return (-1);
	}
	decode_body(c);
	o = json_loadb(strbuf_str(&c->body), c->body.len, 0, NULL);
	json_array_foreach(json_object_get(o, "data"), i, m) {
		if (json_is_string(json_object_get(m, "id")) &&
		    strcmp(json_string_value(json_object_get(m, "id")),
		    model) == 0)
			found = 1;
	}
	json_decref(o);
	bh_close(c);
	if (!found)
		snprintf(err, errlen, "model '%s' is not among %s/models", model,
		    url);
	return (found ? 0 : -1);
}
