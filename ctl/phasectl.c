/* phasectl.c: phasectl(8): options, the command table, shared helpers. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasectl.h"
#include "util.h"

static const struct ctl_cmd *const commands[] = {
	&ctl_status_cmd,
	&ctl_reload_cmd,
	&ctl_shutdown_cmd,
	&ctl_load_cmd,
	&ctl_unload_cmd,
	&ctl_models_cmd,
	&ctl_generate_cmd,
	&ctl_tokenize_cmd,
	&ctl_policy_list_cmd,
	&ctl_policy_show_cmd,
	&ctl_policy_set_cmd,
	&ctl_stats_cmd,
	&ctl_metrics_cmd,
	&ctl_top_cmd,
	&ctl_trace_cmd,
	&ctl_bench_cmd,
	&ctl_chat_cmd,
	&ctl_render_cmd,
};
#define N_COMMANDS	(sizeof commands / sizeof commands[0])

/* Print the usage with every command and exit. */
static void __attribute__((noreturn))
usage(void)
{
	size_t	i;
	int	w;

	fprintf(stderr, "usage: phasectl [-s socket] [--json] command "
	    "[arguments]\ncommands:\n");
	for (i = 0; i < N_COMMANDS; i++) {
		fprintf(stderr, "  ");
		for (w = 0; w < 3 && commands[i]->words[w] != NULL; w++)
			fprintf(stderr, "%s ", commands[i]->words[w]);
		fprintf(stderr, "%s\n", commands[i]->args);
	}
	exit(CTL_EUSAGE);
}

/* Print an error to stderr as "phasectl: ..." and return status. */
int
ctl_fail(int status, const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "phasectl: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	return (status);
}

/* Print a parse error (freeing it) and return the usage exit status. */
int
ctl_fail_cause(char *cause)
{
	ctl_fail(CTL_EUSAGE, "%s", cause);
	free(cause);
	return (CTL_EUSAGE);
}

/* Parse a numeric option within [min, max], exiting with a usage error. */
double
ctl_num(const char *opt, const char *v, double min, double max)
{
	double	 d;
	char	*cause = NULL;

	if (parse_float(v, min, max, &d, opt, &cause) != 0)
		exit(ctl_fail_cause(cause));
	return (d);
}

/* Connect and say hello on first use; exits with CTL_EUSAGE on failure. */
struct phased_conn *
ctl_conn(struct ctl *ctl)
{
	char	err[512];

	if (ctl->conn != NULL)
		return (ctl->conn);
	if ((ctl->conn = phased_connect(ctl->socket, err, sizeof err)) == NULL)
		exit(ctl_fail(CTL_EUSAGE, "%s", err));
	if (phased_hello(ctl->conn, "phasectl", NULL, err, sizeof err) != 0)
		exit(ctl_fail(CTL_EUSAGE, "%s", err));
	return (ctl->conn);
}

/* Send req and wait for its reply; exits with CTL_EUSAGE on I/O failure. */
Phased__Response *
ctl_call(struct ctl *ctl, Phased__Request *req)
{
	Phased__Response	*r;
	char			 err[512];

	if (phased_call(ctl_conn(ctl), req, &r, err, sizeof err) != 0)
		exit(ctl_fail(CTL_EUSAGE, "%s", err));
	return (r);
}

/* Print a daemon error (JSON with --json) and return CTL_EDAEMON, else -1. */
int
ctl_check_error(struct ctl *ctl, Phased__Response *r)
{
	if (r->body_case != PHASED__RESPONSE__BODY_ERROR)
		return (-1);
	if (ctl->json) {
		printf("{\"error\":");
		json_str(stdout, r->error->message);
		printf(",\"code\":");
		json_str(stdout, phased_error_name(r->error->code));
		printf("}\n");
	}
	ctl_fail(0, "%s", r->error->message);
	return (CTL_EDAEMON);
}

/* Print "ok" (or a JSON object) for an Ok reply. */
int
ctl_print_ok(struct ctl *ctl, Phased__Response *r)
{
	int	rc;

	if ((rc = ctl_check_error(ctl, r)) != -1)
		return (rc);
	if (r->body_case != PHASED__RESPONSE__BODY_OK)
		return (ctl_fail(CTL_EDAEMON, "unexpected reply from daemon"));
	if (ctl->json) {
		printf("{\"ok\":true,\"message\":");
		json_str(stdout, r->ok->message);
		printf("}\n");
	} else
		printf("%s\n", r->ok->message != NULL ? r->ok->message : "ok");
	return (CTL_OK);
}

