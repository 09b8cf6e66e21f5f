/* conn.c: client connections: peer credentials, framing, limits, replies. */
#include "config.h"

#include <sys/socket.h>
#include <sys/types.h>

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "conn.h"
#include "log.h"
#include "phased.h"
#include "req.h"
#include "strbuf.h"
#include "util.h"

/* Input processing pauses while this much output is queued. */
#define CONN_PAUSE_BYTES	(256U << 10)

static void	conn_read_cb(struct bufferevent *, void *);
static void	conn_write_cb(struct bufferevent *, void *);
static void	conn_event_cb(struct bufferevent *, short, void *);

/* Whether uid belongs to gid, as primary or supplementary group. */
static int
uid_in_group(uid_t uid, gid_t pgid, gid_t gid)
{
	struct passwd	 pw, *res;
	char		 buf[4096];
	gid_t		 groups[256];
	int		 n = 256, i;

	if (pgid == gid)
		return (1);
	if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) != 0 || res == NULL)
		return (0);
	if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) == -1)
		return (0);
	for (i = 0; i < n; i++)
		if (groups[i] == gid)
			return (1);
	return (0);
}

/* Decide whether a peer may make admin requests. */
static int
peer_is_admin(uid_t uid, gid_t gid)
{
	if (uid == 0 || uid == geteuid())
		return (1);
	if (phased->conf.has_admin_gid &&
	    uid_in_group(uid, gid, phased->conf.admin_gid))
		return (1);
	return (0);
}

/* Whether a peer may make admin requests (for the HTTP socket too). */
int
conn_peer_admin(uid_t uid, gid_t gid)
{
	return (peer_is_admin(uid, gid));
}

/* Refused connections draining before their close, at most this many. */
#define REFUSED_MAX		64
/* How long a refused connection may drain. */
#define REFUSED_LINGER_MS	1000

static int	n_refused;

/* Read and drop what a refused client sent; close at EOF or the timeout. */
static void
refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct event	*ev = arg;
	char		 buf[4096];
	ssize_t		 n;

	if (what & EV_READ) {
		while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
			;
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return;
	}
	event_free(ev);
	close(fd);
	n_refused--;
}

/*
 * Send a frame with an error and close, for connections refused at accept.
 * Closing a socket whose client data is still unread makes the client see
 * a reset instead of the frame, so the write side is shut and what the
 * client sent is drained for a moment first.
 */
