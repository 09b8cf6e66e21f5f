/* threadpool.h: a fixed set of threads that run one function together. */
#ifndef PHASED_THREADPOOL_H
#define PHASED_THREADPOOL_H

#include <stddef.h>

struct threadpool;

/*
 * Start n_threads - 1 workers; the calling thread is thread 0 of every run.
 * With cpus (n_threads CPU ids) worker i is pinned to cpus[i] and the
 * thread that calls a run to cpus[0] (at its first run, so a pool made on
 * one thread and run on another pins the one that runs it).  NULL and
 * *cause on failure.
 */
struct threadpool	*threadpool_create(int n_threads, const int *cpus, char **cause);
void			 threadpool_destroy(struct threadpool *);
/* Threads that take part in each run now, the caller included. */
int			 threadpool_size(const struct threadpool *);
/* Threads the pool holds, parked ones included. */
int			 threadpool_capacity(const struct threadpool *);
/*
 * Let only threads 0..n-1 take part in the runs that follow (clamped to
 * 1..capacity); the others sleep without polling until they are active
 * again.  Between runs, on the thread that runs them.  Returns the count.
 */
int			 threadpool_set_active(struct threadpool *, int n);

/*
 * Run fn(arg, ith, nth) on every thread and return when all are done.
 * Idle workers spin briefly and then sleep on a futex, so back-to-back runs
 * are cheap and an idle pool costs nothing.  One run at a time.
 */
void	threadpool_run(struct threadpool *, void (*fn)(void *arg, int ith, int nth),
	    void *arg);

/*
 * Run fn on the caller and on whichever workers start before the caller
 * is done with its own call (late ones skip the run): fn must take its work
 * from shared state that any thread may empty (a counter, or runs others
 * may steal from).  A worker the scheduler delays (cores shared with other
 * programs) then never holds the caller up.
 */
void	threadpool_run_any(struct threadpool *, void (*fn)(void *arg, int ith, int nth),
	    void *arg);

/*
 * A 64-byte aligned scratch buffer of at least size bytes owned by the pool
 * (for the caller's thread, between runs); valid until the next call.
 */
void	*threadpool_scratch(struct threadpool *, size_t size);

#endif
