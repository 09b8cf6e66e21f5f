/* conn.h: one client connection: framing, limits, streams, replies. */
#ifndef PHASED_CONN_H
#define PHASED_CONN_H

#include <sys/queue.h>
#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#include <phased/phased.pb-c.h>

struct bufferevent;
struct stream;

TAILQ_HEAD(stream_list, stream);

struct conn {
	TAILQ_ENTRY(conn)	 entry;
	uint64_t		 serial;
	int			 fd;
	struct bufferevent	*bev;
	uid_t			 uid;
	gid_t			 gid;
	pid_t			 pid;
	int			 admin;
	int			 closing;	/* close once the output drains */
	int			 dropped;	/* being torn down, send nothing */
	const char		*close_why;	/* logged when it is freed */
	int			 paused;	/* input processing held back */
	struct stream_list	 streams;
	uint32_t		 n_streams;
};

/*
 * A request that outlives its frame (a generation, a load, a trace).  The
 * owner that produces its events keeps a pointer; when the client goes away
 * the stream is detached (conn = NULL) and its cancel callback runs, so the
 * owner stops and frees it with stream_free().
 */
struct stream {
	TAILQ_ENTRY(stream)	 entry;
	struct conn		*conn;
	uint64_t		 req_id;
	void			(*cancel)(struct stream *, const char *why);
	void			*arg;
};

/* Whether a peer with these credentials may make admin requests. */
int	conn_peer_admin(uid_t, gid_t);
/* Accept a new client on fd. */
void	conn_accept(int fd);
/* Queue one response; returns -1 if the connection was dropped. */
int	conn_send(struct conn *, Phased__Response *);
/* Queue an error response for request id. */
void	conn_send_error(struct conn *, uint64_t id, Phased__ErrorCode,
	    const char *, ...) __attribute__((format(printf, 4, 5)));
/* Queue an Ok response. */
void	conn_send_ok(struct conn *, uint64_t id, const char *msg);
/* Whether the connection with this serial still exists. */
int	conn_alive(uint64_t serial);
/* The connection with this serial, or NULL when it is gone. */
struct conn *conn_find(uint64_t serial);
/* Close after the queued output is written (or at once if none). */
void	conn_close_after_flush(struct conn *);
/* End every open stream with a final Error for its id. */
void	conn_end_streams(struct conn *, const char *why);
/* Close now, cancelling every open stream. */
void	conn_free(struct conn *, const char *why);

/* Open a stream for request id; NULL with an error sent at the limit. */
struct stream *stream_open(struct conn *, uint64_t id,
	    void (*cancel)(struct stream *, const char *), void *arg);
/* Find an open stream of a connection by request id. */
struct stream *stream_find(struct conn *, uint64_t id);
/* Send an event on a stream (dropped if the client is gone). */
int	stream_send(struct stream *, Phased__Response *);
/* Finish a stream: detach it from its connection and free it. */
void	stream_free(struct stream *);

/* What frame_take found at the front of a buffer. */
enum frame_res {
	FRAME_MORE,	/* not a whole frame yet */
	FRAME_OK,	/* a request, decoded */
	FRAME_BAD,	/* a protocol error: msg says what */
};
/* The length a frame header announces. */
uint32_t	frame_len(const uint8_t *hdr);
/* Take and decode one request frame off buf; no daemon needed. */
enum frame_res	frame_take(const uint8_t *buf, size_t len, uint32_t max_frame,
		    Phased__Request **req, size_t *used, char *msg,
		    size_t msgsz);

#endif
