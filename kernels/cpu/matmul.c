/* matmul.c: split a weight-times-batch product into cache-sized tiles. */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "amx.h"
#include "log.h"
#include "matmul.h"
#include "memread.h"
#include "quant.h"
#include "tensor_type.h"
#include "threadpool.h"
#include "util.h"

/*
 * A repacked copy of at least this size starts on a huge-page boundary and
 * asks for huge pages over its whole huge pages (never beyond its end, so
 * nothing more becomes resident): a one-token product streams the copy
 * once, and with 4 KiB pages a core of a 2-core AVX-512 machine read a
 * repacked Q4_0 matrix from memory at about 23 GB/s, with 2 MiB pages 31.
 */
#define HUGE_PAGE	((size_t)2 << 20)

/* Bytes of prepared activations a token block may use (half of L2). */
#define ACT_BLOCK_BYTES	(512 * 1024)
/*
 * The same for the AMX kernels, which read only the codes and scales (1.25
 * bytes an element) and are fast enough that rereading the weights for
 * each token block starts to show.
 */
#define AMX_ACT_BYTES	(1024 * 1024)
/*
 * Batches from this many tokens use the AMX kernels: each call widens its
 * rows' weights for the tiles, which pays off only over several tiles.
 */
#define AMX_MIN_TOKENS	64

/* Threads that get a region of work items of their own (see take_item). */
#define MUL_REGIONS	64

/*
 * Batches from this many tokens prepare their activations on every thread,
 * FILL_TOK tokens (whole ACT_F32X and ACT_BF16X groups) a work item: on
 * one thread a 512-token prompt's quantizing took about 6% of its time.
 */
#define FILL_SPLIT	48
#define FILL_TOK	(2 * ACT_F32X_TOK)

/* Batches up to this many tokens walk the weights one row at a time. */
#ifndef SMALL_BATCH
#define SMALL_BATCH	2
#endif

struct qmat {
	uint32_t		 type;
	int64_t			 rows, cols;
	const uint8_t		*data;
	size_t			 row_bytes;
	int			 isa;
	struct quant_kernel	 kern;
	uint8_t			*packed;	/* repacked copy, or NULL */
	size_t			 packed_bytes;
	int			 bf16_values;	/* F16 computed as BF16 */
	int			 i16;		/* F16 or BF16 on 16-bit integer products */
};

/* One matrix of a product: its activations, outputs and work items. */
struct mul_part {
	const struct qmat	*m;
	const struct qact	*a;
	float			*y;
	int64_t			 ldy;
	int64_t			 chunk_rows;	/* rows per work item */
	int64_t			 first;		/* its first item in the job */
};

/*
 * Work items in one run of consecutive ones per thread: region i holds
 * (back << 32 | front), items front..back-1 left to take.
 */
struct item_regions {
	int			 n;
	_Atomic uint64_t	 region[MUL_REGIONS];
};

/* Preparing the activations of a large batch on every thread. */
struct fill_job {
	const struct qmat	*m[QMAT_MUL_MAX];	/* whose kernel fills */
	struct qact		*a[QMAT_MUL_MAX];	/* each distinct set */
	int			 n;
	int			 n_tok;
	int64_t			 per;		/* work items a set */
	struct item_regions	 items;
};

struct mul_job {
	struct mul_part		 part[QMAT_MUL_MAX];
	int			 nparts;
	int			 n_tok;
	int64_t			 nchunks;	/* work items of all parts */
	struct item_regions	 items;
};

/* Split n work items into one region per thread (at most MUL_REGIONS). */
static void
regions_init(struct item_regions *it, int64_t n, int nth)
{
	int	i;

	it->n = nth < MUL_REGIONS ? nth : MUL_REGIONS;
	for (i = 0; i < it->n; i++)
		atomic_init(&it->region[i], (uint64_t)(n * (i + 1) / it->n) << 32 |
		    (uint64_t)(n * i / it->n));
}

/*
 * The next work item for thread ith: the front of its own region, so its
 * rows stream in one run of addresses (one cold start for the prefetchers
 * instead of one per item), then the back of another's, so a thread the
 * scheduler delays is not waited for.  -1 when none are left.
 */
