/* engine.h: continuous batching for one model instance, planned by a policy. */
#ifndef PHASED_ENGINE_H
#define PHASED_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "finish_reason.h"
#include "metrics.h"
#include "sampler.h"
#include "stop.h"

struct model;
struct engine;
struct trace;

#define ENGINE_MAX_GROUPS	8
#define ENGINE_MAX_STOPS	STOP_MAX
#define ENGINE_MAX_STOP_LEN	STOP_MAX_LEN
#define ENGINE_MAX_EOG		8

/* One device group: its role and the CPUs its threads run on. */
struct engine_group_spec {
	int	 role;			/* enum phased_group_role */
	int	 n_threads;		/* 0: one per CPU listed, or all cores */
	int	 cpus[64];		/* CPU ids to pin to */
	int	 n_cpus;		/* 0: not pinned */
	char	 devices[64];		/* as given, for display: "cpu0-1" */
	char	 backend[8];		/* "cpu" (default) or "cuda" */
};

struct engine_config {
	const char		*name;		/* the instance's name */
	struct engine_group_spec groups[ENGINE_MAX_GROUPS];
	int			 n_groups;
	uint32_t		 kv_blocks;	/* per group */
	uint32_t		 max_batch_tokens;
	uint32_t		 max_seqs;
	uint32_t		 max_waiting;
	uint32_t		 ctx;		/* positions per sequence */
	int			 policy_isolate; /* policy in a host process */
	const char		*policy_host;	/* phased-policy-host */
	uint32_t		 policy_deadline_ms; /* per call; 0: automatic */
	int			 prefix_cache;	/* reuse cached KV of prompts */
	int			 cuda_graphs;	/* decode as CUDA graphs: 1 on, -1 off,
						   0 where they pay */
};

/* What a generation asks for (the engine copies it). */
struct engine_gen {
	int32_t			*prompt;	/* copied by the engine */
	uint32_t		 n_prompt;
	uint32_t		 max_tokens;
	struct sampler_params	 sp;
	char			*stops[ENGINE_MAX_STOPS];	/* copied */
	int			 n_stops;
	uint64_t		 deadline_ns;	/* 0: none */
	uint64_t		 arrival_ns;
	/* End of turn: these ids end the request too, and EOG says "stop". */
	int32_t			 eog_ids[ENGINE_MAX_EOG];
	int			 n_eog_ids;
	int			 eog_stop;
	int			 logprobs;	/* report each token's log prob */
	int			 top_logprobs;	/* and of the N likeliest */
	int32_t			 priority;	/* -1000..1000, lower first */
	uint32_t		 uid;		/* the user it is served for */
	uint32_t		 weight;	/* that user's weight, 0: 1 */
};

/* Kinds of events the engine sends the control thread. */
enum engine_ev_type {
	ENGINE_EV_TOKEN,		/* a sampled token and its text */
	ENGINE_EV_DONE			/* the request is finished; the last event */
};

struct engine_event {
	enum engine_ev_type	 type;
	void			*owner;		/* as given to engine_submit */
	int32_t			 token;
	uint64_t		 t_ns;		/* since arrival */
	size_t			 len;		/* text bytes */
	char			*text;		/* complete UTF-8 only */
	enum finish_reason	 reason;	/* ENGINE_EV_DONE */
	char			*error;		/* ENGINE_EV_DONE with FINISH_ERROR */
	struct reqtime_summary	 summary;	/* ENGINE_EV_DONE */
	/* ENGINE_EV_TOKEN of a request that asked for log probabilities. */
	int			 has_logprob;
	float			 logprob;
	int			 n_top;
	int32_t			 top_ids[SAMPLER_TOP_LOGPROBS_MAX];
	float			 top_lps[SAMPLER_TOP_LOGPROBS_MAX];
	uint32_t		 cached_tokens;	/* ENGINE_EV_DONE: prompt tokens
						   the prefix cache supplied */
};

/*
 * Called on the engine thread for every event; must not block.  The
 * callee owns ev->text and ev->error.
 */
typedef void (*engine_emit_fn)(void *arg, struct engine_event *ev);

