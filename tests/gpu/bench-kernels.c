/*
 * bench-kernels.c: matrix-product throughput on Llama-3-8B shapes.
 *
 * For each weight format it times one pass over the weights of 32 layers
 * (wq, wk, wv, wo, gate, up, down) plus the output head, i.e. every matrix
 * product of a forward pass, at 1, 8 and 64 tokens (decode batches) and
 * 512 tokens (a prompt).  Every layer has its own weights, so nothing is
 * served from L2 between layers.  Each figure is set against two ceilings:
 * streaming the weights at the HBM bandwidth, and the dense BF16 tensor
 * peak; "roof" is the fraction of the better bound achieved.
 *
 *	bench-kernels [--quick] [--layers N] [--iters N] [--crossover]
 *
 * --quick times 4 layers, 2 iterations.  --crossover instead times, for
 * every quantized type, the direct kernel against dequantize + cuBLAS at
 * 1 to 16 tokens and prints the largest batch the direct kernel wins
 * (the limit qmv_limit in matmul.cu gives each type).  Exits 0 without
 * a device.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_type.h"
#include "util.h"
#include "cuda_kernels.h"

#define HBM_GBS		4800.0	/* H200 HBM3e, GB/s */
#define PEAK_TFLOPS	989.0	/* H200 SXM dense BF16/F16 tensor, no sparsity */

#define CK(call) do {							\
	int e_ = (int)(call);						\
	if (e_ != 0) {							\
		fprintf(stderr, "bench-kernels: %s:%d: %s: %s\n",	\
		    __FILE__, __LINE__, #call, cuda_kernels_strerror(e_)); \
		exit(1);						\
	}								\
} while (0)

/* Llama-3-8B. */
enum { DIM = 4096, FFN = 14336, N_HEADS = 32, N_KV = 8, HEAD_DIM = 128,
	VOCAB = 128256 };

/* The seven products of a layer: n_out x n_in. */
static const int layer_mats[7][2] = {
	{ N_HEADS * HEAD_DIM, DIM },	/* wq */
	{ N_KV * HEAD_DIM, DIM },	/* wk */
	{ N_KV * HEAD_DIM, DIM },	/* wv */
	{ DIM, N_HEADS * HEAD_DIM },	/* wo */
	{ FFN, DIM },			/* gate */
	{ FFN, DIM },			/* up */
	{ DIM, FFN },			/* down */
};

struct config {
	const char	*label;
	uint32_t	 w_type;
	uint32_t	 x_type;
	int		 qmv_max;	/* CUDA_QMV_MAX_BATCH_AUTO: by type */
	int		 min_tok;	/* batches this row is timed for */
	int		 max_tok;
};

static const struct config configs[] = {
	{ "f16 (cuBLAS, f32 act)", TT_F16, CUDA_ACT_F32,
	    CUDA_QMV_MAX_BATCH_AUTO, 1, 512 },
	{ "bf16 (cuBLAS, bf16 act)", TT_BF16, CUDA_ACT_BF16,
	    CUDA_QMV_MAX_BATCH_AUTO, 1, 512 },
	{ "q8_0 (auto)", TT_Q8_0, CUDA_ACT_F32,
	    CUDA_QMV_MAX_BATCH_AUTO, 1, 512 },
	{ "q8_0 (direct kernel)", TT_Q8_0, CUDA_ACT_F32, 1 << 20, 8, 64 },
	{ "q8_0 (dequant+cuBLAS)", TT_Q8_0, CUDA_ACT_F32, 0, 8, 512 },
};
#define N_CONFIGS	(sizeof configs / sizeof configs[0])

static const int batches[] = { 1, 8, 64, 512 };
#define N_BATCHES	(sizeof batches / sizeof batches[0])

/* The quantized types and batches of --crossover. */
static const uint32_t cross_types[] = { TT_Q8_0, TT_Q4_0, TT_Q4_1, TT_Q5_0,
	TT_Q5_1, TT_IQ4_NL, TT_Q2_K, TT_Q3_K, TT_Q4_K, TT_Q5_K, TT_Q6_K,
	TT_IQ4_XS };
static const int cross_batches[] = { 1, 2, 3, 4, 6, 8, 12, 16 };
#define N_CROSS_TYPES	(sizeof cross_types / sizeof cross_types[0])
#define N_CROSS_BATCHES	(sizeof cross_batches / sizeof cross_batches[0])

struct result {
	const char	*label;
	int		 n_tok;
	double		 ms, gbs, tflops, roof;
};

