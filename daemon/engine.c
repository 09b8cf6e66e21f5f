/*
 * engine.c: continuous batching for one model instance.
 *
 * Each device group runs its own loop thread.  An iteration: take the
 * engine lock; retire cancelled and expired requests; build the read-only
 * view; ask the policy for a plan (validated, with the built-in fcfs as the
 * fallback); apply its preemptions and migrations; reserve KV for its
 * entries and mark them busy; drop the lock; run one batched forward pass;
 * take the lock again to sample, emit token events and retire finished
 * requests.  Requests are owned by the engine, not the policy, so they
 * survive a policy swap, which happens under the lock between iterations.
 */
#include "config.h"

#include <sys/queue.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "engine.h"
#include "kvcache.h"
#include "log.h"
#include "model.h"
#include "policy_guard.h"
#include "tokenizer.h"
#include "trace.h"
#include "util.h"

#define ENGINE_HIST		64	/* iteration stats kept for the view */
#define ENGINE_TEXT_MAX		4096	/* text bytes one token may emit */
#define ENGINE_IDLE_WAIT_MS	50	/* nap when a plan has nothing to run */
#define ENGINE_XFER_POLL_MS	1	/* nap of an idle source of KV moving */

struct ereq {
	TAILQ_ENTRY(ereq)	 entry;
	uint64_t		 id;
	void			*owner;
	int			 state;		/* enum phased_req_state */
	int			 group;		/* -1: no KV anywhere */
	int			 busy;		/* in a forward pass now */
	int32_t			*tokens;	/* prompt, then output */
	uint32_t		 n_tokens;
	uint32_t		 cap;
	uint32_t		 n_prompt;
	uint32_t		 n_generated;
	uint32_t		 prefill_target; /* tokens to have in KV before sampling */
	uint32_t		 max_tokens;
	struct kv_seq		 seq;
	struct sampler		*sampler;
	struct detok		 detok;
	struct stopper		 stop;
	uint64_t		 deadline_ns;
	int			 cancel;
	char			*cancel_why;
	struct reqtime	 timing;
	double			 tbt_last_ms;
	double			 tbt_ewma_ms;
	int			 announced;	/* policy told of its arrival */
	int32_t			 eog_ids[ENGINE_MAX_EOG];
	int			 n_eog_ids;
	int			 eog_stop;
	int			 top_logprobs;	/* -1: no log probabilities */
	float			*raw_logits;	/* a copy for them */
	uint32_t		 cached_tokens;	/* reused from the prefix cache */
	uint32_t		 first_cached;	/* at its first admission */
	int			 admitted;	/* admitted at least once */
	int32_t			 priority;	/* for the policy (policy.h) */
	uint32_t		 uid, weight;
};
TAILQ_HEAD(ereq_list, ereq);

/*
 * A KV transfer the backend is still doing (kv_copy_start): the source
 * blocks it reads stay held here until it is polled done.
 */
struct expend {
	struct expend		*next;
	struct kv_xfer		*x;
	int			 src, dst;	/* groups */
	struct kv_seq		 seq;		/* the source's blocks */
	uint64_t		 id;		/* the request moved */
	uint64_t		 t0, bytes;
};

struct egroup {
	struct engine		*e;
	int			 index;
	int			 role;
	char			 devices[64];
	pthread_t		 thread;
	int			 started;
	struct backend_inst	*bi;
	struct kv_pool		*pool;
	uint64_t		 weight_bytes[8];	/* per device of the group */
	int			 n_weight;
	uint64_t		 iteration;
	struct phased_iter_stat	 hist[ENGINE_HIST];
	uint32_t		 n_hist;
	struct phased_group	 vgroups[ENGINE_MAX_GROUPS]; /* this loop's view */
	/* Per-iteration scratch, sized for the engine's limits. */
	struct phased_request	*vreqs;
	struct phased_plan_entry *pentries;
	uint64_t		*ppreempt;
	struct phased_migration	*pmigr;
	struct fwd_entry	*fentries;
	struct ereq		**freqs;
	float			*logits;
	uint64_t		*gaps;
	struct wait_entry	*wpref;		/* the batch's prefill entries */
	size_t			 vcap;
	uint64_t		 decode_others_ns; /* this iteration's, decoders' */
	size_t			 nwpref;	/* entries in wpref */
	/* Lending cores between CPU groups (PHASED_PLAN_BORROW). */
	int			 n_lend;	/* others' CPUs this group may borrow */
	int			 idle;		/* waiting with nothing to run */
	int			 lent_to;	/* group borrowing our cores, -1: none */
	int			 borrowed;	/* threads borrowed this iteration */
	uint32_t		 rep_chunk;	/* the plan's report (policy.h) */
	uint32_t		 rep_notices;
	uint64_t		 rep_pred_ns, rep_target_ns;
};

struct engine {
	pthread_mutex_t		 mu;
	pthread_cond_t		 cv;
	struct model		*model;
	const struct backend_ops *ops;
	struct engine_config	 conf;
	char			*name;
	struct egroup		 groups[ENGINE_MAX_GROUPS];
	int			 n_groups;
	struct phased_group	 vgroups[ENGINE_MAX_GROUPS];
	struct ereq_list	 reqs;		/* arrival order */
	uint32_t		 n_reqs;
	uint32_t		 n_waiting;
	uint64_t		 next_id;
	int			 stopping;
	char			*stop_why;
	struct policy_guard	 policy;
	engine_emit_fn		 emit;
	void			*emit_arg;
	uint32_t		 n_vocab;
	struct inst_metrics	 metrics;
	struct trace		 trace;
	int			 eos_is_eog;
	struct wait_model	 wmodel;	/* iteration cost, all groups */
	struct engine_policy_report prep; /* the last planned iteration's */
	int			 holds;		/* engine_hold() by other threads */
	struct expend		*xfers;		/* KV transfers in flight */
};

/* Lock the engine. */
static void
elock(struct engine *e)
{
	if (pthread_mutex_lock(&e->mu) != 0)
		fatalx("engine lock");
}

/* Unlock the engine. */
static void
eunlock(struct engine *e)
{
	pthread_mutex_unlock(&e->mu);
}

/*
 * Fill the view record of a request.  A waiting request shows the prompt
 * tokens the prefix cache holds for it as computed (`cached'), so chunking
 * policies charge only the rest to their budget.
 */
static void
view_request(const struct ereq *r, struct phased_request *v, uint32_t cached)
{
	memset(v, 0, sizeof *v);
	v->id = r->id;
	v->state = (uint32_t)r->state;
	v->group = r->group < 0 ? PHASED_GROUP_NONE : (uint32_t)r->group;
	v->arrival_ns = r->timing.arrival;
	v->prompt_tokens = r->prefill_target;
	v->computed_tokens = r->state == PHASED_REQ_DECODING ?
	    r->prefill_target : r->seq.n_tokens;
	v->generated_tokens = r->n_generated;
	v->max_tokens = r->max_tokens;
	v->kv_tokens = r->seq.n_tokens;
	v->kv_blocks = r->seq.n_blocks;
	v->tbt_last_ms = r->tbt_last_ms;
	v->tbt_ewma_ms = r->tbt_ewma_ms;
	if (r->state == PHASED_REQ_WAITING) {
		v->computed_tokens = cached;
		v->cached_tokens = cached;
	} else
		v->cached_tokens = r->cached_tokens;
	v->priority = r->priority;
	v->uid = r->uid;
	v->weight = r->weight;
}

