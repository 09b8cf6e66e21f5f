/* cmd_generate.c: phasectl generate, streaming text or JSON lines. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasectl.h"
#include "util.h"

#define GEN_MAX_STOPS	8

static const char gen_usage[] = "usage: phasectl generate NAME "
    "[--max-tokens N] [--temp T] [--top-k K] [--top-p P] [--min-p P] "
    "[--repeat-penalty R] [--seed S] [--stop STR]... [--deadline-ms N] "
    "[--priority N] [--no-bos] [--logprobs N] PROMPT";

/* The wait breakdown of a Done as JSON members, when the daemon sent one. */
static void
print_wait_json(const Phased__WaitBreakdown *w)
{
	size_t	i;

	if (w == NULL)
		return;
	if (w->has_request_id)
		printf(",\"request_id\":%" PRIu64, w->request_id);
	printf(",\"wait\":{\"queued_ms\":%.3f,\"prefill_ms\":%.3f,"
	    "\"decode_ms\":%.3f,\"others_prefill_ms\":%.3f,"
	    "\"preempted_ms\":%.3f,\"kv_transfer_ms\":%.3f,"
	    "\"client_ms\":%.3f,\"scheduling_ms\":%.3f},\"blamed\":[",
	    w->queued_ms, w->prefill_ms, w->decode_ms, w->others_prefill_ms,
	    w->preempted_ms, w->kv_transfer_ms, w->client_ms,
	    w->scheduling_ms);
	for (i = 0; i < w->n_blamed_ids && i < w->n_blamed_ms; i++)
		printf("%s{\"id\":%" PRIu64 ",\"ms\":%.3f}", i ? "," : "",
		    w->blamed_ids[i], w->blamed_ms[i]);
	printf("]");
}

/* Print the final Done as a JSON object. */
void
ctl_print_done_json(const Phased__Done *d)
{
	const Phased__Timings	*t = d->timings;

	printf("{\"finish_reason\":");
	json_str(stdout, d->finish_reason);
	if (d->error != NULL) {
		printf(",\"error\":");
		json_str(stdout, d->error);
	}
	printf(",\"prompt_tokens\":%u,\"prompt_ms\":%.3f,\"ttft_ms\":%.3f,"
	    "\"output_tokens\":%u,\"decode_ms\":%.3f,\"prompt_tps\":%.2f,"
	    "\"output_tps\":%.2f,\"queue_ms\":%.3f,\"e2e_ms\":%.3f,"
	    "\"tpot_ms\":%.3f,\"tbt_max_ms\":%.3f,\"preemptions\":%u,"
	    "\"cached_tokens\":%u",
	    t->prompt_tokens, t->prompt_ms, t->ttft_ms, t->output_tokens,
	    t->decode_ms, t->prompt_tps, t->output_tps, t->queue_ms, t->e2e_ms,
	    t->tpot_ms, t->tbt_max_ms, t->preemptions, d->cached_tokens);
	print_wait_json(d->wait);
	printf("}\n");
}

