/*
 * emu.cc: a CPU emulation of the CUDA execution model, enough to run
 * phased's kernels unchanged (after launch.py rewrites the <<<>>> launches)
 * and so to test their logic on machines without a GPU.
 *
 * A launch runs its blocks one after the other; the threads of a block are
 * coroutines (stacks of their own, switched by emu_switch) scheduled
 * round robin.  A thread runs until it reaches __syncthreads() or a warp
 * shuffle and waits there until every live thread of its block (or warp)
 * has arrived, as on the hardware.  What is checked beyond the results:
 * a shuffle in a warp where a lane has exited, lanes of a warp at different
 * shuffles, a barrier after a thread of the block exited, a deadlock, and
 * launch limits (1024 threads, grid y/z 65535, 227 KiB of shared memory).
 * Each is fatal.  Device memory is host memory filled with 0xff bytes (NaN
 * floats), so reading what no kernel wrote shows.  Not emulated: timing,
 * memory-model races between unsynchronized threads, and GPU rounding of
 * expf/logf (the host's is used).
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "cuda_runtime.h"
#include "cublas_v2.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define EMU_STACK	(256 * 1024)
#define EMU_MAX_THREADS	1024

emu_uint3	 threadIdx, blockIdx;
dim3		 blockDim, gridDim;
void		*emu_dyn_smem;

/*
 * A coroutine's saved context.  On x86-64 a switch saves the callee-saved
 * registers on the stack it leaves and its stack pointer in sp: a plain
 * call, which the address sanitizer leaves alone (it makes a system call
 * at every longjmp or swapcontext, which made a sanitized run of the
 * engine take hours).  Elsewhere swapcontext does it.
 */
struct emu_ctx {
#if defined(__x86_64__)
	void		*sp;
#else
	ucontext_t	 uc;
#endif
};

#if defined(__x86_64__)
extern "C" void	emu_swap(void **save_sp, void *load_sp);
/* emu_swap: push rbp, rbx, r12-r15, store rsp in *save_sp, switch to
 * load_sp, pop what was pushed there and return on that stack. */
asm(".pushsection .text\n"
    ".globl emu_swap\n"
    ".type emu_swap, @function\n"
    "emu_swap:\n"
    "	pushq %rbp\n	pushq %rbx\n	pushq %r12\n"
    "	pushq %r13\n	pushq %r14\n	pushq %r15\n"
    "	movq %rsp, (%rdi)\n"
    "	movq %rsi, %rsp\n"
    "	popq %r15\n	popq %r14\n	popq %r13\n"
    "	popq %r12\n	popq %rbx\n	popq %rbp\n"
    "	ret\n"
    ".size emu_swap, .-emu_swap\n"
    ".popsection\n");
#endif

/* Save the running context in from and resume to. */
static void
emu_switch(emu_ctx *from, emu_ctx *to)
{
#if defined(__x86_64__)
	emu_swap(&from->sp, to->sp);
#else
	if (swapcontext(&from->uc, &to->uc) != 0)
		abort();
#endif
}

/* Make c start fn, which must never return, on the given stack. */
static void
emu_ctx_init(emu_ctx *c, char *stack, size_t size, void (*fn)(void))
{
#ifdef EMU_ASAN
	/* What a thread that ended there left poisoned. */
	ASAN_UNPOISON_MEMORY_REGION(stack, size);
#endif
#if defined(__x86_64__)
	uintptr_t	 top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
	void		**sp = (void **)top;

	/* fn is entered as if called: rsp + 8 aligned to 16. */
	*--sp = NULL;
	*--sp = (void *)fn;
	for (int r = 0; r < 6; r++)
		*--sp = NULL;
	c->sp = sp;
#else
	if (getcontext(&c->uc) != 0)
		abort();
	c->uc.uc_stack.ss_sp = stack;
	c->uc.uc_stack.ss_size = size;
	c->uc.uc_link = NULL;
	makecontext(&c->uc, fn, 0);
#endif
}

struct emu_thread {
	emu_ctx		 ctx;
	char		*stack;
	bool		 started;
	bool		 done;
	unsigned	 shuffles;	/* shuffles this thread has made */
};

struct emu_warp {
	int		 live;		/* lanes not exited */
	int		 arrived;
	unsigned	 gen;
	unsigned	 shuffle;	/* index of the shuffle being exchanged */
	uint64_t	 vals[2][32];	/* double buffer: see emu_shfl */
};