/* Emit an event to the control thread. */
static void
emit(struct engine *e, struct engine_event *ev)
{
	e->emit(e->emit_arg, ev);
}

/* Free a request's memory (its KV must be released already). */
static void
ereq_free(struct ereq *r)
{
	free(r->tokens);
	if (r->sampler != NULL)
		sampler_free(r->sampler);
	stopper_free(&r->stop);
	free(r->cancel_why);
	free(r->raw_logits);
	reqtime_free(&r->timing);
	free(r);
}

/* Give a request's KV back to the pool of its group. */
static void
release_kv(struct engine *e, struct ereq *r)
{
	if (r->group >= 0)
		kv_seq_release(e->groups[r->group].pool, &r->seq);
	r->group = -1;
}

/* Finish a request: free its KV, emit DONE, forget it.  Lock held. */
static void
finish(struct engine *e, struct ereq *r, enum finish_reason reason,
    const char *error)
{
	struct engine_event	 ev;
	struct phased_request	 vr;
	uint64_t		 now = now_ns();

	if (r->state == PHASED_REQ_WAITING)
		e->n_waiting--;
	release_kv(e, r);
	r->state = PHASED_REQ_FINISHED;
	if (r->announced) {
		view_request(r, &vr, 0);
		pguard_event(&e->policy, PCHAN_EV_FINISH, &vr);
	}
	reqtime_finish(&r->timing, now);
	trace_wait(&e->trace, r->id, -1, &r->timing.wait, NULL);
	inst_metrics_finished(&e->metrics, &r->timing, reason);
	memset(&ev, 0, sizeof ev);
	ev.type = ENGINE_EV_DONE;
	ev.owner = r->owner;
	ev.reason = reason;
	ev.t_ns = now - r->timing.arrival;
	ev.cached_tokens = r->first_cached;
	if (error != NULL)
		ev.error = xstrdup(error);
	reqtime_summary(&r->timing, &ev.summary);
	emit(e, &ev);
	TAILQ_REMOVE(&e->reqs, r, entry);
	e->n_reqs--;
	ereq_free(r);
}

/* Put a running request back in the queue; its tokens are recomputed. */
static void
preempt(struct engine *e, struct ereq *r)
{
	log_debug("%s: preempting request %llu (%u tokens)", e->name,
	    (unsigned long long)r->id, r->n_tokens);
	release_kv(e, r);
	r->state = PHASED_REQ_WAITING;
	r->prefill_target = r->n_tokens;
	e->n_waiting++;
	reqtime_preempt(&r->timing);
	reqwait_gap(&r->timing.wait, now_ns(), WAIT_PREEMPTED);
	trace_wait(&e->trace, r->id, -1, &r->timing.wait, NULL);
	inst_metrics_count(&e->metrics, CNT_PREEMPTIONS, 1);
}

/* Find a request by id.  Lock held. */
static struct ereq *
find_req(struct engine *e, uint64_t id)
{
	struct ereq	*r;

	TAILQ_FOREACH(r, &e->reqs, entry)
		if (r->id == id)
			return (r);
	return (NULL);
}

/* Retire cancelled and expired requests that are not being computed. */
static void
reap(struct engine *e, uint64_t now)
{
	struct ereq	*r, *next;

	for (r = TAILQ_FIRST(&e->reqs); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		if (r->busy)
			continue;
		if (e->stopping)
			finish(e, r, FINISH_CANCELLED, e->stop_why);
		else if (r->cancel)
			finish(e, r, FINISH_CANCELLED, r->cancel_why);
		else if (r->deadline_ns != 0 && now >= r->deadline_ns)
			finish(e, r, FINISH_ERROR, "deadline exceeded");
	}
}

/* Whether group g could have work now.  Lock held. */
static int
group_has_work(struct engine *e, struct egroup *g)
{
	struct ereq	*r;

	TAILQ_FOREACH(r, &e->reqs, entry) {
		if (r->busy)
			continue;
		if (r->group == g->index)
			return (1);
		if (r->state == PHASED_REQ_WAITING &&
		    g->role != PHASED_ROLE_DECODE)
			return (1);
	}
	return (0);
}

/* Build the view for group g into its scratch.  Lock held. */
static void
build_view(struct engine *e, struct egroup *g, struct phased_view *v)
{
	struct ereq	*r;
	uint32_t	 n = 0, cached;
	int		 i;

	/* Per loop: the view is read unlocked while the policy plans. */
	for (i = 0; i < e->n_groups; i++) {
		g->vgroups[i] = e->vgroups[i];
		g->vgroups[i].free_blocks = kv_pool_free_blocks(e->groups[i].pool);
		g->vgroups[i].total_blocks = e->groups[i].pool->n_blocks;
	}
	TAILQ_FOREACH(r, &e->reqs, entry) {
		/* A request another loop is computing is not ours to plan. */
		if (r->busy)
			continue;
		if (n == g->vcap)
			break;
		/* What this group's cache holds for a request it may admit. */
		cached = r->group < 0 && r->state == PHASED_REQ_WAITING &&
		    g->role != PHASED_ROLE_DECODE ? kv_prefix_lookup(g->pool,
		    r->tokens, r->n_tokens) : 0;
		view_request(r, &g->vreqs[n++], cached);
	}
	memset(v, 0, sizeof *v);
	v->group = (uint32_t)g->index;
	v->n_groups = (uint32_t)e->n_groups;
	v->groups = g->vgroups;
	v->max_batch_tokens = e->conf.max_batch_tokens;
	v->max_seqs = e->conf.max_seqs;
	v->block_size = g->pool->layout.block_size;
	v->n_reqs = n;
	v->reqs = g->vreqs;
	v->n_hist = g->n_hist;
	v->hist = g->hist;
	v->now_ns = now_ns();
	v->iteration = g->iteration;
	v->abi_minor = PHASED_POLICY_ABI_MINOR;
}

/* Count a finished KV transfer: its bytes and queue-to-end time. */
static void
xfer_count(struct engine *e, uint64_t bytes, uint64_t ns, int async)
{
	inst_metrics_count(&e->metrics, CNT_KV_TRANSFERS, 1);
	inst_metrics_count(&e->metrics, CNT_KV_TRANSFER_BYTES, bytes);
	inst_metrics_count(&e->metrics, CNT_KV_TRANSFER_NS, ns);
	if (async)
		inst_metrics_count(&e->metrics, CNT_KV_TRANSFERS_ASYNC, 1);
}

/*
 * Finish the KV transfers that are over (all of them with wait): free the
 * source blocks they read, count them, and fail a request whose transfer
 * failed (its KV at the destination is not usable).  Lock held; returns
 * how many ended.
 */
