/* forward.c: the ragged batched forward pass over paged KV, shared by every architecture. */

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "kvcache.h"
#include "matmul.h"
#include "model.h"
#include "quant.h"
#include "threadpool.h"
#include "util.h"

/*
 * Batch invariance.  A token's result must not depend on what else shares
 * its batch or on how its prompt was cut into chunks, so that scheduling
 * policies can mix prefill chunks and decode tokens freely.  Every step
 * below therefore computes each row with a fixed sequence of operations:
 * norms, RoPE and activations are per row; the matrix kernels promise the
 * same per row whatever the number of rows; and attention reads every key
 * and value back from the cache (after its F16 rounding, new tokens
 * included) and walks the pages of a query's past in position order with
 * an online softmax whose steps fall on the fixed block boundaries (the
 * AVX-512 and AVX2 kernels of attn_avx512.c and attn_avx2.c: on multiples
 * of ATTN_KEY_TILE).  The thread that runs a piece of work never changes
 * how it is computed, and the kernel follows the matrix kernels' variant
 * (quant_isa()).
 */

/* Query tokens of one entry handled by one attention task. */
#define ATTN_TILE	16
/* Rows of the output head computed per matrix call. */
#define LOGIT_CHUNK	16
/* Most tokens one pass over the layers stacks (see model_forward). */
#define FWD_MAX_ROWS	512

/*
 * Eight-lane vectors (GCC/Clang vector extensions): loaded and stored
 * through any float pointer without alignment or aliasing worries.
 */
typedef float v8sf __attribute__((vector_size(32), aligned(4), __may_alias__));
typedef uint16_t v8hu __attribute__((vector_size(16), aligned(2), __may_alias__));
typedef uint32_t v8su __attribute__((vector_size(32)));
typedef int32_t v8si __attribute__((vector_size(32)));

/* Helpers of the attention kernel, inlined into each instruction-set variant. */
#define ATTN_INLINE	static inline __attribute__((always_inline))

/* One unit of attention work: a tile of an entry's tokens for one KV head. */
struct attn_task {
	int		 entry;
	int		 kv_head;
	int		 i0, i1;	/* token range within the entry */
};

struct fwd_ctx {
	const struct model	*m;
	struct kv_pool		*pool;
	const struct fwd_batch	*b;
	int			*row0;		/* first activation row per entry */
	uint32_t		*pos0;		/* first new position per entry */
	uint32_t		 layer;
	const float		*q;		/* T x n_embd, RoPE applied */
	float			*att;		/* T x n_embd */
	struct attn_task	*tasks;
	int			 n_tasks;
	atomic_int		 next;
	float			*scratch;	/* per thread */
	size_t			 scratch_floats;
	int			 avx512;	/* attn_run_avx512 */
	int			 avx2;		/* attn_run_avx2 */
};

/*
 * Halves to floats, eight at a time, exactly (normals, subnormals,
 * infinities and NaNs): the exponent and mantissa shifted into a float's
 * place and rebiased by a multiply, which also normalizes subnormals.
 * Written with vector extensions so every instruction set gets the same
 * (exact) results from one source.
 */
ATTN_INLINE void
h2f8(float *dst, const uint16_t *src)
{
	v8su	h, em, bits, inf;
	v8si	big;
	v8sf	f;

	h = __builtin_convertvector(*(const v8hu *)src, v8su);
	em = h & 0x7fff;
	bits = em << 13;
	f = (v8sf)bits * 0x1p112f;
	big = (v8si)(em >= 0x7c00);
	inf = bits | 0x7f800000;
	bits = ((v8su)f & ~(v8su)big) | (inf & (v8su)big);
	*(v8sf *)dst = (v8sf)(bits | (h & 0x8000) << 16);
}

/* Eight copies of f. */
#define SPLAT(f)	((v8sf){ (f), (f), (f), (f), (f), (f), (f), (f) })

/*
 * y = e^(x - sub) for eight x with x - sub <= 0: x - sub = n ln 2 + r with
 * |r| <= ln 2 / 2, a degree-6 polynomial for e^r (relative error about
 * 1e-7) and 2^n built in the exponent bits.  Arguments below -87 give 0
 * and garbage lanes (NaN, positive) give 1 without any slow path.  The
 * same operations in every lane and every instruction set, so results
 * are reproducible.  (Pointers, not vector values, cross the call so the
 * ABI does not depend on the instruction set.)
 */
ATTN_INLINE void
exp8(float *y, const float *x, float sub)
{
	v8si	under, bad, ni;
	v8sf	v, nf, r, p;

	v = *(const v8sf *)x - sub;
	under = v < SPLAT(-87.0f);
	v = (v8sf)(((v8si)v & ~under) | ((v8si)SPLAT(-87.0f) & under));
	bad = (v > SPLAT(0.0f)) | (v != v);
	v = (v8sf)((v8si)v & ~bad);
	nf = v * SPLAT(1.44269504f) + SPLAT(12582912.0f);
	nf = nf - SPLAT(12582912.0f);
	r = v - nf * SPLAT(0.693145751953125f);
	r = r - nf * SPLAT(1.428606765330187e-06f);
	p = SPLAT(1.0f / 720);
	p = p * r + SPLAT(1.0f / 120);
	p = p * r + SPLAT(1.0f / 24);
	p = p * r + SPLAT(1.0f / 6);
	p = p * r + SPLAT(0.5f);
	p = p * r + SPLAT(1.0f);
	p = p * r + SPLAT(1.0f);
	ni = __builtin_convertvector(nf, v8si);
	p = p * (v8sf)((ni + 127) << 23);
	*(v8sf *)y = (v8sf)((v8si)p & ~under);
}

