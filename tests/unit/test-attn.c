/*
 * test-attn.c: the AVX-512, AVX-512 bf16, AVX2 and AVX2 16-bit integer
 * attention kernels against a reference.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "kvcache.h"
#include "quant.h"
#include "tap.h"

/* One shape of the tests. */
struct acase {
	int		 hd, grp, bs;
	int		 kv;		/* KV_TYPE_F32, _F16 or _I16 */
	int		 n_keys;	/* positions stored */
	int		 n_tok;		/* queries: the last n_tok positions */
	float		 cap;
	uint32_t	 win;
	float		 kscale;	/* keys' range; 0: 3 (12 with a cap) */
};

/* The largest head_dim of the cases. */
#define HD_MAX	256

/* How a kernel rounds the queries, keys and values it multiplies. */
#define R_EXACT	0
#define R_BF16	1	/* to bf16; needs AVX512-BF16 */
#define R_I16	2	/* to 16-bit integer codes of each one's largest */


/* One kernel under test. */
struct kernel {
	const char	*name;
	int		 isa;		/* quant_isa_supported() must say yes */
	int		 round;		/* R_* */
	size_t		(*scratch_floats)(int, int, int);
	void		(*run)(const struct attn_job *, float *);
};

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

/* Uniform in [-1, 1). */
static float
frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return ((float)(rng >> 40) / (float)(1 << 23) - 1.0f);
}

/* Stored key or value element back as a float (after its rounding). */
static float
kv_get(const struct kv_pool *pool, const struct kv_seq *seq, int v, int head,
    int pos, int d)
{
	const struct kv_layout *l = &pool->layout;
	uint32_t	blk = seq->blocks[pos / l->block_size];
	size_t		slot = pos % l->block_size;
	size_t		i = v ? slot * l->head_dim + d : (size_t)d * l->block_size +
			    slot;
	const void	*b = v ? kv_block_v(pool, blk, 0, head) :
			    kv_block_k(pool, blk, 0, head);

	if (l->type == KV_TYPE_I16) {
		i = v ? ((slot / 2) * l->head_dim + d) * 2 + slot % 2 :
		    ((size_t)(d / 2) * l->block_size + slot) * 2 + d % 2;
		return ((float)((const int16_t *)b)[i] * (v ?
		    kv_block_vscale(pool, blk, 0, head) :
		    kv_block_kscale(pool, blk, 0, head))[slot]);
	}
	if (l->type == KV_TYPE_F16)
		return (fp16_to_f32(((const uint16_t *)b)[i]));
	return (((const float *)b)[i]);
}

/* Store a random key and value for every position of seq. */
static void
kv_fill(struct kv_pool *pool, struct kv_seq *seq, int n_kv, int n, float kscale)
{
	const struct kv_layout *l = &pool->layout;
	uint32_t	blk, slot, d;
	int		p, g;
	float		k, v, kr[HD_MAX], vr[HD_MAX];

	for (p = 0; p < n; p++) {
		blk = seq->blocks[p / l->block_size];
		slot = p % l->block_size;
		for (g = 0; g < n_kv; g++)
			for (d = 0; d < l->head_dim; d++) {
				k = frand() * kscale;
				v = frand();
				if (l->type == KV_TYPE_I16) {
					kr[d] = k;
					vr[d] = v;
					if (d + 1 == l->head_dim)
						kv_put_i16(pool, blk, slot, 0, g,
						    kr, vr);
				} else if (l->type == KV_TYPE_F16) {
					((uint16_t *)kv_block_k(pool, blk, 0,
					    g))[d * l->block_size + slot] =
					    f32_to_fp16(k);
					((uint16_t *)kv_block_v(pool, blk, 0,
					    g))[slot * l->head_dim + d] =
					    f32_to_fp16(v);
				} else {
					((float *)kv_block_k(pool, blk, 0,
					    g))[d * l->block_size + slot] = k;
					((float *)kv_block_v(pool, blk, 0,
					    g))[slot * l->head_dim + d] = v;
				}
			}
	}
}

/*
 * NaN keys and values at positions p0..p1-1: scales of an I16 pool, every
 * element of an F16 or F32 one.
 */