static std::vector<emu_thread>	 threads(EMU_MAX_THREADS);
static emu_warp			 warps[EMU_MAX_THREADS / 32];
static emu_ctx			 sched_ctx;
static std::function<void()>	*kernel;
static std::vector<char>	 smem;
static int			 cur, n_threads, live, bar_arrived;
static unsigned			 bar_gen;
static bool			 progress;

/* Frees the coroutine stacks at exit (keeps leak checkers quiet). */
static struct emu_stacks_owner {
	~emu_stacks_owner() {
		for (auto &t : threads)
			free(t.stack);
	}
} emu_stacks_owner;

/* Stop on a misuse of the execution model. */
static void
emu_fatal(const char *what)
{
	fprintf(stderr, "emu: block (%u,%u,%u) thread %d: %s\n", blockIdx.x,
	    blockIdx.y, blockIdx.z, cur, what);
	abort();
}

/* Hand control back to the scheduler; returns when resumed. */
static void
emu_yield(void)
{
	emu_switch(&threads[cur].ctx, &sched_ctx);
}

/* The body of every emulated thread. */
static void
emu_thread_main(void)
{
	emu_warp	*w;

	(*kernel)();
	threads[cur].done = true;
	live--;
	progress = true;
	w = &warps[cur / 32];
	w->live--;
	if (w->arrived > 0)
		emu_fatal("lane exited while its warp was in a shuffle");
	if (bar_arrived > 0)
		emu_fatal("thread exited while its block waited at a barrier");
	emu_switch(&threads[cur].ctx, &sched_ctx);
	abort();	/* a thread that is done is never resumed */
}

/* Wait until every live thread of the block arrives. */
void
__syncthreads(void)
{
	unsigned	gen = bar_gen;

	if (live < n_threads)
		emu_fatal("__syncthreads after a thread of the block exited");
	progress = true;
	if (++bar_arrived == live) {
		bar_arrived = 0;
		bar_gen++;
		return;
	}
	while (bar_gen == gen)
		emu_yield();
}

/*
 * Exchange a value across the warp: lane src (or lane ^ src) is read.
 * Shuffle k writes buffer k % 2; no lane can write that buffer again
 * (shuffle k + 2) before every lane has passed shuffle k + 1, that is,
 * before all have read shuffle k's values, so one barrier suffices.
 */
uint64_t
emu_shfl(uint64_t v, int src, int xor_mode)
{
	emu_warp	*w = &warps[cur / 32];
	unsigned	 k = threads[cur].shuffles++, gen = w->gen;
	int		 lane = cur % 32;

	if (w->live < 32)
		emu_fatal("shuffle in a warp with exited lanes");
	if (w->arrived == 0)
		w->shuffle = k;
	else if (w->shuffle != k)
		emu_fatal("lanes of a warp at different shuffles");
	w->vals[k & 1][lane] = v;
	progress = true;
	if (++w->arrived == w->live) {
		w->arrived = 0;
		w->gen++;
	} else {
		while (w->gen == gen)
			emu_yield();
	}
	return w->vals[k & 1][(xor_mode ? lane ^ src : src) & 31];
}

/* Point threadIdx at thread i of the block. */
static void
emu_set_thread(int i)
{
	cur = i;
	threadIdx.x = i % blockDim.x;
	threadIdx.y = (i / blockDim.x) % blockDim.y;
	threadIdx.z = i / (blockDim.x * blockDim.y);
}

/* Run one block to completion. */
static void
emu_run_block(void)
{
	int	i, stalls = 0;

	memset(smem.data(), 0xff, smem.size());
	for (i = 0; i < n_threads; i++) {
		if (threads[i].stack == NULL &&
		    (threads[i].stack = (char *)malloc(EMU_STACK)) == NULL)
			emu_fatal("out of memory");
		threads[i].started = threads[i].done = false;
		threads[i].shuffles = 0;
	}
	for (i = 0; i < (n_threads + 31) / 32; i++) {
		warps[i].live = n_threads - 32 * i < 32 ? n_threads - 32 * i : 32;
		warps[i].arrived = 0;
		warps[i].gen = 0;
	}
	live = n_threads;
	bar_arrived = 0;
	bar_gen = 0;
	while (live > 0) {
		progress = false;
		for (i = 0; i < n_threads; i++) {
			if (threads[i].done)
				continue;
			emu_set_thread(i);
			if (!threads[i].started) {
				threads[i].started = true;
				emu_ctx_init(&threads[i].ctx, threads[i].stack,
				    EMU_STACK, emu_thread_main);
			}
			emu_switch(&sched_ctx, &threads[i].ctx);
		}
		if (!progress && ++stalls > 2)
			emu_fatal("deadlock: no thread can proceed");
	}
}

