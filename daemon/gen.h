/* gen.h: a generation request as the control thread tracks it. */
#ifndef PHASED_GEN_H
#define PHASED_GEN_H

#include <sys/queue.h>

#include <stdint.h>

struct instance;
struct stream;

struct gen {
	TAILQ_ENTRY(gen)	 entry;		/* in its instance's list */
	struct instance		*inst;
	struct stream		*stream;	/* NULL once the client is gone */
	uint64_t		 engine_id;
};

#endif
