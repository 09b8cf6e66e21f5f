/*
 * bench-policy.c: the planning cost per iteration of each bundled policy,
 * including validation, on a view of 128 requests (64 decoding, 32
 * prefilling, 32 waiting).  Prints microseconds per plan; no assertions.
 * Usage: bench-policy [plugindir]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "policy_host.h"
#include "util.h"
#include "policy_testview.h"

int
main(int argc, char **argv)
{
	static const char *specs[][2] = {
		{ "builtin", NULL }, { "fcfs", NULL },
		{ "decode-reserved", NULL }, { "chunked-prefill", NULL },
		{ "chunked-prefill", "tbt_target_ms=30" },
		{ "disaggregated", NULL },
	};
	const char		*dir = argc > 1 ? argv[1] : POLICY_BUILD_DIR;
	struct policy_slot	 slot;
	struct tv		*t = xcalloc(1, sizeof *t);
	char			*cause = NULL, *params[1];
	uint64_t		 t0, t1;
	uint32_t		 i;
	size_t			 s;
	int			 n, iters = 20000;

	log_init(1, 0, "bench-policy");
	tv_init(t, 8192, 128, 100000);
	for (i = 0; i < TV_MAXR * 2 && t->v.n_reqs < TV_MAXR; i++) {
		if (i < 64)
			tv_add(t, i + 1, 0, 200, 200, 1 + i % 50);
		else if (i < 96)
			tv_add(t, i + 1, 0, 2000, 100 + i, 0);
		else
			tv_add(t, i + 1, 0, 100 + i * 7, 0, 0);
	}
	t->v.n_hist = 64;
	for (i = 0; i < 64; i++) {
		t->hist[i].prefill_tokens = (i * 131) % 1500;
		t->hist[i].decode_tokens = 64;
		t->hist[i].duration_ns = 5000000 + 10000ULL *
		    t->hist[i].prefill_tokens;
	}
	printf("view: %u requests, %d plans each\n", t->v.n_reqs, iters);
	for (s = 0; s < sizeof specs / sizeof specs[0]; s++) {
		policy_slot_init(&slot);
		params[0] = (char *)specs[s][1];
		if (policy_slot_set(&slot, dir, specs[s][0], specs[s][1] ?
		    1 : 0, params, &cause) != 0) {
			printf("%s: %s\n", specs[s][0], cause);
			free(cause);
			cause = NULL;
			continue;
		}
		t0 = now_ns();
		for (n = 0; n < iters; n++) {
			tv_plan_reset(t);
			policy_slot_schedule(&slot, &t->v, &t->p);
		}
		t1 = now_ns();
		printf("%-16s %-18s %7.2f us/plan  %u entries, %llu errors\n",
		    specs[s][0], specs[s][1] ? specs[s][1] : "",
		    (t1 - t0) / 1e3 / iters, t->p.n_entries,
		    (unsigned long long)slot.plan_errors);
		policy_slot_free(&slot);
	}
	free(t);
	return (0);
}
