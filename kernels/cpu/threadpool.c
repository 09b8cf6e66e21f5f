/* threadpool.c: workers that spin briefly, then sleep on a futex. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "threadpool.h"
#include "log.h"
#include "util.h"

/* How many polls a waiting thread spins before it sleeps. */
#define SPIN_POLLS	20000

/* Flags in the low half of entry. */
#define ENTRY_ALL	(1ULL << 31)	/* every thread must run */
#define ENTRY_CLOSED	(1ULL << 30)	/* any-mode run closed to latecomers */
#define ENTRY_COUNT	((1ULL << 30) - 1)

struct worker {
	struct threadpool	*tp;
	pthread_t		 thread;
	int			 ith;
};

struct threadpool {
	int			 n;
	struct worker		*workers;	/* n - 1 of them */
	int			 cpu0;		/* the caller's CPU, -1: unpinned */
	pthread_t		 caller;	/* the thread pinned to cpu0 */
	int			 have_caller;

	/* Written by the caller before each generation bump. */
	void			(*fn)(void *, int, int);
	void			*arg;

	/* Each on its own cache line: workers poll gen, the caller polls left. */
	_Alignas(64) _Atomic uint32_t gen;	/* bumped to start a run */
	_Atomic uint64_t	 entry;		/* gen << 32 | flags | joined */
	_Atomic uint32_t	 sleepers;	/* workers asleep on gen */
	_Atomic int		 quit;
	_Atomic int		 active;	/* threads that take part in runs */
	_Atomic uint32_t	 park;		/* bumped when active changes */
	_Atomic uint32_t	 active_gen;	/* gen when active last changed */
	_Alignas(64) _Atomic uint32_t left;	/* workers still running */
	_Atomic uint32_t	 waiting;	/* caller asleep on left or done */
	_Atomic uint32_t	 done;		/* joined workers finished (any mode) */

	_Alignas(64) void	*scratch;
	size_t			 scratch_size;
};

/* Sleep while *addr == val (spurious wake-ups are fine). */
static void
futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
#ifdef __linux__
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
	(void)addr;
	(void)val;
	sched_yield();
#endif
}

/* Wake every thread sleeping on addr. */
static void
futex_wake(_Atomic uint32_t *addr)
{
#ifdef __linux__
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
#else
	(void)addr;
#endif
}

/* A polite busy-wait hint. */
static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Worker loop: wait for a new generation, run, report completion. */
static void *
worker_main(void *p)
{
	struct worker		*w = p;
	struct threadpool	*tp = w->tp;
	uint32_t		 seen = 0;
	int			 i;

	for (;;) {
		uint32_t g, pk;

		/*
		 * Beyond the active count: sleep on park, not gen, so that runs
		 * of the active threads do not wake us to spin on a CPU that
		 * another pool may be using.
		 */
		if (w->ith >= atomic_load(&tp->active)) {
			for (;;) {
				pk = atomic_load(&tp->park);
				if (atomic_load(&tp->quit))
					return (NULL);
				if (w->ith < atomic_load(&tp->active))
					break;
				futex_wait(&tp->park, pk);
			}
			/* Runs before our activation are not ours. */
			seen = atomic_load(&tp->active_gen);
		}
		for (i = 0; i < SPIN_POLLS; i++) {
			g = atomic_load_explicit(&tp->gen, memory_order_acquire);
			if (g != seen)
				break;
			cpu_relax();
		}
		while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen) {
			atomic_fetch_add(&tp->sleepers, 1);
			/* Re-check after announcing ourselves: no lost wake-up. */
			if (atomic_load(&tp->gen) == seen)
				futex_wait(&tp->gen, seen);
			atomic_fetch_sub(&tp->sleepers, 1);
		}
		seen = g;
		if (atomic_load_explicit(&tp->quit, memory_order_acquire))
			break;
		if (w->ith >= atomic_load(&tp->active))
			continue;	/* parked before this run was set up */
		uint64_t e = atomic_load(&tp->entry);
		if ((uint32_t)(e >> 32) != g)
			continue;	/* a run we missed entirely */
		if (e & ENTRY_ALL) {
			tp->fn(tp->arg, w->ith, atomic_load(&tp->active));
			/* Sequentially consistent: pairs with the waiting flag. */
			if (atomic_fetch_sub(&tp->left, 1) == 1 &&
			    atomic_load(&tp->waiting))
				futex_wake(&tp->left);
			continue;
		}
		/* Any mode: join unless the caller already closed the run. */
		do {
			if ((uint32_t)(e >> 32) != g || (e & ENTRY_CLOSED))
				break;
		} while (!atomic_compare_exchange_weak(&tp->entry, &e, e + 1));
		if ((uint32_t)(e >> 32) != g || (e & ENTRY_CLOSED))
			continue;
		tp->fn(tp->arg, w->ith, atomic_load(&tp->active));
		atomic_fetch_add(&tp->done, 1);
		if (atomic_load(&tp->waiting))
			futex_wake(&tp->done);
	}
	return (NULL);
}

