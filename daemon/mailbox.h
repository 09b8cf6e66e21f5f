/* mailbox.h: messages from worker threads to the control thread. */
#ifndef PHASED_MAILBOX_H
#define PHASED_MAILBOX_H

struct event_base;

/*
 * A message carries the function the control thread runs for it; the
 * function frees the message.  Any thread may post; delivery is in order.
 */
struct mbox_msg {
	struct mbox_msg	*next;
	void		(*deliver)(struct mbox_msg *);
};

/* Set up the mailbox on the control thread's event base. */
void	mailbox_init(struct event_base *);
/* Post a message from any thread. */
void	mailbox_post(struct mbox_msg *);
/* Deliver everything posted so far (also called at shutdown). */
void	mailbox_drain(void);
/* Tear down. */
void	mailbox_free(void);

#endif
