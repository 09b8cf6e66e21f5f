/*
 * nccl.c: a CPU stand-in for NCCL (tests/gpu/emu/include/nccl.h), so that
 * several emulated devices in one process can all-reduce and exchange
 * buffers as phased's tensor-parallel code asks real NCCL to.
 *
 * Device memory is host memory.  A call posts its operation to the
 * communicator's clique, where it waits until the operations it pairs
 * with have been posted too.  Matching follows NCCL's rules: the k-th
 * all-reduce of each rank meet, and the k-th send from a to b meets the
 * k-th receive at b from a.  Misuse NCCL would hang on or corrupt memory
 * with (counts or types that differ between ranks, an operation that is
 * never matched) is fatal.
 *
 * An operation on a stream is queued on it (emu.cc's emu_stream_work) as
 * NCCL enqueues a kernel: it is posted when the stream reaches it, after
 * the stream's earlier work, and the stream waits there until its
 * partners, on other streams, have been posted too.  Outside a group that
 * is at the call; inside ncclGroupStart/ncclGroupEnd every operation is
 * queued at ncclGroupEnd, so one thread can drive every rank (the
 * single-thread pattern).  On streams that hold their work (deferred, see
 * emu.cc) an operation waits like any other work, and a started one that
 * waits for its partners makes the streams holding them run up to them.  An operation on the
 * legacy stream (NULL) runs at the call: it is posted and the call waits
 * for its partners, which other threads (one thread per rank) or the same
 * group may post; one whose partners sit in held work is a deadlock.
 *
 * On a stream being captured an operation is recorded instead, at the
 * call or, inside a group, at ncclGroupEnd, as NCCL enqueues it then:
 * nothing moves at capture.  Each launch of the graph queues it again on
 * the graph's stream, where it runs as above, so the ranks' graphs
 * launched one after the other from one thread meet as they would on
 * GPUs.  As NCCL requires, whether an operation is captured must be the
 * same on every rank it meets (a captured operation matched with a live
 * one is fatal), and a group may not mix the two (ncclInvalidUsage).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl.h"

/* float <-> half and bfloat16, the reference's (kernels/ref.c). */
float		ref_f16_to_f32(uint16_t);
uint16_t	ref_f32_to_f16(float);
float		ref_bf16_to_f32(uint16_t);
uint16_t	ref_f32_to_bf16(float);

/* Seconds an operation may wait for its partners before it is a deadlock. */
#define EMU_NCCL_TIMEOUT	20
#define EMU_NCCL_MAX_RANKS	64
#define EMU_NCCL_MAX_GROUP	4096

enum emu_op_kind { EMU_ALLREDUCE, EMU_SEND, EMU_RECV };

struct emu_op {
	enum emu_op_kind	 kind;
	const void		*send;
	void			*recv;
	size_t			 count;
	ncclDataType_t		 type;
	int			 peer;
	ncclComm_t		 comm;
	cudaStream_t		 stream;
	int			 captured;	/* posted by a graph's run */
	int			 done;
	struct emu_op		*next;		/* the clique's pending list */
};

struct emu_clique {
	int			 n;
	int			 refs;
	struct emu_op		*pending;	/* in the order posted */
};

struct ncclComm {
	struct emu_clique	*c;
	int			 rank;
	int			 dev;
};

static pthread_mutex_t	 mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t	 cv = PTHREAD_COND_INITIALIZER;

/* Operations of the calling thread's open group. */
static __thread int		 group_depth;
static __thread struct emu_op	*group_ops[EMU_NCCL_MAX_GROUP];
static __thread int		 group_n;

/* Stop on a misuse NCCL would not survive. */
static void
emu_nccl_fatal(const char *what)
{
	fprintf(stderr, "emu nccl: %s\n", what);
	abort();
}

/* Bytes of one element of a type. */
static size_t
type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
		return (1);
	case ncclFloat16:
	case ncclBfloat16:
		return (2);
	case ncclFloat32:
		return (4);
	}
	return (0);
}