static void
refuse(int fd, Phased__ErrorCode code, const char *msg)
{
	struct timeval	 tv = { REFUSED_LINGER_MS / 1000,
	    (REFUSED_LINGER_MS % 1000) * 1000 };
	struct event	*ev;
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__Error		 e = PHASED__ERROR__INIT;
	uint8_t			 buf[512];
	size_t			 len;

	e.code = code;
	e.message = (char *)msg;
	r.id = 0;
	r.body_case = PHASED__RESPONSE__BODY_ERROR;
	r.error = &e;
	len = phased__response__get_packed_size(&r);
	if (len + 4 <= sizeof buf) {
		buf[0] = len >> 24; buf[1] = len >> 16;
		buf[2] = len >> 8; buf[3] = len;
		phased__response__pack(&r, buf + 4);
		(void)send(fd, buf, len + 4, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	shutdown(fd, SHUT_WR);
	if (n_refused >= REFUSED_MAX || (ev = event_new(phased->base, fd,
	    EV_READ | EV_PERSIST, refused_cb, event_self_cbarg())) == NULL) {
		close(fd);
		return;
	}
	n_refused++;
	event_add(ev, &tv);
}

/* Accept a new client on fd. */
void
conn_accept(int fd)
{
	struct ucred	 cred;
	socklen_t	 len = sizeof cred;
	struct conn	*c;
	char		 msg[128];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == -1) {
		log_warn("getsockopt SO_PEERCRED");
		close(fd);
		return;
	}
	if (phased->shutting_down) {
		refuse(fd, PHASED__ERROR_CODE__ERR_SHUTTING_DOWN,
		    "daemon is shutting down");
		return;
	}
	if (phased->n_conns >= phased->conf.max_connections) {
		snprintf(msg, sizeof msg, "too many connections (limit %u)",
		    phased->conf.max_connections);
		log_warnx("refused connection from uid %u: %s",
		    (unsigned)cred.uid, msg);
		refuse(fd, PHASED__ERROR_CODE__ERR_LIMIT, msg);
		return;
	}
	c = xcalloc(1, sizeof *c);
	c->serial = ++phased->next_conn_id;
	c->fd = fd;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->pid = cred.pid;
	c->admin = peer_is_admin(cred.uid, cred.gid);
	TAILQ_INIT(&c->streams);
	c->bev = bufferevent_socket_new(phased->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL) {
		log_warnx("bufferevent_socket_new failed");
		close(fd);
		free(c);
		return;
	}
	bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	/* Read no more than one frame ahead: bounded input per connection. */
	bufferevent_setwatermark(c->bev, EV_READ, 0,
	    (size_t)phased->conf.max_frame + 4);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	TAILQ_INSERT_TAIL(&phased->conns, c, entry);
	phased->n_conns++;
	log_debug("connection %llu from uid %u pid %d%s",
	    (unsigned long long)c->serial, (unsigned)c->uid, (int)c->pid,
	    c->admin ? " (admin)" : "");
}

/* Close now, cancelling every open stream. */
void
conn_free(struct conn *c, const char *why)
{
	struct stream	*s;

	log_debug("connection %llu closed: %s", (unsigned long long)c->serial,
	    why);
	while ((s = TAILQ_FIRST(&c->streams)) != NULL) {
		TAILQ_REMOVE(&c->streams, s, entry);
		c->n_streams--;
		s->conn = NULL;
		if (s->cancel != NULL)
			s->cancel(s, why);
	}
	TAILQ_REMOVE(&phased->conns, c, entry);
	phased->n_conns--;
	bufferevent_free(c->bev);
	free(c);
}

/*
 * End every open stream with a final Error for its id (at shutdown), then
 * stop what produces its events; later events are dropped.
 */
void
conn_end_streams(struct conn *c, const char *why)
{
	struct stream	*s;

	while ((s = TAILQ_FIRST(&c->streams)) != NULL) {
		conn_send_error(c, s->req_id,
		    PHASED__ERROR_CODE__ERR_SHUTTING_DOWN, "%s", why);
		TAILQ_REMOVE(&c->streams, s, entry);
		c->n_streams--;
		s->conn = NULL;
		if (s->cancel != NULL)
			s->cancel(s, why);
	}
}

/* Free a dropped connection from the event loop, if it still exists. */
static void
conn_reap_cb(evutil_socket_t fd, short ev, void *arg)
{
	uint64_t	 serial = (uintptr_t)arg;
	struct conn	*c;

	TAILQ_FOREACH(c, &phased->conns, entry) {
		if (c->serial == serial) {
			conn_free(c, c->dropped ? "dropped by daemon" :
			    c->close_why != NULL ? c->close_why :
			    "closed by daemon");
			return;
		}
	}
}

/*
 * Schedule the connection to be freed from the event loop, never from under
 * a caller that still holds it.
 */
static void
conn_reap_later(struct conn *c)
{
	if (event_base_once(phased->base, -1, EV_TIMEOUT, conn_reap_cb,
	    (void *)(uintptr_t)c->serial, NULL) != 0)
		fatalx("event_base_once");
}

/* Stop serving a connection at once; it is freed from the event loop. */
static void
conn_drop(struct conn *c)
{
	if (c->dropped)
		return;
	c->dropped = 1;
	c->closing = 1;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	conn_reap_later(c);
}

/* Close after the queued output is written (or at once if none). */
void
conn_close_after_flush(struct conn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	bufferevent_disable(c->bev, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_reap_later(c);
}

/* Queue one response; returns -1 if the connection was dropped. */
int
conn_send(struct conn *c, Phased__Response *r)
{
	struct evbuffer	*out = bufferevent_get_output(c->bev);
	struct evbuffer_iovec v;
	size_t		 len;

	if (c->dropped)
		return (-1);
	len = phased__response__get_packed_size(r);
	if (evbuffer_get_length(out) + len + 4 > phased->conf.max_output) {
		/* A reader this slow would grow the daemon without bound. */
		log_warnx("connection %llu (uid %u): client is not reading, "
		    "%zu bytes queued (limit %llu); dropping it",
		    (unsigned long long)c->serial, (unsigned)c->uid,
		    evbuffer_get_length(out),
		    (unsigned long long)phased->conf.max_output);
		conn_drop(c);
		return (-1);
	}
	if (evbuffer_reserve_space(out, len + 4, &v, 1) != 1)
		fatalx("evbuffer_reserve_space");
	((uint8_t *)v.iov_base)[0] = len >> 24;
	((uint8_t *)v.iov_base)[1] = len >> 16;
	((uint8_t *)v.iov_base)[2] = len >> 8;
	((uint8_t *)v.iov_base)[3] = len;
	phased__response__pack(r, (uint8_t *)v.iov_base + 4);
	v.iov_len = len + 4;
	evbuffer_commit_space(out, &v, 1);
	return (0);
}

/* Queue an error response for request id. */
void
conn_send_error(struct conn *c, uint64_t id, Phased__ErrorCode code,
    const char *fmt, ...)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__Error		 e = PHASED__ERROR__INIT;
	va_list			 ap;
	char			*msg;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		fatal("vasprintf");
	va_end(ap);
	e.code = code;
	/* Messages quote client input: keep them valid UTF-8. */
	if (utf8_first_invalid(msg, strlen(msg)) != (size_t)-1) {
		char *clean = utf8_sanitize(msg);

		free(msg);
		msg = clean;
	}
	e.message = msg;
	r.id = id;
	r.body_case = PHASED__RESPONSE__BODY_ERROR;
	r.error = &e;
	conn_send(c, &r);
	free(msg);
}

/* Queue an Ok response. */
void
conn_send_ok(struct conn *c, uint64_t id, const char *msg)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__Ok		 ok = PHASED__OK__INIT;

	ok.message = (char *)msg;
	r.id = id;
	r.body_case = PHASED__RESPONSE__BODY_OK;
	r.ok = &ok;
	conn_send(c, &r);
}

