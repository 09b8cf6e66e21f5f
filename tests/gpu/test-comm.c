/*
 * test-comm.c: kernels/cuda/comm.c (NCCL) between the devices of a group:
 * all-reduce of F32 and F16 over 2 and 4 ranks driven from one thread and
 * from one thread per rank, send and receive, an all-reduce captured into
 * one CUDA graph per rank and replayed, and the refusals.  Runs on
 * the emulation (tests/gpu/emu-comm-check.sh) and on real GPUs.
 */

#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm.h"
#include "ref.h"
#include "tensor_type.h"
#include "../tap.h"

#define N_ELEMS		1000
#define MAX_RANKS	4

/* A cause for printing, which may be NULL. */
#define STR(s)		((s) != NULL ? (s) : "no cause")

static int	devs[MAX_RANKS] = { 0, 1, 2, 3 };

/* Value i of rank r's contribution. */
static float
contrib(int r, int i)
{
	return ((float)((r + 1) * (i % 17)) * 0.25f - (float)r);
}

/* The expected sum over n ranks of element i. */
static float
want_sum(int n, int i)
{
	float	s = 0.0f;
	int	r;

	for (r = 0; r < n; r++)
		s += contrib(r, i);
	return (s);
}

/* Upload rank r's contribution of a type to a new device buffer. */
static void *
upload(int r, uint32_t type)
{
	uint16_t	 h16[N_ELEMS];
	float		 h32[N_ELEMS];
	void		*d;
	int		 i;

	cudaSetDevice(devs[r]);
	if (cudaMalloc(&d, N_ELEMS * 4) != cudaSuccess)
		abort();
	for (i = 0; i < N_ELEMS; i++) {
		h32[i] = contrib(r, i);
		h16[i] = ref_f32_to_f16(h32[i]);
	}
	cudaMemcpy(d, type == TT_F32 ? (void *)h32 : (void *)h16,
	    N_ELEMS * (type == TT_F32 ? 4 : 2), cudaMemcpyHostToDevice);
	return (d);
}

/* Whether rank r's buffer holds the sum over n ranks. */
static int
check_sum(void *d, int r, int n, uint32_t type)
{
	uint16_t	h16[N_ELEMS];
	float		h32[N_ELEMS], v;
	int		i;

	cudaSetDevice(devs[r]);
	cudaDeviceSynchronize();
	cudaMemcpy(type == TT_F32 ? (void *)h32 : (void *)h16, d,
	    N_ELEMS * (type == TT_F32 ? 4 : 2), cudaMemcpyDeviceToHost);
	for (i = 0; i < N_ELEMS; i++) {
		v = type == TT_F32 ? h32[i] : ref_f16_to_f32(h16[i]);
		/* Halves of these small quarter multiples are exact. */
		if (v != want_sum(n, i))
			return (0);
	}
	return (1);
}

/* All-reduce over n ranks from one thread, in a group. */
static void
test_group(int n, uint32_t type)
{
	struct cuda_comm	*cc;
	void			*d[MAX_RANKS];
	char			*cause = NULL;
	int			 r, good = 1;

	cc = cuda_comm_create(devs, n, &cause);
	if (!ok(cc != NULL, "clique of %d devices (%s)", n, STR(cause))) {
		free(cause);
		return;
	}
	is_int(cuda_comm_size(cc), n, "it has %d ranks", n);
	for (r = 0; r < n; r++)
		d[r] = upload(r, type);
	good &= cuda_comm_group_start(&cause) == 0;
	for (r = 0; r < n; r++) {
		cudaSetDevice(devs[r]);
		good &= cuda_comm_all_reduce_sum(cc, r, d[r], N_ELEMS, type,
		    NULL, &cause) == 0;
	}
	good &= cuda_comm_group_end(&cause) == 0;
	ok(good, "%d-rank %s all-reduce from one thread (%s)", n,
	    tensor_type_name(type), good ? "ok" : STR(cause));
	for (r = 0; r < n; r++)
		good &= check_sum(d[r], r, n, type);
	ok(good, "every rank holds the %s sum of %d", tensor_type_name(type),
	    n);
	for (r = 0; r < n; r++)
		cudaFree(d[r]);
	cuda_comm_free(cc);
	free(cause);
}

struct rank_arg {
	struct cuda_comm	*cc;
	int			 rank;
	void			*d;
	int			 rc;
};

/* One rank's all-reduce, outside any group, on its own thread. */
static void *
rank_main(void *arg)
{
	struct rank_arg	*a = arg;
	char		*cause = NULL;

	cudaSetDevice(devs[a->rank]);
	a->rc = cuda_comm_all_reduce_sum(a->cc, a->rank, a->d, N_ELEMS, TT_F32,
	    NULL, &cause);
	free(cause);
	return (NULL);
}

