/* req.h: the request table; one file per request family. */
#ifndef PHASED_REQ_H
#define PHASED_REQ_H

#include <phased/phased.pb-c.h>

struct conn;

struct req_entry {
	const char			*name;
	Phased__Request__BodyCase	 body;
	int				 admin;	/* needs an admin peer */
	void				(*exec)(struct conn *, Phased__Request *);
};

/* req_daemon.c */
extern const struct req_entry req_hello_entry;
extern const struct req_entry req_cancel_entry;
extern const struct req_entry req_status_entry;
extern const struct req_entry req_reload_entry;
extern const struct req_entry req_shutdown_entry;
/* req_model.c */
extern const struct req_entry req_load_entry;
extern const struct req_entry req_unload_entry;
extern const struct req_entry req_models_entry;
/* req_generate.c */
extern const struct req_entry req_generate_entry;
/* req_chat.c */
extern const struct req_entry req_chat_entry;
extern const struct req_entry req_render_entry;
extern const struct req_entry req_tokenize_entry;
extern const struct req_entry req_detokenize_entry;
/* req_policy.c */
extern const struct req_entry req_policy_list_entry;
extern const struct req_entry req_policy_show_entry;
extern const struct req_entry req_policy_set_entry;
/* Wait (at most 3 s) for policy loads in progress, before shutdown. */
void	req_policy_wait(void);
/* req_stats.c */
extern const struct req_entry req_stats_entry;
extern const struct req_entry req_metrics_entry;
extern const struct req_entry req_trace_entry;

/* Find the entry for a request body, or NULL. */
const struct req_entry *req_lookup(Phased__Request__BodyCase);
/* Check permission and run a decoded request. */
void	req_dispatch(struct conn *, Phased__Request *);

#endif