static int
xfers_poll(struct engine *e, int wait)
{
	struct expend	**pp = &e->xfers, *p;
	struct ereq	 *r;
	char		 *cause = NULL, msg[128];
	int		  rc, n = 0;

	while ((p = *pp) != NULL) {
		if ((rc = e->ops->kv_xfer_poll(p->x, wait, &cause)) == 0) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		kv_seq_release(e->groups[p->src].pool, &p->seq);
		if (rc == 1)
			xfer_count(e, p->bytes, now_ns() - p->t0, 1);
		else {
			log_warnx("%s: kv transfer of request %llu to group %d "
			    "failed: %s", e->name, (unsigned long long)p->id,
			    p->dst, cause);
			snprintf(msg, sizeof msg, "kv transfer to group %d "
			    "failed", p->dst);
			if ((r = find_req(e, p->id)) != NULL && r->group >= 0) {
				if (r->busy && !r->cancel) {
					r->cancel = 1;
					r->cancel_why = xstrdup(msg);
				} else if (!r->busy)
					finish(e, r, FINISH_ERROR, msg);
			}
			free(cause);
			cause = NULL;
		}
		free(p);
		n++;
	}
	return (n);
}

/* Whether a KV transfer out of group g is still moving.  Lock held. */
static int
xfers_from(const struct engine *e, int g)
{
	const struct expend	*p;

	for (p = e->xfers; p != NULL; p = p->next)
		if (p->src == g)
			return (1);
	return (0);
}

/*
 * Move a request's KV from its group to group `to`.  Lock held.  With a
 * backend that transfers beside compute the request is the destination's
 * at once (its forward passes wait for the data on the device) and the
 * source blocks are held until xfers_poll sees the transfer end.
 */
static int
migrate(struct engine *e, struct ereq *r, int to)
{
	struct egroup	*src = &e->groups[r->group], *dst = &e->groups[to];
	struct kv_seq	 seq;
	struct kv_xfer	*x = NULL;
	struct expend	*p;
	char		*cause = NULL;
	uint64_t	 t0 = now_ns(), bytes;
	int		 rc = -1;

	memset(&seq, 0, sizeof seq);
	bytes = (uint64_t)kv_pool_blocks_for(src->pool, r->seq.n_tokens) *
	    src->pool->block_bytes;
	if (e->ops->kv_copy_start != NULL && e->ops->kv_xfer_poll != NULL)
		rc = e->ops->kv_copy_start(dst->bi, dst->pool, &seq, src->bi,
		    src->pool, &r->seq, &x, &cause);
	else if (e->ops->kv_copy != NULL)
		rc = e->ops->kv_copy(dst->bi, dst->pool, &seq, src->bi,
		    src->pool, &r->seq, &cause);
	if (rc != 0) {
		log_debug("%s: migration of %llu to group %d deferred: %s",
		    e->name, (unsigned long long)r->id, to,
		    cause != NULL ? cause : "no kv transfer");
		free(cause);
		return (-1);
	}
	inst_metrics_count(&e->metrics, CNT_KV_TRANSFER_QUEUE_NS,
	    now_ns() - t0);
	if (x == NULL) {
		xfer_count(e, bytes, now_ns() - t0, 0);
		kv_seq_release(src->pool, &r->seq);
	} else {
		p = xcalloc(1, sizeof *p);
		p->x = x;
		p->src = r->group;
		p->dst = to;
		p->seq = r->seq;
		p->id = r->id;
		p->t0 = t0;
		p->bytes = bytes;
		p->next = e->xfers;
		e->xfers = p;
	}
	r->seq = seq;
	r->group = to;
	reqwait_gap(&r->timing.wait, now_ns(), WAIT_KV_TRANSFER);
	trace_wait(&e->trace, r->id, to, &r->timing.wait, NULL);
	return (0);
}

/* Whether id is one of the request's own end-of-turn tokens. */
static int
is_req_eog(const struct ereq *r, int32_t id)
{
	int	i;

	for (i = 0; i < r->n_eog_ids; i++)
		if (r->eog_ids[i] == id)
			return (1);
	return (0);
}

/*
 * Sample the next token of a request from its logits, emit it, and finish
 * the request if it is done.  Lock held.  Returns the TBT gap in ns (0 for
 * a first token).
 */
static uint64_t
sample_and_emit(struct engine *e, struct ereq *r, float *logits, uint64_t now)
{
	struct tokenizer	*tok = model_tokenizer(e->model);
	struct engine_event	 ev;
	char			 buf[ENGINE_TEXT_MAX], tail[64];
	size_t			 len, tl;
	int32_t			 id;
	uint64_t		 gap;
	int			 first, stopped = 0, eog, done;
	enum finish_reason	 reason = FINISH_LENGTH;

	if (r->top_logprobs >= 0)
		memcpy(r->raw_logits, logits, e->n_vocab * sizeof *logits);
	id = sampler_sample(r->sampler, logits, r->tokens, r->n_tokens);
	first = r->timing.first_token == 0;
	gap = reqtime_token(&r->timing, now);
	if (first)
		inst_metrics_first_token(&e->metrics, &r->timing);
	else {
		r->tbt_last_ms = gap / 1e6;
		r->tbt_ewma_ms = r->tbt_ewma_ms == 0 ? r->tbt_last_ms :
		    r->tbt_ewma_ms + (r->tbt_last_ms - r->tbt_ewma_ms) / 8;
	}
	if (r->n_tokens == r->cap) {
		r->cap = r->cap * 2;
		r->tokens = xreallocarray(r->tokens, r->cap, sizeof *r->tokens);
	}
	r->tokens[r->n_tokens++] = id;
	r->n_generated++;

	eog = tokenizer_is_eog(tok, id) || is_req_eog(r, id);
	done = eog || r->n_generated >= r->max_tokens ||
	    r->n_tokens >= e->conf.ctx;
	len = eog ? 0 : detok_push(&r->detok, id, buf, sizeof buf);
	if (done) {
		tl = detok_flush(&r->detok, tail, sizeof tail);
		if (len + tl <= sizeof buf) {
			memcpy(buf + len, tail, tl);
			len += tl;
		}
	}
	memset(&ev, 0, sizeof ev);
	ev.type = ENGINE_EV_TOKEN;
	ev.owner = r->owner;
	ev.token = id;
	ev.t_ns = now - r->timing.arrival;
	if (r->top_logprobs >= 0) {
		ev.has_logprob = 1;
		ev.n_top = sampler_logprobs(r->raw_logits, (int)e->n_vocab, id,
		    r->top_logprobs, &ev.logprob, ev.top_ids, ev.top_lps);
	}
	stopped = stopper_push(&r->stop, buf, len, done, &ev.text, &ev.len);
	emit(e, &ev);
	if (stopped)
		reason = FINISH_STOP;
	else if (eog)
		reason = r->eog_stop ? FINISH_STOP : FINISH_EOS;
	if (stopped || done)
		finish(e, r, reason, NULL);
	return (first ? 0 : gap);
}

