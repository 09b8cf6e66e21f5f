/* tap.h: a tiny TAP producer for the C unit tests. */
#ifndef PHASED_TAP_H
#define PHASED_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

/* Report one assertion; returns the condition so tests can bail early. */
static inline int
tap_ok(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int
tap_ok(int cond, const char *file, int line, const char *fmt, ...)
{
	va_list	ap;

	printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		printf("#   failed at %s:%d\n", file, line);
		tap_failed++;
	}
	fflush(stdout);
	return (cond);
}

#define ok(cond, ...)	tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...) do {					\
	long long g_ = (long long)(got), w_ = (long long)(want);	\
	if (!ok(g_ == w_, __VA_ARGS__))					\
		printf("#   got %lld, want %lld\n", g_, w_);		\
} while (0)
#define is_str(got, want, ...) do {					\
	const char *g_ = (got), *w_ = (want);				\
	if (!ok(g_ != NULL && w_ != NULL && strcmp(g_, w_) == 0, __VA_ARGS__)) \
		printf("#   got '%s', want '%s'\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
} while (0)
#define like(got, sub, ...) do {					\
	const char *g_ = (got), *s_ = (sub);				\
	if (!ok(g_ != NULL && strstr(g_, s_) != NULL, __VA_ARGS__))	\
		printf("#   got '%s', want it to contain '%s'\n",	\
		    g_ ? g_ : "(null)", s_);				\
} while (0)
#define near(got, want, tol, ...) do {					\
	double g_ = (got), w_ = (want);					\
	if (!ok(fabs(g_ - w_) <= (tol), __VA_ARGS__))			\
		printf("#   got %.9g, want %.9g (tol %g)\n", g_, w_, (double)(tol)); \
} while (0)
#define diag(...)	do { printf("# "); printf(__VA_ARGS__); printf("\n"); } while (0)
#define skip_all(...)	do { printf("1..0 # SKIP "); printf(__VA_ARGS__); printf("\n"); exit(0); } while (0)
#define done_testing()	do { printf("1..%d\n", tap_n); return (tap_failed ? 1 : 0); } while (0)

#endif
