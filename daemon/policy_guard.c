/*
 * policy_guard.c: run a model instance's policy in a policy host process
 * (phased-policy-host), with a deadline on every call and the built-in
 * fcfs as the fallback.
 *
 * Why a process started with posix_spawn (fork+exec) rather than a bare
 * fork: the daemon is multi-threaded when a policy is set, and a forked
 * copy would inherit locks held by other threads, the model's memory and
 * every descriptor; an exec'd helper starts clean and small.  The plan
 * comes back through shared memory (policy_chan.h) with eventfd wake-ups;
 * the wait also polls a pidfd, so a crash is seen at once and a hang at
 * the deadline.  Whatever the host writes is copied out of the mapping,
 * bounds-checked and validated against the daemon's own view before use.
 */
#include "config.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "policy_guard.h"
#include "util.h"

extern char	**environ;

/* A loaded policy: in-process, or held by a host process. */
struct guarded {
	char			*name;
	char			*params;
	struct policy		*inproc;
	pid_t			 pid;		/* -1 once reaped */
	int			 pidfd;
	int			 tohost, todaemon;
	struct pchan_hdr	*hdr;
	size_t			 size;
	uint32_t		 cap;
	int			 swapped_in;
	char			 why[160];	/* why the host failed */
};

/* Describe how a reaped host ended. */
static void
host_status(struct guarded *p, int st)
{
	int	sig;

	if (WIFSIGNALED(st)) {
		sig = WTERMSIG(st);
		snprintf(p->why, sizeof p->why, "killed by signal %d (%s)",
		    sig, sig == SIGSYS ? "a forbidden system call" :
		    strsignal(sig));
	} else
		snprintf(p->why, sizeof p->why, "exited with status %d",
		    WEXITSTATUS(st));
}

/* Kill and reap a host, close its channel. */
static void
host_end(struct guarded *p)
{
	int	st;

	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		while (waitpid(p->pid, &st, 0) == -1 && errno == EINTR)
			;
		p->pid = -1;
	}
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->tohost >= 0)
		close(p->tohost);
	if (p->todaemon >= 0)
		close(p->todaemon);
	p->pidfd = p->tohost = p->todaemon = -1;
	if (p->hdr != NULL)
		munmap(p->hdr, p->size);
	p->hdr = NULL;
}

