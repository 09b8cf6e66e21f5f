/* kvcache.c: the paged key/value cache: block pool and block tables. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "log.h"
#include "util.h"

/* Upper bounds that keep every size computation below far from overflow. */
#define KV_MAX_LAYERS		4096
#define KV_MAX_HEADS		4096
#define KV_MAX_HEAD_DIM		4096
#define KV_MAX_BLOCKS		(1U << 28)
#define KV_NONE			UINT32_MAX

/* The prefix cache's per-block records and hash table. */
struct kv_prefix {
	uint64_t	 seed;
	uint64_t	 mask;		/* test hook; all ones normally */
	uint64_t	 next_serial;
	uint64_t	*hash;		/* per block, when registered */
	uint64_t	*serial;	/* per block: 0 when not registered */
	uint64_t	*parent;	/* per block: predecessor's serial */
	uint32_t	*ref;		/* per block: holders */
	uint32_t	*bnext;		/* per block: next in its bucket */
	uint32_t	*lru_prev, *lru_next;
	int32_t		*toks;		/* per block: block_size tokens */
	uint32_t	*buckets;
	uint32_t	 n_buckets;	/* a power of two */
	uint32_t	 n_stack;	/* uncached free blocks on free_stack */
	uint32_t	 lru_head, lru_tail, n_lru; /* cached free blocks */
	struct kv_prefix_stats st;
};

/* Check a layout; -1 and *cause naming the bad field. */
int
kv_layout_check(const struct kv_layout *l, char **cause)
{
	if (l->n_layers < 1 || l->n_layers > KV_MAX_LAYERS) {
		set_cause(cause, "kv layers %u out of range 1..%u", l->n_layers,
		    KV_MAX_LAYERS);
		return (-1);
	}
	if (l->n_kv_heads < 1 || l->n_kv_heads > KV_MAX_HEADS) {
		set_cause(cause, "kv heads %u out of range 1..%u", l->n_kv_heads,
		    KV_MAX_HEADS);
		return (-1);
	}
	if (l->head_dim < 1 || l->head_dim > KV_MAX_HEAD_DIM) {
		set_cause(cause, "kv head dimension %u out of range 1..%u",
		    l->head_dim, KV_MAX_HEAD_DIM);
		return (-1);
	}
	if (l->block_size < KV_BLOCK_SIZE_MIN ||
	    l->block_size > KV_BLOCK_SIZE_MAX) {
		set_cause(cause, "kv block size %u out of range %u..%u",
		    l->block_size, KV_BLOCK_SIZE_MIN, KV_BLOCK_SIZE_MAX);
		return (-1);
	}
	if (l->block_size % KV_BLOCK_SIZE_ALIGN != 0) {
		set_cause(cause, "kv block size %u is not a multiple of %u",
		    l->block_size, KV_BLOCK_SIZE_ALIGN);
		return (-1);
	}
	if (l->type != KV_TYPE_F16 && l->type != KV_TYPE_F32 &&
	    l->type != KV_TYPE_I16) {
		set_cause(cause, "kv type %u is not F16, F32 or I16", l->type);
		return (-1);
	}
	if (l->type == KV_TYPE_I16 && l->head_dim % KV_I16_HD_ALIGN != 0) {
		set_cause(cause, "kv type I16 needs a head_dim that is a "
		    "multiple of %d, not %u", KV_I16_HD_ALIGN, l->head_dim);
		return (-1);
	}
	return (0);
}

/* The largest key code of I16 for head_dim (see kvcache.h). */
int
kv_i16_kmax(uint32_t head_dim)
{
	int	m = (int)sqrt((double)INT32_MAX / (double)(head_dim > 0 ?
		    head_dim : 1));

	return (m > 32767 ? 32767 : m);
}

/*
 * The codes of n floats x, largest code lim, into c, and their scale: 0
 * for all zeros, NaN where any is not finite (a score or output made from
 * it is then NaN, as in f32).
 */
