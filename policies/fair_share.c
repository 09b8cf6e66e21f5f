/*
 * fair_share.c: divide the machine between users by weight, so that one
 * user's batch job cannot starve another user's chat.
 *
 * A request's user is the uid the daemon saw (the control socket's peer;
 * one "network" user for HTTP over TCP) and its weight comes from the
 * daemon's configuration (user-weight in phased.conf, default 1); both are
 * in the view (ABI minor 3).
 *
 * Every iteration:
 *  - every running decode gets its token (a decode is never delayed);
 *  - sequence seats: a user is admitted a new request only while it holds
 *    fewer running requests than its seat share, max_seqs * w / W (at least
 *    one; W the weights of the users with work), unless no other user with
 *    waiting requests is below its own share.  Running requests are never
 *    preempted for fairness: a user who came late waits at most until one
 *    request of a user above its share ends, then takes that seat;
 *  - prefill tokens: up to what the TBT target leaves (automatic, or the
 *    target keys of chunked-prefill, pl_target.c) or budget=N, given in
 *    turns of `quantum` tokens (default: the limit divided by the users with
 *    prefill work, at least 16) to the user with the least virtual service,
 *    the tokens it was served (decode and prefill) divided by its weight;
 *    within a user, the most urgent priority first, then the oldest.
 * A user that returns after being idle starts at the least virtual service
 * of the active users, so idleness banks no credit.  The virtual service of
 * each user is learned state: reconfigure() keeps it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phased/policy.h>

#include "policy_lib.h"

#define FS_MAX_USERS	64

/* What the policy knows of one user. */
struct fs_user {
	uint32_t	uid;
	uint32_t	weight;
	double		vt;		/* tokens served / weight */
	uint64_t	served;		/* tokens served */
	uint64_t	seen;		/* call when last with work */
	int		used;
	/* Per call. */
	int		active;		/* has work in this view */
	uint32_t	running;	/* running requests on the group */
	uint32_t	share;		/* seat share */
	uint32_t	waiting;	/* waiting requests it may admit */
};

/* The parameters. */
struct fs_conf {
	uint32_t	budget;		/* prefill+decode tokens; 65536: target */
	int		fixed;		/* budget without target keys */
	uint32_t	quantum;	/* 0: automatic */
	struct pl_target target;
};

struct fs_state {
	struct fs_conf	conf;
	struct pl_learn	learn;
	struct fs_user	users[FS_MAX_USERS];
	uint64_t	calls;
};

/* Parse the parameters into conf; 0, or -1 with err. */
static int
fs_parse(const struct phased_policy_params *params, struct fs_conf *c,
    char *err, size_t errlen)
{
	uint64_t	n;
	size_t		i;
	int		have_budget = 0, rc;

	memset(c, 0, sizeof *c);
	c->budget = 65536;
	pl_target_init(&c->target);
	for (i = 0; i < params->n; i++) {
		const struct phased_param *kv = &params->v[i];

		if ((rc = pl_param_target(kv, &c->target, err, errlen)) == -1)
			return (-1);
		if (rc == 1)
			continue;
		if (strcmp(kv->key, "budget") == 0) {
			if (pl_param_uint(kv, 16, 65536, &n, err, errlen) != 0)
				return (-1);
			c->budget = (uint32_t)n;
			have_budget = 1;
		} else if (strcmp(kv->key, "quantum") == 0) {
			if (pl_param_uint(kv, 1, 65536, &n, err, errlen) != 0)
				return (-1);
			c->quantum = (uint32_t)n;
		} else {
			pl_param_unknown(kv, "budget, quantum, " PL_TARGET_KEYS,
			    err, errlen);
			return (-1);
		}
	}
	c->fixed = have_budget && !c->target.given;
	return (pl_target_check(&c->target, err, errlen));
}