/*
 * Streams.  Work is queued on a stream in order; each item is a step that
 * says, each time it is run, whether it is done or still waits (for
 * another stream's work, or a collective for its partners), and a stream
 * moves on only once its head is done.  Work queued on a stream with
 * nothing pending runs at once on the calling thread (launches are
 * synchronous here); work behind pending work waits, and emu_progress()
 * moves every stream on as far as it can, so the streams of several
 * emulated devices advance side by side as on the hardware.  Waiting on
 * work that can never finish is fatal (a GPU would hang).  One host thread
 * drives the streams; the legacy stream (NULL) never holds pending work.
 *
 * Deferred streams: a stream created while emu_streams_defer() is on holds
 * its work, as a busy GPU would, until something waits for it: the host
 * (a stream, event or device synchronization), another stream at a
 * cudaStreamWaitEvent on one of its events when that wait is reached, or a
 * collective that has started on another stream and waits for its
 * partners (the held stream then runs up to its next collective of the
 * same communicator).  So work that has not finished on a
 * real GPU shows as not done (cudaEventQuery says so), and code that
 * forgets to order its streams reads what was not written yet.
 *
 * Events: a record marks how much of its stream's queue came before it;
 * the event is done once the stream has run that far.  An event never
 * recorded, or recorded on the legacy stream (whose work ran at its call),
 * is done.  As in CUDA an event is recorded only on a stream of the device
 * current when it was created.  cudaStreamWaitEvent queues a step that
 * waits for that point (on any device).
 *
 * Capture: while a stream is captured, launches, cuBLAS products, copies
 * and NCCL calls on it are recorded into its graph instead of run (as
 * CUDA does, including kernel arguments, stored at the launch), several
 * streams may be captured at once, each into its own graph, and a graph
 * launch queues one run of every recorded node on the stream it is
 * launched on, behind what the stream already holds.  In the thread-local
 * and global modes a call CUDA deems unsafe during a capture (allocating,
 * freeing, a synchronous copy, synchronizing, work on the legacy stream)
 * fails and invalidates the calling thread's captures, so their end
 * reports it.  Not emulated: events recorded or waited for on a captured
 * stream (the fork and join of captures across streams); both fail with
 * cudaErrorStreamCaptureUnsupported and invalidate the capture.
 */
enum emu_state {
	EMU_DONE,		/* the step has finished */
	EMU_WAITING,		/* it waits for another stream's work */
	EMU_PEERS		/* a started collective waits for partners */
};
typedef std::function<emu_state()>	emu_step;
/*
 * An item of a stream's queue: its step and, for a collective, the
 * communicator it meets its partners in and whether it has started.
 */
struct emu_work {
	emu_step		 step;
	const void		*key;
	std::shared_ptr<bool>	 started;

	emu_work(emu_step st, const void *k = NULL,
	    std::shared_ptr<bool> sd = nullptr) : step(st), key(k),
	    started(sd) {}
};
typedef std::function<emu_work()> emu_node;	/* one run of a graph node */

struct CUgraph_st {
	std::vector<emu_node>	ops;
};
struct CUgraphExec_st {
	std::vector<emu_node>	ops;
};
/*
 * How far a stream has got, shared with the events recorded on it (they
 * may outlive it): steps queued and done, and for a deferred stream how
 * many of them it may run so far.
 */
struct emu_order {
	uint64_t	 queued, done, release;
	bool		 deferred;
};
struct CUstream_st {
	std::deque<emu_work>		 q;
	std::shared_ptr<emu_order>	 o;
	CUgraph_st			*capture;
	bool				 strict;	/* unsafe calls invalidate it */
	bool				 invalid;
	pthread_t			 owner;		/* the capturing thread */
	int				 dev;
};
struct CUevent_st {
	std::shared_ptr<emu_order>	 o;	/* NULL: done */
	uint64_t			 seq;	/* done when o->done reaches it */
	int				 dev;	/* current at its creation */
};
static std::vector<CUstream_st *>	 emu_streams;
static __thread int			 thread_captures;
static __thread cudaError_t		 last_error;
static __thread int			 emu_device;	/* current, per thread */
static int				 emu_spoil;	/* captures to spoil */
static bool				 defer_new;	/* emu_streams_defer */
static bool				 released;	/* a release rose */

