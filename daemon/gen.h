/* gen.h: a generation request as the control thread tracks it. */
#ifndef PHASED_GEN_H
#define PHASED_GEN_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

struct conn;
struct engine_event;
struct engine_gen;
struct gen;
struct instance;
struct stream;

/*
 * Where a generation's events go when it is not a protobuf stream (the
 * HTTP front end).  token gets every ENGINE_EV_TOKEN; done gets the ENGINE_EV_DONE after
 * the gen left its instance's list, and frees the gen.  Both run on the
 * control thread and own nothing of the event.
 */
struct gen_ops {
	void	(*token)(struct gen *, struct engine_event *);
	void	(*done)(struct gen *, struct engine_event *);
};

struct gen {
	TAILQ_ENTRY(gen)	 entry;		/* in its instance's list */
	struct instance		*inst;
	struct stream		*stream;	/* NULL once the client is gone */
	uint64_t		 engine_id;
	const struct gen_ops	*ops;		/* NULL: a protobuf stream */
};

/* Largest prompt text a request may carry. */
#define GEN_PROMPT_MAX_BYTES	(16U << 20)
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

/*
 * Tokenize a prompt for an instance; add_bos -1 means the model's default.
 * -1 and *cause when it is too long or does not encode.
 */
int	gen_tokenize(struct instance *, const char *prompt, size_t len,
	    int add_bos, int parse_special, int32_t **ids, size_t *n_ids,
	    char **cause);
/*
 * Submit a generation owned by g on its instance (g->inst is set here) and
 * track it; -1 with *code (a Phased__ErrorCode) and *cause when refused.
 * Every front end submits through here.
 */
int	gen_submit(struct instance *, struct engine_gen *, struct gen *,
	    int *code, char **cause);

/* Check stop strings and top_logprobs; -1 and *cause.  No daemon needed. */
int	gen_check_options(char **stop, size_t n_stop, int has_top,
	    uint32_t top, char **cause);
/* Check a prompt text's size and UTF-8; -1 and *cause.  No daemon needed. */
int	gen_check_prompt(const char *prompt, char **cause);

#endif
