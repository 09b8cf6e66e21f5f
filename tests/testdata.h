/* testdata.h: finding, reading and comparing against the shared test data. */
#ifndef PHASED_TESTDATA_H
#define PHASED_TESTDATA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The shared test data: $PHASED_SHARED, else $top_srcdir/../shared. */
static __attribute__((unused)) const char *
shared_dir(void)
{
	static char	*dir;
	const char	*top;

	if (dir != NULL)
		return (dir);
	if ((top = getenv("PHASED_SHARED")) != NULL)
		dir = xstrdup(top);
	else if ((top = getenv("top_srcdir")) != NULL)
		xasprintf(&dir, "%s/../shared", top);
	else
		dir = xstrdup("../shared");
	return (dir);
}

/* Read a whole file into a NUL-terminated buffer; NULL if unreadable. */
static __attribute__((unused)) char *
slurp(const char *path, size_t *len)
{
	FILE	*f;
	char	*buf;
	long	 n;

	if ((f = fopen(path, "rb")) == NULL)
		return (NULL);
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return (NULL);
	}
	buf = xmalloc((size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(buf);
		return (NULL);
	}
	fclose(f);
	buf[n] = '\0';
	if (len != NULL)
		*len = (size_t)n;
	return (buf);
}

/*
 * The numbers of the flat JSON array under "key" in doc (enough for the
 * golden files); their count, or -1 when absent or over max.
 */
static __attribute__((unused)) int
json_numbers(const char *doc, const char *key, double *out, int max)
{
	char		 pat[128];
	const char	*p;
	char		*end;
	int		 n = 0;

	snprintf(pat, sizeof pat, "\"%s\"", key);
	if ((p = strstr(doc, pat)) == NULL)
		return (-1);
	p += strlen(pat);
	while (*p == ' ' || *p == ':' || *p == '\n' || *p == '\t')
		p++;
	if (*p++ != '[')
		return (-1);
	for (;;) {
		while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' ||
		    *p == '\r')
			p++;
		if (*p == ']')
			return (n);
		if (n == max)
			return (-1);
		out[n++] = strtod(p, &end);
		if (end == p)
			return (-1);
		p = end;
	}
}

/* Index of the highest logit, ties to the lowest id. */
static __attribute__((unused)) int32_t
argmax(const float *l, int n)
{
	int32_t	best = 0;
	int	i;

	for (i = 1; i < n; i++) {
		if (l[i] > l[best])
			best = i;
	}
	return (best);
}

#endif