/* Admit the plan's entries into a batch; returns the number of entries. */
static int
build_batch(struct engine *e, struct egroup *g, struct phased_plan *p,
    uint64_t now, uint32_t *prefill, uint32_t *decode)
{
	struct ereq	*r;
	uint32_t	 i, n, hit;
	int		 nb = 0, fresh;

	*prefill = *decode = 0;
	for (i = 0; i < p->n_entries && (uint32_t)nb < e->conf.max_seqs; i++) {
		r = find_req(e, p->entries[i].id);
		n = p->entries[i].n_tokens;
		/* The validator checked the plan; these guard the engine. */
		if (r == NULL || r->busy || n == 0 ||
		    r->state == PHASED_REQ_FINISHED ||
		    (r->group >= 0 && r->group != g->index) ||
		    (r->group < 0 && g->role == PHASED_ROLE_DECODE) ||
		    r->seq.n_tokens + n > r->n_tokens)
			continue;
		fresh = r->group < 0;
		hit = 0;
		if (fresh) {
			memset(&r->seq, 0, sizeof r->seq);
			r->group = g->index;
			/* The policy saw what the cache held when it planned. */
			hit = kv_prefix_match(g->pool, &r->seq, r->tokens,
			    r->n_tokens);
			if (r->seq.n_tokens + n > r->n_tokens)
				n = r->n_tokens - r->seq.n_tokens;
		}
		if (kv_seq_reserve(g->pool, &r->seq, n) != 0) {
			if (fresh) {
				kv_seq_release(g->pool, &r->seq);
				r->group = -1;
			}
			continue;
		}
		if (fresh && g->pool->prefix != NULL) {
			r->cached_tokens = hit;
			if (!r->admitted)
				r->first_cached = hit;
			inst_metrics_count(&e->metrics, CNT_PREFIX_QUERIES, 1);
			inst_metrics_count(&e->metrics, CNT_PREFIX_HIT_TOKENS,
			    hit);
		}
		r->admitted = 1;
		if (r->state == PHASED_REQ_WAITING) {
			e->n_waiting--;
			r->state = PHASED_REQ_PREFILLING;
			reqtime_admit(&r->timing, now);
		}
		r->busy = 1;
		g->freqs[nb] = r;
		g->fentries[nb].seq = &r->seq;
		g->fentries[nb].tokens = r->tokens + r->seq.n_tokens;
		g->fentries[nb].n_tokens = (int)n;
		g->fentries[nb].logits = r->seq.n_tokens + n == r->n_tokens ?
		    g->logits + (size_t)nb * e->n_vocab : NULL;
		if (r->state == PHASED_REQ_DECODING)
			*decode += n;
		else
			*prefill += n;
		nb++;
	}
	return (nb);
}

/* Apply a plan's preemptions and migrations; returns how many.  Lock held. */
static int
apply_moves(struct engine *e, struct egroup *g, struct phased_plan *p)
{
	struct ereq	*r;
	uint32_t	 i;
	int		 moved = 0;

	for (i = 0; i < p->n_preempt; i++) {
		r = find_req(e, p->preempt[i]);
		if (r != NULL && !r->busy && r->group == g->index) {
			preempt(e, r);
			moved++;
		}
	}
	for (i = 0; i < p->n_migrations; i++) {
		r = find_req(e, p->migrations[i].id);
		if (r == NULL || r->busy || r->group != g->index ||
		    r->state != PHASED_REQ_DECODING ||
		    p->migrations[i].to >= (uint32_t)e->n_groups ||
		    (int)p->migrations[i].to == g->index)
			continue;
		if (migrate(e, r, (int)p->migrations[i].to) == 0) {
			pthread_cond_broadcast(&e->cv);
			moved++;
		}
	}
	return (moved);
}

/*
 * Nothing could be planned although requests are running here: the pool
 * is full.  Preempt the newest running request of this group so the older
 * ones can go on (it is recomputed later, with identical output).
 */
static int
relieve_pressure(struct engine *e, struct egroup *g)
{
	struct ereq	*r, *victim = NULL;
	int		 running = 0;

	TAILQ_FOREACH(r, &e->reqs, entry) {
		if (r->group != g->index || r->busy)
			continue;
		running++;
		victim = r;
	}
	if (victim == NULL)
		return (0);
	if (running == 1 && g->role != PHASED_ROLE_PREFILL) {
		/* Alone and still out of room: it can never finish here. */
		if (kv_pool_free_blocks(g->pool) == 0 &&
		    kv_pool_used_blocks(g->pool) == victim->seq.n_blocks) {
			finish(e, victim, FINISH_LENGTH, NULL);
			return (1);
		}
		return (0);
	}
	preempt(e, victim);
	return (1);
}

/* Refuse waiting requests that could never fit this group's pool. */
static void
refuse_oversized(struct engine *e, struct egroup *g)
{
	struct ereq	*r, *next;
	char		 msg[160];

	if (g->role == PHASED_ROLE_DECODE)
		return;
	for (r = TAILQ_FIRST(&e->reqs); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		if (r->state != PHASED_REQ_WAITING || r->busy)
			continue;
		if (kv_pool_blocks_for(g->pool, r->n_tokens + 1) >
		    g->pool->n_blocks) {
			snprintf(msg, sizeof msg, "request needs %u KV blocks, "
			    "more than the pool's %u", kv_pool_blocks_for(
			    g->pool, r->n_tokens + 1), g->pool->n_blocks);
			finish(e, r, FINISH_ERROR, msg);
		}
	}
}

/* Wait on the engine's condition for at most ms milliseconds. */
static void
wait_ms(struct engine *e, int ms)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

/* Tell the policy of requests it has not seen yet.  Lock held. */
static void
announce(struct engine *e)
{
	struct phased_request	 vr;
	struct ereq		*r;

	TAILQ_FOREACH(r, &e->reqs, entry) {
		if (r->announced)
			continue;
		r->announced = 1;
		view_request(r, &vr, 0);
		pguard_event(&e->policy, PCHAN_EV_ARRIVAL, &vr);
	}
}

/* Record an iteration in the group's history, the metrics and the trace. */
static void
record_iteration(struct engine *e, struct egroup *g, uint64_t start,
    uint64_t end, uint32_t prefill, uint32_t decode, int nseqs, int nout,
    size_t ngaps)
{
	struct phased_iter_stat	*h;
	struct iter_sample	 s;
	struct trace_iter	 ti;
	struct pguard_stats	 ps;

	if (g->n_hist == ENGINE_HIST) {
		memmove(g->hist, g->hist + 1, (ENGINE_HIST - 1) * sizeof *g->hist);
		g->n_hist--;
	}
	h = &g->hist[g->n_hist++];
	memset(h, 0, sizeof *h);
	h->duration_ns = end - start;
	h->prefill_tokens = prefill;
	h->decode_tokens = decode;
	h->n_seqs = (uint32_t)nseqs;
	memset(&s, 0, sizeof s);
	s.start = start;
	s.end = end;
	s.prefill_tokens = prefill;
	s.decode_tokens = decode;
	s.nseqs = (uint32_t)nseqs;
	s.out_tokens = (uint32_t)nout;
	s.decode_others_ns = g->decode_others_ns;
	g->decode_others_ns = 0;
	inst_metrics_iteration(&e->metrics, &s, g->gaps, ngaps);
	/* What the policy aimed at next to what the iteration took. */
	e->prep.chunk_tokens = g->rep_chunk;
	e->prep.notices = g->rep_notices;
	e->prep.predicted_ns = g->rep_pred_ns;
	e->prep.target_ns = g->rep_target_ns;
	e->prep.measured_ns = end - start;
	e->prep.group = g->index;
	inst_metrics_set(&e->metrics, CNT_POLICY_CHUNK_TOKENS, g->rep_chunk);
	inst_metrics_set(&e->metrics, CNT_POLICY_TARGET_US,
	    g->rep_target_ns / 1000);
	inst_metrics_set(&e->metrics, CNT_POLICY_PREDICTED_US,
	    g->rep_pred_ns / 1000);
	inst_metrics_set(&e->metrics, CNT_ITER_MEASURED_US, (end - start) / 1000);
	if (trace_active(&e->trace)) {
		memset(&ti, 0, sizeof ti);
		ti.start = start;
		ti.dur = end - start;
		ti.prefill_tokens = prefill;
		ti.decode_tokens = decode;
		ti.nreqs = (uint32_t)nseqs;
		ti.group = g->index;
		ti.nprefills = (uint32_t)g->nwpref;
		for (size_t k = 0; k < g->nwpref && k < TRACE_ITER_PREFILLS; k++)
			ti.prefill_ids[k] = g->wpref[k].id;
		pguard_stats(&e->policy, &ps);
		snprintf(ti.policy, sizeof ti.policy, "%.*s",
		    (int)sizeof ti.policy - 1, ps.name);
		trace_append(&e->trace, &ti);
	}
}