/*
 * Create an engine for a loaded model and start its group loops.  The
 * policy starts as the built-in fcfs.  NULL and *cause on error.
 */
struct engine	*engine_create(struct model *, const struct engine_config *,
		    engine_emit_fn, void *emit_arg, char **cause);
/*
 * Stop: every request still queued or running finishes as cancelled with
 * `why', its DONE event is emitted, the loops exit and everything is freed.
 */
void		 engine_destroy(struct engine *, const char *why);

/* Why the engine refused a request; the request handlers map it to wire codes. */
enum engine_err {
	ENGINE_ERR_INVALID = 1,	/* bad parameters, too long for the context */
	ENGINE_ERR_STOPPING,	/* the model is being unloaded */
	ENGINE_ERR_OVERLOADED	/* too many requests are waiting */
};

/*
 * Queue a generation; returns the request's engine id, or 0 with *cause
 * and *err when it is refused.  Exactly one ENGINE_EV_DONE follows a successful
 * submit.
 */
uint64_t	 engine_submit(struct engine *, struct engine_gen *, void *owner,
		    enum engine_err *err, char **cause);
/* Ask for a request to stop; its ENGINE_EV_DONE says "cancelled". */
void		 engine_cancel(struct engine *, uint64_t id, const char *why);

/* Swap the policy at an iteration boundary; on error the old one stays. */
int		 engine_set_policy(struct engine *, const char *plugindir,
		    const char *name, size_t argc, char *const *argv,
		    char **cause);

struct guarded;
struct pguard_conf;
/* The configuration policies of this engine are loaded with. */
const struct pguard_conf *engine_policy_conf(struct engine *);
/* The view and plan capacity of an engine with this configuration. */
uint32_t	 engine_policy_cap(const struct engine_config *);
/* Make a loaded policy (NULL: builtin) active from the next iteration. */
void		 engine_stage_policy(struct engine *, struct guarded *);
/*
 * New params for the active policy when it is NAME, keeping its state
 * (pguard_reconfigure): 0, 1 (load a fresh one instead) or -1 and cause.
 * Called from a thread that holds the engine (engine_hold).
 */
int		 engine_reconfigure_policy(struct engine *, const char *name,
		    size_t argc, char *const *argv, char **cause);
/* Keep the engine from being destroyed while a thread uses it. */
void		 engine_hold(struct engine *);
/* Let it go again. */
void		 engine_release(struct engine *);

/* What the policy aimed at in the last iteration, and what it took. */
struct engine_policy_report {
	uint32_t	 chunk_tokens;	/* 0: not reported */
	uint32_t	 notices;	/* PHASED_NOTICE_* */
	int		 group;
	uint64_t	 predicted_ns, target_ns, measured_ns;
};

/* A copy of the policy's name, params and counters. */
struct engine_policy_info {
	char		 name[64];
	char		 params[256];
	uint64_t	 plans, plan_errors, swaps, fallbacks;
	char		 last_error[256];
	char		 ejected[320];
	struct engine_policy_report report;
};
void		 engine_policy_info(struct engine *, struct engine_policy_info *);
/* Round-trip percentiles (ns) of the calls into the policy. */
void		 engine_policy_rtt(struct engine *, uint64_t *p50, uint64_t *p99);

/* Live counts, for models and status. */
struct engine_counts {
	uint32_t	 running, waiting;
	uint32_t	 kv_used[ENGINE_MAX_GROUPS];
	uint32_t	 kv_total[ENGINE_MAX_GROUPS];
	int		 roles[ENGINE_MAX_GROUPS];
	const char	*devices[ENGINE_MAX_GROUPS];
	uint64_t	 kv_bytes[ENGINE_MAX_GROUPS];
	const uint64_t	*weight_bytes[ENGINE_MAX_GROUPS];	/* per device */
	int		 n_weight[ENGINE_MAX_GROUPS];	/* 0: host memory */
	int		 n_groups;
	uint32_t	 block_size;
};
void		 engine_counts(struct engine *, struct engine_counts *);

/* The instance's metrics and trace (owned by the engine). */
struct inst_metrics *engine_metrics(struct engine *);
struct trace	*engine_trace(struct engine *);

#endif
