/* cuda_bf16.h (emulation): see cuda_runtime.h. */
#include "cuda_runtime.h"