/* y = x / rms(x) * w for one row of n. */
static void
rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
	double	ss = 0.0;
	float	scale;
	int	i;

	for (i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	scale = (float)(1.0 / sqrt(ss / n + eps));
	for (i = 0; i < n; i++)
		y[i] = x[i] * scale * w[i];
}

/*
 * Rotate pairs of each head's first n_rot dimensions by the position's
 * angles: adjacent pairs (x[2i], x[2i+1]), or with neox the halves
 * (x[i], x[i + n_rot/2]).  The rest of the head is left as it is.
 */
static void
rope(float *x, int n_heads, int head_dim, int n_rot, const float *cs,
    int neox)
{
	float	x0, x1, c, s;
	int	h, i, a, b;

	for (h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;

		for (i = 0; i < n_rot / 2; i++) {
			a = neox ? i : 2 * i;
			b = neox ? i + n_rot / 2 : 2 * i + 1;
			c = cs[2 * i];
			s = cs[2 * i + 1];
			x0 = v[a];
			x1 = v[b];
			v[a] = x0 * c - x1 * s;
			v[b] = x0 * s + x1 * c;
		}
	}
}

/* GELU with the tanh approximation, for Gemma's gate. */
static inline float
gelu_tanh(float x)
{
	return (0.5f * x * (1.0f + tanhf(0.7978845608f * x *
	    (1.0f + 0.044715f * x * x))));
}

/* cap * tanh(x / cap) over n values: Gemma 2's soft-capping. */
static void
softcap(float *x, int n, float cap)
{
	int	i;

	for (i = 0; i < n; i++)
		x[i] = cap * tanhf(x[i] / cap);
}

/*
 * Scores of one query against the bs slots of a transposed key block.
 * Four partial sums over head_dim (d mod 4) keep eight dependency chains
 * in flight; they are combined in a fixed order.
 */
ATTN_INLINE void
attn_scores(float *s, const float *q, const float *k, int hd, int bs)
{
	v8sf		 a0, a1, a2, a3;
	const float	*kj;
	int		 j, d;

	for (j = 0; j < bs; j += 8) {
		kj = k + j;
		a0 = a1 = a2 = a3 = SPLAT(0.0f);
		for (d = 0; d + 4 <= hd; d += 4) {
			a0 += q[d] * *(const v8sf *)(kj + (size_t)d * bs);
			a1 += q[d + 1] * *(const v8sf *)(kj + (size_t)(d + 1) * bs);
			a2 += q[d + 2] * *(const v8sf *)(kj + (size_t)(d + 2) * bs);
			a3 += q[d + 3] * *(const v8sf *)(kj + (size_t)(d + 3) * bs);
		}
		for (; d < hd; d++)
			a0 += q[d] * *(const v8sf *)(kj + (size_t)d * bs);
		*(v8sf *)(s + j) = (a0 + a1) + (a2 + a3);
	}
}

/*
 * Fold one KV block into a query's online softmax state: running maximum
 * mx, eight lanes of running sum lsum, unnormalized output acc.  The
 * block's valid slots lo..nv-1 are scored, soft-capped when cap is not 0
 * (the rest masked to e^-inf = 0), the
 * state is rescaled to the new maximum and the weighted values are added
 * in slot order, two slots interleaved, each output chunk in registers.
 */
ATTN_INLINE void
attn_block(float *acc, float *mx, float *lsum, float *s, const float *q,
    const float *k, const float *v, int hd, int bs, int lo, int nv, float cap)
{
	const float	*v0, *v1;
	float		 m, sc, l, t[8];
	v8sf		 r0, r1, mv, x;
	v8si		 gt;
	int		 j, d;

	attn_scores(s, q, k, hd, bs);
	if (cap != 0.0f) {
		for (j = lo; j < nv; j++)
			s[j] = cap * tanhf(s[j] / cap);
	}
	for (j = 0; j < lo; j++)
		s[j] = -INFINITY;	/* before the sliding window */
	for (j = nv; j < bs; j++)
		s[j] = -INFINITY;
	mv = SPLAT(*mx);
	for (j = 0; j < bs; j += 8) {
		x = *(v8sf *)(s + j);
		gt = x > mv;
		mv = (v8sf)(((v8si)x & gt) | ((v8si)mv & ~gt));
	}
	m = mv[0];
	for (j = 1; j < 8; j++)
		m = mv[j] > m ? mv[j] : m;
	for (j = 0; j < 8; j++)
		t[j] = *mx;
	exp8(t, t, m);
	sc = t[0];		/* 1 when the maximum holds, 0 at the start */
	*mx = m;
	r0 = *(v8sf *)lsum * sc;
	for (j = 0; j < bs; j += 8) {
		exp8(s + j, s + j, m);
		r0 += *(v8sf *)(s + j);
	}
	*(v8sf *)lsum = r0;

	if ((hd & 7) == 0) {
		for (d = 0; d < hd; d += 8) {
			r0 = *(v8sf *)(acc + d) * sc;
			r1 = SPLAT(0.0f);
			v0 = v + d;
			for (j = 0; j + 2 <= nv; j += 2) {
				v1 = v0 + (size_t)j * hd;
				r0 += s[j] * *(const v8sf *)v1;
				r1 += s[j + 1] * *(const v8sf *)(v1 + hd);
			}
			if (j < nv)
				r0 += s[j] * *(const v8sf *)(v0 + (size_t)j * hd);
			*(v8sf *)(acc + d) = r0 + r1;
		}
	} else {
		for (d = 0; d < hd; d++) {
			l = acc[d] * sc;
			for (j = 0; j < nv; j++)
				l += s[j] * v[(size_t)j * hd + d];
			acc[d] = l;
		}
	}
}

