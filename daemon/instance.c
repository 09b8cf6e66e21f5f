/*
 * instance.c: model instances.  A load parses its options, maps and
 * prepares the model on a loader thread (progress and the result come back
 * through the mailbox), then starts the instance's engine and policy.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <phased/policy.h>

#include "chat_prompt.h"
#include "conn.h"
#include "gen.h"
#include "instance.h"
#include "log.h"
#include "mailbox.h"
#include "model.h"
#include "phased.h"
#include "policy_guard.h"
#include "util.h"

#define INST_CTX_DEFAULT_MAX	4096	/* ctx when not given: the model's, capped */
#define INST_MAX_SEQS_DEFAULT	64
#define INST_KV_CTX_MULT	4	/* default pool: this many full contexts */
#define INST_KEEP_ALIVE_DEFAULT_MS	(5 * 60 * 1000)	/* models loaded on demand */

void (*instance_load_hook)(const char *, const char *);

static TAILQ_HEAD(, instance) instances = TAILQ_HEAD_INITIALIZER(instances);

struct load_msg {
	struct mbox_msg	 m;
	struct instance	*inst;
	int		 done;
	double		 fraction;
	struct model	*model;
	char		*cause;
	char		*chat_template;	/* the GGUF's, NULL if none */
	struct guarded	*pol;		/* the policy, loaded in its host */
	char		*pol_name;	/* NULL: not loaded here */
	char		*pol_cause;
};

/*
 * Parse GPUs such as "cuda0", "cuda0-3" or "cuda0+cuda1" into spec; a group
 * of several runs the model tensor-parallel across them.
 */
static int
parse_gpu(const char *s, struct engine_group_spec *gs, char **cause)
{
	char	*copy, *tok, *save = NULL, *end;
	long	 a, b, i;
	int	 j;

	copy = xstrdup(s);
	for (tok = strtok_r(copy, "+", &save); tok != NULL;
	    tok = strtok_r(NULL, "+", &save)) {
		if (strncmp(tok, "cuda", 4) != 0)
			goto bad;
		a = strtol(tok + 4, &end, 10);
		if (end == tok + 4 || (*end != '\0' && *end != '-'))
			goto bad;
		b = a;
		if (*end == '-') {
			tok = end + 1;
			b = strtol(tok, &end, 10);
			if (end == tok || *end != '\0')
				goto bad;
		}
		if (a < 0 || b < a || b > 255)
			goto bad;
		for (i = a; i <= b; i++) {
			for (j = 0; j < gs->n_cpus; j++) {
				if (gs->cpus[j] == (int)i) {
					set_cause(cause, "device group %s lists "
					    "cuda%ld twice", s, i);
					free(copy);
					return (-1);
				}
			}
			if (gs->n_cpus == 8) {
				set_cause(cause, "device group %s lists more "
				    "than 8 gpus", s);
				free(copy);
				return (-1);
			}
			gs->cpus[gs->n_cpus++] = (int)i;
		}
	}
	free(copy);
	gs->n_threads = 1;
	snprintf(gs->backend, sizeof gs->backend, "cuda");
	snprintf(gs->devices, sizeof gs->devices, "%s", s);
	return (0);
bad:
	free(copy);
	set_cause(cause, "bad device '%s' (expected e.g. cuda0, cuda0-1 or "
	    "cuda0+cuda2)", s);
	return (-1);
}

/* Parse a CPU list such as "cpu0-1" or "cpu0+cpu2" (or a GPU) into spec. */
static int
parse_cpus(const char *s, struct engine_group_spec *gs, char **cause)
{
	char		*copy, *tok, *save = NULL, *dash, *end;
	long		 a, b, i;

	if (strncmp(s, "cuda", 4) == 0)
		return (parse_gpu(s, gs, cause));
	copy = xstrdup(s);
	for (tok = strtok_r(copy, "+", &save); tok != NULL;
	    tok = strtok_r(NULL, "+", &save)) {
		if (strncmp(tok, "cpu", 3) != 0)
			goto bad;
		tok += 3;
		dash = strchr(tok, '-');
		a = strtol(tok, &end, 10);
		if (end == tok || (dash == NULL && *end != '\0') ||
		    (dash != NULL && end != dash))
			goto bad;
		b = a;
		if (dash != NULL) {
			b = strtol(dash + 1, &end, 10);
			if (end == dash + 1 || *end != '\0')
				goto bad;
		}
		if (a < 0 || b < a || b > 4095)
			goto bad;
		for (i = a; i <= b; i++) {
			if (gs->n_cpus == (int)(sizeof gs->cpus /
			    sizeof gs->cpus[0])) {
				set_cause(cause, "device group %s lists more "
				    "than %zu cpus", s, sizeof gs->cpus /
				    sizeof gs->cpus[0]);
				free(copy);
				return (-1);
			}
			gs->cpus[gs->n_cpus++] = (int)i;
		}
	}
	free(copy);
	snprintf(gs->devices, sizeof gs->devices, "%s", s);
	snprintf(gs->backend, sizeof gs->backend, "cpu");
	gs->n_threads = gs->n_cpus;
	return (0);
bad:
	free(copy);
	set_cause(cause, "bad device list '%s' (expected e.g. cpu0, cpu0-1, "
	    "cpu0+cpu2 or cuda0)", s);
	return (-1);
}