static void
kv_poison(struct kv_pool *pool, struct kv_seq *seq, int n_kv, int p0, int p1)
{
	const struct kv_layout *l = &pool->layout;
	uint32_t	blk, slot, d;
	int		p, g;

	for (p = p0; p < p1; p++)
		for (g = 0; g < n_kv; g++) {
			blk = seq->blocks[p / l->block_size];
			slot = p % l->block_size;
			if (l->type == KV_TYPE_I16) {
				kv_block_kscale(pool, blk, 0, g)[slot] = NAN;
				kv_block_vscale(pool, blk, 0, g)[slot] = NAN;
				continue;
			}
			for (d = 0; d < l->head_dim; d++)
				if (l->type == KV_TYPE_F16) {
					((uint16_t *)kv_block_k(pool, blk, 0,
					    g))[d * l->block_size + slot] =
					    f32_to_fp16(NAN);
					((uint16_t *)kv_block_v(pool, blk, 0,
					    g))[slot * l->head_dim + d] =
					    f32_to_fp16(NAN);
				} else {
					((float *)kv_block_k(pool, blk, 0,
					    g))[d * l->block_size + slot] = NAN;
					((float *)kv_block_v(pool, blk, 0,
					    g))[slot * l->head_dim + d] = NAN;
				}
		}
}

/* x rounded to the nearest bf16 (ties to even), as vcvtneps2bf16 does. */
static float
bf16_round(float x)
{
	uint32_t	u;

	memcpy(&u, &x, sizeof u);
	u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
	memcpy(&x, &u, sizeof x);
	return (x);
}

/*
 * x as a code of amax at max, back as a value: the nearest code (ties to
 * even) of x times max / amax, as the 16-bit integer kernel makes them.
 */
static double
i16_round(float x, float amax, int max)
{
	float	inv;

	if (amax <= 0)
		return (0);
	inv = (float)max / amax;
	return (nearbyintf(x * inv) * ((double)amax / max));
}

/* The largest |element| of a stored key or value of head_dim hd. */
static float
kv_amax(const struct kv_pool *pool, const struct kv_seq *seq, int v, int head,
    int pos, int hd)
{
	float	m = 0;
	int	d;

	for (d = 0; d < hd; d++)
		m = fmaxf(m, fabsf(kv_get(pool, seq, v, head, pos, d)));
	return (m);
}

/*
 * A stored key or value as a kernel that rounds with rd sees it; amax is
 * its largest |element| (kv_amax), for R_I16.
 */
static double
kv_in(const struct kv_pool *pool, const struct kv_seq *seq, int v, int head,
    int pos, int d, int rd, float amax)
{
	float	x = kv_get(pool, seq, v, head, pos, d);

	if (rd == R_BF16)
		return (bf16_round(x));
	if (rd == R_I16)
		return (i16_round(x, amax, v ? KV_I16_VMAX :
		    kv_i16_kmax(pool->layout.head_dim)));
	return (x);
}

/*
 * Plain attention of one query (already scaled) at position p, in double,
 * of the scaled query, keys and values rounded as rd says first (the
 * 16-bit integer kernel's rounding of the softmax weights is not
 * repeated).
 */
