/* test-trace.c: iteration traces are valid JSON with one event per iteration. */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "trace.h"
#include "unicode.h"
#include "wait.h"
#include "tap.h"

/*
 * A strict RFC 8259 parser that builds a small tree: no trailing commas,
 * no leading zeros, no bare control characters or invalid UTF-8 in
 * strings, only the standard escapes, surrogate escapes only in pairs,
 * no duplicate keys, nothing after the value but whitespace.
 */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype	  t;
	int		  b;
	double		  num;
	char		 *str;		/* J_STR (NUL-terminated; no NULs tested) */
	size_t		  n;
	struct jv	**items;	/* J_ARR, J_OBJ */
	char		**keys;		/* J_OBJ */
};

struct jp {
	const char	*p;
	const char	*end;
	const char	*err;
	int		 depth;
};

static struct jv *jparse_value(struct jp *);

/* Free a tree. */
static void
jv_free(struct jv *v)
{
	size_t	i;

	if (v == NULL)
		return;
	for (i = 0; i < v->n; i++) {
		jv_free(v->items[i]);
		if (v->keys != NULL)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	free(v);
}

/* Skip JSON whitespace. */
static void
jws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' ||
	    *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* Fail with a reason. */
static struct jv *
jfail(struct jp *j, const char *why)
{
	if (j->err == NULL)
		j->err = why;
	return (NULL);
}

/* Read 4 hex digits. */
static int
jhex4(struct jp *j, unsigned int *u)
{
	int	i;

	*u = 0;
	if (j->end - j->p < 4)
		return (-1);
	for (i = 0; i < 4; i++) {
		if (!isxdigit((unsigned char)j->p[i]))
			return (-1);
		*u = *u * 16 + (unsigned)(isdigit((unsigned char)j->p[i]) ?
		    j->p[i] - '0' : (tolower((unsigned char)j->p[i]) - 'a' + 10));
	}
	j->p += 4;
	return (0);
}

/* Append code point u as UTF-8. */
static void
put_utf8(struct strbuf *sb, unsigned int u)
{
	if (u < 0x80)
		strbuf_addc(sb, (char)u);
	else if (u < 0x800) {
		strbuf_addc(sb, (char)(0xc0 | (u >> 6)));
		strbuf_addc(sb, (char)(0x80 | (u & 0x3f)));
	} else if (u < 0x10000) {
		strbuf_addc(sb, (char)(0xe0 | (u >> 12)));
		strbuf_addc(sb, (char)(0x80 | ((u >> 6) & 0x3f)));
		strbuf_addc(sb, (char)(0x80 | (u & 0x3f)));
	} else {
		strbuf_addc(sb, (char)(0xf0 | (u >> 18)));
		strbuf_addc(sb, (char)(0x80 | ((u >> 12) & 0x3f)));
		strbuf_addc(sb, (char)(0x80 | ((u >> 6) & 0x3f)));
		strbuf_addc(sb, (char)(0x80 | (u & 0x3f)));
	}
}

/* Parse a string literal into a malloc'd, unescaped UTF-8 string. */
static char *
jparse_string(struct jp *j)
{
	struct strbuf	 sb = STRBUF_INIT;
	uint32_t	 u, lo;
	size_t		 len;
	unsigned char	 c;

	j->p++;		/* opening quote */
	for (;;) {
		if (j->p >= j->end) {
			jfail(j, "unterminated string");
			goto bad;
		}
		c = (unsigned char)*j->p;
		if (c == '"') {
			j->p++;
			return (strbuf_detach(&sb, NULL));
		}
		if (c < 0x20) {
			jfail(j, "control character in string");
			goto bad;
		}
		if (c == '\\') {
			j->p++;
			if (j->p >= j->end) {
				jfail(j, "unterminated escape");
				goto bad;
			}
			c = (unsigned char)*j->p++;
			switch (c) {
			case '"': strbuf_addc(&sb, '"'); break;
			case '\\': strbuf_addc(&sb, '\\'); break;
			case '/': strbuf_addc(&sb, '/'); break;
			case 'b': strbuf_addc(&sb, '\b'); break;
			case 'f': strbuf_addc(&sb, '\f'); break;
			case 'n': strbuf_addc(&sb, '\n'); break;
			case 'r': strbuf_addc(&sb, '\r'); break;
			case 't': strbuf_addc(&sb, '\t'); break;
			case 'u':
				if (jhex4(j, &u) != 0) {
					jfail(j, "bad \\u escape");
					goto bad;
				}
				if (u >= 0xdc00 && u <= 0xdfff) {
					jfail(j, "lone low surrogate");
					goto bad;
				}
				if (u >= 0xd800 && u <= 0xdbff) {
					if (j->end - j->p < 2 || j->p[0] != '\\' ||
					    j->p[1] != 'u') {
						jfail(j, "lone high surrogate");
						goto bad;
					}
					j->p += 2;
					if (jhex4(j, &lo) != 0 || lo < 0xdc00 ||
					    lo > 0xdfff) {
						jfail(j, "bad surrogate pair");
						goto bad;
					}
					u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
				}
				put_utf8(&sb, u);
				break;
			default:
				jfail(j, "bad escape");
				goto bad;
			}
			continue;
		}
		if (c >= 0x80) {
			len = utf8_decode((const unsigned char *)j->p,
			    (size_t)(j->end - j->p), &u);
			if (u == UC_INVALID) {
				jfail(j, "invalid UTF-8 in string");
				goto bad;
			}
			strbuf_add(&sb, j->p, len);
			j->p += len;
			continue;
		}
		strbuf_addc(&sb, (char)c);
		j->p++;
	}
bad:
	strbuf_free(&sb);
	return (NULL);
}

/* Parse a number with the exact JSON grammar. */
static struct jv *
jparse_number(struct jp *j)
{
	const char	*s = j->p;
	char		*tmp;
	struct jv	*v;

	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p >= j->end || !isdigit((unsigned char)*j->p))
		return (jfail(j, "bad number"));
	if (*j->p == '0') {
		j->p++;
		if (j->p < j->end && isdigit((unsigned char)*j->p))
			return (jfail(j, "leading zero"));
	} else
		while (j->p < j->end && isdigit((unsigned char)*j->p))
			j->p++;
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (j->p >= j->end || !isdigit((unsigned char)*j->p))
			return (jfail(j, "bad fraction"));
		while (j->p < j->end && isdigit((unsigned char)*j->p))
			j->p++;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (j->p >= j->end || !isdigit((unsigned char)*j->p))
			return (jfail(j, "bad exponent"));
		while (j->p < j->end && isdigit((unsigned char)*j->p))
			j->p++;
	}
	v = calloc(1, sizeof *v);
	v->t = J_NUM;
	tmp = strndup(s, (size_t)(j->p - s));
	v->num = strtod(tmp, NULL);
	free(tmp);
	return (v);
}

