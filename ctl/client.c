/* client.c: the phased client library (blocking framed protobuf I/O). */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <phased/client.h>

struct phased_conn {
	int		 fd;
	uint64_t	 next_id;
	uint32_t	 max_frame;
};

/* Format an error into the caller's buffer. */
static int
client_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list	ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return (-1);
}

/* Write the default socket path for this user into buf. */
int
phased_default_socket(char *buf, size_t len)
{
	const char	*xdg;
	int		 n;

	if (geteuid() == 0)
		n = snprintf(buf, len, "/run/phased/phased.sock");
	else if ((xdg = getenv("XDG_RUNTIME_DIR")) != NULL && *xdg == '/')
		n = snprintf(buf, len, "%s/phased.sock", xdg);
	else
		n = snprintf(buf, len, "/tmp/phased-%u/phased.sock",
		    (unsigned)geteuid());
	return (n < 0 || (size_t)n >= len ? -1 : 0);
}

/* Connect to the daemon at path (NULL: the default socket). */
struct phased_conn *
phased_connect(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un	 sun;
	struct phased_conn	*c;
	char			 def[sizeof sun.sun_path];
	int			 fd;

	if (path == NULL) {
		if (phased_default_socket(def, sizeof def) != 0) {
			client_err(err, errlen, "default socket path too long");
			return (NULL);
		}
		path = def;
	}
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		client_err(err, errlen, "socket path %s too long (limit %zu)",
		    path, sizeof sun.sun_path - 1);
		return (NULL);
	}
	strcpy(sun.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1) {
		client_err(err, errlen, "socket: %s", strerror(errno));
		return (NULL);
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		client_err(err, errlen, "cannot connect to %s: %s", path,
		    strerror(errno));
		close(fd);
		return (NULL);
	}
	if ((c = calloc(1, sizeof *c)) == NULL) {
		client_err(err, errlen, "out of memory");
		close(fd);
		return (NULL);
	}
	c->fd = fd;
	c->next_id = 1;
	c->max_frame = 256U << 20;
	return (c);
}

/* Return a fresh request id. */
uint64_t
phased_next_id(struct phased_conn *c)
{
	return (c->next_id++);
}

/* Write all of buf, retrying on short writes and EINTR. */
static int
write_all(int fd, const uint8_t *buf, size_t len)
{
	ssize_t	n;

	while (len > 0) {
		n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return (-1);
		}
		buf += n;
		len -= (size_t)n;
	}
	return (0);
}

/* Read exactly len bytes; 0 on success, -1 on error, 1 on clean EOF. */
static int
read_all(int fd, uint8_t *buf, size_t len)
{
	ssize_t	n;
	size_t	got = 0;

	while (got < len) {
		n = read(fd, buf + got, len - got);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return (-1);
		}
		if (n == 0)
			return (got == 0 ? 1 : -1);
		got += (size_t)n;
	}
	return (0);
}

/* Send one request envelope. */
int
phased_send(struct phased_conn *c, const Phased__Request *req, char *err,
    size_t errlen)
{
	uint8_t	*buf;
	size_t	 len;
	int	 rc;

	len = phased__request__get_packed_size(req);
	if (len > UINT32_MAX)
		return (client_err(err, errlen, "request too large"));
	if ((buf = malloc(len + 4)) == NULL)
		return (client_err(err, errlen, "out of memory"));
	buf[0] = len >> 24;
	buf[1] = len >> 16;
	buf[2] = len >> 8;
	buf[3] = len;
	phased__request__pack(req, buf + 4);
	rc = write_all(c->fd, buf, len + 4);
	free(buf);
	if (rc != 0)
		return (client_err(err, errlen, "write to daemon: %s",
		    strerror(errno)));
	return (0);
}

