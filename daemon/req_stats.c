/* req_stats.c: stats, metrics and trace requests. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "conn.h"
#include "instance.h"
#include "metrics.h"
#include "phased.h"
#include "prom.h"
#include "req.h"
#include "strbuf.h"
#include "trace.h"
#include "util.h"

#define TRACE_MAX_SECONDS	3600

/* Counters of a model: finished by reason, then the wait causes. */
#define STATS_NCOUNTERS	(FINISH__COUNT + WAIT__COUNT + 4)

/* The share histograms of one model, kept until the reply is sent. */
struct wait_shares {
	Phased__WaitShare	 ws[WAIT__COUNT];
	Phased__WaitShare	*ptrs[WAIT__COUNT];
	double			 le[HIST_MAXBOUNDS];
	uint64_t		 buckets[WAIT__COUNT][HIST_MAXBOUNDS];
};

/* Fill each cause's share histogram of a snapshot. */
static void
fill_wait_shares(const struct inst_snapshot *sn, Phased__ModelStats *ms,
    struct wait_shares *w)
{
	const struct hist_layout *l = &hist_layout_share;
	const struct hist	*h;
	Phased__WaitShare	*ws;
	int			 c, i;

	for (i = 0; i < l->nbounds; i++)
		w->le[i] = (double)l->bounds[i] * l->scale;
	for (c = 0; c < WAIT__COUNT; c++) {
		h = &sn->wait_share[c];
		ws = &w->ws[c];
		phased__wait_share__init(ws);
		ws->cause = (char *)wait_cause_names[c];
		ws->count = h->count;
		ws->mean = hist_mean(h) * l->scale;
		ws->p50 = hist_percentile(h, 50) * l->scale;
		ws->p90 = hist_percentile(h, 90) * l->scale;
		ws->p99 = hist_percentile(h, 99) * l->scale;
		/* A share is at most 1: the overflow bucket stays empty. */
		for (i = 0; i < l->nbounds; i++)
			w->buckets[c][i] = h->counts[i];
		ws->n_le = ws->n_buckets = (size_t)l->nbounds;
		ws->le = w->le;
		ws->buckets = w->buckets[c];
		w->ptrs[c] = ws;
	}
	ms->n_wait_share = WAIT__COUNT;
	ms->wait_share = w->ptrs;
}

/* Fill one ModelStats from an instance's snapshot. */