/* Stop on a misuse of streams. */
static void
emu_stream_fatal(const char *what)
{
	fprintf(stderr, "emu: %s\n", what);
	abort();
}

/* Let a stream run its first upto steps (deferred streams hold the rest). */
static void
emu_release(emu_order *o, uint64_t upto)
{
	if (o->release < upto) {
		o->release = upto;
		released = true;
	}
}

/* Whether a stream may run its next step now. */
static bool
emu_may_run(const CUstream_st *s)
{
	return !s->o->deferred || s->o->done < s->o->release;
}

/*
 * Let every deferred stream whose held work has a collective of one of
 * keys not started yet run up to the first such collective: a partner
 * of a started one that waits.
 */
static void
emu_release_partners(const std::vector<const void *> &keys)
{
	for (auto *s : emu_streams) {
		emu_order	*o = s->o.get();

		if (!o->deferred)
			continue;
		for (size_t i = o->release > o->done ? o->release - o->done :
		    0; i < s->q.size(); i++) {
			const emu_work &w = s->q[i];

			if (w.key != NULL && !*w.started &&
			    std::find(keys.begin(), keys.end(), w.key) !=
			    keys.end()) {
				emu_release(o, o->done + i + 1);
				break;
			}
		}
	}
}

/*
 * Move every stream's queue on until none can move.  When nothing moves
 * but started collectives wait for their partners, the deferred streams
 * holding those partners run up to them (see the top).
 */
static void
emu_progress(void)
{
	std::vector<const void *>	peers;
	bool				moved;
	int				st;	/* an enum emu_state */

	do {
		moved = released = false;
		peers.clear();
		for (size_t i = 0; i < emu_streams.size(); i++) {
			CUstream_st *s = emu_streams[i];
			while (!s->q.empty() && emu_may_run(s)) {
				if ((st = s->q.front().step()) != EMU_DONE) {
					if (st == EMU_PEERS)
						peers.push_back(
						    s->q.front().key);
					break;
				}
				s->q.pop_front();
				s->o->done++;
				moved = true;
			}
		}
		if (!moved && !peers.empty())
			emu_release_partners(peers);
		moved |= released;
	} while (moved);
}

/* Queue work on a stream (running it now if nothing is pending). */
static void
emu_submit(cudaStream_t s, emu_work w)
{
	if (s == NULL) {
		if (w.step() != EMU_DONE)
			emu_stream_fatal("work on the legacy stream waits for "
			    "work that can never run");
		return;
	}
	s->o->queued++;
	if (s->q.empty() && emu_may_run(s) && w.step() == EMU_DONE) {
		s->o->done++;
		return;
	}
	s->q.push_back(w);
	emu_progress();
}

/* Let the host wait until a stream has run upto steps. */
static void
emu_wait(emu_order *o, uint64_t upto, const char *what)
{
	emu_release(o, upto);
	emu_progress();
	if (o->done < upto)
		emu_stream_fatal(what);
}

/*
 * Whether the calling thread has a strict capture on; if so, invalidate
 * them all, as CUDA does on an unsafe call.
 */
static bool
emu_unsafe_call(void)
{
	bool	any = false;

	if (thread_captures == 0)
		return false;
	for (auto *s : emu_streams) {
		if (s->capture != NULL && s->strict &&
		    pthread_equal(s->owner, pthread_self())) {
			s->invalid = true;
			any = true;
		}
	}
	return any;
}

/* Record a node into s's capture, or queue one run of it now. */
static void
emu_queue(cudaStream_t s, emu_node n)
{
	if (s != NULL && s->capture != NULL) {
		s->capture->ops.push_back(n);
		return;
	}
	if (s == NULL && emu_unsafe_call()) {
		/* The legacy stream would join the capture: refused. */
		last_error = cudaErrorStreamCaptureImplicit;
		return;
	}
	emu_submit(s, n());
}

/* Whether a capture is on in the calling thread. */
extern "C" int
emu_capturing(void)
{
	return thread_captures > 0;
}

static void emu_run_launch(dim3, dim3, size_t, std::function<void()>);

/* Run a kernel launch in stream order, or record it in the capture. */
void
emu_launch(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t s,
    std::function<void()> fn)
{
	emu_queue(s, [=]() -> emu_step {
		return [=]() {
			emu_run_launch(grid, block, smem_bytes, fn);
			return EMU_DONE;
		};
	});
}