/* Fill every layer's weights and the head with random values of a type. */
static double
fill_weights(void **w, void **head, uint32_t wt, int layers, double params)
{
	const struct tensor_type_info	*ti = tensor_type_get(wt);
	int				 l, m;

	for (l = 0; l < layers; l++)
		for (m = 0; m < 7; m++) {
			size_t n = (size_t)layer_mats[m][0] * layer_mats[m][1];

			cudaFree(w[l * 7 + m]);
			CK(cudaMalloc(&w[l * 7 + m],
			    n / ti->block_elems * ti->block_bytes));
			CK(cuda_fill_random(w[l * 7 + m], wt, n, 0.05f,
			    l * 7 + m, NULL));
		}
	cudaFree(*head);
	CK(cudaMalloc(head, (size_t)VOCAB * DIM / ti->block_elems *
	    ti->block_bytes));
	CK(cuda_fill_random(*head, wt, (size_t)VOCAB * DIM, 0.05f, 999, NULL));
	return params / ti->block_elems * ti->block_bytes;
}

/* One pass: every product of every layer and the head. */
static void
pass(struct cuda_blas *b, void **w, uint32_t wt, int layers, void *head,
    float *out, const void *x, uint32_t xt, int n_tok)
{
	int	l, m;

	for (l = 0; l < layers; l++)
		for (m = 0; m < 7; m++)
			CK(cuda_matmul_forward(b, out, x, xt, w[l * 7 + m], wt,
			    n_tok, layer_mats[m][1], layer_mats[m][0]));
	CK(cuda_matmul_forward(b, out, x, xt, head, wt, n_tok, DIM, VOCAB));
}

/* Milliseconds of one pass, the mean of iters after a warm-up pass. */
static float
time_passes(struct cuda_blas *b, void **w, uint32_t wt, int layers,
    void *head, float *out, const void *x, uint32_t xt, int n_tok, int iters,
    cudaEvent_t e0, cudaEvent_t e1)
{
	float	ms;
	int	i;

	/* warm-up: cuBLAS heuristics, scratch growth */
	pass(b, w, wt, layers, head, out, x, xt, n_tok);
	CK(cudaDeviceSynchronize());
	CK(cudaEventRecord(e0, NULL));
	for (i = 0; i < iters; i++)
		pass(b, w, wt, layers, head, out, x, xt, n_tok);
	CK(cudaEventRecord(e1, NULL));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	return ms / iters;
}

/*
 * For each quantized type, time the direct kernel and dequantize + cuBLAS
 * at small batches and print the largest batch where the direct kernel
 * is faster.
 */
static void
crossover(struct cuda_blas *b, void **w, void **head, int layers, int iters,
    double params, float *out, const void *x, cudaEvent_t e0, cudaEvent_t e1)
{
	float	direct, deq;
	size_t	t, k;
	int	best, winning;

	printf("direct kernel against dequantize + cuBLAS, ms per pass "
	    "(F32 activations)\n%-8s", "type");
	for (k = 0; k < N_CROSS_BATCHES; k++)
		printf(" %13d", cross_batches[k]);
	printf("  direct wins up to\n");
	for (t = 0; t < N_CROSS_TYPES; t++) {
		fill_weights(w, head, cross_types[t], layers, params);
		printf("%-8s", tensor_type_name(cross_types[t]));
		best = 0;
		winning = 1;
		for (k = 0; k < N_CROSS_BATCHES; k++) {
			cuda_blas_set_qmv_max_batch(b, 1 << 20);
			direct = time_passes(b, w, cross_types[t], layers,
			    *head, out, x, CUDA_ACT_F32, cross_batches[k],
			    iters, e0, e1);
			cuda_blas_set_qmv_max_batch(b, 0);
			deq = time_passes(b, w, cross_types[t], layers, *head,
			    out, x, CUDA_ACT_F32, cross_batches[k], iters, e0,
			    e1);
			printf(" %6.2f/%-6.2f", direct, deq);
			if (winning && direct < deq)
				best = cross_batches[k];
			else
				winning = 0;
			fflush(stdout);
		}
		printf("  %d\n", best);
	}
}