/* Append a child (and key) to an array or object. */
static void
jadd(struct jv *v, char *key, struct jv *child)
{
	v->items = realloc(v->items, (v->n + 1) * sizeof *v->items);
	if (v->t == J_OBJ) {
		v->keys = realloc(v->keys, (v->n + 1) * sizeof *v->keys);
		v->keys[v->n] = key;
	}
	v->items[v->n++] = child;
}

/* Parse an array or object; j->p is at the opening bracket. */
static struct jv *
jparse_container(struct jp *j, int obj)
{
	struct jv	*v, *child;
	char		*key = NULL;
	size_t		 i;

	if (++j->depth > 64)
		return (jfail(j, "nested too deep"));
	v = calloc(1, sizeof *v);
	v->t = obj ? J_OBJ : J_ARR;
	j->p++;
	jws(j);
	if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
		j->p++;
		j->depth--;
		return (v);
	}
	for (;;) {
		jws(j);
		if (obj) {
			if (j->p >= j->end || *j->p != '"') {
				jfail(j, "expected a key");
				goto bad;
			}
			if ((key = jparse_string(j)) == NULL)
				goto bad;
			for (i = 0; i < v->n; i++)
				if (strcmp(v->keys[i], key) == 0) {
					jfail(j, "duplicate key");
					goto bad;
				}
			jws(j);
			if (j->p >= j->end || *j->p != ':') {
				jfail(j, "expected ':'");
				goto bad;
			}
			j->p++;
		}
		if ((child = jparse_value(j)) == NULL)
			goto bad;
		jadd(v, key, child);
		key = NULL;
		jws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
			j->p++;
			j->depth--;
			return (v);
		}
		jfail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
		goto bad;
	}
