/* prom.c: Prometheus text exposition of the instance metrics. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "prom.h"
#include "strbuf.h"

/* Exported name of each series; all are histograms. */
static const char *const prom_series_names[MET__COUNT] = {
	[MET_QUEUE] = "phased_request_queue_time_seconds",
	[MET_PREFILL] = "phased_request_prefill_time_seconds",
	[MET_TTFT] = "phased_time_to_first_token_seconds",
	[MET_TBT] = "phased_time_between_tokens_seconds",
	[MET_TPOT] = "phased_time_per_output_token_seconds",
	[MET_E2E] = "phased_e2e_request_latency_seconds",
	[MET_PROMPT_TPS] = "phased_request_prompt_tokens_per_second",
	[MET_OUTPUT_TPS] = "phased_request_output_tokens_per_second",
	[MET_ITER] = "phased_iteration_duration_seconds",
	[MET_ITER_PREFILL] = "phased_iteration_prefill_tokens",
	[MET_ITER_DECODE] = "phased_iteration_decode_tokens",
	[MET_ITER_SEQS] = "phased_iteration_sequences",
	[MET_ITER_OUT] = "phased_iteration_output_tokens",
};

const struct prom_equiv prom_equivalents[] = {
	{ "phased_time_to_first_token_seconds",
	  "vllm:time_to_first_token_seconds", NULL, NULL },
	{ "phased_time_between_tokens_seconds",
	  "vllm:inter_token_latency_seconds",
	  NULL, "vLLM before 0.10: vllm:time_per_output_token_seconds" },
	{ "phased_time_per_output_token_seconds",
	  "vllm:request_time_per_output_token_seconds", NULL, NULL },
	{ "phased_e2e_request_latency_seconds",
	  "vllm:e2e_request_latency_seconds", NULL, NULL },
	{ "phased_request_queue_time_seconds",
	  "vllm:request_queue_time_seconds", NULL, NULL },
	{ "phased_request_prefill_time_seconds",
	  "vllm:request_prefill_time_seconds", NULL,
	  "vLLM measures from scheduling to the first token" },
	{ "phased_prompt_tokens_total",
	  "vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total", NULL },
	{ "phased_generation_tokens_total",
	  "vllm:generation_tokens_total", "llamacpp:tokens_predicted_total",
	  NULL },
	{ "phased_window_prompt_tokens_per_second",
	  NULL, "llamacpp:prompt_tokens_seconds",
	  "llama.cpp averages over its own processing time" },
	{ "phased_window_generation_tokens_per_second",
	  NULL, "llamacpp:predicted_tokens_seconds",
	  "llama.cpp averages over its own processing time" },
	{ "phased_requests_finished_total",
	  "vllm:request_success_total", NULL,
	  "vLLM labels finished_reason: stop, length, abort, error" },
	{ "phased_requests_running",
	  "vllm:num_requests_running", "llamacpp:requests_processing", NULL },
	{ "phased_requests_waiting",
	  "vllm:num_requests_waiting", "llamacpp:requests_deferred", NULL },
	{ "phased_preemptions_total",
	  "vllm:num_preemptions_total", NULL, NULL },
	{ "phased_kv_cache_usage_ratio",
	  "vllm:kv_cache_usage_perc", "llamacpp:kv_cache_usage_ratio",
	  "a fraction in all three; vLLM before v1: "
	  "vllm:gpu_cache_usage_perc" },
	{ "phased_iteration_prefill_tokens",
	  "vllm:iteration_tokens_total", NULL,
	  "vLLM counts prefill and decode tokens together" },
	{ "phased_iterations_total",
	  NULL, "llamacpp:n_decode_total", NULL },
	{ "phased_policy_plan_errors_total", NULL, NULL, "phased only" },
	{ "phased_policy_swaps_total", NULL, NULL, "phased only" },
};
const size_t prom_nequivalents =
    sizeof prom_equivalents / sizeof prom_equivalents[0];

/* Append s as a quoted label value with \\, \" and \n escaped. */
void
prom_label_value(struct strbuf *sb, const char *s)
{
	strbuf_addc(sb, '"');
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '\\':
			strbuf_adds(sb, "\\\\");
			break;
		case '"':
			strbuf_adds(sb, "\\\"");
			break;
		case '\n':
			strbuf_adds(sb, "\\n");
			break;
		default:
			strbuf_addc(sb, *s);
			break;
		}
	}
	strbuf_addc(sb, '"');
}

/* Append a sample value in its shortest round-trip form. */
void
prom_value(struct strbuf *sb, double v)
{
	if (isnan(v))
		strbuf_adds(sb, "NaN");
	else if (isinf(v))
		strbuf_adds(sb, v > 0 ? "+Inf" : "-Inf");
	else
		strbuf_double(sb, v);
}