/* phasectl generate NAME [options] PROMPT */
static int
cmd_generate(struct ctl *ctl, int argc, char **argv)
{
	Phased__Request		 req = PHASED__REQUEST__INIT;
	Phased__GenerateRequest	 gr = PHASED__GENERATE_REQUEST__INIT;
	Phased__Response	*r;
	char			*stops[GEN_MAX_STOPS], err[512];
	const char		*o;
	int			 i, rc = CTL_OK, n_stops = 0, ended = 0;
	int			 logprobs = 0;

	if (argc < 2)
		return (ctl_fail(CTL_EUSAGE, "%s", gen_usage));
	gr.model = argv[0];
	for (i = 1; i < argc - 1; i++) {
		o = argv[i];
		if (strcmp(o, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(o, "--no-bos") == 0) {
			gr.has_add_bos = 1;
			gr.add_bos = 0;
			continue;
		}
		if (strncmp(o, "--", 2) != 0)
			break;
		if (i + 1 >= argc - 1)
			return (ctl_fail(CTL_EUSAGE, "%s needs a value\n%s", o,
			    gen_usage));
		if (strcmp(o, "--max-tokens") == 0) {
			gr.has_max_tokens = 1;
			gr.max_tokens = (uint32_t)ctl_num(o, argv[++i], 1,
			    1 << 24);
		} else if (strcmp(o, "--temp") == 0) {
			gr.has_temperature = 1;
			gr.temperature = (float)ctl_num(o, argv[++i], 0, 100);
		} else if (strcmp(o, "--top-k") == 0) {
			gr.has_top_k = 1;
			gr.top_k = (uint32_t)ctl_num(o, argv[++i], 0, 1 << 24);
		} else if (strcmp(o, "--top-p") == 0) {
			gr.has_top_p = 1;
			gr.top_p = (float)ctl_num(o, argv[++i], 0, 1);
		} else if (strcmp(o, "--min-p") == 0) {
			gr.has_min_p = 1;
			gr.min_p = (float)ctl_num(o, argv[++i], 0, 1);
		} else if (strcmp(o, "--repeat-penalty") == 0) {
			gr.has_repeat_penalty = 1;
			gr.repeat_penalty = (float)ctl_num(o, argv[++i], 0.01,
			    100);
		} else if (strcmp(o, "--seed") == 0) {
			gr.has_seed = 1;
			gr.seed = (uint64_t)ctl_num(o, argv[++i], 0, 9e15);
		} else if (strcmp(o, "--deadline-ms") == 0) {
			gr.has_deadline_ms = 1;
			gr.deadline_ms = (uint32_t)ctl_num(o, argv[++i], 1,
			    86400000);
		} else if (strcmp(o, "--priority") == 0) {
			gr.has_priority = 1;
			gr.priority = (int32_t)ctl_num(o, argv[++i], -1000,
			    1000);
		} else if (strcmp(o, "--logprobs") == 0) {
			gr.has_logprobs = gr.logprobs = 1;
			gr.has_top_logprobs = 1;
			gr.top_logprobs = (uint32_t)ctl_num(o, argv[++i], 0,
			    1000);
			logprobs = 1;
		} else if (strcmp(o, "--stop") == 0) {
			if (n_stops == GEN_MAX_STOPS)
				return (ctl_fail(CTL_EUSAGE, "more than %d "
				    "--stop strings", GEN_MAX_STOPS));
			stops[n_stops++] = argv[++i];
		} else
			return (ctl_fail(CTL_EUSAGE, "unknown option %s\n%s", o,
			    gen_usage));
	}
	if (i != argc - 1)
		return (ctl_fail(CTL_EUSAGE, "%s", gen_usage));
	gr.prompt = argv[i];
	gr.n_stop = (size_t)n_stops;
	gr.stop = stops;
	req.body_case = PHASED__REQUEST__BODY_GENERATE;
	req.generate = &gr;
	req.id = phased_next_id(ctl_conn(ctl));
	if (phased_send(ctl->conn, &req, err, sizeof err) != 0)
		return (ctl_fail(CTL_EUSAGE, "%s", err));
	while (!ended) {
		if (phased_recv(ctl->conn, &r, err, sizeof err) != 0)
			return (ctl_fail(CTL_EUSAGE, "%s", err));
		if (r->id != req.id) {
			if (r->body_case == PHASED__RESPONSE__BODY_NOTICE &&
			    r->notice->shutting_down) {
				phased_response_free(r);
				return (ctl_fail(CTL_EUSAGE, "daemon is shutting "
				    "down"));
			}
			phased_response_free(r);
			continue;
		}
		switch (r->body_case) {
		case PHASED__RESPONSE__BODY_TOKEN:
			ctl_print_token(ctl, r->token, logprobs);
			break;
		case PHASED__RESPONSE__BODY_DONE:
			ended = 1;
			if (ctl->json)
				ctl_print_done_json(r->done);
			else if (!logprobs)
				printf("\n");
			if (strcmp(r->done->finish_reason, "error") == 0) {
				ctl_fail(0, "generation failed: %s",
				    r->done->error != NULL ? r->done->error :
				    "unknown error");
				rc = CTL_EDAEMON;
			}
			break;
		default:
			ended = 1;
			if ((rc = ctl_check_error(ctl, r)) == -1)
				rc = ctl_fail(CTL_EDAEMON, "unexpected reply");
			break;
		}
		phased_response_free(r);
	}
	return (rc);
}

const struct ctl_cmd ctl_generate_cmd = {
	.words = { "generate" },
	.args = "NAME [--max-tokens N] [--temp T] [--top-k K] [--top-p P] "
	    "[--min-p P] [--repeat-penalty R] [--seed S] [--stop STR]... "
	    "[--logprobs N] PROMPT",
	.exec = cmd_generate,
};
