/*
 * cublas_v2.h (emulation): the cuBLAS calls the kernels make, computed by a
 * plain column-major reference in emu.cc that follows cuBLAS's definition
 * (op, leading dimensions, alpha, beta), so the tests check how the
 * dispatcher maps GGUF row-major weights onto it.
 */
#ifndef EMU_CUBLAS_V2_H
#define EMU_CUBLAS_V2_H

#include "cuda_runtime.h"

typedef enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_INVALID_VALUE = 7
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef struct cublasContext	*cublasHandle_t;

cublasStatus_t	 cublasCreate(cublasHandle_t *);
cublasStatus_t	 cublasDestroy(cublasHandle_t);
cublasStatus_t	 cublasSetStream(cublasHandle_t, cudaStream_t);
const char	*cublasGetStatusString(cublasStatus_t);
cublasStatus_t	 cublasSgemm(cublasHandle_t, cublasOperation_t,
		    cublasOperation_t, int, int, int, const float *,
		    const float *, int, const float *, int, const float *,
		    float *, int);
cublasStatus_t	 cublasGemmEx(cublasHandle_t, cublasOperation_t,
		    cublasOperation_t, int, int, int, const void *,
		    const void *, cudaDataType_t, int, const void *,
		    cudaDataType_t, int, const void *, void *, cudaDataType_t,
		    int, cublasComputeType_t, cublasGemmAlgo_t);

#endif
