/* req_policy.c: policy list, show and set requests. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "instance.h"
#include "log.h"
#include "mailbox.h"
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

/* What each PHASED_NOTICE_* bit says, in bit order. */
static const char *const notice_text[] = {
	"ttft target missed: a prompt is queued behind those that can still "
	    "meet theirs",
	"tbt target missed: the decodes alone exceed it",
	"lower-class decodes preempted to hold the tbt target",
	"admission held: waiting requests would break the tbt target",
};

/* Show a model's policy, parameters and counters. */
static void
req_policy_show(struct conn *c, Phased__Request *req)
{
	Phased__Response		 r = PHASED__RESPONSE__INIT;
	Phased__PolicyShowReply		 ps = PHASED__POLICY_SHOW_REPLY__INIT;
	struct instance			*in;
	struct engine_policy_info	 pi;
	char				*params[64], *copy, *tok, *save = NULL;
	char				*notices[8];
	size_t				 n = 0, i, nn = 0;

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
	for (i = 0; i < sizeof notice_text / sizeof notice_text[0]; i++)
		if (pi.report.notices & (1u << i))
			notices[nn++] = (char *)notice_text[i];
	ps.n_notices = nn;
	ps.notices = notices;
	if (pi.report.measured_ns != 0) {
		ps.has_measured_us = 1;
		ps.measured_us = pi.report.measured_ns / 1000;
	}
	if (pi.report.chunk_tokens != 0 || pi.report.target_ns != 0) {
		ps.has_chunk_tokens = ps.has_target_us = ps.has_predicted_us = 1;
		ps.chunk_tokens = pi.report.chunk_tokens;
		ps.target_us = pi.report.target_ns / 1000;
		ps.predicted_us = pi.report.predicted_ns / 1000;
	}
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_POLICY_SHOW;
	r.policy_show = &ps;
	conn_send(c, &r);
	free(copy);
}

/*
 * A policy set in progress: the plugin is loaded and initialised in its
 * policy host by a thread of its own, so the control thread never waits on
 * a plugin (a constructor or init may take up to its deadline).
 */
struct pset_job {
	struct mbox_msg		 m;
	uint64_t		 serial;	/* the connection */
	uint64_t		 req_id;
	char			*model;
	struct engine		*engine;	/* only compared after */
	struct pguard_conf	 conf;
	char			*plugindir;
	char			*name;
	char			**argv;
	size_t			 argc;
	struct guarded		*pol;
	char			*cause;
	int			 reconf;	/* 1: try reconfigure; 2: done */
};

static int	pset_inflight;	/* jobs whose thread has not posted yet */

/* Wait (at most 3 s) for policy loads in progress, before shutdown. */
void
req_policy_wait(void)
{
	int	i;

	for (i = 0; i < 300 && __atomic_load_n(&pset_inflight,
	    __ATOMIC_ACQUIRE) > 0; i++)
		usleep(10000);
}

/* Free a policy set job. */
static void
pset_free(struct pset_job *j)
{
	size_t	i;

	for (i = 0; i < j->argc; i++)
		free(j->argv[i]);
	free(j->argv);
	free(j->model);
	free((char *)j->conf.host);
	free(j->plugindir);
	free(j->name);
	free(j->cause);
	free(j);
}

/* Back on the control thread: stage the policy and answer. */
static void
pset_deliver(struct mbox_msg *m)
{
	struct pset_job	*j = (struct pset_job *)m;
	struct instance	*in = instance_find(j->model);
	struct conn	*c = conn_find(j->serial);

	if (j->reconf == 2) {
		log_info("model %s: policy %s reconfigured", j->model, j->name);
		if (c != NULL)
			conn_send_ok(c, j->req_id, "policy reconfigured (state "
			    "kept)");
		pset_free(j);
		return;
	}
	if (j->pol != NULL && (in == NULL || in->engine != j->engine ||
	    in->state != INST_READY)) {
		pguard_discard(j->pol);
		j->pol = NULL;
		xasprintf(&j->cause, "model %s was unloaded", j->model);
	}
	if (j->pol != NULL) {
		engine_stage_policy(in->engine, j->pol);
		log_info("model %s: policy %s", in->name, j->name);
		if (c != NULL)
			conn_send_ok(c, j->req_id, "policy set");
	} else if (c != NULL)
		conn_send_error(c, j->req_id, PHASED__ERROR_CODE__ERR_INVALID,
		    "policy not set: %s", j->cause);
	pset_free(j);
}

