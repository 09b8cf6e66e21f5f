/*
 * test-fair-share.c: the fair-share policy: valid plans on thousands of
 * random views with random users, weights and priorities; each user's share
 * of the tokens within 10% of its weight's share in a simulated engine with
 * every user backlogged; a chat user taking the first seat a batch user
 * frees; priorities within a user; reconfigure.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "policy_host.h"
#include "tap.h"
#include "policy-testutil.h"

/* The request with this id, or NULL. */
static struct phased_request *
req_of(struct tv *t, uint64_t id)
{
	uint32_t	i;

	for (i = 0; i < t->v.n_reqs; i++)
		if (t->reqs[i].id == id)
			return (&t->reqs[i]);
	return (NULL);
}

/* A request of user uid (weight w) added as tv_add does. */
static struct phased_request *
add(struct tv *t, uint64_t id, uint32_t uid, uint32_t w, uint32_t prompt,
    uint32_t computed, uint32_t generated)
{
	struct phased_request	*r = tv_add(t, id, 0, prompt, computed,
				    generated);

	r->uid = uid;
	r->weight = w;
	return (r);
}

/* Random views: valid plans, every decode planned, within the chunk. */
static void
test_random(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol[3];
	char		 err[256];
	int		 iter, invalid = 0, unserved = 0, over = 0, dup = 0;
	uint32_t	 i, j, n, d, pre, k;

	pol[0] = load("fair-share", "");
	pol[1] = load("fair-share", "budget=64");
	pol[2] = load("fair-share", "quantum=8 tbt_p99_ms=20");
	for (iter = 0; iter < 6000; iter++) {
		k = (uint32_t)iter % 3;
		tv_init(t, rnd(16, 2048), rnd(1, 32), rnd(0, 3) == 0 ?
		    rnd(0, 200) : 1000000);
		t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
		t->v.iteration = (uint64_t)iter;
		n = rnd(0, 60);
		for (i = 0; i < n; i++) {
			uint32_t prompt = rnd(1, 900), kind = rnd(0, 2);
			struct phased_request *r;

			r = add(t, 1 + i, rnd(0, 4), rnd(1, 9), prompt,
			    kind == 0 ? 0 : kind == 1 ? rnd(1, prompt) :
			    prompt, kind == 2 ? rnd(1, 50) : 0);
			r->priority = (int32_t)rnd(0, 4) - 2;
		}
		t->v.n_hist = rnd(0, 20);
		for (i = 0; i < t->v.n_hist; i++) {
			t->hist[i].prefill_tokens = rnd(0, 300);
			t->hist[i].decode_tokens = rnd(0, 10);
			t->hist[i].duration_ns = 1000000ULL * (5 +
			    t->hist[i].prefill_tokens / 20 +
			    t->hist[i].decode_tokens);
		}
		if (plan(pol[k], t) != 0 ||
		    plan_validate(&t->v, &t->p, err, sizeof err) != 0) {
			if (invalid++ == 0)
				diag("view %d: %s", iter, err);
			continue;
		}
		d = pre = 0;
		for (i = 0; i < t->p.n_entries; i++) {
			struct phased_request *r = req_of(t, t->p.entries[i].id);

			for (j = 0; j < i; j++)
				dup += t->p.entries[j].id == t->p.entries[i].id;
			if (r->state == PHASED_REQ_DECODING)
				d++;
			else
				pre += t->p.entries[i].n_tokens;
		}
		if (t->groups[0].free_blocks == 1000000) {
			uint32_t want = 0;

			for (i = 0; i < t->v.n_reqs; i++)
				want += t->reqs[i].state == PHASED_REQ_DECODING;
			if (want > t->v.max_seqs)
				want = t->v.max_seqs;
			if (want > t->v.max_batch_tokens)
				want = t->v.max_batch_tokens;
			if (d != want && unserved++ == 0)
				diag("view %d: %u of %u decodes", iter, d, want);
		}
		if (d > 0 && pre > t->p.chunk_tokens && over++ == 0)
			diag("view %d: prefill %u over the chunk %u", iter, pre,
			    t->p.chunk_tokens);
	}
	is_int(invalid, 0, "6000 random plans pass plan_validate");
	is_int(dup, 0, "no request twice in a plan");
	is_int(unserved, 0, "every running decode planned when KV allows");
	is_int(over, 0, "prefill within the reported chunk");
	for (k = 0; k < 3; k++)
		policy_close(pol[k]);
	free(t);
}

/* A simulated engine: users, their weights, their backlog. */
struct sim {
	struct tv	*t;
	uint64_t	 next_id;
	uint64_t	 tokens[8];	/* per uid */
	uint32_t	 prompt, output;
};

