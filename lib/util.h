/* util.h: allocation that cannot fail, and error strings ("causes"). */
#ifndef PHASED_UTIL_H
#define PHASED_UTIL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Functions that can fail take a "char **cause" and, on failure, return -1
 * (or NULL) and set *cause to a malloc'd lowercase message without a
 * trailing period naming what was wrong and the limit it broke; the caller
 * frees it.  The x* allocators abort on exhaustion: use them only for sizes
 * that were already checked (never for sizes read from a file or a peer
 * before they are checked).
 */
void	*xmalloc(size_t);
void	*xcalloc(size_t, size_t);
void	*xreallocarray(void *, size_t, size_t);
char	*xstrdup(const char *);
char	*xstrndup(const char *, size_t);
int	 xasprintf(char **, const char *, ...) __attribute__((format(printf, 2, 3)));
void	 set_cause(char **cause, const char *, ...) __attribute__((format(printf, 2, 3)));

/* Monotonic time in nanoseconds. */
uint64_t now_ns(void);

/* Parse a size with an optional K/M/G suffix; -1 and *cause on error. */
int	 parse_size(const char *, uint64_t *, char **cause);
/* Parse an integer in [min, max]; -1 and *cause naming `what` on error. */
int	 parse_int(const char *, long long, long long, long long *, const char *what, char **cause);
/* Parse a finite float in [min, max]; -1 and *cause naming `what` on error. */
int	 parse_float(const char *, double, double, double *, const char *what, char **cause);

/*
 * Check the name of a thing (what: "policy", "model"): 1 to NAME_MAX_LEN
 * bytes of letters, digits, '-' and '_' (and '.' when dots is set), no
 * leading '.', so that a name never reaches outside a directory.
 */
#define NAME_MAX_LEN	64
int	 name_check(const char *what, const char *name, int dots, char **cause);

#endif
