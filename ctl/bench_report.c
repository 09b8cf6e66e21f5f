/* bench_report.c: phasectl bench's report (text or JSON) and timeline. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* Print one statistics row, as text or as a JSON member. */
static void
b_print_stat(int json, const char *name, struct b_stat s, int *first)
{
	if (json) {
		printf("%s\"%s\":{\"n\":%zu,\"mean\":%.3f,\"p50\":%.3f,"
		    "\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f}", *first ? "" :
		    ",", name, s.n, s.mean, s.p50, s.p90, s.p99, s.max);
		*first = 0;
	} else if (s.n == 0)
		printf("%-16s %9s\n", name, "-");
	else
		printf("%-16s %9.2f %9.2f %9.2f %9.2f %9.2f %8zu\n", name,
		    s.mean, s.p50, s.p90, s.p99, s.max, s.n);
}

/* Print the series from..to-1 of the summary. */
static void
b_print_series(int json, const struct b_summary *s, int from, int to)
{
	int	i, first = 1;

	for (i = from; i < to; i++)
		b_print_stat(json, b_series_names[i], s->stat[i], &first);
}

/* A rate over the run's duration. */
static double
b_per_s(const struct b_summary *s, double x)
{
	return (s->duration_s > 0 ? x / s->duration_s : 0);
}

/* The report as one JSON object. */
static void
b_report_json(struct bench *b, const struct b_summary *s)
{
	const struct b_opts	*o = b->o;
	size_t			 j;
	int			 first;

	printf("{\"model\":");
	json_str(stdout, o->model);
	printf(",\"mode\":\"%s\",\"prompt_source\":\"%s\","
	    "\"requests\":%zu,\"completed\":%zu,\"errors\":%zu,"
	    "\"finish_reasons\":{", s->mode, b->from_text ? "text" :
	    "synthetic", s->requests, s->ok, s->errors);
	for (j = 0; j < s->n_reasons; j++) {
		printf("%s", j ? "," : "");
		json_str(stdout, s->reasons[j]);
		printf(":%zu", s->counts[j]);
	}
	printf("},\"duration_s\":%.3f,\"request_throughput\":%.4f,"
	    "\"prompt_tokens\":%" PRIu64 ",\"output_tokens\":%" PRIu64
	    ",\"prompt_tps\":%.2f,\"output_tps\":%.2f,"
	    "\"goodput\":%.4f,\"slo_ttft_ms\":%.3f,\"slo_tbt_ms\":%.3f,",
	    s->duration_s, b_per_s(s, s->ok), s->prompt_tokens,
	    s->output_tokens, b_per_s(s, s->prompt_tokens),
	    b_per_s(s, s->output_tokens), b_per_s(s, s->good),
	    o->slo_ttft_ms, o->slo_tbt_ms);
	if (o->mode == BM_RATE)
		printf("\"rate\":%.4f,\"burstiness\":%.4f,", o->rate,
		    o->burstiness);
	else if (o->mode == BM_CONCURRENCY)
		printf("\"concurrency\":%u,", o->concurrency);
	printf("\"latency_ms\":{");
	b_print_series(1, s, 0, BS__PLAIN);
	printf("}");
	if (o->mode == BM_MULTITURN) {
		printf(",\"multiturn\":{\"conversations\":%u,\"turns\":%u,"
		    "\"cached_tokens\":%" PRIu64 ",\"computed_prompt_tokens\":%"
		    PRIu64 ",\"per_turn\":[", o->conversations, o->turns,
		    s->cached_tokens, s->prompt_tokens - s->cached_tokens);
		for (j = 0; j < o->turns && j < B_MAX_TURNS; j++) {
			first = 1;
			printf("%s{\"turn\":%zu,\"prompt_tokens\":%.1f,"
			    "\"cached_tokens\":%.1f,", j ? "," : "", j + 1,
			    s->turn_prompt[j], s->turn_cached[j]);
			b_print_stat(1, "ttft_ms", s->turn_ttft[j], &first);
			printf("}");
		}
		printf("]}");
	}
	if (o->mode == BM_INTERFERENCE) {
		printf(",\"interference\":{\"chats\":%u,"
		    "\"chat_output\":%u,\"long_prompt_len\":%u,"
		    "\"long_every_s\":%.3f,\"long_count\":%u,"
		    "\"long_completed\":%zu,", o->chats,
		    o->chat_output, o->long_prompt_len,
		    o->long_every, o->long_count, s->n_long);
		b_print_series(1, s, BS__PLAIN, BS__COUNT);
		printf("}");
	}
	printf("}\n");
}

