/* metrics-testutil.h: synthetic requests for the metrics tests. */
#ifndef PHASED_METRICS_TESTUTIL_H
#define PHASED_METRICS_TESTUTIL_H

#include <stdint.h>

#include "metrics.h"

/*
 * Run one synthetic request through an instance: arrival at `at`, first KV
 * blocks admit ns later, one prefill chunk of prompt tokens ending at
 * at + ttft, then ntok tokens gap ns apart, finished for `why`.
 */
static __attribute__((unused)) void
metrics_feed(struct inst_metrics *m, uint64_t at, uint64_t admit,
    uint32_t prompt, uint64_t ttft, int ntok, uint64_t gap,
    enum finish_reason why)
{
	struct reqtime	rt;
	int		i;

	reqtime_init(&rt, at, prompt);
	reqtime_admit(&rt, at + admit);
	reqtime_chunk(&rt, at + admit, at + ttft, prompt);
	for (i = 0; i < ntok; i++) {
		reqtime_token(&rt, at + ttft + (uint64_t)i * gap);
		if (i == 0)
			inst_metrics_first_token(m, &rt);
	}
	reqtime_finish(&rt, at + ttft + (uint64_t)(ntok - 1) * gap);
	inst_metrics_finished(m, &rt, why);
	reqtime_free(&rt);
}

#endif
