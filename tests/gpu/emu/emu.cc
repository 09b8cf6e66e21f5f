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
 *
 * Streams run their work when it is queued, unless they were created while
 * emu_streams_defer() was on: such a stream holds its work (launches,
 * products, copies, NCCL groups, waits) until the host waits for it (a
 * stream, event or device synchronization, or another stream's
 * cudaStreamWaitEvent on one of its events), so the work of a real GPU that
 * has not finished yet shows as not done (cudaEventQuery says so) and code
 * that forgets to order its streams reads what was not written yet.
 */
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
 * Stream capture: while it is on, launches and cuBLAS products are
 * recorded into the graph being built instead of run; a graph launch runs
 * them in order.  One capture at a time, as the backend uses them.
 */
struct CUgraph_st {
	std::vector<std::function<void()>>	ops;
};
struct CUgraphExec_st {
	std::vector<std::function<void()>>	ops;
};
static CUgraph_st	*capture;

/* Whether a capture is on. */
extern "C" int
emu_capturing(void)
{
	return capture != NULL;
}

static void emu_run_launch(dim3, dim3, size_t, std::function<void()>);

/*
 * A stream: the work queued and not run yet (only a deferred stream keeps
 * any), and counts of the operations queued and run, which events name.
 */
struct CUstream_st {
	std::deque<std::function<void()>>	 q;
	bool					 deferred;
	uint64_t				 queued, done;
};
struct CUevent_st {
	CUstream_st	*s;		/* NULL: never recorded */
	uint64_t	 seq;		/* done when s->done reaches it */
};
static std::vector<CUstream_st *>	 streams;
static bool				 defer_new;

/* Run s's work until op number upto has run. */
static void
emu_drain(CUstream_st *s, uint64_t upto)
{
	while (s->done < upto) {
		std::function<void()> op = std::move(s->q.front());

		s->q.pop_front();
		op();
		s->done++;
	}
}

/* Queue op on s (run now unless s is deferred). */
static void
emu_enqueue(cudaStream_t s, std::function<void()> op)
{
	if (s == NULL || !s->deferred) {
		op();
		if (s != NULL)
			s->queued++, s->done++;
		return;
	}
	s->q.push_back(std::move(op));
	s->queued++;
}

/* Run a kernel launch on its stream, or record it in the capture. */
void
emu_launch(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t s,
    std::function<void()> fn)
{
	if (capture != NULL) {
		capture->ops.push_back([=]() {
			emu_run_launch(grid, block, smem_bytes, fn);
		});
		return;
	}
	emu_enqueue(s, [=]() { emu_run_launch(grid, block, smem_bytes, fn); });
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

/* Start recording a stream's work. */
cudaError_t
cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode)
{
	if (capture != NULL)
		return cudaErrorInvalidValue;
	capture = new CUgraph_st;
	return cudaSuccess;
}

/* Stop recording: the graph holds what was queued. */
cudaError_t
cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g)
{
	if (capture == NULL)
		return cudaErrorInvalidValue;
	*g = capture;
	capture = NULL;
	return cudaSuccess;
}

/* An executable copy of a graph. */
cudaError_t
cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long)
{
	*x = new CUgraphExec_st;
	(*x)->ops = g->ops;
	return cudaSuccess;
}

/* Replay a graph now. */
cudaError_t
cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
	if (capture != NULL)
		return cudaErrorInvalidValue;
	std::vector<std::function<void()>> ops = x->ops;
	emu_enqueue(s, [ops]() {
		for (auto &op : ops)
			op();
	});
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
	n = (n + 255) / 256 * 256;
	if ((*p = aligned_alloc(256, n > 0 ? n : 256)) == NULL)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xff, n);
	return cudaSuccess;
}

/* Free emulated device memory. */
cudaError_t
cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}

/* Every copy is a host copy. */
cudaError_t
cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind)
{
	memcpy(d, s, n);
	return cudaSuccess;
}

/* Run every stream's held work. */
cudaError_t
cudaDeviceSynchronize(void)
{
	bool	again = true;

	if (capture != NULL)
		return cudaErrorInvalidValue;
	while (again) {
		again = false;
		for (size_t i = 0; i < streams.size(); i++) {
			if (streams[i]->done < streams[i]->queued) {
				emu_drain(streams[i], streams[i]->queued);
				again = true;
			}
		}
	}
	return cudaSuccess;
}

/* Waiting on a stream being captured is an error, as on a GPU. */
cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
	if (capture != NULL)
		return cudaErrorInvalidValue;
	if (s != NULL)
		emu_drain(s, s->queued);
	return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }

/* An event that has not been recorded yet (it counts as done). */
cudaError_t
cudaEventCreate(cudaEvent_t *e)
{
	*e = new CUevent_st();
	return cudaSuccess;
}

/* Flags change nothing in the emulation. */
cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int)
{
	return cudaEventCreate(e);
}

/* Free an event; work it marks goes on. */
cudaError_t
cudaEventDestroy(cudaEvent_t e)
{
	delete e;
	return cudaSuccess;
}

/* Mark the point of s's queue reached so far (NULL: everything so far). */
cudaError_t
cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (e == NULL || capture != NULL)
		return cudaErrorInvalidValue;
	if (s == NULL)
		cudaDeviceSynchronize();
	e->s = s;
	e->seq = s != NULL ? s->queued : 0;
	return cudaSuccess;
}

