/* req_daemon.c: hello, cancel, status, reload and shutdown requests. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <phased/client.h>

#include "conn.h"
#include "log.h"
#include "phased.h"
#include "instance.h"
#include "req.h"
#include "util.h"

/* Exchange protocol versions. */
static void
req_hello(struct conn *c, Phased__Request *req)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__HelloReply	 h = PHASED__HELLO_REPLY__INIT;

	if (req->hello->protocol_version != PHASED_PROTOCOL_VERSION) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_VERSION,
		    "protocol version mismatch: client speaks %u, daemon %u",
		    req->hello->protocol_version, PHASED_PROTOCOL_VERSION);
		return;
	}
	h.protocol_version = PHASED_PROTOCOL_VERSION;
	h.version = (char *)PACKAGE_VERSION;
	h.has_admin = 1;
	h.admin = c->admin;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_HELLO;
	r.hello = &h;
	conn_send(c, &r);
}

/* Cancel one of this connection's requests by id. */
static void
req_cancel(struct conn *c, Phased__Request *req)
{
	struct stream	*s;

	if ((s = stream_find(c, req->cancel->target)) == NULL) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "no request %llu in flight on this connection",
		    (unsigned long long)req->cancel->target);
		return;
	}
	if (s->cancel != NULL)
		s->cancel(s, "cancelled by client");
	conn_send_ok(c, req->id, "cancelled");
}

/* Report version, uptime, pid, connections and loaded models. */
static void
req_status(struct conn *c, Phased__Request *req)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__StatusReply	 st = PHASED__STATUS_REPLY__INIT;
	struct inst_infos	 infos;

	st.version = (char *)PACKAGE_VERSION;
	st.uptime_ms = (now_ns() - phased->start_ns) / 1000000;
	st.pid = (uint32_t)getpid();
	st.connections = phased->n_conns;
	st.socket = phased->socket_path;
	st.config = phased->conf_path;
	instance_infos(&infos);
	st.n_models = infos.n;
	st.models = infos.ptrs;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_STATUS;
	r.status = &st;
	conn_send(c, &r);
	instance_infos_free(&infos);
}

/* Reload the configuration; a bad file leaves the old one in force. */
static void
req_reload(struct conn *c, Phased__Request *req)
{
	char	*cause = NULL;

	if (daemon_reload(&cause) != 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "reload failed, old configuration kept: %s", cause);
		free(cause);
		return;
	}
	conn_send_ok(c, req->id, "configuration reloaded");
}

/* Shut the daemon down after acknowledging. */
static void
req_shutdown(struct conn *c, Phased__Request *req)
{
	conn_send_ok(c, req->id, "shutting down");
	daemon_shutdown("shutdown requested");
}

const struct req_entry req_hello_entry = {
	.name = "hello",
	.body = PHASED__REQUEST__BODY_HELLO,
	.admin = 0,
	.exec = req_hello,
};
const struct req_entry req_cancel_entry = {
	.name = "cancel",
	.body = PHASED__REQUEST__BODY_CANCEL,
	.admin = 0,
	.exec = req_cancel,
};
const struct req_entry req_status_entry = {
	.name = "status",
	.body = PHASED__REQUEST__BODY_STATUS,
	.admin = 0,
	.exec = req_status,
};
const struct req_entry req_reload_entry = {
	.name = "reload",
	.body = PHASED__REQUEST__BODY_RELOAD,
	.admin = 1,
	.exec = req_reload,
};
const struct req_entry req_shutdown_entry = {
	.name = "shutdown",
	.body = PHASED__REQUEST__BODY_SHUTDOWN,
	.admin = 1,
	.exec = req_shutdown,
};
