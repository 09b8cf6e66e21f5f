/* conf.c: the phased.conf(5) parser. */
#include "config.h"

#include <sys/stat.h>

#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <phased/client.h>

#include "conf.h"
#include "log.h"
#include "util.h"

#define CONFIG_MAX_BYTES	(1U << 20)
#define CONFIG_MAX_WORDS	64

struct config_line {
	const char	*file;
	int		 line;
	char		*words[CONFIG_MAX_WORDS];
	int		 n;
};

/* Fill a configuration with the built-in defaults. */
void
config_defaults(struct phased_config *c)
{
	char	buf[256];

	memset(c, 0, sizeof *c);
	if (phased_default_socket(buf, sizeof buf) == 0)
		c->socket = xstrdup(buf);
	else
		c->socket = xstrdup("/run/phased/phased.sock");
	c->plugin_dir = xstrdup(PHASED_PLUGINDIR);
	c->max_connections = 256;
	c->max_frame = 1U << 20;
	c->max_requests = 64;
	c->max_output = 8U << 20;
	c->max_waiting = 256;
	c->threads = 0;
	c->default_policy = xstrdup("chunked-prefill");
	c->http_max_body = 8U << 20;
	c->http_timeout = 30;
	c->policy_isolation = 1;
	c->bf16_dot = BF16_DOT_AUTO;
}

/* Free everything a configuration holds. */
void
config_free(struct phased_config *c)
{
	int	i, j;

	free(c->path);
	free(c->socket);
	free(c->socket_group);
	free(c->admin_group);
	free(c->plugin_dir);
	free(c->pidfile);
	free(c->default_policy);
	free(c->http_socket);
	free(c->http_listen);
	free(c->http_api_key);
	free(c->policy_host);
	for (i = 0; i < c->n_models; i++) {
		free(c->models[i].name);
		free(c->models[i].path);
		for (j = 0; j < c->models[i].n_options; j++)
			free(c->models[i].options[j]);
		free(c->models[i].options);
	}
	free(c->models);
	free(c->weights);
	memset(c, 0, sizeof *c);
}

/* The user-weight of uid, 1 when none is configured. */
uint32_t
config_user_weight(const struct phased_config *c, uint32_t uid)
{
	int	i;

	for (i = 0; i < c->n_weights; i++)
		if (c->weights[i].uid == uid)
			return (c->weights[i].weight);
	return (1);
}

/* Split one line into words; quotes group, backslash escapes, # comments. */
static int
split_line(char *s, struct config_line *l, char **cause)
{
	char	*out;

	l->n = 0;
	for (;;) {
		while (*s == ' ' || *s == '\t' || *s == '\r')
			s++;
		if (*s == '\0' || *s == '#')
			return (0);
		if (l->n == CONFIG_MAX_WORDS) {
			set_cause(cause, "%s:%d: too many words (limit %d)",
			    l->file, l->line, CONFIG_MAX_WORDS);
			return (-1);
		}
		l->words[l->n++] = out = s;
		if (*s == '"') {
			s++;
			for (;;) {
				if (*s == '\0') {
					set_cause(cause, "%s:%d: unterminated "
					    "quoted string", l->file, l->line);
					return (-1);
				}
				if (*s == '"')
					break;
				if (*s == '\\' && s[1] != '\0')
					s++;
				*out++ = *s++;
			}
			s++;
			if (*s != '\0' && *s != ' ' && *s != '\t' &&
			    *s != '\r' && *s != '#') {
				set_cause(cause, "%s:%d: garbage after quoted "
				    "string", l->file, l->line);
				return (-1);
			}
		} else {
			while (*s != '\0' && *s != ' ' && *s != '\t' &&
			    *s != '\r' && *s != '#')
				*out++ = *s++;
		}
		if (*s == '#') {
			*out = '\0';
			return (0);
		}
		if (*s != '\0')
			s++;
		*out = '\0';
	}
}

/* Look up a group by name or number. */
static int
lookup_group(const char *name, gid_t *gid)
{
	struct group	*gr;
	char		*end;
	unsigned long	 v;

	if ((gr = getgrnam(name)) != NULL) {
		*gid = gr->gr_gid;
		return (0);
	}
	errno = 0;
	v = strtoul(name, &end, 10);
	if (*name != '\0' && *end == '\0' && errno == 0 && v < (gid_t)-1) {
		*gid = (gid_t)v;
		return (0);
	}
	return (-1);
}

/* One key of phased.conf(5): how its value is parsed, into what, within what. */
struct conf_key {
	const char	*name;
	int		(*parse)(const struct conf_key *, const char *,
			    struct phased_config *, char **why);
	size_t		 off;		/* the field set */
	size_t		 off_gid;	/* groups: the gid and its flag */
	size_t		 off_has;
	uint64_t	 min, max;	/* numbers: the range; paths: max length */
	int		 size;		/* numbers: a size with K/M/G */
	size_t		 width;		/* numbers: sizeof the field */
};