static void
fill_model_stats(struct instance *in, const struct inst_snapshot *sn,
    Phased__ModelStats *ms, Phased__StatsRow *rows, Phased__StatsRow **ptrs,
    char **counters)
{
	struct stats_row		 sr[2][MET__COUNT];
	struct engine_policy_info	 pi;
	double				 wp, wo, ap, ao;
	size_t				 n[2], i, k = 0;
	int				 span;

	phased__model_stats__init(ms);
	ms->model = in->name;
	for (span = 0; span < 2; span++) {
		n[span] = inst_stats_rows(sn, span == 0 ? STATS_WINDOW :
		    STATS_SINCE_START, sr[span], MET__COUNT);
		for (i = 0; i < n[span]; i++, k++) {
			phased__stats_row__init(&rows[k]);
			rows[k].name = (char *)sr[span][i].name;
			rows[k].count = sr[span][i].count;
			rows[k].mean = sr[span][i].mean;
			rows[k].p50 = sr[span][i].p50;
			rows[k].p90 = sr[span][i].p90;
			rows[k].p99 = sr[span][i].p99;
			rows[k].max = sr[span][i].max;
			ptrs[k] = &rows[k];
		}
	}
	ms->n_window = n[0];
	ms->window = ptrs;
	ms->n_total = n[1];
	ms->total = ptrs + n[0];
	inst_snapshot_rates(sn, &wp, &wo, &ap, &ao);
	ms->prompt_tokens = sn->prompt_tokens;
	ms->output_tokens = sn->output_tokens;
	ms->prompt_tps = wp;
	ms->output_tps = wo;
	ms->kv_blocks_used = (uint32_t)sn->kv_used;
	ms->kv_blocks_free = (uint32_t)sn->kv_free;
	ms->requests_running = (uint32_t)sn->running;
	ms->requests_waiting = (uint32_t)sn->waiting;
	ms->preemptions = sn->counters[CNT_PREEMPTIONS];
	engine_policy_info(in->engine, &pi);
	ms->plan_errors = pi.plan_errors;
	ms->swaps = pi.swaps;
	ms->policy = xstrdup(pi.name);
	for (i = 0; i < FINISH__COUNT; i++)
		xasprintf(&counters[i], "finished_%s=%llu",
		    finish_reason_names[i], (unsigned long long)sn->finished[i]);
	/* Finished requests' end-to-end time by cause (wait.h), since start. */
	for (i = 0; i < WAIT__COUNT; i++)
		xasprintf(&counters[FINISH__COUNT + i], "wait_%s_ms=%.3f",
		    wait_cause_names[i], sn->wait_ns[i] / 1e6);
	/* KV moved between device groups, since start. */
	xasprintf(&counters[FINISH__COUNT + WAIT__COUNT], "kv_transfer_bytes=%llu",
	    (unsigned long long)sn->counters[CNT_KV_TRANSFER_BYTES]);
	xasprintf(&counters[FINISH__COUNT + WAIT__COUNT + 1],
	    "kv_transfer_ms=%.3f", sn->counters[CNT_KV_TRANSFER_NS] / 1e6);
	/* Cores idle groups lent to busy ones (engine.c), since start. */
	xasprintf(&counters[FINISH__COUNT + WAIT__COUNT + 2],
	    "lend_iterations=%llu",
	    (unsigned long long)sn->counters[CNT_LEND_ITERATIONS]);
	xasprintf(&counters[FINISH__COUNT + WAIT__COUNT + 3], "cores_lent=%llu",
	    (unsigned long long)sn->counters[CNT_CORES_LENT]);
	ms->n_counters = STATS_NCOUNTERS;
	ms->counters = counters;
	ms->has_prefix_cache_queries = ms->has_prefix_cache_hit_tokens =
	    ms->has_prefix_cache_evictions = ms->has_prefix_cache_blocks = 1;
	ms->prefix_cache_queries = sn->counters[CNT_PREFIX_QUERIES];
	ms->prefix_cache_hit_tokens = sn->counters[CNT_PREFIX_HIT_TOKENS];
	ms->prefix_cache_evictions = sn->counters[CNT_PREFIX_EVICTIONS];
	ms->prefix_cache_blocks = (uint32_t)sn->counters[CNT_PREFIX_BLOCKS_CACHED];
	ms->has_window_s = 1;
	ms->window_s = inst_snapshot_window_span(sn) / 1e9;
	ms->has_decode_gaps_ms = ms->has_decode_others_prefill_ms =
	    ms->has_decode_others_prefill_share = 1;
	ms->decode_gaps_ms = sn->decode_gaps_ns / 1e6;
	ms->decode_others_prefill_ms = sn->decode_others_ns / 1e6;
	ms->decode_others_prefill_share = inst_snapshot_decode_others_share(sn);
}

