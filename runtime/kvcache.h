/* kvcache.h: the paged key/value cache (a pool of fixed-size blocks). */
#ifndef PHASED_KVCACHE_H
#define PHASED_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

/*
 * A pool belongs to one model instance (one device group).  It is cut into
 * n_blocks blocks of block_size tokens; a block holds the keys and values
 * of those tokens for every layer.  A sequence owns an ordered list of
 * blocks (its block table): token position p lives in block
 * blocks[p / block_size] at slot p % block_size.  Blocks are handed out
 * whole, so accounting is exact: free + used == n_blocks at all times.
 *
 * Inside a block the layout is, per layer:
 *	K: [kv_head][head_dim][block_size]	(transposed: slots contiguous)
 *	V: [kv_head][block_size][head_dim]	(a slot's vector contiguous)
 * Keys are transposed so attention scores a whole block of slots with one
 * loop running along the slots, and values are in rows so the weighted sum
 * runs along head_dim; both loops vectorize without reassociating sums.
 *
 * KV_TYPE_I16 holds 16-bit integer codes for the 16-bit integer attention
 * kernel (attn_i16.c), in pairs as its products take them, then one float
 * scale per key and per value (head_dim a multiple of KV_I16_HD_ALIGN):
 *	K: [kv_head][head_dim / 2][block_size] of (dimension 2i, 2i + 1)
 *	V: [kv_head][block_size / 2][head_dim] of (slot 2j, 2j + 1)
 *	K scales: [kv_head][block_size], then V scales: [kv_head][block_size]
 * A key's codes are round(k / scale) with scale = max |k| /
 * kv_i16_kmax(head_dim), a value's the same with KV_I16_VMAX: each is
 * stored once as the kernel multiplies it, not converted by every job.
 */

#define KV_BLOCK_SIZE_DEFAULT	16
#define KV_BLOCK_SIZE_MIN	8
#define KV_BLOCK_SIZE_MAX	256
#define KV_BLOCK_SIZE_ALIGN	8	/* block_size must be a multiple */

/* The element type of keys and values (F32 and F16: tensor_type numbers). */
#define KV_TYPE_F32		0	/* TT_F32 */
#define KV_TYPE_F16		1	/* TT_F16 */
#define KV_TYPE_I16		2	/* 16-bit codes and scales (see above) */

/*
 * The largest code of a key (so that head_dim products of query and key
 * codes sum in 31 bits) and of a value (so that a key tile's 64 products
 * of weight and value codes do).
 */
#define KV_I16_VMAX		5792
/* I16's head_dim is a multiple of this: whole vectors of 8 pairs. */
#define KV_I16_HD_ALIGN		8
int		 kv_i16_kmax(uint32_t head_dim);

struct kv_layout {
	uint32_t	 n_layers;
	uint32_t	 n_kv_heads;
	uint32_t	 head_dim;
	uint32_t	 block_size;	/* tokens per block */
	uint32_t	 type;		/* KV_TYPE_F16, KV_TYPE_F32, KV_TYPE_I16 */
};

struct kv_pool {
	struct kv_layout layout;
	uint32_t	 n_blocks;
	size_t		 elem_size;	/* 2 or 4 */
	size_t		 block_bytes;	/* all layers, K and V (and scales) */
	size_t		 layer_bytes;	/* one layer's K and V in a block */
	size_t		 v_offset;	/* V after K inside a layer */
	size_t		 s_offset;	/* I16: the scales after V in a layer */
	int		 i16_kmax;	/* I16: kv_i16_kmax(head_dim) */
	uint8_t		*data;		/* n_blocks * block_bytes */
	uint32_t	*free_stack;	/* free block ids, n_free of them */
	uint32_t	 n_free;
	uint8_t		*in_use;	/* per block: catches double frees */
	struct kv_prefix *prefix;	/* the prefix cache; NULL: off */
};

