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
#include "wait.h"

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
	t->scap = cap * TRACE_SPANS_PER_ITER;
	return (0);
}

/* Release the trace. */
void
trace_free(struct trace *t)
{
	free(t->ring);
	free(t->spans);
	t->ring = NULL;
	t->spans = NULL;
	pthread_mutex_destroy(&t->lock);
}

/* Clear the records and start capturing. */
void
trace_start(struct trace *t, uint64_t now)
{
	pthread_mutex_lock(&t->lock);
	t->head = t->len = 0;
	t->seq = t->dropped = 0;
	/* Most engines are never traced: the interval ring waits for one. */
	if (t->spans == NULL)
		t->spans = xreallocarray(NULL, t->scap, sizeof *t->spans);
	t->shead = t->slen = 0;
	t->sseq = t->sdropped = 0;
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
	slot->nprefills = it->nprefills;
	memcpy(slot->prefill_ids, it->prefill_ids, sizeof slot->prefill_ids);
	t->len++;
	pthread_mutex_unlock(&t->lock);
}

/* Keep the other prefill entries of it with the most tokens in sp. */
static void
span_blame(struct trace_span *sp, const struct wait_iter *it, uint64_t self)
{
	struct trace_blame	b;
	size_t			i;
	int			j;

	for (i = 0; i < it->nprefills; i++) {
		if (it->prefills[i].id == self)
			continue;
		sp->tokens += it->prefills[i].tokens;
		sp->nothers++;
		b.id = it->prefills[i].id;
		b.tokens = it->prefills[i].tokens;
		if (sp->nblamed == TRACE_SPAN_BLAME) {
			if (b.tokens <= sp->blamed[TRACE_SPAN_BLAME - 1].tokens)
				continue;
			sp->nblamed--;
		}
		for (j = sp->nblamed; j > 0 && sp->blamed[j - 1].tokens <
		    b.tokens; j--)
			sp->blamed[j] = sp->blamed[j - 1];
		sp->blamed[j] = b;
		sp->nblamed++;
	}
}

/* Record the intervals a request's last wait accounting gave. */
void
trace_wait(struct trace *t, uint64_t req, int32_t group,
    const struct reqwait *w, const struct wait_iter *it)
{
	struct trace_span	 sp[WAIT_LAST_MAX], *s;
	const struct wait_seg	*sg;
	size_t			 k;
	int			 i, n = 0;

	if (!trace_active(t) || w->nlast == 0)
		return;
	for (i = 0; i < w->nlast && i < WAIT_LAST_MAX; i++) {
		sg = &w->last[i];
		s = &sp[n++];
		memset(s, 0, sizeof *s);
		s->req = req;
		s->start = sg->start;
		s->dur = sg->end - sg->start;
		s->group = group;
		s->cause = (uint16_t)sg->cause;
		/* The pending gap ends where the iteration starts. */
		if (it == NULL || sg->end <= it->start)
			continue;
		s->iter_start = it->start;
		if (sg->cause == WAIT_OTHERS_PREFILL) {
			span_blame(s, it, req);
			continue;
		}
		for (k = 0; k < it->nprefills; k++)
			if (it->prefills[k].id == req)
				s->tokens += it->prefills[k].tokens;
	}
	pthread_mutex_lock(&t->lock);
	for (i = 0; i < n && t->active && t->spans != NULL; i++) {
		if (t->slen == t->scap) {
			t->shead = (t->shead + 1) % t->scap;
			t->slen--;
			t->sdropped++;
		}
		t->spans[(t->shead + t->slen) % t->scap] = sp[i];
		t->slen++;
		t->sseq++;
	}
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

/* Order request ids, for the thread rows. */
static int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y ? -1 : x > y);
}

