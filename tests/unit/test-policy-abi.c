/*
 * test-policy-abi.c: loading policies by name, the ABI checks, parameter
 * errors, swaps that fail leaving the old policy active, and the ejection
 * of a policy that keeps making invalid plans.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "policy_host.h"
#include "tap.h"
#include "policy_testview.h"

static const char *builddir = POLICY_BUILD_DIR;
static const char *testdir = POLICY_TEST_DIR;

/* Try a swap that must fail; the slot must be exactly as before. */
static void
swap_fails(struct policy_slot *slot, const char *dir, const char *name,
    size_t argc, char *const *argv, const char *want)
{
	char		*cause = NULL;
	const char	*oldname = policy_slot_name(slot);
	char		*oldparams = strdup(policy_slot_params(slot));
	struct policy	*old = slot->active;
	uint64_t	 swaps = slot->swaps;
	int		 rv;

	rv = policy_slot_set(slot, dir, name, argc, argv, &cause);
	ok(rv == -1, "swap to '%s'%s%s refused", name, argc ? " " : "",
	    argc ? argv[0] : "");
	like(cause, want, "cause of '%s' names the problem", name);
	diag("cause: %s", cause ? cause : "(null)");
	ok(slot->active == old && strcmp(policy_slot_name(slot),
	    oldname) == 0 && strcmp(policy_slot_params(slot),
	    oldparams) == 0 && slot->swaps == swaps,
	    "'%s': old policy still active, unchanged", name);
	free(cause);
	free(oldparams);
}

/* Load every bundled policy by name and read its table. */
static void
test_load_all(void)
{
	static const char *names[] = { "fcfs", "decode-reserved",
	    "chunked-prefill", "disaggregated", "example", "fair-share", "slo" };
	struct policy	*pol;
	char		*cause = NULL;
	size_t		 i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		pol = policy_open(builddir, names[i], 0, NULL, &cause);
		if (!ok(pol != NULL, "load %s", names[i])) {
			diag("cause: %s", cause);
			free(cause);
			cause = NULL;
			continue;
		}
		is_str(pol->ops->name, names[i], "%s: table name", names[i]);
		ok(pol->ops->describe != NULL && strlen(pol->ops->describe) > 10,
		    "%s: has a description", names[i]);
		is_int(pol->ops->abi_version, PHASED_POLICY_ABI_VERSION,
		    "%s: ABI version", names[i]);
		policy_close(pol);
	}
}

/* policy_list finds every bundled policy with its description. */
static void
test_list(void)
{
	struct policy_info	*v;
	size_t			 n, i;
	char			*cause = NULL;
	int			 found = 0;

	if (!ok(policy_list(builddir, &v, &n, &cause) == 0, "policy_list")) {
		diag("cause: %s", cause);
		free(cause);
		return;
	}
	for (i = 0; i < n; i++) {
		diag("%s: %s [%s]%s%s", v[i].name, v[i].describe ?
		    v[i].describe : "-", v[i].params_help ? v[i].params_help :
		    "", v[i].error ? " error: " : "", v[i].error ?
		    v[i].error : "");
		if (v[i].error == NULL && v[i].describe != NULL &&
		    (strcmp(v[i].name, "fcfs") == 0 ||
		    strcmp(v[i].name, "decode-reserved") == 0 ||
		    strcmp(v[i].name, "chunked-prefill") == 0 ||
		    strcmp(v[i].name, "disaggregated") == 0))
			found++;
	}
	is_int(found, 4, "all four policies listed");
	for (i = 1; i < n; i++)
		ok(strcmp(v[i - 1].name, v[i].name) < 0, "list sorted (%s)",
		    v[i].name);
	policy_list_free(v, n);

	ok(policy_list(testdir, &v, &n, &cause) == 0, "list test plugins");
	for (i = 0; i < n; i++) {
		if (strcmp(v[i].name, "bad-version") == 0)
			like(v[i].error, "ABI version", "bad-version listed "
			    "with its error");
	}
	policy_list_free(v, n);
	ok(policy_list("/nonexistent-dir", &v, &n, &cause) == -1,
	    "missing plugin dir is an error");
	like(cause, "/nonexistent-dir", "cause names the directory");
	free(cause);
}

