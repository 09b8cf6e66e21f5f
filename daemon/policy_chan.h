/*
 * policy_chan.h: the shared-memory channel between the daemon and a policy
 * host process (phased-policy-host).
 *
 * One memfd per host, mapped by both sides: a header, then fixed arrays
 * sized by `cap` (the engine's view and plan capacity).  The daemon writes
 * a request (op, view scalars and arrays, queued notifications), bumps
 * `seq` and signals the host's eventfd; the host runs the plugin, writes
 * the plan counts and arrays and `ack` = `seq`, and signals the daemon's
 * eventfd.  Nothing in the mapping is a pointer: both sides find the arrays
 * by offset, and the daemon copies and validates whatever it reads back.
 */
#ifndef PHASED_POLICY_CHAN_H
#define PHASED_POLICY_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include <phased/policy.h>

#define PCHAN_MAGIC		0x70636863u	/* "pchc" */
#define PCHAN_MAX_GROUPS	8
#define PCHAN_MAX_HIST		64
#define PCHAN_MAX_EVENTS	1024
#define PCHAN_TEXTLEN		4096
#define PCHAN_ERRLEN		256

/* File descriptors the host finds at start. */
#define PCHAN_FD_MEM		3
#define PCHAN_FD_TOHOST		4
#define PCHAN_FD_TODAEMON	5

/* What the daemon asks of the host. */
enum pchan_op {
	PCHAN_OP_DESCRIBE = 1,	/* load and check only; describe back */
	PCHAN_OP_INIT = 2,	/* load, check, init with params in text */
	PCHAN_OP_SCHEDULE = 3,	/* deliver events, plan the view */
	PCHAN_OP_EVENTS = 4,	/* deliver events only */
	PCHAN_OP_FINI = 5,	/* on_swap_out (if swapped in), fini, exit */
	PCHAN_OP_RECONFIGURE = 6 /* params in text; status 1: no such op */
};

/* A notification queued for the plugin. */
enum pchan_ev {
	PCHAN_EV_ARRIVAL = 1,
	PCHAN_EV_FINISH = 2
};

struct pchan_event {
	uint32_t		kind;		/* enum pchan_ev */
	uint32_t		reserved;
	struct phased_request	req;
};

struct pchan_hdr {
	uint32_t		magic;
	uint32_t		cap;		/* requests, entries, preempts, migrations */
	uint64_t		seq;		/* written by the daemon */
	uint64_t		ack;		/* written by the host */
	uint32_t		op;		/* enum pchan_op */
	int32_t			status;		/* host's answer: 0 or -1 */
	uint32_t		swap_in;	/* call on_swap_in before schedule */
	uint32_t		n_events;
	/* View scalars (its pointers are rebuilt by the host). */
	struct phased_view	view;
	struct phased_group	groups[PCHAN_MAX_GROUPS];
	struct phased_iter_stat	hist[PCHAN_MAX_HIST];
	struct pchan_event	events[PCHAN_MAX_EVENTS];
	/* Plan counts written by the host. */
	uint32_t		n_entries;
	uint32_t		n_preempt;
	uint32_t		n_migrations;
	uint32_t		replaced;	/* the plugin replaced arrays or capacities */
	/* The plan's report (ABI minor 2), written by the host. */
	uint32_t		chunk_tokens;
	uint32_t		notices;
	uint64_t		predicted_ns;
	uint64_t		target_ns;
	uint32_t		flags;		/* ABI minor 5 */
	char			err[PCHAN_ERRLEN];
	char			text[PCHAN_TEXTLEN]; /* params in; describe out */
};

/* Offsets of the arrays after the header, for a capacity. */
static inline size_t
pchan_off_reqs(void)
{
	return ((sizeof(struct pchan_hdr) + 63) & ~(size_t)63);
}

static inline size_t
pchan_off_entries(uint32_t cap)
{
	return (pchan_off_reqs() + (size_t)cap * sizeof(struct phased_request));
}

static inline size_t
pchan_off_preempt(uint32_t cap)
{
	return (pchan_off_entries(cap) +
	    (size_t)cap * sizeof(struct phased_plan_entry));
}

static inline size_t
pchan_off_migr(uint32_t cap)
{
	return (pchan_off_preempt(cap) + (size_t)cap * sizeof(uint64_t));
}

/* Bytes of the whole mapping, rounded to pages. */
static inline size_t
pchan_size(uint32_t cap)
{
	return ((pchan_off_migr(cap) + (size_t)cap *
	    sizeof(struct phased_migration) + 4095) & ~(size_t)4095);
}

#endif
