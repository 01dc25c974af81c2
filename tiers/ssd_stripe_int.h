/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of the SSD tier over several directories (ssd_stripe.h):
 *   ssd_stripe.c        devices, their states, the ops but submit and wait,
 *                       the worker threads, open and close
 *   ssd_stripe_batch.c  a batch split by device, placement, submit and wait */
#ifndef KVT_TIERS_SSD_STRIPE_INT_H
#define KVT_TIERS_SSD_STRIPE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tiers/ssd_stripe.h"

/* A record's loc: its device in the bits above the device's own loc. */
#define STRIPE_DEV_SHIFT KVT_SSD_LOC_BITS
#define STRIPE_LOC_MASK ((1ull << KVT_SSD_LOC_BITS) - 1)

static inline unsigned stripe_dev_of(uint64_t loc)
{
	return (unsigned)(loc >> STRIPE_DEV_SHIFT);
}

static inline uint64_t stripe_loc(unsigned d, uint64_t loc)
{
	return (uint64_t)d << STRIPE_DEV_SHIFT | (loc & STRIPE_LOC_MASK);
}

struct stripe_dev {
	struct kvt_storage_tier *t;   /* the device's SSD tier; NULL: missing */
	char *path;
	uint64_t bytes;
	int dir_fd;                   /* the directory opened, to see it go */
	dev_t st_dev;
	ino_t st_ino;
	/* the stripe's lock guards these */
	enum kvt_device_state state;
	int error;
	uint64_t dropped;             /* blocks dropped when it was taken out */
	uint64_t probe_at, probe_backoff; /* a degraded device's next probe (ns) */
	int64_t wrr;                  /* its current weight in the round robin */
	/* atomics */
	uint64_t errors;              /* I/O errors seen in its results */
};

struct stripe_sub;

struct stripe {
	struct kvt_storage_tier base; /* first: the ops get this pointer */
	pthread_mutex_t lock;         /* the devices' states, the round robin */
	struct stripe_dev dev[KVT_SSD_MAX_DIRS];
	unsigned n;
	uint64_t seq;                 /* the devices' shared sequence */
	unsigned next_rec_dev;        /* take_recovered: the device being taken */
	/* worker threads: each drives a part of a batch (a stripe_sub) queued
	 * by submit, so that the devices work in parallel */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cv;
	struct stripe_sub *queue, *queue_tail;
	pthread_t *workers;
	unsigned n_workers;
	bool stop;
};

/* A batch's part for one device: its records' copies, driven by the thread
 * in wait or by a worker. */
struct stripe_sub {
	struct kvt_tier_batch b;
	struct stripe_batch *sb;
	unsigned d;
	bool submitted;
	bool claimed;                 /* pool_lock: taken off the queue */
	struct stripe_sub *next;      /* pool_lock: the queue */
};

/* A batch between submit and the end of wait (kvt_tier_batch.priv). */
struct stripe_batch {
	struct stripe *st;
	struct kvt_tier_batch *b;     /* the caller's */
	struct kvt_tier_io *io;       /* the copies, grouped by device */
	size_t *outer;                /* a copy's record of b */
	uint32_t *left;               /* per record of b: copies not done */
	pthread_t waiter;             /* the thread in wait: it alone calls done_cb */
	bool waiting;
	struct stripe_sub sub[KVT_SSD_MAX_DIRS];
	unsigned n_sub;
	unsigned own;                 /* the part the thread in wait drives */
	pthread_mutex_t lock;         /* what follows */
	pthread_cond_t cv;
	size_t *ready;                /* records of b done, not handed over yet */
	size_t n_ready;
	size_t n_done;                /* records of b handed over */
	unsigned subs_left;           /* parts still driven */
};

/* ssd_stripe.c: a device's result seen (counts its I/O errors; at the
 * threshold takes it out), and taking a device out. No lock held. */
void kvt_stripe_result(struct stripe *st, unsigned d, int res);
void kvt_stripe_take_out(struct stripe *st, unsigned d, int err, const char *why);
/* Whether device d takes new blocks; the stripe's lock held. */
bool kvt_stripe_writable(const struct stripe *st, unsigned d);
/* Before a write batch: a degraded device due for a probe is probed, a
 * device whose directory is gone is taken out. No lock held. */
void kvt_stripe_check(struct stripe *st);
/* Queue a part for a worker (none: the thread in wait drives it). */
void kvt_stripe_queue(struct stripe *st, struct stripe_sub *sub);
/* Take a part still queued off the queue: true if it was (the caller drives
 * it). */
bool kvt_stripe_claim(struct stripe *st, struct stripe_sub *sub);
/* Drive a submitted part to its end. */
void kvt_stripe_sub_run(struct stripe_sub *sub);

/* ssd_stripe_batch.c */
int kvt_stripe_submit(struct kvt_storage_tier *t, struct kvt_tier_batch *b);
void kvt_stripe_wait(struct kvt_storage_tier *t, struct kvt_tier_batch *b);

#endif /* KVT_TIERS_SSD_STRIPE_INT_H */