/* All-reduce over 4 ranks with one thread per rank. */
static void
test_threads(void)
{
	struct cuda_comm	*cc;
	struct rank_arg		 a[MAX_RANKS];
	pthread_t		 t[MAX_RANKS];
	char			*cause = NULL;
	int			 r, good = 1;

	if ((cc = cuda_comm_create(devs, MAX_RANKS, &cause)) == NULL) {
		ok(0, "clique for threads (%s)", STR(cause));
		free(cause);
		return;
	}
	for (r = 0; r < MAX_RANKS; r++) {
		a[r].cc = cc;
		a[r].rank = r;
		a[r].d = upload(r, TT_F32);
		a[r].rc = -1;
		pthread_create(&t[r], NULL, rank_main, &a[r]);
	}
	for (r = 0; r < MAX_RANKS; r++) {
		pthread_join(t[r], NULL);
		good &= a[r].rc == 0 && check_sum(a[r].d, r, MAX_RANKS, TT_F32);
		cudaFree(a[r].d);
	}
	ok(good, "4 ranks on 4 threads all-reduce to the same sum");
	cuda_comm_free(cc);
}

/* Rank 0 sends two buffers to rank 1 and rank 1 one back, in a group. */
static void
test_p2p(void)
{
	struct cuda_comm	*cc;
	uint8_t			 h[3][256], back[3][256];
	void			*d[3], *recv[3];
	char			*cause = NULL;
	int			 i, j, good = 1;

	if ((cc = cuda_comm_create(devs, 2, &cause)) == NULL) {
		ok(0, "clique for send and receive (%s)", STR(cause));
		free(cause);
		return;
	}
	for (i = 0; i < 3; i++) {
		for (j = 0; j < 256; j++)
			h[i][j] = (uint8_t)(i * 91 + j * 7);
		cudaSetDevice(devs[i == 2]);
		cudaMalloc(&d[i], 256);
		cudaMemcpy(d[i], h[i], 256, cudaMemcpyHostToDevice);
		cudaSetDevice(devs[i != 2]);
		cudaMalloc(&recv[i], 256);
	}
	good &= cuda_comm_group_start(&cause) == 0;
	/* Receives posted first: matching is by order per pair, not time. */
	good &= cuda_comm_recv(cc, 1, 0, recv[0], 256, NULL, &cause) == 0;
	good &= cuda_comm_recv(cc, 1, 0, recv[1], 256, NULL, &cause) == 0;
	good &= cuda_comm_send(cc, 1, 0, d[2], 256, NULL, &cause) == 0;
	good &= cuda_comm_send(cc, 0, 1, d[0], 256, NULL, &cause) == 0;
	good &= cuda_comm_send(cc, 0, 1, d[1], 256, NULL, &cause) == 0;
	good &= cuda_comm_recv(cc, 0, 1, recv[2], 256, NULL, &cause) == 0;
	good &= cuda_comm_group_end(&cause) == 0;
	ok(good, "two sends 0 -> 1 and one 1 -> 0 in a group (%s)",
	    good ? "ok" : STR(cause));
	for (i = 0; i < 3; i++) {
		cudaSetDevice(devs[i != 2]);
		cudaDeviceSynchronize();
		cudaMemcpy(back[i], recv[i], 256, cudaMemcpyDeviceToHost);
		good &= memcmp(back[i], h[i], 256) == 0;
		cudaFree(d[i]);
		cudaFree(recv[i]);
	}
	ok(good, "each receive holds its own send, in order");
	cuda_comm_free(cc);
	free(cause);
}

/* Bad cliques and calls are refused with a cause. */
static void
test_refusals(void)
{
	struct cuda_comm	*cc;
	int			 dup[2] = { 1, 1 };
	char			*cause = NULL;
	void			*d;

	cc = cuda_comm_create(dup, 2, &cause);
	ok(cc == NULL && cause != NULL && strstr(cause, "device 1 listed "
	    "twice") != NULL, "a device listed twice is refused (%s)",
	    STR(cause));
	cuda_comm_free(cc);
	free(cause);
	cause = NULL;
	if ((cc = cuda_comm_create(devs, 2, &cause)) == NULL) {
		ok(0, "clique for refusals (%s)", STR(cause));
		free(cause);
		return;
	}
	cudaMalloc(&d, 64);
	ok(cuda_comm_all_reduce_sum(cc, 2, d, 16, TT_F32, NULL, &cause) == -1 &&
	    cause != NULL && strstr(cause, "rank 2 out of range 0..1") != NULL,
	    "rank 2 of 2 is refused by range");
	free(cause);
	cause = NULL;
	ok(cuda_comm_all_reduce_sum(cc, 0, d, 16, TT_Q8_0, NULL, &cause) == -1 &&
	    cause != NULL && strstr(cause, "all-reduce of type Q8_0") != NULL,
	    "an all-reduce of Q8_0 is refused by type");
	free(cause);
	cudaFree(d);
	cuda_comm_free(cc);
}

