/*
 * cuda_runtime_api.h (emulation): the part of the CUDA runtime API the
 * kernels and their tests use, served by emu.cc on the CPU.  Plain C, like
 * the real header, so the C tests compile against it unchanged.
 */
#ifndef EMU_CUDA_RUNTIME_API_H
#define EMU_CUDA_RUNTIME_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorIllegalState = 401,
	cudaErrorNotReady = 600,
	cudaErrorStreamCaptureUnsupported = 900,
	cudaErrorStreamCaptureInvalidated = 901,
	cudaErrorStreamCaptureImplicit = 906
} cudaError_t;

#define cudaStreamNonBlocking	0x01

enum cudaMemcpyKind {
	cudaMemcpyHostToHost,
	cudaMemcpyHostToDevice,
	cudaMemcpyDeviceToHost,
	cudaMemcpyDeviceToDevice,
	cudaMemcpyDefault
};

enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

typedef struct CUstream_st	*cudaStream_t;
typedef struct CUevent_st	*cudaEvent_t;
typedef struct CUgraph_st	*cudaGraph_t;
typedef struct CUgraphExec_st	*cudaGraphExec_t;

enum cudaStreamCaptureMode {
	cudaStreamCaptureModeGlobal = 0,
	cudaStreamCaptureModeThreadLocal = 1,
	cudaStreamCaptureModeRelaxed = 2
};

struct cudaDeviceProp {
	char	name[256];
	size_t	totalGlobalMem;
	int	multiProcessorCount;
	int	major;
	int	minor;
};

cudaError_t	 cudaMalloc(void **, size_t);
cudaError_t	 cudaFree(void *);
cudaError_t	 cudaMemcpy(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t	 cudaDeviceSynchronize(void);
cudaError_t	 cudaStreamSynchronize(cudaStream_t);
cudaError_t	 cudaGetLastError(void);
cudaError_t	 cudaGetDeviceCount(int *);
cudaError_t	 cudaGetDevice(int *);
cudaError_t	 cudaSetDevice(int);
cudaError_t	 cudaDeviceGetAttribute(int *, enum cudaDeviceAttr, int);
cudaError_t	 cudaGetDeviceProperties(struct cudaDeviceProp *, int);
const char	*cudaGetErrorString(cudaError_t);
#define cudaEventDefault	0x00
#define cudaEventDisableTiming	0x02
cudaError_t	 cudaEventCreate(cudaEvent_t *);
cudaError_t	 cudaEventCreateWithFlags(cudaEvent_t *, unsigned int);
cudaError_t	 cudaEventQuery(cudaEvent_t);
cudaError_t	 cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int);
cudaError_t	 cudaEventDestroy(cudaEvent_t);
cudaError_t	 cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t	 cudaEventSynchronize(cudaEvent_t);
cudaError_t	 cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t	 cudaStreamCreateWithFlags(cudaStream_t *, unsigned int);
cudaError_t	 cudaStreamDestroy(cudaStream_t);
cudaError_t	 cudaMemcpyAsync(void *, const void *, size_t,
		    enum cudaMemcpyKind, cudaStream_t);
cudaError_t	 cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t	 cudaMemcpyPeerAsync(void *, int, const void *, int, size_t,
		    cudaStream_t);
/*
 * Streams queue their work in order, events mark points of a stream's
 * queue, and stream capture records the kernel launches, cuBLAS products,
 * copies and NCCL calls queued on a captured stream, one graph per
 * stream, and a graph launch queues them on a stream; see emu.cc.
 */
cudaError_t	 cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t	 cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t	 cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t,
		    unsigned long long);
cudaError_t	 cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t	 cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t	 cudaGraphDestroy(cudaGraph_t);

/* The emulation's own calls (no CUDA counterpart). */
/* Whether a capture is on in the calling thread. */
int		 emu_capturing(void);
/* Make the next capture begun end invalidated (for tests). */
void		 emu_spoil_next_capture(void);
/* Whether a stream is being captured. */
int		 emu_stream_capturing(cudaStream_t);
/*
 * Whether streams created from now on hold their work until something
 * waits for it (deferred streams, see emu.cc).
 */
void		 emu_streams_defer(int);
/*
 * Work of the emulation's NCCL on a stream (recorded if it is captured):
 * each run calls start(arg) when the stream reaches it, then done() on
 * its result until true; key names the communicator whose work on other
 * streams it waits for.
 */
cudaError_t	 emu_stream_work(cudaStream_t, const void *key,
		    void *(*)(void *), int (*)(void *), void *,
		    void (*)(void *));

#ifdef __cplusplus
}
#endif

#endif
