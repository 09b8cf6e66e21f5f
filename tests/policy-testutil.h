/*
 * policy-testutil.h: what the policy property tests share: a seeded
 * PRNG (so a failure reproduces), loading a bundled policy by name, and
 * running its schedule on a synthetic view.
 */
#ifndef PHASED_POLICY_TESTUTIL_H
#define PHASED_POLICY_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_host.h"
#include "policy_testview.h"

/* Where the bundled policies are; a test may take it from the environment. */
static const char *builddir = POLICY_BUILD_DIR;

/* The PRNG's state; a test sets it to pick its sequence. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

/* Next pseudo-random 64-bit value (xorshift64*). */
static inline uint64_t
rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (rng_state * 2685821657736338717ULL);
}

/* Uniform integer in [lo, hi]. */
static inline uint32_t
rnd(uint32_t lo, uint32_t hi)
{
	return (lo + (uint32_t)(rng() % ((uint64_t)hi - lo + 1)));
}

/* Uniform real in [0, 1). */
static inline double
rndf(void)
{
	return ((rng() >> 11) * (1.0 / 9007199254740992.0));
}

/* Split space-separated params into argv (at most 8); the count. */
static inline size_t
split(char *copy, char **argv)
{
	char	*w, *save = NULL;
	size_t	 argc = 0;

	for (w = strtok_r(copy, " ", &save); w != NULL && argc < 8;
	    w = strtok_r(NULL, " ", &save))
		argv[argc++] = w;
	return (argc);
}

/* Load a bundled policy with space-separated params, or bail out. */
static inline struct policy *
load(const char *name, const char *params)
{
	struct policy	*pol;
	char		*copy, *argv[8], *cause = NULL;
	size_t		 argc;

	copy = strdup(params);
	argc = split(copy, argv);
	pol = policy_open(builddir, name, argc, argv, &cause);
	if (pol == NULL) {
		printf("Bail out! cannot load %s %s: %s\n", name, params, cause);
		exit(1);
	}
	free(copy);
	return (pol);
}

/* Run a policy's schedule on a view into its plan. */
static inline int
plan(struct policy *pol, struct tv *t)
{
	tv_plan_reset(t);
	return (pol->ops->schedule(pol->state, &t->v, &t->p));
}

#endif