/* Floats of per-thread attention scratch for a model. */
static size_t
attn_scratch_floats(const struct model_info *i)
{
	size_t	hd = i->head_dim, bs = i->kv.block_size;
	size_t	nq = (size_t)ATTN_TILE * (i->n_head / i->n_head_kv);
	/* queries, accumulators, maxima, 8-lane sums, K and V blocks, scores */
	size_t	n = 2 * nq * hd + 9 * nq + 2 * hd * bs + bs;
	size_t	n512 = attn_avx512_scratch_floats(ATTN_JOB_TOKENS,
		    (int)(i->n_head / i->n_head_kv), (int)hd);
	size_t	n256 = attn_avx2_scratch_floats(ATTN_JOB_TOKENS,
		    (int)(i->n_head / i->n_head_kv), (int)hd);
	size_t	n16 = attn_i16_scratch_floats(ATTN_JOB_TOKENS,
		    (int)(i->n_head / i->n_head_kv), (int)hd);

	n = n > n512 ? n : n512;
	n = n > n16 ? n : n16;
	return (n > n256 ? n : n256);
}

/*
 * Run one attention task: a tile of queries of one entry on one KV head.
 * On x86-64 it is also built for AVX2 and picked at load time; the vector
 * extension code and the lack of contraction give bit-identical results
 * in every variant.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)	/* its resolver runs before TSan's runtime */
__attribute__((target_clones("avx2", "default")))
#endif
static void
attn_task_run(struct fwd_ctx *c, const struct attn_task *t, float *scratch)
{
	const struct model_info	*mi = &c->m->info;
	const struct kv_pool	*pool = c->pool;
	const struct fwd_entry	*e = &c->b->entries[t->entry];
	const struct kv_seq	*seq = e->seq;
	const int		 hd = mi->head_dim, bs = mi->kv.block_size;
	const int		 grp = mi->n_head / mi->n_head_kv;
	const int		 nq = (t->i1 - t->i0) * grp;
	const int		 f16 = pool->layout.type == KV_TYPE_F16;
	const float		 qscale = c->m->hp.q_scale;
	const float		 cap = c->m->hp.attn_softcap;
	const uint32_t		 qd = mi->q_dim;
	const uint32_t		 win = c->m->layers[c->layer].swa ? mi->n_swa : 0;
	float			*qs, *acc, *mx, *sum, *kf, *vf, *s, l;
	const float		*kp, *vp;
	uint32_t		 pos0 = c->pos0[t->entry], p, last, blk, b;
	int			 i, hh, qi, j, nv, nvmax, d, row, lo;
	uint32_t		 first, b0;

	qs = scratch;
	acc = qs + (size_t)nq * hd;
	mx = acc + (size_t)nq * hd;
	sum = mx + nq;
	kf = sum + (size_t)8 * nq;
	vf = kf + (size_t)hd * bs;
	s = vf + (size_t)hd * bs;

	for (i = t->i0; i < t->i1; i++) {
		row = c->row0[t->entry] + i;
		for (hh = 0; hh < grp; hh++) {
			const float *q = c->q + (size_t)row * qd +
			    (size_t)(t->kv_head * grp + hh) * hd;

			qi = (i - t->i0) * grp + hh;
			for (d = 0; d < hd; d++)
				qs[(size_t)qi * hd + d] = q[d] * qscale;
			memset(acc + (size_t)qi * hd, 0, hd * sizeof *acc);
			mx[qi] = -INFINITY;
			memset(sum + (size_t)8 * qi, 0, 8 * sizeof *sum);
		}
	}

	/*
	 * A sliding window hides the keys more than win - 1 positions
	 * back: blocks wholly before the tile's first query's window are
	 * skipped, and each query skips those before its own.
	 */
	last = pos0 + t->i1 - 1;
	first = win != 0 && pos0 + t->i0 + 1 > win ? pos0 + t->i0 + 1 - win : 0;
	for (b = first / bs; b <= last / bs; b++) {
		blk = seq->blocks[b];
		nvmax = last - b * bs + 1 < (uint32_t)bs ? (int)(last - b * bs + 1) :
		    bs;
		if (f16) {
			const uint16_t *kh = kv_block_k(pool, blk, c->layer,
			    t->kv_head);
			const uint16_t *vh = kv_block_v(pool, blk, c->layer,
			    t->kv_head);

			/* Whole groups of 8: block_size is a multiple of 8. */
			for (d = 0; d < hd; d++) {
				for (j = 0; j < nvmax; j += 8)
					h2f8(kf + (size_t)d * bs + j,
					    kh + (size_t)d * bs + j);
			}
			for (j = 0; j < nvmax * hd; j += 8)
				h2f8(vf + j, vh + j);
			kp = kf;
			vp = vf;
		} else {
			kp = kv_block_k(pool, blk, c->layer, t->kv_head);
			vp = kv_block_v(pool, blk, c->layer, t->kv_head);
		}

		for (i = t->i0; i < t->i1; i++) {
			p = pos0 + i;
			if (p < b * bs)
				continue;	/* this block is in its future */
			b0 = win != 0 && p + 1 > win ? p + 1 - win : 0;
			if (b0 >= (b + 1) * bs)
				continue;	/* wholly before its window */
			lo = b0 > b * bs ? (int)(b0 - b * bs) : 0;
			nv = p - b * bs + 1 < (uint32_t)bs ? (int)(p - b * bs + 1) :
			    bs;
			for (hh = 0; hh < grp; hh++) {
				qi = (i - t->i0) * grp + hh;
				attn_block(acc + (size_t)qi * hd, &mx[qi], sum + 8 * qi,
				    s, qs + (size_t)qi * hd, kp, vp, hd, bs, lo, nv,
				    cap);
			}
		}
	}

	for (i = t->i0; i < t->i1; i++) {
		row = c->row0[t->entry] + i;
		for (hh = 0; hh < grp; hh++) {
			float *out = c->att + (size_t)row * qd +
			    (size_t)(t->kv_head * grp + hh) * hd;

			qi = (i - t->i0) * grp + hh;
			l = 0.0f;
			for (d = 0; d < 8; d++)
				l += sum[(size_t)8 * qi + d];
			for (d = 0; d < hd; d++)
				out[d] = acc[(size_t)qi * hd + d] / l;
		}
	}
}

