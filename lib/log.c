/* log.c: daemon logging to stderr (foreground) or syslog (daemonized). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "log.h"

static int log_foreground = 1;
/* Read by every thread; a reload changes it on the control thread. */
static int log_verbose;
static const char *log_ident = "phased";
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* Choose stderr or syslog and the verbosity. */
void
log_init(int foreground, int verbose, const char *ident)
{
	log_foreground = foreground;
	log_verbose = verbose;
	log_ident = ident;
	if (!foreground)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	tzset();
}

/* Change the verbosity (a reload may change it). */
void
log_setverbose(int verbose)
{
	__atomic_store_n(&log_verbose, verbose, __ATOMIC_RELAXED);
}

/* Write one message at a syslog priority, with an optional errno suffix. */
static void
vlog(int pri, int errnum, const char *fmt, va_list ap)
{
	char	msg[2048];
	int	n;

	n = vsnprintf(msg, sizeof msg, fmt, ap);
	if (n < 0)
		return;
	if (errnum != 0 && (size_t)n < sizeof msg)
		snprintf(msg + n, sizeof msg - n, ": %s", strerror(errnum));
	if (log_foreground) {
		pthread_mutex_lock(&log_lock);
		fprintf(stderr, "%s: %s\n", log_ident, msg);
		fflush(stderr);
		pthread_mutex_unlock(&log_lock);
	} else
		syslog(pri, "%s", msg);
}

/* Log a warning with the current errno appended. */
void
log_warn(const char *fmt, ...)
{
	va_list	ap;
	int	saved = errno;

	va_start(ap, fmt);
	vlog(LOG_WARNING, saved, fmt, ap);
	va_end(ap);
	errno = saved;
}

/* Log a warning. */
void
log_warnx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vlog(LOG_WARNING, 0, fmt, ap);
	va_end(ap);
}

/* Log an informational message. */
void
log_info(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vlog(LOG_INFO, 0, fmt, ap);
	va_end(ap);
}

/* Log a debug message when running verbosely. */
void
log_debug(const char *fmt, ...)
{
	va_list	ap;

	if (__atomic_load_n(&log_verbose, __ATOMIC_RELAXED) < 1)
		return;
	va_start(ap, fmt);
	vlog(LOG_DEBUG, 0, fmt, ap);
	va_end(ap);
}

/* Log with errno and exit. */
void
fatal(const char *fmt, ...)
{
	va_list	ap;
	int	saved = errno;

	va_start(ap, fmt);
	vlog(LOG_CRIT, saved, fmt, ap);
	va_end(ap);
	exit(1);
}

/* Log and exit. */
void
fatalx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, 0, fmt, ap);
	va_end(ap);
	exit(1);
}
