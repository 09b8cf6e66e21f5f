/* test-threadpool: every thread runs each job once; sizes; pinning; active counts. */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "threadpool.h"

struct job {
	_Atomic int	calls;
	_Atomic int	mask;
	int		nth_seen[64];
	int		cpu_seen[64];
	long		sum;
};

/* Record which thread ran. */
static void
record(void *arg, int ith, int nth)
{
	struct job *j = arg;

	atomic_fetch_add(&j->calls, 1);
	atomic_fetch_or(&j->mask, 1 << ith);
	j->nth_seen[ith] = nth;
	j->cpu_seen[ith] = sched_getcpu();
}

/* Busy work split by thread index; the results land in disjoint slots. */
static void
partial_sums(void *arg, int ith, int nth)
{
	long	*out = arg, s = 0, i;

	for (i = ith; i < 100000; i += nth)
		s += i;
	out[ith] = s;
}

struct counter_job {
	_Atomic int	next;
	_Atomic int	hits[256];
};

/* Take items from a shared counter until none are left. */
static void
take_items(void *arg, int ith, int nth)
{
	struct counter_job	*j = arg;
	int			 i;

	while ((i = atomic_fetch_add(&j->next, 1)) < 256)
		atomic_fetch_add(&j->hits[i], 1);
}

/* CPUs in a thread's affinity mask. */
static int
affinity_count(void)
{
	cpu_set_t	set;

	sched_getaffinity(0, sizeof set, &set);
	return (CPU_COUNT(&set));
}

struct pinned_run {
	struct threadpool	*tp;
	struct job		 j;
	int			 cpus_allowed;	/* after the run */
};

/* Run a pool from a thread that did not create it. */
static void *
run_elsewhere(void *arg)
{
	struct pinned_run	*pr = arg;

	threadpool_run(pr->tp, record, &pr->j);
	pr->cpus_allowed = affinity_count();
	return (NULL);
}

/*
 * Only the first n threads run while n are active; the others come back
 * when they are active again, for whole runs and any-mode runs alike.
 */
static void
test_active(void)
{
	static struct counter_job cj;
	struct threadpool	*tp;
	struct job		 j;
	char			*cause = NULL;
	int			 round, n, i, bad = 0, bad_any = 0;

	tp = threadpool_create(4, NULL, &cause);
	if (!ok(tp != NULL, "pool of 4 for active counts")) {
		diag("%s", cause);
		free(cause);
		return;
	}
	is_int(threadpool_set_active(tp, 2), 2, "2 of 4 active");
	is_int(threadpool_size(tp), 2, "size is the active count");
	is_int(threadpool_capacity(tp), 4, "capacity stays 4");
	memset(&j, 0, sizeof j);
	threadpool_run(tp, record, &j);
	ok(j.calls == 2 && j.mask == 3 && j.nth_seen[0] == 2 &&
	    j.nth_seen[1] == 2, "a run on 2 active: threads 0 and 1, nth 2");
	is_int(threadpool_set_active(tp, 0), 1, "0 active clamps to 1");
	is_int(threadpool_set_active(tp, 9), 4, "9 active clamps to 4");
	srand(7);
	for (round = 0; round < 1000; round++) {
		n = threadpool_set_active(tp, 1 + rand() % 4);
		memset(&j, 0, sizeof j);
		threadpool_run(tp, record, &j);
		if (j.calls != n || j.mask != (1 << n) - 1)
			bad++;
		for (i = 0; i < n; i++)
			if (j.nth_seen[i] != n)
				bad++;
		memset(&cj, 0, sizeof cj);
		threadpool_run_any(tp, take_items, &cj);
		for (i = 0; i < 256; i++)
			if (cj.hits[i] != 1)
				bad_any++;
		if (round % 300 == 299)
			usleep(20000);
	}
	is_int(bad, 0, "1000 runs at random active counts: the first n, once");
	is_int(bad_any, 0, "any-mode runs at random active counts: every item "
	    "once");
	threadpool_destroy(tp);
	/* A pool whose extra threads are parked is destroyed cleanly. */
	tp = threadpool_create(3, NULL, &cause);
	threadpool_set_active(tp, 1);
	threadpool_run(tp, record, &j);
	threadpool_destroy(tp);
	ok(1, "destroyed with parked threads");
}