bad:
	free(key);
	jv_free(v);
	return (NULL);
}

/* Parse any value. */
static struct jv *
jparse_value(struct jp *j)
{
	struct jv	*v;
	char		*s;

	jws(j);
	if (j->p >= j->end)
		return (jfail(j, "unexpected end"));
	switch (*j->p) {
	case '{':
		return (jparse_container(j, 1));
	case '[':
		return (jparse_container(j, 0));
	case '"':
		if ((s = jparse_string(j)) == NULL)
			return (NULL);
		v = calloc(1, sizeof *v);
		v->t = J_STR;
		v->str = s;
		return (v);
	}
	if (j->end - j->p >= 4 && strncmp(j->p, "null", 4) == 0) {
		j->p += 4;
		v = calloc(1, sizeof *v);
		v->t = J_NULL;
		return (v);
	}
	if (j->end - j->p >= 4 && strncmp(j->p, "true", 4) == 0) {
		j->p += 4;
		v = calloc(1, sizeof *v);
		v->t = J_BOOL;
		v->b = 1;
		return (v);
	}
	if (j->end - j->p >= 5 && strncmp(j->p, "false", 5) == 0) {
		j->p += 5;
		v = calloc(1, sizeof *v);
		v->t = J_BOOL;
		return (v);
	}
	return (jparse_number(j));
}

/* Parse a whole document; NULL and *err when it is not valid JSON. */
static struct jv *
jparse(const char *s, size_t n, const char **err)
{
	struct jp	 j = { s, s + n, NULL, 0 };
	struct jv	*v;

	v = jparse_value(&j);
	if (v != NULL) {
		jws(&j);
		if (j.p != j.end) {
			jv_free(v);
			v = jfail(&j, "trailing data");
		}
	}
	*err = j.err;
	return (v);
}

/* Member of an object, or NULL. */
static struct jv *
jget(const struct jv *o, const char *k)
{
	size_t	i;

	if (o == NULL || o->t != J_OBJ)
		return (NULL);
	for (i = 0; i < o->n; i++)
		if (strcmp(o->keys[i], k) == 0)
			return (o->items[i]);
	return (NULL);
}

/* String member or "". */
static const char *
jstr(const struct jv *o, const char *k)
{
	struct jv	*v = jget(o, k);

	return (v != NULL && v->t == J_STR ? v->str : "");
}

/* Number member or NAN. */
static double
jnum(const struct jv *o, const char *k)
{
	struct jv	*v = jget(o, k);

	return (v != NULL && v->t == J_NUM ? v->num : NAN);
}

/* Whether text parses. */
static int
valid(const char *s)
{
	const char	*err;
	struct jv	*v = jparse(s, strlen(s), &err);

	jv_free(v);
	return (v != NULL);
}

/* The validator accepts JSON and rejects everything else. */
static void
test_validator(void)
{
	static const char *good[] = {
		"{}", "[]", "0", "-0.5e+10", "\"\\u00e9\\ud83d\\ude00\"",
		" {\"a\" : [1, 2.5, true, false, null, \"x\\n\"]} ",
		"\"caf\xc3\xa9\"",
	};
	static const char *bad[] = {
		"", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "+1", "1e",
		"\"\\x\"", "\"a\nb\"", "\"\\ud800\"", "\"\\udc00\"", "{a:1}",
		"[1] x", "{\"a\":1,\"a\":2}", "\"\xc0\x80\"", "\"\xed\xa0\x80\"",
		"\"\xe2\x82\"", "NaN", "nul", "'a'",
	};
	size_t	i;

	for (i = 0; i < sizeof good / sizeof good[0]; i++)
		ok(valid(good[i]), "valid JSON accepted: %s", good[i]);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ok(!valid(bad[i]), "invalid JSON rejected (case %zu)", i);
}

