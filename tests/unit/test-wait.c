/* test-wait.c: wait attribution on synthetic timelines, exact arithmetic. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "metrics.h"
#include "wait.h"
#include "tap.h"

#define MS	1000000ULL
#define T0	(1000 * 1000 * MS)

/* An iteration with equal token costs (the model before it is fitted). */
static struct wait_iter
iter(uint64_t start, uint64_t end, uint32_t prefill, uint32_t decode,
    const struct wait_entry *pe, size_t npe)
{
	struct wait_iter it;

	memset(&it, 0, sizeof it);
	it.start = start;
	it.end = end;
	it.prefill_tokens = prefill;
	it.decode_tokens = decode;
	it.prefills = pe;
	it.nprefills = npe;
	it.a = 0;
	it.b = it.c = 1;
	return (it);
}

/* Alone: queued, own prefill, scheduling gaps and decode add up. */
static void
test_alone(void)
{
	struct reqwait		w;
	struct wait_entry	self = { 5, 8 };
	struct wait_iter	it;

	reqwait_init(&w, T0);
	it = iter(T0 + 10 * MS, T0 + 30 * MS, 8, 0, &self, 1);
	reqwait_iteration(&w, &it, 5, WAIT_PREFILL);
	it = iter(T0 + 32 * MS, T0 + 35 * MS, 0, 1, NULL, 0);
	reqwait_iteration(&w, &it, 5, WAIT_DECODE);
	reqwait_finish(&w, T0 + 36 * MS);
	is_int(w.ns[WAIT_QUEUED], 10 * MS, "alone: queued 10 ms");
	is_int(w.ns[WAIT_PREFILL], 20 * MS, "alone: own prefill 20 ms");
	is_int(w.ns[WAIT_DECODE], 3 * MS, "alone: decode 3 ms");
	is_int(w.ns[WAIT_SCHEDULING], 3 * MS, "alone: scheduling 2 + 1 ms");
	is_int(w.ns[WAIT_OTHERS_PREFILL], 0, "alone: nobody else's prefill");
	is_int(reqwait_total(&w), 36 * MS, "alone: the shares sum to e2e");
}

/* A decode step shared with two prompts: their tokens take their share. */
static void
test_others(void)
{
	struct reqwait		w;
	struct wait_entry	pe[2] = { { 7, 60 }, { 9, 39 } };
	struct wait_blame	b[WAIT_BLAME_MAX];
	struct wait_iter	it;

	reqwait_init(&w, T0);
	it = iter(T0, T0 + 100 * MS, 99, 1, pe, 2);
	reqwait_iteration(&w, &it, 3, WAIT_DECODE);
	reqwait_finish(&w, T0 + 100 * MS);
	is_int(w.ns[WAIT_OTHERS_PREFILL], 99 * MS, "others: 99 of 100 tokens");
	is_int(w.ns[WAIT_DECODE], 1 * MS, "others: own decode 1 ms");
	is_int(reqwait_total(&w), 100 * MS, "others: sum is e2e");
	is_int(reqwait_blamed(&w, b), 2, "others: two requests blamed");
	is_int(b[0].id, 7, "others: the larger prompt first");
	is_int(b[0].ns, 60 * MS, "others: 60 ms on request 7");
	is_int(b[1].id, 9, "others: then request 9");
	is_int(b[1].ns, 39 * MS, "others: 39 ms on request 9");
}

/* A prefill sharing an iteration with another prefill is stretched too. */
static void
test_two_prefills(void)
{
	struct reqwait		w;
	struct wait_entry	pe[2] = { { 1, 30 }, { 2, 10 } };
	struct wait_iter	it;

	reqwait_init(&w, T0);
	it = iter(T0, T0 + 40 * MS, 40, 0, pe, 2);
	reqwait_iteration(&w, &it, 2, WAIT_PREFILL);
	is_int(w.ns[WAIT_OTHERS_PREFILL], 30 * MS, "two prefills: 30 ms theirs");
	is_int(w.ns[WAIT_PREFILL], 10 * MS, "two prefills: 10 ms own");
}

