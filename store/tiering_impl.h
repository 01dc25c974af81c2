/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of tiering share (tiering.c: the list, open and close;
 * tier_holds.c: holds, moves and clean copies; tier_records.c: what
 * storage tiers report, and room made in them; demoter.c: writing blocks
 * down; tombstones.c: removals logged; tier_alloc.c: memory-tier slots):
 * the list's state and its small lookups. Not a public header. See
 * tiering.h for what tiering does, and store_impl.h for the lock. */
#ifndef KVT_STORE_TIERING_IMPL_H
#define KVT_STORE_TIERING_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/tiering.h"

/* Blocks per demotion batch: enough to keep the device queue full, few
 * enough that a batch's records are acknowledged soon. The batches of a
 * pass someone waits for are a quarter of that, so the wait is short. */
#define DEMOTE_BATCH 32
/* Demotion batches in flight: while one is synced (its group commit),
 * the others' writes keep the device busy; four short batches of a pass
 * someone waits for are as deep a queue as one long one. A storage tier
 * takes this many write batches at once (KVT_SSD_WRITE_BATCHES). */
#define DEMOTE_INFLIGHT 4
/* Memory-tier records with a clean copy below, remembered newest last (see
 * drop_clean); older ones fall off. */
#define CLEAN_RING 1024

/* A storage tier in the list, with what the store keeps for it. */
struct storage {
	struct kvt_storage_tier *t;
	/* records it found at open whose namespace has not attached yet */
	struct kvt_tier_rec *recovered;
	size_t n_recovered, cap_recovered;
	/* removals to log (tombstones), each with the sequence number it got
	 * when the block was removed */
	struct kvt_tier_io *tombs;
	size_t n_tombs, cap_tombs;
	/* a degraded tier is probed, with backoff */
	uint64_t probe_at;        /* CLOCK_MONOTONIC ns; 0: not seen degraded */
	uint64_t probe_backoff;   /* ns */
	/* what the store did with the tier, in the tier's counters */
	uint64_t copies_dropped;  /* spare copies let go for room (block in memory) */
	uint64_t refused, refused_bytes; /* blocks its admission rule kept off it */
};

/* A demotion batch and the records it holds busy. */
struct wbatch {
	struct kvt_tier_batch b;
	struct kvt_tier_io io[DEMOTE_BATCH];
	struct kvt_codec_cfg codec[DEMOTE_BATCH]; /* copies: the lock is let go */
	uint32_t idx[DEMOTE_BATCH];
	struct storage *to;
};

struct kvt_tiering {
	struct storage st[KVT_MAX_STORAGE_TIERS];
	size_t n;
	double high, low;

	pthread_t thread;
	bool started, stop;
	pthread_cond_t wake;       /* the demoter waits here */
	pthread_cond_t progress;   /* allocations waiting for room */
	uint32_t waiters;          /* allocations waiting for room */
	uint64_t asks, asks_seen;  /* make_room calls; those a pass has started for */
	uint64_t want_bytes;       /* what they wait for now (each counted once) */
	uint64_t freed;            /* times the demoter freed memory-tier room */
	uint64_t passes_started, passes_ended;
	bool tombs_new;            /* queued since the demoter last took them */

	/* records in the memory tier whose copy a storage tier dropped: written
	 * again */
	uint32_t *rewrite;
	size_t n_rewrite, cap_rewrite;
	uint32_t copy_cursor;      /* where the last scan for spare copies ended */

	/* records that got a clean copy (read up for a reader, or a spare
	 * written), oldest first from clean_head; KVT_NIL: taken or stale */
	uint32_t clean[CLEAN_RING];
	uint32_t clean_head, clean_n;

	struct wbatch wb[DEMOTE_INFLIGHT];
};


static inline struct storage *storage_of(struct kvt_store *s, unsigned kind)
{
	struct kvt_tiering *t = s->tiering;

	for (size_t k = 0; k < t->n; k++)
		if (t->st[k].t->kind == kind)
			return &t->st[k];
	return NULL;
}

static inline bool degraded(struct storage *st)
{
	return st->t->ops->degraded(st->t);
}

/* Where demotions go: the first storage tier that takes them and works. */
static inline struct storage *target(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;

	for (size_t k = 0; k < t->n; k++)
		if ((t->st[k].t->caps & KVT_TIER_CAP_DEMOTE) && !degraded(&t->st[k]))
			return &t->st[k];
	return NULL;
}

static inline bool above(struct kvt_store *s, double mark)
{
	/* occupancy counts slot rounding and slab tails: a 40 MiB block fills a
	 * 64 MiB slab, though its bytes are 62% of it */
	return (double)s->mem->ops->occupied(s->mem) > mark * (double)s->mem->capacity;
}

/* Between the files of tiering (see each file for the contract). Lock
 * held unless said. */
void kvt_tiering_hold_cb(void *arg, uint32_t i, bool held);
void kvt_tiering_drop_copy(struct kvt_store *s, struct kvt_rec *r);
void kvt_tiering_unhold(struct kvt_store *s, uint32_t i);
int kvt_tiering_recovered_push(struct storage *st, const struct kvt_tier_rec *r);
void kvt_tiering_want_rewrite(struct kvt_tiering *t, uint32_t i);
uint64_t kvt_tiering_evict_from(struct kvt_store *s, struct storage *st, uint64_t bytes,
				bool copies);
bool kvt_tiering_refuse(struct kvt_store *s, uint32_t i, struct storage *to);
void kvt_tiering_rewrite_copies(struct kvt_store *s);
void kvt_tiering_write_tombs(struct kvt_store *s, struct storage *st);
/* The demoter's thread (arg: the store); takes the lock itself. */
void *kvt_tiering_demoter_main(void *arg);

#endif /* KVT_STORE_TIERING_IMPL_H */
