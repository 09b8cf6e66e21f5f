/* conf.c: the phased.conf(5) parser. */
#include "config.h"

#include <sys/stat.h>

#include <ctype.h>
#include <errno.h>
#include <grp.h>
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
	c->default_policy = xstrdup("fcfs");
	c->policy_isolation = 1;
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
	free(c->policy_host);
	for (i = 0; i < c->n_models; i++) {
		free(c->models[i].name);
		free(c->models[i].path);
		for (j = 0; j < c->models[i].n_options; j++)
			free(c->models[i].options[j]);
		free(c->models[i].options);
	}
	free(c->models);
	memset(c, 0, sizeof *c);
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

/* Replace a string setting. */
static void
set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = xstrdup(v);
}

/* Parse a u32 setting within [min, max]. */
static int
set_u32(struct config_line *l, uint32_t *dst, long long min, long long max,
    int size, char **cause)
{
	uint64_t	 v;
	long long	 iv;
	char		*why = NULL;

	if (size) {
		if (parse_size(l->words[1], &v, &why) != 0)
			goto bad;
		if (v < (uint64_t)min || v > (uint64_t)max) {
			set_cause(cause, "%s:%d: %s %s is out of range %lld..%lld",
			    l->file, l->line, l->words[0], l->words[1], min, max);
			return (-1);
		}
		*dst = (uint32_t)v;
		return (0);
	}
	if (parse_int(l->words[1], min, max, &iv, l->words[0], &why) != 0)
		goto bad;
	*dst = (uint32_t)iv;
	return (0);
bad:
	set_cause(cause, "%s:%d: %s", l->file, l->line, why);
	free(why);
	return (-1);
}

/* Apply one parsed line to the configuration. */
static int
apply_line(struct config_line *l, struct phased_config *c, char **cause)
{
	const char		*k = l->words[0];
	struct config_model	*m;
	uint32_t		 u;
	uint64_t		 v;
	int			 i;
	char			*why = NULL;

	if (strcmp(k, "model") == 0) {
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
	if (l->n != 2) {
		set_cause(cause, "%s:%d: %s takes exactly one value", l->file,
		    l->line, k);
		return (-1);
	}
	if (strcmp(k, "socket") == 0) {
		if (l->words[1][0] != '/' || strlen(l->words[1]) >= 108) {
			set_cause(cause, "%s:%d: socket must be an absolute "
			    "path shorter than 108 bytes", l->file, l->line);
			return (-1);
		}
		set_str(&c->socket, l->words[1]);
	} else if (strcmp(k, "socket-group") == 0) {
		if (lookup_group(l->words[1], &c->socket_gid) != 0) {
			set_cause(cause, "%s:%d: unknown group '%s'", l->file,
			    l->line, l->words[1]);
			return (-1);
		}
		c->has_socket_gid = 1;
		set_str(&c->socket_group, l->words[1]);
	} else if (strcmp(k, "admin-group") == 0) {
		if (lookup_group(l->words[1], &c->admin_gid) != 0) {
			set_cause(cause, "%s:%d: unknown group '%s'", l->file,
			    l->line, l->words[1]);
			return (-1);
		}
		c->has_admin_gid = 1;
		set_str(&c->admin_group, l->words[1]);
	} else if (strcmp(k, "plugin-dir") == 0) {
		if (l->words[1][0] != '/') {
			set_cause(cause, "%s:%d: plugin-dir must be an "
			    "absolute path", l->file, l->line);
			return (-1);
		}
		set_str(&c->plugin_dir, l->words[1]);
	} else if (strcmp(k, "pidfile") == 0) {
		if (l->words[1][0] != '/') {
			set_cause(cause, "%s:%d: pidfile must be an absolute "
			    "path", l->file, l->line);
			return (-1);
		}
		set_str(&c->pidfile, l->words[1]);
	} else if (strcmp(k, "default-policy") == 0) {
		if (strchr(l->words[1], '/') != NULL || l->words[1][0] == '.') {
			set_cause(cause, "%s:%d: default-policy must be a "
			    "plugin name, not a path", l->file, l->line);
			return (-1);
		}
		set_str(&c->default_policy, l->words[1]);
	} else if (strcmp(k, "max-connections") == 0)
		return (set_u32(l, &c->max_connections, 1, 65536, 0, cause));
	else if (strcmp(k, "max-frame-size") == 0)
		return (set_u32(l, &c->max_frame, 1024, 256 << 20, 1, cause));
	else if (strcmp(k, "max-requests") == 0)
		return (set_u32(l, &c->max_requests, 1, 65536, 0, cause));
	else if (strcmp(k, "max-waiting") == 0)
		return (set_u32(l, &c->max_waiting, 1, 1 << 20, 0, cause));
	else if (strcmp(k, "threads") == 0) {
		if (set_u32(l, &u, 0, 1024, 0, cause) != 0)
			return (-1);
		c->threads = (int)u;
	} else if (strcmp(k, "bf16-dot") == 0) {
		if (strcmp(l->words[1], "yes") == 0)
			c->bf16_dot = 1;
		else if (strcmp(l->words[1], "no") == 0)
			c->bf16_dot = 0;
		else {
			set_cause(cause, "%s:%d: bf16-dot '%s' is not yes or no",
			    l->file, l->line, l->words[1]);
			return (-1);
		}
	} else if (strcmp(k, "policy-isolation") == 0) {
		if (strcmp(l->words[1], "yes") == 0)
			c->policy_isolation = 1;
		else if (strcmp(l->words[1], "no") == 0)
			c->policy_isolation = 0;
		else {
			set_cause(cause, "%s:%d: policy-isolation '%s' is not "
			    "yes or no", l->file, l->line, l->words[1]);
			return (-1);
		}
	} else if (strcmp(k, "policy-deadline") == 0)
		return (set_u32(l, &c->policy_deadline_ms, 0, 1000, 0, cause));
	else if (strcmp(k, "policy-host") == 0) {
		if (l->words[1][0] != '/') {
			set_cause(cause, "%s:%d: policy-host must be an "
			    "absolute path", l->file, l->line);
			return (-1);
		}
		set_str(&c->policy_host, l->words[1]);
	} else if (strcmp(k, "max-output-buffer") == 0) {
		if (parse_size(l->words[1], &v, &why) != 0) {
			set_cause(cause, "%s:%d: %s", l->file, l->line, why);
			free(why);
			return (-1);
		}
		if (v < 65536 || v > (1ULL << 32)) {
			set_cause(cause, "%s:%d: max-output-buffer %s is out of "
			    "range 64K..4G", l->file, l->line, l->words[1]);
			return (-1);
		}
		c->max_output = v;
	} else {
		set_cause(cause, "%s:%d: unknown key '%s'", l->file, l->line, k);
		return (-1);
	}
	return (0);
}

/* Parse configuration text (for tests and -n). */
int
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