/* Run a kernel launch now. */
static void
emu_run_launch(dim3 grid, dim3 block, size_t smem_bytes,
    std::function<void()> fn)
{
	unsigned	x, y, z;

	n_threads = (int)(block.x * block.y * block.z);
	if (n_threads < 1 || n_threads > EMU_MAX_THREADS || grid.x < 1 ||
	    grid.y < 1 || grid.y > 65535 || grid.z < 1 || grid.z > 65535 ||
	    smem_bytes > 227 * 1024)
		emu_fatal("launch configuration out of limits");
	gridDim = grid;
	blockDim = block;
	kernel = &fn;
	smem.assign(smem_bytes + 16, 0);
	emu_dyn_smem = smem.data();
	for (z = 0; z < grid.z; z++)
		for (y = 0; y < grid.y; y++)
			for (x = 0; x < grid.x; x++) {
				blockIdx.x = x;
				blockIdx.y = y;
				blockIdx.z = z;
				emu_run_block();
			}
}

extern "C" {

/* A stream of the current device; deferred while emu_streams_defer is on. */
cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int)
{
	*s = new CUstream_st();
	(*s)->o = std::make_shared<emu_order>();
	(*s)->o->deferred = defer_new;
	(*s)->capture = NULL;
	(*s)->dev = emu_device;
	emu_streams.push_back(*s);
	return cudaSuccess;
}

/* Free a stream once its work (held work too) is done. */
cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
	if (s == NULL)
		return cudaErrorInvalidValue;
	if (s->capture != NULL) {
		thread_captures--;
		delete s->capture;
		s->capture = NULL;
	}
	emu_wait(s->o.get(), s->o->queued, "stream destroyed with work that "
	    "can never run");
	for (size_t i = 0; i < emu_streams.size(); i++)
		if (emu_streams[i] == s) {
			emu_streams.erase(emu_streams.begin() + i);
			break;
		}
	delete s;
	return cudaSuccess;
}

/* Start recording a stream's work into a graph of its own. */
cudaError_t
cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	if (s == NULL)
		return cudaErrorStreamCaptureUnsupported;
	if (s->capture != NULL)
		return cudaErrorIllegalState;
	s->capture = new CUgraph_st;
	s->strict = mode != cudaStreamCaptureModeRelaxed;
	s->invalid = emu_spoil > 0;
	if (emu_spoil > 0)
		emu_spoil--;
	s->owner = pthread_self();
	thread_captures++;
	return cudaSuccess;
}

/* Stop recording: the graph holds what was queued, unless invalidated. */
cudaError_t
cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	*g = NULL;
	if (s == NULL || s->capture == NULL)
		return cudaErrorIllegalState;
	thread_captures--;
	if (s->invalid) {
		delete s->capture;
		s->capture = NULL;
		return cudaErrorStreamCaptureInvalidated;
	}
	*g = s->capture;
	s->capture = NULL;
	return cudaSuccess;
}

/*
 * Make the next capture begun end invalidated, as an unsafe call would,
 * so tests can see what a failed capture does.
 */
void
emu_spoil_next_capture(void)
{
	emu_spoil++;
}

/* Whether a stream is being captured (for the emulation's NCCL). */
int
emu_stream_capturing(cudaStream_t s)
{
	return s != NULL && s->capture != NULL;
}

/* Whether streams made from now on hold their work (see Streams above). */
void
emu_streams_defer(int on)
{
	defer_new = on != 0;
}

/*
 * Work of another part of the emulation (its NCCL) on a stream, recorded
 * if the stream is captured: each run calls start(arg) once, when the
 * stream reaches it, then done() on what it returned until that says the
 * work is finished (until then the stream waits for its partners, the
 * work of the same key, its communicator, on other streams).  arg belongs
 * to the stream's work from here on; free_arg frees it when the last
 * graph or queue holding it goes.
 */
cudaError_t
emu_stream_work(cudaStream_t s, const void *key, void *(*start)(void *),
    int (*done)(void *), void *arg, void (*free_arg)(void *))
{
	std::shared_ptr<void>	a(arg, free_arg);

	emu_queue(s, [=]() -> emu_work {
		auto state = std::make_shared<void *>(nullptr);
		auto started = std::make_shared<bool>(false);
		return emu_work([=]() {
			if (!*started) {
				*state = start(a.get());
				*started = true;
			}
			return done(*state) != 0 ? EMU_DONE : EMU_PEERS;
		}, key, started);
	});
	return cudaSuccess;
}