/*
 * One sequence's block table.  A zeroed struct kv_seq is an empty sequence
 * not yet tied to a pool.  n_tokens counts the positions whose K/V are
 * stored (model_forward advances it); the blocks may cover more (after
 * kv_seq_reserve).
 */
struct kv_seq {
	uint32_t	*blocks;
	uint32_t	 n_blocks;
	uint32_t	 cap;		/* allocated entries in blocks */
	uint32_t	 n_tokens;
	/* Prefix cache: leading full blocks already hashed, and the chain. */
	uint32_t	 n_hashed;
	uint64_t	 chain_hash;
	uint64_t	 chain_serial;
};

/* Check a layout; -1 and *cause naming the bad field. */
int		 kv_layout_check(const struct kv_layout *, char **cause);
/* Bytes of one block for a (checked) layout: pools are sized in these. */
size_t		 kv_layout_block_bytes(const struct kv_layout *);
/* Blocks needed to hold n_tokens tokens of one sequence. */
uint32_t	 kv_layout_blocks_for(const struct kv_layout *, uint64_t n_tokens);

/*
 * Create a pool of n_blocks blocks in host memory (zeroed); NULL and
 * *cause if the layout is bad or the memory cannot be had.
 */
struct kv_pool	*kv_pool_create(const struct kv_layout *, uint32_t n_blocks,
		    char **cause);
void		 kv_pool_free(struct kv_pool *);
uint32_t	 kv_pool_free_blocks(const struct kv_pool *);
uint32_t	 kv_pool_used_blocks(const struct kv_pool *);
/* Blocks needed to hold n_tokens tokens. */
uint32_t	 kv_pool_blocks_for(const struct kv_pool *, uint64_t n_tokens);

/*
 * Make sure seq has blocks for n_new more tokens after its n_tokens.
 * Returns 0, or -1 when the pool lacks free blocks (nothing is taken then).
 */
int		 kv_seq_reserve(struct kv_pool *, struct kv_seq *, uint32_t n_new);
/* Blocks kv_seq_reserve(pool, seq, n_new) would take from the pool. */
uint32_t	 kv_seq_blocks_needed(const struct kv_pool *, const struct kv_seq *,
		    uint32_t n_new);
/* Token capacity of the blocks seq holds. */
uint64_t	 kv_seq_capacity(const struct kv_pool *, const struct kv_seq *);
/* Give all of seq's blocks back and make it empty (reusable). */
void		 kv_seq_release(struct kv_pool *, struct kv_seq *);
/*
 * Forget the positions from n_tokens on (e.g. rejected speculative
 * tokens) and give back the blocks no longer needed.
 */
void		 kv_seq_truncate(struct kv_pool *, struct kv_seq *, uint32_t n_tokens);
/*
 * Copy src_seq's stored tokens into dst_seq, which must be empty, taking
 * blocks from dst_pool (which may be src_pool).  The layouts must match.
 * -1 and *cause, with nothing taken, on a mismatch or a full pool.
 */
int		 kv_seq_copy(struct kv_pool *dst_pool, struct kv_seq *dst_seq,
		    const struct kv_pool *src_pool, const struct kv_seq *src_seq,
		    char **cause);

/*
 * The prefix cache.  A full block is named by a hash chained over its
 * tokens and its predecessor's hash, seeded with whatever else changes the
 * KV (model instance, KV type, block size).  A sequence that starts with
 * the same tokens takes the longest chain of such blocks by reference:
 * shared blocks are full, so nobody writes them again (a sequence writes
 * only positions from its n_tokens on, in blocks it alone holds).  The
 * hash only finds candidates: a block is reused only when its stored
 * tokens equal the prompt's and its predecessor is the block reused just
 * before it (by a serial number never given twice), so a collision can
 * never hand out wrong KV.  A block whose last holder lets go stays cached
 * and counts as free; the pool hands out uncached blocks first and evicts
 * cached ones least recently released first.
 */
