/* finish_reason.c: the names of the finish reasons. */
#include "config.h"

#include "finish_reason.h"

const char *const finish_reason_names[FINISH__COUNT] = {
	[FINISH_LENGTH] = "length",
	[FINISH_STOP] = "stop",
	[FINISH_EOS] = "eos",
	[FINISH_CANCELLED] = "cancelled",
	[FINISH_ERROR] = "error",
};