/*
 * Give each request of the batch its share of the iteration: its own
 * work, and the part the other requests' prompt tokens added (wait.h).
 * Before the states move on.  Lock held.
 */
static void
attribute_wait(struct engine *e, struct egroup *g, int nb, uint64_t start,
    uint64_t end, uint32_t prefill, uint32_t decode)
{
	struct wait_iter	 it;
	struct ereq		*r;
	enum wait_cause		 own;
	size_t			 np = 0;
	int			 i;

	for (i = 0; i < nb; i++) {
		if (g->freqs[i]->state == PHASED_REQ_DECODING)
			continue;
		g->wpref[np].id = g->freqs[i]->id;
		g->wpref[np++].tokens = (uint32_t)g->fentries[i].n_tokens;
	}
	g->nwpref = np;
	wait_model_add(&e->wmodel, prefill, decode, end - start);
	memset(&it, 0, sizeof it);
	it.start = start;
	it.end = end;
	it.prefill_tokens = prefill;
	it.decode_tokens = decode;
	it.prefills = g->wpref;
	it.nprefills = np;
	wait_model_coef(&e->wmodel, &it.a, &it.b, &it.c);
	for (i = 0; i < nb; i++) {
		r = g->freqs[i];
		if (r->state == PHASED_REQ_DECODING)
			own = WAIT_DECODE;
		else if (r->timing.preemptions > 0)
			own = WAIT_PREEMPTED;
		else
			own = WAIT_PREFILL;
		reqwait_iteration(&r->timing.wait, &it, r->id, own);
		trace_wait(&e->trace, r->id, g->index, &r->timing.wait, &it);
		if (own == WAIT_DECODE)
			g->decode_others_ns += reqwait_last_ns(&r->timing.wait,
			    WAIT_OTHERS_PREFILL);
	}
}

/* Update the gauges of the metrics.  Lock held. */
static void
update_gauges(struct engine *e)
{
	struct kv_prefix_stats	st;
	uint64_t	used = 0, freeb = 0, evictions = 0, cached = 0;
	int		i;

	for (i = 0; i < e->n_groups; i++) {
		used += kv_pool_used_blocks(e->groups[i].pool);
		freeb += kv_pool_free_blocks(e->groups[i].pool);
		kv_prefix_stats(e->groups[i].pool, &st);
		evictions += st.evictions;
		cached += st.cached;
	}
	inst_metrics_set(&e->metrics, CNT_PREFIX_EVICTIONS, evictions);
	inst_metrics_set(&e->metrics, CNT_PREFIX_BLOCKS_CACHED, cached);
	inst_metrics_gauges(&e->metrics, used, freeb, e->n_reqs - e->n_waiting,
	    e->n_waiting);
}

/*
 * Borrow the cores of every other group when the plan allows it and all of
 * them are idle with nothing they could run, for this iteration only.
 * Lock held.
 */
static void
lend_begin(struct engine *e, struct egroup *g, const struct phased_plan *p,
    enum pguard_outcome po)
{
	struct egroup	*h;
	int		 i;

	if (po != PGUARD_POLICY || (p->flags & PHASED_PLAN_BORROW) == 0 ||
	    g->n_lend == 0 || e->ops->borrow == NULL || e->stopping)
		return;
	for (i = 0; i < e->n_groups; i++) {
		h = &e->groups[i];
		if (h != g && (!h->idle || h->lent_to >= 0 ||
		    group_has_work(e, h)))
			return;
	}
	for (i = 0; i < e->n_groups; i++)
		if (&e->groups[i] != g)
			e->groups[i].lent_to = g->index;
	e->ops->borrow(g->bi, g->n_lend);
	g->borrowed = g->n_lend;
	inst_metrics_count(&e->metrics, CNT_LEND_ITERATIONS, 1);
	inst_metrics_count(&e->metrics, CNT_CORES_LENT, (uint64_t)g->n_lend);
}

/* Give borrowed cores back and wake their groups.  Lock held. */
static void
lend_end(struct engine *e, struct egroup *g)
{
	int	i;

	if (g->borrowed == 0)
		return;
	e->ops->borrow(g->bi, 0);
	g->borrowed = 0;
	for (i = 0; i < e->n_groups; i++)
		if (e->groups[i].lent_to == g->index)
			e->groups[i].lent_to = -1;
	pthread_cond_broadcast(&e->cv);
}

/*
 * Wait on the engine's condition as an idle group that may lend its cores;
 * it stays idle until its loop finds work.
 */
static void
idle_wait(struct engine *e, struct egroup *g, int ms)
{
	g->idle = 1;
	wait_ms(e, ms);
}

