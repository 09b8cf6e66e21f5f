/* bench_opts.c: phasectl bench's command line and its --lengths-file. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_http.h"
#include "util.h"

#define B_USAGE "usage: phasectl bench MODEL [--rate R [--burstiness B] | " \
	"--concurrency C] [--requests N | --duration S]\n" \
	"\t[--prompt-len N|A-B] [--output-len N|A-B] [--lengths-file F] " \
	"[--seed S]\n" \
	"\t[--slo-ttft-ms X] [--slo-tbt-ms Y] [--model-file PATH] " \
	"[--timeline FILE] [--quiet] [--url URL]\n" \
	"\t[--scenario interference [--chats K] [--chat-output N] " \
	"[--chat-prompt-len N]\n" \
	"\t [--long-prompt-len L] [--long-output N] [--long-every S] " \
	"[--long-count M]]\n" \
	"\t[--scenario multiturn [--conversations N] [--turns K] " \
	"[--chat-prompt-len N]]"

/* Parse N or A-B into a range of lengths in [min, B_MAX_TOKENS]. */
static int
b_parse_range(const char *opt, const char *v, uint32_t min, struct b_range *r)
{
	long long	 lo, hi;
	const char	*dash;
	char		*s, *cause = NULL;
	int		 rc = 0;

	if ((dash = strchr(v, '-')) == NULL) {
		if (parse_int(v, min, B_MAX_TOKENS, &lo, opt, &cause) != 0)
			goto fail;
		r->lo = r->hi = (uint32_t)lo;
		return (0);
	}
	s = xstrndup(v, (size_t)(dash - v));
	rc = parse_int(s, min, B_MAX_TOKENS, &lo, opt, &cause);
	free(s);
	if (rc != 0 || parse_int(dash + 1, lo, B_MAX_TOKENS, &hi, opt,
	    &cause) != 0)
		goto fail;
	r->lo = (uint32_t)lo;
	r->hi = (uint32_t)hi;
	return (0);
fail:
	ctl_fail_cause(cause);
	return (-1);
}