/* Element i of a buffer of a floating type, as a float. */
static float
get_f(const void *p, ncclDataType_t t, size_t i)
{
	if (t == ncclFloat32)
		return (((const float *)p)[i]);
	if (t == ncclFloat16)
		return (ref_f16_to_f32(((const uint16_t *)p)[i]));
	return (ref_bf16_to_f32(((const uint16_t *)p)[i]));
}

/* Store element i of a buffer of a floating type. */
static void
put_f(void *p, ncclDataType_t t, size_t i, float v)
{
	if (t == ncclFloat32)
		((float *)p)[i] = v;
	else if (t == ncclFloat16)
		((uint16_t *)p)[i] = ref_f32_to_f16(v);
	else
		((uint16_t *)p)[i] = ref_f32_to_bf16(v);
}

/* Unlink op from its clique's pending list and mark it done. */
static void
retire(struct emu_op *op)
{
	struct emu_op	**pp;

	for (pp = &op->comm->c->pending; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == op) {
			*pp = op->next;
			break;
		}
	}
	op->done = 1;
}

/* Run one all-reduce if every rank of the clique has posted one. */
static int
match_allreduce(struct emu_clique *c)
{
	struct emu_op	*head[EMU_NCCL_MAX_RANKS], *op;
	float		*sum;
	size_t		 i;
	int		 r, have = 0;

	memset(head, 0, sizeof head);
	for (op = c->pending; op != NULL; op = op->next) {
		if (op->kind == EMU_ALLREDUCE && head[op->comm->rank] == NULL) {
			head[op->comm->rank] = op;
			have++;
		}
	}
	if (have < c->n)
		return (0);
	for (r = 1; r < c->n; r++) {
		if (head[r]->count != head[0]->count ||
		    head[r]->type != head[0]->type)
			emu_nccl_fatal("all-reduce counts or types differ "
			    "between ranks");
		if (head[r]->captured != head[0]->captured)
			emu_nccl_fatal("an all-reduce captured on some ranks "
			    "and not on others");
	}
	if ((sum = calloc(head[0]->count + 1, sizeof *sum)) == NULL)
		emu_nccl_fatal("out of memory");
	/* Ranks in order: every rank gets the same rounding. */
	for (r = 0; r < c->n; r++)
		for (i = 0; i < head[0]->count; i++)
			sum[i] += get_f(head[r]->send, head[r]->type, i);
	for (r = 0; r < c->n; r++) {
		for (i = 0; i < head[0]->count; i++)
			put_f(head[r]->recv, head[r]->type, i, sum[i]);
		retire(head[r]);
	}
	free(sum);
	return (1);
}

/* Complete the first send that has its receive posted. */
static int
match_p2p(struct emu_clique *c)
{
	struct emu_op	*s, *r;
	size_t		 bytes;

	for (s = c->pending; s != NULL; s = s->next) {
		if (s->kind != EMU_SEND)
			continue;
		/* The first receive at the peer from this rank. */
		for (r = c->pending; r != NULL; r = r->next)
			if (r->kind == EMU_RECV && r->comm->rank == s->peer &&
			    r->peer == s->comm->rank)
				break;
		if (r == NULL)
			continue;
		/* An earlier send on the same pair goes first. */
		bytes = s->count * type_size(s->type);
		if (bytes != r->count * type_size(r->type))
			emu_nccl_fatal("send and receive sizes differ");
		if (s->captured != r->captured)
			emu_nccl_fatal("a send and its receive not both "
			    "captured");
		memmove(r->recv, s->send, bytes);
		retire(s);
		retire(r);
		return (1);
	}
	return (0);
}

/* Post ops to their cliques and run whatever can run; mu is held. */
static void
post(struct emu_op **ops, int n)
{
	struct emu_op	**pp;
	int		 i, progress;

	for (i = 0; i < n; i++) {
		for (pp = &ops[i]->comm->c->pending; *pp != NULL;
		    pp = &(*pp)->next)
			;
		ops[i]->next = NULL;
		*pp = ops[i];
	}
	do {
		progress = 0;
		for (i = 0; i < n; i++) {
			while (match_allreduce(ops[i]->comm->c) ||
			    match_p2p(ops[i]->comm->c))
				progress = 1;
		}
	} while (progress);
	pthread_cond_broadcast(&cv);
}