/* The field a key sets. */
#define CONF_FIELD(c, off)	((void *)((char *)(c) + (off)))

/* Replace a string setting. */
static void
set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = xstrdup(v);
}

/* Write a size limit the way it is written in the file (64K, 4G). */
static const char *
fmt_size(uint64_t v, char *buf, size_t len)
{
	if (v != 0 && v % (1ULL << 30) == 0)
		snprintf(buf, len, "%lluG", (unsigned long long)(v >> 30));
	else if (v != 0 && v % (1ULL << 20) == 0)
		snprintf(buf, len, "%lluM", (unsigned long long)(v >> 20));
	else if (v != 0 && v % (1ULL << 10) == 0)
		snprintf(buf, len, "%lluK", (unsigned long long)(v >> 10));
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
	return (buf);
}

/* An absolute path, shorter than max bytes when max is set. */
static int
conf_path(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	if (v[0] != '/' || (k->max != 0 && strlen(v) >= k->max)) {
		if (k->max != 0)
			set_cause(why, "%s must be an absolute path shorter "
			    "than %llu bytes", k->name,
			    (unsigned long long)k->max);
		else
			set_cause(why, "%s must be an absolute path", k->name);
		return (-1);
	}
	set_str(CONF_FIELD(c, k->off), v);
	return (0);
}

/* A group by name or number, kept with its gid. */
static int
conf_group(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	if (lookup_group(v, CONF_FIELD(c, k->off_gid)) != 0) {
		set_cause(why, "unknown group '%s'", v);
		return (-1);
	}
	*(int *)CONF_FIELD(c, k->off_has) = 1;
	set_str(CONF_FIELD(c, k->off), v);
	return (0);
}

/* A policy plugin's name. */
static int
conf_policy(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	char	*e = NULL;

	if (name_check("policy", v, 0, &e) != 0) {
		set_cause(why, "%s: %s", k->name, e);
		free(e);
		return (-1);
	}
	set_str(CONF_FIELD(c, k->off), v);
	return (0);
}

/* A number (or a size) within [min, max], stored in a field of width bytes. */
static int
conf_num(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	uint64_t	 u;
	uint32_t	 u32;
	long long	 iv;
	char		 lo[32], hi[32];

	if (k->size) {
		if (parse_size(v, &u, why) != 0)
			return (-1);
		if (u < k->min || u > k->max) {
			set_cause(why, "%s %s is out of range %s..%s", k->name,
			    v, fmt_size(k->min, lo, sizeof lo),
			    fmt_size(k->max, hi, sizeof hi));
			return (-1);
		}
	} else {
		if (parse_int(v, (long long)k->min, (long long)k->max, &iv,
		    k->name, why) != 0)
			return (-1);
		u = (uint64_t)iv;
	}
	if (k->width == sizeof u32) {
		u32 = (uint32_t)u;
		memcpy(CONF_FIELD(c, k->off), &u32, sizeof u32);
	} else
		memcpy(CONF_FIELD(c, k->off), &u, sizeof u);
	return (0);
}

/* yes or no. */
static int
conf_yesno(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) {
		set_cause(why, "%s '%s' is not yes or no", k->name, v);
		return (-1);
	}
	*(int *)CONF_FIELD(c, k->off) = strcmp(v, "yes") == 0;
	return (0);
}

/* bf16-dot: yes, no or auto. */
static int
conf_bf16_dot(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	int	*f = CONF_FIELD(c, k->off);

	if (strcmp(v, "yes") == 0)
		*f = BF16_DOT_YES;
	else if (strcmp(v, "no") == 0)
		*f = BF16_DOT_NO;
	else if (strcmp(v, "auto") == 0)
		*f = BF16_DOT_AUTO;
	else {
		set_cause(why, "%s '%s' is not yes, no or auto", k->name, v);
		return (-1);
	}
	return (0);
}

/* The HTTP socket: "none" turns it off, else an absolute path. */
static int
conf_http_socket(const struct conf_key *k, const char *v,
    struct phased_config *c, char **why)
{
	if (strcmp(v, "none") == 0) {
		set_str(CONF_FIELD(c, k->off), v);
		return (0);
	}
	return (conf_path(k, v, c, why));
}

/* HOST:PORT for the HTTP listener. */
static int
conf_hostport(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	if (strrchr(v, ':') == NULL) {
		set_cause(why, "%s '%s' is not HOST:PORT", k->name, v);
		return (-1);
	}
	set_str(CONF_FIELD(c, k->off), v);
	return (0);
}