/* The least-squares fit recovers an exact linear cost and splits by it. */
static void
test_model(void)
{
	struct wait_model	m;
	struct wait_entry	pe = { 11, 100 };
	struct wait_iter	it;
	struct reqwait		w;
	double			a, b, c;
	uint32_t		p[5] = { 0, 16, 64, 0, 128 };
	uint32_t		d[5] = { 1, 2, 0, 4, 3 };
	int			i;

	wait_model_init(&m);
	wait_model_coef(&m, &a, &b, &c);
	ok(a == 0 && b == 1 && c == 1, "model: empty fit gives equal costs");
	for (i = 0; i < 3; i++)
		wait_model_add(&m, 8, 2, 50 * MS);
	wait_model_coef(&m, &a, &b, &c);
	ok(a == 0 && b == 1 && c == 1, "model: one composition is singular");
	wait_model_init(&m);
	for (i = 0; i < 5; i++)
		wait_model_add(&m, p[i], d[i],
		    2 * MS + p[i] * MS / 2 + d[i] * MS);
	wait_model_coef(&m, &a, &b, &c);
	near(a, 2e6, 1, "model: fixed cost 2 ms");
	near(b, 5e5, 1e-3, "model: 0.5 ms per prompt token");
	near(c, 1e6, 1e-3, "model: 1 ms per decode token");
	/* Model: 2 + 50 + 2 = 54 ms; measured twice that. */
	reqwait_init(&w, T0);
	it = iter(T0, T0 + 108 * MS, 100, 2, &pe, 1);
	it.a = a;
	it.b = b;
	it.c = c;
	reqwait_iteration(&w, &it, 4, WAIT_DECODE);
	near((double)w.ns[WAIT_OTHERS_PREFILL], 100.0 * MS, 10,
	    "model: others' 50 of 54 ms scaled to 100 of 108 ms");
	is_int(w.ns[WAIT_OTHERS_PREFILL] + w.ns[WAIT_DECODE], 108 * MS,
	    "model: the iteration is split exactly");
	/* A negative slope is noise: equal costs again. */
	wait_model_init(&m);
	for (i = 0; i < 5; i++)
		wait_model_add(&m, p[i], d[i], 200 * MS - p[i] * MS);
	wait_model_coef(&m, &a, &b, &c);
	ok(a == 0 && b == 1 && c == 1, "model: negative slope falls back");
}

/* Preemption, recomputation and a KV move each get their own cause. */
static void
test_preempt_transfer(void)
{
	struct reqwait		w;
	struct wait_entry	self = { 5, 20 };
	struct wait_iter	it;

	reqwait_init(&w, T0);
	it = iter(T0 + 1 * MS, T0 + 5 * MS, 20, 0, &self, 1);
	reqwait_iteration(&w, &it, 5, WAIT_PREFILL);
	reqwait_gap(&w, T0 + 6 * MS, WAIT_PREEMPTED);
	it = iter(T0 + 16 * MS, T0 + 20 * MS, 20, 0, &self, 1);
	reqwait_iteration(&w, &it, 5, WAIT_PREEMPTED);
	reqwait_gap(&w, T0 + 21 * MS, WAIT_KV_TRANSFER);
	it = iter(T0 + 28 * MS, T0 + 29 * MS, 0, 1, NULL, 0);
	reqwait_iteration(&w, &it, 5, WAIT_DECODE);
	reqwait_finish(&w, T0 + 30 * MS);
	is_int(w.ns[WAIT_QUEUED], 1 * MS, "preempt: queued 1 ms");
	is_int(w.ns[WAIT_PREFILL], 4 * MS, "preempt: first prefill 4 ms");
	is_int(w.ns[WAIT_PREEMPTED], 14 * MS, "preempt: 10 ms out + 4 recomputing");
	is_int(w.ns[WAIT_KV_TRANSFER], 7 * MS, "preempt: 7 ms for the KV move");
	is_int(w.ns[WAIT_DECODE], 1 * MS, "preempt: decode 1 ms");
	is_int(w.ns[WAIT_SCHEDULING], 3 * MS, "preempt: 1 + 1 + 1 ms between");
	is_int(reqwait_total(&w), 30 * MS, "preempt: the shares sum to e2e");
}

/* The blame table keeps the largest few when more requests stretch it. */
static void
test_blame_full(void)
{
	struct reqwait		w;
	struct wait_blame	b[WAIT_BLAME_MAX];
	struct wait_entry	pe;
	struct wait_iter	it;
	uint64_t		t = T0;
	int			i;

	reqwait_init(&w, T0);
	for (i = 1; i <= WAIT_BLAME_MAX + 1; i++) {
		pe.id = (uint64_t)(100 + i);
		pe.tokens = 9;
		/* Request 100+i stretches one iteration by i ms (9 of 10). */
		it = iter(t, t + (uint64_t)i * 10 * MS / 9, 9, 1, &pe, 1);
		it.end = t + (uint64_t)i * MS * 10 / 9;
		reqwait_iteration(&w, &it, 1, WAIT_DECODE);
		t = it.end;
	}
	is_int(reqwait_blamed(&w, b), WAIT_BLAME_MAX, "blame: table full");
	is_int(b[0].id, 100 + WAIT_BLAME_MAX + 1, "blame: the largest first");
	is_int(b[WAIT_BLAME_MAX - 1].id, 102, "blame: the smallest dropped");
	is_int(reqwait_total(&w), t - T0, "blame: sum still exact");
}

/*
 * The per-model share histograms of a finished request (queued 3, own
 * prefill 12, others' 30, scheduling 5 of 50 ms), and the window of the
 * decode latency others' prefill caused.
 */
