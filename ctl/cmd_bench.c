/*
 * cmd_bench.c: phasectl bench, a load generator over the daemon's socket.
 *
 * Split by concern: bench_opts.c (command line), bench_workload.c (prompts,
 * lengths, arrivals), bench_run.c (the poll loop), bench_stats.c (samples
 * and statistics), bench_report.c (text and JSON from one summary).
 *
 * Requests are sent on their own connections (one per request in flight,
 * reused when a request ends) so that one slow stream never delays the
 * reading of another; a single poll(2) loop watches them all.  Every time is
 * taken on the client with the monotonic clock (at send, at each token
 * event, at the final Done) and the daemon's own t_us of each token is kept
 * next to it, so the two views can be compared.
 *
 * Prompts are exact token-id sequences (prompt_tokens, no BOS): text from a
 * small generator of English paragraphs is tokenized locally with the
 * model's own tokenizer (the file the daemon reports, or --model-file), and
 * each request takes a window of the wanted length from that token stream.
 * When no model file can be read the prompts are a fixed phrase of token ids
 * between 100 and the vocabulary size, repeated.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_http.h"
#include "util.h"

/* Free everything the run holds. */
static void
b_free(struct bench *b)
{
	size_t	i;

	for (i = 0; i < b->n_reqs; i++) {
		if (b->reqs[i]->conn != NULL)
			phased_close(b->reqs[i]->conn);
		free(b->reqs[i]->tok_ns);
		free(b->reqs[i]->tok_us);
		free(b->reqs[i]->finish);
		free(b->reqs[i]->error);
		free(b->reqs[i]->ids);
		free(b->reqs[i]->out_ids);
		free(b->reqs[i]);
	}
	for (i = 0; i < B_MAX_CONVS; i++)
		free(b->conv_hist[i]);
	for (i = 0; i < b->n_idle; i++)
		phased_close(b->idle[i]);
	free(b->idle);
	free(b->reqs);
	free(b->corpus);
	free(b->lengths);
}

/* phasectl bench MODEL [options] */
static int
cmd_bench(struct ctl *ctl, int argc, char **argv)
{
	struct b_opts	 o;
	struct bench	 b;
	struct b_summary sum;
	char		*path = NULL;
	size_t		 want, i;
	int		 rc;

	if (b_parse(argc, argv, &o) != 0)
		return (CTL_EUSAGE);
	memset(&b, 0, sizeof b);
	b.ctl = ctl;
	b.o = &o;
	b.rng = o.seed;
	if (o.lengths_file != NULL && b_read_lengths(&b, o.lengths_file) != 0) {
		b_free(&b);
		return (CTL_EUSAGE);
	}
	if (o.mode != BM_INTERFERENCE && o.mode != BM_MULTITURN &&
	    o.requests == 0 && o.duration == 0)
		o.requests = b.n_lengths > 0 ? (uint32_t)b.n_lengths : 10;
	if (o.url != NULL) {
		char	err[512];

		/* Servers may name their model otherwise (llama-server). */
		if (bh_model_check(o.url, o.model, err, sizeof err) != 0)
			ctl_fail(0, "warning: %s", err);
	} else if (b_model_info(&b, &path) != 0) {
		b_free(&b);
		return (CTL_EDAEMON);
	}
	want = o.prompt_len.hi;
	if (o.chat_prompt_len > want)
		want = o.chat_prompt_len;
	if (o.long_prompt_len > want)
		want = o.long_prompt_len;
	for (i = 0; i < b.n_lengths; i++)
		if (b.lengths[i].lo > want)
			want = b.lengths[i].lo;
	b_corpus(&b, o.model_file != NULL ? o.model_file : path, 2 * want);
	free(path);
	b_run(&b);
	if (!o.quiet)
		b_progress(&b, (now_ns() - b.t0) / 1e9);
	/* Show the first daemon error, which usually says it all. */
	for (i = 0; i < b.n_reqs; i++) {
		if (b.reqs[i]->error != NULL && !b_ok(b.reqs[i])) {
			ctl_fail(0, "request %zu: %s", i, b.reqs[i]->error);
			break;
		}
	}
	if (o.timeline != NULL && b_timeline(&b, o.timeline) != 0) {
		b_free(&b);
		return (CTL_EUSAGE);
	}
	b_summarize(&b, &sum);
	rc = b_report(&b, &sum);
	b_free(&b);
	return (rc);
}

const struct ctl_cmd ctl_bench_cmd = {
	.words = { "bench" },
	.args = "MODEL [--rate R [--burstiness B] | --concurrency C] "
	    "[--requests N | --duration S] [--prompt-len N|A-B] "
	    "[--output-len N|A-B] [--scenario interference] ...",
	.exec = cmd_bench,
};
