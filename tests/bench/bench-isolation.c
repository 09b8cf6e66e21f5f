/*
 * bench-isolation.c: the cost of running a policy in its policy host
 * process: p50 and p99 of one plan's round trip (view out, plan back,
 * validation) in-process and isolated, on the view of bench-policy (128
 * requests).  Prints figures; no assertions.
 * Usage: bench-isolation [plugindir [policy-host]]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "policy_guard.h"
#include "util.h"
#include "policy_testview.h"

/* Order samples. */
static int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return ((x > y) - (x < y));
}

int
main(int argc, char **argv)
{
	static const char	*names[] = { "fcfs", "chunked-prefill",
				    "disaggregated" };
	const char		*dir = argc > 1 ? argv[1] : POLICY_BUILD_DIR;
	const char		*host = argc > 2 ? argv[2] :
				    POLICY_HOST_PATH;
	struct policy_guard	 g;
	struct pguard_conf	 pc;
	struct guarded		*pol;
	struct tv		*t = xcalloc(1, sizeof *t);
	uint64_t		*ns, t0;
	char			*cause = NULL;
	uint32_t		 i;
	size_t			 s;
	int			 iso, n, iters = 20000, fell;

	log_init(1, 0, "bench-isolation");
	tv_init(t, 8192, 128, 100000);
	for (i = 0; t->v.n_reqs < TV_MAXR; i++) {
		if (i < 64)
			tv_add(t, i + 1, 0, 200, 200, 1 + i % 50);
		else if (i < 96)
			tv_add(t, i + 1, 0, 2000, 100 + i, 0);
		else
			tv_add(t, i + 1, 0, 100 + i * 7, 0, 0);
	}
	t->v.n_hist = 64;
	for (i = 0; i < 64; i++) {
		t->hist[i].decode_tokens = 64;
		t->hist[i].duration_ns = 5000000;
	}
	ns = xcalloc(iters, sizeof *ns);
	printf("view: %u requests, %d plans each; round trip of one plan\n",
	    t->v.n_reqs, iters);
	for (s = 0; s < sizeof names / sizeof names[0]; s++) {
		for (iso = 0; iso < 2; iso++) {
			memset(&pc, 0, sizeof pc);
			pc.isolate = iso;
			pc.host = host;
			pc.cap = TV_MAXR;
			pguard_init(&g, &pc);
			if ((pol = pguard_load(&g.conf, dir, names[s], 0, NULL,
			    &cause)) == NULL) {
				printf("%s: %s\n", names[s], cause);
				free(cause);
				cause = NULL;
				pguard_free(&g);
				continue;
			}
			pguard_discard(pguard_stage(&g, pol));
			fell = 0;
			for (n = 0; n < iters; n++) {
				tv_plan_reset(t);
				t0 = now_ns();
				fell += pguard_schedule(&g, &t->v, &t->p, NULL,
				    0, 1) != PGUARD_POLICY;
				ns[n] = now_ns() - t0;
			}
			qsort(ns, iters, sizeof *ns, cmp_u64);
			printf("%-16s %-10s p50 %7.2f us  p99 %7.2f us  "
			    "%u entries, %d fallbacks\n", names[s],
			    iso ? "isolated" : "in-process", ns[iters / 2] / 1e3,
			    ns[iters * 99 / 100] / 1e3, t->p.n_entries, fell);
			pguard_free(&g);
		}
	}
	free(ns);
	free(t);
	return (0);
}
