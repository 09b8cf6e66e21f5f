/*
 * http.c: the HTTP/1.1 listener (evhttp): the Unix socket beside the
 * protobuf one and an optional TCP port, limits, access, routing, JSON
 * errors, /health and /metrics.
 */
#include "config.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "conn.h"
#include "http.h"
#include "instance.h"
#include "log.h"
#include "phased.h"
#include "prom.h"
#include "strbuf.h"
#include "util.h"

#define HTTP_MAX_HEADERS	(32U << 10)	/* all request headers */

static struct {
	struct evhttp	*http;
	int		 unix_fd;
	char		*unix_path;
	int		 tcp_fd;
	char		*tcp_desc;
	struct event	*tick;
	int		 shutting_down;
} H = { .unix_fd = -1, .tcp_fd = -1 };

/* Create path's Unix socket, group and mode as for the protobuf socket. */
static int
listen_unix(struct daemon *d, const char *path, char **cause)
{
	struct sockaddr_un	 sun;
	struct stat		 st;
	mode_t			 old;
	int			 fd, rc, probe;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		set_cause(cause, "http-socket %s is too long (limit %zu bytes)",
		    path, sizeof sun.sun_path - 1);
		return (-1);
	}
	strcpy(sun.sun_path, path);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			set_cause(cause, "%s exists and is not a socket", path);
			return (-1);
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe != -1 && connect(probe, (struct sockaddr *)&sun,
		    sizeof sun) == 0) {
			close(probe);
			set_cause(cause, "something is listening on %s", path);
			return (-1);
		}
		if (probe != -1)
			close(probe);
		log_info("removing stale socket %s", path);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		set_cause(cause, "socket: %s", strerror(errno));
		return (-1);
	}
	old = umask(0117);
	rc = bind(fd, (struct sockaddr *)&sun, sizeof sun);
	umask(old);
	if (rc == -1) {
		set_cause(cause, "bind %s: %s", path, strerror(errno));
		close(fd);
		return (-1);
	}
	if ((d->conf.has_socket_gid && chown(path, (uid_t)-1,
	    d->conf.socket_gid) == -1) || listen(fd, SOMAXCONN) == -1) {
		set_cause(cause, "%s: %s", path, strerror(errno));
		unlink(path);
		close(fd);
		return (-1);
	}
	H.unix_fd = fd;
	H.unix_path = xstrdup(path);
	return (0);
}

/* Whether every address of a resolved host is a loopback address. */
static int
all_loopback(const struct addrinfo *res)
{
	const struct sockaddr_in	*s4;
	const struct sockaddr_in6	*s6;

	for (; res != NULL; res = res->ai_next) {
		if (res->ai_family == AF_INET) {
			s4 = (const struct sockaddr_in *)res->ai_addr;
			if ((ntohl(s4->sin_addr.s_addr) >> 24) != 127)
				return (0);
		} else if (res->ai_family == AF_INET6) {
			s6 = (const struct sockaddr_in6 *)res->ai_addr;
			if (!IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
				return (0);
		} else
			return (0);
	}
	return (1);
}

/* Bind http-listen HOST:PORT; other than loopback needs http-api-key. */
static int
listen_tcp(struct daemon *d, const char *spec, char **cause)
{
	struct addrinfo	 hints, *res;
	char		*host, *port;
	int		 fd = -1, on = 1, e;

	host = xstrdup(spec);
	port = strrchr(host, ':');
	*port++ = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if ((e = getaddrinfo(*host ? host : NULL, port, &hints, &res)) != 0) {
		set_cause(cause, "http-listen %s: %s", spec, gai_strerror(e));
		free(host);
		return (-1);
	}
	if ((*host == '\0' || !all_loopback(res)) &&
	    d->conf.http_api_key == NULL) {
		set_cause(cause, "http-listen %s is not a loopback address: "
		    "set http-api-key to serve other hosts", spec);
		goto fail;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0);
	if (fd == -1 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on,
	    sizeof on) == -1 || bind(fd, res->ai_addr, res->ai_addrlen) == -1 ||
	    listen(fd, SOMAXCONN) == -1) {
		set_cause(cause, "http-listen %s: %s", spec, strerror(errno));
		goto fail;
	}
	freeaddrinfo(res);
	free(host);
	H.tcp_fd = fd;
	H.tcp_desc = xstrdup(spec);
	return (0);
fail:
	if (fd != -1)
		close(fd);
	freeaddrinfo(res);
	free(host);
	return (-1);
}

