/*
 * <phased/client.h>: the phased client library.
 *
 * Connects to the phased daemon's Unix socket and exchanges framed protobuf
 * messages (a 4-byte big-endian length, then a phased.Request or
 * phased.Response).  Calls are blocking; phased_fd() gives the descriptor
 * for programs that poll.  See phased_client(3).
 */
#ifndef PHASED_CLIENT_H
#define PHASED_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <phased/phased.pb-c.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PHASED_PROTOCOL_VERSION	1
#define PHASED_MAX_FRAME_DEFAULT	(4U << 20)

struct phased_conn;

/* Write the default socket path for this user into buf. */
int	 phased_default_socket(char *buf, size_t len);
/* Connect to the daemon at path (NULL: the default socket). */
struct phased_conn *phased_connect(const char *path, char *err, size_t errlen);
/* Exchange protocol versions; fails on a mismatch. */
int	 phased_hello(struct phased_conn *, const char *client,
	    Phased__HelloReply **reply, char *err, size_t errlen);
/* Return a fresh request id. */
uint64_t phased_next_id(struct phased_conn *);
/* Send one request envelope. */
int	 phased_send(struct phased_conn *, const Phased__Request *, char *err,
	    size_t errlen);
/* Receive one response envelope: 0 with *resp set, -1 on error or EOF. */
int	 phased_recv(struct phased_conn *, Phased__Response **resp, char *err,
	    size_t errlen);
/* Free a response returned by phased_recv(). */
void	 phased_response_free(Phased__Response *);
/* Send a request and wait for the response with its id, skipping notices. */
int	 phased_call(struct phased_conn *, Phased__Request *,
	    Phased__Response **resp, char *err, size_t errlen);
/* The socket descriptor, for poll(2). */
int	 phased_fd(const struct phased_conn *);
/* Close the connection and free it. */
void	 phased_close(struct phased_conn *);
/* A short lowercase name for an error code ("permission"). */
const char *phased_error_name(int code);

#ifdef __cplusplus
}
#endif

#endif