static void
reference(const struct kv_pool *pool, const struct kv_seq *seq, int head,
    const struct acase *c, const float *q, float qscale, int p, int rd,
    double *out)
{
	double	*s, *qr, m = -INFINITY, sum = 0, x;
	float	 qa = 0, a;
	int	 j0, j, d;

	s = calloc(p + 1, sizeof *s);
	qr = calloc(c->hd, sizeof *qr);
	for (d = 0; d < c->hd; d++)
		qa = fmaxf(qa, fabsf(q[d] * qscale));
	for (d = 0; d < c->hd; d++)
		qr[d] = rd == R_BF16 ? bf16_round(q[d] * qscale) : rd == R_I16 ?
		    i16_round(q[d] * qscale, qa, kv_i16_kmax((uint32_t)c->hd)) :
		    q[d] * qscale;
	j0 = c->win != 0 && (uint32_t)p + 1 > c->win ? p + 1 - (int)c->win : 0;
	for (j = j0; j <= p; j++) {
		a = rd == R_I16 ? kv_amax(pool, seq, 0, head, j, c->hd) : 0;
		x = 0;
		for (d = 0; d < c->hd; d++)
			x += qr[d] * kv_in(pool, seq, 0, head, j, d, rd, a);
		if (c->cap != 0.0f)
			x = c->cap * tanh(x / c->cap);
		s[j] = x;
		m = x > m ? x : m;
	}
	for (d = 0; d < c->hd; d++)
		out[d] = 0;
	for (j = j0; j <= p; j++) {
		s[j] = exp(s[j] - m);
		sum += s[j];
		a = rd == R_I16 ? kv_amax(pool, seq, 1, head, j, c->hd) : 0;
		for (d = 0; d < c->hd; d++)
			out[d] += s[j] * kv_in(pool, seq, 1, head, j, d, rd, a);
	}
	for (d = 0; d < c->hd; d++)
		out[d] /= sum;
	free(qr);
	free(s);
}

/*
 * Run one case on kernel kn: the queries as one job per KV head, then cut
 * into chunks of 1, 7 and 16 tokens (which must give the same bits),
 * against the reference.
 */