struct kv_prefix_stats {
	uint64_t	 queries;	/* kv_prefix_match calls */
	uint64_t	 hit_tokens;	/* tokens they reused */
	uint64_t	 evictions;	/* cached blocks given to new content */
	uint32_t	 cached;	/* blocks holding a cached prefix now */
};

/* Turn the prefix cache on for a pool with no blocks in use; -1 if busy. */
int		 kv_prefix_enable(struct kv_pool *, uint64_t seed);
/* Turn it off and forget what it holds (before kv_pool_free). */
void		 kv_prefix_disable(struct kv_pool *);
/*
 * Tokens of tokens[0..n) that kv_prefix_match would reuse now, always
 * leaving at least one token to compute; 0 when the cache is off.
 */
uint32_t	 kv_prefix_lookup(const struct kv_pool *, const int32_t *tokens,
		    uint32_t n);
/*
 * Start the empty seq with the longest cached chain of full blocks of
 * tokens[0..n), at most n - 1 tokens, by reference; returns the tokens
 * reused (seq->n_tokens).
 */
uint32_t	 kv_prefix_match(struct kv_pool *, struct kv_seq *,
		    const int32_t *tokens, uint32_t n);
/*
 * Register seq's full blocks not yet hashed; tokens[0..seq->n_tokens) are
 * the tokens whose KV it stores.
 */
void		 kv_prefix_commit(struct kv_pool *, struct kv_seq *,
		    const int32_t *tokens);
/* The cache's counters (zero when off). */
void		 kv_prefix_stats(const struct kv_pool *, struct kv_prefix_stats *);
/* Holders of block b (0: free). */
uint32_t	 kv_block_refs(const struct kv_pool *, uint32_t b);
/* Test hook: AND every hash with mask (0 makes all of them collide). */
void		 kv_prefix_set_hash_mask(struct kv_pool *, uint64_t mask);

/* Keys of (block, layer, kv_head): head_dim rows of block_size slots. */
static inline void *
kv_block_k(const struct kv_pool *p, uint32_t block, uint32_t layer, uint32_t head)
{
	const struct kv_layout	*l = &p->layout;

	return (p->data + (size_t)block * p->block_bytes +
	    (size_t)layer * p->layer_bytes +
	    (size_t)head * l->head_dim * l->block_size * p->elem_size);
}

/* Values of (block, layer, kv_head): block_size rows of head_dim. */
static inline void *
kv_block_v(const struct kv_pool *p, uint32_t block, uint32_t layer, uint32_t head)
{
	const struct kv_layout	*l = &p->layout;

	return (p->data + (size_t)block * p->block_bytes +
	    (size_t)layer * p->layer_bytes + p->v_offset +
	    (size_t)head * l->head_dim * l->block_size * p->elem_size);
}

/* I16: scales of the keys of (block, layer, kv_head), one a slot. */
static inline float *
kv_block_kscale(const struct kv_pool *p, uint32_t block, uint32_t layer,
    uint32_t head)
{
	return ((float *)(p->data + (size_t)block * p->block_bytes +
	    (size_t)layer * p->layer_bytes + p->s_offset) +
	    (size_t)head * p->layout.block_size);
}

/* I16: scales of the values of (block, layer, kv_head), one a slot. */
static inline float *
kv_block_vscale(const struct kv_pool *p, uint32_t block, uint32_t layer,
    uint32_t head)
{
	return (kv_block_kscale(p, block, layer, head) +
	    (size_t)p->layout.n_kv_heads * p->layout.block_size);
}

/*
 * Store the key k and value v (head_dim floats each) of slot `slot` of
 * block for layer and kv_head in an I16 pool, as codes and scales.
 */
void		 kv_put_i16(struct kv_pool *, uint32_t block, uint32_t slot,
		    uint32_t layer, uint32_t head, const float *k, const float *v);

#endif
