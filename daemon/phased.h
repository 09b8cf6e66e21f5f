/* phased.h: the daemon's global state, owned by the control thread. */
#ifndef PHASED_PHASED_H
#define PHASED_PHASED_H

#include <sys/queue.h>

#include <stdint.h>

#include "conf.h"

struct event_base;
struct event;
struct conn;

TAILQ_HEAD(conn_list, conn);

struct daemon {
	struct event_base	*base;
	struct phased_config	 conf;
	char			*conf_path;	/* -f, or NULL for none */
	char			*socket_override; /* -s */
	int			 foreground;
	int			 verbose;
	uint64_t		 start_ns;
	int			 listen_fd;
	int			 lock_fd;
	char			*socket_path;	/* what we bound */
	char			*pidfile;	/* what we wrote */
	struct event		*ev_listen;
	struct event		*ev_signals[4];
	struct event		*ev_shutdown;
	struct conn_list	 conns;
	uint32_t		 n_conns;
	uint64_t		 next_conn_id;
	int			 shutting_down;
};

extern struct daemon *phased;

/* Reload the configuration file; on error the old one stays. */
int	daemon_reload(char **cause);
/* Begin an orderly shutdown: tell clients, flush, exit the loop. */
void	daemon_shutdown(const char *why);

/* control.c: the listening socket. */
int	control_listen(struct daemon *, const char *path, char **cause);
void	control_start(struct daemon *);
void	control_stop(struct daemon *);

#endif
