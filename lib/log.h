/* log.h: daemon logging to stderr (foreground) or syslog (daemonized). */
#ifndef PHASED_LOG_H
#define PHASED_LOG_H

#include <stdarg.h>

void	log_init(int foreground, int verbose, const char *ident);
void	log_setverbose(int verbose);
void	log_warn(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_warnx(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_info(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_debug(const char *, ...) __attribute__((format(printf, 1, 2)));
void	fatal(const char *, ...) __attribute__((format(printf, 1, 2), noreturn));
void	fatalx(const char *, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