/* Parse the command line into o; -1 after printing a usage error. */
int
b_parse(int argc, char **argv, struct b_opts *o)
{
	const char	*a, *v;
	int		 i, have_rate = 0, have_conc = 0, have_burst = 0;

	memset(o, 0, sizeof *o);
	o->concurrency = 1;
	o->burstiness = 1;
	o->prompt_len = (struct b_range){ 128, 128 };
	o->output_len = (struct b_range){ 64, 64 };
	o->seed = 1;
	o->chats = 2;
	o->chat_output = 128;
	o->chat_prompt_len = 32;
	o->long_prompt_len = 700;
	o->long_output = 8;
	o->long_every = 10;
	o->long_count = 3;
	o->conversations = 4;
	o->turns = 8;
	if (argc < 1 || argv[0][0] == '-') {
		ctl_fail(CTL_EUSAGE, "%s", B_USAGE);
		return (-1);
	}
	o->model = argv[0];
	for (i = 1; i < argc; i++) {
		a = argv[i];
		if (strcmp(a, "--quiet") == 0) {
			o->quiet = 1;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			ctl_fail(CTL_EUSAGE, "%s\nPrompts are windows of "
			    "English text tokenized with the model file the "
			    "daemon loaded (or --model-file); when it cannot "
			    "be read, a phrase of token ids drawn from "
			    "100..n_vocab is repeated.", B_USAGE);
			return (-1);
		}
		if (i + 1 >= argc) {
			ctl_fail(CTL_EUSAGE, "%s needs a value\n%s", a,
			    B_USAGE);
			return (-1);
		}
		v = argv[++i];
		if (strcmp(a, "--rate") == 0) {
			o->rate = ctl_num(a, v, 1e-6, 1e6);
			have_rate = 1;
		} else if (strcmp(a, "--url") == 0) {
			char	err[512];

			if (bh_url_check(v, err, sizeof err) != 0) {
				ctl_fail(CTL_EUSAGE, "%s", err);
				return (-1);
			}
			o->url = v;
		} else if (strcmp(a, "--burstiness") == 0) {
			o->burstiness = ctl_num(a, v, 1e-3, 1e3);
			have_burst = 1;
		} else if (strcmp(a, "--concurrency") == 0) {
			o->concurrency = (uint32_t)ctl_num(a, v, 1,
			    B_MAX_INFLIGHT);
			have_conc = 1;
		} else if (strcmp(a, "--requests") == 0)
			o->requests = (uint32_t)ctl_num(a, v, 1, 1e7);
		else if (strcmp(a, "--duration") == 0)
			o->duration = ctl_num(a, v, 0.001, 1e6);
		else if (strcmp(a, "--prompt-len") == 0) {
			if (b_parse_range(a, v, 1, &o->prompt_len) != 0)
				return (-1);
		} else if (strcmp(a, "--output-len") == 0) {
			if (b_parse_range(a, v, 1, &o->output_len) != 0)
				return (-1);
		} else if (strcmp(a, "--lengths-file") == 0)
			o->lengths_file = v;
		else if (strcmp(a, "--seed") == 0)
			o->seed = (uint64_t)ctl_num(a, v, 0, 9e15);
		else if (strcmp(a, "--slo-ttft-ms") == 0)
			o->slo_ttft_ms = ctl_num(a, v, 0.001, 1e9);
		else if (strcmp(a, "--slo-tbt-ms") == 0)
			o->slo_tbt_ms = ctl_num(a, v, 0.001, 1e9);
		else if (strcmp(a, "--model-file") == 0)
			o->model_file = v;
		else if (strcmp(a, "--timeline") == 0)
			o->timeline = v;
		else if (strcmp(a, "--scenario") == 0) {
			if (strcmp(v, "interference") == 0)
				o->mode = BM_INTERFERENCE;
			else if (strcmp(v, "multiturn") == 0)
				o->mode = BM_MULTITURN;
			else {
				ctl_fail(CTL_EUSAGE, "unknown scenario '%s' "
				    "(valid: interference, multiturn)", v);
				return (-1);
			}
		} else if (strcmp(a, "--conversations") == 0)
			o->conversations = (uint32_t)ctl_num(a, v, 1,
			    B_MAX_CONVS);
		else if (strcmp(a, "--turns") == 0)
			o->turns = (uint32_t)ctl_num(a, v, 1, B_MAX_TURNS); else if (strcmp(a, "--chats") == 0)
			o->chats = (uint32_t)ctl_num(a, v, 0, 256);
		else if (strcmp(a, "--chat-output") == 0)
			o->chat_output = (uint32_t)ctl_num(a, v, 2, B_MAX_TOKENS);
		else if (strcmp(a, "--chat-prompt-len") == 0)
			o->chat_prompt_len = (uint32_t)ctl_num(a, v, 1,
			    B_MAX_TOKENS);
		else if (strcmp(a, "--long-prompt-len") == 0)
			o->long_prompt_len = (uint32_t)ctl_num(a, v, 1,
			    B_MAX_TOKENS);
		else if (strcmp(a, "--long-output") == 0)
			o->long_output = (uint32_t)ctl_num(a, v, 1, B_MAX_TOKENS);
		else if (strcmp(a, "--long-every") == 0)
			o->long_every = ctl_num(a, v, 0.001, 1e6);
		else if (strcmp(a, "--long-count") == 0)
			o->long_count = (uint32_t)ctl_num(a, v, 0, 1e6);
		else {
			ctl_fail(CTL_EUSAGE, "unknown option %s\n%s", a,
			    B_USAGE);
			return (-1);
		}
	}
	if (have_burst && !have_rate) {
		ctl_fail(CTL_EUSAGE, "--burstiness needs --rate (the mean "
		    "arrival rate)");
		return (-1);
	}
	if (have_rate && have_conc) {
		ctl_fail(CTL_EUSAGE, "--rate and --concurrency are exclusive");
		return (-1);
	}
	if (o->mode == BM_MULTITURN && (have_rate || have_conc)) {
		ctl_fail(CTL_EUSAGE, "--scenario multiturn runs its "
		    "conversations side by side: no --rate or --concurrency");
		return (-1);
	}
	if (o->mode == BM_MULTITURN && o->url != NULL) {
		ctl_fail(CTL_EUSAGE, "--scenario multiturn resends the answers' "
		    "token ids: it needs the daemon's socket, not --url");
		return (-1);
	}
	if (o->mode != BM_INTERFERENCE && o->mode != BM_MULTITURN && have_rate)
		o->mode = BM_RATE;
	return (0);
}

/* Read --lengths-file: lines of "prompt_tokens output_tokens". */
int
b_read_lengths(struct bench *b, const char *path)
{
	FILE		*f;
	char		 line[256];
	unsigned long	 p, n;
	size_t		 lineno = 0, cap = 0;
	char		 extra;

	if ((f = fopen(path, "r")) == NULL)
		return (ctl_fail(-1, "%s: %s", path, strerror(errno)));
	while (fgets(line, sizeof line, f) != NULL) {
		lineno++;
		if (line[strspn(line, " \t\r\n")] == '\0' || line[0] == '#')
			continue;
		if (sscanf(line, "%lu %lu %c", &p, &n, &extra) != 2 || p < 1 ||
		    n < 1 || p > B_MAX_TOKENS || n > B_MAX_TOKENS) {
			fclose(f);
			return (ctl_fail(-1, "%s:%zu: want \"prompt_tokens "
			    "output_tokens\" (1..%u each)", path, lineno,
			    B_MAX_TOKENS));
		}
		if (b->n_lengths == cap) {
			cap = cap ? cap * 2 : 64;
			b->lengths = xreallocarray(b->lengths, cap,
			    sizeof *b->lengths);
		}
		b->lengths[b->n_lengths++] = (struct b_range){ p, n };
	}
	fclose(f);
	if (b->n_lengths == 0)
		return (ctl_fail(-1, "%s: no lengths", path));
	return (0);
}
