/*
 * policy_host_main.c: phased-policy-host, the process that holds one
 * scheduling-policy plugin for one model instance.
 *
 * The daemon starts it with posix_spawn (fork+exec: a fresh image, with no
 * copy of the daemon's threads, locks, sockets or model memory) and hands
 * it three descriptors: the memfd of the channel (policy_chan.h) and two
 * eventfds.  Before the plugin is opened the host dies with its parent,
 * closes every other descriptor, drops root (to nobody), forbids new
 * privileges, core dumps, file writes and new processes, and installs a
 * first seccomp filter; the plugin's constructors and init() run under it.
 * A second, tighter filter follows init(): from then on the plugin may only
 * compute, allocate memory, sleep, and talk on its channel.  Whatever it
 * does, it can only take this process down, which the daemon notices.
 */
#include "config.h"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_SECCOMP
#include <seccomp.h>
#endif

#include "policy_chan.h"
#include "policy_host.h"

static struct pchan_hdr		*hdr;
static struct policy		*pol;
static int			 swapped_in;

/* Say why the host cannot go on and exit. */
static void __attribute__((noreturn))
die(const char *what)
{
	dprintf(2, "phased-policy-host: %s: %s\n", what, strerror(errno));
	_exit(1);
}

/* Close every descriptor above the channel's. */
static void
close_others(void)
{
	long	fd, max = sysconf(_SC_OPEN_MAX);

	if (max < 0 || max > 65536)
		max = 65536;
#ifdef SYS_close_range
	if (syscall(SYS_close_range, PCHAN_FD_TODAEMON + 1, ~0U, 0) == 0)
		return;
#endif
	for (fd = PCHAN_FD_TODAEMON + 1; fd < max; fd++)
		close((int)fd);
}

/* Drop root, forbid new privileges, files, processes and core dumps. */
static void
drop_privileges(void)
{
	struct rlimit	zero = { 0, 0 };

	if (getuid() == 0 || geteuid() == 0) {
		if (setgroups(0, NULL) == -1 || setresgid(65534, 65534,
		    65534) == -1 || setresuid(65534, 65534, 65534) == -1)
			die("cannot drop root");
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1)
		die("no_new_privs");
	setrlimit(RLIMIT_CORE, &zero);
	setrlimit(RLIMIT_FSIZE, &zero);
	setrlimit(RLIMIT_NPROC, &zero);
}

#ifdef HAVE_SECCOMP
/* System calls any stage allows: compute, memory, time, exit. */
static const int	base_calls[] = {
	SCMP_SYS(read), SCMP_SYS(futex), SCMP_SYS(exit), SCMP_SYS(exit_group),
	SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(brk),
	SCMP_SYS(madvise), SCMP_SYS(mprotect), SCMP_SYS(rt_sigreturn),
	SCMP_SYS(rt_sigprocmask), SCMP_SYS(clock_gettime),
	SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(getpid),
	SCMP_SYS(gettid), SCMP_SYS(getrandom), SCMP_SYS(sched_yield),
	SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(lseek),
	SCMP_SYS(sigaltstack), SCMP_SYS(rt_sigaction), SCMP_SYS(getrusage),
	SCMP_SYS(sched_getaffinity), SCMP_SYS(prlimit64), SCMP_SYS(readlink),
};

/*
 * Install a filter: the base calls; writes to stderr and the daemon's
 * eventfd; while loading (stage 1) also read-only opens, closes and the
 * calls that install stage 2.  Anything else kills the process (SIGSYS).
 */
static void
install_filter(int stage)
{
	scmp_filter_ctx	 ctx;
	size_t		 i;
	int		 rc = 0;

	if ((ctx = seccomp_init(SCMP_ACT_KILL_PROCESS)) == NULL)
		die("seccomp_init");
	for (i = 0; i < sizeof base_calls / sizeof base_calls[0]; i++)
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, base_calls[i], 0);
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1,
	    SCMP_A0(SCMP_CMP_EQ, 2));
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1,
	    SCMP_A0(SCMP_CMP_EQ, PCHAN_FD_TODAEMON));
	if (stage == 1) {
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
		    SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC |
		    O_APPEND | O_TMPFILE, 0));
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(close), 0);
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(access), 0);
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(faccessat), 0);
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(faccessat2), 0);
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(pread64), 0);
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(seccomp), 0);
		rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 0);
	}
	if (rc != 0 || seccomp_load(ctx) != 0)
		die("seccomp filter");
	seccomp_release(ctx);
}
#else
/* Without libseccomp only the privilege drop and the limits apply. */
static void
install_filter(int stage)
{
	(void)stage;
}
#endif

