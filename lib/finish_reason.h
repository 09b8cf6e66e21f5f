/* finish_reason.h: why a generation ended, shared by the engine and metrics. */
#ifndef PHASED_FINISH_REASON_H
#define PHASED_FINISH_REASON_H

enum finish_reason {
	FINISH_LENGTH,		/* max_tokens or context reached */
	FINISH_STOP,		/* a stop sequence matched */
	FINISH_EOS,		/* the model produced end of sequence */
	FINISH_CANCELLED,	/* the client cancelled or went away */
	FINISH_ERROR,
	FINISH__COUNT
};
/* The names replies, stats and Prometheus labels use. */
extern const char *const finish_reason_names[FINISH__COUNT];

#endif