/* Write the request rows' metadata and their intervals. */
static void
write_spans(struct strbuf *sb, const struct trace_span *sp, uint32_t n)
{
	const struct trace_span	*s;
	uint64_t		*ids, flow = 0;
	uint32_t		 i, j, nids = 0;

	if (n == 0)
		return;
	strbuf_adds(sb, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,"
	    "\"tid\":0,\"args\":{\"name\":\"requests\"}}");
	ids = xreallocarray(NULL, n, sizeof *ids);
	for (i = 0; i < n; i++)
		ids[i] = sp[i].req;
	qsort(ids, n, sizeof *ids, cmp_u64);
	for (i = 0; i < n; i++) {
		if (i > 0 && ids[i] == ids[i - 1])
			continue;
		ids[nids++] = ids[i];
	}
	for (i = 0; i < nids; i++)
		strbuf_printf(sb, ",\n{\"name\":\"thread_name\",\"ph\":\"M\","
		    "\"pid\":2,\"tid\":%llu,\"args\":{\"name\":"
		    "\"request %llu\"}}", (unsigned long long)ids[i],
		    (unsigned long long)ids[i]);
	free(ids);
	for (i = 0; i < n; i++) {
		s = &sp[i];
		strbuf_printf(sb, ",\n{\"name\":\"%s\",\"cat\":\"wait\","
		    "\"ph\":\"X\",\"ts\":", s->cause < WAIT__COUNT ?
		    wait_cause_names[s->cause] : "unknown");
		put_us(sb, s->start);
		strbuf_adds(sb, ",\"dur\":");
		put_us(sb, s->dur);
		strbuf_printf(sb, ",\"pid\":2,\"tid\":%llu,\"args\":{"
		    "\"request\":%llu", (unsigned long long)s->req,
		    (unsigned long long)s->req);
		if (s->group >= 0)
			strbuf_printf(sb, ",\"group\":%d", (int)s->group);
		if (s->iter_start != 0) {
			strbuf_adds(sb, ",\"iteration_start_us\":");
			put_us(sb, s->iter_start);
		}
		if (s->cause == WAIT_OTHERS_PREFILL) {
			strbuf_printf(sb, ",\"others_prefill_tokens\":%u,"
			    "\"others_prefills\":%u,\"blamed\":[", s->tokens,
			    s->nothers);
			for (j = 0; j < s->nblamed; j++) {
				strbuf_printf(sb, "%s{\"id\":%llu,"
				    "\"prefill_tokens\":%u,\"us\":", j ? "," : "",
				    (unsigned long long)s->blamed[j].id,
				    s->blamed[j].tokens);
				/* Its part of the interval, by its tokens. */
				put_us(sb, s->tokens == 0 ? 0 : (uint64_t)
				    ((double)s->dur * s->blamed[j].tokens /
				    s->tokens));
				strbuf_adds(sb, "}");
			}
			strbuf_adds(sb, "]");
		} else if (s->tokens != 0)
			strbuf_printf(sb, ",\"prefill_tokens\":%u", s->tokens);
		strbuf_adds(sb, "}}");
		/* An arrow from each blamed request's prefill to this. */
		for (j = 0; j < s->nblamed && s->cause == WAIT_OTHERS_PREFILL;
		    j++) {
			flow++;
			strbuf_printf(sb, ",\n{\"name\":\"prefill of %llu\","
			    "\"cat\":\"blame\",\"ph\":\"s\",\"id\":%llu,"
			    "\"pid\":2,\"tid\":%llu,\"ts\":",
			    (unsigned long long)s->blamed[j].id,
			    (unsigned long long)flow,
			    (unsigned long long)s->blamed[j].id);
			put_us(sb, s->iter_start + 1);
			strbuf_printf(sb, "},\n{\"name\":\"prefill of %llu\","
			    "\"cat\":\"blame\",\"ph\":\"f\",\"bp\":\"e\","
			    "\"id\":%llu,\"pid\":2,\"tid\":%llu,\"ts\":",
			    (unsigned long long)s->blamed[j].id,
			    (unsigned long long)flow,
			    (unsigned long long)s->req);
			put_us(sb, s->start + 1);
			strbuf_adds(sb, "}");
		}
	}
}

/* Write the held iterations as Chrome trace-event JSON. */
void
trace_write(struct trace *t, struct strbuf *sb, const char *process_name)
{
	struct trace_iter	*v, *it;
	struct trace_span	*sp;
	uint64_t		 dropped, started, stopped, seq, sseq, sdropped;
	int32_t			 seen[TRACE_MAXGROUPS];
	uint32_t		 n, i, j, ns, nseen = 0;

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
	ns = t->spans != NULL ? t->slen : 0;
	sp = xreallocarray(NULL, ns == 0 ? 1 : ns, sizeof *sp);
	for (i = 0; i < ns; i++)
		sp[i] = t->spans[(t->shead + i) % t->scap];
	sseq = t->sseq;
	sdropped = t->sdropped;
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
		if (it->nprefills != 0) {
			strbuf_adds(sb, ",\"prefill_requests\":[");
			for (j = 0; j < it->nprefills && j < TRACE_ITER_PREFILLS;
			    j++)
				strbuf_printf(sb, "%s%llu", j ? "," : "",
				    (unsigned long long)it->prefill_ids[j]);
			strbuf_adds(sb, "]");
		}
		strbuf_adds(sb, "}}");
	}
	write_spans(sb, sp, ns);
	strbuf_adds(sb, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{");
	strbuf_printf(sb, "\"iterations_recorded\":%llu,"
	    "\"iterations_dropped\":%llu,\"intervals_recorded\":%llu,"
	    "\"intervals_dropped\":%llu,\"started_us\":",
	    (unsigned long long)seq, (unsigned long long)dropped,
	    (unsigned long long)sseq, (unsigned long long)sdropped);
	put_us(sb, started);
	strbuf_adds(sb, ",\"stopped_us\":");
	put_us(sb, stopped);
	strbuf_adds(sb, "}}\n");
	free(v);
	free(sp);
}