/* Wait until every op is done; mu is held. */
static void
wait_done(struct emu_op **ops, int n)
{
	struct timespec	ts;
	int		i;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += EMU_NCCL_TIMEOUT;
	for (i = 0; i < n; i++) {
		while (!ops[i]->done) {
			if (pthread_cond_timedwait(&cv, &mu, &ts) == ETIMEDOUT &&
			    !ops[i]->done)
				emu_nccl_fatal("deadlock: an operation's "
				    "partners were never posted");
		}
	}
}

/* One run of an operation, when its stream reaches it: post a copy. */
static void *
run_start(void *arg)
{
	struct emu_op	*op;

	if ((op = malloc(sizeof *op)) == NULL)
		emu_nccl_fatal("out of memory");
	*op = *(struct emu_op *)arg;
	op->done = 0;
	op->next = NULL;
	pthread_mutex_lock(&mu);
	post(&op, 1);
	pthread_mutex_unlock(&mu);
	return (op);
}

/* Whether a run of an operation has met its partners. */
static int
run_done(void *state)
{
	struct emu_op	*op = state;
	int		 done;

	pthread_mutex_lock(&mu);
	done = op->done;
	pthread_mutex_unlock(&mu);
	if (done)
		free(op);
	return (done);
}

/* Record op into its stream's capture, which owns it from here. */
static void
record(struct emu_op *op)
{
	op->captured = 1;
	emu_stream_work(op->stream, op->comm->c, run_start, run_done, op,
	    free);
}

/*
 * Queue ops that are not captured: those on a stream as its work, which
 * owns them from here; then post those on the legacy stream and wait for
 * them, as the legacy stream's work runs at the call.
 */
static void
run_live(struct emu_op **ops, int n)
{
	struct emu_op	*legacy[EMU_NCCL_MAX_GROUP];
	int		 i, n_legacy = 0;

	for (i = 0; i < n; i++) {
		if (ops[i]->stream != NULL)
			emu_stream_work(ops[i]->stream, ops[i]->comm->c,
			    run_start, run_done, ops[i], free);
		else
			legacy[n_legacy++] = ops[i];
	}
	if (n_legacy == 0)
		return;
	pthread_mutex_lock(&mu);
	post(legacy, n_legacy);
	wait_done(legacy, n_legacy);
	pthread_mutex_unlock(&mu);
	for (i = 0; i < n_legacy; i++)
		free(legacy[i]);
}

/* Queue op in the open group, record it if captured, or run it. */
static ncclResult_t
submit(struct emu_op *op)
{
	if (op->comm == NULL || op->comm->c == NULL) {
		free(op);
		return (ncclInvalidArgument);
	}
	if (group_depth > 0) {
		if (group_n == EMU_NCCL_MAX_GROUP)
			emu_nccl_fatal("too many operations in one group");
		group_ops[group_n++] = op;
		return (ncclSuccess);
	}
	if (emu_stream_capturing(op->stream))
		record(op);
	else
		run_live(&op, 1);
	return (ncclSuccess);
}

/* A new operation of a kind. */
static struct emu_op *
new_op(enum emu_op_kind kind, ncclComm_t comm, size_t count,
    ncclDataType_t type)
{
	struct emu_op	*op;

	if ((op = calloc(1, sizeof *op)) == NULL)
		emu_nccl_fatal("out of memory");
	op->kind = kind;
	op->comm = comm;
	op->count = count;
	op->type = type;
	return (op);
}

/* One communicator per listed device, all in one clique. */
ncclResult_t
ncclCommInitAll(ncclComm_t *comms, int n, const int *devs)
{
	struct emu_clique	*c;
	int			 i, j, n_dev = 0;

	if (comms == NULL || n < 1 || n > EMU_NCCL_MAX_RANKS)
		return (ncclInvalidArgument);
	cudaGetDeviceCount(&n_dev);
	for (i = 0; i < n; i++) {
		if (devs != NULL && (devs[i] < 0 || devs[i] >= n_dev))
			return (ncclInvalidArgument);
		for (j = 0; devs != NULL && j < i; j++)
			if (devs[j] == devs[i])
				return (ncclInvalidUsage);	/* as NCCL */
	}
	if ((c = calloc(1, sizeof *c)) == NULL)
		return (ncclSystemError);
	c->n = n;
	c->refs = n;
	for (i = 0; i < n; i++) {
		if ((comms[i] = calloc(1, sizeof *comms[i])) == NULL)
			emu_nccl_fatal("out of memory");
		comms[i]->c = c;
		comms[i]->rank = i;
		comms[i]->dev = devs != NULL ? devs[i] : i;
	}
	return (ncclSuccess);
}