/* Run an attention task with the AVX-512 or the AVX2 kernel. */
static void
attn_task_tiled(struct fwd_ctx *c, const struct attn_task *t, float *scratch)
{
	const struct model_info	*mi = &c->m->info;
	const size_t		 grp = mi->n_head / mi->n_head_kv;
	const size_t		 off = (size_t)(c->row0[t->entry] + t->i0) *
				    mi->q_dim + t->kv_head * grp * mi->head_dim;
	struct attn_job		 j;

	j.pool = c->pool;
	j.blocks = c->b->entries[t->entry].seq->blocks;
	j.layer = c->layer;
	j.kv_head = (uint32_t)t->kv_head;
	j.pos0 = c->pos0[t->entry] + (uint32_t)t->i0;
	j.n_tok = t->i1 - t->i0;
	j.grp = (int)grp;
	j.q = c->q + off;
	j.out = c->att + off;
	j.stride = mi->q_dim;
	j.qscale = c->m->hp.q_scale;
	j.cap = c->m->hp.attn_softcap;
	j.win = c->m->layers[c->layer].swa ? mi->n_swa : 0;
	/* I16 pools are for the 16-bit integer kernel, which reads no other. */
	if (c->pool->layout.type == KV_TYPE_I16)
		attn_run_i16(&j, scratch);
	else if (c->avx512 && c->m->attn_bf16)
		attn_run_bf16(&j, scratch);
	else if (c->avx512)
		attn_run_avx512(&j, scratch);
	else
		attn_run_avx2(&j, scratch);
}

/*
 * Thread body: take attention tasks until none are left, the last (the
 * longest: they see the most keys) first so the threads finish together.
 */
static void
attn_worker(void *arg, int ith, int nth)
{
	struct fwd_ctx	*c = arg;
	float		*scratch = c->scratch + (size_t)ith * c->scratch_floats;
	int		 k;

	(void)nth;
	while ((k = atomic_fetch_add(&c->next, 1)) < c->n_tasks) {
		if (c->avx512 || c->avx2)
			attn_task_tiled(c, &c->tasks[c->n_tasks - 1 - k], scratch);
		else
			attn_task_run(c, &c->tasks[c->n_tasks - 1 - k], scratch);
	}
}

/* Write the new tokens' keys and values of a layer into their pages. */
static void
kv_store(struct fwd_ctx *c, const float *k, const float *v)
{
	const struct model_info	*mi = &c->m->info;
	struct kv_pool		*pool = c->pool;
	const uint32_t		 hd = mi->head_dim, bs = mi->kv.block_size;
	const uint32_t		 kvd = hd * mi->n_head_kv;
	const struct fwd_entry	*e;
	uint32_t		 p, blk, slot, g, d;
	int			 n, i;
	size_t			 row;

	for (n = 0; n < c->b->n_seqs; n++) {
		e = &c->b->entries[n];
		for (i = 0; i < e->n_tokens; i++) {
			row = (size_t)c->row0[n] + i;
			p = c->pos0[n] + i;
			blk = e->seq->blocks[p / bs];
			slot = p % bs;
			for (g = 0; g < mi->n_head_kv; g++) {
				const float *ks = k + row * kvd + g * hd;
				const float *vs = v + row * kvd + g * hd;

				if (pool->layout.type == KV_TYPE_I16) {
					kv_put_i16(pool, blk, slot, c->layer, g,
					    ks, vs);
				} else if (pool->layout.type == KV_TYPE_F16) {
					uint16_t *kd = kv_block_k(pool, blk,
					    c->layer, g);
					uint16_t *vd = kv_block_v(pool, blk,
					    c->layer, g);

					for (d = 0; d < hd; d++) {
						kd[d * bs + slot] = f32_to_fp16(ks[d]);
						vd[slot * hd + d] = f32_to_fp16(vs[d]);
					}
				} else {
					float *kd = kv_block_k(pool, blk,
					    c->layer, g);
					float *vd = kv_block_v(pool, blk,
					    c->layer, g);

					for (d = 0; d < hd; d++) {
						kd[d * bs + slot] = ks[d];
						vd[slot * hd + d] = vs[d];
					}
				}
			}
		}
	}
}