/* Start a host for NAME with a channel of capacity cap. */
static struct guarded *
host_start(const char *host, const char *plugindir, const char *name,
    uint32_t cap, char **cause)
{
	posix_spawn_file_actions_t	 fa;
	posix_spawnattr_t		 at;
	struct guarded			*p;
	sigset_t			 none, all;
	char				 ppid[32], *argv[5];
	int				 memfd, fds[3], i, rc;

	p = xcalloc(1, sizeof *p);
	p->pid = -1;
	p->pidfd = p->tohost = p->todaemon = -1;
	p->cap = cap;
	p->size = pchan_size(cap);
	memfd = memfd_create("phased-policy", MFD_CLOEXEC);
	p->tohost = eventfd(0, EFD_CLOEXEC);
	p->todaemon = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (memfd == -1 || p->tohost == -1 || p->todaemon == -1 ||
	    ftruncate(memfd, (off_t)p->size) == -1 ||
	    (p->hdr = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED,
	    memfd, 0)) == MAP_FAILED) {
		set_cause(cause, "policy '%s': cannot set up the policy "
		    "host's channel: %s", name, strerror(errno));
		p->hdr = NULL;
		goto fail;
	}
	p->hdr->magic = PCHAN_MAGIC;
	p->hdr->cap = cap;
	/* Out of the way of 3..5, so the dup2 below cannot clobber them. */
	fds[0] = fcntl(memfd, F_DUPFD_CLOEXEC, 10);
	fds[1] = fcntl(p->tohost, F_DUPFD_CLOEXEC, 10);
	fds[2] = fcntl(p->todaemon, F_DUPFD_CLOEXEC, 10);
	close(memfd);
	memfd = -1;
	snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
	argv[0] = (char *)"phased-policy-host";
	argv[1] = (char *)plugindir;
	argv[2] = (char *)name;
	argv[3] = ppid;
	argv[4] = NULL;
	posix_spawn_file_actions_init(&fa);
	for (i = 0; i < 3; i++)
		posix_spawn_file_actions_adddup2(&fa, fds[i], PCHAN_FD_MEM + i);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
	    POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawn(&p->pid, host, &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	for (i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (rc != 0) {
		p->pid = -1;
		set_cause(cause, "policy '%s': cannot start the policy host "
		    "%s: %s", name, host, strerror(rc));
		goto fail;
	}
#ifdef SYS_pidfd_open
	p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
#endif
	return (p);
fail:
	if (memfd >= 0)
		close(memfd);
	host_end(p);
	free(p);
	return (NULL);
}

/*
 * One call into the host: op, wake it, wait for its answer until the
 * deadline.  0, or -1 with p->why (and the host ended).
 */
static int
host_call(struct guarded *p, uint32_t op, uint32_t deadline_ms)
{
	struct pollfd	 pfd[2];
	struct timespec	 ts;
	uint64_t	 one = 1, v, seq, end, now;
	int		 n, r, st;

	if (p->pid <= 0)
		return (-1);
	p->hdr->op = op;
	seq = ++p->hdr->seq;
	if (write(p->tohost, &one, sizeof one) != sizeof one) {
		snprintf(p->why, sizeof p->why, "its channel failed: %s",
		    strerror(errno));
		host_end(p);
		return (-1);
	}
	end = now_ns() + (uint64_t)deadline_ms * 1000000ULL;
	for (;;) {
		now = now_ns();
		if (now >= end)
			break;
		ts.tv_sec = (time_t)((end - now) / 1000000000ULL);
		ts.tv_nsec = (long)((end - now) % 1000000000ULL);
		pfd[0].fd = p->todaemon;
		pfd[0].events = POLLIN;
		pfd[1].fd = p->pidfd;
		pfd[1].events = POLLIN;
		n = p->pidfd >= 0 ? 2 : 1;
		pfd[0].revents = pfd[1].revents = 0;
		r = ppoll(pfd, (nfds_t)n, &ts, NULL);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1)
			break;
		if (pfd[0].revents & POLLIN) {
			if (read(p->todaemon, &v, sizeof v) == sizeof v &&
			    __atomic_load_n(&p->hdr->ack, __ATOMIC_ACQUIRE) ==
			    seq)
				return (0);
			continue;
		}
		if (n == 2 && pfd[1].revents != 0)
			goto dead;
	}
	/* A host that died without a pidfd to tell us shows up here. */
	if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
		p->pid = -1;
		host_status(p, st);
		host_end(p);
		return (-1);
	}
	snprintf(p->why, sizeof p->why, "timed out after %u ms", deadline_ms);
	host_end(p);
	return (-1);
dead:
	while ((r = waitpid(p->pid, &st, 0)) == -1 && errno == EINTR)
		;
	if (r == p->pid) {
		p->pid = -1;
		host_status(p, st);
	} else
		snprintf(p->why, sizeof p->why, "its process is gone");
	host_end(p);
	return (-1);
}

