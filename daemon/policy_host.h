/*
 * policy.h: the daemon side of scheduling policies: loading plugins by name
 * (with the ABI checks), the plan validator, the built-in FCFS fallback and
 * the active-policy slot that swaps, counts and ejects.
 */
#ifndef PHASED_DAEMON_POLICY_H
#define PHASED_DAEMON_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include <phased/policy.h>

/* Name of the built-in FCFS policy (no plugin); reserved for plugins. */
#define POLICY_BUILTIN		"builtin"
/* Consecutive invalid plans after which a policy is ejected. */
#define POLICY_MAX_ERRORS	8
/* Longest message kept from a plugin or the validator. */
#define POLICY_ERRLEN		256

/* A loaded and initialised plugin. */
struct policy {
	void				*handle;	/* dlopen handle */
	const struct phased_policy	*ops;		/* its exported table */
	void				*state;		/* from ops->init */
	char				*name;
	char				*params;	/* "k=v k=v", for display */
};

/*
 * The active policy of one model instance and its statistics.  Not locked:
 * the engine calls policy_slot_schedule() from its loop and brings the loop
 * to a stop (a pause barrier) around policy_slot_set().
 */
struct policy_slot {
	struct policy	*active;	/* NULL: built-in fcfs */
	int		 swap_in_pending; /* on_swap_in at the next schedule */
	uint64_t	 plans;		/* plans asked of the policy */
	uint64_t	 plan_errors;	/* invalid plans (fallback used) */
	uint64_t	 consecutive_errors;
	uint64_t	 fallbacks;	/* plans made by the built-in fcfs */
	uint64_t	 swaps;		/* successful policy_slot_set() */
	uint64_t	 ejections;
	char		 last_error[POLICY_ERRLEN]; /* "" when none yet */
	char		*ejected;	/* "ejected: <reason>", or NULL */
};

/* One plugin found by policy_list(). */
struct policy_info {
	char	*name;
	char	*describe;	/* NULL when it failed to load */
	char	*params_help;
	char	*error;		/* why it cannot be loaded, or NULL */
};

/* Check a policy name: letters, digits, '-' and '_', not reserved. */
int	 policy_name_valid(const char *name, char **cause);
/* Load plugin NAME from plugindir and init it with key=value params. */
struct policy *policy_open(const char *plugindir, const char *name,
	    size_t argc, char *const *argv, char **cause);
/* Open PLUGINDIR/NAME.so and check its table; the dlopen handle or NULL. */
void	*policy_dlopen(const char *plugindir, const char *name,
	    const struct phased_policy **opsp, char **cause);
/* Fini and unload a policy (after on_swap_out when swapping out). */
void	 policy_close(struct policy *);
/*
 * New key=value params for a loaded policy through its reconfigure op,
 * keeping its state: 0; 1 when it has no reconfigure op; -1 and cause when
 * refused (the policy is unchanged).
 */
int	 policy_reconfigure(struct policy *, size_t argc, char *const *argv,
	    char **cause);

/* Initialise a slot on the built-in fcfs. */
void	 policy_slot_init(struct policy_slot *);
/* Unload the active policy and free the slot's strings. */
void	 policy_slot_free(struct policy_slot *);
/* Name of the active policy. */
const char *policy_slot_name(const struct policy_slot *);
/* Params of the active policy, "" when none. */
const char *policy_slot_params(const struct policy_slot *);
/* Make NAME (or "builtin") active; on failure the old one stays. */
int	 policy_slot_set(struct policy_slot *, const char *plugindir,
	    const char *name, size_t argc, char *const *argv, char **cause);
/* Plan one iteration: policy, validation, fallback, counting, ejection. */
int	 policy_slot_schedule(struct policy_slot *, const struct phased_view *,
	    struct phased_plan *);
/* Tell the active policy a request arrived. */
void	 policy_slot_arrival(struct policy_slot *, const struct phased_request *);
/* Tell the active policy a request finished. */
void	 policy_slot_finish(struct policy_slot *, const struct phased_request *);

/* Fill one found plugin's description or error. */
typedef void (*policy_describe_fn)(void *arg, const char *plugindir,
	    struct policy_info *);
/*
 * Find the plugins in plugindir and describe each with fn; sorted by name,
 * -1 and cause when the directory cannot be read.
 */
int	 policy_scan(const char *plugindir, policy_describe_fn, void *arg,
	    struct policy_info **, size_t *, char **cause);
/* List the plugins in plugindir, sorted by name; -1 and cause on error. */
int	 policy_list(const char *plugindir, struct policy_info **, size_t *,
	    char **cause);
/* Free what policy_list() returned. */
void	 policy_list_free(struct policy_info *, size_t);

/* Check a plan against the view; 0, or -1 with the first problem in err. */
int	 plan_validate(const struct phased_view *, const struct phased_plan *,
	    char *err, size_t errlen);
/* The built-in fallback: what the fcfs policy plans (always valid). */
void	 plan_fcfs(const struct phased_view *, struct phased_plan *);
/* Empty a plan (counts to zero), keeping the arrays. */
void	 plan_clear(struct phased_plan *);

#endif