static int64_t
take_item(struct item_regions *it, int ith)
{
	uint64_t	v;
	int		i, r;

	for (i = 0; i < it->n; i++) {
		r = (ith + i) % it->n;
		v = atomic_load_explicit(&it->region[r], memory_order_relaxed);
		while ((uint32_t)v < (uint32_t)(v >> 32)) {
			if (i == 0) {
				if (atomic_compare_exchange_weak_explicit(&it->region[r],
				    &v, v + 1, memory_order_relaxed, memory_order_relaxed))
					return ((int64_t)(uint32_t)v);
			} else if (atomic_compare_exchange_weak_explicit(&it->region[r],
			    &v, v - ((uint64_t)1 << 32), memory_order_relaxed,
			    memory_order_relaxed))
				return ((int64_t)(v >> 32) - 1);
		}
	}
	return (-1);
}

/*
 * Let the kernel reclaim the pages of rows that were just copied, so a
 * file's weights are not resident twice.  MADV_PAGEOUT never loses data
 * (file pages are read back on use, anonymous ones go to swap or stay),
 * so it is safe whatever kind of memory the caller passed.
 */
static void
release_pages(const void *data, size_t len)
{
#ifdef MADV_PAGEOUT
	uintptr_t	pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t	a = ((uintptr_t)data + pg - 1) & ~(pg - 1);
	uintptr_t	b = ((uintptr_t)data + len) & ~(pg - 1);

	if (b > a)
		(void)madvise((void *)a, b - a, MADV_PAGEOUT);
#else
	(void)data;
	(void)len;
#endif
}

/*
 * Whether F16 or BF16 weights may take 16-bit integer products on variant
 * isa: where allowed, and bf16 dot products do not take them.
 */
static int
takes_i16(uint32_t type, int isa)
{
	return ((type == TT_F16 || type == TT_BF16) && isa >= QUANT_ISA_AVX2 &&
	    quant_f16_i16_allowed() && !quant_bf16_dot_takes(type));
}

