/* conf.h: phased.conf(5), parsed into struct phased_config. */
#ifndef PHASED_CONF_H
#define PHASED_CONF_H

#include <sys/types.h>

#include <stdint.h>

struct config_model {
	char	 *name;
	char	 *path;
	char	**options;	/* key=value, as for phasectl load */
	int	  n_options;
	int	  line;
};

/* A user-weight line: the share of a user under fair scheduling. */
struct config_weight {
	uint32_t uid;		/* PHASED_UID_NETWORK: HTTP over TCP */
	uint32_t weight;	/* 1..1000 */
};

/* bf16-dot: which weights may take bf16 dot products. */
#define BF16_DOT_NO	0	/* none: exact */
#define BF16_DOT_YES	1	/* F16 and BF16 */
#define BF16_DOT_AUTO	2	/* BF16 where the CPU makes it pay */

struct phased_config {
	char		*path;		/* the file it came from, or NULL */
	char		*socket;
	char		*socket_group;	/* NULL: the daemon's group */
	gid_t		 socket_gid;
	int		 has_socket_gid;
	char		*admin_group;	/* NULL: none */
	gid_t		 admin_gid;
	int		 has_admin_gid;
	char		*plugin_dir;
	char		*pidfile;
	uint32_t	 max_connections;
	uint32_t	 max_frame;
	uint32_t	 max_requests;	/* in flight per connection */
	uint64_t	 max_output;	/* queued reply bytes per connection */
	uint32_t	 max_waiting;	/* waiting queue per model */
	int		 threads;	/* default threads per model, 0 = cores */
	int		 bf16_dot;	/* BF16_DOT_*: bf16 dot products allowed */
	char		*default_policy;
	char		*http_socket;	/* NULL: beside socket; "none": off */
	char		*http_listen;	/* HOST:PORT, NULL: no TCP */
	char		*http_api_key;	/* NULL: none */
	uint64_t	 http_max_body;
	uint32_t	 http_timeout;	/* seconds a client may stall */
	uint64_t	 model_memory_limit; /* 0: none */
	int		 policy_isolation; /* policies in host processes */
	uint32_t	 policy_deadline_ms; /* 0: automatic */
	char		*policy_host;	/* NULL: found next to phased */
	struct config_model *models;
	int		 n_models;
	struct config_weight *weights;	/* user-weight lines */
	int		 n_weights;
};

/* Fill a configuration with the built-in defaults. */
void	 config_defaults(struct phased_config *);
/* Parse a file on top of the defaults; -1 with "FILE:LINE: ..." in *cause. */
int	 config_load(const char *path, struct phased_config *, char **cause);
/* Free everything a configuration holds. */
void	 config_free(struct phased_config *);
/* The user-weight of uid, 1 when none is configured. */
uint32_t config_user_weight(const struct phased_config *, uint32_t uid);

#endif
