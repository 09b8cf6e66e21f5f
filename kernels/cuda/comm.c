/* comm.c: the calls of comm.h on NCCL, or refusals in a build without it. */

#include "config.h"

#include <stdlib.h>

#include "comm.h"
#include "tensor_type.h"
#include "util.h"

#ifdef HAVE_NCCL
#include <cuda_runtime_api.h>
/* NCCL's header declares ncclGroupStart() and others without (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

struct cuda_comm {
	int		 n;
	ncclComm_t	*c;		/* [n], rank order */
};

/* Put an NCCL error into cause; true when there was one. */
static int
nccl_failed(ncclResult_t r, const char *what, char **cause)
{
	if (r == ncclSuccess)
		return (0);
	set_cause(cause, "nccl: %s: %s", what, ncclGetErrorString(r));
	return (1);
}

/* This build has NCCL. */
int
cuda_comm_built(void)
{
	return (1);
}

/* One communicator per device, in one clique. */
struct cuda_comm *
cuda_comm_create(const int *devs, int n, char **cause)
{
	struct cuda_comm	*cc;
	int			 i, j;

	if (n < 1) {
		set_cause(cause, "nccl: clique of %d devices", n);
		return (NULL);
	}
	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			if (devs[i] == devs[j]) {
				set_cause(cause, "nccl: device %d listed twice",
				    devs[i]);
				return (NULL);
			}
	cc = xcalloc(1, sizeof *cc);
	cc->n = n;
	cc->c = xcalloc(n, sizeof *cc->c);
	if (nccl_failed(ncclCommInitAll(cc->c, n, devs), "create communicators",
	    cause)) {
		free(cc->c);
		free(cc);
		return (NULL);
	}
	return (cc);
}

/* Destroy every rank's communicator. */
void
cuda_comm_free(struct cuda_comm *cc)
{
	int	i;

	if (cc == NULL)
		return;
	for (i = 0; i < cc->n; i++)
		ncclCommDestroy(cc->c[i]);
	free(cc->c);
	free(cc);
}

/* Ranks in the clique. */
int
cuda_comm_size(const struct cuda_comm *cc)
{
	return (cc->n);
}

/* Open a group of calls. */
int
cuda_comm_group_start(char **cause)
{
	return (nccl_failed(ncclGroupStart(), "group start", cause) ? -1 : 0);
}

/* Close a group: NCCL launches its calls together. */
int
cuda_comm_group_end(char **cause)
{
	return (nccl_failed(ncclGroupEnd(), "group end", cause) ? -1 : 0);
}

/* Check a rank and name a GGUF float type as NCCL's. */
static int
comm_args(const struct cuda_comm *cc, int rank, char **cause)
{
	if (cc == NULL || rank < 0 || rank >= cc->n) {
		set_cause(cause, "nccl: rank %d out of range 0..%d", rank,
		    cc != NULL ? cc->n - 1 : -1);
		return (-1);
	}
	return (0);
}

/* Sum buf over every rank, in place. */
int
cuda_comm_all_reduce_sum(struct cuda_comm *cc, int rank, void *buf,
    size_t count, uint32_t type, cuda_stream_t s, char **cause)
{
	ncclDataType_t	t;

	if (comm_args(cc, rank, cause) != 0)
		return (-1);
	switch (type) {
	case TT_F32:
		t = ncclFloat32;
		break;
	case TT_F16:
		t = ncclFloat16;
		break;
	case TT_BF16:
		t = ncclBfloat16;
		break;
	default:
		set_cause(cause, "nccl: all-reduce of type %s (F32, F16 or "
		    "BF16)", tensor_type_name(type));
		return (-1);
	}
	return (nccl_failed(ncclAllReduce(buf, buf, count, t, ncclSum,
	    cc->c[rank], (cudaStream_t)s), "all-reduce", cause) ? -1 : 0);
}

/* Send bytes to peer. */
int
cuda_comm_send(struct cuda_comm *cc, int rank, int peer, const void *buf,
    size_t bytes, cuda_stream_t s, char **cause)
{
	if (comm_args(cc, rank, cause) != 0 || comm_args(cc, peer, cause) != 0)
		return (-1);
	return (nccl_failed(ncclSend(buf, bytes, ncclUint8, peer, cc->c[rank],
	    (cudaStream_t)s), "send", cause) ? -1 : 0);
}

/* Receive bytes from peer. */
int
cuda_comm_recv(struct cuda_comm *cc, int rank, int peer, void *buf,
    size_t bytes, cuda_stream_t s, char **cause)
{
	if (comm_args(cc, rank, cause) != 0 || comm_args(cc, peer, cause) != 0)
		return (-1);
	return (nccl_failed(ncclRecv(buf, bytes, ncclUint8, peer, cc->c[rank],
	    (cudaStream_t)s), "receive", cause) ? -1 : 0);
}

#else	/* !HAVE_NCCL */

/* This build has no NCCL. */
int
cuda_comm_built(void)
{
	return (0);
}

/* Refuse: there is nothing to build a clique with. */
struct cuda_comm *
cuda_comm_create(const int *devs, int n, char **cause)
{
	(void)devs;
	set_cause(cause, "nccl: a group of %d devices needs nccl, which was "
	    "not found when phased was configured", n);
	return (NULL);
}

/* Nothing was made. */
void
cuda_comm_free(struct cuda_comm *cc)
{
	(void)cc;
}

/* No clique exists. */
int
cuda_comm_size(const struct cuda_comm *cc)
{
	(void)cc;
	return (0);
}

/* Without NCCL there are no groups. */
int
cuda_comm_group_start(char **cause)
{
	set_cause(cause, "nccl: not built");
	return (-1);
}

/* Without NCCL there are no groups. */
int
cuda_comm_group_end(char **cause)
{
	set_cause(cause, "nccl: not built");
	return (-1);
}

/* Without NCCL there is no all-reduce. */
int
cuda_comm_all_reduce_sum(struct cuda_comm *cc, int rank, void *buf,
    size_t count, uint32_t type, cuda_stream_t s, char **cause)
{
	(void)cc; (void)rank; (void)buf; (void)count; (void)type; (void)s;
	set_cause(cause, "nccl: not built");
	return (-1);
}

/* Without NCCL there is no send. */
int
cuda_comm_send(struct cuda_comm *cc, int rank, int peer, const void *buf,
    size_t bytes, cuda_stream_t s, char **cause)
{
	(void)cc; (void)rank; (void)peer; (void)buf; (void)bytes; (void)s;
	set_cause(cause, "nccl: not built");
	return (-1);
}

/* Without NCCL there is no receive. */
int
cuda_comm_recv(struct cuda_comm *cc, int rank, int peer, void *buf,
    size_t bytes, cuda_stream_t s, char **cause)
{
	(void)cc; (void)rank; (void)peer; (void)buf; (void)bytes; (void)s;
	set_cause(cause, "nccl: not built");
	return (-1);
}

#endif