/* Append # HELP (with \\ and newline escaped) and # TYPE for a family. */
static void
prom_family(struct strbuf *sb, const char *name, const char *type,
    const char *help)
{
	strbuf_printf(sb, "# HELP %s ", name);
	for (; *help != '\0'; help++) {
		if (*help == '\\')
			strbuf_adds(sb, "\\\\");
		else if (*help == '\n')
			strbuf_adds(sb, "\\n");
		else
			strbuf_addc(sb, *help);
	}
	strbuf_printf(sb, "\n# TYPE %s %s\n", name, type);
}

/* Append `name{model="..."[,extra]} value'. */
static void
prom_sample(struct strbuf *sb, const char *name, const char *suffix,
    const char *model, const char *extra, double v)
{
	strbuf_printf(sb, "%s%s{model=", name, suffix);
	prom_label_value(sb, model);
	if (extra != NULL)
		strbuf_printf(sb, ",%s", extra);
	strbuf_addc(sb, '}');
	strbuf_addc(sb, ' ');
	prom_value(sb, v);
	strbuf_addc(sb, '\n');
}

/* Divide by an exact power of ten so that le values print cleanly. */
static double
prom_scaled(const struct hist_layout *l, double v)
{
	double	inv = round(1.0 / l->scale);

	return (v / inv);
}

/*
 * Append the _bucket, _sum and _count samples of one histogram; `labels'
 * (NULL: none) go after the model's.
 */
static void
prom_hist(struct strbuf *sb, const char *name, const char *model,
    const char *labels, const struct hist *h)
{
	const struct hist_layout *l = h->layout;
	struct strbuf	 le = STRBUF_INIT;
	uint64_t	 cum = 0;
	int		 i;

	for (i = 0; i < l->nbounds; i++) {
		cum += h->counts[i];
		if (l->exported != NULL && !l->exported(l->bounds[i]))
			continue;
		strbuf_reset(&le);
		if (labels != NULL)
			strbuf_printf(&le, "%s,", labels);
		strbuf_adds(&le, "le=\"");
		prom_value(&le, prom_scaled(l, (double)l->bounds[i]));
		strbuf_addc(&le, '"');
		prom_sample(sb, name, "_bucket", model, strbuf_str(&le),
		    (double)cum);
	}
	strbuf_reset(&le);
	if (labels != NULL)
		strbuf_printf(&le, "%s,", labels);
	strbuf_adds(&le, "le=\"+Inf\"");
	prom_sample(sb, name, "_bucket", model, strbuf_str(&le),
	    (double)h->count);
	prom_sample(sb, name, "_sum", model, labels,
	    prom_scaled(l, (double)h->sum));
	prom_sample(sb, name, "_count", model, labels, (double)h->count);
	strbuf_free(&le);
}

/*
 * Write one counter or gauge family read from a u64 field of the snapshot
 * (at `off'), each value multiplied by `scale'.
 */
static void
prom_u64(struct strbuf *sb, const char *name, const char *type,
    const char *help, const struct inst_snapshot *const *snaps, size_t n,
    size_t off, double scale)
{
	uint64_t	v;
	size_t		i;

	prom_family(sb, name, type, help);
	for (i = 0; i < n; i++) {
		memcpy(&v, (const char *)snaps[i] + off, sizeof v);
		prom_sample(sb, name, "", snaps[i]->name, NULL, (double)v * scale);
	}
}

/* Write one counter or gauge family of a u64 field as it is. */
static void
prom_field(struct strbuf *sb, const char *name, const char *type,
    const char *help, const struct inst_snapshot *const *snaps, size_t n,
    size_t off)
{
	prom_u64(sb, name, type, help, snaps, n, off, 1);
}

/* Write one counter family of a nanosecond field, in seconds. */
static void
prom_seconds(struct strbuf *sb, const char *name, const char *help,
    const struct inst_snapshot *const *snaps, size_t n, size_t off)
{
	prom_u64(sb, name, "counter", help, snaps, n, off, 1e-9);
}

/* Write one gauge family computed by `get'. */
static void
prom_computed(struct strbuf *sb, const char *name, const char *help,
    const struct inst_snapshot *const *snaps, size_t n,
    double (*get)(const struct inst_snapshot *))
{
	size_t	i;

	prom_family(sb, name, "gauge", help);
	for (i = 0; i < n; i++)
		prom_sample(sb, name, "", snaps[i]->name, NULL, get(snaps[i]));
}

/* Prompt tokens/s over the window. */
static double
get_wprompt(const struct inst_snapshot *s)
{
	double	v;

	inst_snapshot_rates(s, &v, NULL, NULL, NULL);
	return (v);
}