/* Parse groups=ROLE:DEVICES[/ROLE:DEVICES...]. */
static int
parse_groups(const char *v, struct inst_opts *o, char **cause)
{
	struct engine_group_spec	*gs;
	char				*copy, *tok, *save = NULL, *colon;
	int				 rc = -1;

	copy = xstrdup(v);
	o->n_groups = 0;
	for (tok = strtok_r(copy, "/", &save); tok != NULL;
	    tok = strtok_r(NULL, "/", &save)) {
		if (o->n_groups == ENGINE_MAX_GROUPS) {
			set_cause(cause, "groups: more than %d device groups",
			    ENGINE_MAX_GROUPS);
			goto out;
		}
		gs = &o->groups[o->n_groups];
		memset(gs, 0, sizeof *gs);
		if ((colon = strchr(tok, ':')) == NULL) {
			set_cause(cause, "groups: '%s' is not ROLE:DEVICES", tok);
			goto out;
		}
		*colon = '\0';
		if (strcmp(tok, "mixed") == 0)
			gs->role = PHASED_ROLE_MIXED;
		else if (strcmp(tok, "prefill") == 0)
			gs->role = PHASED_ROLE_PREFILL;
		else if (strcmp(tok, "decode") == 0)
			gs->role = PHASED_ROLE_DECODE;
		else {
			set_cause(cause, "groups: unknown role '%s' (mixed, "
			    "prefill or decode)", tok);
			goto out;
		}
		if (parse_cpus(colon + 1, gs, cause) != 0)
			goto out;
		o->n_groups++;
	}
	if (o->n_groups == 0) {
		set_cause(cause, "groups: no device group given");
		goto out;
	}
	rc = 0;
out:
	free(copy);
	return (rc);
}

/* Parse one numeric option within [min, max]. */
static int
opt_u32(const char *k, const char *v, long long min, long long max,
    uint32_t *out, char **cause)
{
	long long	x;

	if (parse_int(v, min, max, &x, k, cause) != 0)
		return (-1);
	*out = (uint32_t)x;
	return (0);
}

