/*
 * fuzz-daemon.c: what daemon/main.c gives the rest of phased, for the fuzz
 * targets that link the daemon's objects without its main: no daemon runs,
 * so nothing may reload or shut it down.
 */
#include "config.h"

#include <stdlib.h>

#include "phased.h"
#include "util.h"

struct daemon	*phased;

/* There is no configuration to reload. */
int
daemon_reload(char **cause)
{
	set_cause(cause, "no daemon to reload");
	return (-1);
}

/* No request may get this far in a fuzz target. */
void
daemon_shutdown(const char *why)
{
	abort();
}
