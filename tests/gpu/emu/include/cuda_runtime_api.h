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
	cudaErrorNotReady = 600
} cudaError_t;

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
/*
 * Stream capture records the kernel launches and cuBLAS products queued
 * while it is on (other stream work is refused) and a graph replays them.
 */
cudaError_t	 cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t	 cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t	 cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t,
		    unsigned long long);
cudaError_t	 cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t	 cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t	 cudaGraphDestroy(cudaGraph_t);
/* Whether a capture is on (for the emulation's own checks). */
int		 emu_capturing(void);
/*
 * The emulation's streams (emu.cc): what cudaStreamCreate* hands out, and
 * how the calls served outside emu.cc queue their work on one or on
 * several streams at once (a collective).  emu_streams_defer(1) makes the
 * streams created after it hold their work until it is waited for.
 */
cudaStream_t	 emu_stream_new(void);
void		 emu_stream_free(cudaStream_t);
void		 emu_streams_defer(int);
int		 emu_stream_deferred(cudaStream_t);
void		 emu_stream_op(cudaStream_t, void (*)(void *), void *);
void		 emu_stream_op_multi(cudaStream_t *, int, void (*)(void *),
		    void *);

#ifdef __cplusplus
}
#endif

#endif
