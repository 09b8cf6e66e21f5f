/* test-prom.c: the Prometheus exposition parses and its numbers agree. */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "metrics-testutil.h"
#include "prom.h"
#include "strbuf.h"
#include "tap.h"

#define MS	1000000ULL
#define SEC	1000000000ULL
#define T0	(1000 * SEC)

/*
 * A small checker for the text format (0.0.4), strict where phased's own
 * output should be: every sample belongs to a family declared by # TYPE
 * (and described by # HELP) before it, families are contiguous, names match
 * [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*, label
 * values use only the \\ \" \n escapes, no series repeats, and every
 * histogram has cumulative buckets in increasing le ending with +Inf equal
 * to _count, plus _sum.
 */

#define MAXSAMPLES	8192
#define MAXFAM		256
#define MAXLABELS	8

struct psample {
	char	*name;
	int	 fam;
	int	 nlabels;
	char	*lk[MAXLABELS];
	char	*lv[MAXLABELS];
	double	 v;
};

struct pfam {
	char	*name;
	char	 type[16];
	int	 help;
	int	 closed;	/* another family's samples came after */
	int	 nsamples;
};

struct pdoc {
	struct psample	 s[MAXSAMPLES];
	int		 ns;
	struct pfam	 f[MAXFAM];
	int		 nf;
	int		 cur;		/* family of the previous sample */
	char		 err[256];
};

/* Record the first error. */
static int
perr(struct pdoc *d, int line, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	if (d->err[0] != '\0')
		return (-1);
	n = snprintf(d->err, sizeof d->err, "line %d: ", line);
	va_start(ap, fmt);
	vsnprintf(d->err + n, sizeof d->err - (size_t)n, fmt, ap);
	va_end(ap);
	return (-1);
}