/* An executable copy of a graph. */
cudaError_t
cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long)
{
	if (g == NULL)
		return cudaErrorInvalidValue;
	*x = new CUgraphExec_st;
	(*x)->ops = g->ops;
	return cudaSuccess;
}

/* Queue one run of every node of a graph on a stream, in order. */
cudaError_t
cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
	if (x == NULL || (s != NULL && s->capture != NULL))
		return cudaErrorInvalidValue;
	if (s == NULL && emu_unsafe_call())
		return cudaErrorStreamCaptureImplicit;
	for (auto &n : x->ops) {
		if (s == NULL)
			emu_submit(s, n());
		else {
			s->q.push_back(n());
			s->o->queued++;
		}
	}
	emu_progress();
	return cudaSuccess;
}

/* Free an executable graph. */
cudaError_t
cudaGraphExecDestroy(cudaGraphExec_t x)
{
	delete x;
	return cudaSuccess;
}

/* Free a graph. */
cudaError_t
cudaGraphDestroy(cudaGraph_t g)
{
	delete g;
	return cudaSuccess;
}

/* Device memory is host memory, filled with 0xff (NaN) bytes. */
cudaError_t
cudaMalloc(void **p, size_t n)
{
	if (emu_unsafe_call())
		return cudaErrorStreamCaptureUnsupported;
	n = (n + 255) / 256 * 256;
	if ((*p = aligned_alloc(256, n > 0 ? n : 256)) == NULL)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xff, n);
	return cudaSuccess;
}

/*
 * Free emulated device memory, filled with 0xff first, so work that still
 * reads it (a graph captured before its buffers moved) sees NaN.
 */
cudaError_t
cudaFree(void *p)
{
	if (emu_unsafe_call())
		return cudaErrorStreamCaptureUnsupported;
	if (p != NULL)
		memset(p, 0xff, malloc_usable_size(p));
	free(p);
	return cudaSuccess;
}

/* Every copy is a host copy; a synchronous one waits for nothing. */
cudaError_t
cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind)
{
	if (emu_unsafe_call())
		return cudaErrorStreamCaptureImplicit;
	memcpy(d, s, n);
	return cudaSuccess;
}

/* A copy in stream order (recorded when the stream is captured). */
cudaError_t
cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind,
    cudaStream_t st)
{
	last_error = cudaSuccess;
	emu_queue(st, [=]() -> emu_step {
		return [=]() {
			memmove(d, s, n);
			return EMU_DONE;
		};
	});
	return last_error;
}

/* A fill in stream order. */
cudaError_t
cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
	last_error = cudaSuccess;
	emu_queue(st, [=]() -> emu_step {
		return [=]() {
			memset(d, v, n);
			return EMU_DONE;
		};
	});
	return last_error;
}

/* A copy between devices, which are all host memory here. */
cudaError_t
cudaMemcpyPeerAsync(void *d, int, const void *s, int, size_t n,
    cudaStream_t st)
{
	return cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, st);
}

/* Wait for the work of every stream of the current device; unsafe while capturing. */
cudaError_t
cudaDeviceSynchronize(void)
{
	if (emu_unsafe_call())
		return cudaErrorStreamCaptureUnsupported;
	for (auto *s : emu_streams)
		if (s->dev == emu_device)
			emu_release(s->o.get(), s->o->queued);
	emu_progress();
	for (auto *s : emu_streams)
		if (s->dev == emu_device && !s->q.empty())
			emu_stream_fatal("device synchronize waits for work "
			    "that can never run (a collective whose partners "
			    "were never launched)");
	return cudaSuccess;
}

/* Wait for a stream's work; a stream being captured cannot be waited on. */
cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
	if (s != NULL && s->capture != NULL) {
		s->invalid = true;
		return cudaErrorStreamCaptureUnsupported;
	}
	if (s == NULL && emu_unsafe_call())
		return cudaErrorStreamCaptureImplicit;
	if (s != NULL)
		emu_wait(s->o.get(), s->o->queued, "stream synchronize waits "
		    "for work that can never run (a collective whose "
		    "partners were never launched)");
	return cudaSuccess;
}

/* The last launch error of the calling thread, cleared. */
cudaError_t
cudaGetLastError(void)
{
	cudaError_t	e = last_error;

	last_error = cudaSuccess;
	return e;
}

