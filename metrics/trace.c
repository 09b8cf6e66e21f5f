/* trace.c: a bounded record of engine iterations, written as a Chrome trace. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "strbuf.h"
#include "trace.h"
#include "util.h"

/* Set up an idle trace that can hold cap iterations. */
int
trace_init(struct trace *t, uint32_t cap, char **cause)
{
	int	error;

	if (cap == 0 || cap > TRACE_MAXCAP) {
		set_cause(cause, "trace capacity %u out of range (1 to %u)",
		    cap, TRACE_MAXCAP);
		return (-1);
	}
	memset(t, 0, sizeof *t);
	if ((error = pthread_mutex_init(&t->lock, NULL)) != 0) {
		set_cause(cause, "trace mutex: %s", strerror(error));
		return (-1);
	}
	t->ring = xreallocarray(NULL, cap, sizeof *t->ring);
	t->cap = cap;
	return (0);
}

/* Release the trace. */
void
trace_free(struct trace *t)
{
	free(t->ring);
	t->ring = NULL;
	pthread_mutex_destroy(&t->lock);
}

/* Clear the records and start capturing. */
void
trace_start(struct trace *t, uint64_t now)
{
	pthread_mutex_lock(&t->lock);
	t->head = t->len = 0;
	t->seq = t->dropped = 0;
	t->started = now;
	t->stopped = 0;
	__atomic_store_n(&t->active, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&t->lock);
}

/* Stop capturing and keep the records. */
void
trace_stop(struct trace *t, uint64_t now)
{
	pthread_mutex_lock(&t->lock);
	if (t->active)
		t->stopped = now;
	__atomic_store_n(&t->active, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&t->lock);
}

/* Whether a capture runs (no lock: the engine asks every iteration). */
int
trace_active(struct trace *t)
{
	return (__atomic_load_n(&t->active, __ATOMIC_ACQUIRE));
}

/* Copy a policy name (perhaps unterminated), cut at a character boundary. */
static void
copy_name(char *dst, const char *src)
{
	size_t	n;

	n = strnlen(src, TRACE_POLICY_MAX);
	if (n >= TRACE_POLICY_MAX) {
		n = TRACE_POLICY_MAX - 1;
		while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Record an iteration, overwriting the oldest when the ring is full. */
void
trace_append(struct trace *t, const struct trace_iter *it)
{
	struct trace_iter	*slot;

	if (!trace_active(t))
		return;
	pthread_mutex_lock(&t->lock);
	if (!t->active) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	if (t->len == t->cap) {
		t->head = (t->head + 1) % t->cap;
		t->len--;
		t->dropped++;
	}
	slot = &t->ring[(t->head + t->len) % t->cap];
	slot->start = it->start;
	slot->dur = it->dur;
	slot->prefill_tokens = it->prefill_tokens;
	slot->decode_tokens = it->decode_tokens;
	slot->nreqs = it->nreqs;
	slot->group = it->group;
	slot->seq = t->seq++;
	copy_name(slot->policy, it->policy);
	t->len++;
	pthread_mutex_unlock(&t->lock);
}

/* Number of iterations held. */
uint32_t
trace_len(struct trace *t)
{
	uint32_t	n;

	pthread_mutex_lock(&t->lock);
	n = t->len;
	pthread_mutex_unlock(&t->lock);
	return (n);
}

/* Append ns as microseconds with exactly three decimals. */
static void
put_us(struct strbuf *sb, uint64_t ns)
{
	strbuf_printf(sb, "%llu.%03llu", (unsigned long long)(ns / 1000),
	    (unsigned long long)(ns % 1000));
}

/* Name an iteration after what its batch held. */
static const char *
iter_name(const struct trace_iter *it)
{
	if (it->prefill_tokens != 0 && it->decode_tokens != 0)
		return ("mixed");
	if (it->prefill_tokens != 0)
		return ("prefill");
	if (it->decode_tokens != 0)
		return ("decode");
	return ("idle");
}

#define TRACE_MAXGROUPS	256

/* Add g to the set of groups seen; returns 1 if it is new. */
static int
group_new(int32_t *seen, uint32_t *nseen, int32_t g)
{
	uint32_t	i;

	for (i = 0; i < *nseen; i++) {
		if (seen[i] == g)
			return (0);
	}
	if (*nseen == TRACE_MAXGROUPS)
		return (0);	/* unnamed rows beyond that are harmless */
	seen[(*nseen)++] = g;
	return (1);
}

/* Write the held iterations as Chrome trace-event JSON. */
void
trace_write(struct trace *t, struct strbuf *sb, const char *process_name)
{
	struct trace_iter	*v, *it;
	uint64_t		 dropped, started, stopped, seq;
	int32_t			 seen[TRACE_MAXGROUPS];
	uint32_t		 n, i, nseen = 0;

	/* Copy under the lock, format after, so the engine never waits long. */
	pthread_mutex_lock(&t->lock);
	n = t->len;
	v = xreallocarray(NULL, n == 0 ? 1 : n, sizeof *v);
	for (i = 0; i < n; i++)
		v[i] = t->ring[(t->head + i) % t->cap];
	dropped = t->dropped;
	started = t->started;
	stopped = t->stopped;
	seq = t->seq;
	pthread_mutex_unlock(&t->lock);

	strbuf_adds(sb, "{\"traceEvents\":[\n");
	strbuf_adds(sb, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,"
	    "\"tid\":0,\"args\":{\"name\":");
	strbuf_json_string(sb, process_name != NULL ? process_name : "phased");
	strbuf_adds(sb, "}}");
	for (i = 0; i < n; i++) {
		if (!group_new(seen, &nseen, v[i].group))
			continue;
		strbuf_printf(sb, ",\n{\"name\":\"thread_name\",\"ph\":\"M\","
		    "\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"group %d\"}}",
		    (int)v[i].group, (int)v[i].group);
	}
	for (i = 0; i < n; i++) {
		it = &v[i];
		strbuf_printf(sb, ",\n{\"name\":\"%s\",\"cat\":\"iteration\","
		    "\"ph\":\"X\",\"ts\":", iter_name(it));
		put_us(sb, it->start);
		strbuf_adds(sb, ",\"dur\":");
		put_us(sb, it->dur);
		strbuf_printf(sb, ",\"pid\":1,\"tid\":%d,\"args\":{"
		    "\"iteration\":%llu,\"prefill_tokens\":%u,"
		    "\"decode_tokens\":%u,\"requests\":%u,\"policy\":",
		    (int)it->group, (unsigned long long)it->seq,
		    it->prefill_tokens, it->decode_tokens, it->nreqs);
		strbuf_json_string(sb, it->policy);
		strbuf_adds(sb, "}}");
	}
	strbuf_adds(sb, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{");
	strbuf_printf(sb, "\"iterations_recorded\":%llu,"
	    "\"iterations_dropped\":%llu,\"started_us\":",
	    (unsigned long long)seq, (unsigned long long)dropped);
	put_us(sb, started);
	strbuf_adds(sb, ",\"stopped_us\":");
	put_us(sb, stopped);
	strbuf_adds(sb, "}}\n");
	free(v);
}
