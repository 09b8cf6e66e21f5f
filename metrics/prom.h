/* prom.h: Prometheus text exposition of the instance metrics. */
#ifndef PHASED_PROM_H
#define PHASED_PROM_H

#include <stddef.h>

struct inst_snapshot;
struct strbuf;

/*
 * Append the metrics of n instance snapshots to sb in the Prometheus text
 * exposition format (version 0.0.4, Content-Type "text/plain;
 * version=0.0.4; charset=utf-8").  Every family gets # HELP and # TYPE and
 * then one sample per instance, labelled model="NAME" (escaped).  Names
 * carry the phased_ prefix and base units: latencies are histograms in
 * seconds (buckets at 1, 2.5 and 5 of each decade from 10 us to 100 s),
 * token counts per iteration are histograms on powers of two.  Daemon-wide
 * phased_up and phased_uptime_seconds come first, without labels.
 */
void	 prom_write(struct strbuf *sb, const struct inst_snapshot *const *snaps,
	    size_t n, double uptime_s);

/* Append s as a label value: \ " and newline escaped, quotes included. */
void	 prom_label_value(struct strbuf *sb, const char *s);
/* Append a sample value: shortest round-trip decimal, +Inf, -Inf or NaN. */
void	 prom_value(struct strbuf *sb, double v);

/*
 * The nearest equivalents of phased's metrics in vLLM (v1 engine) and the
 * llama.cpp server (--metrics), for the manual page and dashboards.  NULL
 * where the other server has none.
 */
struct prom_equiv {
	const char	*phased;
	const char	*vllm;
	const char	*llamacpp;
	const char	*note;
};
extern const struct prom_equiv prom_equivalents[];
extern const size_t prom_nequivalents;

#endif
