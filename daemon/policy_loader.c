/*
 * policy_loader.c: load scheduling-policy plugins by name, and keep the
 * active one of a model instance with its statistics.
 *
 * A plugin is named, never given by path: NAME maps to the file
 * PLUGINDIR/NAME.so, and a name may hold only letters, digits, '-' and '_'
 * (so it can neither leave the directory nor name a hidden file).  The file
 * is opened with RTLD_NOW | RTLD_LOCAL (every symbol resolved now, nothing
 * leaked into the global namespace), and its one exported table is checked
 * (symbol size, magic, ABI version, struct size, required ops, name) before
 * any of its functions is called, as nginx checks a module's signature.
 */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "policy_host.h"
#include "util.h"

/* Check a policy name: letters, digits, '-' and '_', not reserved. */
int
policy_name_valid(const char *name, char **cause)
{
	if (name_check("policy", name, 0, cause) != 0)
		return (-1);
	if (strcmp(name, POLICY_BUILTIN) == 0) {
		set_cause(cause, "policy name '%s' is reserved for the "
		    "built-in fcfs", name);
		return (-1);
	}
	return (0);
}

/*
 * Open PLUGINDIR/NAME.so and check its exported table without calling any
 * of its code (apart from the loader running its constructors).
 */
void *
policy_dlopen(const char *plugindir, const char *name,
    const struct phased_policy **opsp, char **cause)
{
	const struct phased_policy	*ops;
	const ElfW(Sym)			*sym = NULL;
	Dl_info				 info;
	void				*h;
	char				*path;
	const char			*e;

	if (policy_name_valid(name, cause) != 0)
		return (NULL);
	xasprintf(&path, "%s/%s.so", plugindir, name);
	if (access(path, F_OK) != 0) {
		set_cause(cause, "policy '%s': no such policy (%s: %s)", name,
		    path, strerror(errno));
		free(path);
		return (NULL);
	}
	dlerror();
	if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		e = dlerror();
		set_cause(cause, "policy '%s': cannot load: %s", name,
		    e != NULL ? e : "unknown error");
		free(path);
		return (NULL);
	}
	ops = dlsym(h, PHASED_POLICY_SYMBOL);
	if (ops == NULL) {
		set_cause(cause, "policy '%s': %s does not export %s", name,
		    path, PHASED_POLICY_SYMBOL);
		goto fail;
	}
	/* The symbol must be at least as large as the fields read next. */
	if (dladdr1(ops, &info, (void **)&sym, RTLD_DL_SYMENT) != 0 &&
	    sym != NULL && sym->st_size < 3 * sizeof(uint32_t)) {
		set_cause(cause, "policy '%s': %s is %zu bytes, too small for "
		    "a policy table", name, PHASED_POLICY_SYMBOL,
		    (size_t)sym->st_size);
		goto fail;
	}
	if (ops->magic != PHASED_POLICY_MAGIC) {
		set_cause(cause, "policy '%s': %s has magic 0x%08x, not "
		    "0x%08x", name, PHASED_POLICY_SYMBOL, ops->magic,
		    PHASED_POLICY_MAGIC);
		goto fail;
	}
	if (ops->abi_version != PHASED_POLICY_ABI_VERSION) {
		set_cause(cause, "policy '%s': ABI version %u, this daemon "
		    "speaks version %u", name, ops->abi_version,
		    PHASED_POLICY_ABI_VERSION);
		goto fail;
	}
	if (ops->struct_size != sizeof *ops || (sym != NULL &&
	    sym->st_size != 0 && sym->st_size != sizeof *ops)) {
		set_cause(cause, "policy '%s': struct size %u (symbol %zu "
		    "bytes), this daemon expects %zu", name, ops->struct_size,
		    sym != NULL ? (size_t)sym->st_size : (size_t)0,
		    sizeof *ops);
		goto fail;
	}
	if (ops->schedule == NULL) {
		set_cause(cause, "policy '%s': no schedule operation", name);
		goto fail;
	}
	if (ops->name == NULL || strcmp(ops->name, name) != 0) {
		set_cause(cause, "policy '%s': the file calls itself '%s'",
		    name, ops->name != NULL ? ops->name : "(null)");
		goto fail;
	}
	free(path);
	*opsp = ops;
	return (h);
fail:
	free(path);
	dlclose(h);
	return (NULL);
}