/* Pin a thread to one CPU; -1 and *cause on failure. */
static int
pin_thread(pthread_t t, int cpu, char **cause)
{
#ifdef __linux__
	cpu_set_t	set;
	int		error;

	if (cpu < 0 || cpu >= CPU_SETSIZE) {
		set_cause(cause, "cpu %d: out of range (0 to %d)", cpu, CPU_SETSIZE - 1);
		return (-1);
	}
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if ((error = pthread_setaffinity_np(t, sizeof set, &set)) != 0) {
		set_cause(cause, "cpu %d: cannot pin thread: %s", cpu, strerror(error));
		return (-1);
	}
#else
	(void)t;
	(void)cpu;
	(void)cause;
#endif
	return (0);
}

/* Start a pool of n_threads (the caller included), optionally pinned. */
struct threadpool *
threadpool_create(int n_threads, const int *cpus, char **cause)
{
	struct threadpool	*tp;
	int			 i, error;

	if (n_threads < 1 || n_threads > 1024) {
		set_cause(cause, "thread count %d: out of range (1 to 1024)", n_threads);
		return (NULL);
	}
	/* Checked now, applied by the first run to the thread that runs it. */
	if (cpus != NULL && (cpus[0] < 0 || cpus[0] >= CPU_SETSIZE)) {
		set_cause(cause, "cpu %d: out of range (0 to %d)", cpus[0],
		    CPU_SETSIZE - 1);
		return (NULL);
	}
	tp = xcalloc(1, sizeof *tp);
	tp->n = n_threads;
	tp->cpu0 = cpus != NULL ? cpus[0] : -1;
	atomic_init(&tp->active, n_threads);
	tp->workers = xcalloc(n_threads, sizeof *tp->workers);
	for (i = 1; i < n_threads; i++) {
		struct worker *w = &tp->workers[i - 1];

		w->tp = tp;
		w->ith = i;
		if ((error = pthread_create(&w->thread, NULL, worker_main, w)) != 0) {
			set_cause(cause, "thread %d of %d: cannot create: %s", i,
			    n_threads, strerror(error));
			tp->n = i;
			threadpool_destroy(tp);
			return (NULL);
		}
		if (cpus != NULL && pin_thread(w->thread, cpus[i], cause) != 0) {
			tp->n = i + 1;
			threadpool_destroy(tp);
			return (NULL);
		}
	}
	return (tp);
}

/* Stop the workers and free the pool. */
void
threadpool_destroy(struct threadpool *tp)
{
	int	i;

	if (tp == NULL)
		return;
	atomic_store_explicit(&tp->quit, 1, memory_order_release);
	atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
	futex_wake(&tp->gen);
	atomic_fetch_add(&tp->park, 1);
	futex_wake(&tp->park);
	for (i = 1; i < tp->n; i++)
		pthread_join(tp->workers[i - 1].thread, NULL);
	free(tp->workers);
	free(tp->scratch);
	free(tp);
}

/* Number of threads that take part in runs, the caller included. */
int
threadpool_size(const struct threadpool *tp)
{
	return (tp == NULL ? 1 : atomic_load(&tp->active));
}

/* Number of threads the pool holds, active or parked. */
int
threadpool_capacity(const struct threadpool *tp)
{
	return (tp == NULL ? 1 : tp->n);
}

