/* test-kvcache.c: exact block accounting of the paged KV pool. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "tap.h"

/*
 * An I16 pool: its size, where kv_put_i16 puts each code and scale, codes
 * within half a step of the values, and all-zero and non-finite rows.
 */
static void
test_i16(void)
{
	enum { HD = 8 };
	struct kv_layout l = { .n_layers = 2, .n_kv_heads = 3, .head_dim = HD,
			    .block_size = 8, .type = KV_TYPE_I16 };
	struct kv_pool	*p;
	char		*cause = NULL;
	float		 k[HD] = { 1.0f, -2.0f, 0.5f, 4.0f, -4.0f, 0.001f,
			    3.0f, -0.75f };
	float		 v[HD] = { -0.25f, 0.125f, 3.0f, 0.0f, -1.0f, 2.0f,
			    1.5f, -2.5f };
	float		 z[HD] = { 0 };
	float		 bad[HD] = { 1, 2, NAN, 3, 4, 5, 6, 7 };
	const int16_t	*kc, *vc;
	float		 ks, vs, err = 0;
	int		 kmax = kv_i16_kmax(HD), d, ok_layout = 1;

	/* 2 layers x 3 heads x 8 slots x (2 x 8 codes x 2 bytes + 2 scales). */
	is_int(kv_layout_block_bytes(&l), 2 * 3 * 8 * (2 * HD * 2 + 8),
	    "I16 block bytes");
	is_int(kmax, 16383, "largest key code for head_dim 8");
	if (!ok((p = kv_pool_create(&l, 2, &cause)) != NULL, "I16 pool"))
		return;
	/* Block 1, layer 1, head 2, slot 5 (odd: the high halves of V). */
	kv_put_i16(p, 1, 5, 1, 2, k, v);
	kc = kv_block_k(p, 1, 1, 2);
	vc = kv_block_v(p, 1, 1, 2);
	ks = kv_block_kscale(p, 1, 1, 2)[5];
	vs = kv_block_vscale(p, 1, 1, 2)[5];
	ok(ks == 4.0f / kmax && vs == 3.0f / KV_I16_VMAX,
	    "scales: largest over the code limit (%g, %g)", ks, vs);
	for (d = 0; d < HD; d++) {
		int16_t kq = kc[((d / 2) * 8 + 5) * 2 + d % 2];
		int16_t vq = vc[((5 / 2) * HD + d) * 2 + 1];

		err = fmaxf(err, fabsf(kq * ks - k[d]) / ks);
		err = fmaxf(err, fabsf(vq * vs - v[d]) / vs);
	}
	ok(err <= 0.501f, "codes within half a step (%g)", err);
	is_int(kc[((3 / 2) * 8 + 5) * 2 + 1], kmax, "largest key is the limit");
	is_int(vc[((5 / 2) * HD + 2) * 2 + 1], KV_I16_VMAX,
	    "largest value is the limit");
	/* Nothing else of the block was written. */
	for (d = 0; d < HD * 8; d++)
		if (d != ((d / 16) * 8 + 5) * 2 + d % 2 && kc[d] != 0)
			ok_layout = 0;
	for (d = 0; d < HD * 8; d++)
		if ((d / (2 * HD) != 5 / 2 || d % 2 != 1) && vc[d] != 0)
			ok_layout = 0;
	ok(ok_layout, "only the slot's halves hold codes");
	is_int(kv_block_kscale(p, 1, 1, 1)[5] == 0.0f &&
	    kv_block_vscale(p, 1, 0, 2)[5] == 0.0f, 1,
	    "other heads' and layers' scales untouched");

	kv_put_i16(p, 0, 2, 0, 0, z, bad);
	ok(kv_block_kscale(p, 0, 0, 0)[2] == 0.0f, "zero key: scale 0");
	ok(isnan(kv_block_vscale(p, 0, 0, 0)[2]), "NaN in a value: scale NaN");
	kv_pool_free(p);
}