/* A secret of at least min characters. */
static int
conf_secret(const struct conf_key *k, const char *v, struct phased_config *c,
    char **why)
{
	if (strlen(v) < k->min) {
		set_cause(why, "%s must be at least %llu characters", k->name,
		    (unsigned long long)k->min);
		return (-1);
	}
	set_str(CONF_FIELD(c, k->off), v);
	return (0);
}

#define CK_PATH(n, f, max)	{ n, conf_path, offsetof(struct phased_config, f), \
	0, 0, 0, max, 0, 0 }
#define CK_GROUP(n, f, g, h)	{ n, conf_group, \
	offsetof(struct phased_config, f), offsetof(struct phased_config, g), \
	offsetof(struct phased_config, h), 0, 0, 0, 0 }
#define CK_NUM(n, f, min, max, size)	{ n, conf_num, \
	offsetof(struct phased_config, f), 0, 0, min, max, size, \
	sizeof ((struct phased_config *)0)->f }

/* Every single-valued key (phased.conf(5) documents each). */
static const struct conf_key conf_keys[] = {
	CK_PATH("socket", socket, 108),
	CK_GROUP("socket-group", socket_group, socket_gid, has_socket_gid),
	CK_GROUP("admin-group", admin_group, admin_gid, has_admin_gid),
	CK_PATH("plugin-dir", plugin_dir, 0),
	CK_PATH("pidfile", pidfile, 0),
	{ "default-policy", conf_policy,
	    offsetof(struct phased_config, default_policy), 0, 0, 0, 0, 0, 0 },
	CK_NUM("max-connections", max_connections, 1, 65536, 0),
	CK_NUM("max-frame-size", max_frame, 1024, 256 << 20, 1),
	CK_NUM("max-requests", max_requests, 1, 65536, 0),
	CK_NUM("max-waiting", max_waiting, 1, 1 << 20, 0),
	CK_NUM("threads", threads, 0, 1024, 0),
	{ "bf16-dot", conf_bf16_dot, offsetof(struct phased_config, bf16_dot),
	    0, 0, 0, 0, 0, 0 },
	CK_NUM("max-output-buffer", max_output, 65536, 1ULL << 32, 1),
	{ "http-socket", conf_http_socket,
	    offsetof(struct phased_config, http_socket), 0, 0, 0, 108, 0, 0 },
	{ "http-listen", conf_hostport,
	    offsetof(struct phased_config, http_listen), 0, 0, 0, 0, 0, 0 },
	{ "http-api-key", conf_secret,
	    offsetof(struct phased_config, http_api_key), 0, 0, 16, 0, 0, 0 },
	CK_NUM("http-timeout", http_timeout, 1, 3600, 0),
	CK_NUM("http-max-body", http_max_body, 1024, 1ULL << 30, 1),
	CK_NUM("model-memory-limit", model_memory_limit, 0, UINT64_MAX, 1),
	{ "policy-isolation", conf_yesno,
	    offsetof(struct phased_config, policy_isolation), 0, 0, 0, 0, 0, 0 },
	CK_NUM("policy-deadline", policy_deadline_ms, 0, 1000, 0),
	CK_PATH("policy-host", policy_host, 0),
};

/* A model line: name, path and key=value options. */
static int
apply_model(struct config_line *l, struct phased_config *c, char **cause)
{
	struct config_model	*m;
	int			 i;

	if (l->n < 3) {
		set_cause(cause, "%s:%d: model needs a name and a path",
		    l->file, l->line);
		return (-1);
	}
	for (i = 0; i < c->n_models; i++) {
		if (strcmp(c->models[i].name, l->words[1]) == 0) {
			set_cause(cause, "%s:%d: model %s already "
			    "defined at line %d", l->file, l->line,
			    l->words[1], c->models[i].line);
			return (-1);
		}
	}
	for (i = 3; i < l->n; i++) {
		if (strchr(l->words[i], '=') == NULL ||
		    l->words[i][0] == '=') {
			set_cause(cause, "%s:%d: model option '%s' is "
			    "not key=value", l->file, l->line,
			    l->words[i]);
			return (-1);
		}
	}
	c->models = xreallocarray(c->models, c->n_models + 1,
	    sizeof *c->models);
	m = &c->models[c->n_models++];
	m->name = xstrdup(l->words[1]);
	m->path = xstrdup(l->words[2]);
	m->line = l->line;
	m->n_options = l->n - 3;
	m->options = xcalloc(m->n_options + 1, sizeof *m->options);
	for (i = 3; i < l->n; i++)
		m->options[i - 3] = xstrdup(l->words[i]);
	return (0);
}