/* Refused names, ABI mismatches and bad parameters leave the slot alone. */
static void
test_refusals(void)
{
	struct policy_slot	 slot;
	char			*cause = NULL;
	char			*p256[] = { "budget=256" };
	char			*p0[] = { "budget=0" };
	char			*pabc[] = { "budget=abc" };
	char			*pfoo[] = { "foo=1" };
	char			*pnoeq[] = { "budget" };
	char			*ptwice[] = { "budget=64", "budget=128" };
	char			*ptarget[] = { "tbt_target_ms=-1" };
	char			*px[] = { "x=1" };
	char			*pdr[] = { "max_prefill_tokens=70000" };

	policy_slot_init(&slot);
	is_str(policy_slot_name(&slot), "builtin", "starts on builtin");
	ok(policy_slot_set(&slot, builddir, "chunked-prefill", 1, p256,
	    &cause) == 0, "swap to chunked-prefill budget=256");
	free(cause);
	cause = NULL;
	is_str(policy_slot_name(&slot), "chunked-prefill", "active name");
	is_str(policy_slot_params(&slot), "budget=256", "active params");
	is_int(slot.swaps, 1, "one swap");

	swap_fails(&slot, testdir, "bad-version", 0, NULL,
	    "ABI version 2, this daemon speaks version 1");
	swap_fails(&slot, testdir, "bad-size", 0, NULL, "struct size");
	swap_fails(&slot, testdir, "no-symbol", 0, NULL,
	    "does not export phased_policy_entry");
	swap_fails(&slot, builddir, "../policies/fcfs", 0, NULL,
	    "contains '/'");
	swap_fails(&slot, builddir, "a/b", 0, NULL, "contains '/'");
	swap_fails(&slot, builddir, "..", 0, NULL, "starts with '.'");
	swap_fails(&slot, builddir, ".hidden", 0, NULL, "starts with '.'");
	swap_fails(&slot, builddir, "nonexistent", 0, NULL,
	    "policy 'nonexistent': no such policy");
	swap_fails(&slot, builddir, "fc fs", 0, NULL, "character ' '");
	swap_fails(&slot, builddir, "", 0, NULL, "empty policy name");
	swap_fails(&slot, builddir, "chunked-prefill", 1, p0,
	    "budget 0 is out of range 16..65536");
	swap_fails(&slot, builddir, "chunked-prefill", 1, pabc,
	    "budget 'abc' is not an integer");
	swap_fails(&slot, builddir, "chunked-prefill", 1, pfoo,
	    "unknown parameter 'foo' (expected budget, order, tbt_p99_ms");
	swap_fails(&slot, builddir, "chunked-prefill", 1, pnoeq,
	    "parameter 'budget' is not key=value");
	swap_fails(&slot, builddir, "chunked-prefill", 2, ptwice,
	    "parameter 'budget' given twice");
	swap_fails(&slot, builddir, "chunked-prefill", 1, ptarget,
	    "tbt_target_ms -1 is out of range 0.1..60000");
	swap_fails(&slot, builddir, "fcfs", 1, px,
	    "unknown parameter 'x' (this policy takes none)");
	swap_fails(&slot, builddir, "decode-reserved", 1, pdr,
	    "max_prefill_tokens 70000 is out of range 1..65536");
	swap_fails(&slot, builddir, "disaggregated", 1, p0,
	    "policy 'disaggregated': budget 0 is out of range 16..65536");
	swap_fails(&slot, testdir, "reject-params", 1, px,
	    "policy 'reject-params': rejecting 1 parameters");
	swap_fails(&slot, builddir, "builtin", 1, px, "unknown parameter 'x'");

	/* A good swap after all the bad ones, then back to the built-in. */
	ok(policy_slot_set(&slot, builddir, "fcfs", 0, NULL, &cause) == 0,
	    "swap to fcfs");
	is_int(slot.swaps, 2, "two swaps");
	ok(policy_slot_set(&slot, builddir, "builtin", 0, NULL, &cause) == 0,
	    "swap to builtin");
	is_str(policy_slot_name(&slot), "builtin", "builtin active");
	ok(slot.active == NULL, "no plugin loaded");
	policy_slot_free(&slot);
}

/* A policy that keeps making invalid plans is replaced, then ejected. */
static void
test_eject(void)
{
	struct policy_slot	 slot;
	struct tv		*t;
	char			*cause = NULL;
	char			 want[64];
	int			 i, rv;

	t = calloc(1, sizeof *t);
	tv_init(t, 512, 16, 100);
	tv_add(t, 1, 0, 10, 10, 3);	/* decoding */
	tv_add(t, 2, 0, 100, 40, 0);	/* prefilling */
	tv_add(t, 3, 0, 50, 0, 0);	/* waiting */

	policy_slot_init(&slot);
	if (!ok(policy_slot_set(&slot, testdir, "broken", 0, NULL,
	    &cause) == 0, "load the broken plugin")) {
		diag("cause: %s", cause);
		free(cause);
		free(t);
		return;
	}
	for (i = 1; i < POLICY_MAX_ERRORS; i++) {
		tv_plan_reset(t);
		rv = policy_slot_schedule(&slot, &t->v, &t->p);
		is_int(rv, 1, "plan %d: fallback used", i);
		is_int(slot.plan_errors, i, "plan %d: error counted", i);
		is_int(slot.consecutive_errors, i, "plan %d: in a row", i);
	}
	like(slot.last_error, "request 1 is decoding: given 2 tokens, must "
	    "be exactly 1", "last error names the bad entry");
	ok(plan_validate(&t->v, &t->p, NULL, 0) == 0, "fallback plan valid");
	is_int(t->p.n_entries, 3, "fallback plans decode + prefill + admit");
	is_int(t->p.entries[0].n_tokens, 1, "fallback decode gets 1 token");
	is_int(t->p.entries[1].n_tokens, 60, "fallback prefills the rest");
	is_int(t->p.entries[2].n_tokens, 50, "fallback admits whole prompt");
	is_str(policy_slot_name(&slot), "broken", "still active at 7 errors");
	ok(slot.ejected == NULL, "not ejected yet");

	tv_plan_reset(t);
	rv = policy_slot_schedule(&slot, &t->v, &t->p);
	is_int(rv, 1, "8th invalid plan: fallback");
	is_str(policy_slot_name(&slot), "builtin", "ejected to builtin");
	snprintf(want, sizeof want, "ejected: policy 'broken' made %d",
	    POLICY_MAX_ERRORS);
	like(slot.ejected, want, "ejected reason");
	like(slot.ejected, "given 2 tokens", "reason has the last error");
	diag("%s", slot.ejected ? slot.ejected : "(null)");
	is_int(slot.ejections, 1, "one ejection");
	is_int(slot.plan_errors, POLICY_MAX_ERRORS, "errors counted");

	tv_plan_reset(t);
	rv = policy_slot_schedule(&slot, &t->v, &t->p);
	is_int(rv, 1, "builtin plans afterwards");
	ok(plan_validate(&t->v, &t->p, NULL, 0) == 0, "builtin plan valid");
	is_int(slot.plan_errors, POLICY_MAX_ERRORS, "builtin makes no errors");

	/* A good policy resets the run of errors. */
	ok(policy_slot_set(&slot, builddir, "chunked-prefill", 0, NULL,
	    &cause) == 0, "swap to chunked-prefill");
	tv_plan_reset(t);
	rv = policy_slot_schedule(&slot, &t->v, &t->p);
	is_int(rv, 0, "chunked-prefill plan used");
	is_int(slot.consecutive_errors, 0, "no errors in a row");
	ok(slot.ejected != NULL, "ejection reason kept for display");
	policy_slot_free(&slot);
	free(t);
}

