/* cmd_stats.c: phasectl stats, metrics, top and trace. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "phasectl.h"
#include "util.h"

/* Ask for the stats of one model (NULL: all). */
static Phased__Response *
get_stats(struct ctl *ctl, const char *model)
{
	Phased__Request		req = PHASED__REQUEST__INIT;
	Phased__StatsRequest	sr = PHASED__STATS_REQUEST__INIT;

	sr.model = (char *)model;
	req.body_case = PHASED__REQUEST__BODY_STATS;
	req.stats = &sr;
	return (ctl_call(ctl, &req));
}

/* Print rows of one span as JSON. */
static void
rows_json(Phased__StatsRow **rows, size_t n)
{
	size_t	i;

	printf("{");
	for (i = 0; i < n; i++) {
		printf("%s", i ? "," : "");
		json_str(stdout, rows[i]->name);
		printf(":{\"count\":%" PRIu64 ",\"mean\":%.6g,\"p50\":%.6g,"
		    "\"p90\":%.6g,\"p99\":%.6g,\"max\":%.6g}", rows[i]->count,
		    rows[i]->mean, rows[i]->p50, rows[i]->p90, rows[i]->p99,
		    rows[i]->max);
	}
	printf("}");
}

/* Find a row by name. */
static const Phased__StatsRow *
find_row(Phased__StatsRow **rows, size_t n, const char *name)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (strcmp(rows[i]->name, name) == 0)
			return (rows[i]);
	return (NULL);
}

/* Print each cause's share histogram as a JSON object member. */
static void
wait_share_json(const Phased__ModelStats *m)
{
	const Phased__WaitShare	*w;
	size_t			 i, j;

	printf(",\"wait_share\":{");
	for (i = 0; i < m->n_wait_share; i++) {
		w = m->wait_share[i];
		printf("%s", i ? "," : "");
		json_str(stdout, w->cause);
		printf(":{\"count\":%" PRIu64 ",\"mean\":%.6g,\"p50\":%.6g,"
		    "\"p90\":%.6g,\"p99\":%.6g,\"buckets\":[", w->count,
		    w->mean, w->p50, w->p90, w->p99);
		for (j = 0; j < w->n_le && j < w->n_buckets; j++)
			printf("%s{\"le\":%.6g,\"count\":%" PRIu64 "}",
			    j ? "," : "", w->le[j], w->buckets[j]);
		printf("]}");
	}
	printf("}");
}

/* Print each cause's share histogram as a table. */
static void
wait_share_text(const Phased__ModelStats *m)
{
	const Phased__WaitShare	*w;
	size_t			 i, j;

	if (m->n_wait_share == 0)
		return;
	printf("  %-22s %8s %7s %7s %7s %7s  %s\n", "e2e share since start",
	    "count", "mean%", "p50%", "p90%", "p99%",
	    "requests per bucket (le share: count)");
	for (i = 0; i < m->n_wait_share; i++) {
		w = m->wait_share[i];
		printf("  %-22s %8" PRIu64 " %7.2f %7.2f %7.2f %7.2f ", w->cause,
		    w->count, w->mean * 100, w->p50 * 100, w->p90 * 100,
		    w->p99 * 100);
		for (j = 0; j < w->n_le && j < w->n_buckets; j++)
			if (w->buckets[j] != 0)
				printf(" %g:%" PRIu64, w->le[j], w->buckets[j]);
		printf("\n");
	}
}

