/* phasectl.h: the phasectl command table and shared helpers. */
#ifndef PHASECTL_H
#define PHASECTL_H

#include <stdio.h>

#include <phased/client.h>

/* Exit statuses. */
#define CTL_OK		0	/* success */
#define CTL_EDAEMON	1	/* the daemon answered with an error */
#define CTL_EUSAGE	2	/* usage or connection error */

struct ctl {
	const char		*socket;	/* -s, or NULL for the default */
	int			 json;		/* --json */
	struct phased_conn	*conn;		/* opened on first use */
};

struct ctl_cmd {
	const char	*words[3];	/* e.g. { "policy", "set" } */
	const char	*args;		/* usage text after the words */
	int		 (*exec)(struct ctl *, int argc, char **argv);
};

/* cmd_daemon.c */
extern const struct ctl_cmd ctl_status_cmd, ctl_reload_cmd, ctl_shutdown_cmd;
/* cmd_model.c */
extern const struct ctl_cmd ctl_load_cmd, ctl_unload_cmd, ctl_models_cmd;
/* cmd_generate.c */
extern const struct ctl_cmd ctl_generate_cmd;
/* Print a generation's final Done as a JSON line. */
void	ctl_print_done_json(const Phased__Done *);
/* cmd_chat.c */
extern const struct ctl_cmd ctl_chat_cmd, ctl_render_cmd;
/* Print a token event as text, JSON, or a line with its log probabilities. */
void	ctl_print_token(struct ctl *, const Phased__TokenEvent *, int logprobs);
/* cmd_policy.c */
extern const struct ctl_cmd ctl_policy_list_cmd, ctl_policy_show_cmd,
	    ctl_policy_set_cmd;
/* cmd_stats.c */
extern const struct ctl_cmd ctl_stats_cmd, ctl_metrics_cmd, ctl_top_cmd,
	    ctl_trace_cmd;
/* cmd_tokenize.c (offline) */
extern const struct ctl_cmd ctl_tokenize_cmd;
/* cmd_bench.c */
extern const struct ctl_cmd ctl_bench_cmd;

/* Connect and say hello on first use; exits with CTL_EUSAGE on failure. */
struct phased_conn *ctl_conn(struct ctl *);
/* Send req and wait for its reply; exits with CTL_EUSAGE on I/O failure. */
Phased__Response *ctl_call(struct ctl *, Phased__Request *);
/*
 * If r is an error, print it (JSON with --json) and return CTL_EDAEMON;
 * otherwise return -1 so the caller goes on.
 */
int	ctl_check_error(struct ctl *, Phased__Response *);
/* Print an error to stderr as "phasectl: ..." and return status. */
int	ctl_fail(int status, const char *, ...)
	    __attribute__((format(printf, 2, 3)));
/* Print a parse error (freeing it) and return the usage exit status. */
int	ctl_fail_cause(char *);
/* Parse a numeric option within [min, max], exiting with a usage error. */
double	ctl_num(const char *opt, const char *v, double min, double max);
/* Print "ok" (or a JSON object) for an Ok reply. */
int	ctl_print_ok(struct ctl *, Phased__Response *);

/* json.c: JSON output helpers. */
void	json_str(FILE *, const char *);
void	json_strn(FILE *, const char *, size_t);

#endif