/* Parse key=value options; -1 and *cause naming the bad one. */
int
inst_opts_parse(char *const *argv, int argc, struct inst_opts *o, char **cause)
{
	const char	*k, *v;
	char		*key, *eq;
	uint32_t	 u = 0;
	int		 i, rc = 0;

	memset(o, 0, sizeof *o);
	for (i = 0; i < argc && rc == 0; i++) {
		if ((eq = strchr(argv[i], '=')) == NULL || eq == argv[i]) {
			/* Free what the options before it allocated. */
			set_cause(cause, "option '%s' is not key=value",
			    argv[i]);
			rc = -1;
			break;
		}
		key = xstrndup(argv[i], (size_t)(eq - argv[i]));
		k = key;
		v = eq + 1;
		if (strcmp(k, "ctx") == 0)
			rc = opt_u32(k, v, 16, MODEL_MAX_CTX, &o->ctx, cause);
		else if (strcmp(k, "threads") == 0) {
			rc = opt_u32(k, v, 1, 1024, &u, cause);
			o->threads = (int)u;
		} else if (strcmp(k, "kv") == 0) {
			if (strcmp(v, "f16") == 0 || strcmp(v, "F16") == 0)
				o->kv_f32 = 0;
			else if (strcmp(v, "f32") == 0 || strcmp(v, "F32") == 0)
				o->kv_f32 = 1;
			else {
				set_cause(cause, "kv '%s' is not f16 or f32", v);
				rc = -1;
			}
		} else if (strcmp(k, "kv-tokens") == 0)
			rc = opt_u32(k, v, 16, 1 << 26, &o->kv_tokens, cause);
		else if (strcmp(k, "block-size") == 0) {
			rc = opt_u32(k, v, 8, 256, &o->block_size, cause);
			if (rc == 0 && o->block_size % 8 != 0) {
				set_cause(cause, "block-size %u is not a "
				    "multiple of 8", o->block_size);
				rc = -1;
			}
		} else if (strcmp(k, "max-batch-tokens") == 0)
			rc = opt_u32(k, v, 1, MODEL_MAX_BATCH_TOKENS,
			    &o->max_batch_tokens, cause);
		else if (strcmp(k, "max-seqs") == 0)
			rc = opt_u32(k, v, 1, 4096, &o->max_seqs, cause);
		else if (strcmp(k, "policy") == 0) {
			if (*v == '\0' || strchr(v, '/') != NULL || *v == '.') {
				set_cause(cause, "policy '%s' must be a plugin "
				    "name, not a path", v);
				rc = -1;
			} else {
				free(o->policy);
				o->policy = xstrdup(v);
			}
		} else if (strncmp(k, "policy.", 7) == 0 && k[7] != '\0') {
			if (o->n_policy_params == INST_MAX_POLICY_PARAMS) {
				set_cause(cause, "more than %d policy "
				    "parameters", INST_MAX_POLICY_PARAMS);
				rc = -1;
			} else
				o->policy_params[o->n_policy_params++] =
				    xstrdup(argv[i] + 7);
		} else if (strcmp(k, "groups") == 0)
			rc = parse_groups(v, o, cause);
		else if (strcmp(k, "template") == 0) {
			if (chat_template_by_name(v) == NULL) {
				set_cause(cause, "template '%s' is not one of %s",
				    v, chat_template_names());
				rc = -1;
			} else {
				free(o->chat_template);
				o->chat_template = xstrdup(v);
			}
		} else if (strcmp(k, "keep-alive") == 0) {
			rc = inst_parse_keep_alive(v, &o->keep_alive_ms, cause);
			o->has_keep_alive = rc == 0;
		} else if (strcmp(k, "load") == 0) {
			if (strcmp(v, "lazy") == 0)
				o->lazy = 1;
			else if (strcmp(v, "start") == 0)
				o->lazy = 0;
			else {
				set_cause(cause, "load '%s' is not lazy or "
				    "start", v);
				rc = -1;
			}
		} else if (strcmp(k, "prefix-cache") == 0) {
			if (strcmp(v, "yes") == 0 || strcmp(v, "on") == 0)
				o->no_prefix_cache = 0;
			else if (strcmp(v, "no") == 0 || strcmp(v, "off") == 0)
				o->no_prefix_cache = 1;
			else {
				set_cause(cause, "prefix-cache '%s' is not yes "
				    "or no", v);
				rc = -1;
			}
		} else if (strcmp(k, "cuda-graphs") == 0) {
			if (strcmp(v, "on") == 0 || strcmp(v, "yes") == 0)
				o->cuda_graphs = 1;
			else if (strcmp(v, "off") == 0 || strcmp(v, "no") == 0)
				o->cuda_graphs = -1;
			else if (strcmp(v, "auto") == 0)
				o->cuda_graphs = 0;
			else {
				set_cause(cause, "cuda-graphs '%s' is not on, "
				    "off or auto", v);
				rc = -1;
			}
		} else if (strcmp(k, "policy-deadline") == 0)
			rc = opt_u32(k, v, 1, 1000, &o->policy_deadline_ms,
			    cause);
		else {
			set_cause(cause, "unknown option '%s' (ctx, threads, kv, "
			    "kv-tokens, block-size, max-batch-tokens, max-seqs, "
			    "policy, policy.KEY, policy-deadline, groups, "
			    "template, keep-alive, load, prefix-cache, "
			    "cuda-graphs)", k);
			rc = -1;
		}
		free(key);
	}
	if (rc != 0)
		inst_opts_free(o);
	return (rc);
}

/* Parse a keep-alive: Go-style durations, seconds, -1 (forever) or 0. */
int
inst_parse_keep_alive(const char *v, int64_t *ms, char **cause)
{
	const char	*p = v;
	char		*end;
	double		 x, total = 0;
	int		 neg = 0;

	if (*p == '-') {
		neg = 1;
		p++;
	}
	if (*p == '\0')
		goto bad;
	while (*p != '\0') {
		x = strtod(p, &end);
		if (end == p || x < 0)
			goto bad;
		p = end;
		if (strncmp(p, "ms", 2) == 0) {
			p += 2;
			total += x;
		} else if (*p == 'h') {
			p++;
			total += x * 3600e3;
		} else if (*p == 'm') {
			p++;
			total += x * 60e3;
		} else if (*p == 's') {
			p++;
			total += x * 1e3;
		} else if (*p == '\0' && p == end && total == 0)
			total = x * 1e3;	/* a bare number: seconds */
		else
			goto bad;
	}
	if (neg) {
		*ms = -1;	/* any negative duration: forever, as Ollama */
		return (0);
	}
	if (total > 365 * 86400e3)
		goto bad;
	*ms = (int64_t)total;
	return (0);
bad:
	set_cause(cause, "keep-alive '%s' is not a duration such as 5m, 1h, "
	    "300 (seconds), 0 or -1 (forever), up to a year", v);
	return (-1);
}

/* Free what inst_opts_parse() allocated. */
void
inst_opts_free(struct inst_opts *o)
{
	int	i;

	free(o->policy);
	free(o->chat_template);
	for (i = 0; i < o->n_policy_params; i++)
		free(o->policy_params[i]);
	memset(o, 0, sizeof *o);
}

