/*
 * evil.c: plugins that attack the daemon, one per build flag.  Each plans
 * like fcfs until it has a request to plan, then:
 *   EVIL_LOOP     never returns from schedule()
 *   EVIL_CRASH    dereferences NULL
 *   EVIL_OVERRUN  writes entries far past the plan's arrays
 *   EVIL_VIEW     scribbles over the (read-only) view and plans from it
 *   EVIL_SLEEP    sleeps 5 s in schedule()
 *   EVIL_FORK     forks
 *   EVIL_OPEN     creates the file named by $PHASED_EVIL_FILE
 *   EVIL_CTOR     creates that file from a constructor, before any check
 *   EVIL_HANG     never returns from its constructor
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <phased/policy.h>

#if defined(EVIL_CTOR) || defined(EVIL_OPEN)
/* Create the file the test watches for; the sandbox must stop this. */
static void
evil_touch(void)
{
	const char	*path = getenv("PHASED_EVIL_FILE");
	int		 fd;

	if (path == NULL)
		path = "/tmp/phased-evil-file";
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) != -1) {
		if (write(fd, "evil\n", 5) < 0)
			abort();
		close(fd);
	}
}
#endif

#ifdef EVIL_HANG
/* Runs when the object is loaded, and never ends. */
static void __attribute__((constructor))
evil_hang(void)
{
	for (;;)
		__asm__ volatile("" ::: "memory");
}
#endif

#ifdef EVIL_CTOR
/* Runs when the object is loaded, before the daemon checks anything. */
static void __attribute__((constructor))
evil_ctor(void)
{
	evil_touch();
}
#endif

/* Misbehave as built, once there is a request to plan; else plan fcfs. */
static int
evil_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	uint32_t	i, budget = v->max_batch_tokens, n;

	if (v->n_reqs == 0)
		return (0);
#ifdef EVIL_LOOP
	for (;;)
		__asm__ volatile("" ::: "memory");
#endif
#ifdef EVIL_CRASH
	*(volatile int *)(uintptr_t)state = 1;
#endif
#ifdef EVIL_OVERRUN
	for (i = 0; i < p->cap_entries + (1U << 24); i++) {
		p->entries[i].id = 0xdeadbeef;
		p->entries[i].n_tokens = 7;
	}
#endif
#ifdef EVIL_VIEW
	{
		struct phased_request *r = (struct phased_request *)v->reqs;

		for (i = 0; i < v->n_reqs; i++) {
			r[i].id += 1000;
			r[i].prompt_tokens = 1U << 30;
		}
		((struct phased_view *)v)->block_size = 0;
	}
#endif
#ifdef EVIL_SLEEP
	{
		struct timespec ts = { 5, 0 };

		nanosleep(&ts, NULL);
	}
#endif
#ifdef EVIL_FORK
	if (fork() == 0)
		_exit(0);
#endif
#ifdef EVIL_OPEN
	evil_touch();
#endif
	for (i = 0; i < v->n_reqs && budget > 0; i++) {
		const struct phased_request *r = &v->reqs[i];

		if (r->state == PHASED_REQ_FINISHED)
			continue;
		n = r->state == PHASED_REQ_DECODING ? 1 :
		    phased_req_remaining(r);
		if (n > budget)
			n = budget;
		if (n == 0 || phased_plan_add(p, v, r->id, n) != 0)
			break;
		budget -= n;
	}
	return (0);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = EVIL_NAME,
	.describe = "misbehaves to test the sandbox",
	.params_help = "",
	.schedule = evil_schedule,
};