/* Report a protocol violation and close the connection after the reply. */
static void
protocol_error(struct conn *c, uint64_t id, const char *msg)
{
	log_warnx("connection %llu (uid %u): %s; closing it",
	    (unsigned long long)c->serial, (unsigned)c->uid, msg);
	conn_send_error(c, id, PHASED__ERROR_CODE__ERR_PROTOCOL, "%s", msg);
	conn_close_after_flush(c);
}

/* The length a frame's 4-byte big-endian header announces. */
uint32_t
frame_len(const uint8_t *hdr)
{
	return ((uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
	    (uint32_t)hdr[2] << 8 | hdr[3]);
}

/*
 * Take one request frame off the front of buf.  A bad header is refused
 * as soon as its 4 bytes are there, before the body arrives.  Needs no
 * daemon: the fuzz targets call it on raw bytes.
 */
enum frame_res
frame_take(const uint8_t *buf, size_t len, uint32_t max_frame,
    Phased__Request **reqp, size_t *used, char *msg, size_t msgsz)
{
	Phased__Request	*req;
	uint32_t	 n;

	*reqp = NULL;
	if (len < 4)
		return (FRAME_MORE);
	n = frame_len(buf);
	if (n == 0) {
		snprintf(msg, msgsz, "empty frame (length 0)");
		return (FRAME_BAD);
	}
	if (n > max_frame) {
		snprintf(msg, msgsz, "frame of %u bytes is over the limit of %u",
		    n, max_frame);
		return (FRAME_BAD);
	}
	if (len < (size_t)n + 4)
		return (FRAME_MORE);
	*used = (size_t)n + 4;
	if ((req = phased__request__unpack(NULL, n, buf + 4)) == NULL) {
		snprintf(msg, msgsz, "undecodable request message");
		return (FRAME_BAD);
	}
	if (req->id == 0) {
		phased__request__free_unpacked(req, NULL);
		snprintf(msg, msgsz, "request id 0 is reserved");
		return (FRAME_BAD);
	}
	*reqp = req;
	return (FRAME_OK);
}

/*
 * Decode and dispatch complete frames.  Returns -1 if the connection is
 * gone or closing.
 */
static int
conn_process(struct conn *c)
{
	struct evbuffer		*in = bufferevent_get_input(c->bev);
	struct evbuffer		*out = bufferevent_get_output(c->bev);
	Phased__Request		*req;
	uint8_t			 hdr[4], *data;
	size_t			 need, used = 0;
	uint64_t		 serial = c->serial;
	char			 msg[128];

	while (!c->closing) {
		if (evbuffer_get_length(out) >= CONN_PAUSE_BYTES) {
			/* Let the client drain its replies before more work. */
			c->paused = 1;
			return (0);
		}
		c->paused = 0;
		if (evbuffer_copyout(in, hdr, 4) != 4)
			return (0);
		/* The header alone: refuse a bad length before the body. */
		if (frame_take(hdr, 4, phased->conf.max_frame, &req, &used,
		    msg, sizeof msg) == FRAME_BAD) {
			protocol_error(c, 0, msg);
			return (-1);
		}
		need = (size_t)frame_len(hdr) + 4;
		if (evbuffer_get_length(in) < need)
			return (0);
		data = evbuffer_pullup(in, need);
		if (frame_take(data, need, phased->conf.max_frame, &req, &used,
		    msg, sizeof msg) != FRAME_OK) {
			evbuffer_drain(in, need);
			protocol_error(c, 0, msg);
			return (-1);
		}
		evbuffer_drain(in, used);
		if (req_lookup(req->body_case) == NULL) {
			snprintf(msg, sizeof msg, "unknown request type in "
			    "request %llu", (unsigned long long)req->id);
			protocol_error(c, req->id, msg);
			phased__request__free_unpacked(req, NULL);
			return (-1);
		}
		req_dispatch(c, req);
		phased__request__free_unpacked(req, NULL);
		/* The request may have closed this connection. */
		if (!conn_alive(serial))
			return (-1);
	}
	return (-1);
}

/* Whether the connection with this serial still exists. */
int
conn_alive(uint64_t serial)
{
	struct conn	*c;

	TAILQ_FOREACH(c, &phased->conns, entry)
		if (c->serial == serial)
			return (1);
	return (0);
}

/* The connection with this serial, or NULL when it is gone. */
struct conn *
conn_find(uint64_t serial)
{
	struct conn	*c;

	TAILQ_FOREACH(c, &phased->conns, entry)
		if (c->serial == serial && !c->dropped)
			return (c);
	return (NULL);
}

/* Frames arrived. */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	conn_process(arg);
}

