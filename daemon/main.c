/* main.c: phased(8): options, configuration, daemonizing, signals. */
#include "config.h"

#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "conn.h"
#include "http.h"
#include "quant.h"
#include "log.h"
#include "phased.h"
#include "req.h"
#include "instance.h"
#include "mailbox.h"
#include "util.h"

/* Seconds the daemon waits for clients to read their last replies. */
#define SHUTDOWN_GRACE_S	2

struct daemon	*phased;

/* Print the usage and exit. */
static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: phased [-dnv] [-f file] [-s socket]\n");
	exit(1);
}

/* Load the configuration named by -f (or the defaults) into conf. */
static int
load_config(struct daemon *d, struct phased_config *conf, char **cause)
{
	config_defaults(conf);
	if (d->conf_path != NULL && config_load(d->conf_path, conf, cause) != 0) {
		config_free(conf);
		return (-1);
	}
	if (d->socket_override != NULL) {
		free(conf->socket);
		conf->socket = xstrdup(d->socket_override);
	}
	return (0);
}

/* Set how models loaded from now on compute with F16 and BF16 weights. */
static void
apply_math(const struct phased_config *conf)
{
	static int	auto_which = -1, auto_i16 = -1;
	double		rate;

	switch (conf->bf16_dot) {
	case BF16_DOT_YES:
		if (!quant_bf16_dot_supported()) {
			log_warnx("bf16-dot: this CPU has no bf16 dot products; "
			    "computing exactly");
			quant_allow_bf16_dot(QUANT_BF16_DOT_NONE);
			quant_allow_f16_i16(0);
			return;
		}
		quant_allow_bf16_dot(QUANT_BF16_DOT_ALL);
		quant_allow_f16_i16(0);
		return;
	case BF16_DOT_AUTO:
		/* Measured once: a reload keeps the first answer. */
		if (auto_i16 == -1) {
			auto_i16 = quant_f16_i16_auto(&rate);
			if (quant_isa() >= QUANT_ISA_AVX2)
				log_info("bf16-dot auto: %s at %.2f of the "
				    "multiply-add rate; %s", quant_isa() >=
				    QUANT_ISA_AVX512 ? "vpdpwssd" : "vpmaddwd", rate,
				    !auto_i16 ? "F16 weights exact" :
				    quant_isa() >= QUANT_ISA_AVX512 ?
				    "F16 weights, and BF16 ones where bf16 dot "
				    "products do not take them, take 16-bit "
				    "integer dot products" :
				    "F16 and BF16 weights, and the attention of "
				    "quantized models, take 16-bit integer dot "
				    "products");
		}
		quant_allow_f16_i16(auto_i16);
		if (auto_which == -1) {
			auto_which = quant_bf16_dot_auto(&rate);
			if (quant_bf16_dot_supported())
				log_info("bf16-dot auto: vdpbf16ps at %.2f of the "
				    "multiply-add rate; %s", rate,
				    auto_which == QUANT_BF16_DOT_NONE ?
				    "BF16 weights exact" : "BF16 weights, F16 ones of "
				    "bf16 values, and the attention of models of "
				    "them and of quantized ones take bf16 dot "
				    "products");
		}
		quant_allow_bf16_dot(auto_which);
		return;
	default:
		quant_allow_bf16_dot(QUANT_BF16_DOT_NONE);
		quant_allow_f16_i16(0);
	}
}

/* Check the options of every model line, as -n promises. */
static int
check_models(const struct phased_config *conf, char **cause)
{
	struct inst_opts	 o;
	char			*why = NULL;
	int			 i;

	for (i = 0; i < conf->n_models; i++) {
		if (inst_opts_parse(conf->models[i].options,
		    conf->models[i].n_options, &o, &why) != 0) {
			set_cause(cause, "%s:%d: model %s: %s", conf->path,
			    conf->models[i].line, conf->models[i].name, why);
			free(why);
			return (-1);
		}
		inst_opts_free(&o);
	}
	return (0);
}

/* Reload the configuration file; on error the old one stays. */
int
daemon_reload(char **cause)
{
	struct phased_config	conf;

	if (load_config(phased, &conf, cause) != 0) {
		log_warnx("reload failed, keeping the old configuration: %s",
		    *cause);
		return (-1);
	}
	if (strcmp(conf.socket, phased->conf.socket) != 0)
		log_warnx("socket path change to %s takes effect at restart",
		    conf.socket);
	config_free(&phased->conf);
	phased->conf = conf;
	log_setverbose(phased->verbose);
	apply_math(&phased->conf);
	/* Models newly listed in the file are loaded now. */
	instance_load_configured();
	log_info("configuration reloaded");
	return (0);
}

/* Exit the loop once every client is gone or the grace period ends. */
static void
shutdown_check_cb(evutil_socket_t fd, short ev, void *arg)
{
	static int	ticks;

	if ((TAILQ_EMPTY(&phased->conns) && !http_busy()) ||
	    ++ticks > SHUTDOWN_GRACE_S * 10)
		event_base_loopexit(phased->base, NULL);
}

/* Begin an orderly shutdown: tell clients, flush, exit the loop. */
void
daemon_shutdown(const char *why)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__Notice		 n = PHASED__NOTICE__INIT;
	struct conn		*c, *next;
	struct timeval		 tv = { 0, 100000 };

	if (phased->shutting_down)
		return;
	phased->shutting_down = 1;
	log_info("shutting down: %s", why);
	control_stop(phased);
	http_shutdown();
	n.message = (char *)"daemon is shutting down";
	n.has_shutting_down = 1;
	n.shutting_down = 1;
	r.id = 0;
	r.body_case = PHASED__RESPONSE__BODY_NOTICE;
	r.notice = &n;
	for (c = TAILQ_FIRST(&phased->conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		conn_send(c, &r);
		conn_end_streams(c, "daemon is shutting down");
		conn_close_after_flush(c);
	}
	phased->ev_shutdown = event_new(phased->base, -1, EV_PERSIST,
	    shutdown_check_cb, NULL);
	event_add(phased->ev_shutdown, &tv);
}