int
main(int argc, char **argv)
{
	struct cudaDeviceProp		 prop;
	struct cuda_blas		*b;
	struct result			 res[N_CONFIGS * N_BATCHES];
	cudaEvent_t			 e0, e1;
	void				**w, *head = NULL, *x32, *x16;
	float				*out, ms;
	double				 params, bytes = 0, t_bw, t_fl;
	size_t				 n_res = 0, c, k;
	int				 layers = 32, iters = 5, cross = 0, i, l,
					 m, nt;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0) {
			layers = 4;
			iters = 2;
		} else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
			layers = atoi(argv[++i]);
		else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (strcmp(argv[i], "--crossover") == 0)
			cross = 1;
		else {
			fprintf(stderr, "usage: bench-kernels [--quick] "
			    "[--layers N] [--iters N] [--crossover]\n");
			return 2;
		}
	}
	if (layers < 1 || layers > 32 || iters < 1) {
		fprintf(stderr, "bench-kernels: layers must be 1..32, iters >= 1\n");
		return 2;
	}
	if (cuda_device_count() <= 0) {
		printf("bench-kernels: no CUDA device\n");
		return 0;
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, %d SMs, %.1f GiB\n", prop.name,
	    prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
	printf("model: Llama-3-8B products (dim %d, ffn %d, %d heads, %d kv "
	    "heads, vocab %d), %d layers + output head, %d iterations\n",
	    DIM, FFN, N_HEADS, N_KV, VOCAB, layers, iters);

	params = (double)DIM * VOCAB;
	for (m = 0; m < 7; m++)
		params += (double)layers * layer_mats[m][0] * layer_mats[m][1];

	CK(cudaMalloc(&x32, (size_t)512 * FFN * 4));
	CK(cudaMalloc(&x16, (size_t)512 * FFN * 2));
	CK(cudaMalloc((void **)&out, (size_t)512 * VOCAB * 4));
	CK(cuda_fill_random(x32, TT_F32, (size_t)512 * FFN, 1.0f, 7, NULL));
	CK(cuda_convert_forward(x16, TT_BF16, x32, TT_F32, (size_t)512 * FFN,
	    NULL));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cuda_blas_create(&b, NULL));
	w = xcalloc((size_t)layers * 7, sizeof *w);

	if (cross) {
		crossover(b, w, &head, layers, iters, params, out, x32, e0, e1);
		goto done;
	}
	for (c = 0; c < N_CONFIGS; c++) {
		const struct config *cf = &configs[c];

		/* Weights of this format (kept while the same format repeats). */
		if (c == 0 || configs[c - 1].w_type != cf->w_type)
			bytes = fill_weights(w, &head, cf->w_type, layers,
			    params);
		cuda_blas_set_qmv_max_batch(b, cf->qmv_max);
		for (k = 0; k < N_BATCHES; k++) {
			nt = batches[k];
			if (nt < cf->min_tok || nt > cf->max_tok)
				continue;
			/* warm-up: cuBLAS heuristics, scratch growth */
			ms = time_passes(b, w, cf->w_type, layers, head, out,
			    cf->x_type == CUDA_ACT_BF16 ? x16 : x32, cf->x_type,
			    nt, iters, e0, e1);
			res[n_res].label = cf->label;
			res[n_res].n_tok = nt;
			res[n_res].ms = ms;
			res[n_res].gbs = bytes / (ms * 1e-3) / 1e9;
			res[n_res].tflops = 2.0 * nt * params / (ms * 1e-3) / 1e12;
			t_bw = bytes / (HBM_GBS * 1e9) * 1e3;
			t_fl = 2.0 * nt * params / (PEAK_TFLOPS * 1e12) * 1e3;
			res[n_res].roof = (t_bw > t_fl ? t_bw : t_fl) / ms;
			printf("  %-26s %4d tok  %9.3f ms/pass  (%.2f GB of "
			    "weights)\n", cf->label, nt, ms, bytes / 1e9);
			fflush(stdout);
			n_res++;
		}
	}

	printf("\nroofline: HBM %.0f GB/s (H200), dense BF16/F16 tensor peak "
	    "%.0f TFLOP/s (H200 SXM, no sparsity)\n", HBM_GBS, PEAK_TFLOPS);
	printf("%-26s %5s %10s %9s %6s %9s %6s %6s\n", "weights", "tok",
	    "ms/pass", "GB/s", "%HBM", "TFLOP/s", "%peak", "roof");
	for (k = 0; k < n_res; k++)
		printf("%-26s %5d %10.3f %9.0f %5.1f%% %9.1f %5.1f%% %5.1f%%\n",
		    res[k].label, res[k].n_tok, res[k].ms, res[k].gbs,
		    100 * res[k].gbs / HBM_GBS, res[k].tflops,
		    100 * res[k].tflops / PEAK_TFLOPS, 100 * res[k].roof);

done:
	for (l = 0; l < layers * 7; l++)
		cudaFree(w[l]);
	free(w);
	cudaFree(head);
	cudaFree(x32);
	cudaFree(x16);
	cudaFree(out);
	cuda_blas_destroy(b);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 0;
}
