/*
 * nccl.h (emulation): the part of NCCL's API phased calls (communicators
 * of several devices in one process, all-reduce, point-to-point send and
 * receive, groups), served by tests/gpu/emu/nccl.c on the CPU.  Names,
 * types and numbering follow the real header so kernels/cuda/comm.c
 * compiles unchanged against either.
 */
#ifndef EMU_NCCL_H
#define EMU_NCCL_H

#include <stddef.h>

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR	2
#define NCCL_MINOR	99
#define NCCL_PATCH	0

typedef struct ncclComm	*ncclComm_t;

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5
} ncclResult_t;

typedef enum { ncclSum = 0 } ncclRedOp_t;

typedef enum {
	ncclInt8 = 0, ncclChar = 0,
	ncclUint8 = 1,
	ncclFloat16 = 6, ncclHalf = 6,
	ncclFloat32 = 7, ncclFloat = 7,
	ncclBfloat16 = 9
} ncclDataType_t;

ncclResult_t	 ncclCommInitAll(ncclComm_t *, int, const int *);
ncclResult_t	 ncclCommDestroy(ncclComm_t);
ncclResult_t	 ncclCommCount(const ncclComm_t, int *);
ncclResult_t	 ncclCommUserRank(const ncclComm_t, int *);
const char	*ncclGetErrorString(ncclResult_t);
ncclResult_t	 ncclAllReduce(const void *, void *, size_t, ncclDataType_t,
		    ncclRedOp_t, ncclComm_t, cudaStream_t);
ncclResult_t	 ncclSend(const void *, size_t, ncclDataType_t, int,
		    ncclComm_t, cudaStream_t);
ncclResult_t	 ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t,
		    cudaStream_t);
ncclResult_t	 ncclGroupStart(void);
ncclResult_t	 ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
