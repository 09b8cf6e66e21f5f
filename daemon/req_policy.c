/* req_policy.c: policy list, show and set requests. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "instance.h"
#include "log.h"
#include "phased.h"
#include "policy_guard.h"
#include "req.h"
#include "util.h"

/* List the plugins in the plugin directory. */
static void
req_policy_list(struct conn *c, Phased__Request *req)
{
	Phased__Response	  r = PHASED__RESPONSE__INIT;
	Phased__PolicyListReply	  pl = PHASED__POLICY_LIST_REPLY__INIT;
	Phased__PolicyEntry	 *ents, **ptrs;
	struct policy_info	 *list;
	size_t			  n, i;
	char			 *cause = NULL;

	/* Loading runs a plugin's constructors: do it in a policy host. */
	if ((phased->conf.policy_isolation ? pguard_list(instance_policy_host(),
	    phased->conf.plugin_dir, &list, &n, &cause) :
	    policy_list(phased->conf.plugin_dir, &list, &n, &cause)) != 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "%s", cause);
		free(cause);
		return;
	}
	ents = xcalloc(n + 1, sizeof *ents);
	ptrs = xcalloc(n + 1, sizeof *ptrs);
	for (i = 0; i < n; i++) {
		phased__policy_entry__init(&ents[i]);
		ents[i].name = list[i].name;
		ents[i].description = list[i].describe != NULL ?
		    list[i].describe : list[i].error;
		ptrs[i] = &ents[i];
	}
	pl.n_policies = n;
	pl.policies = ptrs;
	pl.plugin_dir = phased->conf.plugin_dir;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_POLICY_LIST;
	r.policy_list = &pl;
	conn_send(c, &r);
	free(ents);
	free(ptrs);
	policy_list_free(list, n);
}

/* Find a ready model for a policy request, or reply with an error. */
static struct instance *
ready_model(struct conn *c, uint64_t id, const char *name)
{
	struct instance	*in;

	if ((in = instance_find(name)) == NULL) {
		conn_send_error(c, id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "no model %s", name);
		return (NULL);
	}
	if (in->state != INST_READY) {
		conn_send_error(c, id, PHASED__ERROR_CODE__ERR_INVALID,
		    "model %s is still loading", name);
		return (NULL);
	}
	return (in);
}

/* Show a model's policy, parameters and counters. */
static void
req_policy_show(struct conn *c, Phased__Request *req)
{
	Phased__Response		 r = PHASED__RESPONSE__INIT;
	Phased__PolicyShowReply		 ps = PHASED__POLICY_SHOW_REPLY__INIT;
	struct instance			*in;
	struct engine_policy_info	 pi;
	char				*params[64], *copy, *tok, *save = NULL;
	size_t				 n = 0;

	if ((in = ready_model(c, req->id, req->policy_show->model)) == NULL)
		return;
	engine_policy_info(in->engine, &pi);
	copy = xstrdup(pi.params);
	for (tok = strtok_r(copy, " ", &save); tok != NULL && n < 64;
	    tok = strtok_r(NULL, " ", &save))
		params[n++] = tok;
	ps.model = in->name;
	ps.policy = pi.name;
	ps.n_params = n;
	ps.params = params;
	ps.plans = pi.plans;
	ps.plan_errors = pi.plan_errors;
	ps.swaps = pi.swaps;
	ps.last_error = pi.last_error[0] != '\0' ? pi.last_error : NULL;
	ps.ejected = pi.ejected[0] != '\0' ? pi.ejected : NULL;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_POLICY_SHOW;
	r.policy_show = &ps;
	conn_send(c, &r);
	free(copy);
}

/* Swap a model's policy while it serves. */
static void
req_policy_set(struct conn *c, Phased__Request *req)
{
	Phased__PolicySetRequest	*ps = req->policy_set;
	struct instance			*in;
	char				*cause = NULL;

	if ((in = ready_model(c, req->id, ps->model)) == NULL)
		return;
	if (engine_set_policy(in->engine, phased->conf.plugin_dir, ps->policy,
	    ps->n_params, ps->params, &cause) != 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "policy not set: %s", cause);
		free(cause);
		return;
	}
	log_info("model %s: policy %s", in->name, ps->policy);
	conn_send_ok(c, req->id, "policy set");
}

const struct req_entry req_policy_list_entry = {
	.name = "policy list",
	.body = PHASED__REQUEST__BODY_POLICY_LIST,
	.admin = 0,
	.exec = req_policy_list,
};
const struct req_entry req_policy_show_entry = {
	.name = "policy show",
	.body = PHASED__REQUEST__BODY_POLICY_SHOW,
	.admin = 0,
	.exec = req_policy_show,
};
const struct req_entry req_policy_set_entry = {
	.name = "policy set",
	.body = PHASED__REQUEST__BODY_POLICY_SET,
	.admin = 1,
	.exec = req_policy_set,
};