/* Check a batch against the model, the pool and the sequences' pages. */
int
model_batch_check(const struct model_info *mi, const struct kv_pool *pool,
    const struct fwd_batch *b, int *total, char **cause)
{
	const struct kv_layout	*l = &pool->layout;
	const struct fwd_entry	*e;
	uint64_t		 T = 0, need;
	int			 n, k, i;

	if (l->n_layers != mi->kv.n_layers || l->n_kv_heads != mi->kv.n_kv_heads ||
	    l->head_dim != mi->kv.head_dim) {
		set_cause(cause, "kv pool of %u layers, %u heads of %u does not "
		    "fit the model (%u layers, %u heads of %u)", l->n_layers,
		    l->n_kv_heads, l->head_dim, mi->kv.n_layers,
		    mi->kv.n_kv_heads, mi->kv.head_dim);
		return (-1);
	}
	/* The tiled kernels run where the kernels' variant is AVX2 or more. */
	if (l->type == KV_TYPE_I16 && quant_isa() < QUANT_ISA_AVX2) {
		set_cause(cause, "kv pool of 16-bit codes needs AVX2 attention, "
		    "which this CPU lacks");
		return (-1);
	}
	if (b->n_seqs < 0 || (b->n_seqs > 0 && b->entries == NULL)) {
		set_cause(cause, "batch of %d entries is malformed", b->n_seqs);
		return (-1);
	}
	for (n = 0; n < b->n_seqs; n++) {
		e = &b->entries[n];
		if (e->seq == NULL || e->tokens == NULL) {
			set_cause(cause, "batch entry %d has no %s", n,
			    e->seq == NULL ? "sequence" : "tokens");
			return (-1);
		}
		if (e->n_tokens < 1) {
			set_cause(cause, "batch entry %d has %d tokens", n,
			    e->n_tokens);
			return (-1);
		}
		T += e->n_tokens;
		if (T > MODEL_MAX_BATCH_TOKENS) {
			set_cause(cause, "batch of more than %d tokens",
			    MODEL_MAX_BATCH_TOKENS);
			return (-1);
		}
		for (i = 0; i < e->n_tokens; i++) {
			if (e->tokens[i] < 0 ||
			    (uint32_t)e->tokens[i] >= mi->n_vocab) {
				set_cause(cause, "batch entry %d: token %d out "
				    "of range 0..%u", n, (int)e->tokens[i],
				    mi->n_vocab - 1);
				return (-1);
			}
		}
		need = (uint64_t)e->seq->n_tokens + e->n_tokens;
		if (need > mi->n_ctx) {
			set_cause(cause, "batch entry %d: %" PRIu64 " positions "
			    "exceed the context of %u", n, need, mi->n_ctx);
			return (-1);
		}
		if (need > kv_seq_capacity(pool, e->seq)) {
			set_cause(cause, "batch entry %d: sequence has kv blocks "
			    "for %" PRIu64 " tokens, needs %" PRIu64, n,
			    kv_seq_capacity(pool, e->seq), need);
			return (-1);
		}
		for (k = 0; k < n; k++) {
			if (b->entries[k].seq == e->seq) {
				set_cause(cause, "batch entries %d and %d share "
				    "a sequence", k, n);
				return (-1);
			}
		}
	}
	*total = (int)T;
	return (0);
}

/* malloc that reports failure through cause (sizes come from batches). */
static void *
alloc_floats(uint64_t n, char **cause)
{
	void	*p;

	if (n > SIZE_MAX / sizeof(float) / 2) {
		set_cause(cause, "activations of %" PRIu64 " floats are too "
		    "large", n);
		return (NULL);
	}
	p = malloc(n * sizeof(float) + 1);
	if (p == NULL)
		set_cause(cause, "cannot allocate %" PRIu64 " bytes of "
		    "activations", n * (uint64_t)sizeof(float));
	return (p);
}

/* Elementwise work over n floats, split between the pool's threads. */
struct ew_job {
	float		*a;
	const float	*b;
	size_t		 n;
	int		 op;		/* EW_ADD, EW_SILU, EW_GELU */
};
#define EW_ADD		0	/* a += b */
#define EW_SILU		1	/* a = silu(a) * b */
#define EW_GELU		2	/* a = gelu(a) * b */
/*
 * Below this many floats the work stays on the calling thread.  One
 * token's SiLU (n_ff floats) is above it: left to one
 * thread it kept the other waiting for about 1% of a decode step.
 */
#define EW_MIN_PARALLEL	(1 << 12)

/* y = silu(x) * b = x / (1 + e^-x) * b for eight x (any sign). */
ATTN_INLINE void
silu8(float *y, const float *x, const float *b)
{
	v8sf	v = *(const v8sf *)x, t;
	v8si	neg = v < SPLAT(0.0f);

	/* e^-|x| <= 1 keeps exp8 in range: for x < 0, x e^x / (1 + e^x). */
	*(v8sf *)y = (v8sf)((v8si)v | (v8si)SPLAT(-0.0f));
	exp8((float *)&t, y, 0.0f);
	*(v8sf *)y = (v8sf)(((v8si)(v * t) & neg) | ((v8si)v & ~neg)) /
	    (SPLAT(1.0f) + t) * *(const v8sf *)b;
}