/* Output tokens/s over the window. */
static double
get_woutput(const struct inst_snapshot *s)
{
	double	v;

	inst_snapshot_rates(s, NULL, &v, NULL, NULL);
	return (v);
}

/* Fraction of KV blocks in use, 0 when the instance has none. */
static double
get_kvratio(const struct inst_snapshot *s)
{
	uint64_t	total = s->kv_used + s->kv_free;

	return (total == 0 ? 0 : (double)s->kv_used / (double)total);
}

/* The policy's iteration-time target, in seconds. */
static double
get_pol_target(const struct inst_snapshot *s)
{
	return ((double)s->counters[CNT_POLICY_TARGET_US] / 1e6);
}

/* The policy's forecast of the last iteration, in seconds. */
static double
get_pol_predicted(const struct inst_snapshot *s)
{
	return ((double)s->counters[CNT_POLICY_PREDICTED_US] / 1e6);
}

/* What the last iteration took, in seconds. */
static double
get_iter_measured(const struct inst_snapshot *s)
{
	return ((double)s->counters[CNT_ITER_MEASURED_US] / 1e6);
}

#define S(f)	offsetof(struct inst_snapshot, f)

/* Write the whole exposition for n instances. */
void
prom_write(struct strbuf *sb, const struct inst_snapshot *const *snaps,
    size_t n, double uptime_s)
{
	char	 extra[64];
	size_t	 i;
	int	 id, r;

	prom_family(sb, "phased_up", "gauge",
	    "Whether the daemon is serving (1).");
	strbuf_adds(sb, "phased_up 1\n");
	prom_family(sb, "phased_uptime_seconds", "gauge",
	    "Seconds since the daemon started.");
	strbuf_adds(sb, "phased_uptime_seconds ");
	prom_value(sb, uptime_s);
	strbuf_addc(sb, '\n');

	for (id = 0; id < MET__COUNT; id++) {
		prom_family(sb, prom_series_names[id], "histogram",
		    metric_info[id].help);
		for (i = 0; i < n; i++)
			prom_hist(sb, prom_series_names[id], snaps[i]->name,
			    NULL, &snaps[i]->series[id].total);
	}

	prom_field(sb, "phased_prompt_tokens_total", "counter",
	    "Prompt tokens computed (recomputation after preemption included).",
	    snaps, n, S(prompt_tokens));
	prom_field(sb, "phased_generation_tokens_total", "counter",
	    "Output tokens sampled.", snaps, n, S(output_tokens));
	prom_field(sb, "phased_iterations_total", "counter",
	    "Engine iterations run.", snaps, n, S(iterations));
	prom_family(sb, "phased_requests_finished_total", "counter",
	    "Requests finished, by reason.");
	for (i = 0; i < n; i++) {
		for (r = 0; r < FINISH__COUNT; r++) {
			snprintf(extra, sizeof extra, "reason=\"%s\"",
			    finish_reason_names[r]);
			prom_sample(sb, "phased_requests_finished_total", "",
			    snaps[i]->name, extra,
			    (double)snaps[i]->finished[r]);
		}
	}
	prom_family(sb, "phased_request_wait_seconds_total", "counter",
	    "Finished requests' end-to-end time, by the cause it went to.");
	for (i = 0; i < n; i++) {
		for (r = 0; r < WAIT__COUNT; r++) {
			snprintf(extra, sizeof extra, "cause=\"%s\"",
			    wait_cause_names[r]);
			prom_sample(sb, "phased_request_wait_seconds_total", "",
			    snaps[i]->name, extra,
			    (double)snaps[i]->wait_ns[r] / 1e9);
		}
	}
	prom_family(sb, "phased_request_wait_share", "histogram",
	    "Each cause's share (0 to 1) of a finished request's end-to-end "
	    "time.");
	for (i = 0; i < n; i++) {
		for (r = 0; r < WAIT__COUNT; r++) {
			snprintf(extra, sizeof extra, "cause=\"%s\"",
			    wait_cause_names[r]);
			prom_hist(sb, "phased_request_wait_share",
			    snaps[i]->name, extra, &snaps[i]->wait_share[r]);
		}
	}
	prom_computed(sb, "phased_window_decode_others_prefill_ratio",
	    "Share of the time between tokens over the sliding window that "
	    "other requests' prefill caused (0 to 1).", snaps, n,
	    inst_snapshot_decode_others_share);
	prom_field(sb, "phased_preemptions_total", "counter",
	    "Requests preempted (KV state dropped, prefill redone).",
	    snaps, n, S(counters[CNT_PREEMPTIONS]));
	prom_field(sb, "phased_policy_plan_errors_total", "counter",
	    "Scheduling-policy plans the engine rejected.", snaps, n,
	    S(counters[CNT_PLAN_ERRORS]));
	prom_field(sb, "phased_policy_swaps_total", "counter",
	    "Scheduling policies swapped in.", snaps, n,
	    S(counters[CNT_POLICY_SWAPS]));
	prom_field(sb, "phased_policy_ejections_total", "counter",
	    "Scheduling policies ended (late, crashed or invalid plans).",
	    snaps, n, S(counters[CNT_POLICY_EJECTIONS]));
	prom_field(sb, "phased_prefix_cache_queries_total", "counter",
	    "Admissions that asked the prefix cache.", snaps, n,
	    S(counters[CNT_PREFIX_QUERIES]));
	prom_field(sb, "phased_prefix_cache_hit_tokens_total", "counter",
	    "Prompt tokens the prefix cache supplied (not computed).", snaps,
	    n, S(counters[CNT_PREFIX_HIT_TOKENS]));
	prom_field(sb, "phased_prefix_cache_evictions_total", "counter",
	    "Cached KV blocks given to new content.", snaps, n,
	    S(counters[CNT_PREFIX_EVICTIONS]));
	prom_field(sb, "phased_prefix_cache_blocks", "gauge",
	    "KV blocks holding a cached prefix (in use or free).", snaps, n,
	    S(counters[CNT_PREFIX_BLOCKS_CACHED]));
	prom_field(sb, "phased_policy_chunk_tokens", "gauge",
	    "Prefill tokens the policy allowed in the last iteration "
	    "(0: not reported).", snaps, n,
	    S(counters[CNT_POLICY_CHUNK_TOKENS]));
	prom_computed(sb, "phased_policy_target_seconds",
	    "Iteration time the policy aimed to stay under (0: none).", snaps,
	    n, get_pol_target);
	prom_computed(sb, "phased_policy_predicted_seconds",
	    "The policy's forecast of the last iteration (0: none).", snaps, n,
	    get_pol_predicted);
	prom_computed(sb, "phased_iteration_last_seconds",
	    "What the last iteration took.", snaps, n, get_iter_measured);
	prom_field(sb, "phased_kv_transfers_total", "counter",
	    "Requests' KV moved from one device group to another.", snaps, n,
	    S(counters[CNT_KV_TRANSFERS]));
	prom_field(sb, "phased_kv_transfer_bytes_total", "counter",
	    "Bytes of KV blocks moved between device groups.", snaps, n,
	    S(counters[CNT_KV_TRANSFER_BYTES]));
	prom_seconds(sb, "phased_kv_transfer_seconds_total",
	    "Time KV moves between device groups took, queued to done.", snaps,
	    n, S(counters[CNT_KV_TRANSFER_NS]));
	prom_field(sb, "phased_kv_transfers_async_total", "counter",
	    "KV moves that ran beside compute, their source blocks held until "
	    "done.", snaps, n, S(counters[CNT_KV_TRANSFERS_ASYNC]));
	prom_seconds(sb, "phased_kv_transfer_queue_seconds_total",
	    "Host time the engine spent starting KV moves.", snaps, n,
	    S(counters[CNT_KV_TRANSFER_QUEUE_NS]));
	prom_field(sb, "phased_lend_iterations_total", "counter",
	    "Iterations a device group ran with the cores of idle groups.",
	    snaps, n, S(counters[CNT_LEND_ITERATIONS]));
	prom_field(sb, "phased_cores_lent_total", "counter",
	    "Cores lent by idle device groups, summed over those iterations.",
	    snaps, n, S(counters[CNT_CORES_LENT]));

	prom_field(sb, "phased_kv_blocks_used", "gauge",
	    "KV cache blocks in use.", snaps, n, S(kv_used));
	prom_field(sb, "phased_kv_blocks_free", "gauge",
	    "KV cache blocks free.", snaps, n, S(kv_free));
	prom_computed(sb, "phased_kv_cache_usage_ratio",
	    "Fraction of the KV cache blocks in use (0 to 1).", snaps, n,
	    get_kvratio);
	prom_field(sb, "phased_requests_running", "gauge",
	    "Requests admitted and running.", snaps, n, S(running));
	prom_field(sb, "phased_requests_waiting", "gauge",
	    "Requests waiting for admission.", snaps, n, S(waiting));
	prom_computed(sb, "phased_window_prompt_tokens_per_second",
	    "Prompt tokens computed per second over the sliding window.",
	    snaps, n, get_wprompt);
	prom_computed(sb, "phased_window_generation_tokens_per_second",
	    "Output tokens sampled per second over the sliding window.",
	    snaps, n, get_woutput);
}