/* One device group's loop. */
static void *
group_main(void *arg)
{
	struct egroup		*g = arg;
	struct engine		*e = g->e;
	struct phased_view	 v;
	struct phased_plan	 p;
	struct fwd_batch	 batch;
	uint64_t		 start, end;
	uint32_t		 prefill, decode;
	int			 nb, i, nout, moved;
	size_t			 ngaps, nev;
	struct pchan_event	*evs;
	enum pguard_outcome	 po;
	uint64_t		 gen;
	char			*cause = NULL;

	memset(&p, 0, sizeof p);
	p.entries = g->pentries;
	p.preempt = g->ppreempt;
	p.migrations = g->pmigr;
	p.cap_entries = p.cap_preempt = p.cap_migrations = (uint32_t)g->vcap;

	elock(e);
	for (;;) {
		reap(e, now_ns());
		if (e->xfers != NULL && xfers_poll(e, 0) > 0)
			pthread_cond_broadcast(&e->cv);
		if (e->stopping && e->n_reqs == 0)
			break;
		update_gauges(e);
		if (!group_has_work(e, g)) {
			/* Come back soon to free blocks a transfer holds. */
			idle_wait(e, g, xfers_from(e, g->index) ?
			    ENGINE_XFER_POLL_MS : 1000);
			continue;
		}
		g->idle = 0;
		/* Our cores are another group's until its iteration ends. */
		if (g->lent_to >= 0) {
			pthread_cond_wait(&e->cv, &e->mu);
			continue;
		}
		refuse_oversized(e, g);
		announce(e);
		build_view(e, g, &v);
		/* The policy plans without the engine lock held. */
		gen = pguard_take(&e->policy, &evs, &nev);
		eunlock(e);
		po = pguard_schedule(&e->policy, &v, &p, evs, nev, gen);
		free(evs);
		elock(e);
		if (po == PGUARD_INVALID || po == PGUARD_EJECTED)
			inst_metrics_count(&e->metrics, CNT_PLAN_ERRORS, 1);
		if (po == PGUARD_EJECTED)
			inst_metrics_count(&e->metrics, CNT_POLICY_EJECTIONS, 1);
		g->rep_chunk = po == PGUARD_POLICY ? p.chunk_tokens : 0;
		g->rep_notices = po == PGUARD_POLICY ? p.notices : 0;
		g->rep_pred_ns = po == PGUARD_POLICY ? p.predicted_ns : 0;
		g->rep_target_ns = po == PGUARD_POLICY ? p.target_ns : 0;
		moved = apply_moves(e, g, &p);
		start = now_ns();
		nb = build_batch(e, g, &p, start, &prefill, &decode);
		if (nb == 0) {
			if (moved == 0 && !relieve_pressure(e, g))
				idle_wait(e, g, ENGINE_IDLE_WAIT_MS);
			continue;
		}
		lend_begin(e, g, &p, po);
		eunlock(e);

		batch.entries = g->fentries;
		batch.n_seqs = nb;
		if (e->ops->forward(g->bi, g->pool, &batch, &cause) != 0) {
			elock(e);
			lend_end(e, g);
			log_warnx("%s: forward pass failed: %s", e->name, cause);
			for (i = 0; i < nb; i++) {
				g->freqs[i]->busy = 0;
				finish(e, g->freqs[i], FINISH_ERROR, cause);
			}
			free(cause);
			cause = NULL;
			continue;
		}

		elock(e);
		end = now_ns();
		lend_end(e, g);
		attribute_wait(e, g, nb, start, end, prefill, decode);
		nout = 0;
		ngaps = 0;
		for (i = 0; i < nb; i++) {
			struct ereq *r = g->freqs[i];

			r->busy = 0;
			/* Blocks it filled are reusable from now on. */
			kv_prefix_commit(g->pool, &r->seq, r->tokens);
			if (r->state == PHASED_REQ_PREFILLING)
				reqtime_chunk(&r->timing, start, end,
				    (uint32_t)g->fentries[i].n_tokens);
			if (g->fentries[i].logits == NULL)
				continue;
			r->state = PHASED_REQ_DECODING;
			r->prefill_target = r->n_tokens;
			nout++;
			if (r->cancel) {
				finish(e, r, FINISH_CANCELLED, r->cancel_why);
				continue;
			}
			if ((g->gaps[ngaps] = sample_and_emit(e, r,
			    g->fentries[i].logits, end)) != 0)
				ngaps++;
		}
		g->iteration++;
		record_iteration(e, g, start, now_ns(), prefill, decode, nb,
		    nout, ngaps);
		/* Other loops may wait for blocks or requests we freed. */
		pthread_cond_broadcast(&e->cv);
	}
	update_gauges(e);
	pthread_cond_broadcast(&e->cv);
	eunlock(e);
	return (NULL);
}

/*
 * The prefix cache's seed: what changes the KV of a block besides its
 * tokens and their position (the pool adds its layout and KV type).
 */
static uint64_t
prefix_seed(const struct engine *e, int group)
{
	const unsigned char	*c;
	uint64_t		 h = 0xcbf29ce484222325ULL;

	for (c = (const unsigned char *)e->name; *c != '\0'; c++)
		h = (h ^ *c) * 0x100000001b3ULL;
	return (h ^ ((uint64_t)group << 40) ^ (uintptr_t)e->model);
}

/*
 * The CPUs of the other groups that group i may borrow into lend[]: all
 * of theirs not its own, when every group is pinned to listed CPUs and the
 * backend can lend.  Returns how many.
 */
static int
lend_cpus(const struct engine *e, int i, int *lend, int max)
{
	const struct engine_group_spec *gs = &e->conf.groups[i], *hs;
	int	 h, c, k, n = 0, mine;

	if (e->ops->borrow == NULL || e->n_groups < 2)
		return (0);
	for (h = 0; h < e->n_groups; h++)
		if (e->conf.groups[h].n_cpus == 0)
			return (0);
	for (h = 0; h < e->n_groups; h++) {
		hs = &e->conf.groups[h];
		for (c = 0; h != i && c < hs->n_cpus && n < max; c++) {
			mine = 0;
			for (k = 0; k < gs->n_cpus; k++)
				mine |= gs->cpus[k] == hs->cpus[c];
			for (k = 0; k < n; k++)
				mine |= lend[k] == hs->cpus[c];
			if (!mine)
				lend[n++] = hs->cpus[c];
		}
	}
	return (n);
}

/* Parse nothing: the config was checked by the caller; set up a group. */
static int
group_setup(struct engine *e, int i, char **cause)
{
	struct egroup		*g = &e->groups[i];
	struct engine_group_spec *gs = &e->conf.groups[i];
	struct backend_config	 bc;
	size_t			 cap;
	int			 lend[ENGINE_MAX_GROUPS * 64];

	g->e = e;
	g->index = i;
	g->role = gs->role;
	/* Same size, NUL-terminated by the parser. */
	memcpy(g->devices, gs->devices, sizeof g->devices);
	memset(&bc, 0, sizeof bc);
	bc.devices = gs->n_cpus > 0 ? gs->cpus : NULL;
	bc.n_devices = gs->n_cpus;
	bc.n_threads = gs->n_threads;
	bc.graphs = e->conf.cuda_graphs > 0 ? 1 : e->conf.cuda_graphs < 0 ?
	    0 : BACKEND_GRAPHS_AUTO;
	g->lent_to = -1;
	g->n_lend = lend_cpus(e, i, lend, (int)(sizeof lend / sizeof lend[0]));
	bc.lend_devices = lend;
	bc.n_lend = g->n_lend;
	if ((g->bi = e->ops->create(e->model, &bc, cause)) == NULL)
		return (-1);
	if ((g->pool = e->ops->kv_pool_create(g->bi, e->conf.kv_blocks,
	    cause)) == NULL)
		return (-1);
	if (e->ops->weight_bytes != NULL)
		g->n_weight = e->ops->weight_bytes(g->bi, g->weight_bytes, 8);
	if (e->conf.prefix_cache && kv_prefix_enable(g->pool,
	    prefix_seed(e, i)) != 0) {
		set_cause(cause, "kv pool of group %d is in use", i);
		return (-1);
	}
	cap = (size_t)e->conf.max_waiting + e->conf.max_seqs * 2 + 16;
	g->vcap = cap;
	g->vreqs = xcalloc(cap, sizeof *g->vreqs);
	g->pentries = xcalloc(cap, sizeof *g->pentries);
	g->ppreempt = xcalloc(cap, sizeof *g->ppreempt);
	g->pmigr = xcalloc(cap, sizeof *g->pmigr);
	g->fentries = xcalloc(cap, sizeof *g->fentries);
	g->freqs = xcalloc(cap, sizeof *g->freqs);
	g->gaps = xcalloc(cap, sizeof *g->gaps);
	g->wpref = xcalloc(cap, sizeof *g->wpref);
	g->logits = xcalloc((size_t)e->conf.max_seqs * e->n_vocab,
	    sizeof *g->logits);
	e->vgroups[i].role = (uint32_t)gs->role;
	e->vgroups[i].n_devices = gs->n_cpus > 0 ? (uint32_t)gs->n_cpus : 1;
	return (0);
}