/* Find a ready or loading instance by name. */
struct instance *
instance_find(const char *name)
{
	struct instance	*in;

	TAILQ_FOREACH(in, &instances, entry)
		if (strcmp(in->name, name) == 0)
			return (in);
	return (NULL);
}

/* First instance. */
struct instance *
instance_first(void)
{
	return (TAILQ_FIRST(&instances));
}

/* Next instance. */
struct instance *
instance_next(struct instance *in)
{
	return (TAILQ_NEXT(in, entry));
}

/* Free an instance that has no engine running. */
static void
instance_free(struct instance *in)
{
	if (in->model != NULL)
		model_free(in->model);
	inst_opts_free(&in->opts);
	free(in->name);
	free(in->path);
	free(in->load_plugindir);
	free(in->load_policy);
	free(in);
}

/* Send a load's final reply and close its stream. */
static void
load_reply(struct instance *in, const char *err)
{
	if (in->load_stream == NULL)
		return;
	if (in->load_stream->conn != NULL) {
		if (err != NULL)
			conn_send_error(in->load_stream->conn,
			    in->load_stream->req_id,
			    PHASED__ERROR_CODE__ERR_LOAD, "%s", err);
		else
			conn_send_ok(in->load_stream->conn,
			    in->load_stream->req_id, "loaded");
	}
	stream_free(in->load_stream);
	in->load_stream = NULL;
}

/* The load's client went away: the load goes on without it. */
static void
load_stream_cancel(struct stream *s, const char *why)
{
	struct instance	*in = s->arg;

	in->load_stream = NULL;
	stream_free(s);
}

/*
 * The policy host program: policy-host from phased.conf, else the installed
 * one in libexecdir, else one next to the phased executable (a build tree,
 * where libtool may put the real executable one folder down in .libs).
 */
const char *
instance_policy_host(void)
{
	static char	 found[PATH_MAX + 32];
	char		 exe[PATH_MAX], *slash;
	ssize_t		 n;
	int		 up;

	if (phased->conf.policy_host != NULL)
		return (phased->conf.policy_host);
	if (found[0] != '\0')
		return (found);
	snprintf(found, sizeof found, "%s/phased-policy-host",
	    PHASED_LIBEXECDIR);
	if ((n = readlink("/proc/self/exe", exe, sizeof exe - 1)) <= 0)
		return (found);
	exe[n] = '\0';
	for (up = 0; up < 2; up++) {
		if ((slash = strrchr(exe, '/')) == NULL)
			break;
		*slash = '\0';
		snprintf(found, sizeof found, "%s/phased-policy-host", exe);
		if (access(found, X_OK) == 0)
			return (found);
	}
	snprintf(found, sizeof found, "%s/phased-policy-host",
	    PHASED_LIBEXECDIR);
	return (found);
}

/* Fill the engine's configuration from the instance's options. */
static void
engine_config_of(struct instance *in, struct model *m,
    struct engine_config *ec)
{
	const struct model_info	*mi = model_info(m);
	uint64_t		 kv_tokens;
	uint32_t		 bs = mi->kv.block_size;

	memset(ec, 0, sizeof *ec);
	ec->name = in->name;
	ec->ctx = mi->n_ctx;
	ec->max_batch_tokens = in->opts.max_batch_tokens != 0 ?
	    in->opts.max_batch_tokens : ec->ctx;
	ec->max_seqs = in->opts.max_seqs != 0 ? in->opts.max_seqs :
	    INST_MAX_SEQS_DEFAULT;
	ec->max_waiting = phased->conf.max_waiting;
	kv_tokens = in->opts.kv_tokens != 0 ? in->opts.kv_tokens :
	    (uint64_t)ec->ctx * INST_KV_CTX_MULT;
	ec->kv_blocks = (uint32_t)((kv_tokens + bs - 1) / bs);
	if (in->opts.n_groups == 0) {
		ec->n_groups = 1;
		ec->groups[0].role = PHASED_ROLE_MIXED;
		ec->groups[0].n_threads = in->opts.threads != 0 ?
		    in->opts.threads : phased->conf.threads;
		snprintf(ec->groups[0].devices, sizeof ec->groups[0].devices,
		    "cpu");
	} else {
		ec->n_groups = in->opts.n_groups;
		memcpy(ec->groups, in->opts.groups, sizeof ec->groups);
	}
	ec->prefix_cache = !in->opts.no_prefix_cache;
	ec->cuda_graphs = in->opts.cuda_graphs;
	ec->policy_isolate = phased->conf.policy_isolation;
	ec->policy_host = instance_policy_host();
	ec->policy_deadline_ms = in->opts.policy_deadline_ms != 0 ?
	    in->opts.policy_deadline_ms : phased->conf.policy_deadline_ms;
}