/* Whether the work before the event's record has run. */
cudaError_t
cudaEventQuery(cudaEvent_t e)
{
	if (e == NULL)
		return cudaErrorInvalidValue;
	return e->s == NULL || e->s->done >= e->seq ? cudaSuccess :
	    cudaErrorNotReady;
}

/* Run the work before the event's record. */
cudaError_t
cudaEventSynchronize(cudaEvent_t e)
{
	if (e == NULL)
		return cudaErrorInvalidValue;
	if (e->s != NULL)
		emu_drain(e->s, e->seq);
	return cudaSuccess;
}

/* Make s's later work wait for the event's record as it is now. */
cudaError_t
cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int)
{
	CUstream_st	*es;
	uint64_t	 seq;

	if (e == NULL || capture != NULL)
		return cudaErrorInvalidValue;
	if ((es = e->s) == NULL || es->done >= e->seq)
		return cudaSuccess;
	seq = e->seq;
	emu_enqueue(s, [es, seq]() { emu_drain(es, seq); });
	return cudaSuccess;
}

/* A stream; deferred when made while emu_streams_defer() is on. */
cudaStream_t
emu_stream_new(void)
{
	CUstream_st	*s = new CUstream_st();

	s->deferred = defer_new;
	streams.push_back(s);
	return s;
}

/* Run a stream's held work and free it. */
void
emu_stream_free(cudaStream_t s)
{
	if (s == NULL)
		return;
	emu_drain(s, s->queued);
	for (size_t i = 0; i < streams.size(); i++)
		if (streams[i] == s) {
			streams.erase(streams.begin() + i);
			break;
		}
	delete s;
}

/* Whether streams made from now on hold their work (see the top). */
void
emu_streams_defer(int on)
{
	defer_new = on != 0;
}

/* Whether s holds its work. */
int
emu_stream_deferred(cudaStream_t s)
{
	return s != NULL && s->deferred;
}

/* Queue fn(arg) on s. */
void
emu_stream_op(cudaStream_t s, void (*fn)(void *), void *arg)
{
	emu_enqueue(s, [fn, arg]() { fn(arg); });
}

/*
 * Queue fn(arg) on n streams at once, as a collective is: it runs once,
 * when the first of them reaches it, after the work queued before it on
 * every one.  Unless all n hold their work it runs now.
 */
void
emu_stream_op_multi(cudaStream_t *s, int n, void (*fn)(void *), void *arg)
{
	struct multi {
		std::vector<std::pair<CUstream_st *, uint64_t>> at;
		bool	done;
	};
	int	i, all = n > 0;

	for (i = 0; i < n; i++)
		all &= emu_stream_deferred(s[i]);
	if (!all) {
		for (i = 0; i < n; i++)
			if (s[i] != NULL)
				emu_drain(s[i], s[i]->queued);
		fn(arg);
		return;
	}
	auto m = std::make_shared<multi>();
	m->done = false;
	for (i = 0; i < n; i++)
		m->at.push_back({ s[i], s[i]->queued });
	for (i = 0; i < n; i++) {
		emu_enqueue(s[i], [m, fn, arg]() {
			if (m->done)
				return;
			m->done = true;
			for (auto &p : m->at)
				emu_drain(p.first, p.second);
			fn(arg);
		});
	}
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
static __thread int	emu_device;

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
	return e == cudaSuccess ? "no error" : "emulated error";
}

}

/* A cuBLAS handle: the stream its products go on. */
struct cublasContext {
	cudaStream_t	 s;
};

/* A handle on the NULL stream. */
cublasStatus_t
cublasCreate(cublasHandle_t *h)
{
	*h = new cublasContext();
	(*h)->s = NULL;
	return CUBLAS_STATUS_SUCCESS;
}

/* Free a handle. */
cublasStatus_t
cublasDestroy(cublasHandle_t h)
{
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

/* Put the handle's products on s. */
cublasStatus_t
cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
	h->s = s;
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

/* Run a product now, or record it in the capture (its scalars by value). */
static cublasStatus_t
emu_gemm_queue(cudaStream_t s, cublasOperation_t ta, cublasOperation_t tb,
    int m, int n, int k, float alpha, const void *A, cudaDataType_t at,
    int lda, const void *B, cudaDataType_t bt, int ldb, float beta, float *C,
    int ldc)
{
	if (capture == NULL && !emu_stream_deferred(s))
		return emu_gemm(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb,
		    beta, C, ldc);
	if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 ||
	    ldb < 1 || ldc < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	auto op = [=]() {
		if (emu_gemm(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb,
		    beta, C, ldc) != CUBLAS_STATUS_SUCCESS) {
			fprintf(stderr, "emu: a queued product failed\n");
			abort();
		}
	};
	if (capture != NULL)
		capture->ops.push_back(op);
	else
		emu_enqueue(s, op);
	return CUBLAS_STATUS_SUCCESS;
}

/* SGEMM through the reference product. */
cublasStatus_t
cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
    int m, int n, int k, const float *alpha, const float *A, int lda,
    const float *B, int ldb, const float *beta, float *C, int ldc)
{
	return emu_gemm_queue(h->s, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B,
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
	return emu_gemm_queue(h->s, ta, tb, m, n, k, *(const float *)alpha, A, at,
	    lda, B, bt, ldb, *(const float *)beta, (float *)C, ldc);
}