/* Free a communicator; the clique goes with its last one. */
ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
	if (comm == NULL)
		return (ncclSuccess);
	pthread_mutex_lock(&mu);
	if (comm->c->pending != NULL)
		emu_nccl_fatal("communicator destroyed with operations "
		    "pending");
	if (--comm->c->refs == 0)
		free(comm->c);
	pthread_mutex_unlock(&mu);
	free(comm);
	return (ncclSuccess);
}

/* Ranks in the communicator's clique. */
ncclResult_t
ncclCommCount(const ncclComm_t comm, int *n)
{
	*n = comm->c->n;
	return (ncclSuccess);
}

/* The communicator's rank. */
ncclResult_t
ncclCommUserRank(const ncclComm_t comm, int *r)
{
	*r = comm->rank;
	return (ncclSuccess);
}

/* Name a result. */
const char *
ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess:
		return ("no error");
	case ncclInvalidArgument:
		return ("invalid argument (emulated)");
	case ncclInvalidUsage:
		return ("invalid usage (emulated)");
	default:
		return ("emulated nccl error");
	}
}

/* Sum count elements over every rank into each rank's recv. */
ncclResult_t
ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
    ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
	struct emu_op	*o;

	if (op != ncclSum || (t != ncclFloat32 && t != ncclFloat16 &&
	    t != ncclBfloat16) || send == NULL || recv == NULL)
		return (ncclInvalidArgument);
	o = new_op(EMU_ALLREDUCE, comm, count, t);
	o->stream = s;
	o->send = send;
	o->recv = recv;
	return (submit(o));
}

/* Send count elements to rank peer. */
ncclResult_t
ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer,
    ncclComm_t comm, cudaStream_t s)
{
	struct emu_op	*o;

	if (comm == NULL || peer < 0 || peer >= comm->c->n ||
	    type_size(t) == 0)
		return (ncclInvalidArgument);
	o = new_op(EMU_SEND, comm, count, t);
	o->stream = s;
	o->send = buf;
	o->peer = peer;
	return (submit(o));
}

/* Receive count elements from rank peer. */
ncclResult_t
ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer,
    ncclComm_t comm, cudaStream_t s)
{
	struct emu_op	*o;

	if (comm == NULL || peer < 0 || peer >= comm->c->n ||
	    type_size(t) == 0)
		return (ncclInvalidArgument);
	o = new_op(EMU_RECV, comm, count, t);
	o->stream = s;
	o->recv = buf;
	o->peer = peer;
	return (submit(o));
}

/* Open a group: operations wait to be posted together. */
ncclResult_t
ncclGroupStart(void)
{
	group_depth++;
	return (ncclSuccess);
}

/*
 * Close a group; the outermost records its operations into their streams'
 * captures, or queues them on their streams (see the top).
 */
ncclResult_t
ncclGroupEnd(void)
{
	int	i, n_captured = 0;

	if (group_depth == 0)
		return (ncclInvalidUsage);
	if (--group_depth > 0 || group_n == 0)
		return (ncclSuccess);
	for (i = 0; i < group_n; i++)
		n_captured += emu_stream_capturing(group_ops[i]->stream) != 0;
	if (n_captured > 0 && n_captured < group_n) {
		/* NCCL refuses a group of captured and live operations. */
		for (i = 0; i < group_n; i++)
			free(group_ops[i]);
		group_n = 0;
		return (ncclInvalidUsage);
	}
	if (n_captured > 0) {
		for (i = 0; i < group_n; i++)
			record(group_ops[i]);
	} else
		run_live(group_ops, group_n);
	group_n = 0;
	return (ncclSuccess);
}