/* Free a final load message and what it still holds. */
static void
load_msg_free(struct load_msg *lm)
{
	pguard_discard(lm->pol);
	free(lm->pol_name);
	free(lm->pol_cause);
	free(lm->cause);
	free(lm->chat_template);
	free(lm);
}

/* The policy a model starts with: its option, else the default. */
static const char *
start_policy(struct instance *in, const struct engine_config *ec)
{
	int	i, prefill = 0, decode = 0;

	for (i = 0; i < ec->n_groups; i++) {
		prefill += ec->groups[i].role == PHASED_ROLE_PREFILL;
		decode += ec->groups[i].role == PHASED_ROLE_DECODE;
	}
	if (in->opts.policy != NULL)
		return (in->opts.policy);
	return (prefill > 0 && decode > 0 ? "disaggregated" : in->load_policy);
}

/*
 * Start the engine and policy of a loaded model.  The loader thread has
 * loaded the policy in its host already, so no plugin runs here.
 */
static int
instance_start(struct instance *in, struct load_msg *lm, char **cause)
{
	struct engine_config	 ec;

	engine_config_of(in, in->model, &ec);
	if (lm->pol_cause != NULL) {
		set_cause(cause, "%s", lm->pol_cause);
		return (-1);
	}
	if ((in->engine = engine_create(in->model, &ec, instance_engine_emit,
	    in, cause)) == NULL)
		return (-1);
	if (lm->pol_name != NULL) {
		engine_stage_policy(in->engine, lm->pol);
		lm->pol = NULL;
		return (0);
	}
	if (engine_set_policy(in->engine, in->load_plugindir,
	    start_policy(in, &ec), (size_t)in->opts.n_policy_params,
	    in->opts.policy_params, cause) != 0) {
		engine_destroy(in->engine, "policy failed");
		in->engine = NULL;
		mailbox_drain();
		return (-1);
	}
	return (0);
}

/* A loader thread reported progress or its result. */
static void
load_deliver(struct mbox_msg *m)
{
	struct load_msg			 *lm = (struct load_msg *)m;
	struct instance			 *in = lm->inst;
	Phased__Response		  r = PHASED__RESPONSE__INIT;
	Phased__LoadProgress		  lp = PHASED__LOAD_PROGRESS__INIT;
	char				 *cause = NULL;

	if (!lm->done) {
		if (in->load_stream != NULL) {
			lp.fraction = (float)lm->fraction;
			lp.stage = (char *)"preparing weights";
			r.body_case = PHASED__RESPONSE__BODY_LOAD_PROGRESS;
			r.load_progress = &lp;
			stream_send(in->load_stream, &r);
		}
		free(lm);
		return;
	}
	pthread_join(in->loader, NULL);
	in->loader_running = 0;
	in->model = lm->model;
	if (in->model == NULL)
		cause = lm->cause;
	else if (instance_start(in, lm, &cause) != 0)
		;
	else {
		instance_chat_setup(in, lm->chat_template);
		in->state = INST_READY;
		instance_touch(in);
		log_info("model %s loaded from %s", in->name, in->path);
		if (in->model->n_f16_bf16 > 0)
			log_info("model %s: %u of %u F16 matrices hold bf16 "
			    "values and take bf16 dot products", in->name,
			    in->model->n_f16_bf16, in->model->n_f16);
		if (in->model->n_f16_i16 > 0)
			log_info("model %s: %u of %u F16 matrices take 16-bit "
			    "integer dot products", in->name,
			    in->model->n_f16_i16, in->model->n_f16);
		if (in->model->n_bf16_i16 > 0)
			log_info("model %s: %u of %u BF16 matrices take 16-bit "
			    "integer dot products", in->name,
			    in->model->n_bf16_i16, in->model->n_bf16);
		if (in->model->attn_bf16 || in->model->attn_i16)
			log_info("model %s: attention on the CPU takes %s dot "
			    "products", in->name, in->model->attn_bf16 ?
			    "bf16" : "16-bit integer");
		load_reply(in, NULL);
		if (instance_load_hook != NULL)
			instance_load_hook(in->name, NULL);
		load_msg_free(lm);
		return;
	}
	log_warnx("model %s: %s", in->name, cause);
	load_reply(in, cause);
	TAILQ_REMOVE(&instances, in, entry);
	if (instance_load_hook != NULL)
		instance_load_hook(in->name, cause);
	if (cause != lm->cause)
		free(cause);
	instance_free(in);
	load_msg_free(lm);
}