/* Queue one request for user uid. */
static void
sim_submit(struct sim *s, uint32_t uid, uint32_t w)
{
	struct phased_request	*r;

	r = add(s->t, s->next_id, uid, w, s->prompt, 0, 0);
	r->arrival_ns = s->t->v.now_ns + s->next_id;
	r->max_tokens = s->output;
	s->next_id++;
}

/*
 * Apply a plan: prompts advance, decodes generate, finished requests
 * leave; returns the uid of each finished request in fin.
 */
static int
sim_apply(struct sim *s, uint32_t *fin)
{
	struct tv	*t = s->t;
	uint32_t	 i, pre = 0, dec = 0;
	int		 nf = 0;

	for (i = 0; i < t->p.n_entries; i++) {
		struct phased_request *r = req_of(t, t->p.entries[i].id);
		uint32_t n = t->p.entries[i].n_tokens;

		s->tokens[r->uid] += n;
		if (r->state == PHASED_REQ_DECODING) {
			r->generated_tokens++;
			r->kv_tokens++;
			dec++;
		} else {
			r->state = PHASED_REQ_PREFILLING;
			r->group = 0;
			r->computed_tokens += n;
			r->kv_tokens += n;
			pre += n;
			if (r->computed_tokens == r->prompt_tokens) {
				r->state = PHASED_REQ_DECODING;
				r->generated_tokens = 1;
			}
		}
		r->kv_blocks = (r->kv_tokens + 15) / 16;
	}
	for (i = 0; i < t->v.n_reqs; ) {
		struct phased_request *r = &t->reqs[i];

		if (r->state == PHASED_REQ_DECODING &&
		    r->generated_tokens >= r->max_tokens) {
			fin[nf++] = r->uid;
			memmove(r, r + 1, (t->v.n_reqs - i - 1) * sizeof *r);
			t->v.n_reqs--;
		} else
			i++;
	}
	if (t->v.n_hist == TV_MAXH) {
		memmove(t->hist, t->hist + 1, (TV_MAXH - 1) * sizeof *t->hist);
		t->v.n_hist--;
	}
	t->hist[t->v.n_hist].prefill_tokens = pre;
	t->hist[t->v.n_hist].decode_tokens = dec;
	t->hist[t->v.n_hist].duration_ns = 1000000ULL * 10 + pre * 50000ULL +
	    dec * 500000ULL;
	t->v.n_hist++;
	t->v.iteration++;
	t->v.now_ns += 20000000ULL;
	return (nf);
}

/*
 * Users 0..n-1 with weights w[], each keeping `backlog` requests queued;
 * the share of tokens each got over `iters` iterations after a warm-up.
 */
static void
sim_shares(const char *params, const uint32_t *w, int n, int backlog,
    int iters, double *share)
{
	struct sim	 s;
	struct policy	*pol = load("fair-share", params);
	uint64_t	 total = 0, base[8];
	uint32_t	 fin[TV_MAXR];
	char		 err[256];
	int		 i, u, nf, bad = 0;

	memset(&s, 0, sizeof s);
	s.t = calloc(1, sizeof *s.t);
	s.prompt = 48;
	s.output = 40;
	s.next_id = 1;
	tv_init(s.t, 512, 16, 1000000);
	s.t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	for (u = 0; u < n; u++)
		for (i = 0; i < backlog; i++)
			sim_submit(&s, (uint32_t)u, w[u]);
	memset(base, 0, sizeof base);
	for (i = 0; i < iters + 200; i++) {
		if (i == 200)
			memcpy(base, s.tokens, sizeof base);
		plan(pol, s.t);
		if (plan_validate(&s.t->v, &s.t->p, err, sizeof err) != 0 &&
		    bad++ == 0)
			diag("simulation iteration %d: %s", i, err);
		nf = sim_apply(&s, fin);
		while (nf-- > 0)
			sim_submit(&s, fin[nf], w[fin[nf]]);
	}
	is_int(bad, 0, "%s: simulated plans valid", params);
	for (u = 0; u < n; u++)
		total += s.tokens[u] - base[u];
	for (u = 0; u < n; u++)
		share[u] = total == 0 ? 0 : (double)(s.tokens[u] - base[u]) /
		    (double)total;
	policy_close(pol);
	free(s.t);
}

