/* instance.h: loaded model instances: options, loading, the registry. */
#ifndef PHASED_INSTANCE_H
#define PHASED_INSTANCE_H

#include <sys/queue.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <phased/phased.pb-c.h>

#include "engine.h"

struct stream;
struct gen;

#define INST_MAX_POLICY_PARAMS	16
#define INST_MAX_CHAT_STOPS	4

/* Options of `phasectl load` and of a `model` line in phased.conf. */
struct inst_opts {
	uint32_t	 ctx;		/* 0: the model's, capped */
	int		 threads;	/* 0: the daemon's default */
	int		 kv_f32;
	uint32_t	 kv_tokens;	/* 0: derived from ctx */
	uint32_t	 block_size;	/* 0: the default */
	uint32_t	 max_batch_tokens; /* 0: ctx */
	uint32_t	 max_seqs;	/* 0: 64 */
	char		*policy;	/* NULL: the default */
	char		*policy_params[INST_MAX_POLICY_PARAMS];
	int		 n_policy_params;
	struct engine_group_spec groups[ENGINE_MAX_GROUPS];
	int		 n_groups;	/* 0: one mixed group */
	int64_t		 keep_alive_ms;	/* idle time before unloading; -1 never */
	int		 has_keep_alive;
	int		 lazy;		/* phased.conf: load on first use */
	char		*chat_template;	/* template=NAME; NULL: the model's */
	uint32_t	 policy_deadline_ms; /* 0: phased.conf's */
	int		 no_prefix_cache; /* prefix-cache=no */
	int		 cuda_graphs;	/* cuda-graphs=: 1 on, -1 off, 0 auto */
};

enum inst_state {
	INST_LOADING,
	INST_READY
};

TAILQ_HEAD(gen_list, gen);

/* Path of phased-policy-host. */
const char	*instance_policy_host(void);

struct instance {
	TAILQ_ENTRY(instance)	 entry;
	char			*name;
	char			*path;
	char			*load_plugindir; /* copies for the loader */
	char			*load_policy;
	enum inst_state		 state;
	struct inst_opts	 opts;
	struct model		*model;
	struct engine		*engine;
	pthread_t		 loader;
	int			 loader_running;
	int			 load_threads;	/* resolved before the loader starts */
	struct stream		*load_stream;	/* progress goes here */
	double			 last_progress;
	struct gen_list		 gens;
	int64_t			 keep_alive_ms;	/* -1: stays loaded */
	uint64_t		 last_used_ns;	/* last request start or end */
	uint64_t		 file_bytes;	/* for the memory limit */
	int			 on_demand;	/* loaded by a request */
	/* The chat template in use and its end of turn in this vocabulary. */
	const struct chat_template *chat;
	int32_t			 chat_eog[ENGINE_MAX_EOG];
	int			 n_chat_eog;
	const char		*chat_stops[INST_MAX_CHAT_STOPS];
	int			 n_chat_stops;
};

/*
 * Called on the control thread when a load ends: err is NULL once the
 * instance is ready, else why it failed (the instance is gone after).
 */
extern void (*instance_load_hook)(const char *name, const char *err);

/* Parse key=value options; -1 and *cause naming the bad one. */
int	 inst_opts_parse(char *const *argv, int argc, struct inst_opts *,
	    char **cause);
/* Free what inst_opts_parse() allocated. */
void	 inst_opts_free(struct inst_opts *);

/*
 * Start loading a model in the background.  stream (may be NULL) gets
 * progress and the final Ok or Error.  -1 and *cause (with *code) when the
 * request is refused at once.
 */
int	 instance_load(const char *name, const char *path, char *const *argv,
	    int argc, struct stream *stream, int *code, char **cause);
/* Unload: cancel its requests, stop the engine, free the model. */
int	 instance_unload(const char *name, char **cause);
/* Find a ready or loading instance by name. */
struct instance *instance_find(const char *name);
/* Iterate over instances. */
struct instance *instance_first(void);
struct instance *instance_next(struct instance *);
/* The engine's event sink: runs on an engine thread. */
void	 instance_engine_emit(void *arg, struct engine_event *ev);
/* Load the models of the configuration (not those marked lazy). */
void	 instance_load_configured(void);
/*
 * Start loading a model that phased.conf lists as lazy; 0 when a load is
 * under way (or it is loaded), -1 with *code and *cause otherwise.
 */
int	 instance_load_lazy(const char *name, int *code, char **cause);
/* Record that an instance was just used (for keep-alive). */
void	 instance_touch(struct instance *);
/* Unload idle instances whose keep-alive has passed. */
void	 instance_expire_idle(void);
/* Parse a keep-alive: "5m", "1h30m", "90s", "300" (seconds), "-1", "0". */
int	 inst_parse_keep_alive(const char *, int64_t *ms, char **cause);
/* Unload everything (at shutdown). */
void	 instance_shutdown(void);

struct strbuf;
/* Every ready model's metrics in the Prometheus text format (req_stats.c). */
void	 instance_prom_text(struct strbuf *);

/* ModelInfo messages describing every instance, for status and models. */
struct inst_infos {
	Phased__ModelInfo	**ptrs;
	Phased__ModelInfo	 *infos;
	Phased__DeviceGroup	**group_ptrs;
	Phased__DeviceGroup	 *groups;
	char			(*policies)[64];	/* per model */
	char			(*group_names)[12];	/* per group */
	size_t			  n;
};
/* Fill infos for every instance. */
void	 instance_infos(struct inst_infos *);
/* Free what instance_infos() filled. */
void	 instance_infos_free(struct inst_infos *);

#endif