/* Fill the keys and values of every block of seq with a pattern from tag. */
static void
fill_seq(struct kv_pool *p, struct kv_seq *s, uint8_t tag)
{
	uint32_t	i;

	for (i = 0; i < s->n_blocks; i++)
		memset(p->data + (size_t)s->blocks[i] * p->block_bytes,
		    tag + i, p->block_bytes);
}

/* Whether seq's blocks hold the pattern fill_seq wrote with tag. */
static int
check_seq(const struct kv_pool *p, const struct kv_seq *s, uint8_t tag)
{
	const uint8_t	*b;
	uint32_t	 i;
	size_t		 j;

	for (i = 0; i < s->n_blocks; i++) {
		b = p->data + (size_t)s->blocks[i] * p->block_bytes;
		for (j = 0; j < p->block_bytes; j++) {
			if (b[j] != (uint8_t)(tag + i))
				return (0);
		}
	}
	return (1);
}


/* A prompt of n tokens: base + i, so prompts with one base share prefixes. */
static void
prompt(int32_t *t, uint32_t n, int32_t base)
{
	uint32_t	i;

	for (i = 0; i < n; i++)
		t[i] = base + (int32_t)i;
}

/* Compute a sequence's prompt: reserve, "write" KV tagged by token, commit. */
static void
compute(struct kv_pool *p, struct kv_seq *s, const int32_t *t, uint32_t n)
{
	uint32_t	pos;
	size_t		bs = p->layout.block_size;
	uint8_t		*blk;

	if (kv_seq_reserve(p, s, n - s->n_tokens) != 0)
		return;
	/* Each position's first byte holds its token: wrong reuse shows. */
	for (pos = s->n_tokens; pos < n; pos++) {
		blk = p->data + (size_t)s->blocks[pos / bs] * p->block_bytes;
		blk[pos % bs] = (uint8_t)t[pos];
	}
	s->n_tokens = n;
	kv_prefix_commit(p, s, t);
}

/* Whether every position of s holds the KV of token t[pos]. */
static int
kv_holds(const struct kv_pool *p, const struct kv_seq *s, const int32_t *t)
{
	uint32_t	pos;
	size_t		bs = p->layout.block_size;

	for (pos = 0; pos < s->n_tokens; pos++) {
		if (p->data[(size_t)s->blocks[pos / bs] * p->block_bytes +
		    pos % bs] != (uint8_t)t[pos])
			return (0);
	}
	return (1);
}

