/* gen.h: a generation request as the control thread tracks it. */
#ifndef PHASED_GEN_H
#define PHASED_GEN_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

struct conn;
struct engine_gen;
struct instance;
struct stream;

struct gen {
	TAILQ_ENTRY(gen)	 entry;		/* in its instance's list */
	struct instance		*inst;
	struct stream		*stream;	/* NULL once the client is gone */
	uint64_t		 engine_id;
};

/* Default max_tokens of a generation or a chat. */
#define GEN_MAX_TOKENS_DEFAULT	256

/* The model a request names if ready; NULL after answering an error. */
struct instance	*gen_instance(struct conn *, uint64_t req_id, const char *model);
/* Check stop strings and top_logprobs into eg; -1 after answering. */
int		 gen_options(struct conn *, uint64_t req_id, char **stop,
		    size_t n_stop, int logprobs, int has_top, uint32_t top,
		    struct engine_gen *eg);
/* Submit eg (the caller keeps its memory) and stream its events. */
void		 gen_start(struct conn *, uint64_t req_id, struct instance *,
		    struct engine_gen *eg);

#endif