/* String escaping always yields valid JSON that decodes back. */
static void
test_escape(void)
{
	struct strbuf	 sb = STRBUF_INIT;
	const char	*err;
	struct jv	*v;
	char		 all[256];
	int		 i;

	strbuf_json_string(&sb, "a\"b\\c\n\t\x01\x7f");
	is_str(strbuf_str(&sb), "\"a\\\"b\\\\c\\n\\t\\u0001\\u007f\"",
	    "quotes, backslash, newline, tab, control, DEL escaped");
	strbuf_reset(&sb);
	strbuf_json_string(&sb, "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x80\xa8");
	is_str(strbuf_str(&sb), "\"caf\xc3\xa9 \xf0\x9f\x98\x80 \\u2028\"",
	    "UTF-8 kept, U+2028 escaped");
	strbuf_reset(&sb);
	strbuf_json_string(&sb, "\xc0\x80|\xed\xa0\x80|\xe2\x82|\xff");
	is_str(strbuf_str(&sb),
	    "\"\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd|\\ufffd\"",
	    "overlong, surrogate, truncated and 0xff bytes replaced");
	strbuf_reset(&sb);
	strbuf_json_string(&sb, NULL);
	is_str(strbuf_str(&sb), "null", "NULL string is null");

	/* Every byte value at once, NUL included through the n form. */
	for (i = 0; i < 256; i++)
		all[i] = (char)i;
	strbuf_reset(&sb);
	strbuf_json_stringn(&sb, all, sizeof all);
	v = jparse(strbuf_str(&sb), sb.len, &err);
	ok(v != NULL && v->t == J_STR, "all 256 byte values escape to a valid string (%s)",
	    err ? err : "ok");
	if (v != NULL && v->str != NULL)
		ok(memcmp(v->str + 1, all + 1, 127) == 0, "ASCII decodes back unchanged");
	jv_free(v);

	strbuf_reset(&sb);
	strbuf_json_double(&sb, 0.1);
	strbuf_addc(&sb, ' ');
	strbuf_json_double(&sb, 1e300);
	strbuf_addc(&sb, ' ');
	strbuf_json_double(&sb, NAN);
	strbuf_addc(&sb, ' ');
	strbuf_json_double(&sb, -INFINITY);
	strbuf_addc(&sb, ' ');
	strbuf_json_double(&sb, 3);
	is_str(strbuf_str(&sb), "0.1 1e+300 null null 3", "JSON numbers");
	strbuf_free(&sb);
}

/* Small buffer behaviour. */
static void
test_strbuf(void)
{
	struct strbuf	 sb = STRBUF_INIT;
	char		*s;
	size_t		 len;
	int		 i;

	is_str(strbuf_str(&sb), "", "empty buffer reads as \"\"");
	for (i = 0; i < 1000; i++)
		strbuf_printf(&sb, "%d,", i % 10);
	is_int(sb.len, 2000, "2000 bytes appended");
	ok(sb.buf[sb.len] == '\0', "always NUL-terminated");
	s = strbuf_detach(&sb, &len);
	is_int(len, 2000, "detach hands over the length");
	ok(strncmp(s, "0,1,2,", 6) == 0, "and the contents");
	ok(sb.buf == NULL && sb.len == 0, "and empties the buffer");
	free(s);
	s = strbuf_detach(&sb, NULL);
	is_str(s, "", "detaching an empty buffer gives \"\"");
	free(s);
}

/* Write, parse and return the trace (caller frees). */
static struct jv *
written(struct trace *t, const char *proc)
{
	struct strbuf	 sb = STRBUF_INIT;
	const char	*err;
	struct jv	*v;

	trace_write(t, &sb, proc);
	v = jparse(strbuf_str(&sb), sb.len, &err);
	ok(v != NULL, "trace is valid JSON (%s)", err != NULL ? err : "ok");
	if (v == NULL)
		diag("%s", strbuf_str(&sb));
	strbuf_free(&sb);
	return (v);
}

