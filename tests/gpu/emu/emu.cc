/*
 * emu.cc: a CPU emulation of the CUDA execution model, enough to run
 * phased's kernels unchanged (after launch.py rewrites the <<<>>> launches)
 * and so to test their logic on machines without a GPU.
 *
 * A launch runs its blocks one after the other; the threads of a block are
 * coroutines (ucontext stacks, switched with _setjmp/_longjmp) scheduled
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
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <deque>
#include <memory>
#include <vector>

#include "cuda_runtime.h"
#include "cublas_v2.h"

#define EMU_STACK	(256 * 1024)
#define EMU_MAX_THREADS	1024

emu_uint3	 threadIdx, blockIdx;
dim3		 blockDim, gridDim;
void		*emu_dyn_smem;

struct emu_thread {
	ucontext_t	 uc;
	jmp_buf		 jb;
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
static jmp_buf			 sched_jb;
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
	if (_setjmp(threads[cur].jb) == 0)
		_longjmp(sched_jb, 1);
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
	_longjmp(sched_jb, 1);
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
			if (_setjmp(sched_jb) != 0)
				continue;
			if (threads[i].started)
				_longjmp(threads[i].jb, 1);
			threads[i].started = true;
			getcontext(&threads[i].uc);
			threads[i].uc.uc_stack.ss_sp = threads[i].stack;
			threads[i].uc.uc_stack.ss_size = EMU_STACK;
			threads[i].uc.uc_link = NULL;
			makecontext(&threads[i].uc, emu_thread_main, 0);
			setcontext(&threads[i].uc);
		}
		if (!progress && ++stalls > 2)
			emu_fatal("deadlock: no thread can proceed");
	}
}

/*
 * Streams.  Work queued on a stream with nothing pending runs at once on
 * the calling thread (launches are synchronous here).  Work that has to
 * wait (a replayed collective whose partners' graphs have not been launched
 * yet) stays at the head of its stream, later work on that stream queues
 * behind it, and emu_progress() moves every stream on as far as it can, so
 * the streams of several emulated devices advance side by side as on the
 * hardware.  Waiting on a stream whose work can never finish is fatal
 * (a GPU would hang).  One host thread drives the streams; the legacy
 * stream (NULL) never holds pending work.
 *
 * Capture: while a stream is captured, launches, cuBLAS products, copies
 * and NCCL calls on it are recorded into its graph instead of run (as
 * CUDA does, including kernel arguments, stored at the launch), several
 * streams may be captured at once, each into its own graph, and a graph
 * launch queues one run of every recorded node on the stream it is
 * launched on.  In the thread-local and global modes a call CUDA deems
 * unsafe during a capture (allocating, freeing, a synchronous copy,
 * synchronizing, work on the legacy stream) fails and invalidates the
 * calling thread's captures, so their end reports it.
 */
typedef std::function<bool()>	emu_step;	/* true once done */
typedef std::function<emu_step()> emu_node;	/* one run of a graph node */

struct CUgraph_st {
	std::vector<emu_node>	ops;
};
struct CUgraphExec_st {
	std::vector<emu_node>	ops;
};
struct CUstream_st {
	std::deque<emu_step>	 q;
	CUgraph_st		*capture;
	bool			 strict;	/* unsafe calls invalidate it */
	bool			 invalid;
	pthread_t		 owner;		/* the capturing thread */
	int			 dev;
};
static std::vector<CUstream_st *>	 emu_streams;
static __thread int			 thread_captures;
static __thread cudaError_t		 last_error;
static __thread int			 emu_device;	/* current, per thread */
static int				 emu_spoil;	/* captures to spoil */

/* Stop on a misuse of streams. */
static void
emu_stream_fatal(const char *what)
{
	fprintf(stderr, "emu: %s\n", what);
	abort();
}

/* Move every stream's queue on until none can move. */
static void
emu_progress(void)
{
	bool	moved;

	do {
		moved = false;
		for (size_t i = 0; i < emu_streams.size(); i++) {
			CUstream_st *s = emu_streams[i];
			while (!s->q.empty() && s->q.front()()) {
				s->q.pop_front();
				moved = true;
			}
		}
	} while (moved);
}

/* Queue a step on a stream (running it now if nothing is pending). */
static void
emu_submit(cudaStream_t s, emu_step st)
{
	if (s == NULL || s->q.empty()) {
		if (st())
			return;
		if (s == NULL)
			emu_stream_fatal("work on the legacy stream waits for "
			    "work that can never run");
	}
	s->q.push_back(st);
	emu_progress();
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
			return true;
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

/* A stream of the current device. */
cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int)
{
	*s = new CUstream_st();
	(*s)->capture = NULL;
	(*s)->dev = emu_device;
	emu_streams.push_back(*s);
	return cudaSuccess;
}

/* Free a stream once its work is done. */
cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
	if (s == NULL)
		return cudaErrorInvalidValue;
	emu_progress();
	if (!s->q.empty())
		emu_stream_fatal("stream destroyed with work that can never "
		    "run");
	if (s->capture != NULL) {
		thread_captures--;
		delete s->capture;
	}
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

/* Whether a stream has no pending work once everything has moved on. */
int
emu_stream_idle(cudaStream_t s)
{
	emu_progress();
	return s == NULL || s->q.empty();
}

/*
 * Work of another part of the emulation (its NCCL) on a stream, recorded
 * if the stream is captured: each run calls start(arg) once, then done()
 * on what it returned until that says the work is finished.  arg belongs
 * to the stream's work from here on; free_arg frees it when the last
 * graph or queue holding it goes.
 */
cudaError_t
emu_stream_work(cudaStream_t s, void *(*start)(void *), int (*done)(void *),
    void *arg, void (*free_arg)(void *))
{
	std::shared_ptr<void>	a(arg, free_arg);

	emu_queue(s, [=]() -> emu_step {
		auto state = std::make_shared<void *>(nullptr);
		auto started = std::make_shared<bool>(false);
		return [=]() {
			if (!*started) {
				*state = start(a.get());
				*started = true;
			}
			return done(*state) != 0;
		};
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
		else
			s->q.push_back(n());
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
			return true;
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
			return true;
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

/* Wait for every stream's work; unsafe while capturing. */
cudaError_t
cudaDeviceSynchronize(void)
{
	if (emu_unsafe_call())
		return cudaErrorStreamCaptureUnsupported;
	emu_progress();
	for (auto *s : emu_streams)
		if (!s->q.empty())
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
	emu_progress();
	if (s != NULL && !s->q.empty())
		emu_stream_fatal("stream synchronize waits for work that can "
		    "never run (a collective whose partners were never "
		    "launched)");
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

cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = NULL; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }

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
			return true;
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