static void
run_case(const struct kernel *kn, const struct acase *c)
{
	static const int	 chunks[] = { 1, 7, 16 };
	const int		 n_kv = 2, nh = n_kv * c->grp;
	const size_t		 stride = (size_t)nh * c->hd;
	const int		 pos0 = c->n_keys - c->n_tok;
	const float		 qscale = 1.0f / sqrtf((float)c->hd);
	struct kv_layout	 lay = { 1, (uint32_t)n_kv, (uint32_t)c->hd,
				    (uint32_t)c->bs, (uint32_t)c->kv };
	struct kv_pool		*pool;
	struct kv_seq		 seq;
	struct attn_job		 j;
	float			*q, *out, *out2, *scratch;
	double			*ref, err = 0, mag = 0, tol;
	char			*cause = NULL;
	int			 g, t, h, d, k, i, same = 1;

	pool = kv_pool_create(&lay, kv_layout_blocks_for(&lay, c->n_keys) + 1,
	    &cause);
	if (!ok(pool != NULL, "pool: %s", cause ? cause : "made"))
		return;
	memset(&seq, 0, sizeof seq);
	kv_seq_reserve(pool, &seq, (uint32_t)c->n_keys);
	/*
	 * The slots past the last key and those before every query's window
	 * hold NaN (codes -1 and NaN scales in an I16 pool), which must not
	 * reach an output: the 16-bit kernel copies whole vectors of eight
	 * slots, the bf16 one pairs neighbouring keys.
	 */
	memset(pool->data, 0xff, (size_t)pool->n_blocks * pool->block_bytes);
	kv_fill(pool, &seq, n_kv, c->n_keys, c->kscale != 0.0f ? c->kscale :
	    c->cap != 0.0f ? 12.0f : 3.0f);
	if (c->win != 0)
		kv_poison(pool, &seq, n_kv, 0, (int)(c->n_keys - c->n_tok +
		    1) - (int)c->win);
	/*
	 * The last key a NaN: only the last query sees it, and the others,
	 * which skip it in the same tile, must stay finite.
	 */
	if (c->n_tok > 1)
		kv_poison(pool, &seq, n_kv, c->n_keys - 1, c->n_keys);
	q = malloc((size_t)c->n_tok * stride * sizeof *q);
	out = malloc((size_t)c->n_tok * stride * sizeof *out);
	out2 = malloc((size_t)c->n_tok * stride * sizeof *out2);
	ref = malloc((size_t)c->hd * sizeof *ref);
	scratch = malloc(kn->scratch_floats(c->n_tok, c->grp, c->hd) *
	    sizeof *scratch);
	/* NaN everywhere: a kernel that reads scratch it did not write shows. */
	memset(scratch, 0xff, kn->scratch_floats(c->n_tok, c->grp, c->hd) *
	    sizeof *scratch);
	for (i = 0; i < c->n_tok * (int)stride; i++)
		q[i] = frand() * 2.0f;

	memset(&j, 0, sizeof j);
	j.pool = pool;
	j.blocks = seq.blocks;
	j.grp = c->grp;
	j.stride = stride;
	j.qscale = qscale;
	j.cap = c->cap;
	j.win = c->win;
	for (g = 0; g < n_kv; g++) {
		j.kv_head = (uint32_t)g;
		j.pos0 = (uint32_t)pos0;
		j.n_tok = c->n_tok;
		j.q = q + (size_t)g * c->grp * c->hd;
		j.out = out + (size_t)g * c->grp * c->hd;
		kn->run(&j, scratch);
	}
	for (t = 0; t < c->n_tok; t++)
		for (h = 0; h < nh; h++) {
			const float *qr = q + t * stride + (size_t)h * c->hd;
			const float *o = out + t * stride + (size_t)h * c->hd;

			/* The last query sees the NaN key. */
			if (c->n_tok > 1 && t == c->n_tok - 1)
				continue;
			reference(pool, &seq, h / c->grp, c, qr, qscale,
			    pos0 + t, kn->round, ref);
			for (d = 0; d < c->hd; d++) {
				err = isfinite(o[d]) ? fmax(err, fabs(o[d] -
				    ref[d])) : INFINITY;
				mag = fmax(mag, fabs(ref[d]));
			}
		}
	/*
	 * bf16: the weights' own rounding (2^-9 of each) is all that the
	 * reference does not share; values lie in [-1, 1].  16-bit integers:
	 * the weights' codes, each within half a unit of its row's largest
	 * at KV_I16_VMAX, in a sum over the keys divided by their sum.
	 */
	tol = kn->round == R_BF16 ? 2.2e-3 : kn->round == R_I16 ? 1e-3 : 2e-5;
	ok(err <= tol * (mag > 1 ? mag : 1), "%s: hd %d grp %d bs %d %s keys %d "
	    "queries %d cap %g win %u: within %g of the reference (%.3g)",
	    kn->name, c->hd, c->grp, c->bs, c->kv == KV_TYPE_I16 ? "I16" :
	    c->kv == KV_TYPE_F16 ? "F16" : "F32", c->n_keys,
	    c->n_tok, c->cap, c->win, tol, err);

	for (k = 0; k < 3; k++) {
		memset(out2, 0xff, (size_t)c->n_tok * stride * sizeof *out2);
		for (t = 0; t < c->n_tok; t += chunks[k])
			for (g = 0; g < n_kv; g++) {
				j.kv_head = (uint32_t)g;
				j.pos0 = (uint32_t)(pos0 + t);
				j.n_tok = c->n_tok - t < chunks[k] ? c->n_tok - t :
				    chunks[k];
				j.q = q + t * stride + (size_t)g * c->grp * c->hd;
				j.out = out2 + t * stride + (size_t)g * c->grp *
				    c->hd;
				kn->run(&j, scratch);
			}
		same &= memcmp(out, out2, (size_t)c->n_tok * stride *
		    sizeof *out) == 0;
	}
	ok(same, "%s: chunks of 1, 7 and 16 queries give the same bits",
	    kn->name);

	free(scratch);
	free(ref);
	free(out2);
	free(out);
	free(q);
	kv_seq_release(pool, &seq);
	kv_pool_free(pool);
}