/* Output drained to the low watermark. */
static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn	*c = arg;

	if (c->closing) {
		if (!c->dropped &&
		    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			conn_reap_later(c);
		return;
	}
	if (c->paused)
		conn_process(c);
}

/* EOF or error on the socket. */
static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn	*c = arg;
	size_t		 left;
	char		 msg[128];

	if (what & BEV_EVENT_ERROR) {
		conn_free(c, "socket error");
		return;
	}
	if (!(what & BEV_EVENT_EOF))
		return;
	left = evbuffer_get_length(bufferevent_get_input(bev));
	if (left > 0 && !c->closing) {
		snprintf(msg, sizeof msg, "truncated frame: connection closed "
		    "with %zu bytes of an incomplete frame", left);
		protocol_error(c, 0, msg);
		return;
	}
	/* The client may have only shut down its side: answer, then close. */
	c->close_why = "client closed the connection";
	conn_close_after_flush(c);
}

/* Open a stream for request id; NULL with an error sent at the limit. */
struct stream *
stream_open(struct conn *c, uint64_t id,
    void (*cancel)(struct stream *, const char *), void *arg)
{
	struct stream	*s;

	if (stream_find(c, id) != NULL) {
		conn_send_error(c, id, PHASED__ERROR_CODE__ERR_INVALID,
		    "request id %llu is already in flight",
		    (unsigned long long)id);
		return (NULL);
	}
	if (c->n_streams >= phased->conf.max_requests) {
		conn_send_error(c, id, PHASED__ERROR_CODE__ERR_LIMIT,
		    "too many requests in flight on this connection "
		    "(limit %u)", phased->conf.max_requests);
		return (NULL);
	}
	s = xcalloc(1, sizeof *s);
	s->conn = c;
	s->req_id = id;
	s->cancel = cancel;
	s->arg = arg;
	TAILQ_INSERT_TAIL(&c->streams, s, entry);
	c->n_streams++;
	return (s);
}

/* Find an open stream of a connection by request id. */
struct stream *
stream_find(struct conn *c, uint64_t id)
{
	struct stream	*s;

	TAILQ_FOREACH(s, &c->streams, entry)
		if (s->req_id == id)
			return (s);
	return (NULL);
}

/* Send an event on a stream (dropped if the client is gone). */
int
stream_send(struct stream *s, Phased__Response *r)
{
	if (s->conn == NULL)
		return (-1);
	r->id = s->req_id;
	return (conn_send(s->conn, r));
}

/* Finish a stream: detach it from its connection and free it. */
void
stream_free(struct stream *s)
{
	if (s->conn != NULL) {
		TAILQ_REMOVE(&s->conn->streams, s, entry);
		s->conn->n_streams--;
	}
	free(s);
}