/* Prepare a weight matrix. */
struct qmat *
qmat_create(uint32_t type, int64_t rows, int64_t cols, const void *data, char **cause)
{
	const struct tensor_type_info	*ti;
	struct qmat			*m;

	if ((ti = tensor_type_get(type)) == NULL) {
		set_cause(cause, "tensor type %u (%s): not supported by the kernels",
		    type, tensor_type_name(type) ? tensor_type_name(type) : "unknown");
		return (NULL);
	}
	if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX) {
		set_cause(cause, "matrix %lld x %lld: dimensions out of range (1 to %d)",
		    (long long)rows, (long long)cols, INT32_MAX);
		return (NULL);
	}
	if (cols % ti->block_elems != 0) {
		set_cause(cause, "matrix of %s with %lld columns: not a multiple of "
		    "the block size %u", ti->name, (long long)cols, ti->block_elems);
		return (NULL);
	}
	if (data == NULL) {
		set_cause(cause, "matrix %lld x %lld: no data", (long long)rows,
		    (long long)cols);
		return (NULL);
	}
	m = xcalloc(1, sizeof *m);
	m->type = type;
	m->rows = rows;
	m->cols = cols;
	m->data = data;
	m->row_bytes = tensor_row_bytes(ti, cols);
	m->isa = quant_isa();
	m->kern = quant_kernel_get(m->isa, type);
	/*
	 * F16 weights that are all bf16 values (a file converted from a bf16
	 * checkpoint, as most are) lose nothing in bf16: where BF16 weights
	 * take bf16 dot products, so do they, with the same bits.
	 */
	if (type == TT_F16 && m->isa >= QUANT_ISA_AVX512 &&
	    quant_bf16_dot_allowed() == QUANT_BF16_DOT_BF16 &&
	    quant_bf16_dot_supported() &&
	    float_avx512_f16_is_bf16(data, (size_t)rows * (size_t)cols)) {
		m->kern = quant_kernel_avx512_bf16dot(type);
		m->bf16_values = 1;
	}
	/*
	 * Other F16 weights, and BF16 ones, where allowed, take 16-bit
	 * integer products at twice the multiply-add rate, as precise as the
	 * 13 bits of each block's largest values (f16_i16_avx512.c), where
	 * bf16 dot products do not take them, and not with an infinity or NaN
	 * in the weights.
	 */
	else if (takes_i16(type, m->isa) && i16_finite(data,
	    (size_t)rows * (size_t)cols, type == TT_BF16)) {
		m->kern = m->isa >= QUANT_ISA_AVX512 ?
		    quant_kernel_avx512_i16(type) : quant_kernel_avx2_i16(type);
		m->i16 = 1;
	}
	if (m->kern.fn == NULL) {
		set_cause(cause, "tensor type %s: no kernel", ti->name);
		free(m);
		return (NULL);
	}
	/*
	 * A copy in the kernel's interleaved layout replaces the mapped rows
	 * for the products (the mapped file still serves qmat_get_row).  Its
	 * pages are not shared with the page cache: the weights are then
	 * resident twice only if the mapped ones stay touched.
	 */
	if (m->kern.pack != NULL && m->kern.pfn != NULL && quant_pack_allowed() &&
	    (m->kern.pmax_cols == 0 || cols <= m->kern.pmax_cols)) {
		void	*p;

		m->packed_bytes = m->kern.pack(data, m->row_bytes, rows, cols, NULL);
		if (posix_memalign(&p, m->packed_bytes >= HUGE_PAGE ? HUGE_PAGE : 64,
		    m->packed_bytes) != 0) {
			set_cause(cause, "matrix %lld x %lld: no memory for %zu bytes "
			    "of repacked weights", (long long)rows, (long long)cols,
			    m->packed_bytes);
			free(m);
			return (NULL);
		}
		m->packed = p;
#ifdef MADV_HUGEPAGE
		if (m->packed_bytes >= HUGE_PAGE)
			(void)madvise(p, m->packed_bytes & ~(size_t)(HUGE_PAGE - 1),
			    MADV_HUGEPAGE);
#endif
		m->kern.pack(data, m->row_bytes, rows, cols, m->packed);
		release_pages(data, (size_t)rows * m->row_bytes);
		if (m->isa == QUANT_ISA_AVX512)
			quant_amx_attach(&m->kern, type);
	}
	return (m);
}

/* Free a prepared matrix (not its data). */
void
qmat_free(struct qmat *m)
{
	if (m == NULL)
		return;
	free(m->packed);
	free(m);
}

/* Bytes of the repacked copy of the weights (0 when the file is used). */
size_t
qmat_packed_bytes(const struct qmat *m)
{
	return (m->packed_bytes);
}

/* Whether large batches run on the AMX tile unit. */
int
qmat_amx(const struct qmat *m)
{
	return (m->kern.afn != NULL);
}

/* Whether F16 weights compute as BF16 ones, being all bf16 values. */
int
qmat_bf16_values(const struct qmat *m)
{
	return (m->bf16_values);
}

/* Whether F16 (or, under AVX2, BF16) weights take 16-bit integer products. */
int
qmat_i16(const struct qmat *m)
{
	return (m->i16);
}

/* Number of rows (outputs). */
int64_t
qmat_rows(const struct qmat *m)
{
	return (m->rows);
}

/* Decode one row. */
void
qmat_get_row(const struct qmat *m, int64_t r, float *out)
{
	dequantize_row(m->type, m->data + r * m->row_bytes, out, m->cols);
}

/*
 * Rows [r0, r1) of a part on repacked weights: tiles of pmr rows (one
 * 16-row group at a time for a small batch, a single stream, unless the
 * kernel asks for more with smr).
 */