/* Per-model statistics: latency percentiles and token rates. */
static void
req_stats(struct conn *c, Phased__Request *req)
{
	Phased__Response	  r = PHASED__RESPONSE__INIT;
	Phased__StatsReply	  sr = PHASED__STATS_REPLY__INIT;
	Phased__ModelStats	 *ms, **mptrs;
	Phased__StatsRow	 *rows, **rptrs;
	struct inst_snapshot	 *snaps;
	struct wait_shares	 *shares;
	struct instance		 *in, **ins;
	char			**counters;
	const char		 *want = req->stats->model;
	size_t			  n = 0, i, j;
	uint64_t		  now = now_ns();

	for (in = instance_first(); in != NULL; in = instance_next(in))
		if (in->state == INST_READY &&
		    (want == NULL || strcmp(want, in->name) == 0))
			n++;
	if (want != NULL && n == 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "no model %s", want);
		return;
	}
	ins = xcalloc(n + 1, sizeof *ins);
	snaps = xcalloc(n + 1, sizeof *snaps);
	ms = xcalloc(n + 1, sizeof *ms);
	mptrs = xcalloc(n + 1, sizeof *mptrs);
	rows = xcalloc((n + 1) * 2 * MET__COUNT, sizeof *rows);
	rptrs = xcalloc((n + 1) * 2 * MET__COUNT, sizeof *rptrs);
	counters = xcalloc((n + 1) * STATS_NCOUNTERS, sizeof *counters);
	shares = xcalloc(n + 1, sizeof *shares);
	i = 0;
	for (in = instance_first(); in != NULL; in = instance_next(in)) {
		if (in->state != INST_READY ||
		    (want != NULL && strcmp(want, in->name) != 0))
			continue;
		inst_snapshot_init(&snaps[i]);
		inst_metrics_snapshot(engine_metrics(in->engine), &snaps[i], now);
		fill_model_stats(in, &snaps[i], &ms[i], rows + i * 2 * MET__COUNT,
		    rptrs + i * 2 * MET__COUNT, counters + i * STATS_NCOUNTERS);
		fill_wait_shares(&snaps[i], &ms[i], &shares[i]);
		mptrs[i] = &ms[i];
		ins[i] = in;
		i++;
	}
	sr.n_models = n;
	sr.models = mptrs;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_STATS;
	r.stats = &sr;
	conn_send(c, &r);
	for (i = 0; i < n; i++) {
		inst_snapshot_free(&snaps[i]);
		free(ms[i].policy);
		for (j = 0; j < STATS_NCOUNTERS; j++)
			free(counters[i * STATS_NCOUNTERS + j]);
	}
	free(ins);
	free(snaps);
	free(ms);
	free(mptrs);
	free(rows);
	free(rptrs);
	free(counters);
	free(shares);
}

/* Every ready model's metrics in the Prometheus text format, into sb. */
void
instance_prom_text(struct strbuf *sb)
{
	struct inst_snapshot		*snaps;
	const struct inst_snapshot	**ptrs;
	struct instance			*in;
	size_t				 n = 0, i;
	uint64_t			 now = now_ns();

	for (in = instance_first(); in != NULL; in = instance_next(in))
		if (in->state == INST_READY)
			n++;
	snaps = xcalloc(n + 1, sizeof *snaps);
	ptrs = xcalloc(n + 1, sizeof *ptrs);
	i = 0;
	for (in = instance_first(); in != NULL; in = instance_next(in)) {
		if (in->state != INST_READY)
			continue;
		inst_snapshot_init(&snaps[i]);
		inst_metrics_snapshot(engine_metrics(in->engine), &snaps[i], now);
		ptrs[i] = &snaps[i];
		i++;
	}
	prom_write(sb, ptrs, n, (now - phased->start_ns) / 1e9);
	for (i = 0; i < n; i++)
		inst_snapshot_free(&snaps[i]);
	free(snaps);
	free(ptrs);
}

/* Every model's metrics in the Prometheus text format. */
static void
req_metrics(struct conn *c, Phased__Request *req)
{
	Phased__Response		 r = PHASED__RESPONSE__INIT;
	Phased__MetricsReply		 mr = PHASED__METRICS_REPLY__INIT;
	struct strbuf			 sb;

	strbuf_init(&sb);
	instance_prom_text(&sb);
	mr.text = (char *)strbuf_str(&sb);
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_METRICS;
	r.metrics = &mr;
	conn_send(c, &r);
	strbuf_free(&sb);
}