/* Loader thread: report progress in steps of 2%. */
static void
load_progress(void *arg, double fraction)
{
	struct instance	*in = arg;
	struct load_msg	*lm;

	if (fraction < 1.0 && fraction - in->last_progress < 0.02)
		return;
	/* Clients waiting on a load see its progress in the log. */
	if (in->on_demand && (int)(fraction * 10) != (int)(in->last_progress * 10))
		log_info("model %s: loading, %.0f%%", in->name, fraction * 100);
	in->last_progress = fraction;
	lm = xcalloc(1, sizeof *lm);
	lm->m.deliver = load_deliver;
	lm->inst = in;
	lm->fraction = fraction;
	mailbox_post(&lm->m);
}

/* In the loader thread: load the starting policy in its policy host. */
static void
load_policy(struct instance *in, struct load_msg *lm)
{
	struct engine_config	 ec;
	struct pguard_conf	 pc;
	const char		*name;

	engine_config_of(in, lm->model, &ec);
	name = start_policy(in, &ec);
	if (strcmp(name, "builtin") == 0)
		return;
	memset(&pc, 0, sizeof pc);
	pc.isolate = ec.policy_isolate;
	pc.host = ec.policy_host;
	pc.deadline_ms = ec.policy_deadline_ms;
	pc.cap = engine_policy_cap(&ec);
	lm->pol_name = xstrdup(name);
	lm->pol = pguard_load(&pc, in->load_plugindir, name,
	    (size_t)in->opts.n_policy_params, in->opts.policy_params,
	    &lm->pol_cause);
}

/* Loader thread body. */
static void *
load_main(void *arg)
{
	struct instance		*in = arg;
	struct load_msg		*lm;
	struct model_opts	 mo;

	memset(&mo, 0, sizeof mo);
	/* Not phased->conf: a reload may replace it on the control thread. */
	mo.n_threads = in->load_threads;
	mo.kv_type_f32 = in->opts.kv_f32;
	mo.kv_block_size = (int)in->opts.block_size;
	mo.ctx = (int)in->opts.ctx;
	lm = xcalloc(1, sizeof *lm);
	lm->m.deliver = load_deliver;
	lm->inst = in;
	lm->done = 1;
	lm->model = model_load(in->path, &mo, load_progress, in, &lm->cause);
	if (lm->model != NULL && in->opts.ctx == 0 &&
	    model_info(lm->model)->n_ctx > INST_CTX_DEFAULT_MAX) {
		/* Without ctx= the context is the model's, capped. */
		if (model_set_ctx(lm->model, INST_CTX_DEFAULT_MAX,
		    &lm->cause) != 0) {
			model_free(lm->model);
			lm->model = NULL;
		}
	}
	if (lm->model != NULL) {
		lm->chat_template = chat_template_read(in->path);
		load_policy(in, lm);
	}
	mailbox_post(&lm->m);
	return (NULL);
}

/* Start loading a model in the background. */
int
instance_load(const char *name, const char *path, char *const *argv,
    int argc, struct stream *stream, int *code, char **cause)
{
	struct instance	*in;
	struct stat	 st;

	*code = PHASED__ERROR_CODE__ERR_INVALID;
	if (name_check("model", name, 1, cause) != 0)
		return (-1);
	if (instance_find(name) != NULL) {
		*code = PHASED__ERROR_CODE__ERR_EXISTS;
		set_cause(cause, "model %s is already loaded", name);
		return (-1);
	}
	if (path[0] != '/') {
		set_cause(cause, "model path '%s' must be absolute", path);
		return (-1);
	}
	if (stat(path, &st) != 0) {
		*code = PHASED__ERROR_CODE__ERR_LOAD;
		set_cause(cause, "%s: %s", path, strerror(errno));
		return (-1);
	}
	in = xcalloc(1, sizeof *in);
	if (inst_opts_parse(argv, argc, &in->opts, cause) != 0) {
		free(in);
		return (-1);
	}
	in->name = xstrdup(name);
	in->path = xstrdup(path);
	/* Copies: the loader thread reads them while SIGHUP may reload. */
	in->load_plugindir = xstrdup(phased->conf.plugin_dir);
	in->load_policy = xstrdup(phased->conf.default_policy);
	(void)instance_policy_host();
	in->state = INST_LOADING;
	in->file_bytes = (uint64_t)st.st_size;
	in->keep_alive_ms = in->opts.has_keep_alive ? in->opts.keep_alive_ms : -1;
	TAILQ_INIT(&in->gens);
	in->load_stream = stream;
	if (stream != NULL) {
		stream->cancel = load_stream_cancel;
		stream->arg = in;
	}
	in->load_threads = in->opts.threads != 0 ? in->opts.threads :
	    phased->conf.threads;
	if (pthread_create(&in->loader, NULL, load_main, in) != 0) {
		set_cause(cause, "cannot start loader thread: %s",
		    strerror(errno));
		*code = PHASED__ERROR_CODE__ERR_INTERNAL;
		in->load_stream = NULL;
		instance_free(in);
		return (-1);
	}
	in->loader_running = 1;
	TAILQ_INSERT_TAIL(&instances, in, entry);
	log_info("loading model %s from %s", name, path);
	return (0);
}