/* Print one model's statistics. */
static void
print_model_stats(const Phased__ModelStats *m, int json)
{
	size_t	i;

	if (json) {
		printf("{\"model\":");
		json_str(stdout, m->model);
		printf(",\"policy\":");
		json_str(stdout, m->policy);
		printf(",\"prompt_tokens\":%" PRIu64 ",\"output_tokens\":%" PRIu64
		    ",\"prompt_tps\":%.3f,\"output_tps\":%.3f,"
		    "\"kv_blocks_used\":%u,\"kv_blocks_free\":%u,"
		    "\"requests_running\":%u,\"requests_waiting\":%u,"
		    "\"preemptions\":%" PRIu64 ",\"plan_errors\":%" PRIu64
		    ",\"swaps\":%" PRIu64 ",\"window_s\":%.3f,\"counters\":{",
		    m->prompt_tokens, m->output_tokens, m->prompt_tps,
		    m->output_tps, m->kv_blocks_used, m->kv_blocks_free,
		    m->requests_running, m->requests_waiting, m->preemptions,
		    m->plan_errors, m->swaps, m->window_s);
		for (i = 0; i < m->n_counters; i++) {
			const char *eq = strchr(m->counters[i], '=');

			if (eq == NULL)
				continue;
			printf("%s", i ? "," : "");
			json_strn(stdout, m->counters[i],
			    (size_t)(eq - m->counters[i]));
			printf(":%s", eq + 1);
		}
		printf("},\"prefix_cache\":{\"queries\":%" PRIu64
		    ",\"hit_tokens\":%" PRIu64 ",\"evictions\":%" PRIu64
		    ",\"blocks\":%u}", m->prefix_cache_queries,
		    m->prefix_cache_hit_tokens, m->prefix_cache_evictions,
		    m->prefix_cache_blocks);
		printf(",\"decode_gaps_ms\":%.3f,\"decode_others_prefill_ms\":"
		    "%.3f,\"decode_others_prefill_share\":%.6f",
		    m->decode_gaps_ms, m->decode_others_prefill_ms,
		    m->decode_others_prefill_share);
		wait_share_json(m);
		printf(",\"window\":");
		rows_json(m->window, m->n_window);
		printf(",\"total\":");
		rows_json(m->total, m->n_total);
		printf("}");
		return;
	}
	printf("model %s, policy %s\n", m->model, m->policy);
	printf("  tokens/s over the last %.0f s: prompt %.1f, output %.1f\n",
	    m->window_s, m->prompt_tps, m->output_tps);
	printf("  tokens since start: prompt %" PRIu64 ", output %" PRIu64 "\n",
	    m->prompt_tokens, m->output_tokens);
	printf("  requests running %u, waiting %u; KV blocks used %u, free %u\n",
	    m->requests_running, m->requests_waiting, m->kv_blocks_used,
	    m->kv_blocks_free);
	printf("  preemptions %" PRIu64 ", plan errors %" PRIu64 ", swaps %"
	    PRIu64 "\n", m->preemptions, m->plan_errors, m->swaps);
	printf("  prefix cache: queries %" PRIu64 ", hit tokens %" PRIu64
	    ", evictions %" PRIu64 ", blocks cached %u\n",
	    m->prefix_cache_queries, m->prefix_cache_hit_tokens,
	    m->prefix_cache_evictions, m->prefix_cache_blocks);
	printf("  finished:");
	for (i = 0; i < m->n_counters; i++)
		if (strncmp(m->counters[i], "wait_", 5) != 0)
			printf(" %s", m->counters[i]);
	printf("\n  finished requests' time by cause:");
	for (i = 0; i < m->n_counters; i++)
		if (strncmp(m->counters[i], "wait_", 5) == 0)
			printf(" %s", m->counters[i] + 5);
	printf("\n  time between tokens over the last %.0f s: %.1f ms, %.1f%% "
	    "of it others' prefill (%.1f ms)\n", m->window_s,
	    m->decode_gaps_ms, m->decode_others_prefill_share * 100,
	    m->decode_others_prefill_ms);
	wait_share_text(m);
	printf("  %-22s %8s %10s %10s %10s %10s %10s\n", "window", "count",
	    "mean", "p50", "p90", "p99", "max");
	for (i = 0; i < m->n_window; i++)
		printf("  %-22s %8" PRIu64 " %10.2f %10.2f %10.2f %10.2f %10.2f\n",
		    m->window[i]->name, m->window[i]->count, m->window[i]->mean,
		    m->window[i]->p50, m->window[i]->p90, m->window[i]->p99,
		    m->window[i]->max);
	printf("  %-22s %8s %10s %10s %10s %10s %10s\n", "since start", "count",
	    "mean", "p50", "p90", "p99", "max");
	for (i = 0; i < m->n_total; i++)
		printf("  %-22s %8" PRIu64 " %10.2f %10.2f %10.2f %10.2f %10.2f\n",
		    m->total[i]->name, m->total[i]->count, m->total[i]->mean,
		    m->total[i]->p50, m->total[i]->p90, m->total[i]->p99,
		    m->total[i]->max);
}

/* phasectl stats [MODEL] */
static int
cmd_stats(struct ctl *ctl, int argc, char **argv)
{
	Phased__Response	*r;
	size_t			 i;
	int			 rc;

	if (argc > 1)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl stats [MODEL]"));
	r = get_stats(ctl, argc == 1 ? argv[0] : NULL);
	if ((rc = ctl_check_error(ctl, r)) != -1)
		goto out;
	rc = CTL_OK;
	if (ctl->json)
		printf("{\"models\":[");
	for (i = 0; i < r->stats->n_models; i++) {
		if (ctl->json && i > 0)
			printf(",");
		print_model_stats(r->stats->models[i], ctl->json);
	}
	if (ctl->json)
		printf("]}\n");
	else if (r->stats->n_models == 0)
		printf("no models loaded\n");
out:
	phased_response_free(r);
	return (rc);
}

/* phasectl metrics */
static int
cmd_metrics(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__MetricsRequest	 mr = PHASED__METRICS_REQUEST__INIT;
	Phased__Response	*r;
	int			 rc;

	if (argc != 0)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl metrics"));
	req.body_case = PHASED__REQUEST__BODY_METRICS;
	req.metrics = &mr;
	r = ctl_call(ctl, &req);
	if ((rc = ctl_check_error(ctl, r)) == -1) {
		rc = CTL_OK;
		if (ctl->json) {
			printf("{\"text\":");
			json_str(stdout, r->metrics->text);
			printf("}\n");
		} else
			fputs(r->metrics->text, stdout);
	}
	phased_response_free(r);
	return (rc);
}

