/*
 * policy_guard.h: the active policy of one model instance, run where it
 * cannot hurt the daemon (a policy host process per instance), with a
 * deadline on every call, the built-in fcfs as the fallback, and ejection.
 *
 * Locking: `mu' guards the names, counters and the staged policy and is
 * never held around plugin code; `call_mu' serialises calls into the
 * policy (the loops of a multi-group instance).  The notification queue
 * is filled under the engine's lock and taken with the view.
 */
#ifndef PHASED_POLICY_GUARD_H
#define PHASED_POLICY_GUARD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "policy_chan.h"
#include "policy_host.h"

/* The longest any call into a policy may take. */
#define PGUARD_MAX_DEADLINE_MS	1000
/* The shortest automatic deadline (scheduling noise on loaded hosts). */
#define PGUARD_MIN_DEADLINE_MS	100
/* Automatic deadline: this many times the slowest recent iteration. */
#define PGUARD_DEADLINE_FACTOR	10
/* Round-trip samples kept for the figures. */
#define PGUARD_RTT_SAMPLES	4096

struct guarded;

struct pguard_conf {
	int		 isolate;	/* 1: policy host process; 0: in-process */
	const char	*host;		/* path of phased-policy-host */
	uint32_t	 deadline_ms;	/* 0: automatic */
	uint32_t	 cap;		/* view and plan capacity */
};

/* What policy show reports. */
struct pguard_stats {
	char		 name[64];
	char		 params[256];
	uint64_t	 plans, plan_errors, swaps, fallbacks, ejections;
	uint64_t	 timeouts, crashes;
	char		 last_error[256];
	char		 ejected[320];
	int		 isolated;
};

struct policy_guard {
	pthread_mutex_t		 mu;
	pthread_mutex_t		 call_mu;
	struct pguard_conf	 conf;
	struct guarded		*active;	/* NULL: built-in fcfs */
	struct guarded		*pending;	/* staged by a swap */
	int			 pending_set;
	uint64_t		 gen;		/* bumped by every swap */
	uint64_t		 active_gen;
	struct pchan_event	*evq;
	size_t			 n_evq, cap_evq;
	uint64_t		 plans, plan_errors, consecutive, fallbacks;
	uint64_t		 swaps, ejections, timeouts, crashes;
	char			 last_error[POLICY_ERRLEN];
	char			 ejected[320];
	uint64_t		 rtt[PGUARD_RTT_SAMPLES]; /* ns, a ring */
	uint64_t		 n_rtt;
};

/* Outcome of pguard_schedule(). */
enum pguard_outcome {
	PGUARD_POLICY = 0,	/* the policy's plan, validated */
	PGUARD_FALLBACK = 1,	/* the built-in fcfs plan */
	PGUARD_INVALID = 2,	/* fcfs after an invalid plan */
	PGUARD_EJECTED = 3	/* fcfs, and the policy was ended */
};

/* Set up a guard on the built-in fcfs. */
void	 pguard_init(struct policy_guard *, const struct pguard_conf *);
/* End the policies and free everything. */
void	 pguard_free(struct policy_guard *);
/* Load and init a policy (no lock held; may take up to the deadline). */
struct guarded *pguard_load(const struct pguard_conf *, const char *plugindir,
	    const char *name, size_t argc, char *const *argv, char **cause);
/* Stage a loaded policy (NULL: builtin); returns one it replaced. */
struct guarded *pguard_stage(struct policy_guard *, struct guarded *);
/* End a policy that was staged and replaced before it ran. */
void	 pguard_discard(struct guarded *);
/* Queue a notification for the policy (engine lock held). */
void	 pguard_event(struct policy_guard *, uint32_t kind,
	    const struct phased_request *);
/* Take the queued notifications and the generation they belong to. */
uint64_t pguard_take(struct policy_guard *, struct pchan_event **, size_t *);
/* Plan one iteration: policy with deadline, validation, fallback. */
enum pguard_outcome pguard_schedule(struct policy_guard *,
	    const struct phased_view *, struct phased_plan *,
	    const struct pchan_event *, size_t, uint64_t gen);
/*
 * New params for the active policy when it is NAME, keeping its state:
 * 0 done; 1 when NAME is not the active policy (or a swap is staged) or
 * it has no reconfigure op (load a fresh one); -1 and cause when refused.
 */
int	 pguard_reconfigure(struct policy_guard *, const char *name,
	    size_t argc, char *const *argv, char **cause);
/* A copy of the name, params and counters. */
void	 pguard_stats(struct policy_guard *, struct pguard_stats *);
/* Round-trip percentiles (ns) of the calls so far; 0 when none. */
void	 pguard_rtt(struct policy_guard *, uint64_t *p50, uint64_t *p99);
/* List plugins, loading each in a policy host, not in the daemon. */
int	 pguard_list(const char *host, const char *plugindir,
	    struct policy_info **, size_t *, char **cause);

#endif
