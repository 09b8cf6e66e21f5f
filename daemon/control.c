/* control.c: the listening Unix socket: creation, stale files, accepting. */
#include "config.h"

#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "conn.h"
#include "log.h"
#include "phased.h"
#include "util.h"

/* Create the socket's directory when it is ours to create. */
static int
ensure_dir(const char *path, char **cause)
{
	struct stat	 st;
	char		*copy, *dir;
	int		 rc = 0;

	copy = xstrdup(path);
	dir = dirname(copy);
	if (lstat(dir, &st) == -1) {
		if (errno != ENOENT || mkdir(dir, 0700) == -1) {
			set_cause(cause, "socket directory %s: %s", dir,
			    strerror(errno));
			rc = -1;
		}
	} else if (!S_ISDIR(st.st_mode)) {
		set_cause(cause, "socket directory %s is not a directory", dir);
		rc = -1;
	} else if (st.st_uid != geteuid() && st.st_uid != 0) {
		set_cause(cause, "socket directory %s is owned by uid %u, not "
		    "by us or root", dir, (unsigned)st.st_uid);
		rc = -1;
	} else if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		set_cause(cause, "socket directory %s is world-writable "
		    "without the sticky bit", dir);
		rc = -1;
	}
	free(copy);
	return (rc);
}

/*
 * Check for a daemon already on path: a live one is an error, a stale
 * socket file is removed.  The lock file makes the check and the bind
 * atomic between two daemons starting together.
 */
static int
claim_path(struct daemon *d, const char *path, char **cause)
{
	struct sockaddr_un	 sun;
	struct stat		 st;
	char			*lock;
	int			 fd;

	xasprintf(&lock, "%s.lock", path);
	d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (d->lock_fd == -1) {
		set_cause(cause, "%s: %s", lock, strerror(errno));
		free(lock);
		return (-1);
	}
	if (flock(d->lock_fd, LOCK_EX | LOCK_NB) == -1) {
		set_cause(cause, "another phased is running on %s (%s is "
		    "locked)", path, lock);
		free(lock);
		return (-1);
	}
	free(lock);
	if (lstat(path, &st) == -1)
		return (errno == ENOENT ? 0 : (set_cause(cause, "%s: %s", path,
		    strerror(errno)), -1));
	if (!S_ISSOCK(st.st_mode)) {
		set_cause(cause, "%s exists and is not a socket", path);
		return (-1);
	}
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1) {
		set_cause(cause, "socket: %s", strerror(errno));
		return (-1);
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) == 0) {
		close(fd);
		set_cause(cause, "another phased is running on %s", path);
		return (-1);
	}
	close(fd);
	log_info("removing stale socket %s", path);
	if (unlink(path) == -1) {
		set_cause(cause, "unlink %s: %s", path, strerror(errno));
		return (-1);
	}
	return (0);
}

/* Bind and listen on path with mode 0660 from the first instant. */
int
control_listen(struct daemon *d, const char *path, char **cause)
{
	struct sockaddr_un	 sun;
	mode_t			 old;
	int			 fd, rc;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		set_cause(cause, "socket path %s is too long (limit %zu bytes)",
		    path, sizeof sun.sun_path - 1);
		return (-1);
	}
	strcpy(sun.sun_path, path);
	if (ensure_dir(path, cause) != 0 || claim_path(d, path, cause) != 0)
		return (-1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		set_cause(cause, "socket: %s", strerror(errno));
		return (-1);
	}
	/* No window with wider permissions: the umask applies at bind. */
	old = umask(0117);
	rc = bind(fd, (struct sockaddr *)&sun, sizeof sun);
	umask(old);
	if (rc == -1) {
		set_cause(cause, "bind %s: %s", path, strerror(errno));
		close(fd);
		return (-1);
	}
	if (d->conf.has_socket_gid && chown(path, (uid_t)-1,
	    d->conf.socket_gid) == -1) {
		set_cause(cause, "chown %s to group %s: %s", path,
		    d->conf.socket_group, strerror(errno));
		unlink(path);
		close(fd);
		return (-1);
	}
	if (listen(fd, SOMAXCONN) == -1) {
		set_cause(cause, "listen %s: %s", path, strerror(errno));
		unlink(path);
		close(fd);
		return (-1);
	}
	d->listen_fd = fd;
	d->socket_path = xstrdup(path);
	return (0);
}

/* Accept every pending connection. */
static void
control_accept_cb(evutil_socket_t lfd, short ev, void *arg)
{
	int	fd;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno != EAGAIN && errno != EINTR &&
			    errno != ECONNABORTED)
				log_warn("accept");
			return;
		}
		conn_accept(fd);
	}
}

/* Start accepting clients. */
void
control_start(struct daemon *d)
{
	d->ev_listen = event_new(d->base, d->listen_fd, EV_READ | EV_PERSIST,
	    control_accept_cb, d);
	if (d->ev_listen == NULL || event_add(d->ev_listen, NULL) != 0)
		fatalx("cannot watch the listening socket");
}

/* Stop accepting and remove the socket file. */
void
control_stop(struct daemon *d)
{
	if (d->ev_listen != NULL) {
		event_free(d->ev_listen);
		d->ev_listen = NULL;
	}
	if (d->listen_fd != -1) {
		close(d->listen_fd);
		d->listen_fd = -1;
		if (d->socket_path != NULL)
			unlink(d->socket_path);
	}
}