/* phasectl top [--count N] */
static int
cmd_top(struct ctl *ctl, int argc, char **argv)
{
	Phased__Response	*r;
	const Phased__ModelStats *m;
	const Phased__StatsRow	*tbt;
	long long		 count = -1, k;
	size_t			 i;
	int			 tty = isatty(STDOUT_FILENO), rc;
	char			*cause = NULL;
	time_t			 now;
	char			 when[32];

	if (argc == 2 && strcmp(argv[0], "--count") == 0) {
		if (parse_int(argv[1], 1, 1000000, &count, "--count",
		    &cause) != 0)
			return (ctl_fail_cause(cause));
	} else if (argc != 0)
		return (ctl_fail(CTL_EUSAGE, "usage: phasectl top [--count N]"));
	for (k = 0; count < 0 || k < count; k++) {
		if (k > 0)
			sleep(1);
		r = get_stats(ctl, NULL);
		if ((rc = ctl_check_error(ctl, r)) != -1) {
			phased_response_free(r);
			return (rc);
		}
		now = time(NULL);
		strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
		if (ctl->json) {
			printf("{\"time\":\"%s\",\"models\":[", when);
			for (i = 0; i < r->stats->n_models; i++) {
				printf("%s", i ? "," : "");
				print_model_stats(r->stats->models[i], 1);
			}
			printf("]}\n");
		} else {
			if (tty)
				printf("\033[H\033[2J");
			printf("%s  %-16s %10s %10s %5s %5s %11s %9s %9s %s\n",
			    when, "MODEL", "PROMPT t/s", "OUTPUT t/s", "RUN",
			    "WAIT", "KV USED", "TBT p99", "TBT PF%", "POLICY");
			for (i = 0; i < r->stats->n_models; i++) {
				m = r->stats->models[i];
				tbt = find_row(m->window, m->n_window, "tbt");
				printf("%s  %-16s %10.1f %10.1f %5u %5u %5u/%-5u "
				    "%7.1fms %8.1f%% %s\n", when, m->model,
				    m->prompt_tps, m->output_tps,
				    m->requests_running, m->requests_waiting,
				    m->kv_blocks_used,
				    m->kv_blocks_used + m->kv_blocks_free,
				    tbt != NULL ? tbt->p99 : 0.0,
				    m->decode_others_prefill_share * 100,
				    m->policy);
			}
		}
		fflush(stdout);
		phased_response_free(r);
	}
	return (CTL_OK);
}

/* phasectl trace MODEL --seconds N -o FILE */
static int
cmd_trace(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__TraceRequest	 tq = PHASED__TRACE_REQUEST__INIT;
	Phased__Response	*r;
	const char		*out = NULL;
	long long		 secs = 5;
	char			*cause = NULL;
	FILE			*f;
	int			 i, rc;

	if (argc < 1)
		goto usage;
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			if (parse_int(argv[++i], 1, 3600, &secs, "--seconds",
			    &cause) != 0)
				return (ctl_fail_cause(cause));
		} else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
			out = argv[++i];
		else
			goto usage;
	}
	if (out == NULL)
		goto usage;
	tq.model = argv[0];
	tq.seconds = (uint32_t)secs;
	req.body_case = PHASED__REQUEST__BODY_TRACE;
	req.trace = &tq;
	r = ctl_call(ctl, &req);
	if ((rc = ctl_check_error(ctl, r)) != -1) {
		phased_response_free(r);
		return (rc);
	}
	if ((f = fopen(out, "w")) == NULL) {
		phased_response_free(r);
		return (ctl_fail(CTL_EUSAGE, "%s: %s", out, strerror(errno)));
	}
	fwrite(r->trace->json.data, 1, r->trace->json.len, f);
	if (fclose(f) != 0) {
		phased_response_free(r);
		return (ctl_fail(CTL_EUSAGE, "%s: %s", out, strerror(errno)));
	}
	if (ctl->json)
		printf("{\"file\":\"%s\",\"events\":%u}\n", out,
		    r->trace->events);
	else
		printf("%u iterations written to %s\n", r->trace->events, out);
	phased_response_free(r);
	return (CTL_OK);
usage:
	return (ctl_fail(CTL_EUSAGE, "usage: phasectl trace MODEL [--seconds N] "
	    "-o FILE"));
}

const struct ctl_cmd ctl_stats_cmd = {
	.words = { "stats" },
	.args = "[MODEL]",
	.exec = cmd_stats,
};
const struct ctl_cmd ctl_metrics_cmd = {
	.words = { "metrics" },
	.args = "",
	.exec = cmd_metrics,
};
const struct ctl_cmd ctl_top_cmd = {
	.words = { "top" },
	.args = "[--count N]",
	.exec = cmd_top,
};
const struct ctl_cmd ctl_trace_cmd = {
	.words = { "trace" },
	.args = "MODEL [--seconds N] -o FILE",
	.exec = cmd_trace,
};