/* Unload: cancel its requests, stop the engine, free the model. */
int
instance_unload(const char *name, char **cause)
{
	struct instance	*in;

	if ((in = instance_find(name)) == NULL) {
		set_cause(cause, "no model %s", name);
		return (-1);
	}
	if (in->state == INST_LOADING) {
		set_cause(cause, "model %s is still loading", name);
		return (-1);
	}
	TAILQ_REMOVE(&instances, in, entry);
	engine_destroy(in->engine, "model unloaded");
	/* The DONE events of its requests are queued: deliver them now. */
	mailbox_drain();
	log_info("model %s unloaded", in->name);
	instance_free(in);
	return (0);
}

/* Whether a model line says load=lazy. */
static int
config_model_lazy(const struct config_model *cm)
{
	int	i;

	for (i = 0; i < cm->n_options; i++)
		if (strcmp(cm->options[i], "load=lazy") == 0)
			return (1);
	return (0);
}

/* Load the models of the configuration. */
void
instance_load_configured(void)
{
	struct config_model	*cm;
	char			*cause = NULL;
	int			 i, code;

	for (i = 0; i < phased->conf.n_models; i++) {
		cm = &phased->conf.models[i];
		if (instance_find(cm->name) != NULL || config_model_lazy(cm))
			continue;
		if (instance_load(cm->name, cm->path, cm->options,
		    cm->n_options, NULL, &code, &cause) != 0) {
			log_warnx("model %s: %s", cm->name, cause);
			free(cause);
			cause = NULL;
		}
	}
}

/* Bytes of model files resident or loading, and the LRU idle on-demand one. */
static uint64_t
resident_bytes(struct instance **lru)
{
	struct instance	*in;
	uint64_t	 sum = 0;

	*lru = NULL;
	TAILQ_FOREACH(in, &instances, entry) {
		sum += in->file_bytes;
		if (in->state == INST_READY && in->on_demand &&
		    TAILQ_EMPTY(&in->gens) && (*lru == NULL ||
		    in->last_used_ns < (*lru)->last_used_ns))
			*lru = in;
	}
	return (sum);
}

/* Start loading a lazily configured model on its first request. */
int
instance_load_lazy(const char *name, int *code, char **cause)
{
	struct config_model	*cm = NULL;
	struct instance		*in, *lru;
	struct stat		 st;
	uint64_t		 limit = phased->conf.model_memory_limit, used;
	char			*victim;
	int			 i;

	if ((in = instance_find(name)) != NULL)
		return (0);
	for (i = 0; i < phased->conf.n_models; i++)
		if (strcmp(phased->conf.models[i].name, name) == 0)
			cm = &phased->conf.models[i];
	if (cm == NULL) {
		*code = PHASED__ERROR_CODE__ERR_NOT_FOUND;
		set_cause(cause, "no model %s", name);
		return (-1);
	}
	if (limit != 0 && stat(cm->path, &st) == 0) {
		/* Unload idle models loaded on demand, oldest first. */
		while (resident_bytes(&lru) + (uint64_t)st.st_size > limit &&
		    lru != NULL) {
			victim = xstrdup(lru->name);
			log_info("model %s: unloading to make room for %s "
			    "(model-memory-limit)", victim, name);
			instance_unload(victim, NULL);
			free(victim);
		}
		used = resident_bytes(&lru);
		if (used + (uint64_t)st.st_size > limit) {
			*code = PHASED__ERROR_CODE__ERR_OVERLOADED;
			set_cause(cause, "model %s needs %llu bytes: "
			    "model-memory-limit %llu leaves %llu beside the "
			    "models in use", name, (unsigned long long)st.st_size,
			    (unsigned long long)limit, (unsigned long long)
			    (used < limit ? limit - used : 0));
			return (-1);
		}
	}
	if (instance_load(cm->name, cm->path, cm->options, cm->n_options,
	    NULL, code, cause) != 0)
		return (-1);
	in = instance_find(name);
	in->on_demand = 1;
	if (!in->opts.has_keep_alive)
		in->keep_alive_ms = INST_KEEP_ALIVE_DEFAULT_MS;
	return (0);
}

/* Record that an instance was just used (for keep-alive). */
void
instance_touch(struct instance *in)
{
	in->last_used_ns = now_ns();
}

/* Unload idle instances whose keep-alive has passed. */
void
instance_expire_idle(void)
{
	struct instance	*in, *next;
	uint64_t	 now = now_ns();
	char		*name;

	for (in = TAILQ_FIRST(&instances); in != NULL; in = next) {
		next = TAILQ_NEXT(in, entry);
		if (in->state != INST_READY || in->keep_alive_ms < 0 ||
		    !TAILQ_EMPTY(&in->gens) ||
		    now - in->last_used_ns < (uint64_t)in->keep_alive_ms * 1000000)
			continue;
		name = xstrdup(in->name);
		log_info("model %s: idle for its keep-alive, unloading", name);
		instance_unload(name, NULL);
		free(name);
	}
}