int
main(void)
{
	struct threadpool	*tp;
	struct job		 j;
	char			*cause = NULL;
	int			 n, i, round, bad;
	long			 parts[8];

	tp = threadpool_create(0, NULL, &cause);
	ok(tp == NULL, "zero threads rejected");
	like(cause, "thread count 0: out of range", "error names the count");
	free(cause);
	cause = NULL;

	for (n = 1; n <= 4; n++) {
		tp = threadpool_create(n, NULL, &cause);
		if (!ok(tp != NULL, "pool of %d created", n)) {
			diag("%s", cause);
			continue;
		}
		is_int(threadpool_size(tp), n, "size %d", n);
		bad = 0;
		for (round = 0; round < 2000; round++) {
			memset(&j, 0, sizeof j);
			threadpool_run(tp, record, &j);
			if (j.calls != n || j.mask != (1 << n) - 1)
				bad++;
			for (i = 0; i < n; i++)
				if (j.nth_seen[i] != n)
					bad++;
			/* Let the workers fall asleep now and then. */
			if (round % 500 == 499)
				usleep(20000);
		}
		is_int(bad, 0, "2000 runs on %d threads: each thread once per run", n);
		memset(parts, 0, sizeof parts);
		threadpool_run(tp, partial_sums, parts);
		long total = 0;
		for (i = 0; i < n; i++)
			total += parts[i];
		is_int(total, 99999L * 100000 / 2, "work split over %d threads adds up", n);
		bad = 0;
		for (round = 0; round < 2000; round++) {
			static struct counter_job cj;

			memset(&cj, 0, sizeof cj);
			threadpool_run_any(tp, take_items, &cj);
			for (i = 0; i < 256; i++)
				if (cj.hits[i] != 1)
					bad++;
			if (round % 2 == 0)
				threadpool_run(tp, record, &j);
			if (round % 500 == 499)
				usleep(20000);
		}
		is_int(bad, 0, "run_any on %d threads: every item taken once", n);
		threadpool_destroy(tp);
	}
	threadpool_destroy(NULL);

	/* Pinning: with one CPU listed for each thread, each runs there. */
	{
		int cpus[2] = { 0, sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0 };
		cpu_set_t old;

		sched_getaffinity(0, sizeof old, &old);
		tp = threadpool_create(2, cpus, &cause);
		if (ok(tp != NULL, "pinned pool created")) {
			memset(&j, 0, sizeof j);
			threadpool_run(tp, record, &j);
			is_int(j.cpu_seen[0], cpus[0], "thread 0 runs on cpu %d", cpus[0]);
			is_int(j.cpu_seen[1], cpus[1], "thread 1 runs on cpu %d", cpus[1]);
			threadpool_destroy(tp);
		} else {
			diag("%s", cause);
			free(cause);
			cause = NULL;
		}
		sched_setaffinity(0, sizeof old, &old);

		/*
		 * Made here, run on another thread: that thread is pinned,
		 * this one is not (the daemon creates groups' pools on its
		 * main thread and runs them on each group's own).
		 */
		struct pinned_run pr;
		pthread_t t;
		int before = affinity_count();

		memset(&pr, 0, sizeof pr);
		pr.tp = threadpool_create(2, cpus, &cause);
		if (ok(pr.tp != NULL, "pool made for another thread")) {
			is_int(affinity_count(), before, "the creating thread "
			    "is not pinned");
			pthread_create(&t, NULL, run_elsewhere, &pr);
			pthread_join(t, NULL);
			is_int(pr.j.cpu_seen[0], cpus[0], "the running thread "
			    "runs on cpu %d", cpus[0]);
			is_int(pr.cpus_allowed, 1, "and is pinned to it");
			is_int(affinity_count(), before, "the creating thread "
			    "still is not");
			threadpool_destroy(pr.tp);
		} else {
			free(cause);
			cause = NULL;
		}
		int bad_cpu[2] = { 0, 100000 };
		tp = threadpool_create(2, bad_cpu, &cause);
		ok(tp == NULL, "cpu 100000 rejected");
		like(cause, "cpu 100000", "error names the cpu");
		free(cause);
		sched_setaffinity(0, sizeof old, &old);
	}
	test_active();
	done_testing();
}