/* An event that has not been recorded yet (it counts as done). */
cudaError_t
cudaEventCreate(cudaEvent_t *e)
{
	*e = new CUevent_st();
	(*e)->seq = 0;
	(*e)->dev = emu_device;
	return cudaSuccess;
}

/* Flags change nothing in the emulation (it has no timing). */
cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int)
{
	return cudaEventCreate(e);
}

/* Free an event; waits already queued on it keep what they need. */
cudaError_t
cudaEventDestroy(cudaEvent_t e)
{
	delete e;
	return cudaSuccess;
}

/* Mark the point of s's queue reached so far; both of one device. */
cudaError_t
cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (e == NULL)
		return cudaErrorInvalidValue;
	if ((s != NULL ? s->dev : emu_device) != e->dev)
		return cudaErrorInvalidResourceHandle;
	if (s != NULL && s->capture != NULL) {
		s->invalid = true;	/* see Streams: not emulated */
		return cudaErrorStreamCaptureUnsupported;
	}
	if (s == NULL) {
		if (emu_unsafe_call())
			return cudaErrorStreamCaptureImplicit;
		e->o = NULL;	/* the legacy stream's work has run */
		return cudaSuccess;
	}
	e->o = s->o;
	e->seq = s->o->queued;
	return cudaSuccess;
}

/* Whether the work before the event's record has run. */
cudaError_t
cudaEventQuery(cudaEvent_t e)
{
	if (e == NULL)
		return cudaErrorInvalidValue;
	emu_progress();
	return e->o == NULL || e->o->done >= e->seq ? cudaSuccess :
	    cudaErrorNotReady;
}

/* Wait for the work before the event's record. */
cudaError_t
cudaEventSynchronize(cudaEvent_t e)
{
	if (e == NULL)
		return cudaErrorInvalidValue;
	if (e->o != NULL)
		emu_wait(e->o.get(), e->seq, "event synchronize waits for "
		    "work that can never run");
	return cudaSuccess;
}

/* Make s's later work wait for the event's record as it is now. */
cudaError_t
cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int)
{
	std::shared_ptr<emu_order>	o;
	uint64_t			seq;

	if (e == NULL)
		return cudaErrorInvalidValue;
	if (s != NULL && s->capture != NULL) {
		s->invalid = true;	/* see Streams: not emulated */
		return cudaErrorStreamCaptureUnsupported;
	}
	if ((o = e->o) == NULL || o->done >= e->seq)
		return cudaSuccess;
	seq = e->seq;
	if (s == NULL) {
		if (emu_unsafe_call())
			return cudaErrorStreamCaptureImplicit;
		emu_wait(o.get(), seq, "the legacy stream waits for work "
		    "that can never run");
		return cudaSuccess;
	}
	emu_submit(s, emu_step([o, seq]() {
		emu_release(o.get(), seq);
		return o->done >= seq ? EMU_DONE : EMU_WAITING;
	}));
	return cudaSuccess;
}

/* No timing in the emulation. */
cudaError_t
cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t)
{
	*ms = 0.0f;
	return cudaSuccess;
}

/*
 * EMU_DEVICES emulated devices (so tensor-parallel groups can be formed),
 * all sharing host memory; each has an H200-like SM count (it steers
 * context splits).  The current device is per host thread, as in CUDA.
 */
#define EMU_DEVICES	8

cudaError_t
cudaGetDeviceCount(int *n)
{
	*n = EMU_DEVICES;
	return cudaSuccess;
}

/* Make a device current for the calling thread. */
cudaError_t
cudaSetDevice(int dev)
{
	if (dev < 0 || dev >= EMU_DEVICES)
		return cudaErrorInvalidValue;
	emu_device = dev;
	return cudaSuccess;
}

/* The calling thread's current device. */
cudaError_t
cudaGetDevice(int *d)
{
	*d = emu_device;
	return cudaSuccess;
}

cudaError_t
cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr, int)
{
	*v = 132;
	return cudaSuccess;
}

cudaError_t
cudaGetDeviceProperties(struct cudaDeviceProp *p, int)
{
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "CPU emulation");
	p->multiProcessorCount = 132;
	p->major = 9;
	return cudaSuccess;
}