/* Unload everything (at shutdown). */
void
instance_shutdown(void)
{
	struct instance	*in;

	while ((in = TAILQ_FIRST(&instances)) != NULL) {
		if (in->loader_running) {
			/* A load cannot be interrupted: wait for it. */
			pthread_join(in->loader, NULL);
			in->loader_running = 0;
			mailbox_drain();
			continue;
		}
		TAILQ_REMOVE(&instances, in, entry);
		engine_destroy(in->engine, "daemon shutting down");
		mailbox_drain();
		instance_free(in);
	}
}

/* Fill infos for every instance. */
void
instance_infos(struct inst_infos *ii)
{
	struct instance			*in;
	const struct model_info		*mi;
	struct engine_counts		 ec;
	struct engine_policy_info	 pi;
	Phased__ModelInfo		*m;
	Phased__DeviceGroup		*g;
	size_t				 n = 0, ng = 0, k;
	int				 i;
	static const char *const roles[] = { "mixed", "prefill", "decode" };

	memset(ii, 0, sizeof *ii);
	TAILQ_FOREACH(in, &instances, entry)
		n++;
	if (n == 0)
		return;
	ii->ptrs = xcalloc(n, sizeof *ii->ptrs);
	ii->infos = xcalloc(n, sizeof *ii->infos);
	ii->group_ptrs = xcalloc(n * ENGINE_MAX_GROUPS, sizeof *ii->group_ptrs);
	ii->groups = xcalloc(n * ENGINE_MAX_GROUPS, sizeof *ii->groups);
	ii->policies = xcalloc(n, sizeof *ii->policies);
	ii->group_names = xcalloc(n * ENGINE_MAX_GROUPS,
	    sizeof *ii->group_names);
	k = 0;
	TAILQ_FOREACH(in, &instances, entry) {
		m = &ii->infos[k];
		phased__model_info__init(m);
		ii->ptrs[k] = m;
		m->name = in->name;
		m->path = in->path;
		m->arch = (char *)"";
		m->tensor_type = (char *)"";
		m->state = (char *)(in->state == INST_READY ? "ready" :
		    "loading");
		if (in->model != NULL) {
			mi = model_info(in->model);
			m->arch = (char *)mi->arch;
			m->n_params = mi->n_params;
			m->tensor_type = (char *)mi->type_name;
			m->file_size = mi->file_size;
			m->ctx = mi->n_ctx;
			m->has_n_vocab = 1;
			m->n_vocab = mi->n_vocab;
		}
		if (in->chat != NULL)
			m->chat_template = (char *)chat_template_name(in->chat);
		if (in->engine != NULL) {
			engine_counts(in->engine, &ec);
			engine_policy_info(in->engine, &pi);
			snprintf(ii->policies[k], sizeof ii->policies[k], "%s",
			    pi.name);
			m->policy = ii->policies[k];
			m->has_requests_running = m->has_requests_waiting = 1;
			m->requests_running = ec.running;
			m->requests_waiting = ec.waiting;
			m->has_kv_blocks_total = m->has_kv_blocks_used = 1;
			m->has_kv_block_size = 1;
			m->kv_block_size = ec.block_size;
			m->groups = &ii->group_ptrs[ng];
			for (i = 0; i < ec.n_groups; i++) {
				g = &ii->groups[ng];
				phased__device_group__init(g);
				ii->group_ptrs[ng] = g;
				snprintf(ii->group_names[ng], sizeof
				    ii->group_names[ng], "g%d", i);
				g->name = ii->group_names[ng++];
				g->role = (char *)roles[ec.roles[i]];
				g->devices = (char *)ec.devices[i];
				g->has_memory_bytes = 1;
				g->memory_bytes = ec.kv_bytes[i];
				g->has_kv_blocks_total = g->has_kv_blocks_used = 1;
				g->kv_blocks_total = ec.kv_total[i];
				g->kv_blocks_used = ec.kv_used[i];
				g->n_weight_bytes = (size_t)ec.n_weight[i];
				g->weight_bytes = (uint64_t *)ec.weight_bytes[i];
				m->kv_blocks_total += ec.kv_total[i];
				m->kv_blocks_used += ec.kv_used[i];
				m->n_groups++;
			}
		}
		k++;
	}
	ii->n = n;
}

/* Free what instance_infos() filled. */
void
instance_infos_free(struct inst_infos *ii)
{
	free(ii->ptrs);
	free(ii->infos);
	free(ii->group_ptrs);
	free(ii->groups);
	free(ii->policies);
	free(ii->group_names);
	memset(ii, 0, sizeof *ii);
}