/* The HTTP socket's path: http-socket, or NAME-http.sock beside the socket. */
static char *
http_socket_path(struct daemon *d)
{
	const char	*s = d->conf.socket;
	size_t		 n = strlen(s);
	char		*p;

	if (d->conf.http_socket != NULL)
		return (strcmp(d->conf.http_socket, "none") == 0 ? NULL :
		    xstrdup(d->conf.http_socket));
	if (n > 5 && strcmp(s + n - 5, ".sock") == 0)
		n -= 5;
	xasprintf(&p, "%.*s-http.sock", (int)n, s);
	return (p);
}

/* Bind the Unix socket and the TCP port of the configuration. */
int
http_listen(struct daemon *d, char **cause)
{
	struct rlimit	 rl;
	char		*path;
	int		 rc = 0;

	/* Many concurrent clients need descriptors: take what is allowed. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if ((path = http_socket_path(d)) != NULL)
		rc = listen_unix(d, path, cause);
	free(path);
	if (rc == 0 && d->conf.http_listen != NULL)
		rc = listen_tcp(d, d->conf.http_listen, cause);
	return (rc);
}

/* Send a JSON reply and drop the reference to body. */
void
http_reply_json(struct evhttp_request *req, int status, json_t *body)
{
	struct evbuffer	*b = evbuffer_new();
	char		*s;

	s = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(body);
	if (s != NULL) {
		evbuffer_add(b, s, strlen(s));
		evbuffer_add(b, "\n", 1);
		free(s);
	}
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	evhttp_send_reply(req, status, status == 200 ? "OK" : "Error", b);
	evbuffer_free(b);
}

/* The OpenAI error type for a status. */
static const char *
err_type(int status)
{
	switch (status) {
	case 400:
	case 413:
		return ("invalid_request_error");
	case 401:
		return ("authentication_error");
	case 403:
		return ("permission_error");
	case 404:
		return ("not_found_error");
	case 429:
		return ("rate_limit_error");
	case 503:
		return ("unavailable_error");
	default:
		return ("server_error");
	}
}

/* Send an error reply with a JSON body. */
void
http_error(struct evhttp_request *req, enum http_err_style style, int status,
    const char *param, const char *fmt, ...)
{
	va_list	 ap;
	char	*msg;
	json_t	*o;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		fatal("vasprintf");
	va_end(ap);
	if (style == HTTP_ERR_OLLAMA)
		o = json_pack("{ss}", "error", msg);
	else
		o = json_pack("{s{ss,ss,ss?,ss?}}", "error", "message", msg,
		    "type", err_type(status), "param", param, "code",
		    status == 404 ? "model_not_found" : NULL);
	if (status == 429 || status == 503)
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Retry-After", "1");
	http_reply_json(req, status, o);
	free(msg);
}

/* The HTTP status for a Phased__ErrorCode. */
int
http_status_of(int code)
{
	switch (code) {
	case PHASED__ERROR_CODE__ERR_INVALID:
	case PHASED__ERROR_CODE__ERR_PROTOCOL:
		return (400);
	case PHASED__ERROR_CODE__ERR_PERMISSION:
		return (403);
	case PHASED__ERROR_CODE__ERR_NOT_FOUND:
		return (404);
	case PHASED__ERROR_CODE__ERR_OVERLOADED:
	case PHASED__ERROR_CODE__ERR_LIMIT:
		return (429);
	case PHASED__ERROR_CODE__ERR_SHUTTING_DOWN:
		return (503);
	default:
		return (500);
	}
}

/*
 * Parse a request body as a JSON object; NULL and *cause if it is not one.
 * Needs no daemon (the fuzz targets).
 */
json_t *
http_json_object(const char *buf, size_t len, char **cause)
{
	json_error_t	 e;
	json_t		*o;

	if (len == 0) {
		set_cause(cause, "request body is empty: a JSON object is "
		    "expected");
		return (NULL);
	}
	o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &e);
	if (o == NULL) {
		set_cause(cause, "request body is not valid JSON: %s at line "
		    "%d column %d", e.text, e.line, e.column);
		return (NULL);
	}
	if (!json_is_object(o)) {
		json_decref(o);
		set_cause(cause, "request body must be a JSON object");
		return (NULL);
	}
	return (o);
}

/* Parse the body of a request as a JSON object; NULL after an error reply. */
json_t *
http_body_object(struct evhttp_request *req, enum http_err_style style)
{
	struct evbuffer	*in = evhttp_request_get_input_buffer(req);
	size_t		 len = evbuffer_get_length(in);
	json_t		*o;
	char		*cause = NULL;

	o = http_json_object(len == 0 ? "" :
	    (const char *)evbuffer_pullup(in, -1), len, &cause);
	if (o == NULL) {
		http_error(req, style, 400, NULL, "%s", cause);
		free(cause);
	}
	return (o);
}