/*
 * a[i] = silu(a[i]) * b[i] for i < n, eight at a time with silu8 (the
 * tail through a padded copy): the same bits for an element whatever the
 * variant and wherever a thread's share begins.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
static void
silu_mul(float *a, const float *b, size_t n)
{
	float	ta[8], tb[8];
	size_t	i, k;

	for (i = 0; i + 8 <= n; i += 8)
		silu8(a + i, a + i, b + i);
	if (i == n)
		return;
	memset(ta, 0, sizeof ta);
	memset(tb, 0, sizeof tb);
	for (k = 0; i + k < n; k++) {
		ta[k] = a[i + k];
		tb[k] = b[i + k];
	}
	silu8(ta, ta, tb);
	memcpy(a + i, ta, (n - i) * sizeof *a);
}

/*
 * Run fn on all of the pool's threads when its work (n floats, in at least
 * two parts) is large enough to pay for the wake-up, else on the caller.
 */
static void
run_if_large(struct threadpool *tp, void (*fn)(void *, int, int), void *arg,
    size_t n, int parts)
{
	if (tp != NULL && n >= EW_MIN_PARALLEL && parts > 1)
		threadpool_run(tp, fn, arg);
	else
		fn(arg, 0, 1);
}

/* One thread's share of an ew_job: the same operation on every element. */
static void
ew_worker(void *arg, int ith, int nth)
{
	const struct ew_job	*j = arg;
	size_t			 i = j->n * (size_t)ith / (size_t)nth;
	size_t			 end = j->n * (size_t)(ith + 1) / (size_t)nth;
	float			*a = j->a;
	const float		*b = j->b;

	switch (j->op) {
	case EW_ADD:
		for (; i < end; i++)
			a[i] += b[i];
		break;
	case EW_SILU:
		silu_mul(a + i, b + i, end - i);
		break;
	default:
		for (; i < end; i++)
			a[i] = gelu_tanh(a[i]) * b[i];
		break;
	}
}

/*
 * Run an elementwise operation, on all threads when it is large enough to
 * pay for the wake-up; each element's result is the same either way.
 */
static void
ew_run(struct threadpool *tp, int op, float *a, const float *b, size_t n)
{
	struct ew_job	j = { a, b, n, op };

	/* Elements split anywhere: as many parts as there are threads. */
	run_if_large(tp, ew_worker, &j, n, INT_MAX);
}

/* Rows normalized by rmsnorm, split between the pool's threads. */
struct norm_job {
	float		*y;
	const float	*x, *w;
	int		 rows, n;
	float		 eps;
};

/* One thread's share of a norm_job's rows. */
static void
norm_worker(void *arg, int ith, int nth)
{
	const struct norm_job	*j = arg;
	int			 r = (int)((int64_t)j->rows * ith / nth);
	int			 end = (int)((int64_t)j->rows * (ith + 1) / nth);

	for (; r < end; r++)
		rmsnorm(j->y + (size_t)r * j->n, j->x + (size_t)r * j->n, j->w, j->n,
		    j->eps);
}

/*
 * rmsnorm over rows of n (y may be x), on all threads when there are
 * enough of them to pay for the wake-up: a prompt's norms left to one
 * thread took about 3% of its time on two cores.
 */
static void
norm_run(struct threadpool *tp, float *y, const float *x, const float *w, int rows,
    int n, float eps)
{
	struct norm_job	j = { y, x, w, rows, n, eps };

	run_if_large(tp, norm_worker, &j, (size_t)rows * n, rows);
}

/* Rows of queries and keys rotated by rope, split between the threads. */
struct rope_job {
	float		*q, *k;
	const float	*cs;		/* nrot angle terms a row */
	int		 rows, qd, kvd, n_head, n_head_kv, hd, nrot, neox;
};

/* One thread's share of a rope_job's rows. */
static void
rope_worker(void *arg, int ith, int nth)
{
	const struct rope_job	*j = arg;
	int			 r = (int)((int64_t)j->rows * ith / nth);
	int			 end = (int)((int64_t)j->rows * (ith + 1) / nth);

	for (; r < end; r++) {
		const float *cr = j->cs + (size_t)r * j->nrot;

		rope(j->q + (size_t)r * j->qd, j->n_head, j->hd, j->nrot, cr, j->neox);
		rope(j->k + (size_t)r * j->kvd, j->n_head_kv, j->hd, j->nrot, cr,
		    j->neox);
	}
}

/* rope over the rows of q and k, on all threads when there are enough. */
static void
rope_run(struct threadpool *tp, struct rope_job *rj)
{
	run_if_large(tp, rope_worker, rj, (size_t)rj->rows * (rj->qd + rj->kvd),
	    rj->rows);
}