static void
packed_rows(const struct mul_part *p, int n_tok, int64_t r0, int64_t r1)
{
	const struct qmat	*m = p->m;
	const struct quant_kernel *k = &m->kern;
	int64_t			 r;
	int			 tb, t, t1, tt, row_step, use_amx;

	row_step = n_tok > SMALL_BATCH ? k->pmr : k->smr != 0 ? k->smr : 16;
	tb = (int)(ACT_BLOCK_BYTES / ((size_t)m->cols * 3));
	tb -= tb % k->pnr;
	if (tb < k->pnr)
		tb = k->pnr;
	/* AMX takes whole tiles of anr tokens; the rest of a block goes to pfn. */
	use_amx = k->afn != NULL && n_tok >= AMX_MIN_TOKENS;
	if (use_amx) {
		tb = (int)(AMX_ACT_BYTES / ((size_t)m->cols * 5 / 4));
		tb -= tb % k->anr;
		if (tb < k->anr)
			tb = k->anr;
	}
	for (t = 0; t < n_tok; t = t1) {
		t1 = t + tb < n_tok ? t + tb : n_tok;
		for (r = r0; r < r1; r += row_step) {
			int mr = r + row_step <= r1 ? row_step : (int)(r1 - r);
			tt = t;
			if (use_amx && t1 - t >= k->anr) {
				int na = (t1 - t) - (t1 - t) % k->anr;

				k->afn(m->packed, m->cols, r, mr, p->a, t, na, p->y, p->ldy);
				tt = t + na;
			}
			for (; tt < t1; tt += k->pnr) {
				int nr = tt + k->pnr <= t1 ? k->pnr : t1 - tt;
				k->pfn(m->packed, m->cols, r, mr, p->a, tt, nr, p->y, p->ldy);
			}
		}
	}
}

/*
 * Rows [r0, r1) of a part on the mapped rows.  A small batch is bound by
 * memory bandwidth: hand the kernel the few rows it walks together (dmr;
 * one, a single sequential stream, unless it says otherwise).  A large
 * one is bound by compute: use the full tile height so activation loads
 * are shared by rows.
 */
static void
plain_rows(const struct mul_part *p, int n_tok, int64_t r0, int64_t r1)
{
	const struct qmat	*m = p->m;
	const struct quant_kernel *k = &m->kern;
	int64_t			 r;
	size_t			 per_tok;
	int			 tb, t, t1, tt, row_step;

	row_step = n_tok <= SMALL_BATCH ? (k->dmr > 0 ? k->dmr : 1) : k->mr;
	per_tok = (size_t)m->cols * (p->a->q != NULL ? 3 : p->a->xb != NULL ? 2 : 4);
	tb = (int)(ACT_BLOCK_BYTES / per_tok);
	tb -= tb % k->nr;
	if (tb < k->nr)
		tb = k->nr;
	for (t = 0; t < n_tok; t = t1) {
		t1 = t + tb < n_tok ? t + tb : n_tok;
		for (r = r0; r < r1; r += row_step) {
			int mr = r + row_step <= r1 ? row_step : (int)(r1 - r);
			for (tt = t; tt < t1; tt += k->nr) {
				int nr = tt + k->nr <= t1 ? k->nr : t1 - tt;
				k->fn(m->data, m->row_bytes, m->cols, r, mr, p->a, tt, nr,
				    p->y, p->ldy);
			}
		}
	}
}

/*
 * Take chunks of rows until none are left: a thread's own run of them
 * first, then what others have not reached (take_item), so a thread that
 * the scheduler delays (the cores are shared) does not hold the others up.
 * A chunk is walked once per block of tokens small enough for the prepared
 * activations to stay in L2, so its weights stream from memory once per
 * block and a row tile is reused from L1 for every token tile.
 */
static void
mul_worker(void *arg, int ith, int nth)
{
	struct mul_job		*job = arg;
	const struct mul_part	*p;
	int64_t			 c, r0, r1;
	int			 i;

	while ((c = take_item(&job->items, ith)) >= 0) {
		for (i = job->nparts - 1; job->part[i].first > c; i--)
			;
		p = &job->part[i];
		r0 = (c - p->first) * p->chunk_rows;
		r1 = r0 + p->chunk_rows < p->m->rows ? r0 + p->chunk_rows : p->m->rows;
		if (p->m->packed != NULL)
			packed_rows(p, job->n_tok, r0, r1);
		else
			plain_rows(p, job->n_tok, r0, r1);
	}
}

/* The activation layout a matrix's kernel reads. */
static int
act_layout(const struct qmat *m)
{
	return (m->packed != NULL ? m->kern.playout : m->kern.layout);
}