/* Who the peer of a request is, and whether it may administer. */
static int
peer_of(struct evhttp_request *req, struct http_peer *p)
{
	struct evhttp_connection	*evc = evhttp_request_get_connection(req);
	struct bufferevent		*bev;
	struct sockaddr_storage		 ss;
	struct ucred			 uc;
	socklen_t			 len = sizeof ss, ulen = sizeof uc;
	const char			*auth;
	int				 fd;

	memset(p, 0, sizeof *p);
	bev = evhttp_connection_get_bufferevent(evc);
	fd = bufferevent_getfd(bev);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
		return (-1);
	if (ss.ss_family == AF_UNIX) {
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ulen) == -1)
			return (-1);
		p->admin = conn_peer_admin(uc.uid, uc.gid);
		p->uid = (uint32_t)uc.uid;
		return (0);
	}
	p->tcp = 1;
	/* No credentials over TCP: one user, "network" in user-weight. */
	p->uid = 0xfffffffeu;	/* PHASED_UID_NETWORK */
	if (phased->conf.http_api_key == NULL)
		return (0);
	auth = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Authorization");
	if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0 ||
	    strcmp(auth + 7, phased->conf.http_api_key) != 0)
		return (-1);
	p->admin = 1;
	return (0);
}

/* GET /health: 200 while serving, 503 while shutting down. */
static void
http_health(struct evhttp_request *req, const struct http_peer *p)
{
	struct instance	*in;
	json_t		*models = json_object();

	for (in = instance_first(); in != NULL; in = instance_next(in))
		json_object_set_new(models, in->name, json_string(
		    in->state == INST_READY ? "ready" : "loading"));
	http_reply_json(req, H.shutting_down ? 503 : 200, json_pack("{ss,so}",
	    "status", H.shutting_down ? "shutting down" : "ok", "models",
	    models));
}

/* The live gauges under vLLM's names and label, for its dashboards. */
static void
vllm_gauges(struct strbuf *sb)
{
	static const char *const names[] = { "vllm:num_requests_running",
	    "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc" };
	static const char *const help[] = { "Requests running now.",
	    "Requests waiting now.", "Fraction of KV cache blocks in use." };
	struct engine_counts	 ec;
	struct instance		*in;
	uint64_t		 used, total;
	double			 v;
	int			 k, i;

	for (k = 0; k < 3; k++) {
		strbuf_printf(sb, "# HELP %s %s\n# TYPE %s gauge\n", names[k],
		    help[k], names[k]);
		for (in = instance_first(); in != NULL; in = instance_next(in)) {
			if (in->state != INST_READY)
				continue;
			engine_counts(in->engine, &ec);
			used = total = 0;
			for (i = 0; i < ec.n_groups; i++) {
				used += ec.kv_used[i];
				total += ec.kv_total[i];
			}
			v = k == 0 ? ec.running : k == 1 ? ec.waiting :
			    total > 0 ? (double)used / total : 0;
			strbuf_printf(sb, "%s{model_name=", names[k]);
			prom_label_value(sb, in->name);
			strbuf_adds(sb, "} ");
			prom_value(sb, v);
			strbuf_addc(sb, '\n');
		}
	}
}

/* GET /metrics: Prometheus text. */
static void
http_metrics(struct evhttp_request *req, const struct http_peer *p)
{
	struct evbuffer	*b = evbuffer_new();
	struct strbuf	 sb;

	strbuf_init(&sb);
	instance_prom_text(&sb);
	vllm_gauges(&sb);
	evbuffer_add(b, strbuf_str(&sb), sb.len);
	strbuf_free(&sb);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(req, 200, "OK", b);
	evbuffer_free(b);
}

struct http_route {
	enum evhttp_cmd_type	 method;
	const char		*path;
	enum http_err_style	 style;
	void			(*fn)(struct evhttp_request *,
				    const struct http_peer *);
};

static const struct http_route routes[] = {
	{ EVHTTP_REQ_POST, "/v1/completions", HTTP_ERR_OPENAI,
	  http_oai_completions },
	{ EVHTTP_REQ_POST, "/v1/chat/completions", HTTP_ERR_OPENAI,
	  http_oai_chat },
	{ EVHTTP_REQ_GET, "/v1/models", HTTP_ERR_OPENAI, http_oai_models },
	{ EVHTTP_REQ_POST, "/api/generate", HTTP_ERR_OLLAMA,
	  http_ollama_generate },
	{ EVHTTP_REQ_POST, "/api/chat", HTTP_ERR_OLLAMA, http_ollama_chat },
	{ EVHTTP_REQ_GET, "/api/tags", HTTP_ERR_OLLAMA, http_ollama_tags },
	{ EVHTTP_REQ_GET, "/api/ps", HTTP_ERR_OLLAMA, http_ollama_ps },
	{ EVHTTP_REQ_POST, "/api/show", HTTP_ERR_OLLAMA, http_ollama_show },
	{ EVHTTP_REQ_GET, "/api/version", HTTP_ERR_OLLAMA,
	  http_ollama_version },
	{ EVHTTP_REQ_GET, "/health", HTTP_ERR_OPENAI, http_health },
	{ EVHTTP_REQ_GET, "/metrics", HTTP_ERR_OPENAI, http_metrics },
};