/* Name an emulated error. */
const char *
cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "no error";
	case cudaErrorNotReady:
		return "device not ready (emulated)";
	case cudaErrorInvalidResourceHandle:
		return "invalid resource handle (emulated)";
	case cudaErrorStreamCaptureUnsupported:
		return "operation not permitted when stream is capturing "
		    "(emulated)";
	case cudaErrorStreamCaptureInvalidated:
		return "operation failed due to a previous error during "
		    "capture (emulated)";
	case cudaErrorStreamCaptureImplicit:
		return "operation would make the legacy stream depend on a "
		    "capturing blocking stream (emulated)";
	default:
		return "emulated error";
	}
}

}

/* A cuBLAS handle: the stream its products are queued on. */
struct cublasContext {
	cudaStream_t	stream;
};

/* A handle on the legacy stream. */
cublasStatus_t
cublasCreate(cublasHandle_t *h)
{
	*h = new cublasContext();
	(*h)->stream = NULL;
	return CUBLAS_STATUS_SUCCESS;
}

/* Free the handle. */
cublasStatus_t
cublasDestroy(cublasHandle_t h)
{
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

/* Queue the handle's products on a stream. */
cublasStatus_t
cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}

/* Name an emulated cuBLAS error. */
const char *
cublasGetStatusString(cublasStatus_t)
{
	return "emulated cuBLAS error";
}

/* Element i of a matrix of a cuBLAS data type. */
static float
emu_elem(const void *p, cudaDataType_t t, size_t i)
{
	if (t == CUDA_R_32F)
		return ((const float *)p)[i];
	if (t == CUDA_R_16F)
		return ref_f16_to_f32(((const uint16_t *)p)[i]);
	return ref_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* C = alpha op(A) op(B) + beta C, column-major, as cuBLAS defines it. */
static cublasStatus_t
emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    float alpha, const void *A, cudaDataType_t at, int lda, const void *B,
    cudaDataType_t bt, int ldb, float beta, float *C, int ldc)
{
	double	s;
	float	a, b;
	int	i, j, l;

	if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 ||
	    ldb < 1 || ldc < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	for (j = 0; j < n; j++)
		for (i = 0; i < m; i++) {
			s = 0;
			for (l = 0; l < k; l++) {
				a = ta == CUBLAS_OP_N ?
				    emu_elem(A, at, i + (size_t)l * lda) :
				    emu_elem(A, at, l + (size_t)i * lda);
				b = tb == CUBLAS_OP_N ?
				    emu_elem(B, bt, l + (size_t)j * ldb) :
				    emu_elem(B, bt, j + (size_t)l * ldb);
				s += (double)a * b;
			}
			s *= alpha;
			if (beta != 0.0f)
				s += (double)beta * C[i + (size_t)j * ldc];
			C[i + (size_t)j * ldc] = (float)s;
		}
	return CUBLAS_STATUS_SUCCESS;
}

/*
 * Queue a product on the handle's stream, or record it in the stream's
 * capture (its scalars by value); its arguments are checked at the call.
 */
static cublasStatus_t
emu_gemm_queue(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
    int m, int n, int k, float alpha, const void *A, cudaDataType_t at,
    int lda, const void *B, cudaDataType_t bt, int ldb, float beta, float *C,
    int ldc)
{
	if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 ||
	    ldb < 1 || ldc < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	last_error = cudaSuccess;
	emu_queue(h->stream, [=]() -> emu_step {
		return [=]() {
			emu_gemm(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb,
			    beta, C, ldc);
			return EMU_DONE;
		};
	});
	return last_error == cudaSuccess ? CUBLAS_STATUS_SUCCESS :
	    CUBLAS_STATUS_INVALID_VALUE;
}

/* SGEMM through the reference product. */
cublasStatus_t
cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
    int m, int n, int k, const float *alpha, const float *A, int lda,
    const float *B, int ldb, const float *beta, float *C, int ldc)
{
	return emu_gemm_queue(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B,
	    CUDA_R_32F, ldb, *beta, C, ldc);
}

/* GemmEx through the reference product, for the type combinations phased uses. */
cublasStatus_t
cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType_t at,
    int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
    void *C, cudaDataType_t ct, int ldc, cublasComputeType_t,
    cublasGemmAlgo_t)
{
	/* The combinations phased uses: F16xF16 or BF16xBF16 into F32. */
	if (ct != CUDA_R_32F || at != bt || at == CUDA_R_32F)
		return CUBLAS_STATUS_INVALID_VALUE;
	return emu_gemm_queue(h, ta, tb, m, n, k, *(const float *)alpha, A, at,
	    lda, B, bt, ldb, *(const float *)beta, (float *)C, ldc);
}