/* Print the words of the candidates that match at word position w. */
static void
list_words(const struct ctl_cmd **cands, size_t n, int w)
{
	size_t	i, j;

	for (i = 0; i < n; i++) {
		for (j = 0; j < i; j++)
			if (strcmp(cands[j]->words[w], cands[i]->words[w]) == 0)
				break;
		if (j == i)
			fprintf(stderr, "%s%s", i ? ", " : "",
			    cands[i]->words[w]);
	}
	fprintf(stderr, "\n");
}

/*
 * Find the command named by argv, accepting unique prefixes of each word;
 * set *used to the number of words consumed.
 */
static const struct ctl_cmd *
find_command(int argc, char **argv, int *used)
{
	const struct ctl_cmd	*cands[N_COMMANDS], *next[N_COMMANDS];
	size_t			 n = 0, m, i, exact;
	int			 w;

	for (i = 0; i < N_COMMANDS; i++)
		cands[n++] = commands[i];
	for (w = 0; w < 3; w++) {
		if (n == 1 && cands[0]->words[w] == NULL)
			break;
		if (w >= argc) {
			fprintf(stderr, "phasectl: %s needs one of: ",
			    argv[w - 1]);
			list_words(cands, n, w);
			exit(CTL_EUSAGE);
		}
		m = 0;
		exact = 0;
		for (i = 0; i < n; i++) {
			if (cands[i]->words[w] == NULL)
				continue;
			if (strncmp(cands[i]->words[w], argv[w],
			    strlen(argv[w])) != 0)
				continue;
			if (strcmp(cands[i]->words[w], argv[w]) == 0)
				exact++;
			next[m++] = cands[i];
		}
		if (exact > 0) {
			/* An exact word wins over longer words it prefixes. */
			for (i = 0, n = 0; i < m; i++)
				if (strcmp(next[i]->words[w], argv[w]) == 0)
					cands[n++] = next[i];
		} else {
			if (m == 0) {
				fprintf(stderr, "phasectl: unknown command "
				    "'%s'; valid: ", argv[w]);
				list_words(cands, n, w);
				exit(CTL_EUSAGE);
			}
			for (i = 1; i < m; i++) {
				if (strcmp(next[i]->words[w],
				    next[0]->words[w]) != 0) {
					fprintf(stderr, "phasectl: ambiguous "
					    "command '%s': ", argv[w]);
					list_words(next, m, w);
					exit(CTL_EUSAGE);
				}
			}
			memcpy(cands, next, m * sizeof *next);
			n = m;
		}
	}
	*used = w;
	return (cands[0]);
}

/* Accept --json anywhere before a "--" argument. */
static void
strip_json(struct ctl *ctl, int *argc, char **argv)
{
	int	i, j;

	for (i = j = 0; i < *argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[j++] = argv[i++];
			break;
		}
		if (strcmp(argv[i], "--json") == 0)
			ctl->json = 1;
		else
			argv[j++] = argv[i];
	}
	*argc = j;
	argv[j] = NULL;
}

/* Parse global options, find the command and run it. */
int
main(int argc, char **argv)
{
	struct ctl		 ctl;
	const struct ctl_cmd	*cmd;
	int			 used, rc;

	memset(&ctl, 0, sizeof ctl);
	argc--;
	argv++;
	while (argc > 0 && argv[0][0] == '-') {
		if (strcmp(argv[0], "-s") == 0 && argc > 1) {
			ctl.socket = argv[1];
			argc -= 2;
			argv += 2;
		} else if (strcmp(argv[0], "--json") == 0 ||
		    strcmp(argv[0], "-j") == 0) {
			ctl.json = 1;
			argc--;
			argv++;
		} else if (strcmp(argv[0], "-h") == 0 ||
		    strcmp(argv[0], "--help") == 0)
			usage();
		else {
			fprintf(stderr, "phasectl: unknown option %s\n",
			    argv[0]);
			usage();
		}
	}
	if (argc == 0)
		usage();
	strip_json(&ctl, &argc, argv);
	cmd = find_command(argc, argv, &used);
	rc = cmd->exec(&ctl, argc - used, argv + used);
	if (ctl.conn != NULL)
		phased_close(ctl.conn);
	return (rc);
}