/* Prepare tokens [t0, t1) of a's activations as m's kernel reads them. */
static void
act_fill(const struct qmat *m, struct qact *a, int t0, int t1)
{
	(m->packed != NULL ? m->kern.pfill : m->kern.fill)(a, m->type, t0, t1);
}

/* Prepare FILL_TOK tokens of one activation set an item until none are left. */
static void
fill_worker(void *arg, int ith, int nth)
{
	struct fill_job		*job = arg;
	int64_t			 c;
	int			 i, t0, t1;

	(void)nth;
	while ((c = take_item(&job->items, ith)) >= 0) {
		i = (int)(c / job->per);
		t0 = (int)(c % job->per) * FILL_TOK;
		t1 = t0 + FILL_TOK < job->n_tok ? t0 + FILL_TOK : job->n_tok;
		act_fill(job->m[i], job->a[i], t0, t1);
	}
}

/*
 * Multiply n matrices by the same activations in one run of the pool: the
 * activations are prepared once per distinct (type, layout), and the rows
 * of all matrices are shared out as one set of work items, so the threads
 * meet once instead of n times.
 */
void
qmat_mul_n(struct threadpool *pool, int n, const struct qmat *const *ms,
    const float *X, int n_tok, float *const *Ys, const int64_t *ldys)
{
	struct qact	 acts[QMAT_MUL_MAX];
	struct fill_job	 fill;
	struct mul_job	 job;
	size_t		 need[QMAT_MUL_MAX], total = 0;
	int64_t		 rows;
	int		 i, j, nth, mr, shared[QMAT_MUL_MAX];
	uint8_t		*buf = NULL;
	void		*owned = NULL;

	if (n_tok <= 0 || n < 1)
		return;
	if (n > QMAT_MUL_MAX)
		fatalx("%s: %d matrices, at most %d", __func__, n, QMAT_MUL_MAX);
	for (i = 0, rows = 0; i < n; i++) {
		rows += ms[i]->rows;
		if (ms[i]->cols != ms[0]->cols)
			fatalx("%s: matrices of %lld and %lld columns", __func__,
			    (long long)ms[0]->cols, (long long)ms[i]->cols);
		for (j = 0; j < i; j++) {
			if (ms[j]->type == ms[i]->type &&
			    act_layout(ms[j]) == act_layout(ms[i]))
				break;
		}
		shared[i] = j;
		need[i] = j < i ? 0 : (quant_act_bytes(ms[i]->type, act_layout(ms[i]),
		    ms[i]->cols, n_tok) + 63) & ~(size_t)63;
		total += need[i];
	}
	if (total != 0) {
		if (pool != NULL)
			buf = threadpool_scratch(pool, total);
		else
			buf = owned = xmalloc(total);
	}
	nth = threadpool_size(pool);
	fill.n = 0;
	memset(&job, 0, sizeof job);
	job.nparts = n;
	job.n_tok = n_tok;
	for (i = 0; i < n; i++) {
		const struct qmat	*m = ms[i];
		struct mul_part		*p = &job.part[i];

		if (shared[i] == i) {
			quant_act_init(&acts[i], m->type, act_layout(m), X, m->cols, n_tok,
			    need[i] != 0 ? buf : NULL);
			if (n_tok >= FILL_SPLIT && nth > 1) {
				fill.m[fill.n] = m;
				fill.a[fill.n++] = &acts[i];
			} else
				act_fill(m, &acts[i], 0, n_tok);
			if (need[i] != 0)
				buf += need[i];
		}
		p->m = m;
		p->a = &acts[shared[i]];
		p->y = Ys[i];
		p->ldy = ldys[i];
		/*
		 * About eight chunks per thread over all the matrices (fewer,
		 * larger ones when the batch is large and each chunk is a lot
		 * of work anyway), a multiple of the tile height.  Chunks of
		 * one size in every matrix keep the threads' runs (regions_init
		 * splits by count) even.
		 */
		p->chunk_rows = rows / (nth * (n_tok >= 64 ? 4 : 8));
		mr = m->packed != NULL ? m->kern.pmr : m->kern.mr;
		if (m->packed != NULL && n_tok <= SMALL_BATCH &&
		    m->kern.smr > mr)
			mr = m->kern.smr;
		p->chunk_rows -= p->chunk_rows % mr;
		if (p->chunk_rows < mr)
			p->chunk_rows = mr;
		p->first = job.nchunks;
		job.nchunks += (m->rows + p->chunk_rows - 1) / p->chunk_rows;
	}
	if (fill.n > 0) {
		/* Every set is prepared before any row is multiplied. */
		fill.n_tok = n_tok;
		fill.per = (n_tok + FILL_TOK - 1) / FILL_TOK;
		regions_init(&fill.items, fill.n * fill.per, nth);
		threadpool_run_any(pool, fill_worker, &fill);
	}
	regions_init(&job.items, job.nchunks, nth);
	threadpool_run_any(pool, mul_worker, &job);
	free(owned);
}