/* Free a group's resources (its thread has exited). */
static void
group_teardown(struct engine *e, struct egroup *g)
{
	if (g->pool != NULL) {
		kv_prefix_disable(g->pool);
		e->ops->kv_pool_free(g->bi, g->pool);
	}
	if (g->bi != NULL)
		e->ops->destroy(g->bi);
	free(g->vreqs);
	free(g->pentries);
	free(g->ppreempt);
	free(g->pmigr);
	free(g->fentries);
	free(g->freqs);
	free(g->gaps);
	free(g->wpref);
	free(g->logits);
}

/* Create an engine for a loaded model and start its group loops. */
struct engine *
engine_create(struct model *m, const struct engine_config *conf,
    engine_emit_fn emitfn, void *emit_arg, char **cause)
{
	struct engine			*e;
	struct inst_metrics_config	 mc;
	struct pguard_conf		 pc;
	const char			*backend;
	int				 i;

	e = xcalloc(1, sizeof *e);
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	e->model = m;
	e->conf = *conf;
	e->name = xstrdup(conf->name);
	e->conf.name = e->name;
	e->emit = emitfn;
	e->emit_arg = emit_arg;
	e->n_vocab = model_info(m)->n_vocab;
	e->next_id = 1;
	TAILQ_INIT(&e->reqs);
	memset(&pc, 0, sizeof pc);
	pc.isolate = conf->policy_isolate;
	pc.host = conf->policy_host;
	pc.deadline_ms = conf->policy_deadline_ms;
	pc.cap = engine_policy_cap(conf);
	pguard_init(&e->policy, &pc);
	memset(&mc, 0, sizeof mc);
	inst_metrics_init(&e->metrics, e->name, now_ns(), &mc);
	wait_model_init(&e->wmodel);
	if (trace_init(&e->trace, 1U << 16, cause) != 0)
		goto fail;
	backend = conf->groups[0].backend[0] != '\0' ?
	    conf->groups[0].backend : "cpu";
	for (i = 1; i < conf->n_groups; i++) {
		if (strcmp(conf->groups[i].backend[0] != '\0' ?
		    conf->groups[i].backend : "cpu", backend) != 0) {
			set_cause(cause, "device groups of one model must all be "
			    "on the same backend");
			goto fail;
		}
	}
	if ((e->ops = backend_find(backend)) == NULL) {
		set_cause(cause, "backend %s is not built into this phased",
		    backend);
		goto fail;
	}
	if (e->conf.max_seqs > e->conf.max_batch_tokens)
		e->conf.max_seqs = e->conf.max_batch_tokens;
	e->n_groups = conf->n_groups;
	for (i = 0; i < e->n_groups; i++)
		if (group_setup(e, i, cause) != 0)
			goto fail;
	for (i = 0; i < e->n_groups; i++) {
		if (pthread_create(&e->groups[i].thread, NULL, group_main,
		    &e->groups[i]) != 0) {
			set_cause(cause, "cannot start engine thread: %s",
			    strerror(errno));
			goto fail;
		}
		e->groups[i].started = 1;
	}
	return (e);
fail:
	engine_destroy(e, "engine failed to start");
	return (NULL);
}

/* Stop every loop, finishing what is left as cancelled, and free. */
void
engine_destroy(struct engine *e, const char *why)
{
	int	i;

	/* A policy reconfigure in progress ends within its deadline. */
	while (__atomic_load_n(&e->holds, __ATOMIC_ACQUIRE) > 0)
		usleep(1000);
	elock(e);
	e->stopping = 1;
	e->stop_why = xstrdup(why);
	pthread_cond_broadcast(&e->cv);
	eunlock(e);
	for (i = 0; i < e->n_groups; i++)
		if (e->groups[i].started)
			pthread_join(e->groups[i].thread, NULL);
	/* Loops that never started leave their requests to us. */
	elock(e);
	xfers_poll(e, 1);
	reap(e, now_ns());
	eunlock(e);
	for (i = 0; i < ENGINE_MAX_GROUPS; i++)
		group_teardown(e, &e->groups[i]);
	pguard_free(&e->policy);
	inst_metrics_free(&e->metrics);
	trace_free(&e->trace);
	pthread_cond_destroy(&e->cv);
	pthread_mutex_destroy(&e->mu);
	free(e->stop_why);
	free(e->name);
	free(e);
}

/* Queue a generation; returns its id, or 0 with *err and *cause. */
uint64_t
engine_submit(struct engine *e, struct engine_gen *gen, void *owner,
    enum engine_err *err, char **cause)
{
	struct ereq	*r;
	uint64_t	 id;
	uint32_t	 i;
	int		 j;
	char		*why = NULL;

	*err = ENGINE_ERR_INVALID;
	if (gen->n_prompt == 0) {
		set_cause(cause, "prompt is empty");
		return (0);
	}
	for (i = 0; i < gen->n_prompt; i++) {
		if (gen->prompt[i] < 0 || (uint32_t)gen->prompt[i] >= e->n_vocab) {
			set_cause(cause, "prompt token %d at position %u is out "
			    "of range 0..%u", gen->prompt[i], i, e->n_vocab - 1);
			return (0);
		}
	}
	if (gen->n_prompt >= e->conf.ctx) {
		set_cause(cause, "prompt of %u tokens does not fit the context "
		    "of %u (it needs room for at least one more token)",
		    gen->n_prompt, e->conf.ctx);
		return (0);
	}
	if (gen->max_tokens == 0) {
		set_cause(cause, "max_tokens must be at least 1");
		return (0);
	}
	if (gen->priority < -1000 || gen->priority > 1000) {
		set_cause(cause, "priority %d is out of range -1000..1000",
		    (int)gen->priority);
		return (0);
	}
	if (sampler_params_check(&gen->sp, &why) != 0) {
		set_cause(cause, "%s", why);
		free(why);
		return (0);
	}
	if (gen->top_logprobs < 0 ||
	    gen->top_logprobs > SAMPLER_TOP_LOGPROBS_MAX) {
		set_cause(cause, "top_logprobs %d is out of range 0..%d",
		    gen->top_logprobs, SAMPLER_TOP_LOGPROBS_MAX);
		return (0);
	}
	r = xcalloc(1, sizeof *r);
	r->top_logprobs = -1;
	if (gen->logprobs || gen->top_logprobs > 0) {
		r->top_logprobs = gen->top_logprobs;
		r->raw_logits = xreallocarray(NULL, e->n_vocab, sizeof(float));
	}
	for (j = 0; j < gen->n_eog_ids && j < ENGINE_MAX_EOG; j++)
		r->eog_ids[r->n_eog_ids++] = gen->eog_ids[j];
	r->eog_stop = gen->eog_stop;
	r->priority = gen->priority;
	r->uid = gen->uid;
	r->weight = gen->weight != 0 ? gen->weight : 1;
	r->owner = owner;
	r->state = PHASED_REQ_WAITING;
	r->group = -1;
	r->n_prompt = r->n_tokens = r->prefill_target = gen->n_prompt;
	r->cap = gen->n_prompt + (gen->max_tokens < 4096 ? gen->max_tokens : 4096) + 1;
	r->tokens = xreallocarray(NULL, r->cap, sizeof *r->tokens);
	memcpy(r->tokens, gen->prompt, gen->n_prompt * sizeof *r->tokens);
	r->max_tokens = gen->max_tokens;
	r->sampler = sampler_create(&gen->sp, (int)e->n_vocab);
	detok_init(&r->detok, model_tokenizer(e->model));
	/* The output continues the prompt: keep the space of its first word. */
	r->detok.strip_space = 0;
	stopper_init(&r->stop, gen->stops, gen->n_stops);
	r->deadline_ns = gen->deadline_ns;
	reqtime_init(&r->timing, gen->arrival_ns, gen->n_prompt);