/* The report as text. */
static void
b_report_text(struct bench *b, const struct b_summary *s)
{
	const struct b_opts	*o = b->o;
	size_t			 j;

	printf("model %s, %s load, prompts from %s\n", o->model, s->mode,
	    b->from_text ? "tokenized text" : "synthetic token ids");
	printf("requests %zu: %zu completed, %zu errors (", s->requests,
	    s->ok, s->errors);
	for (j = 0; j < s->n_reasons; j++)
		printf("%s%s %zu", j ? ", " : "", s->reasons[j], s->counts[j]);
	printf(")\nduration %.3f s\n", s->duration_s);
	printf("throughput %.3f requests/s, prompt %.1f tokens/s, "
	    "output %.1f tokens/s\n", b_per_s(s, s->ok),
	    b_per_s(s, s->prompt_tokens), b_per_s(s, s->output_tokens));
	printf("goodput %.3f requests/s (SLO: TTFT <= ", b_per_s(s, s->good));
	if (o->slo_ttft_ms > 0)
		printf("%.1f ms", o->slo_ttft_ms);
	else
		printf("any");
	printf(", every TBT <= ");
	if (o->slo_tbt_ms > 0)
		printf("%.1f ms)\n", o->slo_tbt_ms);
	else
		printf("any)\n");
	printf("tokens: prompt %" PRIu64 ", output %" PRIu64 "\n",
	    s->prompt_tokens, s->output_tokens);
	printf("%-16s %9s %9s %9s %9s %9s %8s\n", "ms", "mean", "p50",
	    "p90", "p99", "max", "n");
	b_print_series(0, s, 0, BS__PLAIN);
	if (o->mode == BM_MULTITURN) {
		printf("multiturn: %u conversations of %u turns; prompt tokens "
		    "%" PRIu64 " cached, %" PRIu64 " computed\n",
		    o->conversations, o->turns, s->cached_tokens,
		    s->prompt_tokens - s->cached_tokens);
		printf("%-6s %9s %9s %9s %9s %9s %8s\n", "turn", "prompt",
		    "cached", "ttft", "ttft p50", "ttft max", "n");
		for (j = 0; j < o->turns && j < B_MAX_TURNS; j++)
			printf("%-6zu %9.1f %9.1f %9.2f %9.2f %9.2f %8zu\n",
			    j + 1, s->turn_prompt[j], s->turn_cached[j],
			    s->turn_ttft[j].mean, s->turn_ttft[j].p50,
			    s->turn_ttft[j].max, s->turn_ttft[j].n);
	}
	if (o->mode == BM_INTERFERENCE) {
		printf("interference: %u chats of %u tokens, %zu of %u "
		    "long prompts of %u tokens every %.1f s\n",
		    o->chats, o->chat_output, s->n_long, o->long_count,
		    o->long_prompt_len, o->long_every);
		b_print_series(0, s, BS__PLAIN, BS__COUNT);
	}
}

/* Print the report; the exit status says whether any request failed. */
int
b_report(struct bench *b, const struct b_summary *s)
{
	if (b->ctl->json)
		b_report_json(b, s);
	else
		b_report_text(b, s);
	if (fflush(stdout) != 0)
		return (ctl_fail(CTL_EUSAGE, "write error"));
	return (s->errors > 0 ? CTL_EDAEMON : CTL_OK);
}

/* Write every request's token times as one JSON object to path. */
int
b_timeline(struct bench *b, const char *path)
{
	FILE		*f;
	struct b_req	*r;
	size_t		 i, j;
	static const char *const kinds[] = { "normal", "chat", "long", "turn" };

	if ((f = fopen(path, "w")) == NULL)
		return (ctl_fail(-1, "%s: %s", path, strerror(errno)));
	fprintf(f, "{\"model\":");
	json_str(f, b->o->model);
	fprintf(f, ",\"requests\":[\n");
	for (i = 0; i < b->n_reqs; i++) {
		r = b->reqs[i];
		fprintf(f, "%s{\"kind\":\"%s\",\"stream\":%u,"
		    "\"prompt_tokens\":%u,\"output_len\":%u,\"finish\":",
		    i ? ",\n" : "", kinds[r->kind], r->stream, r->prompt_len,
		    r->output_len);
		json_str(f, r->finish != NULL ? r->finish : "none");
		fprintf(f, ",\"send_ms\":%.3f,\"done_ms\":%.3f,\"tokens_ms\":[",
		    r->send_ns / 1e6, r->done_ns / 1e6);
		for (j = 0; j < r->n_tok; j++)
			fprintf(f, "%s%.3f", j ? "," : "", r->tok_ns[j] / 1e6);
		fprintf(f, "],\"daemon_us\":[");
		for (j = 0; j < r->n_tok; j++)
			fprintf(f, "%s%" PRIu64, j ? "," : "", r->tok_us[j]);
		fprintf(f, "]}");
	}
	fprintf(f, "\n]}\n");
	if (fclose(f) != 0)
		return (ctl_fail(-1, "%s: %s", path, strerror(errno)));
	return (0);
}

