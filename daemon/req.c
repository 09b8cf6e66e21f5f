/* req.c: the request table and permission checks. */
#include "config.h"

#include <stddef.h>

#include "conn.h"
#include "log.h"
#include "req.h"

static const struct req_entry *const req_table[] = {
	&req_hello_entry,
	&req_cancel_entry,
	&req_status_entry,
	&req_reload_entry,
	&req_shutdown_entry,
	&req_load_entry,
	&req_unload_entry,
	&req_models_entry,
	&req_generate_entry,
	&req_policy_list_entry,
	&req_policy_show_entry,
	&req_policy_set_entry,
	&req_stats_entry,
	&req_metrics_entry,
	&req_trace_entry,
	&req_chat_entry,
	&req_render_entry,
	&req_tokenize_entry,
	&req_detokenize_entry,
};

/* Find the entry for a request body, or NULL. */
const struct req_entry *
req_lookup(Phased__Request__BodyCase body)
{
	size_t	i;

	for (i = 0; i < sizeof req_table / sizeof req_table[0]; i++)
		if (req_table[i]->body == body)
			return (req_table[i]);
	return (NULL);
}

/* Check permission and run a decoded request. */
void
req_dispatch(struct conn *c, Phased__Request *req)
{
	const struct req_entry	*e = req_lookup(req->body_case);

	if (e->admin && !c->admin) {
		log_info("uid %u denied %s", (unsigned)c->uid, e->name);
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_PERMISSION,
		    "permission denied: %s requires admin (uid 0, the "
		    "daemon's user or the admin group)", e->name);
		return;
	}
	log_debug("connection %llu: %s request %llu",
	    (unsigned long long)c->serial, e->name,
	    (unsigned long long)req->id);
	e->exec(c, req);
}