	elock(e);
	if (e->stopping) {
		eunlock(e);
		ereq_free(r);
		*err = ENGINE_ERR_STOPPING;
		set_cause(cause, "model is being unloaded");
		return (0);
	}
	if (e->n_waiting >= e->conf.max_waiting) {
		eunlock(e);
		ereq_free(r);
		*err = ENGINE_ERR_OVERLOADED;
		set_cause(cause, "overloaded: %u requests are waiting (limit "
		    "%u)", e->conf.max_waiting, e->conf.max_waiting);
		return (0);
	}
	/* Once unlocked, r may be finished and freed by a group loop. */
	id = r->id = e->next_id++;
	TAILQ_INSERT_TAIL(&e->reqs, r, entry);
	e->n_reqs++;
	e->n_waiting++;
	pthread_cond_broadcast(&e->cv);
	eunlock(e);
	return (id);
}

/* Ask for a request to stop; its ENGINE_EV_DONE says "cancelled". */
void
engine_cancel(struct engine *e, uint64_t id, const char *why)
{
	struct ereq	*r;

	elock(e);
	if ((r = find_req(e, id)) != NULL && !r->cancel) {
		r->cancel = 1;
		r->cancel_why = xstrdup(why);
		pthread_cond_broadcast(&e->cv);
	}
	eunlock(e);
}

/* The view and plan capacity of an engine with this configuration. */
uint32_t
engine_policy_cap(const struct engine_config *conf)
{
	return ((uint32_t)conf->max_waiting + conf->max_seqs * 2 + 16);
}

/* The configuration policies of this engine are loaded with. */
const struct pguard_conf *
engine_policy_conf(struct engine *e)
{
	return (&e->policy.conf);
}

/*
 * Make a loaded policy (NULL: the built-in fcfs) the one the next
 * iteration uses; the old one is ended there.
 */
void
engine_stage_policy(struct engine *e, struct guarded *pol)
{
	struct guarded	*old;
	struct ereq	*r;

	elock(e);
	old = pguard_stage(&e->policy, pol);
	/* The new policy hears of every live request as it arrives. */
	TAILQ_FOREACH(r, &e->reqs, entry)
		r->announced = 0;
	inst_metrics_count(&e->metrics, CNT_POLICY_SWAPS, 1);
	pthread_cond_broadcast(&e->cv);
	eunlock(e);
	pguard_discard(old);
}

/*
 * Swap the policy at an iteration boundary; on error the old one stays.
 * The new policy is loaded (in its host) with no lock held, then staged.
 */
int
engine_set_policy(struct engine *e, const char *plugindir, const char *name,
    size_t argc, char *const *argv, char **cause)
{
	struct guarded	*pol = NULL;

	if (strcmp(name, POLICY_BUILTIN) == 0) {
		if (argc != 0) {
			set_cause(cause, "policy '%s': unknown parameter "
			    "'%.*s' (this policy takes none)", name,
			    (int)strcspn(argv[0], "="), argv[0]);
			return (-1);
		}
	} else if ((pol = pguard_load(&e->policy.conf, plugindir, name, argc,
	    argv, cause)) == NULL)
		return (-1);
	engine_stage_policy(e, pol);
	return (0);
}

/* New params for the active policy when it is NAME, keeping its state. */
int
engine_reconfigure_policy(struct engine *e, const char *name, size_t argc,
    char *const *argv, char **cause)
{
	return (pguard_reconfigure(&e->policy, name, argc, argv, cause));
}

/* Keep the engine from being destroyed while a thread uses it. */
void
engine_hold(struct engine *e)
{
	__atomic_add_fetch(&e->holds, 1, __ATOMIC_ACQ_REL);
}

/* Let it go again. */
void
engine_release(struct engine *e)
{
	__atomic_sub_fetch(&e->holds, 1, __ATOMIC_ACQ_REL);
}

/* A copy of the policy's name, params and counters (never waits on it). */
void
engine_policy_info(struct engine *e, struct engine_policy_info *pi)
{
	struct pguard_stats	ps;

	pguard_stats(&e->policy, &ps);
	memset(pi, 0, sizeof *pi);
	snprintf(pi->name, sizeof pi->name, "%s", ps.name);
	snprintf(pi->params, sizeof pi->params, "%s", ps.params);
	pi->plans = ps.plans;
	pi->plan_errors = ps.plan_errors;
	pi->swaps = ps.swaps;
	pi->fallbacks = ps.fallbacks;
	snprintf(pi->last_error, sizeof pi->last_error, "%s", ps.last_error);
	snprintf(pi->ejected, sizeof pi->ejected, "%s", ps.ejected);
	elock(e);
	pi->report = e->prep;
	eunlock(e);
}

/* Round-trip percentiles of the policy calls, in ns. */
void
engine_policy_rtt(struct engine *e, uint64_t *p50, uint64_t *p99)
{
	pguard_rtt(&e->policy, p50, p99);
}

/* Live counts, for models and status. */
void
engine_counts(struct engine *e, struct engine_counts *c)
{
	int	i;

	memset(c, 0, sizeof *c);
	elock(e);
	c->waiting = e->n_waiting;
	c->running = e->n_reqs - e->n_waiting;
	c->n_groups = e->n_groups;
	for (i = 0; i < e->n_groups; i++) {
		c->kv_used[i] = kv_pool_used_blocks(e->groups[i].pool);
		c->kv_total[i] = e->groups[i].pool->n_blocks;
		c->roles[i] = e->groups[i].role;
		c->devices[i] = e->groups[i].devices;
		c->kv_bytes[i] = (uint64_t)e->groups[i].pool->block_bytes *
		    e->groups[i].pool->n_blocks;
		c->weight_bytes[i] = e->groups[i].weight_bytes;
		c->n_weight[i] = e->groups[i].n_weight;
	}
	c->block_size = e->n_groups > 0 ?
	    e->groups[0].pool->layout.block_size : 0;
	eunlock(e);
}

/* The instance's metrics (owned by the engine). */
struct inst_metrics *
engine_metrics(struct engine *e)
{
	return (&e->metrics);
}

/* The instance's trace (owned by the engine). */
struct trace *
engine_trace(struct engine *e)
{
	return (&e->trace);
}