/* A policy that declines (schedule returns -1) gets the fallback plan. */
static void
test_decline(void)
{
	struct policy_slot	 slot;
	struct tv		*t = calloc(1, sizeof *t);
	char			*cause = NULL;

	tv_init(t, 512, 16, 0);		/* no free KV: the example declines */
	tv_add(t, 1, 0, 32, 32, 1);
	tv_add(t, 2, 0, 32, 32, 1);
	policy_slot_init(&slot);
	ok(policy_slot_set(&slot, builddir, "example", 0, NULL, &cause) == 0,
	    "load example");
	is_int(policy_slot_schedule(&slot, &t->v, &t->p), 1,
	    "declined plan: fallback used");
	is_str(slot.last_error, "schedule returned an error",
	    "declining is counted as an error");
	is_int(t->p.n_preempt, 1, "fallback preempts to make room");
	ok(plan_validate(&t->v, &t->p, NULL, 0) == 0, "fallback plan valid");
	t->groups[0].free_blocks = 10;
	is_int(policy_slot_schedule(&slot, &t->v, &t->p), 0,
	    "with room the example's own plan is used");
	is_int(slot.consecutive_errors, 0, "the run of errors ends");
	is_int(slot.plans, 2, "two plans asked");
	is_int(slot.plan_errors, 1, "one error counted");
	policy_slot_free(&slot);
	free(t);
}

/* Read a whole file into a new string. */
static char *
slurp(const char *path)
{
	FILE	*f;
	char	*buf;
	long	 n;

	if ((f = fopen(path, "r")) == NULL)
		return (NULL);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, n + 1);
	if (fread(buf, 1, n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return (buf);
}

/* Undo the roff escapes of a literal display: \e and \&. */
static void
unescape(char *s)
{
	char	*w = s;

	while (*s != '\0') {
		if (s[0] == '\\' && s[1] == 'e') {
			*w++ = '\\';
			s += 2;
		} else if (s[0] == '\\' && s[1] == '&')
			s += 2;
		else
			*w++ = *s++;
	}
	*w = '\0';
}

/* The man page quotes example.c in full, line for line. */
static void
test_man_example(void)
{
	char	*src, *man, *line, *save = NULL;
	char	 path[1024];
	int	 missing = 0, lines = 0;

	snprintf(path, sizeof path, "%s/policies/example.c", POLICY_SRCDIR);
	src = slurp(path);
	snprintf(path, sizeof path, "%s/man/phased-policy.3", POLICY_SRCDIR);
	man = slurp(path);
	if (!ok(src != NULL && man != NULL, "read example.c and the man page")) {
		free(src);
		free(man);
		return;
	}
	unescape(man);
	for (line = strtok_r(src, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		lines++;
		if (strstr(man, line) == NULL) {
			if (missing++ < 5)
				diag("not in the man page: %s", line);
		}
	}
	ok(lines > 50 && missing == 0, "all %d lines of example.c quoted "
	    "(%d missing)", lines, missing);
	free(src);
	free(man);
}

int
main(void)
{
	const char	*e;

	log_init(1, 0, "test-policy-abi");
	if ((e = getenv("POLICY_BUILD_DIR")) != NULL)
		builddir = e;
	if ((e = getenv("POLICY_TEST_DIR")) != NULL)
		testdir = e;
	test_load_all();
	test_list();
	test_refusals();
	test_eject();
	test_decline();
	test_man_example();
	done_testing();
}