/* Run the model over a ragged batch of at most FWD_MAX_ROWS tokens. */
static int
forward_rows(const struct model *m, struct kv_pool *pool, struct fwd_batch *b,
    int T, struct threadpool *tp, char **cause)
{
	const struct model_info	*mi = &m->info;
	const int		 dim = mi->n_embd, ff = mi->n_ff;
	const int		 hd = mi->head_dim, nrot = mi->n_rot;
	const int		 kvd = hd * mi->n_head_kv, qd = mi->q_dim;
	const struct model_hparams *hp = &m->hp;
	struct fwd_ctx		 c;
	const struct model_layer *l;
	float			*x, *xb, *q, *k, *v, *att, *hb, *hb2, *cs, *buf;
	float			*lg;
	uint64_t		 nf;
	int			 n, i, j, row, nth, n_out, r;
	int			*out_rows;
	uint32_t		 layer;
	double			 ang;
	float			 ms;
	int			 tab, tile;

	nth = tp != NULL ? threadpool_size(tp) : 1;

	memset(&c, 0, sizeof c);
	c.m = m;
	c.pool = pool;
	c.b = b;
	c.scratch_floats = attn_scratch_floats(mi);
	c.avx512 = quant_isa() >= QUANT_ISA_AVX512;
	c.avx2 = quant_isa() == QUANT_ISA_AVX2;

	/* One allocation for all activations of this call. */
	nf = (uint64_t)T * (2 * dim + 2 * qd + 2 * kvd + 2 * ff + 2 * nrot) +
	    (uint64_t)nth * c.scratch_floats +
	    (uint64_t)LOGIT_CHUNK * (dim + mi->n_vocab);
	buf = alloc_floats(nf, cause);
	if (buf == NULL)
		return (-1);
	x = buf;
	xb = x + (size_t)T * dim;
	q = xb + (size_t)T * dim;
	att = q + (size_t)T * qd;
	k = att + (size_t)T * qd;
	v = k + (size_t)T * kvd;
	hb = v + (size_t)T * kvd;
	hb2 = hb + (size_t)T * ff;
	cs = hb2 + (size_t)T * ff;
	c.scratch = cs + (size_t)T * 2 * nrot;
	lg = c.scratch + (size_t)nth * c.scratch_floats;
	memset(c.scratch, 0, (size_t)nth * c.scratch_floats * sizeof(float));

	c.row0 = xreallocarray(NULL, b->n_seqs, sizeof *c.row0);
	c.pos0 = xreallocarray(NULL, b->n_seqs, sizeof *c.pos0);
	out_rows = xreallocarray(NULL, b->n_seqs, sizeof *out_rows);
	tile = c.avx512 || c.avx2 ? ATTN_JOB_TOKENS : ATTN_TILE;
	c.n_tasks = 0;
	for (n = row = 0; n < b->n_seqs; n++) {
		c.row0[n] = row;
		c.pos0[n] = b->entries[n].seq->n_tokens;
		row += b->entries[n].n_tokens;
		c.n_tasks += mi->n_head_kv *
		    ((b->entries[n].n_tokens + tile - 1) / tile);
	}
	c.tasks = xreallocarray(NULL, c.n_tasks, sizeof *c.tasks);
	for (n = j = 0; n < b->n_seqs; n++) {
		for (i = 0; i < b->entries[n].n_tokens; i += tile) {
			uint32_t g;

			for (g = 0; g < mi->n_head_kv; g++) {
				c.tasks[j].entry = n;
				c.tasks[j].kv_head = g;
				c.tasks[j].i0 = i;
				c.tasks[j].i1 = i + tile <
				    b->entries[n].n_tokens ? i + tile :
				    b->entries[n].n_tokens;
				j++;
			}
		}
	}

	/*
	 * Embeddings (scaled where the architecture says), and the RoPE
	 * angles of each row's position for both tables (global layers,
	 * then local ones).
	 */
	for (n = 0; n < b->n_seqs; n++) {
		const struct fwd_entry *e = &b->entries[n];

		for (i = 0; i < e->n_tokens; i++) {
			row = c.row0[n] + i;
			qmat_get_row(m->tok_embd, e->tokens[i],
			    x + (size_t)row * dim);
			if (hp->embd_scale != 1.0f) {
				for (j = 0; j < dim; j++)
					x[(size_t)row * dim + j] *=
					    hp->embd_scale;
			}
			for (tab = 0; tab < 2; tab++) {
				float *cr = cs + ((size_t)tab * T + row) * nrot;

				ms = m->rope[tab].mscale;
				for (j = 0; j < nrot / 2; j++) {
					ang = (double)(c.pos0[n] + i) *
					    m->rope[tab].inv_freq[j];
					cr[2 * j] = (float)cos(ang) * ms;
					cr[2 * j + 1] = (float)sin(ang) * ms;
				}
			}
		}
	}

	for (layer = 0; layer < mi->n_layers; layer++) {
		l = &m->layers[layer];
		c.layer = layer;

		norm_run(tp, xb, x, l->attn_norm, T, dim, mi->rms_eps);
		{	/* q, k and v in one run of the pool */
			const struct qmat *w[3] = { l->wq, l->wk, l->wv };
			float *const o[3] = { q, k, v };
			const int64_t ld[3] = { qd, kvd, kvd };

			qmat_mul_n(tp, 3, w, xb, T, o, ld);
		}
		if (l->bq != NULL) {
			for (row = 0; row < T; row++) {
				for (j = 0; j < qd; j++)
					q[(size_t)row * qd + j] += l->bq[j];
				for (j = 0; j < kvd; j++) {
					k[(size_t)row * kvd + j] += l->bk[j];
					v[(size_t)row * kvd + j] += l->bv[j];
				}
			}
		}
		if (l->q_norm != NULL) {
			norm_run(tp, q, q, l->q_norm, T * (int)mi->n_head, hd,
			    mi->rms_eps);
			norm_run(tp, k, k, l->k_norm, T * (int)mi->n_head_kv, hd,
			    mi->rms_eps);
		}
		{
			struct rope_job rj = { q, k, cs + (size_t)(l->swa ? 1 : 0) *
			    T * nrot, T, qd, kvd, (int)mi->n_head, (int)mi->n_head_kv,
			    hd, nrot, hp->rope_neox };

			rope_run(tp, &rj);
		}
		kv_store(&c, k, v);

		c.q = q;
		c.att = att;
		atomic_store(&c.next, 0);
		if (tp != NULL)
			threadpool_run(tp, attn_worker, &c);
		else
			attn_worker(&c, 0, 1);

		qmat_mul(tp, l->wo, att, T, xb, dim);
		if (l->post_attn_norm != NULL)
			norm_run(tp, xb, xb, l->post_attn_norm, T, dim, mi->rms_eps);
		ew_run(tp, EW_ADD, x, xb, (size_t)T * dim);

		norm_run(tp, xb, x, l->ffn_norm, T, dim, mi->rms_eps);
		{	/* gate and up in one run of the pool */
			const struct qmat *w[2] = { l->w_gate, l->w_up };
			float *const o[2] = { hb, hb2 };
			const int64_t ld[2] = { ff, ff };

			qmat_mul_n(tp, 2, w, xb, T, o, ld);
		}
		ew_run(tp, hp->ffn_gelu ? EW_GELU : EW_SILU, hb, hb2,
		    (size_t)T * ff);
		qmat_mul(tp, l->w_down, hb, T, xb, dim);
		if (l->post_ffn_norm != NULL)
			norm_run(tp, xb, xb, l->post_ffn_norm, T, dim, mi->rms_eps);
		ew_run(tp, EW_ADD, x, xb, (size_t)T * dim);
	}

	/* The output head, only for the rows that want logits. */
	for (n = n_out = 0; n < b->n_seqs; n++) {
		if (b->entries[n].logits != NULL)
			out_rows[n_out++] = n;
	}
	for (i = 0; i < n_out; i += LOGIT_CHUNK) {
		int	cnt = n_out - i < LOGIT_CHUNK ? n_out - i : LOGIT_CHUNK;
		float	*xo = lg + (size_t)LOGIT_CHUNK * mi->n_vocab;

		for (r = 0; r < cnt; r++) {
			const struct fwd_entry *e = &b->entries[out_rows[i + r]];

			row = c.row0[out_rows[i + r]] + e->n_tokens - 1;
			rmsnorm(xo + (size_t)r * dim, x + (size_t)row * dim,
			    m->output_norm, dim, mi->rms_eps);
		}
		qmat_mul(tp, m->output, xo, cnt, lg, mi->n_vocab);
		for (r = 0; r < cnt; r++) {
			float *lr = lg + (size_t)r * mi->n_vocab;

			if (m->output_bias != NULL) {
				for (j = 0; j < (int)mi->n_vocab; j++)
					lr[j] += m->output_bias[j];
			}
			if (hp->final_softcap != 0.0f)
				softcap(lr, mi->n_vocab, hp->final_softcap);
		}
		for (r = 0; r < cnt; r++) {
			memcpy(b->entries[out_rows[i + r]].logits,
			    lg + (size_t)r * mi->n_vocab,
			    mi->n_vocab * sizeof(float));
		}
	}

	for (n = 0; n < b->n_seqs; n++)
		b->entries[n].seq->n_tokens += b->entries[n].n_tokens;

	free(c.tasks);
	free(out_rows);
	free(c.pos0);
	free(c.row0);
	free(buf);
	return (0);
}