/* Copy a message into the header's error field. */
static void
set_err(const char *s)
{
	snprintf(hdr->err, sizeof hdr->err, "%s", s != NULL ? s : "");
}

/* Load the plugin and describe it. */
static int
op_describe(const char *dir, const char *name)
{
	const struct phased_policy	*ops;
	char				*cause = NULL;
	void				*h;

	if ((h = policy_dlopen(dir, name, &ops, &cause)) == NULL) {
		set_err(cause);
		free(cause);
		return (-1);
	}
	snprintf(hdr->text, sizeof hdr->text, "%s%c%s", ops->describe != NULL ?
	    ops->describe : "", '\0', ops->params_help != NULL ?
	    ops->params_help : "");
	/* The two strings may be truncated: terminate the second. */
	hdr->text[sizeof hdr->text - 1] = '\0';
	return (0);
}

/* Load and init the plugin with the params in text (NUL-separated). */
static int
op_init(const char *dir, const char *name)
{
	char		*argv[256], *cause = NULL, *p;
	size_t		 argc = 0, n = hdr->n_events;

	hdr->text[sizeof hdr->text - 1] = '\0';
	for (p = hdr->text; argc < n && argc < 256 &&
	    p < hdr->text + sizeof hdr->text; p += strlen(p) + 1)
		argv[argc++] = p;
	if ((pol = policy_open(dir, name, argc, argv, &cause)) == NULL) {
		set_err(cause);
		free(cause);
		return (-1);
	}
	install_filter(2);
	return (0);
}

/* New params (NUL-separated in text) for the loaded plugin. */
static int
op_reconfigure(void)
{
	char		*argv[256], *cause = NULL, *p;
	size_t		 argc = 0, n = hdr->n_events;
	int		 rc;

	hdr->text[sizeof hdr->text - 1] = '\0';
	for (p = hdr->text; argc < n && argc < 256 &&
	    p < hdr->text + sizeof hdr->text; p += strlen(p) + 1)
		argv[argc++] = p;
	if ((rc = policy_reconfigure(pol, argc, argv, &cause)) == -1) {
		set_err(cause);
		free(cause);
	}
	return (rc);
}

/* Deliver the queued notifications. */
static void
deliver_events(void)
{
	uint32_t	i, n = hdr->n_events;

	if (n > PCHAN_MAX_EVENTS)
		n = PCHAN_MAX_EVENTS;
	for (i = 0; i < n; i++) {
		const struct pchan_event *ev = &hdr->events[i];

		if (ev->kind == PCHAN_EV_ARRIVAL && pol->ops->on_arrival != NULL)
			pol->ops->on_arrival(pol->state, &ev->req);
		else if (ev->kind == PCHAN_EV_FINISH &&
		    pol->ops->on_finish != NULL)
			pol->ops->on_finish(pol->state, &ev->req);
	}
}