/* Every backlogged user gets its weight's share within 10%. */
static void
test_shares(void)
{
	static const struct {
		const char	*params;
		uint32_t	 w[4];
		int		 n;
	} cases[] = {
		{ "", { 1, 1 }, 2 },
		{ "", { 3, 1 }, 2 },
		{ "", { 1, 2, 5 }, 3 },
		{ "budget=128", { 2, 1 }, 2 },
		{ "quantum=16", { 1, 4 }, 2 },
	};
	double	 share[8];
	size_t	 c;
	int	 u;
	uint32_t wsum;

	for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		sim_shares(cases[c].params, cases[c].w, cases[c].n, 30, 3000,
		    share);
		wsum = 0;
		for (u = 0; u < cases[c].n; u++)
			wsum += cases[c].w[u];
		for (u = 0; u < cases[c].n; u++) {
			double want = (double)cases[c].w[u] / wsum;

			diag("'%s' user %d weight %u: share %.3f (weight share "
			    "%.3f)", cases[c].params, u, cases[c].w[u],
			    share[u], want);
			ok(fabs(share[u] - want) <= 0.1 * want, "'%s' user %d "
			    "weight %u: share %.3f within 10%% of %.3f",
			    cases[c].params, u, cases[c].w[u], share[u], want);
		}
	}
}

/* A chat user takes the first seat a batch user frees. */
static void
test_chat_vs_batch(void)
{
	struct tv	*t = calloc(1, sizeof *t);
	struct policy	*pol = load("fair-share", "");
	struct phased_request *r;
	uint32_t	 i;

	tv_init(t, 512, 4, 1000000);
	t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	/* The batch user (uid 1) holds all 4 seats and queues 20 more. */
	for (i = 0; i < 4; i++)
		add(t, 1 + i, 1, 1, 30, 30, 5);
	for (i = 0; i < 20; i++)
		add(t, 10 + i, 1, 1, 30, 0, 0);
	r = add(t, 100, 2, 1, 10, 0, 0);	/* the chat, newest */
	plan(pol, t);
	is_int(t->p.n_entries, 4, "all seats taken: only the decodes run");
	/* One batch request ends: the seat goes to the chat. */
	memmove(&t->reqs[0], &t->reqs[1], (t->v.n_reqs - 1) * sizeof *t->reqs);
	t->v.n_reqs--;
	plan(pol, t);
	is_int(t->p.n_entries, 4, "3 decodes and one admission");
	is_int(t->p.entries[3].id, 100, "the freed seat goes to the chat, not "
	    "to the older batch requests");
	(void)r;

	/* Without other users the batch user may fill every seat. */
	tv_init(t, 512, 4, 1000000);
	t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	for (i = 0; i < 10; i++)
		add(t, 1 + i, 1, 1, 30, 0, 0);
	plan(pol, t);
	is_int(t->p.n_entries, 4, "a lone user takes all seats");

	/* Priority within a user: the urgent request first. */
	tv_init(t, 512, 1, 1000000);
	t->v.abi_minor = PHASED_POLICY_ABI_MINOR;
	add(t, 1, 1, 1, 30, 0, 0);
	add(t, 2, 1, 1, 30, 0, 0)->priority = -5;
	plan(pol, t);
	is_int(t->p.n_entries, 1, "one seat");
	is_int(t->p.entries[0].id, 2, "the urgent priority is admitted first");
	policy_close(pol);
	free(t);
}

/* Reconfigure keeps the accounts and refuses bad values. */
static void
test_reconfigure(void)
{
	struct policy			*pol = load("fair-share", "");
	struct phased_param		 kv[1];
	struct phased_policy_params	 pp = { 1, kv };
	char				 err[256];

	kv[0].key = "quantum";
	kv[0].value = "32";
	ok(pol->ops->reconfigure != NULL &&
	    pol->ops->reconfigure(pol->state, &pp, err, sizeof err) == 0,
	    "reconfigure quantum=32");
	kv[0].value = "0";
	ok(pol->ops->reconfigure(pol->state, &pp, err, sizeof err) == -1,
	    "reconfigure quantum=0 refused");
	like(err, "quantum 0 is out of range 1..65536", "names the range");
	kv[0].key = "weight";
	ok(pol->ops->reconfigure(pol->state, &pp, err, sizeof err) == -1,
	    "unknown key refused");
	like(err, "unknown parameter 'weight' (expected budget, quantum",
	    "lists the keys");
	policy_close(pol);
}

int
main(void)
{
	const char	*e;

	rng_state = 0x853c49e6748fea9bULL;
	log_init(1, 0, "test-fair-share");
	if ((e = getenv("POLICY_BUILD_DIR")) != NULL)
		builddir = e;
	test_random();
	test_shares();
	test_chat_vs_batch();
	test_reconfigure();
	done_testing();
}