struct trace_req {
	struct stream	*stream;
	struct event	*timer;
	char		*model;
};

/* Free a trace capture's state. */
static void
trace_req_free(struct trace_req *tr)
{
	event_free(tr->timer);
	free(tr->model);
	free(tr);
}

/* The capture's time is up: stop it and send the trace. */
static void
trace_done_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct trace_req	*tr = arg;
	struct instance		*in;
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__TraceReply	 tp = PHASED__TRACE_REPLY__INIT;
	struct strbuf		 sb;
	struct trace		*t;
	size_t			 len;

	if ((in = instance_find(tr->model)) == NULL ||
	    in->state != INST_READY) {
		if (tr->stream->conn != NULL)
			conn_send_error(tr->stream->conn, tr->stream->req_id,
			    PHASED__ERROR_CODE__ERR_NOT_FOUND, "model %s was "
			    "unloaded during the trace", tr->model);
		stream_free(tr->stream);
		trace_req_free(tr);
		return;
	}
	t = engine_trace(in->engine);
	trace_stop(t, now_ns());
	strbuf_init(&sb);
	trace_write(t, &sb, in->name);
	len = sb.len;
	tp.json.data = (uint8_t *)strbuf_str(&sb);
	tp.json.len = len;
	tp.events = trace_len(t);
	r.body_case = PHASED__RESPONSE__BODY_TRACE;
	r.trace = &tp;
	stream_send(tr->stream, &r);
	strbuf_free(&sb);
	stream_free(tr->stream);
	trace_req_free(tr);
}

/* The client went away during a capture. */
static void
trace_cancel(struct stream *s, const char *why)
{
	struct trace_req	*tr = s->arg;
	struct instance		*in;

	if ((in = instance_find(tr->model)) != NULL && in->state == INST_READY)
		trace_stop(engine_trace(in->engine), now_ns());
	if (s->conn != NULL)
		conn_send_error(s->conn, s->req_id,
		    PHASED__ERROR_CODE__ERR_CANCELLED, "trace cancelled");
	stream_free(s);
	trace_req_free(tr);
}

/* Record every iteration of a model for some seconds. */
static void
req_trace(struct conn *c, Phased__Request *req)
{
	Phased__TraceRequest	*tq = req->trace;
	struct instance		*in;
	struct trace_req	*tr;
	struct timeval		 tv;

	if ((in = instance_find(tq->model)) == NULL || in->state != INST_READY) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "no model %s ready", tq->model);
		return;
	}
	if (tq->seconds == 0 || tq->seconds > TRACE_MAX_SECONDS) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_INVALID,
		    "trace seconds %u is out of range 1..%d", tq->seconds,
		    TRACE_MAX_SECONDS);
		return;
	}
	if (trace_active(engine_trace(in->engine))) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_LIMIT,
		    "a trace of model %s is already running", in->name);
		return;
	}
	tr = xcalloc(1, sizeof *tr);
	if ((tr->stream = stream_open(c, req->id, trace_cancel, tr)) == NULL) {
		free(tr);
		return;
	}
	tr->model = xstrdup(in->name);
	tr->timer = evtimer_new(phased->base, trace_done_cb, tr);
	tv.tv_sec = tq->seconds;
	tv.tv_usec = 0;
	evtimer_add(tr->timer, &tv);
	trace_start(engine_trace(in->engine), now_ns());
}

const struct req_entry req_stats_entry = {
	.name = "stats",
	.body = PHASED__REQUEST__BODY_STATS,
	.admin = 0,
	.exec = req_stats,
};
const struct req_entry req_metrics_entry = {
	.name = "metrics",
	.body = PHASED__REQUEST__BODY_METRICS,
	.admin = 0,
	.exec = req_metrics,
};
const struct req_entry req_trace_entry = {
	.name = "trace",
	.body = PHASED__REQUEST__BODY_TRACE,
	.admin = 0,
	.exec = req_trace,
};