/* Count the complete events of a parsed trace. */
static size_t
count_x(const struct jv *doc, struct jv **xs, size_t max)
{
	struct jv	*ev = jget(doc, "traceEvents");
	size_t		 i, n = 0;

	if (ev == NULL || ev->t != J_ARR)
		return (0);
	for (i = 0; i < ev->n; i++)
		if (strcmp(jstr(ev->items[i], "ph"), "X") == 0) {
			if (n < max)
				xs[n] = ev->items[i];
			n++;
		}
	return (n);
}

/* Iterations recorded during a capture come out one event each. */
static void
test_trace(void)
{
	static const char *odd = "pol\"icy\\\n\xc3\xa9";
	struct trace	 t;
	struct trace_iter it;
	struct jv	*doc, *xs[64], *args;
	char		*cause = NULL;
	size_t		 n;
	int		 i, seqok;

	ok(trace_init(&t, 0, &cause) == -1, "capacity 0 refused");
	like(cause, "trace capacity 0 out of range", "with a cause");
	free(cause);
	ok(trace_init(&t, 8, &cause) == 0, "capacity 8 accepted");

	memset(&it, 0, sizeof it);
	it.start = 5000;
	trace_append(&t, &it);
	is_int(trace_len(&t), 0, "nothing recorded before start");

	trace_start(&t, 1000000);
	ok(trace_active(&t), "active after start");
	for (i = 0; i < 5; i++) {
		memset(&it, 0, sizeof it);
		it.start = 1000000 + (uint64_t)i * 2500500;
		it.dur = 2000250;
		it.prefill_tokens = i == 0 ? 512 : (i == 2 ? 64 : 0);
		it.decode_tokens = i == 0 ? 0 : 3;
		it.nreqs = i == 0 ? 1 : 3;
		it.group = i == 4 ? 1 : 0;
		if (i == 2) {
			it.nprefills = 2;
			it.prefill_ids[0] = 41;
			it.prefill_ids[1] = 43;
		}
		snprintf(it.policy, sizeof it.policy, "%s", odd);
		trace_append(&t, &it);
	}
	is_int(trace_len(&t), 5, "5 iterations held");
	doc = written(&t, "phased \"test\"");
	n = count_x(doc, xs, 64);
	is_int(n, 5, "one complete event per iteration");
	if (n == 5) {
		is_str(jstr(xs[0], "name"), "prefill", "first is a prefill");
		is_str(jstr(xs[1], "name"), "decode", "then decode");
		is_str(jstr(xs[2], "name"), "mixed", "then a mixed batch");
		near(jnum(xs[1], "ts"), 3500.5, 1e-9, "ts in microseconds");
		near(jnum(xs[1], "dur"), 2000.25, 1e-9, "dur in microseconds");
		near(jnum(xs[4], "tid"), 1, 0, "tid is the device group");
		near(jnum(xs[0], "pid"), 1, 0, "pid 1");
		args = jget(xs[2], "args");
		near(jnum(args, "prefill_tokens"), 64, 0, "args.prefill_tokens");
		near(jnum(args, "decode_tokens"), 3, 0, "args.decode_tokens");
		near(jnum(args, "requests"), 3, 0, "args.requests");
		near(jnum(args, "iteration"), 2, 0, "args.iteration");
		is_str(jstr(args, "policy"), odd, "policy name survives escaping");
		ok(jget(args, "prefill_requests") != NULL &&
		    jget(args, "prefill_requests")->n == 2 &&
		    jget(args, "prefill_requests")->items[1]->num == 43,
		    "args.prefill_requests names who prefilled");
		ok(jget(jget(xs[1], "args"), "prefill_requests") == NULL,
		    "none on a decode-only iteration");
	}
	is_str(jstr(doc, "displayTimeUnit"), "ms", "displayTimeUnit ms");
	ok(jget(jget(doc, "traceEvents")->items[0], "args") != NULL &&
	    strcmp(jstr(jget(jget(doc, "traceEvents")->items[0], "args"), "name"),
	    "phased \"test\"") == 0, "process name metadata escaped");
	jv_free(doc);

	/* Overflow keeps the newest and counts the dropped. */
	for (i = 5; i < 20; i++) {
		memset(&it, 0, sizeof it);
		it.start = 1000000 + (uint64_t)i * 1000;
		it.decode_tokens = 1;
		/* A name filling the array is cut at a character boundary. */
		memset(it.policy, 'a', sizeof it.policy - 2);
		it.policy[sizeof it.policy - 2] = (char)0xc3;
		it.policy[sizeof it.policy - 1] = (char)0xa9;
		trace_append(&t, &it);
	}
	trace_stop(&t, 9000000);
	ok(!trace_active(&t), "inactive after stop");
	trace_append(&t, &it);
	is_int(trace_len(&t), 8, "ring holds its capacity");
	doc = written(&t, NULL);
	n = count_x(doc, xs, 64);
	is_int(n, 8, "8 events for the 8 held");
	seqok = n == 8;
	for (i = 0; i < 8 && seqok; i++)
		if (jnum(jget(xs[i], "args"), "iteration") != 12 + i)
			seqok = 0;
	ok(seqok, "the newest iterations 12..19 were kept, in order");
	near(jnum(jget(doc, "otherData"), "iterations_dropped"), 12, 0, "12 dropped");
	near(jnum(jget(doc, "otherData"), "iterations_recorded"), 20, 0, "20 recorded");
	if (n == 8)
		is_int(strlen(jstr(jget(xs[7], "args"), "policy")),
		    TRACE_POLICY_MAX - 2, "unterminated policy name cut before the split character");
	jv_free(doc);

	/* A restart forgets. */
	trace_start(&t, 10000000);
	doc = written(&t, "p");
	is_int(count_x(doc, xs, 64), 0, "restart clears the ring");
	jv_free(doc);
	trace_free(&t);
}