/* The loading thread. */
static void *
pset_main(void *arg)
{
	struct pset_job	*j = arg;
	int		 rc;

	if (j->reconf) {
		/* The engine is held: it outlives this call. */
		rc = engine_reconfigure_policy(j->engine, j->name, j->argc,
		    j->argv, &j->cause);
		engine_release(j->engine);
		if (rc != 1) {
			j->reconf = rc == 0 ? 2 : 0;
			mailbox_post(&j->m);
			__atomic_sub_fetch(&pset_inflight, 1, __ATOMIC_RELEASE);
			return (NULL);
		}
		j->reconf = 0;
	}
	j->pol = pguard_load(&j->conf, j->plugindir, j->name, j->argc,
	    j->argv, &j->cause);
	mailbox_post(&j->m);
	__atomic_sub_fetch(&pset_inflight, 1, __ATOMIC_RELEASE);
	return (NULL);
}

/* Swap a model's policy while it serves. */
static void
req_policy_set(struct conn *c, Phased__Request *req)
{
	Phased__PolicySetRequest	*ps = req->policy_set;
	struct engine_policy_info	 pi;
	struct instance			*in;
	struct pset_job			*j;
	pthread_attr_t			 attr;
	pthread_t			 t;
	char				*cause = NULL;
	size_t				 i;

	if ((in = ready_model(c, req->id, ps->model)) == NULL)
		return;
	if (strcmp(ps->policy, POLICY_BUILTIN) == 0 ||
	    policy_name_valid(ps->policy, NULL) != 0) {
		/* No plugin code: answer at once. */
		if (engine_set_policy(in->engine, phased->conf.plugin_dir,
		    ps->policy, ps->n_params, ps->params, &cause) != 0) {
			conn_send_error(c, req->id,
			    PHASED__ERROR_CODE__ERR_INVALID,
			    "policy not set: %s", cause);
			free(cause);
			return;
		}
		log_info("model %s: policy %s", in->name, ps->policy);
		conn_send_ok(c, req->id, "policy set");
		return;
	}
	j = xcalloc(1, sizeof *j);
	j->m.deliver = pset_deliver;
	j->serial = c->serial;
	j->req_id = req->id;
	j->model = xstrdup(in->name);
	j->engine = in->engine;
	j->conf = *engine_policy_conf(in->engine);
	j->conf.host = xstrdup(j->conf.host != NULL ? j->conf.host : "");
	j->plugindir = xstrdup(phased->conf.plugin_dir);
	j->name = xstrdup(ps->policy);
	j->argc = ps->n_params;
	j->argv = xcalloc(j->argc + 1, sizeof *j->argv);
	for (i = 0; i < j->argc; i++)
		j->argv[i] = xstrdup(ps->params[i]);
	/* The same policy again: new params for it, keeping its state. */
	engine_policy_info(in->engine, &pi);
	if (strcmp(pi.name, ps->policy) == 0) {
		j->reconf = 1;
		engine_hold(in->engine);
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	__atomic_add_fetch(&pset_inflight, 1, __ATOMIC_RELEASE);
	if (pthread_create(&t, &attr, pset_main, j) != 0) {
		if (j->reconf)
			engine_release(in->engine);
		__atomic_sub_fetch(&pset_inflight, 1, __ATOMIC_RELEASE);
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INTERNAL,
		    "policy not set: cannot start a thread");
		pset_free(j);
	}
	pthread_attr_destroy(&attr);
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