/* Receive one response envelope: 0 with *resp set, -1 on error or EOF. */
int
phased_recv(struct phased_conn *c, Phased__Response **resp, char *err,
    size_t errlen)
{
	uint8_t			 hdr[4], *buf;
	uint32_t		 len;
	int			 rc;

	*resp = NULL;
	if ((rc = read_all(c->fd, hdr, 4)) != 0)
		return (client_err(err, errlen, rc == 1 ?
		    "daemon closed the connection" : "read from daemon: %s",
		    strerror(errno)));
	len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
	    (uint32_t)hdr[2] << 8 | hdr[3];
	if (len == 0 || len > c->max_frame)
		return (client_err(err, errlen,
		    "bad frame length %u from daemon (limit %u)", len,
		    c->max_frame));
	if ((buf = malloc(len)) == NULL)
		return (client_err(err, errlen, "out of memory"));
	if (read_all(c->fd, buf, len) != 0) {
		free(buf);
		return (client_err(err, errlen, "truncated frame from daemon"));
	}
	*resp = phased__response__unpack(NULL, len, buf);
	free(buf);
	if (*resp == NULL)
		return (client_err(err, errlen, "undecodable frame from daemon"));
	return (0);
}

/* Free a response returned by phased_recv(). */
void
phased_response_free(Phased__Response *resp)
{
	if (resp != NULL)
		phased__response__free_unpacked(resp, NULL);
}

/* Send a request and wait for the response with its id, skipping notices. */
int
phased_call(struct phased_conn *c, Phased__Request *req,
    Phased__Response **resp, char *err, size_t errlen)
{
	Phased__Response	*r;

	if (req->id == 0)
		req->id = phased_next_id(c);
	if (phased_send(c, req, err, errlen) != 0)
		return (-1);
	for (;;) {
		if (phased_recv(c, &r, err, errlen) != 0)
			return (-1);
		if (r->id == req->id) {
			*resp = r;
			return (0);
		}
		if (r->body_case == PHASED__RESPONSE__BODY_NOTICE &&
		    r->notice->shutting_down) {
			client_err(err, errlen, "daemon is shutting down");
			phased_response_free(r);
			return (-1);
		}
		phased_response_free(r);
	}
}

/* Exchange protocol versions; fails on a mismatch. */
int
phased_hello(struct phased_conn *c, const char *client,
    Phased__HelloReply **reply, char *err, size_t errlen)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__Hello		 hello = PHASED__HELLO__INIT;
	Phased__Response	*r;

	hello.protocol_version = PHASED_PROTOCOL_VERSION;
	hello.client = (char *)(client != NULL ? client : "libphased-client");
	req.body_case = PHASED__REQUEST__BODY_HELLO;
	req.hello = &hello;
	if (phased_call(c, &req, &r, err, errlen) != 0)
		return (-1);
	if (r->body_case == PHASED__RESPONSE__BODY_ERROR) {
		client_err(err, errlen, "%s", r->error->message);
		phased_response_free(r);
		return (-1);
	}
	if (r->body_case != PHASED__RESPONSE__BODY_HELLO) {
		phased_response_free(r);
		return (client_err(err, errlen, "unexpected reply to hello"));
	}
	if (r->hello->protocol_version != PHASED_PROTOCOL_VERSION) {
		client_err(err, errlen, "protocol version mismatch: daemon "
		    "speaks %u, client %u", r->hello->protocol_version,
		    PHASED_PROTOCOL_VERSION);
		phased_response_free(r);
		return (-1);
	}
	if (reply != NULL) {
		/* Hand the caller the HelloReply; the envelope is freed with it. */
		*reply = r->hello;
		r->hello = NULL;
		r->body_case = PHASED__RESPONSE__BODY__NOT_SET;
	}
	phased_response_free(r);
	return (0);
}

/* The socket descriptor, for poll(2). */
int
phased_fd(const struct phased_conn *c)
{
	return (c->fd);
}

/* Close the connection and free it. */
void
phased_close(struct phased_conn *c)
{
	if (c == NULL)
		return;
	close(c->fd);
	free(c);
}

/* A short lowercase name for an error code. */
const char *
phased_error_name(int code)
{
	static const char *const names[] = {
		"unknown", "protocol", "version", "permission", "invalid",
		"not found", "exists", "limit", "overloaded", "shutting down",
		"internal", "load", "cancelled", "deadline",
	};

	if (code < 0 || (size_t)code >= sizeof names / sizeof names[0])
		return ("unknown");
	return (names[code]);
}