/* Split key=value arguments; -1 and cause on a malformed or repeated key. */
static int
policy_parse_params(const char *name, size_t argc, char *const *argv,
    struct phased_param **out, char **cause)
{
	struct phased_param	*v;
	size_t			 i, j, klen;
	const char		*eq;

	v = xcalloc(argc, sizeof *v);
	for (i = 0; i < argc; i++) {
		if ((eq = strchr(argv[i], '=')) == NULL || eq == argv[i]) {
			set_cause(cause, "policy '%s': parameter '%s' is "
			    "not key=value", name, argv[i]);
			goto fail;
		}
		klen = eq - argv[i];
		v[i].key = xstrndup(argv[i], klen);
		v[i].value = eq + 1;
		for (j = 0; j < i; j++) {
			if (strcmp(v[j].key, v[i].key) == 0) {
				set_cause(cause, "policy '%s': parameter "
				    "'%s' given twice", name, v[i].key);
				i++;
				goto fail;
			}
		}
	}
	*out = v;
	return (0);
fail:
	for (j = 0; j < i && j < argc; j++)
		free((char *)v[j].key);
	free(v);
	return (-1);
}

/* Free parsed parameters. */
static void
policy_free_params(struct phased_param *v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		free((char *)v[i].key);
	free(v);
}

/* Load plugin NAME from plugindir and init it with key=value params. */
struct policy *
policy_open(const char *plugindir, const char *name, size_t argc,
    char *const *argv, char **cause)
{
	const struct phased_policy	*ops;
	struct phased_policy_params	 params;
	struct phased_param		*kv;
	struct policy			*pol;
	char				 err[POLICY_ERRLEN];
	void				*h, *state = NULL;
	size_t				 i, len = 1, off;

	if (policy_parse_params(name, argc, argv, &kv, cause) != 0)
		return (NULL);
	if ((h = policy_dlopen(plugindir, name, &ops, cause)) == NULL) {
		policy_free_params(kv, argc);
		return (NULL);
	}
	params.n = argc;
	params.v = kv;
	if (ops->init == NULL && argc != 0) {
		set_cause(cause, "policy '%s': unknown parameter '%s' (this "
		    "policy takes none)", name, kv[0].key);
		goto fail;
	}
	err[0] = '\0';
	if (ops->init != NULL && ops->init(&params, &state, err,
	    sizeof err) != 0) {
		err[sizeof err - 1] = '\0';
		set_cause(cause, "policy '%s': %s", name,
		    err[0] != '\0' ? err : "init failed");
		goto fail;
	}
	policy_free_params(kv, argc);

	pol = xcalloc(1, sizeof *pol);
	pol->handle = h;
	pol->ops = ops;
	pol->state = state;
	pol->name = xstrdup(name);
	for (i = 0; i < argc; i++)
		len += strlen(argv[i]) + 1;
	pol->params = xcalloc(1, len);
	for (i = 0, off = 0; i < argc; i++)
		off += snprintf(pol->params + off, len - off, "%s%s",
		    i != 0 ? " " : "", argv[i]);
	return (pol);
fail:
	policy_free_params(kv, argc);
	dlclose(h);
	return (NULL);
}

/* New params for a loaded policy, keeping its state; 0, 1 or -1. */
int
policy_reconfigure(struct policy *pol, size_t argc, char *const *argv,
    char **cause)
{
	struct phased_policy_params	 params;
	struct phased_param		*kv;
	char				 err[POLICY_ERRLEN];
	size_t				 i, len = 1, off;
	int				 rc;

	if (pol->ops->reconfigure == NULL)
		return (1);
	if (policy_parse_params(pol->name, argc, argv, &kv, cause) != 0)
		return (-1);
	params.n = argc;
	params.v = kv;
	err[0] = '\0';
	rc = pol->ops->reconfigure(pol->state, &params, err, sizeof err);
	policy_free_params(kv, argc);
	if (rc != 0) {
		err[sizeof err - 1] = '\0';
		set_cause(cause, "policy '%s': %s", pol->name,
		    err[0] != '\0' ? err : "reconfigure failed");
		return (-1);
	}
	for (i = 0; i < argc; i++)
		len += strlen(argv[i]) + 1;
	free(pol->params);
	pol->params = xcalloc(1, len);
	for (i = 0, off = 0; i < argc; i++)
		off += snprintf(pol->params + off, len - off, "%s%s",
		    i != 0 ? " " : "", argv[i]);
	return (0);
}