/* Parse the parameters, allocate state. */
static int
fs_init(const struct phased_policy_params *params, void **state, char *err,
    size_t errlen)
{
	struct fs_state	*s;

	if ((s = calloc(1, sizeof *s)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return (-1);
	}
	if (fs_parse(params, &s->conf, err, errlen) != 0) {
		free(s);
		return (-1);
	}
	*state = s;
	return (0);
}

/* New parameters; the users' accounts and the learned times stay. */
static int
fs_reconfigure(void *state, const struct phased_policy_params *params,
    char *err, size_t errlen)
{
	struct fs_state	*s = state;
	struct fs_conf	 c;

	if (fs_parse(params, &c, err, errlen) != 0)
		return (-1);
	s->conf = c;
	return (0);
}

/* The account of uid, made (or recycled, least recently seen) on demand. */
static struct fs_user *
fs_user(struct fs_state *s, uint32_t uid)
{
	struct fs_user	*u, *old = NULL;
	int		 i;

	for (i = 0; i < FS_MAX_USERS; i++) {
		u = &s->users[i];
		if (u->used && u->uid == uid)
			return (u);
		if (!u->used) {
			if (old == NULL || old->used)
				old = u;
		} else if (old == NULL || (old->used && u->seen < old->seen))
			old = u;
	}
	memset(old, 0, sizeof *old);
	old->used = 1;
	old->uid = uid;
	old->weight = 1;
	return (old);
}

/* Charge n tokens to a user. */
static void
fs_charge(struct fs_user *u, uint32_t n)
{
	u->served += n;
	u->vt += (double)n / u->weight;
}

/* Whether a request is prefill work this iteration may plan. */
static int
fs_prefill_work(const struct phased_view *v, const struct pl_budget *b,
    uint32_t i)
{
	const struct phased_request	*r = &v->reqs[i];

	if (phased_req_remaining(r) == 0)
		return (0);
	if (r->state == PHASED_REQ_PREFILLING)
		return (r->group == v->group && i < b->cut);
	return (r->state == PHASED_REQ_WAITING &&
	    r->group == PHASED_GROUP_NONE && !b->no_admit);
}

/*
 * Take the view's users into their accounts: who has work, seats held,
 * seat shares; returns the index in users[] of each request (in idx).
 */
static void
fs_census(struct fs_state *s, const struct phased_view *v,
    const struct pl_budget *b, int *idx)
{
	struct fs_user	*u;
	uint64_t	 wsum = 0;
	double		 minvt = -1;
	uint32_t	 i;
	int		 k;

	for (k = 0; k < FS_MAX_USERS; k++) {
		s->users[k].active = 0;
		s->users[k].running = s->users[k].waiting = 0;
	}
	for (i = 0; i < v->n_reqs; i++) {
		const struct phased_request *r = &v->reqs[i];

		idx[i] = -1;
		if (r->state == PHASED_REQ_FINISHED)
			continue;
		if (!phased_req_running_on(r, v->group) &&
		    !(r->state == PHASED_REQ_WAITING &&
		    r->group == PHASED_GROUP_NONE))
			continue;
		u = fs_user(s, v->abi_minor >= 3 ? r->uid : 0);
		idx[i] = (int)(u - s->users);
		u->weight = v->abi_minor >= 3 && r->weight != 0 ? r->weight : 1;
		/* New or back from idle: placed at the least service below. */
		if (!u->active && (u->seen == 0 || u->seen + 1 < s->calls))
			u->vt = -1;
		u->active = 1;
		u->seen = s->calls;
		if (phased_req_running_on(r, v->group) && i < b->cut)
			u->running++;
		else if (r->state == PHASED_REQ_WAITING)
			u->waiting++;
	}
	for (k = 0; k < FS_MAX_USERS; k++) {
		u = &s->users[k];
		if (!u->used || !u->active)
			continue;
		wsum += u->weight;
		if (u->vt >= 0 && (minvt < 0 || u->vt < minvt))
			minvt = u->vt;
	}
	for (k = 0; k < FS_MAX_USERS; k++) {
		u = &s->users[k];
		if (!u->used || !u->active)
			continue;
		if (u->vt < 0)
			u->vt = minvt < 0 ? 0 : minvt;
		u->share = wsum == 0 ? v->max_seqs :
		    (uint32_t)((uint64_t)v->max_seqs * u->weight / wsum);
		if (u->share == 0)
			u->share = 1;
	}
}

/* Whether user k may be admitted a new request now (seat shares). */
static int
fs_may_admit(const struct fs_state *s, int k)
{
	const struct fs_user	*u = &s->users[k];
	int			 j;

	if (u->running < u->share)
		return (1);
	for (j = 0; j < FS_MAX_USERS; j++) {
		const struct fs_user *o = &s->users[j];

		if (j != k && o->used && o->active && o->waiting > 0 &&
		    o->running < o->share)
			return (0);
	}
	return (1);
}

/* Largest n <= want whose KV fits in the blocks left. */
static uint32_t
fs_fit_kv(const struct phased_view *v, const struct phased_request *r,
    uint32_t want, uint64_t blocks)
{
	uint64_t	cap;

	cap = ((uint64_t)r->kv_blocks + blocks) * v->block_size;
	if (cap <= r->kv_tokens)
		return (0);
	cap -= r->kv_tokens;
	return (cap < want ? (uint32_t)cap : want);
}

/*
 * The next request of user k to prefill: most urgent priority, then
 * oldest; -1 when it has none left.
 */
static int
fs_next(const struct phased_view *v, const struct pl_budget *b,
    const int *idx, const char *done, int k)
{
	uint32_t	i;
	int		best = -1;

	for (i = 0; i < v->n_reqs; i++) {
		if (idx[i] != k || done[i] || !fs_prefill_work(v, b, i))
			continue;
		if (best < 0 || v->reqs[i].priority < v->reqs[best].priority)
			best = (int)i;
	}
	return (best);
}

/* Decodes, then prefill turns to the users with the least service. */
static int
fs_schedule(void *state, const struct phased_view *v, struct phased_plan *p)
{
	struct fs_state		*s = state;
	struct pl_budget	 b;
	struct pl_chunk		 ch;
	const struct phased_request *r;
	int			*idx;
	char			*done, *udone;
	uint32_t		 i, e, limit, left, quantum, n, rem, need, whole;
	uint32_t		 nusers = 0;
	int64_t			 slack;
	int			 k, best, ri;

	s->calls++;
	pl_learn_update(&s->learn, v);
	pl_budget_init(&b, v);
	pl_decodes(v, p, &b);
	if ((idx = calloc(v->n_reqs + 1, sizeof *idx)) == NULL ||
	    (done = calloc(v->n_reqs + 1, 1)) == NULL) {
		free(idx);
		return (-1);
	}
	fs_census(s, v, &b, idx);
	/* Decodes are service too. */
	for (e = 0; e < p->n_entries; e++)
		for (i = 0; i < v->n_reqs; i++)
			if (v->reqs[i].id == p->entries[e].id && idx[i] >= 0) {
				fs_charge(&s->users[idx[i]], 1);
				done[i] = 1;
			}

	limit = s->conf.budget > b.decodes ? s->conf.budget - b.decodes : 0;
	memset(&ch, 0, sizeof ch);
	ch.chunk = limit;
	if (!s->conf.fixed) {
		pl_target_chunk(&s->conf.target, &s->learn, v, b.decodes, &ch);
		if (ch.chunk < limit)
			limit = ch.chunk;
	}
	if (!pl_can_prefill(v) || v->block_size == 0)
		limit = 0;

	/* Blocks not promised to the prompts being prefilled (pl_prefill). */
	slack = (int64_t)b.blocks;
	for (i = 0; i < b.cut; i++) {
		r = &v->reqs[i];
		if (r->state == PHASED_REQ_PREFILLING && r->group == v->group)
			slack -= phased_blocks_needed(v, r,
			    phased_req_remaining(r));
	}
	udone = calloc(FS_MAX_USERS, 1);
	for (k = 0; k < FS_MAX_USERS; k++)
		if (s->users[k].used && s->users[k].active &&
		    fs_next(v, &b, idx, done, k) >= 0)
			nusers++;
	quantum = s->conf.quantum;
	if (quantum == 0)
		quantum = nusers > 1 ? limit / nusers : limit;
	if (quantum < 16)
		quantum = 16;
	left = limit;
	while (udone != NULL && left > 0 && b.tokens > 0 && b.seqs > 0) {
		best = -1;
		for (k = 0; k < FS_MAX_USERS; k++) {
			if (!s->users[k].used || !s->users[k].active ||
			    udone[k])
				continue;
			if (best < 0 || s->users[k].vt < s->users[best].vt)
				best = k;
		}
		if (best < 0)
			break;
		if ((ri = fs_next(v, &b, idx, done, best)) < 0) {
			udone[best] = 1;
			continue;
		}
		r = &v->reqs[ri];
		done[ri] = 1;
		if (r->state == PHASED_REQ_WAITING && !fs_may_admit(s, best))
			continue;
		rem = phased_req_remaining(r);
		n = rem < quantum ? rem : quantum;
		if (n > left)
			n = left;
		if (n > b.tokens)
			n = b.tokens;
		whole = phased_blocks_needed(v, r, rem);
		if (r->state == PHASED_REQ_WAITING && whole > slack)
			continue;	/* its whole prompt could not be held */
		need = phased_blocks_needed(v, r, n);
		if (need > b.blocks) {
			if ((n = fs_fit_kv(v, r, n, b.blocks)) == 0)
				continue;
			need = phased_blocks_needed(v, r, n);
		}
		if (phased_plan_add(p, v, r->id, n) != 0)
			break;
		b.blocks -= need;
		b.tokens -= n;
		b.seqs--;
		b.prefill += n;
		left -= n;
		if (r->state == PHASED_REQ_WAITING) {
			slack -= whole;
			s->users[best].running++;
			if (s->users[best].waiting > 0)
				s->users[best].waiting--;
		}
		fs_charge(&s->users[best], n);
	}
	free(udone);
	free(idx);
	free(done);
	pl_target_report(&s->learn, v, &ch, b.prefill, b.decodes, p);
	return (0);
}

/* Free the state. */
static void
fs_fini(void *state)
{
	free(state);
}

const struct phased_policy phased_policy_entry = {
	.magic = PHASED_POLICY_MAGIC,
	.abi_version = PHASED_POLICY_ABI_VERSION,
	.struct_size = sizeof(struct phased_policy),
	.name = "fair-share",
	.describe = "divides sequence seats and prefill tokens between users "
	    "by their weights (user-weight in phased.conf)",
	.params_help = "quantum=N budget=N tbt_p99_ms=T ttft_ms=T tbt_factor=F "
	    "min_chunk=N max_chunk=N",
	.init = fs_init,
	.schedule = fs_schedule,
	.fini = fs_fini,
	.reconfigure = fs_reconfigure,
};
