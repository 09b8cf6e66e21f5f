/* cmd_daemon.c: phasectl status, reload and shutdown. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "phasectl.h"

/* Print a byte count for people. */
static void
print_size(uint64_t n)
{
	if (n >= (1ULL << 30))
		printf("%.2f GiB", n / (double)(1ULL << 30));
	else if (n >= (1ULL << 20))
		printf("%.1f MiB", n / (double)(1ULL << 20));
	else
		printf("%" PRIu64 " KiB", n >> 10);
}

/* Print one model line of status or models. */
void	ctl_print_model(const Phased__ModelInfo *, int json);
void
ctl_print_model(const Phased__ModelInfo *m, int json)
{
	size_t	i, j;

	if (json) {
		printf("{\"name\":");
		json_str(stdout, m->name);
		printf(",\"arch\":");
		json_str(stdout, m->arch);
		printf(",\"params\":%" PRIu64 ",\"type\":", m->n_params);
		json_str(stdout, m->tensor_type);
		printf(",\"file_size\":%" PRIu64 ",\"ctx\":%u,\"state\":",
		    m->file_size, m->ctx);
		json_str(stdout, m->state);
		printf(",\"path\":");
		json_str(stdout, m->path);
		printf(",\"policy\":");
		json_str(stdout, m->policy);
		printf(",\"chat_template\":");
		json_str(stdout, m->chat_template);
		printf(",\"kv_blocks_total\":%u,\"kv_blocks_used\":%u,"
		    "\"kv_block_size\":%u,\"requests_running\":%u,"
		    "\"requests_waiting\":%u,\"groups\":[",
		    m->kv_blocks_total, m->kv_blocks_used, m->kv_block_size,
		    m->requests_running, m->requests_waiting);
		for (i = 0; i < m->n_groups; i++) {
			printf("%s{\"name\":", i ? "," : "");
			json_str(stdout, m->groups[i]->name);
			printf(",\"role\":");
			json_str(stdout, m->groups[i]->role);
			printf(",\"devices\":");
			json_str(stdout, m->groups[i]->devices);
			printf(",\"memory_bytes\":%" PRIu64 ",\"kv_blocks_total\":%u,"
			    "\"kv_blocks_used\":%u,\"weight_bytes\":[",
			    m->groups[i]->memory_bytes,
			    m->groups[i]->kv_blocks_total,
			    m->groups[i]->kv_blocks_used);
			for (j = 0; j < m->groups[i]->n_weight_bytes; j++)
				printf("%s%" PRIu64, j ? "," : "",
				    m->groups[i]->weight_bytes[j]);
			printf("]}");
		}
		printf("]}");
		return;
	}
	printf("%-16s %-8s %7.1fM %-7s ", m->name, m->arch,
	    m->n_params / 1e6, m->tensor_type);
	print_size(m->file_size);
	printf("  ctx %u  %s  policy %s  kv %u/%u  run %u wait %u", m->ctx,
	    m->state, m->policy != NULL ? m->policy : "-", m->kv_blocks_used,
	    m->kv_blocks_total, m->requests_running, m->requests_waiting);
	printf("  template %s\n", m->chat_template != NULL ?
	    m->chat_template : "-");
	for (i = 0; i < m->n_groups; i++) {
		printf("  group %s: %s on %s, kv %u/%u", m->groups[i]->name,
		    m->groups[i]->role, m->groups[i]->devices,
		    m->groups[i]->kv_blocks_used, m->groups[i]->kv_blocks_total);
		if (m->groups[i]->memory_bytes != 0) {
			printf(", memory ");
			print_size(m->groups[i]->memory_bytes);
		}
		/* The weights on each device of a GPU group, in order. */
		for (j = 0; j < m->groups[i]->n_weight_bytes; j++) {
			printf("%s", j == 0 ? ", weights per device " : " / ");
			print_size(m->groups[i]->weight_bytes[j]);
		}
		printf("\n");
	}
}

/* phasectl status */
static int
cmd_status(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__StatusRequest	 st = PHASED__STATUS_REQUEST__INIT;
	Phased__Response	*r;
	Phased__StatusReply	*s;
	size_t			 i;
	int			 rc;

	if (argc != 0)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl status"));
	req.body_case = PHASED__REQUEST__BODY_STATUS;
	req.status = &st;
	r = ctl_call(ctl, &req);
	if ((rc = ctl_check_error(ctl, r)) != -1)
		goto out;
	rc = CTL_OK;
	s = r->status;
	if (ctl->json) {
		printf("{\"version\":");
		json_str(stdout, s->version);
		printf(",\"uptime_ms\":%" PRIu64 ",\"pid\":%u,"
		    "\"connections\":%u,\"socket\":", s->uptime_ms, s->pid,
		    s->connections);
		json_str(stdout, s->socket);
		printf(",\"config\":");
		json_str(stdout, s->config);
		printf(",\"models\":[");
		for (i = 0; i < s->n_models; i++) {
			if (i)
				printf(",");
			ctl_print_model(s->models[i], 1);
		}
		printf("]}\n");
		goto out;
	}
	printf("phased %s, pid %u, up %" PRIu64 ".%03" PRIu64 " s, "
	    "%u connection%s\n", s->version, s->pid, s->uptime_ms / 1000,
	    s->uptime_ms % 1000, s->connections, s->connections == 1 ? "" : "s");
	printf("socket %s, config %s\n", s->socket != NULL ? s->socket : "-",
	    s->config != NULL ? s->config : "(none)");
	printf("%zu model%s loaded\n", s->n_models, s->n_models == 1 ? "" : "s");
	for (i = 0; i < s->n_models; i++)
		ctl_print_model(s->models[i], 0);
out:
	phased_response_free(r);
	return (rc);
}

/* Send a request without arguments and print its Ok reply. */
static int
simple_request(struct ctl *ctl, Phased__Request__BodyCase body, void *msg)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__Response	*r;
	int			 rc;

	req.body_case = body;
	/* Every body member of the oneof shares one pointer slot. */
	req.status = msg;
	r = ctl_call(ctl, &req);
	rc = ctl_print_ok(ctl, r);
	phased_response_free(r);
	return (rc);
}

/* phasectl reload */
static int
cmd_reload(struct ctl *ctl, int argc, char **argv)
{
	Phased__ReloadRequest	m = PHASED__RELOAD_REQUEST__INIT;

	if (argc != 0)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl reload"));
	return (simple_request(ctl, PHASED__REQUEST__BODY_RELOAD, &m));
}

/* phasectl shutdown */
static int
cmd_shutdown(struct ctl *ctl, int argc, char **argv)
{
	Phased__ShutdownRequest	m = PHASED__SHUTDOWN_REQUEST__INIT;

	if (argc != 0)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl shutdown"));
	return (simple_request(ctl, PHASED__REQUEST__BODY_SHUTDOWN, &m));
}

const struct ctl_cmd ctl_status_cmd = {
	.words = { "status" },
	.args = "",
	.exec = cmd_status,
};
const struct ctl_cmd ctl_reload_cmd = {
	.words = { "reload" },
	.args = "",
	.exec = cmd_reload,
};
const struct ctl_cmd ctl_shutdown_cmd = {
	.words = { "shutdown" },
	.args = "",
	.exec = cmd_shutdown,
};