/* Fini and unload a policy. */
void
policy_close(struct policy *pol)
{
	if (pol == NULL)
		return;
	if (pol->ops->fini != NULL)
		pol->ops->fini(pol->state);
	dlclose(pol->handle);
	free(pol->name);
	free(pol->params);
	free(pol);
}

/* Initialise a slot on the built-in fcfs. */
void
policy_slot_init(struct policy_slot *slot)
{
	memset(slot, 0, sizeof *slot);
}

/* Unload the active policy and free the slot's strings. */
void
policy_slot_free(struct policy_slot *slot)
{
	if (slot->active != NULL && slot->active->ops->on_swap_out != NULL)
		slot->active->ops->on_swap_out(slot->active->state);
	policy_close(slot->active);
	free(slot->ejected);
	memset(slot, 0, sizeof *slot);
}

/* Name of the active policy. */
const char *
policy_slot_name(const struct policy_slot *slot)
{
	return (slot->active != NULL ? slot->active->name : POLICY_BUILTIN);
}

/* Params of the active policy, "" when none. */
const char *
policy_slot_params(const struct policy_slot *slot)
{
	return (slot->active != NULL ? slot->active->params : "");
}

/* Retire the active policy: swap-out notification, fini, unload. */
static void
policy_slot_retire(struct policy_slot *slot)
{
	struct policy	*old = slot->active;

	slot->active = NULL;
	slot->swap_in_pending = 0;
	if (old == NULL)
		return;
	if (old->ops->on_swap_out != NULL)
		old->ops->on_swap_out(old->state);
	policy_close(old);
}

/*
 * Make NAME active, or the built-in fcfs for "builtin".  The new policy is
 * loaded and initialised first; only then is the old one retired, so on any
 * failure the old one stays active and untouched.
 */
int
policy_slot_set(struct policy_slot *slot, const char *plugindir,
    const char *name, size_t argc, char *const *argv, char **cause)
{
	struct policy	*pol = NULL;

	if (strcmp(name, POLICY_BUILTIN) == 0) {
		if (argc != 0) {
			set_cause(cause, "policy '%s': unknown parameter "
			    "'%.*s' (this policy takes none)", name,
			    (int)strcspn(argv[0], "="), argv[0]);
			return (-1);
		}
	} else if ((pol = policy_open(plugindir, name, argc, argv,
	    cause)) == NULL)
		return (-1);
	policy_slot_retire(slot);
	slot->active = pol;
	slot->swap_in_pending = pol != NULL;
	slot->consecutive_errors = 0;
	slot->swaps++;
	log_info("policy %s%s%s active", name, argc != 0 ? " " : "",
	    pol != NULL ? pol->params : "");
	return (0);
}

/* Eject the active policy after too many invalid plans. */
static void
policy_slot_eject(struct policy_slot *slot)
{
	free(slot->ejected);
	xasprintf(&slot->ejected, "ejected: policy '%s' made %llu invalid "
	    "plans in a row, last: %s", slot->active->name,
	    (unsigned long long)slot->consecutive_errors, slot->last_error);
	log_warnx("%s; built-in fcfs takes over", slot->ejected);
	policy_slot_retire(slot);
	slot->consecutive_errors = 0;
	slot->ejections++;
}

/*
 * Plan one iteration: ask the active policy, validate its plan, and use the
 * built-in fcfs plan instead when it is invalid (or the policy declined);
 * POLICY_MAX_ERRORS invalid plans in a row eject the policy.  Returns 0 when
 * the policy's plan is used, 1 when the fallback was.
 */
int
policy_slot_schedule(struct policy_slot *slot, const struct phased_view *v,
    struct phased_plan *p)
{
	struct phased_plan	 saved = *p;
	struct policy		*pol = slot->active;
	char			 err[POLICY_ERRLEN];

	plan_clear(p);
	if (pol == NULL) {
		plan_fcfs(v, p);
		slot->fallbacks++;
		return (1);
	}
	if (slot->swap_in_pending) {
		slot->swap_in_pending = 0;
		if (pol->ops->on_swap_in != NULL)
			pol->ops->on_swap_in(pol->state, v);
	}
	slot->plans++;
	if (pol->ops->schedule(pol->state, v, p) != 0)
		snprintf(err, sizeof err, "schedule returned an error");
	else if (p->entries != saved.entries || p->preempt != saved.preempt ||
	    p->migrations != saved.migrations ||
	    p->cap_entries != saved.cap_entries ||
	    p->cap_preempt != saved.cap_preempt ||
	    p->cap_migrations != saved.cap_migrations)
		snprintf(err, sizeof err, "plan arrays or capacities were "
		    "replaced");
	else if (plan_validate(v, p, err, sizeof err) == 0) {
		slot->consecutive_errors = 0;
		return (0);
	}

