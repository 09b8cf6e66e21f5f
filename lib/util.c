/* util.c: allocation that cannot fail, error strings, clocks, parsers. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

/* Allocate or die. */
void *
xmalloc(size_t n)
{
	void	*p;

	if ((p = malloc(n == 0 ? 1 : n)) == NULL)
		fatal("xmalloc");
	return (p);
}

/* Allocate zeroed memory or die. */
void *
xcalloc(size_t nmemb, size_t size)
{
	void	*p;

	if (nmemb == 0 || size == 0)
		nmemb = size = 1;
	if ((p = calloc(nmemb, size)) == NULL)
		fatal("xcalloc");
	return (p);
}

/* Resize an array with overflow checking or die. */
void *
xreallocarray(void *ptr, size_t nmemb, size_t size)
{
	void	*p;

	if (size != 0 && nmemb > SIZE_MAX / size)
		fatalx("xreallocarray: overflow");
	if ((p = realloc(ptr, nmemb * size == 0 ? 1 : nmemb * size)) == NULL)
		fatal("xreallocarray");
	return (p);
}

/* Duplicate a string or die. */
char *
xstrdup(const char *s)
{
	char	*p;

	if ((p = strdup(s)) == NULL)
		fatal("xstrdup");
	return (p);
}

/* Duplicate at most n bytes of a string or die. */
char *
xstrndup(const char *s, size_t n)
{
	char	*p;

	if ((p = strndup(s, n)) == NULL)
		fatal("xstrndup");
	return (p);
}

/* Format into a new string or die. */
int
xasprintf(char **ret, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = vasprintf(ret, fmt, ap);
	va_end(ap);
	if (n < 0)
		fatal("xasprintf");
	return (n);
}

/* Set *cause to a formatted message, if the caller wants one. */
void
set_cause(char **cause, const char *fmt, ...)
{
	va_list	ap;

	if (cause == NULL)
		return;
	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) < 0)
		fatal("set_cause");
	va_end(ap);
}

/* Monotonic clock in nanoseconds. */
uint64_t
now_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec);
}

/* Parse a byte size such as 4096, 64K, 8M or 1G. */
int
parse_size(const char *s, uint64_t *out, char **cause)
{
	char			*end;
	unsigned long long	 v;
	uint64_t		 mul = 1;

	errno = 0;
	if (*s == '-' || *s == '\0') {
		set_cause(cause, "invalid size '%s'", s);
		return (-1);
	}
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s) {
		set_cause(cause, "invalid size '%s'", s);
		return (-1);
	}
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K':
		mul = 1ULL << 10; end++;
		break;
	case 'm': case 'M':
		mul = 1ULL << 20; end++;
		break;
	case 'g': case 'G':
		mul = 1ULL << 30; end++;
		break;
	default:
		set_cause(cause, "invalid size '%s'", s);
		return (-1);
	}
	if (*end != '\0' || v > UINT64_MAX / mul) {
		set_cause(cause, "invalid size '%s'", s);
		return (-1);
	}
	*out = v * mul;
	return (0);
}

/* Parse a decimal integer within [min, max]. */
int
parse_int(const char *s, long long min, long long max, long long *out,
    const char *what, char **cause)
{
	char		*end;
	long long	 v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno == ERANGE) {
		set_cause(cause, "%s '%s' is not an integer", what, s);
		return (-1);
	}
	if (v < min || v > max) {
		set_cause(cause, "%s %lld is out of range %lld..%lld", what, v,
		    min, max);
		return (-1);
	}
	*out = v;
	return (0);
}

/* Parse a finite floating-point number within [min, max]. */
int
parse_float(const char *s, double min, double max, double *out,
    const char *what, char **cause)
{
	char	*end;
	double	 v;

	errno = 0;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v)) {
		set_cause(cause, "%s '%s' is not a number", what, s);
		return (-1);
	}
	if (v < min || v > max) {
		set_cause(cause, "%s %g is out of range %g..%g", what, v, min,
		    max);
		return (-1);
	}
	*out = v;
	return (0);
}

/* Check a name a user gave to a policy, a model or the like. */
int
name_check(const char *what, const char *name, int dots, char **cause)
{
	const char	*p;

	if (*name == '\0') {
		set_cause(cause, "empty %s name", what);
		return (-1);
	}
	if (strchr(name, '/') != NULL) {
		set_cause(cause, "%s name '%s' contains '/': give a name, not a "
		    "path", what, name);
		return (-1);
	}
	if (*name == '.') {
		set_cause(cause, "%s name '%s' starts with '.'", what, name);
		return (-1);
	}
	if (strlen(name) > NAME_MAX_LEN) {
		set_cause(cause, "%s name '%.16s...' is longer than %d "
		    "characters", what, name, NAME_MAX_LEN);
		return (-1);
	}
	for (p = name; *p != '\0'; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
		    (dots && *p == '.'))
			continue;
		set_cause(cause, "%s name '%s' has character '%c': only "
		    "letters, digits, %s are allowed", what, name, *p,
		    dots ? "'-', '_' and '.'" : "'-' and '_'");
		return (-1);
	}
	return (0);
}
