/*
 * sample.cu: choosing the next token on the device: argmax for greedy
 * decoding, and temperature sampling by the Gumbel-max trick.
 *
 * Gumbel-max draws exactly from softmax(logits / T): adding independent
 * Gumbel noise -log(-log(u)) to every scaled logit and taking the argmax
 * is equivalent to sampling the categorical distribution.  So sampling is
 * the same one-pass reduction as argmax, with no softmax, no sort and no
 * copy of the logits to the host: only the token ids leave the device.
 * The noise is kdefs_uniform(seed, index), the function ref.c uses, so a
 * seeded request is reproducible.  Top-k and top-p need the sorted head
 * of the distribution; the engine applies them on the host to the rows
 * that ask for them (copying only those rows), which keeps this kernel a
 * single pass for the common greedy and plain-temperature requests.
 */
#include "config.h"

#include <limits.h>

#include "cuda_device.h"

#define PICK_THREADS	512

/* Keep the better of two (value, index) pairs: higher value, then lower index. */
__device__ __forceinline__ void
pick_better(float *v, int *i, float v2, int i2)
{
	if (v2 > *v || (v2 == *v && i2 < *i)) {
		*v = v2;
		*i = i2;
	}
}

/* One block per row: the index of the largest (perturbed) logit. */
static __global__ void
pick_kernel(int32_t *ids, const float *logits, const float *temp,
    const uint64_t *seeds, int n_vocab)
{
	__shared__ float	 sv[PICK_THREADS / 32];
	__shared__ int		 si[PICK_THREADS / 32];
	const float		*x = logits + (size_t)blockIdx.x * n_vocab;
	float			 t = temp != NULL ? temp[blockIdx.x] : 0.0f;
	uint64_t		 seed = seeds != NULL ? seeds[blockIdx.x] : 0;
	float			 bv = -INFINITY, v, v2;
	int			 bi = INT_MAX, i, i2, o;

	for (i = threadIdx.x; i < n_vocab; i += blockDim.x) {
		v = x[i];
		if (t > 0.0f)
			v = v / t - logf(-logf(kdefs_uniform(seed,
			    (uint64_t)i)));
		pick_better(&bv, &bi, v, i);
	}
	for (o = 16; o > 0; o >>= 1) {
		v2 = __shfl_xor_sync(FULL_MASK, bv, o);
		i2 = __shfl_xor_sync(FULL_MASK, bi, o);
		pick_better(&bv, &bi, v2, i2);
	}
	if ((threadIdx.x & 31) == 0) {
		sv[threadIdx.x >> 5] = bv;
		si[threadIdx.x >> 5] = bi;
	}
	__syncthreads();
	if (threadIdx.x < 32) {
		bv = -INFINITY;
		bi = INT_MAX;
		if (threadIdx.x < blockDim.x / 32) {
			bv = sv[threadIdx.x];
			bi = si[threadIdx.x];
		}
		for (o = 16; o > 0; o >>= 1) {
			v2 = __shfl_xor_sync(FULL_MASK, bv, o);
			i2 = __shfl_xor_sync(FULL_MASK, bi, o);
			pick_better(&bv, &bi, v2, i2);
		}
		if (threadIdx.x == 0)
			ids[blockIdx.x] = bi == INT_MAX ? 0 : bi;
	}
}

/* Pick the largest logit of each row. */
extern "C" int
cuda_argmax_forward(int32_t *ids, const float *logits, int n_rows,
    int n_vocab, cuda_stream_t stream)
{
	if (n_rows < 0 || n_vocab <= 0)
		return (int)cudaErrorInvalidValue;
	if (n_rows == 0)
		return 0;
	pick_kernel<<<n_rows, PICK_THREADS, 0, stream>>>(ids, logits, NULL,
	    NULL, n_vocab);
	return launch_result();
}

/* Sample each row by the Gumbel-max trick (argmax at temperature <= 0). */
extern "C" int
cuda_sample_forward(int32_t *ids, const float *logits, const float *temp,
    const uint64_t *seeds, int n_rows, int n_vocab, cuda_stream_t stream)
{
	if (n_rows < 0 || n_vocab <= 0 || temp == NULL || seeds == NULL)
		return (int)cudaErrorInvalidValue;
	if (n_rows == 0)
		return 0;
	pick_kernel<<<n_rows, PICK_THREADS, 0, stream>>>(ids, logits, temp,
	    seeds, n_vocab);
	return launch_result();
}