/* Prefix cache: sharing, references, eviction, LRU order, collisions. */
static void
test_prefix(void)
{
	struct kv_layout	 l = { .n_layers = 1, .n_kv_heads = 1,
				    .head_dim = 4, .block_size = 8,
				    .type = KV_TYPE_F32 };
	struct kv_prefix_stats	 st;
	struct kv_pool		*p;
	struct kv_seq		 a, b, c;
	int32_t			 ta[40], tb[40], tc[40];
	char			*cause = NULL;
	uint32_t		 blk0, blk1;

	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	memset(&c, 0, sizeof c);
	p = kv_pool_create(&l, 8, &cause);
	ok(kv_prefix_enable(p, 42) == 0, "prefix cache on");
	is_int(kv_prefix_lookup(p, ta, 0), 0, "empty prompt: nothing cached");

	/* a computes 20 tokens: blocks 0 and 1 are full and cached. */
	prompt(ta, 40, 1);
	is_int(kv_prefix_match(p, &a, ta, 20), 0, "cold cache: no hit");
	compute(p, &a, ta, 20);
	kv_prefix_stats(p, &st);
	is_int(st.cached, 2, "two full blocks cached");
	is_int(kv_prefix_lookup(p, ta, 40), 16, "lookup sees 16 tokens");
	is_int(kv_prefix_lookup(p, ta, 16), 8,
	    "a prompt of exactly two blocks reuses one: one token to compute");
	is_int(kv_prefix_lookup(p, ta, 17), 16, "17 tokens reuse two blocks");

	/* b shares a's first 16 tokens, by reference. */
	prompt(tb, 40, 1);
	tb[18] = 99;
	is_int(kv_prefix_match(p, &b, tb, 30), 16, "b reuses 16 tokens");
	ok(b.blocks[0] == a.blocks[0] && b.blocks[1] == a.blocks[1],
	    "the same blocks, not copies");
	is_int(kv_block_refs(p, a.blocks[0]), 2, "two holders");
	is_int(kv_block_refs(p, a.blocks[2]), 1, "a's partial block is its own");
	is_int(kv_pool_used_blocks(p), 3, "sharing takes no new block");
	compute(p, &b, tb, 30);
	ok(b.blocks[2] != a.blocks[2], "b's third block is its own");
	ok(kv_holds(p, &a, ta) && kv_holds(p, &b, tb),
	    "each sequence reads its own tokens' KV");

	/* a lets go: shared blocks stay with b; a's own are cached or free. */
	blk0 = a.blocks[0];
	kv_seq_release(p, &a);
	is_int(kv_block_refs(p, blk0), 1, "b still holds the shared block");
	is_int(kv_pool_used_blocks(p), 4, "b's four blocks in use");
	kv_seq_release(p, &b);
	is_int(kv_pool_used_blocks(p), 0, "no block used after both end");
	is_int(kv_pool_free_blocks(p), 8, "cached blocks count as free");
	kv_prefix_stats(p, &st);
	is_int(st.cached, 3, "three cached blocks stay reusable");

	/* A later request finds them again. */
	is_int(kv_prefix_match(p, &a, tb, 30), 24, "b's 24 tokens found again");
	ok(kv_holds(p, &a, tb), "and they hold b's KV");
	kv_seq_release(p, &a);

	/* Eviction under a tiny pool: new content takes uncached blocks first. */
	prompt(tc, 40, 50);
	compute(p, &c, tc, 40);
	is_int(c.n_blocks, 5, "c takes five blocks");
	kv_prefix_stats(p, &st);
	is_int(st.evictions, 0, "the five uncached blocks went first");
	is_int(st.cached, 8, "all eight blocks cached");
	kv_seq_release(p, &c);
	/* LRU: c released last, so b's blocks are the oldest. */
	ok(kv_seq_reserve(p, &a, 8) == 0, "one block for new content");
	kv_prefix_stats(p, &st);
	is_int(st.evictions, 1, "one cached block evicted");
	is_int(kv_prefix_lookup(p, tc, 40), 32, "c's prefix is intact");
	kv_seq_release(p, &a);
	kv_prefix_stats(p, &st);
	is_int(kv_prefix_lookup(p, tb, 30) < 24, 1,
	    "the evicted block was one of b's (least recently released)");

	/* A full pool of held blocks: nothing cached can be evicted. */
	is_int(kv_prefix_match(p, &c, tc, 40), 32, "c again: 32 tokens");
	ok(kv_seq_reserve(p, &a, 4 * 8) == 0, "the remaining four blocks");
	ok(kv_seq_reserve(p, &b, 1) == -1, "a full pool refuses");
	kv_seq_release(p, &a);
	kv_seq_release(p, &b);
	kv_seq_release(p, &c);
	is_int(kv_pool_used_blocks(p), 0, "all back");

	/* Forced collisions: every hash equal, tokens decide. */
	kv_pool_free(p);
	p = kv_pool_create(&l, 8, &cause);
	kv_prefix_enable(p, 7);
	kv_prefix_set_hash_mask(p, 0);
	prompt(ta, 40, 1);
	prompt(tb, 40, 100);
	compute(p, &a, ta, 24);
	is_int(kv_prefix_lookup(p, tb, 24), 0,
	    "a colliding hash with other tokens is not reused");
	compute(p, &b, tb, 24);
	kv_prefix_stats(p, &st);
	is_int(st.cached, 6, "both chains cached in one bucket");
	/* Same second block after a different first: parent decides. */
	memcpy(tc, tb, sizeof tc);
	memcpy(tc + 8, ta + 8, 8 * sizeof *tc);
	memcpy(tc, ta, 8 * sizeof *tc);
	tc[3] = 77;
	is_int(kv_prefix_lookup(p, tc, 24), 0,
	    "a matching block after a different one is not reused");
	memcpy(tc, ta, 16 * sizeof *tc);
	is_int(kv_prefix_match(p, &c, tc, 24), 16,
	    "the right chain is found among collisions");
	ok(kv_holds(p, &c, ta), "and it holds the right KV");
	kv_seq_release(p, &a);
	kv_seq_release(p, &b);
	kv_seq_release(p, &c);

	/* Twins: two sequences computing one prefix; truncate of shared. */
	kv_prefix_set_hash_mask(p, UINT64_MAX);
	prompt(ta, 40, 200);
	memset(&a, 0, sizeof a);
	compute(p, &a, ta, 10);
	compute(p, &b, ta, 10);
	blk1 = b.blocks[0];
	ok(blk1 != a.blocks[0], "a twin computed apart is its own block");
	kv_seq_release(p, &b);
	is_int(kv_block_refs(p, blk1), 0, "the twin is freed");
	is_int(kv_prefix_match(p, &b, ta, 20), 8, "the registered one is found");
	is_int(kv_block_refs(p, a.blocks[0]), 2, "and shared");
	kv_seq_truncate(p, &b, 4);
	is_int(b.n_tokens, 0, "truncating into a shared block drops it");
	is_int(kv_block_refs(p, a.blocks[0]), 1, "a holds it alone");
	compute(p, &b, tb, 12);
	ok(kv_holds(p, &a, ta) && kv_holds(p, &b, tb),
	    "rewriting after the truncate leaves a's KV alone");
	kv_seq_truncate(p, &a, 4);
	is_int(a.n_tokens, 4, "truncating an own block keeps its positions");
	is_int(kv_prefix_lookup(p, ta, 20), 0, "and forgets it in the cache");
	kv_seq_release(p, &a);
	kv_seq_release(p, &b);
	is_int(kv_pool_used_blocks(p), 0, "all back after twins");
	kv_prefix_disable(p);
	is_int(kv_pool_free_blocks(p), 8, "off again: all free");
	kv_pool_free(p);
}

