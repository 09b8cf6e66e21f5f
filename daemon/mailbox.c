/* mailbox.c: a queue plus an eventfd wakeup into the control thread. */
#include "config.h"

#include <sys/eventfd.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "mailbox.h"

static pthread_mutex_t	 mbox_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mbox_msg	*mbox_head, **mbox_tail = &mbox_head;
static int		 mbox_fd = -1;
static struct event	*mbox_ev;

/* Take everything queued and deliver it in order. */
void
mailbox_drain(void)
{
	struct mbox_msg	*m, *next;

	pthread_mutex_lock(&mbox_lock);
	m = mbox_head;
	mbox_head = NULL;
	mbox_tail = &mbox_head;
	pthread_mutex_unlock(&mbox_lock);
	for (; m != NULL; m = next) {
		next = m->next;
		m->deliver(m);
	}
}

/* The eventfd became readable. */
static void
mailbox_cb(evutil_socket_t fd, short ev, void *arg)
{
	uint64_t	v;

	if (read(fd, &v, sizeof v) == -1 && errno != EAGAIN)
		log_warn("mailbox read");
	mailbox_drain();
}

/* Set up the mailbox on the control thread's event base. */
void
mailbox_init(struct event_base *base)
{
	if ((mbox_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1)
		fatal("eventfd");
	mbox_ev = event_new(base, mbox_fd, EV_READ | EV_PERSIST, mailbox_cb,
	    NULL);
	if (mbox_ev == NULL || event_add(mbox_ev, NULL) != 0)
		fatalx("cannot watch the mailbox");
}

/* Post a message from any thread. */
void
mailbox_post(struct mbox_msg *m)
{
	uint64_t	one = 1;
	int		wake;

	m->next = NULL;
	pthread_mutex_lock(&mbox_lock);
	wake = mbox_head == NULL;
	*mbox_tail = m;
	mbox_tail = &m->next;
	pthread_mutex_unlock(&mbox_lock);
	if (wake && mbox_fd != -1 && write(mbox_fd, &one, sizeof one) == -1 &&
	    errno != EAGAIN)
		log_warn("mailbox write");
}

/* Tear down. */
void
mailbox_free(void)
{
	mailbox_drain();
	if (mbox_ev != NULL)
		event_free(mbox_ev);
	if (mbox_fd != -1)
		close(mbox_fd);
	mbox_ev = NULL;
	mbox_fd = -1;
}
