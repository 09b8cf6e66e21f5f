/* kvcache.c: the paged key/value cache: block pool and block tables. */

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
	if (l->type != KV_TYPE_F16 && l->type != KV_TYPE_F32) {
		set_cause(cause, "kv type %u is neither F16 nor F32", l->type);
		return (-1);
	}
	return (0);
}

/* Bytes of one block for a (checked) layout. */
size_t
kv_layout_block_bytes(const struct kv_layout *l)
{
	size_t	elem = l->type == KV_TYPE_F32 ? 4 : 2;

	return ((size_t)l->n_layers * 2 * l->n_kv_heads * l->head_dim *
	    l->block_size * elem);
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
	p->v_offset = p->layer_bytes / 2;
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
		b = p->free_stack[--p->n_free];
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

	if (n_tokens < s->n_tokens)
		s->n_tokens = n_tokens;
	keep = kv_pool_blocks_for(p, s->n_tokens);
	while (s->n_blocks > keep)
		kv_pool_put(p, s->blocks[--s->n_blocks]);
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