/* Multiply one matrix: qmat_mul_n with n = 1. */
void
qmat_mul(struct threadpool *pool, const struct qmat *m, const float *X, int n_tok,
    float *Y, int64_t ldy)
{
	qmat_mul_n(pool, 1, &m, X, n_tok, &Y, &ldy);
}

/* Bytes of weights one work item of qmat_read_n reads. */
#define READ_ITEM	((size_t)256 << 10)

/* One matrix's stream in a qmat_read_n run. */
struct read_span {
	const uint8_t	*p;		/* its weights */
	size_t		 len;		/* and their bytes */
	int64_t		 first;		/* its first item */
};

/* A qmat_read_n run: the matrices' streams cut into items. */
struct read_job {
	const struct read_span	*span;
	int			 n;
	int			 isa;
	struct item_regions	 items;
	_Atomic uint64_t	 sum;		/* the words read: the loads stay */
};

/* Read items until none are left, as mul_worker takes its chunks. */
static void
read_worker(void *arg, int ith, int nth)
{
	struct read_job		*job = arg;
	const struct read_span	*sp;
	uint64_t		 s = 0;
	int64_t			 c;
	size_t			 off, len;
	int			 i;

	(void)nth;
	while ((c = take_item(&job->items, ith)) >= 0) {
		for (i = job->n - 1; job->span[i].first > c; i--)
			;
		sp = &job->span[i];
		off = (size_t)(c - sp->first) * READ_ITEM;
		len = sp->len - off < READ_ITEM ? sp->len - off : READ_ITEM;
		s += mem_read_sum(job->isa, sp->p + off, len, 0);
	}
	atomic_fetch_add_explicit(&job->sum, s, memory_order_relaxed);
}

/*
 * Read the weights products of the n matrices stream (the repacked copy,
 * or the mapped rows) once, with plain vector loads and no arithmetic, on
 * the pool's threads as qmat_mul_n shares out rows: a decode step's
 * memory traffic alone.  Items start at multiples of 8 bytes into each
 * stream, so *sum (when not NULL) is each stream's mem_read_sum added up.
 * Returns the bytes read.
 */
uint64_t
qmat_read_n(struct threadpool *pool, int n, const struct qmat *const *ms,
    uint64_t *sum)
{
	struct read_job		 job;
	struct read_span	*span;
	int64_t			 items = 0;
	uint64_t		 bytes = 0;
	int			 i;

	if (sum != NULL)
		*sum = 0;
	if (n < 1)
		return (0);
	span = xcalloc((size_t)n, sizeof *span);
	for (i = 0; i < n; i++) {
		span[i].p = ms[i]->packed != NULL ? ms[i]->packed : ms[i]->data;
		span[i].len = ms[i]->packed != NULL ? ms[i]->packed_bytes :
		    (size_t)ms[i]->rows * ms[i]->row_bytes;
		span[i].first = items;
		items += (int64_t)((span[i].len + READ_ITEM - 1) / READ_ITEM);
		bytes += span[i].len;
	}
	memset(&job, 0, sizeof job);
	job.span = span;
	job.n = n;
	job.isa = quant_isa();
	regions_init(&job.items, items, threadpool_size(pool));
	threadpool_run_any(pool, read_worker, &job);
	if (sum != NULL)
		*sum = atomic_load(&job.sum);
	free(span);
	return (bytes);
}