/* A user-weight line: a user (name, uid or "network") and 1..1000. */
static int
apply_user_weight(struct config_line *l, struct phased_config *c,
    char **cause)
{
	struct passwd	*pw;
	long long	 w;
	uint32_t	 uid;
	char		*end, *why = NULL;
	unsigned long	 v;
	int		 i;

	if (l->n != 3) {
		set_cause(cause, "%s:%d: user-weight takes a user and a weight",
		    l->file, l->line);
		return (-1);
	}
	errno = 0;
	if (strcmp(l->words[1], "network") == 0)
		uid = 0xfffffffeu;	/* PHASED_UID_NETWORK */
	else if ((pw = getpwnam(l->words[1])) != NULL)
		uid = (uint32_t)pw->pw_uid;
	else if ((v = strtoul(l->words[1], &end, 10)) < 0xfffffffeul &&
	    *end == '\0' && errno == 0 && l->words[1][0] >= '0' &&
	    l->words[1][0] <= '9')
		uid = (uint32_t)v;
	else {
		set_cause(cause, "%s:%d: user-weight: unknown user '%s'",
		    l->file, l->line, l->words[1]);
		return (-1);
	}
	if (parse_int(l->words[2], 1, 1000, &w, "user-weight", &why) != 0) {
		set_cause(cause, "%s:%d: %s", l->file, l->line, why);
		free(why);
		return (-1);
	}
	for (i = 0; i < c->n_weights; i++) {
		if (c->weights[i].uid == uid) {
			c->weights[i].weight = (uint32_t)w;
			return (0);
		}
	}
	c->weights = xreallocarray(c->weights, c->n_weights + 1,
	    sizeof *c->weights);
	c->weights[c->n_weights].uid = uid;
	c->weights[c->n_weights].weight = (uint32_t)w;
	c->n_weights++;
	return (0);
}

/* Apply one parsed line to the configuration. */
static int
apply_line(struct config_line *l, struct phased_config *c, char **cause)
{
	const struct conf_key	*k = NULL;
	size_t			 i;
	char			*why = NULL;

	if (strcmp(l->words[0], "model") == 0)
		return (apply_model(l, c, cause));
	if (strcmp(l->words[0], "user-weight") == 0)
		return (apply_user_weight(l, c, cause));
	for (i = 0; i < sizeof conf_keys / sizeof conf_keys[0]; i++) {
		if (strcmp(l->words[0], conf_keys[i].name) == 0)
			k = &conf_keys[i];
	}
	if (k == NULL) {
		set_cause(cause, "%s:%d: unknown key '%s'", l->file, l->line,
		    l->words[0]);
		return (-1);
	}
	if (l->n != 2) {
		set_cause(cause, "%s:%d: %s takes exactly one value", l->file,
		    l->line, k->name);
		return (-1);
	}
	if (k->parse(k, l->words[1], c, &why) != 0) {
		set_cause(cause, "%s:%d: %s", l->file, l->line, why);
		free(why);
		return (-1);
	}
	return (0);
}

/* Parse configuration text named name (for messages) on top of c. */
static int
config_parse(const char *name, const char *text, struct phased_config *c,
    char **cause)
{
	struct config_line	 l;
	char			*copy, *line, *next;

	copy = xstrdup(text);
	l.file = name;
	l.line = 0;
	for (line = copy; line != NULL; line = next) {
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		l.line++;
		if (split_line(line, &l, cause) != 0)
			goto fail;
		if (l.n == 0)
			continue;
		if (apply_line(&l, c, cause) != 0)
			goto fail;
	}
	free(copy);
	return (0);
fail:
	free(copy);
	return (-1);
}

/* Parse a file on top of the defaults; -1 with "FILE:LINE: ..." in *cause. */
int
config_load(const char *path, struct phased_config *c, char **cause)
{
	FILE		*f;
	struct stat	 st;
	char		*text;
	size_t		 n;
	int		 rc;

	if ((f = fopen(path, "r")) == NULL) {
		set_cause(cause, "%s: %s", path, strerror(errno));
		return (-1);
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		set_cause(cause, "%s: not a regular file", path);
		fclose(f);
		return (-1);
	}
	if (st.st_size > CONFIG_MAX_BYTES) {
		set_cause(cause, "%s: file is %lld bytes (limit %u)", path,
		    (long long)st.st_size, CONFIG_MAX_BYTES);
		fclose(f);
		return (-1);
	}
	text = xmalloc((size_t)st.st_size + 1);
	n = fread(text, 1, (size_t)st.st_size, f);
	text[n] = '\0';
	fclose(f);
	if (strlen(text) != n) {
		set_cause(cause, "%s: file contains a NUL byte", path);
		free(text);
		return (-1);
	}
	rc = config_parse(path, text, c, cause);
	free(text);
	if (rc == 0) {
		free(c->path);
		c->path = xstrdup(path);
	}
	return (rc);
}