/* SIGTERM, SIGINT, SIGHUP, SIGPIPE. */
static void
signal_cb(evutil_socket_t sig, short ev, void *arg)
{
	char	*cause = NULL;

	switch (sig) {
	case SIGTERM:
	case SIGINT:
		daemon_shutdown(sig == SIGTERM ? "SIGTERM" : "SIGINT");
		break;
	case SIGHUP:
		log_info("SIGHUP: reloading %s", phased->conf_path ?
		    phased->conf_path : "(no configuration file)");
		if (daemon_reload(&cause) != 0)
			free(cause);
		break;
	}
}

/* Write the pidfile beside the socket unless configured elsewhere. */
static void
write_pidfile(struct daemon *d)
{
	char	*copy;
	FILE	*f;
	int	 fd;

	if (d->conf.pidfile != NULL)
		d->pidfile = xstrdup(d->conf.pidfile);
	else {
		copy = xstrdup(d->socket_path);
		xasprintf(&d->pidfile, "%s/phased.pid", dirname(copy));
		free(copy);
	}
	fd = open(d->pidfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC |
	    O_NOFOLLOW, 0644);
	if (fd == -1 || (f = fdopen(fd, "w")) == NULL) {
		log_warn("pidfile %s", d->pidfile);
		if (fd != -1)
			close(fd);
		free(d->pidfile);
		d->pidfile = NULL;
		return;
	}
	fprintf(f, "%ld\n", (long)getpid());
	fclose(f);
}

/* Parse options, load the configuration, listen, serve until told to stop. */
int
main(int argc, char **argv)
{
	struct daemon	 d;
	char		*cause = NULL;
	int		 ch, check_only = 0, i;
	static const int sigs[] = { SIGTERM, SIGINT, SIGHUP };

	memset(&d, 0, sizeof d);
	d.listen_fd = d.lock_fd = -1;
	TAILQ_INIT(&d.conns);
	phased = &d;

	while ((ch = getopt(argc, argv, "df:ns:v")) != -1) {
		switch (ch) {
		case 'd':
			d.foreground = 1;
			break;
		case 'f':
			d.conf_path = xstrdup(optarg);
			break;
		case 'n':
			check_only = 1;
			break;
		case 's':
			d.socket_override = xstrdup(optarg);
			break;
		case 'v':
			d.verbose++;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	if (d.conf_path == NULL && access(PHASED_SYSCONFDIR "/phased.conf",
	    R_OK) == 0)
		d.conf_path = xstrdup(PHASED_SYSCONFDIR "/phased.conf");

	log_init(1, d.verbose, "phased");
	if (load_config(&d, &d.conf, &cause) != 0) {
		fprintf(stderr, "phased: %s\n", cause);
		exit(1);
	}
	if (check_only) {
		if (check_models(&d.conf, &cause) != 0) {
			fprintf(stderr, "phased: %s\n", cause);
			exit(1);
		}
		fprintf(stderr, "phased: configuration OK\n");
		config_free(&d.conf);
		exit(0);
	}

	signal(SIGPIPE, SIG_IGN);
	d.start_ns = now_ns();
	if (control_listen(&d, d.conf.socket, &cause) != 0)
		fatalx("%s", cause);
	if (http_listen(&d, &cause) != 0)
		fatalx("%s", cause);
	if (!d.foreground) {
		log_init(0, d.verbose, "phased");
		if (daemon(0, 0) == -1)
			fatal("daemon");
		write_pidfile(&d);
	}
	if (evthread_use_pthreads() != 0)
		fatalx("evthread_use_pthreads failed");
	if ((d.base = event_base_new()) == NULL)
		fatalx("event_base_new failed");
	for (i = 0; i < (int)(sizeof sigs / sizeof sigs[0]); i++) {
		d.ev_signals[i] = evsignal_new(d.base, sigs[i], signal_cb, NULL);
		if (d.ev_signals[i] == NULL ||
		    event_add(d.ev_signals[i], NULL) != 0)
			fatalx("cannot watch signal %d", sigs[i]);
	}
	mailbox_init(d.base);
	apply_math(&d.conf);
	control_start(&d);
	http_start(&d);
	instance_load_configured();
	log_info("phased %s listening on %s (pid %ld)", PACKAGE_VERSION,
	    d.socket_path, (long)getpid());

	event_base_dispatch(d.base);

	while (!TAILQ_EMPTY(&d.conns))
		conn_free(TAILQ_FIRST(&d.conns), "daemon exiting");
	req_policy_wait();
	instance_shutdown();
	http_stop();
	mailbox_free();
	control_stop(&d);
	if (d.pidfile != NULL)
		unlink(d.pidfile);
	for (i = 0; i < (int)(sizeof sigs / sizeof sigs[0]); i++)
		event_free(d.ev_signals[i]);
	if (d.ev_shutdown != NULL)
		event_free(d.ev_shutdown);
	event_base_free(d.base);
	log_info("exiting");
	config_free(&d.conf);
	free(d.conf_path);
	free(d.socket_override);
	free(d.socket_path);
	free(d.pidfile);
	if (d.lock_fd != -1)
		close(d.lock_fd);
	return (0);
}