/* Length of a metric name at s (0 if none). */
static size_t
metric_name_len(const char *s)
{
	size_t	n = 0;

	if (!(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
		return (0);
	while (isalnum((unsigned char)s[n]) || s[n] == '_' || s[n] == ':')
		n++;
	return (n);
}

/* Length of a label name at s (0 if none). */
static size_t
label_name_len(const char *s)
{
	size_t	n = 0;

	if (!(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return (0);
	while (isalnum((unsigned char)s[n]) || s[n] == '_')
		n++;
	return (n);
}

/* Parse a sample value: a float, +Inf, -Inf or NaN, the whole token. */
static int
parse_value(const char *s, size_t n, double *v)
{
	char	tmp[64], *end;

	if (n == 0 || n >= sizeof tmp)
		return (-1);
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (strcmp(tmp, "+Inf") == 0) {
		*v = INFINITY;
		return (0);
	}
	if (strcmp(tmp, "-Inf") == 0) {
		*v = -INFINITY;
		return (0);
	}
	if (strcmp(tmp, "NaN") == 0) {
		*v = NAN;
		return (0);
	}
	/* strtod would take "inf", "nan" and hex: the format does not. */
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)tmp[i]) && strchr("+-.eE", tmp[i]) == NULL)
			return (-1);
	*v = strtod(tmp, &end);
	return (*end == '\0' ? 0 : -1);
}

/* Find a family by name, or -1. */
static int
find_fam(struct pdoc *d, const char *name, size_t n)
{
	int	i;

	for (i = 0; i < d->nf; i++)
		if (strlen(d->f[i].name) == n && strncmp(d->f[i].name, name, n) == 0)
			return (i);
	return (-1);
}

/* Find or add a family. */
static int
get_fam(struct pdoc *d, const char *name, size_t n)
{
	int	i;

	if ((i = find_fam(d, name, n)) != -1)
		return (i);
	if (d->nf == MAXFAM)
		return (-1);
	d->f[d->nf].name = strndup(name, n);
	return (d->nf++);
}

/* The family a sample name belongs to (histogram suffixes folded). */
static int
sample_fam(struct pdoc *d, const char *name, size_t n)
{
	static const char *suffix[] = { "_bucket", "_sum", "_count" };
	size_t	k;
	int	i, f;

	for (i = 0; i < 3; i++) {
		k = strlen(suffix[i]);
		if (n > k && strncmp(name + n - k, suffix[i], k) == 0 &&
		    (f = find_fam(d, name, n - k)) != -1 &&
		    strcmp(d->f[f].type, "histogram") == 0)
			return (f);
	}
	return (find_fam(d, name, n));
}

/* Parse a # HELP or # TYPE line (other comments are ignored). */
static int
parse_comment(struct pdoc *d, int line, const char *p)
{
	const char	*q;
	size_t		 n;
	int		 f, help;

	if (strncmp(p, "# HELP ", 7) == 0)
		help = 1;
	else if (strncmp(p, "# TYPE ", 7) == 0)
		help = 0;
	else
		return (0);
	p += 7;
	if ((n = metric_name_len(p)) == 0)
		return (perr(d, line, "bad metric name in comment"));
	if ((f = get_fam(d, p, n)) == -1)
		return (perr(d, line, "too many families"));
	if (d->f[f].nsamples != 0)
		return (perr(d, line, "%s after samples of %s", help ? "HELP" : "TYPE",
		    d->f[f].name));
	p += n;
	if (help) {
		if (d->f[f].help)
			return (perr(d, line, "second HELP for %s", d->f[f].name));
		d->f[f].help = 1;
		if (*p != ' ')
			return (perr(d, line, "HELP without text"));
		for (q = p + 1; *q != '\0'; q++) {
			if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
				return (perr(d, line, "bad escape in HELP"));
			if (*q == '\\')
				q++;
		}
		return (0);
	}
	if (d->f[f].type[0] != '\0')
		return (perr(d, line, "second TYPE for %s", d->f[f].name));
	if (*p++ != ' ')
		return (perr(d, line, "TYPE without type"));
	if (strcmp(p, "counter") != 0 && strcmp(p, "gauge") != 0 &&
	    strcmp(p, "histogram") != 0 && strcmp(p, "summary") != 0 &&
	    strcmp(p, "untyped") != 0)
		return (perr(d, line, "unknown type '%s'", p));
	snprintf(d->f[f].type, sizeof d->f[f].type, "%s", p);
	return (0);
}

/* Parse {name="value",...}; *pp is left after the brace. */
static int
parse_labels(struct pdoc *d, int line, const char **pp, struct psample *s)
{
	const char	*p = *pp;
	char		 val[512];
	size_t		 n, vn;
	int		 i;

	p++;	/* { */
	while (*p != '}') {
		if ((n = label_name_len(p)) == 0)
			return (perr(d, line, "bad label name"));
		if (s->nlabels == MAXLABELS)
			return (perr(d, line, "too many labels"));
		s->lk[s->nlabels] = strndup(p, n);
		for (i = 0; i < s->nlabels; i++)
			if (strcmp(s->lk[i], s->lk[s->nlabels]) == 0)
				return (perr(d, line, "label %s twice", s->lk[i]));
		p += n;
		if (p[0] != '=' || p[1] != '"')
			return (perr(d, line, "label without =\""));
		p += 2;
		vn = 0;
		while (*p != '"') {
			if (*p == '\0' || *p == '\n' || vn + 1 >= sizeof val)
				return (perr(d, line, "unterminated label value"));
			if (*p == '\\') {
				p++;
				if (*p == '\\' || *p == '"')
					val[vn++] = *p;
				else if (*p == 'n')
					val[vn++] = '\n';
				else
					return (perr(d, line, "bad escape \\%c in label", *p));
				p++;
				continue;
			}
			val[vn++] = *p++;
		}
		val[vn] = '\0';
		s->lv[s->nlabels++] = strdup(val);
		p++;
		if (*p == ',')
			p++;
		else if (*p != '}')
			return (perr(d, line, "expected , or } after label"));
	}
	*pp = p + 1;
	return (0);
}

/* Value of label k in s, or NULL. */
static const char *
label(const struct psample *s, const char *k)
{
	int	i;

	for (i = 0; i < s->nlabels; i++)
		if (strcmp(s->lk[i], k) == 0)
			return (s->lv[i]);
	return (NULL);
}

/* Whether two samples have the same labels, ignoring `skip'. */
static int
same_labels(const struct psample *a, const struct psample *b, const char *skip)
{
	const char	*v;
	int		 i, na = 0, nb = 0;

	for (i = 0; i < a->nlabels; i++) {
		if (skip != NULL && strcmp(a->lk[i], skip) == 0)
			continue;
		na++;
		if ((v = label(b, a->lk[i])) == NULL || strcmp(v, a->lv[i]) != 0)
			return (0);
	}
	for (i = 0; i < b->nlabels; i++)
		if (skip == NULL || strcmp(b->lk[i], skip) != 0)
			nb++;
	return (na == nb);
}

/* Parse one sample line. */
static int
parse_sample(struct pdoc *d, int line, const char *p)
{
	struct psample	*s;
	const char	*v;
	size_t		 n;
	int		 f, i;

	if (d->ns == MAXSAMPLES)
		return (perr(d, line, "too many samples"));
	s = &d->s[d->ns];
	memset(s, 0, sizeof *s);
	if ((n = metric_name_len(p)) == 0)
		return (perr(d, line, "bad metric name"));
	s->name = strndup(p, n);
	d->ns++;
	if ((f = sample_fam(d, p, n)) == -1 || d->f[f].type[0] == '\0')
		return (perr(d, line, "sample %s before its TYPE", s->name));
	if (!d->f[f].help)
		return (perr(d, line, "sample %s without HELP", s->name));
	if (d->f[f].closed)
		return (perr(d, line, "family %s is not contiguous", d->f[f].name));
	if (d->cur != -1 && d->cur != f)
		d->f[d->cur].closed = 1;
	d->cur = f;
	s->fam = f;
	d->f[f].nsamples++;
	p += n;
	if (*p == '{' && parse_labels(d, line, &p, s) != 0)
		return (-1);
	if (*p++ != ' ')
		return (perr(d, line, "no space before the value"));
	v = p;
	while (*p != '\0' && *p != ' ')
		p++;
	if (parse_value(v, (size_t)(p - v), &s->v) != 0)
		return (perr(d, line, "bad value '%.*s'", (int)(p - v), v));
	if (*p == ' ') {
		/* Optional timestamp: an integer. */
		for (p++; *p != '\0'; p++)
			if (!isdigit((unsigned char)*p) && *p != '-')
				return (perr(d, line, "bad timestamp"));
	}
	for (i = 0; i < d->ns - 1; i++)
		if (strcmp(d->s[i].name, s->name) == 0 &&
		    same_labels(&d->s[i], s, NULL))
			return (perr(d, line, "series %s repeated", s->name));
	return (0);
}

/* Check every histogram series of the document. */
static int
check_histograms(struct pdoc *d)
{
	struct psample	*s, *b;
	char		 nb[256], nsum[256], ncount[256];
	double		 le, prevle, prevc, lev;
	int		 i, j, f, haveinf, havesum, havecount;

	for (i = 0; i < d->ns; i++) {
		s = &d->s[i];
		f = s->fam;
		if (strcmp(d->f[f].type, "histogram") != 0)
			continue;
		snprintf(nb, sizeof nb, "%s_bucket", d->f[f].name);
		snprintf(nsum, sizeof nsum, "%s_sum", d->f[f].name);
		snprintf(ncount, sizeof ncount, "%s_count", d->f[f].name);
		if (strcmp(s->name, nb) != 0 && strcmp(s->name, nsum) != 0 &&
		    strcmp(s->name, ncount) != 0)
			return (perr(d, 0, "histogram %s has sample %s",
			    d->f[f].name, s->name));
		if (strcmp(s->name, ncount) != 0)
			continue;
		/* One series per _count: walk its buckets and sum. */
		prevle = -INFINITY;
		prevc = 0;
		haveinf = havesum = 0;
		for (j = 0; j < d->ns; j++) {
			b = &d->s[j];
			if (b->fam != f || !same_labels(b, s, "le"))
				continue;
			if (strcmp(b->name, nsum) == 0)
				havesum = 1;
			if (strcmp(b->name, nb) != 0)
				continue;
			if (label(b, "le") == NULL ||
			    parse_value(label(b, "le"), strlen(label(b, "le")), &lev) != 0)
				return (perr(d, 0, "%s: bucket without a valid le", nb));
			le = lev;
			if (haveinf)
				return (perr(d, 0, "%s: bucket after +Inf", nb));
			if (!(le > prevle))
				return (perr(d, 0, "%s: le %g not increasing", nb, le));
			if (b->v < prevc)
				return (perr(d, 0, "%s: le %g count %g below %g",
				    nb, le, b->v, prevc));
			if (isinf(le)) {
				haveinf = 1;
				if (b->v != s->v)
					return (perr(d, 0, "%s: +Inf %g != _count %g",
					    nb, b->v, s->v));
			}
			prevle = le;
			prevc = b->v;
		}
		if (!haveinf)
			return (perr(d, 0, "%s: no +Inf bucket", nb));
		if (!havesum)
			return (perr(d, 0, "%s: no _sum", d->f[f].name));
	}
	/* And every bucket series needs its _count. */
	for (i = 0; i < d->ns; i++) {
		s = &d->s[i];
		f = s->fam;
		if (strcmp(d->f[f].type, "histogram") != 0)
			continue;
		havecount = 0;
		snprintf(ncount, sizeof ncount, "%s_count", d->f[f].name);
		for (j = 0; j < d->ns; j++)
			if (strcmp(d->s[j].name, ncount) == 0 &&
			    same_labels(&d->s[j], s, "le"))
				havecount = 1;
		if (!havecount)
			return (perr(d, 0, "%s: series without _count", s->name));
	}
	return (0);
}

/* Free what a parse allocated. */
static void
pdoc_free(struct pdoc *d)
{
	int	i, j;

	for (i = 0; i < d->ns; i++) {
		free(d->s[i].name);
		for (j = 0; j < d->s[i].nlabels; j++) {
			free(d->s[i].lk[j]);
			free(d->s[i].lv[j]);
		}
		/* A label key may be allocated without its value on error. */
		if (d->s[i].nlabels < MAXLABELS)
			free(d->s[i].lk[d->s[i].nlabels]);
	}
	for (i = 0; i < d->nf; i++)
		free(d->f[i].name);
	memset(d, 0, sizeof *d);
}

/* Parse and check a whole exposition; 0 if it is well formed. */
static int
pdoc_parse(struct pdoc *d, const char *text)
{
	char	*copy, *p, *nl;
	int	 line = 0, rc = 0;

	memset(d, 0, sizeof *d);
	d->cur = -1;
	copy = strdup(text);
	for (p = copy; *p != '\0' && rc == 0; p = nl + 1) {
		line++;
		if ((nl = strchr(p, '\n')) == NULL) {
			rc = perr(d, line, "last line without newline");
			break;
		}
		*nl = '\0';
		if (*p == '\0')
			continue;
		if (*p == '#')
			rc = parse_comment(d, line, p);
		else
			rc = parse_sample(d, line, p);
	}
	free(copy);
	if (rc == 0)
		rc = check_histograms(d);
	return (rc);
}

/* Value of the sample name{labels...}, NAN when missing. */
static double
pget(struct pdoc *d, const char *name, const char *model, const char *k,
    const char *v)
{
	const char	*m, *x;
	int		 i;

	for (i = 0; i < d->ns; i++) {
		if (strcmp(d->s[i].name, name) != 0)
			continue;
		m = label(&d->s[i], "model");
		if ((model == NULL) != (m == NULL))
			continue;
		if (model != NULL && strcmp(m, model) != 0)
			continue;
		if (k != NULL && ((x = label(&d->s[i], k)) == NULL || strcmp(x, v) != 0))
			continue;
		return (d->s[i].v);
	}
	return (NAN);
}

/* Like pget, with two labels to match besides the model. */
static double
pget2(struct pdoc *d, const char *name, const char *model, const char *k1,
    const char *v1, const char *k2, const char *v2)
{
	const char	*m, *x, *y;
	int		 i;

	for (i = 0; i < d->ns; i++) {
		if (strcmp(d->s[i].name, name) != 0)
			continue;
		if ((m = label(&d->s[i], "model")) == NULL || strcmp(m, model) != 0)
			continue;
		if ((x = label(&d->s[i], k1)) == NULL || strcmp(x, v1) != 0)
			continue;
		if ((y = label(&d->s[i], k2)) == NULL || strcmp(y, v2) != 0)
			continue;
		return (d->s[i].v);
	}
	return (NAN);
}

static struct pdoc doc;

/* The checker must reject broken text, or passing it means nothing. */
static void
test_checker(void)
{
	static const struct {
		const char	*text;
		const char	*why;
	} bad[] = {
		{ "# HELP 1x h\n# TYPE 1x gauge\n1x 1\n", "bad metric name" },
		{ "# HELP x h\n# TYPE x gauge\nx{a=\"\\q\"} 1\n", "bad escape" },
		{ "# HELP x h\n# TYPE x gauge\nx{a=\"v} 1\n", "unterminated" },
		{ "x 1\n", "before its TYPE" },
		{ "# HELP x h\n# TYPE x gauge\nx one\n", "bad value" },
		{ "# HELP x h\n# TYPE x gauge\nx inf\n", "bad value" },
		{ "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n", "repeated" },
		{ "# HELP x h\n# TYPE x gauge\n# HELP y h\n# TYPE y gauge\n"
		  "x{m=\"a\"} 1\ny 1\nx{m=\"b\"} 1\n", "not contiguous" },
		{ "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
		  "h_bucket{le=\"2\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
		  "below" },
		{ "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
		  "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "!= _count" },
		{ "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\n"
		  "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
		  "not increasing" },
		{ "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
		  "no _sum" },
		{ "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
		  "no +Inf" },
		{ "# HELP x h\n# TYPE x gauge\nx 1", "without newline" },
		{ "# HELP x h\n# TYPE x gauge\n# TYPE x counter\nx 1\n", "second TYPE" },
	};
	size_t	i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ok(pdoc_parse(&doc, bad[i].text) != 0, "checker rejects: %s", bad[i].why);
		like(doc.err, bad[i].why, "with the reason");
		pdoc_free(&doc);
	}
	ok(pdoc_parse(&doc, "# HELP h a \\\\ help\n# TYPE h histogram\n"
	    "h_bucket{le=\"0.5\",m=\"a\\\"b\\\\c\\nd\"} 1\n"
	    "h_bucket{le=\"+Inf\",m=\"a\\\"b\\\\c\\nd\"} 2\n"
	    "h_sum{m=\"a\\\"b\\\\c\\nd\"} 1.5\nh_count{m=\"a\\\"b\\\\c\\nd\"} 2 1700000000\n")
	    == 0, "checker accepts a correct histogram (%s)", doc.err);
	is_str(label(&doc.s[0], "m"), "a\"b\\c\nd", "label value unescaped");
	pdoc_free(&doc);
}

/* Sample values print in their shortest exact form. */
static void
test_values(void)
{
	struct strbuf	sb = STRBUF_INIT;

	prom_value(&sb, 0.1);
	strbuf_addc(&sb, ' ');
	prom_value(&sb, 2.5e-5);
	strbuf_addc(&sb, ' ');
	prom_value(&sb, 100);
	strbuf_addc(&sb, ' ');
	prom_value(&sb, INFINITY);
	strbuf_addc(&sb, ' ');
	prom_value(&sb, -INFINITY);
	strbuf_addc(&sb, ' ');
	prom_value(&sb, NAN);
	strbuf_addc(&sb, ' ');
	prom_value(&sb, 1.0 / 3);
	is_str(strbuf_str(&sb), "0.1 2.5e-05 100 +Inf -Inf NaN 0.3333333333333333",
	    "values: decimal, exponent, integer, infinities, NaN, round trip");
	strbuf_reset(&sb);
	prom_label_value(&sb, "a\"b\\c\nd");
	is_str(strbuf_str(&sb), "\"a\\\"b\\\\c\\nd\"", "label value escaped");
	strbuf_free(&sb);
}

/* Feed a request through an instance. */
static void
feed(struct inst_metrics *m, uint64_t at, uint64_t ttft, int ntok, uint64_t gap,
    enum finish_reason why)
{
	metrics_feed(m, at, 2 * MS, 64, ttft, ntok, gap, why);
}

/* The whole exposition for two instances. */
static void
test_exposition(void)
{
	static const char *weird = "we\"ird\\name\nx";
	struct inst_metrics	 m[2];
	struct inst_snapshot	 s[2];
	const struct inst_snapshot *sp[2] = { &s[0], &s[1] };
	struct iter_sample	 it;
	struct strbuf		 sb = STRBUF_INIT;
	uint64_t		 tbt = 25 * MS;
	int			 i, rc;

	inst_metrics_init(&m[0], "llama", T0, NULL);
	inst_metrics_init(&m[1], weird, T0, NULL);
	for (i = 1; i <= 40; i++) {
		it = (struct iter_sample){ T0 + (uint64_t)i * 25 * MS,
		    T0 + (uint64_t)(i + 1) * 25 * MS, i % 4 == 0 ? 128 : 0,
		    3, 4, 3, 0 };
		/* Every fourth iteration's decoders lose 5 ms to a prefill. */
		it.decode_others_ns = i % 4 == 0 ? 5 * MS : 0;
		inst_metrics_iteration(&m[0], &it, &tbt, 1);
	}
	feed(&m[0], T0, 40 * MS, 10, 25 * MS, FINISH_EOS);
	feed(&m[0], T0 + 10 * MS, 3 * MS, 4, 25 * MS, FINISH_EOS);
	feed(&m[0], T0 + 20 * MS, 2 * SEC, 2, 25 * MS, FINISH_LENGTH);
	feed(&m[0], T0 + 30 * MS, 500 * SEC, 2, 1 * MS, FINISH_STOP);
	inst_metrics_count(&m[0], CNT_PREEMPTIONS, 3);
	inst_metrics_count(&m[0], CNT_PLAN_ERRORS, 1);
	inst_metrics_gauges(&m[0], 12, 500, 3, 1);

	for (i = 0; i < 2; i++) {
		inst_snapshot_init(&s[i]);
		inst_metrics_snapshot(&m[i], &s[i], T0 + 2 * SEC);
	}
	prom_write(&sb, sp, 2, 12.5);
	rc = pdoc_parse(&doc, strbuf_str(&sb));
	ok(rc == 0, "exposition passes the checker (%s)", doc.err);
	if (rc != 0)
		diag("%s", strbuf_str(&sb));

	near(pget(&doc, "phased_up", NULL, NULL, NULL), 1, 0, "phased_up 1");
	near(pget(&doc, "phased_uptime_seconds", NULL, NULL, NULL), 12.5, 0, "uptime");
	near(pget(&doc, "phased_time_to_first_token_seconds_count", "llama", NULL, NULL),
	    4, 0, "4 TTFT samples");
	near(pget(&doc, "phased_time_to_first_token_seconds_sum", "llama", NULL, NULL),
	    0.04 + 0.003 + 2 + 500, 1e-9, "TTFT sum in seconds");
	near(pget(&doc, "phased_time_to_first_token_seconds_bucket", "llama", "le", "0.05"),
	    2, 0, "two TTFTs at or under 50 ms");
	near(pget(&doc, "phased_time_to_first_token_seconds_bucket", "llama", "le", "0.0025"),
	    0, 0, "none at or under 2.5 ms");
	near(pget(&doc, "phased_time_to_first_token_seconds_bucket", "llama", "le", "0.005"),
	    1, 0, "one at or under 5 ms");
	near(pget(&doc, "phased_time_to_first_token_seconds_bucket", "llama", "le", "2.5"),
	    3, 0, "three at or under 2.5 s");
	near(pget(&doc, "phased_time_to_first_token_seconds_bucket", "llama", "le", "100"),
	    3, 0, "500 s is above the last bound");
	near(pget(&doc, "phased_time_to_first_token_seconds_bucket", "llama", "le", "+Inf"),
	    4, 0, "but in +Inf");
	near(pget(&doc, "phased_time_between_tokens_seconds_count", "llama", NULL, NULL),
	    40, 0, "40 TBT samples from the iterations");
	near(pget(&doc, "phased_time_per_output_token_seconds_count", "llama", NULL, NULL),
	    4, 0, "4 TPOT samples");
	near(pget(&doc, "phased_iteration_duration_seconds_sum", "llama", NULL, NULL),
	    1.0, 1e-9, "40 iterations of 25 ms");
	ok(isnan(pget(&doc, "phased_iteration_prefill_tokens_bucket", "llama", "le", "0")),
	    "no le=0 bucket for counts");
	near(pget(&doc, "phased_iteration_prefill_tokens_bucket", "llama", "le", "1"),
	    30, 0, "30 iterations without prefill");
	near(pget(&doc, "phased_iteration_prefill_tokens_bucket", "llama", "le", "128"),
	    40, 0, "all within 128 prefill tokens");
	near(pget(&doc, "phased_prompt_tokens_total", "llama", NULL, NULL), 1280, 0,
	    "prompt tokens counted from iterations");
	near(pget(&doc, "phased_generation_tokens_total", "llama", NULL, NULL), 120, 0,
	    "generation tokens");
	near(pget(&doc, "phased_requests_finished_total", "llama", "reason", "eos"),
	    2, 0, "2 finished on eos");
	near(pget(&doc, "phased_requests_finished_total", "llama", "reason", "length"),
	    1, 0, "1 on length");
	near(pget(&doc, "phased_requests_finished_total", "llama", "reason", "cancelled"),
	    0, 0, "0 cancelled, still exported");
	near(pget(&doc, "phased_preemptions_total", "llama", NULL, NULL), 3, 0, "preemptions");
	/* feed() runs no iteration: every request's life went to its queue. */
	near(pget(&doc, "phased_request_wait_seconds_total", "llama", "cause", "queued"),
	    pget(&doc, "phased_e2e_request_latency_seconds_sum", "llama", NULL, NULL),
	    1e-9, "wait by cause: queued is the e2e sum without iterations");
	near(pget(&doc, "phased_request_wait_seconds_total", "llama", "cause", "others_prefill"),
	    0, 0, "wait by cause: no others' prefill");
	near(pget2(&doc, "phased_request_wait_share_bucket", "llama", "cause",
	    "queued", "le", "1"), 4, 0, "wait share: 4 requests all queued");
	near(pget2(&doc, "phased_request_wait_share_bucket", "llama", "cause",
	    "queued", "le", "0.99"), 0, 0, "wait share: none under 0.99 queued");
	near(pget2(&doc, "phased_request_wait_share_bucket", "llama", "cause",
	    "others_prefill", "le", "0"), 4, 0,
	    "wait share: others' prefill 0 for all 4 (le 0)");
	near(pget2(&doc, "phased_request_wait_share_bucket", "llama", "cause",
	    "decode", "le", "+Inf"), 4, 0, "wait share: +Inf bucket per cause");
	near(pget(&doc, "phased_request_wait_share_sum", "llama", "cause", "queued"),
	    4, 0, "wait share: sum of 4 shares of 1");
	near(pget(&doc, "phased_request_wait_share_count", "llama", "cause",
	    "scheduling"), 4, 0, "wait share: count per cause");
	near(pget2(&doc, "phased_request_wait_share_bucket", "llama", "cause",
	    "queued", "le", "0.05"), 0, 0, "wait share: bucket 0.05 exported");
	near(pget(&doc, "phased_window_decode_others_prefill_ratio", "llama", NULL, NULL),
	    0.05, 1e-12, "decode others' prefill: 50 of 1000 ms");
	near(pget(&doc, "phased_policy_plan_errors_total", "llama", NULL, NULL), 1, 0,
	    "plan errors");
	near(pget(&doc, "phased_policy_swaps_total", "llama", NULL, NULL), 0, 0, "swaps");
	near(pget(&doc, "phased_kv_blocks_used", "llama", NULL, NULL), 12, 0, "kv used");
	near(pget(&doc, "phased_kv_blocks_free", "llama", NULL, NULL), 500, 0, "kv free");
	near(pget(&doc, "phased_kv_cache_usage_ratio", "llama", NULL, NULL), 12.0 / 512,
	    1e-12, "kv usage ratio");
	near(pget(&doc, "phased_kv_cache_usage_ratio", weird, NULL, NULL), 0, 0,
	    "kv usage 0 without blocks");
	near(pget(&doc, "phased_requests_running", "llama", NULL, NULL), 3, 0, "running");
	near(pget(&doc, "phased_requests_waiting", "llama", NULL, NULL), 1, 0, "waiting");
	near(pget(&doc, "phased_window_prompt_tokens_per_second", "llama", NULL, NULL),
	    640, 1e-9, "window prompt rate: 1280 tokens over 2 s of uptime");
	near(pget(&doc, "phased_time_to_first_token_seconds_count", weird, NULL, NULL),
	    0, 0, "the oddly named instance round-trips through escaping");
	near(pget(&doc, "phased_requests_finished_total", weird, "reason", "error"),
	    0, 0, "and has its counters");
	for (i = 0; i < doc.nf; i++)
		ok(strncmp(doc.f[i].name, "phased_", 7) == 0, "%s has the phased_ prefix",
		    doc.f[i].name);
	pdoc_free(&doc);

	/* No instances: still a valid page. */
	strbuf_reset(&sb);
	prom_write(&sb, NULL, 0, 0);
	ok(pdoc_parse(&doc, strbuf_str(&sb)) == 0, "page without instances parses (%s)",
	    doc.err);
	pdoc_free(&doc);

	for (i = 0; i < 2; i++) {
		inst_snapshot_free(&s[i]);
		inst_metrics_free(&m[i]);
	}
	strbuf_free(&sb);
}

/* The equivalence table names real metrics of the other servers. */
static void
test_equivalents(void)
{
	size_t	i;
	int	good = 1;

	ok(prom_nequivalents >= 15, "equivalence table has %zu rows", prom_nequivalents);
	for (i = 0; i < prom_nequivalents; i++) {
		if (strncmp(prom_equivalents[i].phased, "phased_", 7) != 0)
			good = 0;
		if (prom_equivalents[i].vllm != NULL &&
		    strncmp(prom_equivalents[i].vllm, "vllm:", 5) != 0)
			good = 0;
		if (prom_equivalents[i].llamacpp != NULL &&
		    strncmp(prom_equivalents[i].llamacpp, "llamacpp:", 9) != 0)
			good = 0;
	}
	ok(good, "every row is prefixed correctly");
}

int
main(void)
{
	test_checker();
	test_values();
	test_exposition();
	test_equivalents();
	done_testing();
}