static float
i16_codes(const float *x, uint32_t n, int lim, int16_t *c)
{
	float		m = 0.0f, inv;
	uint32_t	i;

	for (i = 0; i < n; i++) {
		if (!isfinite(x[i])) {
			memset(c, 0, n * sizeof *c);
			return (NAN);
		}
		if (fabsf(x[i]) > m)
			m = fabsf(x[i]);
	}
	inv = m > 0.0f ? (float)lim / m : 0.0f;
	for (i = 0; i < n; i++) {
		long	q = lrintf(x[i] * inv);

		c[i] = (int16_t)(q > lim ? lim : q < -lim ? -lim : q);
	}
	return (m / (float)lim);
}

/* Store a key and a value in an I16 pool (kvcache.h). */
void
kv_put_i16(struct kv_pool *p, uint32_t block, uint32_t slot,
    uint32_t layer, uint32_t head, const float *k, const float *v)
{
	const uint32_t	 hd = p->layout.head_dim, bs = p->layout.block_size;
	int16_t		*kc = kv_block_k(p, block, layer, head);
	int16_t		*vc = kv_block_v(p, block, layer, head);
	int16_t		 c[KV_MAX_HEAD_DIM];
	uint32_t	 d;

	/* Dimension d of the key: pair row d / 2, the slot's pair, half d % 2. */
	kv_block_kscale(p, block, layer, head)[slot] = i16_codes(k, hd,
	    p->i16_kmax, c);
	for (d = 0; d < hd; d++)
		kc[((size_t)(d / 2) * bs + slot) * 2 + d % 2] = c[d];
	/* Dimension d of the value: pair row slot / 2, pair d, half slot % 2. */
	kv_block_vscale(p, block, layer, head)[slot] = i16_codes(v, hd,
	    KV_I16_VMAX, c);
	for (d = 0; d < hd; d++)
		vc[((size_t)(slot / 2) * hd + d) * 2 + slot % 2] = c[d];
}

/* Bytes of one block for a (checked) layout. */
size_t
kv_layout_block_bytes(const struct kv_layout *l)
{
	size_t	elem = l->type == KV_TYPE_F32 ? 4 : 2;
	size_t	scales = l->type == KV_TYPE_I16 ? 2 * sizeof(float) : 0;

	return ((size_t)l->n_layers * l->n_kv_heads * l->block_size *
	    (2 * l->head_dim * elem + scales));
}