static void
test_shares(const struct reqtime *rt)
{
	struct inst_metrics	 m;
	struct inst_snapshot	 sn;
	struct iter_sample	 is;
	uint64_t		 gap = 20 * MS;
	const struct hist	*h;

	inst_metrics_init(&m, "m", T0, NULL);
	inst_metrics_finished(&m, rt, FINISH_EOS);
	/* Two iterations: the second's decoders lost 5 ms to prefill. */
	memset(&is, 0, sizeof is);
	is.start = T0;
	is.end = T0 + 20 * MS;
	inst_metrics_iteration(&m, &is, &gap, 1);
	is.start = T0 + 20 * MS;
	is.end = T0 + 40 * MS;
	is.decode_others_ns = 5 * MS;
	inst_metrics_iteration(&m, &is, &gap, 1);
	inst_snapshot_init(&sn);
	inst_metrics_snapshot(&m, &sn, T0 + 50 * MS);
	h = &sn.wait_share[WAIT_OTHERS_PREFILL];
	is_int(h->count, 1, "shares: one request");
	is_int(h->sum, 600000, "shares: others' prefill 0.6 in ppm");
	is_int(h->counts[hist_bucket(&hist_layout_share, 600000)], 1,
	    "shares: in the le 0.6 bucket");
	is_int(hist_layout_share.bounds[hist_bucket(&hist_layout_share,
	    600000)], 600000, "shares: which is bound 0.6");
	h = &sn.wait_share[WAIT_QUEUED];
	is_int(h->sum, 60000, "shares: queued 0.06");
	is_int(h->counts[hist_bucket(&hist_layout_share, 60000)], 1,
	    "shares: queued in le 0.1");
	is_int(hist_layout_share.bounds[hist_bucket(&hist_layout_share,
	    60000)], 100000, "shares: the bucket above 0.05");
	h = &sn.wait_share[WAIT_DECODE];
	is_int(h->counts[0], 1, "shares: no decode: the le 0 bucket");
	is_int(sn.wait_share[WAIT_PREFILL].sum +
	    sn.wait_share[WAIT_OTHERS_PREFILL].sum +
	    sn.wait_share[WAIT_QUEUED].sum +
	    sn.wait_share[WAIT_SCHEDULING].sum, 1000000,
	    "shares: the request's shares sum to 1");
	is_int(sn.decode_gaps_ns, 40 * MS, "decode window: 40 ms between tokens");
	is_int(sn.decode_others_ns, 5 * MS, "decode window: 5 ms of it others'");
	ok(inst_snapshot_decode_others_share(&sn) == 0.125,
	    "decode window: share 0.125");
	/* A minute later both have left the window. */
	inst_metrics_snapshot(&m, &sn, T0 + 70 * 1000 * MS);
	ok(sn.decode_gaps_ns == 0 && inst_snapshot_decode_others_share(&sn) == 0,
	    "decode window: empty after a minute");
	inst_snapshot_free(&sn);
	inst_metrics_free(&m);
}

/* Through reqtime: the summary carries the shares and they sum to e2e. */
static void
test_reqtime(void)
{
	struct reqtime		rt;
	struct reqtime_summary	s;
	struct wait_entry	pe[2] = { { 2, 12 }, { 8, 30 } };
	struct wait_iter	it;
	uint64_t		sum = 0;
	int			i;

	reqtime_init(&rt, T0, 12);
	reqtime_admit(&rt, T0 + 3 * MS);
	it = iter(T0 + 3 * MS, T0 + 45 * MS, 42, 0, pe, 2);
	reqwait_iteration(&rt.wait, &it, 2, WAIT_PREFILL);
	reqtime_chunk(&rt, T0 + 3 * MS, T0 + 45 * MS, 12);
	reqtime_token(&rt, T0 + 46 * MS);
	reqtime_finish(&rt, T0 + 50 * MS);
	reqtime_summary(&rt, &s);
	for (i = 0; i < WAIT__COUNT; i++)
		sum += s.wait_ns[i];
	is_int(sum, s.e2e_ns, "reqtime: the shares sum to e2e");
	is_int(s.wait_ns[WAIT_OTHERS_PREFILL], 30 * MS, "reqtime: 30 ms theirs");
	is_int(s.wait_ns[WAIT_PREFILL], 12 * MS, "reqtime: 12 ms own prefill");
	is_int(s.wait_ns[WAIT_SCHEDULING], 5 * MS, "reqtime: 5 ms after");
	is_int(s.nblamed, 1, "reqtime: one request blamed");
	is_int(s.blamed[0].id, 8, "reqtime: request 8");
	is_str(wait_cause_names[WAIT_OTHERS_PREFILL], "others_prefill",
	    "cause name of others' prefill");
	test_shares(&rt);
	reqtime_free(&rt);
}

int
main(void)
{
	test_alone();
	test_others();
	test_two_prefills();
	test_model();
	test_preempt_transfer();
	test_blame_full();
	test_reqtime();
	done_testing();
}