/* The pid 2 events of a trace with ph `ph' on the row of request `tid'. */
static size_t
req_events(const struct jv *doc, const char *ph, double tid, struct jv **out,
    size_t max)
{
	struct jv	*ev = jget(doc, "traceEvents"), *e;
	size_t		 i, n = 0;

	for (i = 0; ev != NULL && i < ev->n; i++) {
		e = ev->items[i];
		if (jnum(e, "pid") != 2 || strcmp(jstr(e, "ph"), ph) != 0 ||
		    jnum(e, "tid") != tid)
			continue;
		if (n < max)
			out[n] = e;
		n++;
	}
	return (n);
}

#define MS	1000000ULL
#define T0	(1000 * MS)

/*
 * A chat (3) decodes in an iteration with two prompts (7: 60 tokens, 9:
 * 39); the trace shows its intervals by cause, names the prompts on the
 * others'-prefill one, and draws an arrow from each prompt to it.
 */
static void
test_trace_wait(void)
{
	struct trace		 t;
	struct reqwait		 chat, p7;
	struct wait_entry	 pe[2] = { { 7, 60 }, { 9, 39 } };
	struct wait_iter	 it;
	struct jv		*doc, *xs[16], *fs[16], *args, *bl;
	char			*cause = NULL;
	size_t			 n, i;
	double			 sum = 0;

	ok(trace_init(&t, 8, &cause) == 0, "wait trace: capacity 8");
	reqwait_init(&chat, T0);
	reqwait_init(&p7, T0 + 5 * MS);
	memset(&it, 0, sizeof it);
	it.start = T0 + 10 * MS;
	it.end = T0 + 110 * MS;
	it.prefill_tokens = 99;
	it.decode_tokens = 1;
	it.prefills = pe;
	it.nprefills = 2;
	it.a = 0;
	it.b = it.c = 1;
	/* Not recorded: no capture runs yet. */
	reqwait_iteration(&chat, &it, 3, WAIT_DECODE);
	trace_wait(&t, 3, 0, &chat, &it);
	trace_start(&t, T0);
	doc = written(&t, "m");
	is_int(req_events(doc, "X", 3, xs, 16), 0, "wait trace: nothing "
	    "before the capture");
	jv_free(doc);
	reqwait_init(&chat, T0);
	reqwait_iteration(&chat, &it, 3, WAIT_DECODE);
	is_int(chat.nlast, 3, "wait trace: queued, own decode, others'");
	is_int(reqwait_last_ns(&chat, WAIT_OTHERS_PREFILL), 99 * MS,
	    "wait trace: 99 ms others' in the last call");
	trace_wait(&t, 3, 0, &chat, &it);
	reqwait_iteration(&p7, &it, 7, WAIT_PREFILL);
	trace_wait(&t, 7, 0, &p7, &it);
	reqwait_finish(&chat, T0 + 115 * MS);
	trace_wait(&t, 3, -1, &chat, NULL);
	trace_stop(&t, T0 + 200 * MS);

	doc = written(&t, "m");
	n = req_events(doc, "X", 3, xs, 16);
	is_int(n, 4, "wait trace: four intervals for the chat");
	if (n == 4) {
		is_str(jstr(xs[0], "name"), "queued", "wait trace: queued");
		near(jnum(xs[0], "ts"), 1000000, 0, "wait trace: from arrival");
		near(jnum(xs[0], "dur"), 10000, 0, "wait trace: 10 ms queued");
		is_str(jstr(xs[1], "name"), "decode", "wait trace: own decode");
		near(jnum(xs[1], "dur"), 1000, 0, "wait trace: 1 ms decode");
		is_str(jstr(xs[2], "name"), "others_prefill",
		    "wait trace: others' prefill");
		near(jnum(xs[2], "ts"), 1011000, 0, "wait trace: after its own");
		near(jnum(xs[2], "dur"), 99000, 0, "wait trace: 99 ms others'");
		args = jget(xs[2], "args");
		near(jnum(args, "request"), 3, 0, "wait trace: args.request");
		near(jnum(args, "others_prefill_tokens"), 99, 0,
		    "wait trace: 99 others' tokens");
		near(jnum(args, "iteration_start_us"), 1010000, 0,
		    "wait trace: the iteration's start");
		bl = jget(args, "blamed");
		ok(bl != NULL && bl->t == J_ARR && bl->n == 2,
		    "wait trace: two requests blamed");
		if (bl != NULL && bl->t == J_ARR && bl->n == 2) {
			near(jnum(bl->items[0], "id"), 7, 0,
			    "wait trace: the larger prompt first");
			near(jnum(bl->items[0], "us"), 60000, 0,
			    "wait trace: 60 ms on it");
			near(jnum(bl->items[1], "id"), 9, 0,
			    "wait trace: then request 9");
			near(jnum(bl->items[1], "prefill_tokens"), 39, 0,
			    "wait trace: with its 39 tokens");
		}
		is_str(jstr(xs[3], "name"), "scheduling",
		    "wait trace: scheduling until the finish");
		for (i = 0; i < n; i++)
			sum += jnum(xs[i], "dur");
		near(sum, 115000, 0, "wait trace: the intervals sum to e2e");
	}
	n = req_events(doc, "f", 3, fs, 16);
	is_int(n, 2, "wait trace: two arrows end on the chat");
	if (n == 2) {
		is_str(jstr(fs[0], "bp"), "e", "wait trace: bound to its slice");
		near(jnum(fs[0], "ts"), 1011000.001, 1e-6,
		    "wait trace: inside the others' prefill interval");
		is_int(req_events(doc, "s", 7, xs, 16), 1,
		    "wait trace: one arrow starts on request 7");
		near(jnum(xs[0], "id"), jnum(fs[0], "id"), 0,
		    "wait trace: and it is the chat's first");
		near(jnum(xs[0], "ts"), 1010000.001, 1e-6,
		    "wait trace: at request 7's prefill");
	}
	n = req_events(doc, "X", 7, xs, 16);
	is_int(n, 3, "wait trace: request 7 queued, prefilled, waited on 9");
	if (n == 3) {
		is_str(jstr(xs[1], "name"), "prefill", "wait trace: its prefill");
		near(jnum(jget(xs[1], "args"), "prefill_tokens"), 60, 0,
		    "wait trace: of 60 tokens");
	}
	near(jnum(jget(doc, "otherData"), "intervals_recorded"), 7, 0,
	    "wait trace: 7 intervals recorded");
	jv_free(doc);
	trace_free(&t);
}

int
main(void)
{
	test_validator();
	test_escape();
	test_strbuf();
	test_trace();
	test_trace_wait();
	done_testing();
}