/* Route every request: access, shutdown, path and method. */
static void
http_request_cb(struct evhttp_request *req, void *arg)
{
	const struct http_route	*r;
	struct http_peer	 peer;
	const char		*uri = evhttp_request_get_uri(req), *q;
	enum evhttp_cmd_type	 m = evhttp_request_get_command(req);
	size_t			 i, plen;
	int			 path_known = 0;

	q = strchr(uri, '?');
	plen = q != NULL ? (size_t)(q - uri) : strlen(uri);
	if (peer_of(req, &peer) != 0) {
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "WWW-Authenticate", "Bearer");
		http_error(req, HTTP_ERR_OPENAI, 401, NULL, "a valid API key "
		    "is required (Authorization: Bearer KEY)");
		return;
	}
	for (i = 0; i < sizeof routes / sizeof routes[0]; i++) {
		r = &routes[i];
		if (strlen(r->path) != plen || strncmp(r->path, uri, plen) != 0)
			continue;
		path_known = 1;
		if (r->method != m && !(r->method == EVHTTP_REQ_GET &&
		    m == EVHTTP_REQ_HEAD))
			continue;
		if (H.shutting_down && r->fn != http_health) {
			http_error(req, r->style, 503, NULL, "daemon is "
			    "shutting down");
			return;
		}
		r->fn(req, &peer);
		return;
	}
	if (path_known)
		http_error(req, HTTP_ERR_OPENAI, 405, NULL, "method not "
		    "allowed for %.*s", (int)(plen > 200 ? 200 : plen), uri);
	else
		http_error(req, HTTP_ERR_OPENAI, 404, NULL, "no endpoint %.*s",
		    (int)(plen > 200 ? 200 : plen), uri);
}

/* Once a second: keep-alive comments, idle models. */
static void
http_tick_cb(evutil_socket_t fd, short ev, void *arg)
{
	http_gen_tick();
	instance_expire_idle();
}

/* Start serving on the daemon's event base. */
void
http_start(struct daemon *d)
{
	struct timeval	tv = { 1, 0 };

	if ((H.http = evhttp_new(d->base)) == NULL)
		fatalx("evhttp_new failed");
	evhttp_set_max_headers_size(H.http, HTTP_MAX_HEADERS);
	evhttp_set_max_body_size(H.http, (ev_ssize_t)d->conf.http_max_body);
	evhttp_set_timeout(H.http, (int)d->conf.http_timeout);
	evhttp_set_allowed_methods(H.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_HEAD | EVHTTP_REQ_DELETE | EVHTTP_REQ_PUT |
	    EVHTTP_REQ_OPTIONS);
	evhttp_set_gencb(H.http, http_request_cb, NULL);
	if (H.unix_fd != -1) {
		if (evhttp_accept_socket(H.http, H.unix_fd) != 0)
			fatalx("cannot serve HTTP on %s", H.unix_path);
		log_info("HTTP on %s", H.unix_path);
	}
	if (H.tcp_fd != -1) {
		if (evhttp_accept_socket(H.http, H.tcp_fd) != 0)
			fatalx("cannot serve HTTP on %s", H.tcp_desc);
		log_info("HTTP on %s", H.tcp_desc);
	}
	instance_load_hook = http_gen_model_loaded;
	H.tick = event_new(d->base, -1, EV_PERSIST, http_tick_cb, NULL);
	event_add(H.tick, &tv);
}

/* Stop accepting; requests from now on get 503. */
void
http_shutdown(void)
{
	H.shutting_down = 1;
	http_gen_shutdown();
}

/* Close everything (after the engines are gone). */
void
http_stop(void)
{
	if (H.tick != NULL)
		event_free(H.tick);
	H.tick = NULL;
	if (H.http != NULL)
		evhttp_free(H.http);	/* closes the listening sockets */
	else {
		if (H.unix_fd != -1)
			close(H.unix_fd);
		if (H.tcp_fd != -1)
			close(H.tcp_fd);
	}
	H.http = NULL;
	H.unix_fd = H.tcp_fd = -1;
	if (H.unix_path != NULL)
		unlink(H.unix_path);
	free(H.unix_path);
	free(H.tcp_desc);
	H.unix_path = H.tcp_desc = NULL;
}