int
main(void)
{
	struct kv_layout	 l = { .n_layers = 2, .n_kv_heads = 2,
				    .head_dim = 4, .block_size = 8,
				    .type = KV_TYPE_F16 };
	struct kv_pool		*p, *q;
	struct kv_seq		 a, b, c, d;
	char			*cause = NULL;
	uint32_t		 i;

	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	memset(&c, 0, sizeof c);
	memset(&d, 0, sizeof d);

	/* Layout checks. */
	{
		struct kv_layout bad = l;

		bad.block_size = 12;
		ok(kv_layout_check(&bad, &cause) == -1, "block size 12 rejected");
		is_str(cause, "kv block size 12 is not a multiple of 8",
		    "block size error");
		free(cause);
		cause = NULL;
		bad.block_size = 4;
		ok(kv_layout_check(&bad, &cause) == -1, "block size 4 rejected");
		is_str(cause, "kv block size 4 out of range 8..256",
		    "block size range error");
		free(cause);
		cause = NULL;
		bad = l;
		bad.type = 8;
		ok(kv_layout_check(&bad, &cause) == -1, "type Q8_0 rejected");
		is_str(cause, "kv type 8 is not F16, F32 or I16", "type error");
		free(cause);
		cause = NULL;
		bad = l;
		bad.type = KV_TYPE_I16;
		bad.head_dim = 5;
		ok(kv_layout_check(&bad, &cause) == -1, "I16 of head_dim 5 rejected");
		is_str(cause, "kv type I16 needs a head_dim that is a multiple "
		    "of 8, not 5", "head_dim error");
		free(cause);
		cause = NULL;
		ok(kv_pool_create(&l, 0, &cause) == NULL, "empty pool rejected");
		is_str(cause, "kv pool of 0 blocks out of range 1..268435456",
		    "empty pool error");
		free(cause);
		cause = NULL;
	}

	/* 2 layers x (K+V) x 2 heads x 4 dims x 8 slots x 2 bytes. */
	is_int(kv_layout_block_bytes(&l), 2 * 2 * 2 * 4 * 8 * 2, "block bytes");

	p = kv_pool_create(&l, 5, &cause);
	if (!ok(p != NULL, "tiny pool of 5 blocks"))
		diag("%s", cause);
	is_int(kv_pool_free_blocks(p), 5, "5 free");
	is_int(kv_pool_used_blocks(p), 0, "0 used");
	is_int(kv_pool_blocks_for(p, 0), 0, "0 tokens need 0 blocks");
	is_int(kv_pool_blocks_for(p, 8), 1, "8 tokens need 1 block");
	is_int(kv_pool_blocks_for(p, 9), 2, "9 tokens need 2 blocks");
	is_int(kv_layout_blocks_for(&l, UINT64_MAX), UINT32_MAX,
	    "a huge count saturates");

	/* Reserve grows by whole blocks and is idempotent. */
	is_int(kv_seq_blocks_needed(p, &a, 1), 1, "first token needs a block");
	is_int(kv_seq_reserve(p, &a, 1), 0, "reserve 1 token");
	is_int(a.n_blocks, 1, "a has 1 block");
	is_int(kv_pool_used_blocks(p), 1, "1 used");
	is_int(kv_seq_reserve(p, &a, 8), 0, "reserve 8 tokens again");
	is_int(a.n_blocks, 1, "still 1 block for 8 tokens");
	is_int(kv_seq_capacity(p, &a), 8, "capacity 8");
	a.n_tokens = 8;		/* as a forward pass would */
	is_int(kv_seq_blocks_needed(p, &a, 1), 1, "token 9 needs a block");
	is_int(kv_seq_reserve(p, &a, 9), 0, "reserve 9 more");
	is_int(a.n_blocks, 3, "a has 3 blocks for 17 tokens");
	is_int(kv_pool_free_blocks(p), 2, "2 free");

	/* Failure leaves everything unchanged. */
	is_int(kv_seq_reserve(p, &b, 17), -1, "17 tokens do not fit in 2 blocks");
	is_int(b.n_blocks, 0, "b got nothing");
	is_int(kv_pool_free_blocks(p), 2, "still 2 free");
	is_int(kv_pool_used_blocks(p), 3, "still 3 used");
	is_int(kv_seq_reserve(p, &a, 100), -1, "a cannot grow past the pool");
	is_int(a.n_blocks, 3, "a unchanged");
	is_int(kv_seq_reserve(p, &b, 16), 0, "16 tokens fit in 2 blocks");
	is_int(kv_pool_free_blocks(p), 0, "pool full");
	is_int(kv_seq_reserve(p, &c, 1), -1, "full pool refuses");
	is_int(kv_pool_free_blocks(p) + kv_pool_used_blocks(p), 5,
	    "free + used == n_blocks");

	/* Blocks are distinct. */
	{
		int	 seen[5] = { 0 }, dup = 0;

		for (i = 0; i < a.n_blocks; i++)
			dup |= seen[a.blocks[i]]++;
		for (i = 0; i < b.n_blocks; i++)
			dup |= seen[b.blocks[i]]++;
		ok(!dup, "no block given twice");
	}

	/* Truncate gives back surplus blocks. */
	a.n_tokens = 17;
	kv_seq_truncate(p, &a, 9);
	is_int(a.n_tokens, 9, "truncated to 9 tokens");
	is_int(a.n_blocks, 2, "2 blocks kept");
	is_int(kv_pool_free_blocks(p), 1, "1 free after truncate");

	/* Release returns all. */
	kv_seq_release(p, &b);
	is_int(b.n_blocks, 0, "b empty");
	ok(b.blocks == NULL, "b's table freed");
	is_int(kv_pool_free_blocks(p), 3, "3 free after release");
	kv_seq_release(p, &b);
	is_int(kv_pool_free_blocks(p), 3, "releasing an empty seq is harmless");

	/* Copy within a pool and between pools. */
	fill_seq(p, &a, 0x40);
	is_int(kv_seq_copy(p, &c, p, &a, &cause), 0, "copy within the pool");
	is_int(c.n_tokens, 9, "copy has 9 tokens");
	is_int(c.n_blocks, 2, "copy has 2 blocks");
	ok(check_seq(p, &c, 0x40), "copied data equal");
	is_int(kv_pool_free_blocks(p), 1, "copy took 2 blocks");
	ok(kv_seq_copy(p, &c, p, &a, &cause) == -1, "copy onto non-empty seq");
	is_str(cause, "kv copy destination is not empty (2 blocks)",
	    "non-empty error");
	free(cause);
	cause = NULL;
	ok(kv_seq_copy(p, &d, p, &a, &cause) == -1, "copy into a full pool");
	is_str(cause, "kv pool has 1 free blocks, copy needs 2", "full error");
	free(cause);
	cause = NULL;
	is_int(d.n_blocks, 0, "failed copy took nothing");
	is_int(kv_pool_free_blocks(p), 1, "failed copy left the count");

	q = kv_pool_create(&l, 3, &cause);
	ok(q != NULL, "second pool");
	is_int(kv_seq_copy(q, &d, p, &a, &cause), 0, "copy to another pool");
	ok(check_seq(q, &d, 0x40), "data arrived");
	is_int(kv_pool_used_blocks(q), 2, "destination pool used 2");
	is_int(kv_pool_used_blocks(p), 4, "source pool unchanged");
	kv_seq_release(q, &d);
	is_int(kv_pool_used_blocks(q), 0, "destination pool empty again");
	kv_pool_free(q);

	{
		struct kv_layout l32 = l;

		l32.type = KV_TYPE_F32;
		q = kv_pool_create(&l32, 3, &cause);
		ok(kv_seq_copy(q, &d, p, &a, &cause) == -1,
		    "copy between layouts refused");
		like(cause, "kv layouts differ", "layout error");
		free(cause);
		cause = NULL;
		is_int(kv_pool_used_blocks(q), 0, "nothing taken");
		kv_pool_free(q);
	}

	/* Accessors stay inside a block and separate K, V, heads and layers. */
	{
		uint8_t	*base = p->data + (size_t)a.blocks[0] * p->block_bytes;
		uint8_t	*k00 = kv_block_k(p, a.blocks[0], 0, 0);
		uint8_t	*k01 = kv_block_k(p, a.blocks[0], 0, 1);
		uint8_t	*v00 = kv_block_v(p, a.blocks[0], 0, 0);
		uint8_t	*k10 = kv_block_k(p, a.blocks[0], 1, 0);
		uint8_t	*v11 = kv_block_v(p, a.blocks[0], 1, 1);

		ok(k00 == base, "layer 0 head 0 K first");
		is_int(k01 - k00, 4 * 8 * 2, "heads one head apart");
		is_int(v00 - k00, 2 * 4 * 8 * 2, "V after the heads' K");
		is_int(k10 - k00, 2 * 2 * 4 * 8 * 2, "layers one layer apart");
		is_int(v11 + 4 * 8 * 2 - base, p->block_bytes, "last V ends the block");
	}

	kv_seq_release(p, &a);
	kv_seq_release(p, &c);
	is_int(kv_pool_free_blocks(p), 5, "all free at the end");
	is_int(kv_pool_used_blocks(p), 0, "none used at the end");

	is_int(kv_seq_reserve(p, &a, 40), 0, "the whole pool again");
	is_int(kv_pool_free_blocks(p), 0, "none free");
	kv_seq_release(p, &a);
	kv_pool_free(p);
	test_prefix();
	test_i16();
	done_testing();
}