	/* Restore what the daemon owns before the fallback writes into it. */
	p->entries = saved.entries;
	p->preempt = saved.preempt;
	p->migrations = saved.migrations;
	p->cap_entries = saved.cap_entries;
	p->cap_preempt = saved.cap_preempt;
	p->cap_migrations = saved.cap_migrations;
	slot->plan_errors++;
	slot->consecutive_errors++;
	snprintf(slot->last_error, sizeof slot->last_error, "%s", err);
	log_debug("policy %s: invalid plan: %s", pol->name, err);
	if (slot->consecutive_errors >= POLICY_MAX_ERRORS)
		policy_slot_eject(slot);
	plan_fcfs(v, p);
	slot->fallbacks++;
	return (1);
}

/* Tell the active policy a request arrived. */
void
policy_slot_arrival(struct policy_slot *slot, const struct phased_request *r)
{
	if (slot->active != NULL && slot->active->ops->on_arrival != NULL)
		slot->active->ops->on_arrival(slot->active->state, r);
}

/* Tell the active policy a request finished. */
void
policy_slot_finish(struct policy_slot *slot, const struct phased_request *r)
{
	if (slot->active != NULL && slot->active->ops->on_finish != NULL)
		slot->active->ops->on_finish(slot->active->state, r);
}

/* Order plugin infos by name. */
static int
policy_info_cmp(const void *a, const void *b)
{
	return (strcmp(((const struct policy_info *)a)->name,
	    ((const struct policy_info *)b)->name));
}

/* Copy a plugin string, or NULL. */
static char *
policy_strdup(const char *s)
{
	return (s != NULL ? xstrdup(s) : NULL);
}

/*
 * Find the plugins in plugindir (NAME.so with a valid name) and have
 * describe fill each one's description or error; sorted by name.
 */
int
policy_scan(const char *plugindir, policy_describe_fn describe, void *arg,
    struct policy_info **out, size_t *nout, char **cause)
{
	struct policy_info	*v = NULL, *pi;
	struct dirent		*de;
	DIR			*d;
	size_t			 n = 0, len;
	char			*name;

	if ((d = opendir(plugindir)) == NULL) {
		set_cause(cause, "plugin directory %s: %s", plugindir,
		    strerror(errno));
		return (-1);
	}
	while ((de = readdir(d)) != NULL) {
		len = strlen(de->d_name);
		if (len <= 3 || strcmp(de->d_name + len - 3, ".so") != 0)
			continue;
		name = xstrndup(de->d_name, len - 3);
		if (policy_name_valid(name, NULL) != 0) {
			free(name);
			continue;
		}
		v = xreallocarray(v, n + 1, sizeof *v);
		pi = &v[n++];
		memset(pi, 0, sizeof *pi);
		pi->name = name;
		describe(arg, plugindir, pi);
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof *v, policy_info_cmp);
	*out = v;
	*nout = n;
	return (0);
}

/* Describe a plugin by opening it in this process. */
static void
describe_here(void *arg, const char *plugindir, struct policy_info *pi)
{
	const struct phased_policy	*ops;
	char				*why = NULL;
	void				*h;

	if ((h = policy_dlopen(plugindir, pi->name, &ops, &why)) == NULL) {
		pi->error = why;
		return;
	}
	pi->describe = policy_strdup(ops->describe != NULL ?
	    ops->describe : "");
	pi->params_help = policy_strdup(ops->params_help != NULL ?
	    ops->params_help : "");
	dlclose(h);
}

/* List the plugins in plugindir, opening each in this process. */
int
policy_list(const char *plugindir, struct policy_info **out, size_t *nout,
    char **cause)
{
	return (policy_scan(plugindir, describe_here, NULL, out, nout, cause));
}

/* Free what policy_list() returned. */
void
policy_list_free(struct policy_info *v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].describe);
		free(v[i].params_help);
		free(v[i].error);
	}
	free(v);
}
