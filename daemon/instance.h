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
	uint32_t	 policy_deadline_ms; /* 0: phased.conf's */
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
	struct stream		*load_stream;	/* progress goes here */
	double			 last_progress;
	struct gen_list		 gens;
};

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
/* Load the models of the configuration. */
void	 instance_load_configured(void);
/* Unload everything (at shutdown). */
void	 instance_shutdown(void);

/* ModelInfo messages describing every instance, for status and models. */
struct inst_infos {
	Phased__ModelInfo	**ptrs;
	Phased__ModelInfo	 *infos;
	Phased__DeviceGroup	**group_ptrs;
	Phased__DeviceGroup	 *groups;
	char			(*policies)[64];	/* per model */
	char			(*group_names)[8];	/* per group */
	size_t			  n;
};
/* Fill infos for every instance. */
void	 instance_infos(struct inst_infos *);
/* Free what instance_infos() filled. */
void	 instance_infos_free(struct inst_infos *);

#endif