/* Let the first n threads take part in the runs that follow. */
int
threadpool_set_active(struct threadpool *tp, int n)
{
	if (tp == NULL)
		return (1);
	if (n < 1)
		n = 1;
	if (n > tp->n)
		n = tp->n;
	if (n == atomic_load(&tp->active))
		return (n);
	atomic_store(&tp->active_gen, atomic_load(&tp->gen));
	atomic_store(&tp->active, n);
	atomic_fetch_add(&tp->park, 1);
	futex_wake(&tp->park);
	return (n);
}

/* Pin the thread that runs the pool's jobs to its CPU, once per thread. */
static void
pin_caller(struct threadpool *tp)
{
	char	*cause = NULL;

	if (tp->have_caller && pthread_equal(tp->caller, pthread_self()))
		return;
	tp->caller = pthread_self();
	tp->have_caller = 1;
	if (pin_thread(tp->caller, tp->cpu0, &cause) != 0) {
		log_warnx("thread pool: %s", cause);
		free(cause);
	}
}

/* Run fn on every thread; the caller runs part 0. */
void
threadpool_run(struct threadpool *tp, void (*fn)(void *, int, int), void *arg)
{
	int	i, na;

	if (tp != NULL && tp->cpu0 >= 0)
		pin_caller(tp);
	if (tp == NULL || (na = atomic_load(&tp->active)) == 1) {
		fn(arg, 0, 1);
		return;
	}
	tp->fn = fn;
	tp->arg = arg;
	atomic_store_explicit(&tp->left, na - 1, memory_order_relaxed);
	atomic_store(&tp->entry, (uint64_t)(atomic_load(&tp->gen) + 1) << 32 | ENTRY_ALL);
	/* Sequentially consistent: pairs with the workers' sleepers count. */
	atomic_fetch_add(&tp->gen, 1);
	if (atomic_load(&tp->sleepers) != 0)
		futex_wake(&tp->gen);
	fn(arg, 0, na);
	for (i = 0; i < SPIN_POLLS; i++) {
		if (atomic_load_explicit(&tp->left, memory_order_acquire) == 0)
			return;
		cpu_relax();
	}
	for (;;) {
		uint32_t left = atomic_load_explicit(&tp->left, memory_order_acquire);
		if (left == 0)
			break;
		atomic_store(&tp->waiting, 1);
		if (atomic_load(&tp->left) == left)
			futex_wait(&tp->left, left);
		atomic_store(&tp->waiting, 0);
	}
}

/*
 * Run fn on the caller and on the workers that wake up before the caller
 * finishes its own call; workers that come later skip the run.  fn must
 * take its work from shared state, so that whoever runs does it all.
 */
void
threadpool_run_any(struct threadpool *tp, void (*fn)(void *, int, int), void *arg)
{
	uint64_t	e;
	uint32_t	joined, d;
	int		i, na;

	if (tp != NULL && tp->cpu0 >= 0)
		pin_caller(tp);
	if (tp == NULL || (na = atomic_load(&tp->active)) == 1) {
		fn(arg, 0, 1);
		return;
	}
	tp->fn = fn;
	tp->arg = arg;
	atomic_store(&tp->done, 0);
	atomic_store(&tp->entry, (uint64_t)(atomic_load(&tp->gen) + 1) << 32);
	atomic_fetch_add(&tp->gen, 1);
	if (atomic_load(&tp->sleepers) != 0)
		futex_wake(&tp->gen);
	fn(arg, 0, na);
	e = atomic_fetch_or(&tp->entry, ENTRY_CLOSED);
	joined = (uint32_t)(e & ENTRY_COUNT);
	for (i = 0; i < SPIN_POLLS; i++) {
		if (atomic_load_explicit(&tp->done, memory_order_acquire) == joined)
			return;
		cpu_relax();
	}
	while ((d = atomic_load(&tp->done)) != joined) {
		atomic_store(&tp->waiting, 1);
		if (atomic_load(&tp->done) == d)
			futex_wait(&tp->done, d);
		atomic_store(&tp->waiting, 0);
	}
}

/* The pool's scratch buffer, grown to size. */
void *
threadpool_scratch(struct threadpool *tp, size_t size)
{
	if (size > tp->scratch_size) {
		free(tp->scratch);
		if (posix_memalign(&tp->scratch, 64, size) != 0)
			fatal("scratch buffer of %zu bytes", size);
		tp->scratch_size = size;
	}
	return (tp->scratch);
}