/* Plan the view in the channel into the channel's plan arrays. */
static int
op_schedule(void)
{
	struct phased_view	 v = hdr->view;
	struct phased_plan	 p;
	char			*base = (char *)hdr;
	uint32_t		 cap = hdr->cap;
	int			 rc;

	deliver_events();
	if (v.n_groups > PCHAN_MAX_GROUPS)
		v.n_groups = PCHAN_MAX_GROUPS;
	if (v.n_hist > PCHAN_MAX_HIST)
		v.n_hist = PCHAN_MAX_HIST;
	if (v.n_reqs > cap)
		v.n_reqs = cap;
	v.groups = hdr->groups;
	v.hist = hdr->hist;
	v.reqs = (const struct phased_request *)(base + pchan_off_reqs());
	memset(&p, 0, sizeof p);
	p.entries = (struct phased_plan_entry *)(base + pchan_off_entries(cap));
	p.preempt = (uint64_t *)(base + pchan_off_preempt(cap));
	p.migrations = (struct phased_migration *)(base + pchan_off_migr(cap));
	p.cap_entries = p.cap_preempt = p.cap_migrations = cap;
	if (hdr->swap_in && !swapped_in) {
		swapped_in = 1;
		if (pol->ops->on_swap_in != NULL)
			pol->ops->on_swap_in(pol->state, &v);
	}
	rc = pol->ops->schedule(pol->state, &v, &p);
	hdr->replaced = p.entries != (void *)(base + pchan_off_entries(cap)) ||
	    p.preempt != (void *)(base + pchan_off_preempt(cap)) ||
	    p.migrations != (void *)(base + pchan_off_migr(cap)) ||
	    p.cap_entries != cap || p.cap_preempt != cap ||
	    p.cap_migrations != cap;
	hdr->n_entries = p.n_entries;
	hdr->n_preempt = p.n_preempt;
	hdr->n_migrations = p.n_migrations;
	hdr->chunk_tokens = p.chunk_tokens;
	hdr->notices = p.notices;
	hdr->predicted_ns = p.predicted_ns;
	hdr->target_ns = p.target_ns;
	hdr->flags = p.flags;
	if (rc != 0)
		set_err("schedule returned an error");
	return (rc != 0 ? -1 : 0);
}

/* Serve the daemon's requests until it asks us to finish or goes away. */
int
main(int argc, char **argv)
{
	struct stat	 st;
	uint64_t	 one = 1, v;
	long		 ppid;
	int		 rc, dfd;
	char		 dirpath[64];

	if (argc != 4) {
		dprintf(2, "usage: phased-policy-host PLUGINDIR NAME PPID "
		    "(started by phased)\n");
		return (2);
	}
	ppid = strtol(argv[3], NULL, 10);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != ppid)
		_exit(1);
	close_others();
	if (fstat(PCHAN_FD_MEM, &st) == -1 ||
	    (size_t)st.st_size < sizeof *hdr)
		die("channel");
	hdr = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
	    MAP_SHARED, PCHAN_FD_MEM, 0);
	if (hdr == MAP_FAILED || hdr->magic != PCHAN_MAGIC ||
	    pchan_size(hdr->cap) > (size_t)st.st_size)
		die("channel mapping");
	close(PCHAN_FD_MEM);
	/*
	 * Once root is dropped the plugin directory may be out of reach (a
	 * build under a private home or temporary directory): reach it
	 * through a descriptor opened now, which skips its ancestors.
	 */
	if (getuid() == 0 || geteuid() == 0) {
		if ((dfd = open(argv[1], O_PATH | O_DIRECTORY)) != -1) {
			snprintf(dirpath, sizeof dirpath, "/proc/self/fd/%d",
			    dfd);
			argv[1] = dirpath;
		}
	}
	drop_privileges();
	install_filter(1);
	for (;;) {
		if (read(PCHAN_FD_TOHOST, &v, sizeof v) != sizeof v)
			_exit(0);
		rc = -1;
		hdr->err[0] = '\0';
		switch (hdr->op) {
		case PCHAN_OP_DESCRIBE:
			rc = op_describe(argv[1], argv[2]);
			break;
		case PCHAN_OP_INIT:
			rc = pol != NULL ? -1 : op_init(argv[1], argv[2]);
			break;
		case PCHAN_OP_SCHEDULE:
			rc = pol != NULL ? op_schedule() : -1;
			break;
		case PCHAN_OP_RECONFIGURE:
			rc = pol != NULL ? op_reconfigure() : -1;
			break;
		case PCHAN_OP_EVENTS:
			if (pol != NULL)
				deliver_events();
			rc = pol != NULL ? 0 : -1;
			break;
		case PCHAN_OP_FINI:
			if (pol != NULL && swapped_in &&
			    pol->ops->on_swap_out != NULL)
				pol->ops->on_swap_out(pol->state);
			if (pol != NULL && pol->ops->fini != NULL)
				pol->ops->fini(pol->state);
			rc = 0;
			break;
		}
		hdr->status = rc;
		__atomic_store_n(&hdr->ack, hdr->seq, __ATOMIC_RELEASE);
		if (write(PCHAN_FD_TODAEMON, &one, sizeof one) != sizeof one ||
		    hdr->op == PCHAN_OP_FINI)
			_exit(0);
	}
}
