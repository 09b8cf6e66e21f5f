/* cmd_model.c: phasectl load, unload and models. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasectl.h"

void	ctl_print_model(const Phased__ModelInfo *, int json);

/* phasectl load NAME PATH [key=value ...] */
static int
cmd_load(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__LoadRequest	 lr = PHASED__LOAD_REQUEST__INIT;
	Phased__Response	*r;
	char			 path[PATH_MAX], err[512];
	int			 rc, tty = isatty(STDERR_FILENO);

	if (argc < 2)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl load NAME PATH "
		    "[key=value ...]"));
	/* The daemon runs in /: send it an absolute path. */
	if (realpath(argv[1], path) == NULL)
		return (ctl_fail(CTL_EUSAGE, "%s: %s", argv[1],
		    strerror(errno)));
	lr.name = argv[0];
	lr.path = path;
	lr.n_options = (size_t)(argc - 2);
	lr.options = argv + 2;
	req.body_case = PHASED__REQUEST__BODY_LOAD;
	req.load = &lr;
	req.id = phased_next_id(ctl_conn(ctl));
	if (phased_send(ctl->conn, &req, err, sizeof err) != 0)
		return (ctl_fail(CTL_EUSAGE, "%s", err));
	for (;;) {
		if (phased_recv(ctl->conn, &r, err, sizeof err) != 0)
			return (ctl_fail(CTL_EUSAGE, "%s", err));
		if (r->id != req.id) {
			phased_response_free(r);
			continue;
		}
		if (r->body_case != PHASED__RESPONSE__BODY_LOAD_PROGRESS)
			break;
		if (ctl->json)
			printf("{\"progress\":%.3f}\n", r->load_progress->fraction);
		else if (tty)
			fprintf(stderr, "\rloading %s: %3.0f%%", argv[0],
			    r->load_progress->fraction * 100.0);
		fflush(stdout);
		phased_response_free(r);
	}
	if (tty && !ctl->json)
		fprintf(stderr, "\r\033[K");
	rc = ctl_print_ok(ctl, r);
	phased_response_free(r);
	return (rc);
}

/* phasectl unload NAME */
static int
cmd_unload(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__UnloadRequest	 ur = PHASED__UNLOAD_REQUEST__INIT;
	Phased__Response	*r;
	int			 rc;

	if (argc != 1)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl unload NAME"));
	ur.name = argv[0];
	req.body_case = PHASED__REQUEST__BODY_UNLOAD;
	req.unload = &ur;
	r = ctl_call(ctl, &req);
	rc = ctl_print_ok(ctl, r);
	phased_response_free(r);
	return (rc);
}

/* phasectl models */
static int
cmd_models(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__ModelsRequest	 mr = PHASED__MODELS_REQUEST__INIT;
	Phased__Response	*r;
	size_t			 i;
	int			 rc;

	if (argc != 0)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl models"));
	req.body_case = PHASED__REQUEST__BODY_MODELS;
	req.models = &mr;
	r = ctl_call(ctl, &req);
	if ((rc = ctl_check_error(ctl, r)) != -1) {
		phased_response_free(r);
		return (rc);
	}
	if (ctl->json)
		printf("[");
	else if (r->models->n_models == 0)
		printf("no models loaded\n");
	else
		printf("%-16s %-8s %8s %-7s %s\n", "NAME", "ARCH", "PARAMS",
		    "TYPE", "SIZE");
	for (i = 0; i < r->models->n_models; i++) {
		if (ctl->json && i > 0)
			printf(",");
		ctl_print_model(r->models->models[i], ctl->json);
	}
	if (ctl->json)
		printf("]\n");
	phased_response_free(r);
	return (CTL_OK);
}

const struct ctl_cmd ctl_load_cmd = {
	.words = { "load" },
	.args = "NAME PATH [ctx=N] [threads=N] [kv=f16|f32] [policy=NAME] ...",
	.exec = cmd_load,
};
const struct ctl_cmd ctl_unload_cmd = {
	.words = { "unload" },
	.args = "NAME",
	.exec = cmd_unload,
};
const struct ctl_cmd ctl_models_cmd = {
	.words = { "models" },
	.args = "",
	.exec = cmd_models,
};
