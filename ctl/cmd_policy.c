/* cmd_policy.c: phasectl policy list, show and set. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include "phasectl.h"

/* phasectl policy list */
static int
cmd_policy_list(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request			 req = PHASED__REQUEST__INIT;
	Phased__PolicyListRequest	 pl = PHASED__POLICY_LIST_REQUEST__INIT;
	Phased__Response		*r;
	Phased__PolicyListReply		*l;
	size_t				 i;
	int				 rc;

	if (argc != 0)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl policy list"));
	req.body_case = PHASED__REQUEST__BODY_POLICY_LIST;
	req.policy_list = &pl;
	r = ctl_call(ctl, &req);
	if ((rc = ctl_check_error(ctl, r)) != -1)
		goto out;
	rc = CTL_OK;
	l = r->policy_list;
	if (ctl->json)
		printf("{\"plugin_dir\":");
	if (ctl->json) {
		json_str(stdout, l->plugin_dir);
		printf(",\"policies\":[");
	}
	for (i = 0; i < l->n_policies; i++) {
		if (ctl->json) {
			printf("%s{\"name\":", i ? "," : "");
			json_str(stdout, l->policies[i]->name);
			printf(",\"description\":");
			json_str(stdout, l->policies[i]->description);
			printf("}");
		} else
			printf("%-18s %s\n", l->policies[i]->name,
			    l->policies[i]->description != NULL ?
			    l->policies[i]->description : "");
	}
	if (ctl->json)
		printf("]}\n");
out:
	phased_response_free(r);
	return (rc);
}

/* phasectl policy show MODEL */
static int
cmd_policy_show(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request			 req = PHASED__REQUEST__INIT;
	Phased__PolicyShowRequest	 ps = PHASED__POLICY_SHOW_REQUEST__INIT;
	Phased__Response		*r;
	Phased__PolicyShowReply		*s;
	size_t				 i;
	int				 rc;

	if (argc != 1)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl policy show MODEL"));
	ps.model = argv[0];
	req.body_case = PHASED__REQUEST__BODY_POLICY_SHOW;
	req.policy_show = &ps;
	r = ctl_call(ctl, &req);
	if ((rc = ctl_check_error(ctl, r)) != -1)
		goto out;
	rc = CTL_OK;
	s = r->policy_show;
	if (ctl->json) {
		printf("{\"model\":");
		json_str(stdout, s->model);
		printf(",\"policy\":");
		json_str(stdout, s->policy);
		printf(",\"params\":[");
		for (i = 0; i < s->n_params; i++) {
			printf("%s", i ? "," : "");
			json_str(stdout, s->params[i]);
		}
		printf("],\"plans\":%" PRIu64 ",\"plan_errors\":%" PRIu64
		    ",\"swaps\":%" PRIu64 ",\"last_error\":", s->plans,
		    s->plan_errors, s->swaps);
		json_str(stdout, s->last_error);
		printf(",\"ejected\":");
		json_str(stdout, s->ejected);
		if (s->has_chunk_tokens)
			printf(",\"chunk_tokens\":%u,\"target_ms\":%.3f,"
			    "\"predicted_ms\":%.3f", s->chunk_tokens,
			    s->target_us / 1e3, s->predicted_us / 1e3);
		if (s->has_measured_us)
			printf(",\"measured_ms\":%.3f", s->measured_us / 1e3);
		printf(",\"notices\":[");
		for (i = 0; i < s->n_notices; i++) {
			printf("%s", i ? "," : "");
			json_str(stdout, s->notices[i]);
		}
		printf("]}\n");
		goto out;
	}
	printf("model %s: policy %s", s->model, s->policy);
	for (i = 0; i < s->n_params; i++)
		printf(" %s", s->params[i]);
	printf("\nplans %" PRIu64 ", plan errors %" PRIu64 ", swaps %" PRIu64
	    "\n", s->plans, s->plan_errors, s->swaps);
	if (s->last_error != NULL)
		printf("last plan error: %s\n", s->last_error);
	if (s->ejected != NULL)
		printf("%s\n", s->ejected);
	if (s->has_chunk_tokens)
		printf("last iteration: chunk %u tokens, target %.1f ms, "
		    "predicted %.1f ms", s->chunk_tokens, s->target_us / 1e3,
		    s->predicted_us / 1e3);
	else if (s->has_measured_us)
		printf("last iteration:");
	if (s->has_measured_us)
		printf("%s measured %.1f ms", s->has_chunk_tokens ? "," : "",
		    s->measured_us / 1e3);
	if (s->has_chunk_tokens || s->has_measured_us)
		printf("\n");
	for (i = 0; i < s->n_notices; i++)
		printf("notice: %s\n", s->notices[i]);
out:
	phased_response_free(r);
	return (rc);
}

/* phasectl policy set MODEL POLICY [key=value ...] */
static int
cmd_policy_set(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request			 req = PHASED__REQUEST__INIT;
	Phased__PolicySetRequest	 ps = PHASED__POLICY_SET_REQUEST__INIT;
	Phased__Response		*r;
	int				 rc;

	if (argc < 2)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl policy set MODEL "
		    "POLICY [key=value ...]"));
	ps.model = argv[0];
	ps.policy = argv[1];
	ps.n_params = (size_t)(argc - 2);
	ps.params = argv + 2;
	req.body_case = PHASED__REQUEST__BODY_POLICY_SET;
	req.policy_set = &ps;
	r = ctl_call(ctl, &req);
	rc = ctl_print_ok(ctl, r);
	phased_response_free(r);
	return (rc);
}

const struct ctl_cmd ctl_policy_list_cmd = {
	.words = { "policy", "list" },
	.args = "",
	.exec = cmd_policy_list,
};
const struct ctl_cmd ctl_policy_show_cmd = {
	.words = { "policy", "show" },
	.args = "MODEL",
	.exec = cmd_policy_show,
};
const struct ctl_cmd ctl_policy_set_cmd = {
	.words = { "policy", "set" },
	.args = "MODEL POLICY [key=value ...]",
	.exec = cmd_policy_set,
};