int
main(void)
{
	static const struct acase cases[] = {
		/* hd grp bs kv (0 F32, 1 F16, 2 I16) keys queries cap win kscale */
		{ 64, 8, 16, 1, 1, 1, 0, 0, 0 },
		{ 64, 8, 16, 1, 200, 200, 0, 0, 0 },
		{ 64, 8, 16, 1, 300, 1, 0, 0, 0 },
		{ 64, 4, 24, 1, 131, 70, 0, 0, 0 },
		{ 64, 1, 16, 0, 65, 65, 0, 0, 0 },
		{ 64, 8, 256, 0, 257, 100, 0, 0, 0 },
		{ 8, 2, 16, 0, 105, 105, 0, 0, 0 },
		{ 80, 4, 8, 1, 190, 37, 0, 0, 0 },
		{ 128, 4, 32, 1, 150, 150, 0, 0, 0 },
		{ 256, 2, 16, 1, 96, 33, 50.0f, 0, 0 },
		{ 64, 8, 16, 1, 220, 220, 0, 50, 0 },
		{ 64, 8, 16, 1, 300, 30, 0, 50, 0 },
		{ 128, 2, 16, 0, 300, 90, 30.0f, 64, 0 },
		{ 64, 1, 16, 1, 129, 129, 0, 1, 0 },
		/* head_dim off the vector width: tails and padding */
		{ 36, 2, 16, 1, 100, 70, 0, 0, 0 },
		{ 20, 3, 8, 0, 90, 41, 0, 30, 0 },
		/* odd head_dim with a window and a first query inside a tile */
		{ 37, 2, 8, 1, 150, 61, 0, 21, 0 },
		{ 37, 3, 24, 0, 140, 139, 0, 0, 0 },
		/* scores far apart: e^x of differences below -87 */
		{ 64, 8, 16, 1, 300, 80, 0, 0, 30.0f },
		/* codes in the cache (the 16-bit kernel's only pools) */
		{ 64, 8, 16, 2, 300, 80, 0, 0, 0 },
		{ 64, 4, 24, 2, 131, 70, 0, 0, 0 },
		{ 128, 4, 32, 2, 150, 150, 0, 0, 0 },
		{ 256, 2, 16, 2, 96, 33, 50.0f, 0, 0 },
		{ 64, 8, 16, 2, 220, 220, 0, 50, 0 },
		{ 64, 1, 16, 2, 129, 129, 0, 1, 0 },
		{ 40, 2, 16, 2, 100, 70, 0, 0, 0 },
		{ 24, 3, 8, 2, 91, 41, 0, 31, 0 },
		{ 64, 4, 24, 2, 200, 100, 0, 45, 0 },
		{ 64, 8, 16, 2, 300, 80, 0, 0, 30.0f },
		{ 64, 1, 16, 2, 65, 65, 0, 0, 0 },
		{ 64, 8, 256, 2, 257, 100, 0, 0, 0 },
		{ 8, 2, 16, 2, 105, 105, 0, 0, 0 },
		{ 80, 4, 8, 2, 190, 37, 0, 0, 0 },
		{ 128, 2, 16, 2, 300, 90, 30.0f, 64, 0 },
		{ 64, 8, 16, 2, 1, 1, 0, 0, 0 },
		{ 64, 8, 16, 2, 300, 1, 0, 0, 0 },
	};
	static const struct kernel kernels[] = {
		{ "avx512", QUANT_ISA_AVX512, R_EXACT, attn_avx512_scratch_floats,
		    attn_run_avx512 },
		{ "avx512-bf16", QUANT_ISA_AVX512, R_BF16,
		    attn_bf16_scratch_floats, attn_run_bf16 },
		{ "avx2", QUANT_ISA_AVX2, R_EXACT, attn_avx2_scratch_floats,
		    attn_run_avx2 },
		{ "avx2-i16", QUANT_ISA_AVX2, R_I16, attn_i16_scratch_floats,
		    attn_run_i16 },
	};
	size_t	i, k;

	/* AVX-512 comes with AVX2 (see quant_isa_supported()). */
	if (!quant_isa_supported(QUANT_ISA_AVX2))
		skip_all("the CPU has no AVX2");
	for (k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
		if (!quant_isa_supported(kernels[k].isa) ||
		    (kernels[k].round == R_BF16 &&
		    !quant_bf16_dot_supported())) {
			diag("the CPU has no %s: its kernel is not tested",
			    kernels[k].name);
			continue;
		}
		rng = 0x9e3779b97f4a7c15ULL;	/* the same data for each */
		for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
			/* Codes for the 16-bit kernel only, and only codes. */
			if ((cases[i].kv == KV_TYPE_I16) ==
			    (kernels[k].round == R_I16))
				run_case(&kernels[k], &cases[i]);
	}
	done_testing();
}