/* Whether rank r's buffer still holds its own contribution (F32). */
static int
check_own(void *d, int r)
{
	float	h[N_ELEMS];
	int	i;

	cudaSetDevice(devs[r]);
	cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
	for (i = 0; i < N_ELEMS; i++)
		if (h[i] != contrib(r, i))
			return (0);
	return (1);
}

/*
 * An all-reduce over n ranks captured from one thread, each rank's call on
 * its own stream being captured, in one group: nothing moves at capture;
 * each launch of the ranks' graphs, one after the other, sums what the
 * buffers hold then.
 */
static void
test_capture(int n)
{
	struct cuda_comm	*cc;
	cudaStream_t		 st[MAX_RANKS];
	cudaGraph_t		 g[MAX_RANKS];
	cudaGraphExec_t		 x[MAX_RANKS];
	void			*d[MAX_RANKS];
	float			 h[N_ELEMS];
	char			*cause = NULL;
	int			 i, r, rep, good = 1;

	memset(g, 0, sizeof g);
	memset(x, 0, sizeof x);
	if ((cc = cuda_comm_create(devs, n, &cause)) == NULL) {
		ok(0, "clique for capture (%s)", STR(cause));
		free(cause);
		return;
	}
	/* Allocating while capturing would spoil the captures. */
	for (r = 0; r < n; r++) {
		d[r] = upload(r, TT_F32);
		good &= cudaStreamCreateWithFlags(&st[r],
		    cudaStreamNonBlocking) == cudaSuccess;
	}
	for (r = 0; r < n; r++) {
		cudaSetDevice(devs[r]);
		good &= cudaStreamBeginCapture(st[r],
		    cudaStreamCaptureModeThreadLocal) == cudaSuccess;
	}
	good &= cuda_comm_group_start(&cause) == 0;
	for (r = 0; r < n; r++) {
		cudaSetDevice(devs[r]);
		good &= cuda_comm_all_reduce_sum(cc, r, d[r], N_ELEMS, TT_F32,
		    st[r], &cause) == 0;
	}
	good &= cuda_comm_group_end(&cause) == 0;
	for (r = 0; r < n; r++) {
		cudaSetDevice(devs[r]);
		good &= cudaStreamEndCapture(st[r], &g[r]) == cudaSuccess &&
		    cudaGraphInstantiate(&x[r], g[r], 0) == cudaSuccess;
	}
	if (!ok(good, "%d-rank all-reduce captured, one graph per rank (%s)",
	    n, good ? "ok" : STR(cause)))
		goto out;
	for (r = 0; r < n; r++)
		good &= check_own(d[r], r);
	ok(good, "%d ranks: nothing summed at capture", n);
	for (rep = 0; rep < 2; rep++) {
		/* The second launch sums the contributions put back. */
		for (r = 0; rep > 0 && r < n; r++) {
			for (i = 0; i < N_ELEMS; i++)
				h[i] = contrib(r, i);
			cudaSetDevice(devs[r]);
			cudaMemcpy(d[r], h, sizeof h, cudaMemcpyHostToDevice);
		}
		for (r = 0; r < n; r++) {
			cudaSetDevice(devs[r]);
			good &= cudaGraphLaunch(x[r], st[r]) == cudaSuccess;
		}
		for (r = 0; r < n; r++) {
			cudaSetDevice(devs[r]);
			good &= cudaStreamSynchronize(st[r]) == cudaSuccess;
			good &= check_sum(d[r], r, n, TT_F32);
		}
		ok(good, "%d ranks: launch %d of the graphs sums on every rank",
		    n, rep + 1);
	}
out:
	for (r = 0; r < n; r++) {
		if (x[r] != NULL)
			cudaGraphExecDestroy(x[r]);
		if (g[r] != NULL)
			cudaGraphDestroy(g[r]);
		cudaStreamDestroy(st[r]);
		cudaFree(d[r]);
	}
	cuda_comm_free(cc);
	free(cause);
}

int
main(void)
{
	char	*cause = NULL;
	int	 n_dev = 0;

	if (!cuda_comm_built()) {
		ok(cuda_comm_create(devs, 2, &cause) == NULL && cause != NULL &&
		    strstr(cause, "needs nccl") != NULL, "without nccl a "
		    "clique is refused (%s)", STR(cause));
		free(cause);
		done_testing();
	}
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < MAX_RANKS)
		skip_all("fewer than %d CUDA devices", MAX_RANKS);
	test_group(2, TT_F32);
	test_group(4, TT_F32);
	test_group(2, TT_F16);
	test_group(4, TT_F16);
	test_threads();
	test_p2p();
	test_capture(2);
	test_capture(4);
	test_refusals();
	done_testing();
}