/*
 * Run the model over a ragged batch.  A batch of more than FWD_MAX_ROWS
 * tokens runs as consecutive passes over cuts of it, entries split where
 * a cut falls (only a piece that ends its entry asks for logits): the
 * activations of one pass then stay near the caches the matrix kernels
 * stream them through, and a sequence's later piece sees its earlier
 * pieces' keys and values in the cache, so by chunk invariance the
 * results are the same bits as one pass.
 */
int
model_forward(const struct model *m, struct kv_pool *pool, struct fwd_batch *b,
    struct threadpool *tp, char **cause)
{
	struct fwd_batch	 sb;
	struct fwd_entry	*pe;
	uint32_t		*was;
	int			 T, n, off, room, take, rc = 0;

	if (model_batch_check(&m->info, pool, b, &T, cause) != 0)
		return (-1);
	if (b->n_seqs == 0)
		return (0);
	if (T <= FWD_MAX_ROWS)
		return (forward_rows(m, pool, b, T, tp, cause));

	pe = xreallocarray(NULL, b->n_seqs, sizeof *pe);
	was = xreallocarray(NULL, b->n_seqs, sizeof *was);
	for (n = 0; n < b->n_seqs; n++)
		was[n] = b->entries[n].seq->n_tokens;
	sb.entries = pe;
	for (n = off = 0; n < b->n_seqs && rc == 0;) {
		sb.n_seqs = 0;
		for (room = FWD_MAX_ROWS; n < b->n_seqs && room > 0;
		    room -= take) {
			const struct fwd_entry *e = &b->entries[n];

			take = e->n_tokens - off < room ? e->n_tokens - off :
			    room;
			pe[sb.n_seqs] = *e;
			pe[sb.n_seqs].tokens = e->tokens + off;
			pe[sb.n_seqs].n_tokens = take;
			if (off + take < e->n_tokens)
				pe[sb.n_seqs].logits = NULL;
			sb.n_seqs++;
			off += take;
			if (off == e->n_tokens) {
				n++;
				off = 0;
			}
		}
		rc = forward_rows(m, pool, &sb, FWD_MAX_ROWS - room, tp,
		    cause);
	}
	/* A failed pass leaves no sequence longer: the contract's "nothing changed". */
	if (rc != 0) {
		for (n = 0; n < b->n_seqs; n++)
			b->entries[n].seq->n_tokens = was[n];
	}
	free(was);
	free(pe);
	return (rc);
}