/* Create a pool of n_blocks zeroed blocks in host memory. */
struct kv_pool *
kv_pool_create(const struct kv_layout *l, uint32_t n_blocks, char **cause)
{
	struct kv_pool	*p;
	size_t		 bb;
	uint32_t	 i;

	if (kv_layout_check(l, cause) != 0)
		return (NULL);
	if (n_blocks < 1 || n_blocks > KV_MAX_BLOCKS) {
		set_cause(cause, "kv pool of %u blocks out of range 1..%u",
		    n_blocks, KV_MAX_BLOCKS);
		return (NULL);
	}
	bb = kv_layout_block_bytes(l);
	if (bb > SIZE_MAX / n_blocks) {
		set_cause(cause, "kv pool of %u blocks of %zu bytes is too large",
		    n_blocks, bb);
		return (NULL);
	}

	p = xcalloc(1, sizeof *p);
	p->layout = *l;
	p->n_blocks = n_blocks;
	p->elem_size = l->type == KV_TYPE_F32 ? 4 : 2;
	p->block_bytes = bb;
	p->layer_bytes = bb / l->n_layers;
	p->v_offset = (size_t)l->n_kv_heads * l->head_dim * l->block_size *
	    p->elem_size;
	p->s_offset = 2 * p->v_offset;
	p->i16_kmax = kv_i16_kmax(l->head_dim);
	/* Large pools come from calloc's mmap: pages are zero until touched. */
	p->data = calloc(n_blocks, bb);
	if (p->data == NULL) {
		set_cause(cause, "cannot allocate kv pool of %u blocks (%zu bytes)",
		    n_blocks, (size_t)n_blocks * bb);
		free(p);
		return (NULL);
	}
	p->free_stack = xreallocarray(NULL, n_blocks, sizeof *p->free_stack);
	p->in_use = xcalloc(n_blocks, 1);
	/* Hand out low block ids first: pop from the end of the stack. */
	for (i = 0; i < n_blocks; i++)
		p->free_stack[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	return (p);
}

/* Free a pool; sequences still holding its blocks must not be used after. */
void
kv_pool_free(struct kv_pool *p)
{
	if (p == NULL)
		return;
	kv_prefix_disable(p);
	free(p->data);
	free(p->free_stack);
	free(p->in_use);
	free(p);
}

/* Number of blocks nobody holds. */
uint32_t
kv_pool_free_blocks(const struct kv_pool *p)
{
	return (p->n_free);
}

/* Number of blocks held by sequences. */
uint32_t
kv_pool_used_blocks(const struct kv_pool *p)
{
	return (p->n_blocks - p->n_free);
}

/* Blocks needed to hold n_tokens tokens of one sequence. */
uint32_t
kv_layout_blocks_for(const struct kv_layout *l, uint64_t n_tokens)
{
	uint64_t	n = n_tokens / l->block_size +
			    (n_tokens % l->block_size != 0);

	return (n > UINT32_MAX ? UINT32_MAX : (uint32_t)n);
}

/* Blocks needed to hold n_tokens tokens. */
uint32_t
kv_pool_blocks_for(const struct kv_pool *p, uint64_t n_tokens)
{
	return (kv_layout_blocks_for(&p->layout, n_tokens));
}

/* Token capacity of the blocks seq holds. */
uint64_t
kv_seq_capacity(const struct kv_pool *p, const struct kv_seq *s)
{
	return ((uint64_t)s->n_blocks * p->layout.block_size);
}

/* Blocks kv_seq_reserve(pool, seq, n_new) would take from the pool. */
uint32_t
kv_seq_blocks_needed(const struct kv_pool *p, const struct kv_seq *s,
    uint32_t n_new)
{
	uint32_t	need;

	need = kv_pool_blocks_for(p, (uint64_t)s->n_tokens + n_new);
	return (need > s->n_blocks ? need - s->n_blocks : 0);
}

/* Unlink block b from the list of cached free blocks. */
static void
lru_remove(struct kv_prefix *x, uint32_t b)
{
	if (x->lru_prev[b] != KV_NONE)
		x->lru_next[x->lru_prev[b]] = x->lru_next[b];
	else
		x->lru_head = x->lru_next[b];
	if (x->lru_next[b] != KV_NONE)
		x->lru_prev[x->lru_next[b]] = x->lru_prev[b];
	else
		x->lru_tail = x->lru_prev[b];
	x->lru_prev[b] = x->lru_next[b] = KV_NONE;
	x->n_lru--;
}

/* Append block b to the cached free blocks (most recently released). */
static void
lru_append(struct kv_prefix *x, uint32_t b)
{
	x->lru_prev[b] = x->lru_tail;
	x->lru_next[b] = KV_NONE;
	if (x->lru_tail != KV_NONE)
		x->lru_next[x->lru_tail] = b;
	else
		x->lru_head = b;
	x->lru_tail = b;
	x->n_lru++;
}

/* The bucket of a hash. */
static uint32_t
bucket_of(const struct kv_prefix *x, uint64_t h)
{
	return ((uint32_t)(h ^ (h >> 31)) & (x->n_buckets - 1));
}

/* Take block b out of the hash table. */
static void
kv_prefix_unregister(struct kv_prefix *x, uint32_t b)
{
	uint32_t	*pp;

	if (x->serial[b] == 0)
		return;
	for (pp = &x->buckets[bucket_of(x, x->hash[b])]; *pp != KV_NONE;
	    pp = &x->bnext[*pp]) {
		if (*pp == b) {
			*pp = x->bnext[b];
			break;
		}
	}
	x->bnext[b] = KV_NONE;
	x->serial[b] = 0;
	x->st.cached--;
}

/* The hash of a block of tokens following a block hashed prev. */
static uint64_t
chain_hash(const struct kv_pool *p, uint64_t prev, const int32_t *t)
{
	const struct kv_prefix	*x = p->prefix;
	uint64_t		 h;
	uint32_t		 i;

	/* FNV-1a over 32-bit tokens, then a splitmix64 finish. */
	h = 0xcbf29ce484222325ULL ^ x->seed ^ (prev * 0x9e3779b97f4a7c15ULL);
	for (i = 0; i < p->layout.block_size; i++) {
		h ^= (uint32_t)t[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return (h & x->mask);
}

/*
 * The registered block of hash h whose predecessor has serial parent and
 * whose tokens are t, or KV_NONE: equal hashes alone prove nothing.
 */
static uint32_t
kv_prefix_find(const struct kv_pool *p, uint64_t h, uint64_t parent,
    const int32_t *t)
{
	const struct kv_prefix	*x = p->prefix;
	size_t			 bs = p->layout.block_size;
	uint32_t		 b;

	for (b = x->buckets[bucket_of(x, h)]; b != KV_NONE; b = x->bnext[b]) {
		if (x->hash[b] == h && x->parent[b] == parent &&
		    memcmp(x->toks + b * bs, t, bs * sizeof *t) == 0)
			return (b);
	}
	return (KV_NONE);
}

/* A free block for new content: uncached ones first, else evict the LRU. */
static uint32_t
kv_prefix_pop(struct kv_pool *p)
{
	struct kv_prefix	*x = p->prefix;
	uint32_t		 b;

	if (x->n_stack > 0)
		b = p->free_stack[--x->n_stack];
	else {
		if ((b = x->lru_head) == KV_NONE)
			fatalx("%s: no free block", __func__);
		lru_remove(x, b);
		kv_prefix_unregister(x, b);
		x->st.evictions++;
	}
	p->n_free--;
	x->ref[b] = 1;
	return (b);
}

/* Drop one holder of block b; the last one frees it, cached or not. */
static void
kv_prefix_put(struct kv_pool *p, uint32_t b)
{
	struct kv_prefix	*x = p->prefix;

	if (x->ref[b] == 0)
		fatalx("%s: block %u has no holder", __func__, b);
	if (--x->ref[b] > 0)
		return;
	p->in_use[b] = 0;
	if (x->serial[b] != 0)
		lru_append(x, b);
	else
		p->free_stack[x->n_stack++] = b;
	p->n_free++;
}

/* Take n blocks off the free stack and append them to s (n already checked). */
static void
kv_seq_take(struct kv_pool *p, struct kv_seq *s, uint32_t n)
{
	uint32_t	b, i;

	if (s->n_blocks + n > s->cap) {
		s->cap = s->n_blocks + n;
		if (s->cap < 8)
			s->cap = 8;
		s->blocks = xreallocarray(s->blocks, s->cap, sizeof *s->blocks);
	}
	for (i = 0; i < n; i++) {
		b = p->prefix != NULL ? kv_prefix_pop(p) :
		    p->free_stack[--p->n_free];
		if (p->in_use[b])
			fatalx("%s: block %u on the free list is in use", __func__, b);
		p->in_use[b] = 1;
		s->blocks[s->n_blocks++] = b;
	}
}

/* Give block b back to the pool. */
static void
kv_pool_put(struct kv_pool *p, uint32_t b)
{
	if (b >= p->n_blocks || !p->in_use[b])
		fatalx("%s: block %u is not in use", __func__, b);
	if (p->prefix != NULL) {
		kv_prefix_put(p, b);
		return;
	}
	p->in_use[b] = 0;
	p->free_stack[p->n_free++] = b;
}

/* Make sure seq has blocks for n_new more tokens; -1 if the pool is short. */
int
kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, uint32_t n_new)
{
	uint32_t	need;

	if ((uint64_t)s->n_tokens + n_new > UINT32_MAX)
		return (-1);
	need = kv_seq_blocks_needed(p, s, n_new);
	if (need > p->n_free)
		return (-1);
	if (need > 0)
		kv_seq_take(p, s, need);
	return (0);
}

/* Give all of seq's blocks back and make it empty. */
void
kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
	uint32_t	i;

	/* Back to front so a fresh reserve gets the same blocks again. */
	for (i = s->n_blocks; i > 0; i--)
		kv_pool_put(p, s->blocks[i - 1]);
	free(s->blocks);
	memset(s, 0, sizeof *s);
}

/* Forget positions from n_tokens on and give back unneeded blocks. */
void
kv_seq_truncate(struct kv_pool *p, struct kv_seq *s, uint32_t n_tokens)
{
	uint32_t	keep;

	uint32_t	bs = p->layout.block_size, last;

	if (n_tokens < s->n_tokens)
		s->n_tokens = n_tokens;
	keep = kv_pool_blocks_for(p, s->n_tokens);
	while (s->n_blocks > keep)
		kv_pool_put(p, s->blocks[--s->n_blocks]);
	if (p->prefix == NULL || s->n_hashed * bs <= s->n_tokens)
		return;
	/* The last block is partial now and will be written again. */
	last = s->blocks[keep - 1];
	if (p->prefix->ref[last] > 1) {
		/* Shared: others read it, so drop it and its positions. */
		kv_pool_put(p, s->blocks[--s->n_blocks]);
		s->n_tokens = s->n_blocks * bs;
	} else
		kv_prefix_unregister(p->prefix, last);
	/* kv_prefix_commit walks the chain again from the first block. */
	s->n_hashed = 0;
	s->chain_hash = s->chain_serial = 0;
}

/* Copy src_seq's stored tokens into the empty dst_seq, blocks from dst_pool. */
int
kv_seq_copy(struct kv_pool *dp, struct kv_seq *ds, const struct kv_pool *sp,
    const struct kv_seq *ss, char **cause)
{
	const struct kv_layout	*a = &dp->layout, *b = &sp->layout;
	uint32_t		 n, i;

	if (a->n_layers != b->n_layers || a->n_kv_heads != b->n_kv_heads ||
	    a->head_dim != b->head_dim || a->block_size != b->block_size ||
	    a->type != b->type) {
		set_cause(cause, "kv layouts differ: %u layers %u heads of %u, "
		    "block %u, type %u vs %u layers %u heads of %u, block %u, "
		    "type %u", a->n_layers, a->n_kv_heads, a->head_dim,
		    a->block_size, a->type, b->n_layers, b->n_kv_heads,
		    b->head_dim, b->block_size, b->type);
		return (-1);
	}
	if (ds == ss) {
		set_cause(cause, "kv copy onto its own source sequence");
		return (-1);
	}
	if (ds->n_blocks != 0 || ds->n_tokens != 0) {
		set_cause(cause, "kv copy destination is not empty (%u blocks)",
		    ds->n_blocks);
		return (-1);
	}
	n = kv_pool_blocks_for(sp, ss->n_tokens);
	if (n > ss->n_blocks) {
		set_cause(cause, "kv copy source holds %u blocks for %u tokens",
		    ss->n_blocks, ss->n_tokens);
		return (-1);
	}
	if (n > dp->n_free) {
		set_cause(cause, "kv pool has %u free blocks, copy needs %u",
		    dp->n_free, n);
		return (-1);
	}
	kv_seq_take(dp, ds, n);
	for (i = 0; i < n; i++) {
		memcpy(dp->data + (size_t)ds->blocks[i] * dp->block_bytes,
		    sp->data + (size_t)ss->blocks[i] * sp->block_bytes,
		    dp->block_bytes);
	}
	ds->n_tokens = ss->n_tokens;
	return (0);
}

/* Turn the prefix cache on for a pool with no blocks in use. */
int
kv_prefix_enable(struct kv_pool *p, uint64_t seed)
{
	struct kv_prefix	*x;
	uint32_t		 i;

	if (p->prefix != NULL)
		return (0);
	if (p->n_free != p->n_blocks)
		return (-1);
	x = xcalloc(1, sizeof *x);
	/* Whatever else changes the KV of a block goes into the seed. */
	x->seed = seed ^ ((uint64_t)p->layout.block_size << 32) ^
	    ((uint64_t)p->layout.type << 48) ^ p->layout.n_layers ^
	    ((uint64_t)p->layout.n_kv_heads << 16) ^
	    ((uint64_t)p->layout.head_dim << 56);
	x->mask = UINT64_MAX;
	x->hash = xcalloc(p->n_blocks, sizeof *x->hash);
	x->serial = xcalloc(p->n_blocks, sizeof *x->serial);
	x->parent = xcalloc(p->n_blocks, sizeof *x->parent);
	x->ref = xcalloc(p->n_blocks, sizeof *x->ref);
	x->bnext = xreallocarray(NULL, p->n_blocks, sizeof *x->bnext);
	x->lru_prev = xreallocarray(NULL, p->n_blocks, sizeof *x->lru_prev);
	x->lru_next = xreallocarray(NULL, p->n_blocks, sizeof *x->lru_next);
	x->toks = xreallocarray(NULL, (size_t)p->n_blocks * p->layout.block_size,
	    sizeof *x->toks);
	for (x->n_buckets = 1; x->n_buckets < p->n_blocks; x->n_buckets <<= 1)
		;
	x->buckets = xreallocarray(NULL, x->n_buckets, sizeof *x->buckets);
	for (i = 0; i < x->n_buckets; i++)
		x->buckets[i] = KV_NONE;
	for (i = 0; i < p->n_blocks; i++)
		x->bnext[i] = x->lru_prev[i] = x->lru_next[i] = KV_NONE;
	x->lru_head = x->lru_tail = KV_NONE;
	x->n_stack = p->n_free;
	p->prefix = x;
	return (0);
}

/* Turn the prefix cache off: cached free blocks become plain free ones. */
void
kv_prefix_disable(struct kv_pool *p)
{
	struct kv_prefix	*x = p->prefix;
	uint32_t		 b;

	if (x == NULL)
		return;
	while ((b = x->lru_head) != KV_NONE) {
		lru_remove(x, b);
		p->free_stack[x->n_stack++] = b;
	}
	for (b = 0; b < p->n_blocks; b++)
		if (p->in_use[b] && x->ref[b] > 1)
			fatalx("%s: block %u is shared", __func__, b);
	p->n_free = x->n_stack;
	free(x->hash);
	free(x->serial);
	free(x->parent);
	free(x->ref);
	free(x->bnext);
	free(x->lru_prev);
	free(x->lru_next);
	free(x->toks);
	free(x->buckets);
	free(x);
	p->prefix = NULL;
}

/*
 * Walk the cached chain of tokens[0..n): the blocks it would reuse go to
 * out (when not NULL).  Returns how many; never all of the tokens.
 */
static uint32_t
kv_prefix_walk(const struct kv_pool *p, const int32_t *t, uint32_t n,
    uint32_t *out, uint64_t *hash, uint64_t *serial)
{
	const struct kv_prefix	*x = p->prefix;
	uint32_t		 bs = p->layout.block_size, max, i, b;
	uint64_t		 h = 0, ser = 0;

	if (x == NULL || n == 0)
		return (0);
	/* The last token must be computed: its logits are what is asked. */
	max = (n - 1) / bs;
	for (i = 0; i < max; i++) {
		h = chain_hash(p, h, t + (size_t)i * bs);
		if ((b = kv_prefix_find(p, h, ser, t + (size_t)i * bs)) ==
		    KV_NONE)
			break;
		ser = x->serial[b];
		if (out != NULL)
			out[i] = b;
		*hash = h;
		*serial = ser;
	}
	return (i);
}

/* Tokens kv_prefix_match would reuse now. */
uint32_t
kv_prefix_lookup(const struct kv_pool *p, const int32_t *t, uint32_t n)
{
	uint64_t	h, ser;

	return (kv_prefix_walk(p, t, n, NULL, &h, &ser) *
	    p->layout.block_size);
}

/* Start the empty seq with the longest cached chain, by reference. */
uint32_t
kv_prefix_match(struct kv_pool *p, struct kv_seq *s, const int32_t *t,
    uint32_t n)
{
	struct kv_prefix	*x = p->prefix;
	uint32_t		 nb, i, b;
	uint64_t		 h = 0, ser = 0;

	if (x == NULL || s->n_blocks != 0)
		return (0);
	x->st.queries++;
	if (n < 2)
		return (0);
	if (s->cap < (n - 1) / p->layout.block_size) {
		s->cap = (n - 1) / p->layout.block_size;
		s->blocks = xreallocarray(s->blocks, s->cap, sizeof *s->blocks);
	}
	nb = kv_prefix_walk(p, t, n, s->blocks, &h, &ser);
	for (i = 0; i < nb; i++) {
		b = s->blocks[i];
		if (x->ref[b]++ == 0) {
			/* A cached free block is in use again. */
			lru_remove(x, b);
			p->in_use[b] = 1;
			p->n_free--;
		}
	}
	s->n_blocks = nb;
	s->n_tokens = nb * p->layout.block_size;
	s->n_hashed = nb;
	s->chain_hash = h;
	s->chain_serial = ser;
	x->st.hit_tokens += s->n_tokens;
	return (s->n_tokens);
}

/* Register seq's full blocks not yet hashed. */
void
kv_prefix_commit(struct kv_pool *p, struct kv_seq *s, const int32_t *t)
{
	struct kv_prefix	*x = p->prefix;
	uint32_t		 bs = p->layout.block_size, full, b, have;
	uint64_t		 h;
	const int32_t		*bt;

	if (x == NULL)
		return;
	full = s->n_tokens / bs;
	if (full > s->n_blocks)
		full = s->n_blocks;
	for (; s->n_hashed < full; s->n_hashed++) {
		bt = t + (size_t)s->n_hashed * bs;
		b = s->blocks[s->n_hashed];
		h = chain_hash(p, s->chain_hash, bt);
		have = kv_prefix_find(p, h, s->chain_serial, bt);
		if (have == KV_NONE && x->serial[b] == 0) {
			x->hash[b] = h;
			x->parent[b] = s->chain_serial;
			x->serial[b] = ++x->next_serial;
			memcpy(x->toks + (size_t)b * bs, bt, bs * sizeof *bt);
			x->bnext[b] = x->buckets[bucket_of(x, h)];
			x->buckets[bucket_of(x, h)] = b;
			x->st.cached++;
			have = b;
		} else if (have == KV_NONE)
			have = b;
		/* A twin computed by another sequence: ours stays private. */
		s->chain_hash = h;
		s->chain_serial = x->serial[have];
	}
}

/* The cache's counters (zero when off). */
void
kv_prefix_stats(const struct kv_pool *p, struct kv_prefix_stats *st)
{
	if (p->prefix == NULL)
		memset(st, 0, sizeof *st);
	else
		*st = p->prefix->st;
}

/* Holders of block b (0: free). */
uint32_t
kv_block_refs(const struct kv_pool *p, uint32_t b)
{
	if (b >= p->n_blocks || !p->in_use[b])
		return (0);
	return (p->prefix != NULL ? p->prefix->ref[b] : 1);
}

/* Test hook: AND every hash with mask (0: they all collide). */
void
kv_prefix_set_hash_mask(struct kv_pool *p, uint64_t mask)
{
	if (p->prefix != NULL)
		p->prefix->mask = mask;
}