/* A copy of a host's message with anything unprintable replaced. */
static void
host_text(char *dst, size_t len, const char *src, size_t srclen)
{
	size_t	i;

	for (i = 0; i + 1 < len && i < srclen && src[i] != '\0'; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
	dst[i] = '\0';
}

/* Join key=value params for display. */
static char *
join_params(size_t argc, char *const *argv)
{
	size_t	 i, len = 1, off = 0;
	char	*s;

	for (i = 0; i < argc; i++)
		len += strlen(argv[i]) + 1;
	s = xcalloc(1, len);
	for (i = 0; i < argc; i++)
		off += snprintf(s + off, len - off, "%s%s", i != 0 ? " " : "",
		    argv[i]);
	return (s);
}

/* End a policy: swap-out and fini (bounded), then unload or kill. */
static void
guarded_free(struct guarded *p)
{
	if (p == NULL)
		return;
	if (p->inproc != NULL) {
		if (p->swapped_in && p->inproc->ops->on_swap_out != NULL)
			p->inproc->ops->on_swap_out(p->inproc->state);
		policy_close(p->inproc);
	} else if (p->pid > 0) {
		host_call(p, PCHAN_OP_FINI, 100);
		host_end(p);
	} else
		host_end(p);
	free(p->name);
	free(p->params);
	free(p);
}

/* Set up a guard on the built-in fcfs. */
void
pguard_init(struct policy_guard *g, const struct pguard_conf *conf)
{
	memset(g, 0, sizeof *g);
	pthread_mutex_init(&g->mu, NULL);
	pthread_mutex_init(&g->call_mu, NULL);
	g->conf = *conf;
	g->conf.host = conf->host != NULL ? xstrdup(conf->host) : NULL;
	if (g->conf.deadline_ms > PGUARD_MAX_DEADLINE_MS)
		g->conf.deadline_ms = PGUARD_MAX_DEADLINE_MS;
}

/* End the policies and free everything. */
void
pguard_free(struct policy_guard *g)
{
	guarded_free(g->active);
	guarded_free(g->pending);
	free(g->evq);
	free((char *)g->conf.host);
	pthread_mutex_destroy(&g->mu);
	pthread_mutex_destroy(&g->call_mu);
	memset(g, 0, sizeof *g);
}

/* Load and init a policy in a host, or in-process without isolation. */
struct guarded *
pguard_load(const struct pguard_conf *conf, const char *plugindir,
    const char *name, size_t argc, char *const *argv, char **cause)
{
	struct guarded	*p;
	char		 msg[POLICY_ERRLEN];
	size_t		 i, off = 0, len;

	if (policy_name_valid(name, cause) != 0)
		return (NULL);
	if (!conf->isolate) {
		struct policy *pol;

		if ((pol = policy_open(plugindir, name, argc, argv,
		    cause)) == NULL)
			return (NULL);
		p = xcalloc(1, sizeof *p);
		p->inproc = pol;
		p->pid = -1;
		p->pidfd = p->tohost = p->todaemon = -1;
		p->name = xstrdup(name);
		p->params = join_params(argc, argv);
		return (p);
	}
	if ((p = host_start(conf->host, plugindir, name, conf->cap,
	    cause)) == NULL)
		return (NULL);
	for (i = 0; i < argc; i++) {
		len = strlen(argv[i]) + 1;
		if (off + len > sizeof p->hdr->text) {
			set_cause(cause, "policy '%s': parameters longer than "
			    "%zu bytes", name, sizeof p->hdr->text);
			goto fail;
		}
		memcpy(p->hdr->text + off, argv[i], len);
		off += len;
	}
	p->hdr->n_events = (uint32_t)argc;
	if (host_call(p, PCHAN_OP_INIT, PGUARD_MAX_DEADLINE_MS) != 0) {
		set_cause(cause, "policy '%s': its policy host failed while "
		    "loading it: %s", name, p->why);
		goto fail;
	}
	if (p->hdr->status != 0) {
		host_text(msg, sizeof msg, p->hdr->err, sizeof p->hdr->err);
		/* The loader's messages already name the policy. */
		set_cause(cause, "%s", msg[0] != '\0' ? msg : "init failed");
		goto fail;
	}
	p->name = xstrdup(name);
	p->params = join_params(argc, argv);
	return (p);
fail:
	host_end(p);
	free(p);
	return (NULL);
}

/* End a policy that was staged and replaced before it ran. */
void
pguard_discard(struct guarded *p)
{
	guarded_free(p);
}

/* Stage a loaded policy (NULL: builtin); returns one it replaced. */
struct guarded *
pguard_stage(struct policy_guard *g, struct guarded *p)
{
	struct guarded	*old;

	pthread_mutex_lock(&g->mu);
	old = g->pending;
	g->pending = p;
	g->pending_set = 1;
	g->ejected[0] = '\0';
	g->gen++;
	g->n_evq = 0;
	g->swaps++;
	pthread_mutex_unlock(&g->mu);
	log_info("policy %s%s%s active", p != NULL ? p->name : POLICY_BUILTIN,
	    p != NULL && p->params[0] != '\0' ? " " : "",
	    p != NULL ? p->params : "");
	return (old);
}

/* Queue a notification for the policy (engine lock held). */
void
pguard_event(struct policy_guard *g, uint32_t kind,
    const struct phased_request *r)
{
	pthread_mutex_lock(&g->mu);
	if ((g->active != NULL && !g->pending_set) || g->pending != NULL) {
		if (g->n_evq == g->cap_evq) {
			g->cap_evq = g->cap_evq != 0 ? g->cap_evq * 2 : 64;
			g->evq = xreallocarray(g->evq, g->cap_evq,
			    sizeof *g->evq);
		}
		memset(&g->evq[g->n_evq], 0, sizeof g->evq[g->n_evq]);
		g->evq[g->n_evq].kind = kind;
		g->evq[g->n_evq].req = *r;
		g->n_evq++;
	}
	pthread_mutex_unlock(&g->mu);
}

/* Take the queued notifications and the generation they belong to. */
uint64_t
pguard_take(struct policy_guard *g, struct pchan_event **evs, size_t *n)
{
	uint64_t	gen;

	pthread_mutex_lock(&g->mu);
	*evs = g->evq;
	*n = g->n_evq;
	g->evq = NULL;
	g->n_evq = g->cap_evq = 0;
	gen = g->gen;
	pthread_mutex_unlock(&g->mu);
	return (gen);
}

/* The deadline of one call: configured, or from the recent iterations. */
static uint32_t
call_deadline(struct policy_guard *g, const struct phased_view *v)
{
	uint64_t	worst = 0;
	uint32_t	i, ms;

	if (g->conf.deadline_ms != 0)
		return (g->conf.deadline_ms);
	for (i = v->n_hist > 8 ? v->n_hist - 8 : 0; i < v->n_hist; i++)
		if (v->hist[i].duration_ns > worst)
			worst = v->hist[i].duration_ns;
	ms = (uint32_t)(worst * PGUARD_DEADLINE_FACTOR / 1000000ULL);
	if (ms < PGUARD_MIN_DEADLINE_MS)
		ms = PGUARD_MIN_DEADLINE_MS;
	if (ms > PGUARD_MAX_DEADLINE_MS)
		ms = PGUARD_MAX_DEADLINE_MS;
	return (ms);
}

/* Ship notifications to a host, in channel-sized batches. */
static int
ship_events(struct guarded *p, const struct pchan_event *ev, size_t n,
    size_t *shipped, uint32_t deadline_ms)
{
	size_t	k;

	while (n - *shipped > PCHAN_MAX_EVENTS) {
		k = PCHAN_MAX_EVENTS;
		memcpy(p->hdr->events, ev + *shipped, k * sizeof *ev);
		p->hdr->n_events = (uint32_t)k;
		if (host_call(p, PCHAN_OP_EVENTS, deadline_ms) != 0)
			return (-1);
		*shipped += k;
	}
	k = n - *shipped;
	if (k != 0)
		memcpy(p->hdr->events, ev + *shipped, k * sizeof *ev);
	p->hdr->n_events = (uint32_t)k;
	*shipped += k;
	return (0);
}

/*
 * Ask a host for a plan: write the view, call, copy the counts and arrays
 * out of the mapping into the daemon's plan.  0; -1 with p->why when the
 * host failed (ended); 1 with err when its answer is unusable.
 */
static int
host_schedule(struct guarded *p, const struct phased_view *v,
    struct phased_plan *plan, const struct pchan_event *ev, size_t nev,
    uint32_t deadline_ms, char *err, size_t errlen)
{
	struct pchan_hdr	*h = p->hdr;
	char			*base = (char *)h;
	uint32_t		 ne, np, nm, cap = p->cap;
	size_t			 shipped = 0;

	if (ship_events(p, ev, nev, &shipped, deadline_ms) != 0)
		return (-1);
	h->view = *v;
	h->view.groups = NULL;
	h->view.reqs = NULL;
	h->view.hist = NULL;
	h->view.n_groups = v->n_groups < PCHAN_MAX_GROUPS ? v->n_groups :
	    PCHAN_MAX_GROUPS;
	h->view.n_hist = v->n_hist < PCHAN_MAX_HIST ? v->n_hist :
	    PCHAN_MAX_HIST;
	h->view.n_reqs = v->n_reqs < cap ? v->n_reqs : cap;
	memcpy(h->groups, v->groups, h->view.n_groups * sizeof *v->groups);
	memcpy(h->hist, v->hist, h->view.n_hist * sizeof *v->hist);
	memcpy(base + pchan_off_reqs(), v->reqs,
	    h->view.n_reqs * sizeof *v->reqs);
	h->swap_in = 1;
	h->n_entries = h->n_preempt = h->n_migrations = 0;
	h->chunk_tokens = h->notices = h->flags = 0;
	h->predicted_ns = h->target_ns = 0;
	if (host_call(p, PCHAN_OP_SCHEDULE, deadline_ms) != 0)
		return (-1);
	/* Read every count once: the host may still be writing. */
	ne = __atomic_load_n(&h->n_entries, __ATOMIC_RELAXED);
	np = __atomic_load_n(&h->n_preempt, __ATOMIC_RELAXED);
	nm = __atomic_load_n(&h->n_migrations, __ATOMIC_RELAXED);
	if (h->status != 0) {
		host_text(err, errlen, h->err, sizeof h->err);
		if (err[0] == '\0')
			snprintf(err, errlen, "schedule returned an error");
		return (1);
	}
	if (h->replaced) {
		snprintf(err, errlen, "plan arrays or capacities were replaced");
		return (1);
	}
	if (ne > cap || np > cap || nm > cap || ne > plan->cap_entries ||
	    np > plan->cap_preempt || nm > plan->cap_migrations) {
		snprintf(err, errlen, "plan claims %u entries, %u preemptions "
		    "and %u migrations, more than the capacity %u", ne, np, nm,
		    cap);
		return (1);
	}
	memcpy(plan->entries, base + pchan_off_entries(cap),
	    ne * sizeof *plan->entries);
	memcpy(plan->preempt, base + pchan_off_preempt(cap),
	    np * sizeof *plan->preempt);
	memcpy(plan->migrations, base + pchan_off_migr(cap),
	    nm * sizeof *plan->migrations);
	plan->n_entries = ne;
	plan->n_preempt = np;
	plan->n_migrations = nm;
	/* Figures for display only: nothing is computed from them. */
	plan->chunk_tokens = h->chunk_tokens;
	plan->notices = h->notices;
	plan->predicted_ns = h->predicted_ns;
	plan->target_ns = h->target_ns;
	plan->flags = h->flags;
	return (0);
}

/* Ask an in-process policy for a plan; 0, or 1 with err. */
static int
inproc_schedule(struct guarded *p, const struct phased_view *v,
    struct phased_plan *plan, const struct pchan_event *ev, size_t nev,
    char *err, size_t errlen)
{
	const struct phased_policy	*ops = p->inproc->ops;
	struct phased_plan		 saved = *plan;
	void				*st = p->inproc->state;
	size_t				 i;

	for (i = 0; i < nev; i++) {
		if (ev[i].kind == PCHAN_EV_ARRIVAL && ops->on_arrival != NULL)
			ops->on_arrival(st, &ev[i].req);
		else if (ev[i].kind == PCHAN_EV_FINISH && ops->on_finish != NULL)
			ops->on_finish(st, &ev[i].req);
	}
	if (!p->swapped_in) {
		p->swapped_in = 1;
		if (ops->on_swap_in != NULL)
			ops->on_swap_in(st, v);
	}
	if (ops->schedule(st, v, plan) != 0) {
		snprintf(err, errlen, "schedule returned an error");
		return (1);
	}
	if (plan->entries != saved.entries || plan->preempt != saved.preempt ||
	    plan->migrations != saved.migrations ||
	    plan->cap_entries != saved.cap_entries ||
	    plan->cap_preempt != saved.cap_preempt ||
	    plan->cap_migrations != saved.cap_migrations) {
		snprintf(err, errlen, "plan arrays or capacities were replaced");
		*plan = saved;
		return (1);
	}
	return (0);
}

/* Record a round trip. */
static void
note_rtt(struct policy_guard *g, uint64_t ns)
{
	g->rtt[g->n_rtt % PGUARD_RTT_SAMPLES] = ns;
	g->n_rtt++;
}

/* End the active policy with a reason.  call_mu held. */
static void
eject(struct policy_guard *g, const char *fmt, const char *why)
{
	struct guarded	*p = g->active;

	pthread_mutex_lock(&g->mu);
	snprintf(g->ejected, sizeof g->ejected, fmt, p->name, why);
	g->ejections++;
	g->consecutive = 0;
	g->active = NULL;
	pthread_mutex_unlock(&g->mu);
	log_warnx("%s; built-in fcfs takes over", g->ejected);
	guarded_free(p);
}

/*
 * Plan one iteration.  Installs a staged policy first (when the view was
 * taken after the swap); asks the policy within the deadline; validates
 * its plan; falls back to fcfs.  A host that fails (late, crashed, gone)
 * and POLICY_MAX_ERRORS invalid plans in a row end the policy.
 */
enum pguard_outcome
pguard_schedule(struct policy_guard *g, const struct phased_view *v,
    struct phased_plan *p, const struct pchan_event *ev, size_t nev,
    uint64_t gen)
{
	struct phased_plan	 saved = *p;
	struct guarded		*old = NULL, *pol;
	enum pguard_outcome	 out = PGUARD_FALLBACK;
	char			 err[POLICY_ERRLEN];
	uint64_t		 t0;
	uint32_t		 dl;
	int			 rc;

	pthread_mutex_lock(&g->call_mu);
	pthread_mutex_lock(&g->mu);
	if (g->pending_set && gen >= g->gen) {
		old = g->active;
		g->active = g->pending;
		g->active_gen = g->gen;
		g->pending = NULL;
		g->pending_set = 0;
		g->consecutive = 0;
	}
	pol = g->active;
	pthread_mutex_unlock(&g->mu);
	guarded_free(old);
	plan_clear(p);
	/* A view from before the last swap is planned by fcfs. */
	if (pol == NULL || g->active_gen != gen)
		goto fallback;

	dl = call_deadline(g, v);
	t0 = now_ns();
	if (pol->inproc != NULL)
		rc = inproc_schedule(pol, v, p, ev, nev, err, sizeof err);
	else
		rc = host_schedule(pol, v, p, ev, nev, dl, err, sizeof err);
	pthread_mutex_lock(&g->mu);
	g->plans++;
	pthread_mutex_unlock(&g->mu);
	if (rc == -1) {
		pthread_mutex_lock(&g->mu);
		if (strncmp(pol->why, "timed out", 9) == 0)
			g->timeouts++;
		else
			g->crashes++;
		pthread_mutex_unlock(&g->mu);
		eject(g, "ejected: policy '%s' %s", pol->why);
		*p = saved;
		plan_clear(p);
		out = PGUARD_EJECTED;
		goto fallback;
	}
	note_rtt(g, now_ns() - t0);
	if (rc == 0 && plan_validate(v, p, err, sizeof err) == 0) {
		pthread_mutex_lock(&g->mu);
		g->consecutive = 0;
		pthread_mutex_unlock(&g->mu);
		pthread_mutex_unlock(&g->call_mu);
		return (PGUARD_POLICY);
	}
	*p = saved;
	plan_clear(p);
	pthread_mutex_lock(&g->mu);
	g->plan_errors++;
	g->consecutive++;
	snprintf(g->last_error, sizeof g->last_error, "%s", err);
	rc = g->consecutive >= POLICY_MAX_ERRORS;
	pthread_mutex_unlock(&g->mu);
	log_debug("policy %s: invalid plan: %s", pol->name, err);
	out = PGUARD_INVALID;
	if (rc) {
		char why[POLICY_ERRLEN + 64];

		snprintf(why, sizeof why, "made %u invalid plans in a row, "
		    "last: %s", POLICY_MAX_ERRORS, err);
		eject(g, "ejected: policy '%s' %s", why);
		out = PGUARD_EJECTED;
	}
fallback:
	plan_fcfs(v, p);
	pthread_mutex_lock(&g->mu);
	g->fallbacks++;
	pthread_mutex_unlock(&g->mu);
	pthread_mutex_unlock(&g->call_mu);
	return (out);
}

/*
 * New params for the active policy, between two of its calls (call_mu),
 * so the plugin never sees a reconfigure during a schedule.
 */
int
pguard_reconfigure(struct policy_guard *g, const char *name, size_t argc,
    char *const *argv, char **cause)
{
	struct guarded	*p;
	char		 msg[POLICY_ERRLEN], *params;
	size_t		 i, off = 0, len;
	int		 rc;

	pthread_mutex_lock(&g->call_mu);
	pthread_mutex_lock(&g->mu);
	p = g->pending_set ? NULL : g->active;
	pthread_mutex_unlock(&g->mu);
	if (p == NULL || strcmp(p->name, name) != 0) {
		pthread_mutex_unlock(&g->call_mu);
		return (1);
	}
	if (p->inproc != NULL) {
		rc = policy_reconfigure(p->inproc, argc, argv, cause);
		goto done;
	}
	for (i = 0; i < argc; i++) {
		len = strlen(argv[i]) + 1;
		if (off + len > sizeof p->hdr->text) {
			set_cause(cause, "policy '%s': parameters longer than "
			    "%zu bytes", name, sizeof p->hdr->text);
			pthread_mutex_unlock(&g->call_mu);
			return (-1);
		}
		memcpy(p->hdr->text + off, argv[i], len);
		off += len;
	}
	p->hdr->n_events = (uint32_t)argc;
	if (host_call(p, PCHAN_OP_RECONFIGURE, PGUARD_MAX_DEADLINE_MS) != 0) {
		set_cause(cause, "policy '%s': its policy host failed while "
		    "reconfiguring it: %s", name, p->why);
		pthread_mutex_lock(&g->mu);
		g->crashes++;
		pthread_mutex_unlock(&g->mu);
		eject(g, "ejected: policy '%s' %s", p->why);
		pthread_mutex_unlock(&g->call_mu);
		return (-1);
	}
	rc = p->hdr->status;
	if (rc == -1) {
		host_text(msg, sizeof msg, p->hdr->err, sizeof p->hdr->err);
		set_cause(cause, "%s", msg[0] != '\0' ? msg :
		    "reconfigure failed");
	} else if (rc != 0 && rc != 1)
		rc = 1;
done:
	if (rc == 0) {
		params = join_params(argc, argv);
		pthread_mutex_lock(&g->mu);
		free(p->params);
		p->params = params;
		pthread_mutex_unlock(&g->mu);
		log_info("policy %s%s%s reconfigured", p->name,
		    params[0] != '\0' ? " " : "", params);
	}
	pthread_mutex_unlock(&g->call_mu);
	return (rc);
}

/* A copy of the name, params and counters. */
void
pguard_stats(struct policy_guard *g, struct pguard_stats *s)
{
	const struct guarded	*p;

	memset(s, 0, sizeof *s);
	pthread_mutex_lock(&g->mu);
	p = g->pending_set ? g->pending : g->active;
	snprintf(s->name, sizeof s->name, "%s", p != NULL ? p->name :
	    POLICY_BUILTIN);
	snprintf(s->params, sizeof s->params, "%s", p != NULL ? p->params :
	    "");
	s->plans = g->plans;
	s->plan_errors = g->plan_errors;
	s->swaps = g->swaps;
	s->fallbacks = g->fallbacks;
	s->ejections = g->ejections;
	s->timeouts = g->timeouts;
	s->crashes = g->crashes;
	s->isolated = g->conf.isolate;
	snprintf(s->last_error, sizeof s->last_error, "%s", g->last_error);
	snprintf(s->ejected, sizeof s->ejected, "%s", g->ejected);
	pthread_mutex_unlock(&g->mu);
}

/* Order round trips. */
static int
u64_cmp(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return ((x > y) - (x < y));
}

/* Round-trip percentiles (ns) of the calls so far; 0 when none. */
void
pguard_rtt(struct policy_guard *g, uint64_t *p50, uint64_t *p99)
{
	uint64_t	*v;
	size_t		 n;

	pthread_mutex_lock(&g->call_mu);
	n = g->n_rtt < PGUARD_RTT_SAMPLES ? g->n_rtt : PGUARD_RTT_SAMPLES;
	*p50 = *p99 = 0;
	if (n != 0) {
		v = xcalloc(n, sizeof *v);
		memcpy(v, g->rtt, n * sizeof *v);
		qsort(v, n, sizeof *v, u64_cmp);
		*p50 = v[n / 2];
		*p99 = v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
		free(v);
	}
	pthread_mutex_unlock(&g->call_mu);
}

/* Describe a plugin by loading it in a policy host of its own. */
static void
describe_in_host(void *arg, const char *plugindir, struct policy_info *pi)
{
	const char	*host = arg;
	struct guarded	*p;
	size_t		 dlen;
	char		*why = NULL, msg[POLICY_ERRLEN];

	if ((p = host_start(host, plugindir, pi->name, 1, &why)) == NULL) {
		pi->error = why;
		return;
	}
	if (host_call(p, PCHAN_OP_DESCRIBE, PGUARD_MAX_DEADLINE_MS) != 0)
		xasprintf(&pi->error, "policy '%s': its policy host failed "
		    "while loading it: %s", pi->name, p->why);
	else if (p->hdr->status != 0) {
		host_text(msg, sizeof msg, p->hdr->err, sizeof p->hdr->err);
		pi->error = xstrdup(msg);
	} else {
		p->hdr->text[sizeof p->hdr->text - 1] = '\0';
		host_text(msg, sizeof msg, p->hdr->text, sizeof p->hdr->text);
		pi->describe = xstrdup(msg);
		dlen = strlen(p->hdr->text) + 1;
		host_text(msg, sizeof msg, p->hdr->text + dlen,
		    sizeof p->hdr->text - dlen);
		pi->params_help = xstrdup(msg);
	}
	host_end(p);
	free(p);
}

/* List plugins, loading each in a policy host, not in the daemon. */
int
pguard_list(const char *host, const char *plugindir, struct policy_info **out,
    size_t *nout, char **cause)
{
	return (policy_scan(plugindir, describe_in_host, (void *)host, out,
	    nout, cause));
}
