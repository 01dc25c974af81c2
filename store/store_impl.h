/* SPDX-License-Identifier: Apache-2.0 */
/* The store's own structures, shared by the files of the store core
 * (store.c, namespace.c, store_put.c, store_get.c, store_keys.c: the API;
 * tiering.c and the files it names: movement over the list of tiers;
 * fetch.c: batched reads up from storage tiers; store_tiers.c: the storage
 * tiers the options ask for). Not a public header: callers see only
 * include/kvtier/store.h.
 *
 * The lock. s->lock is taken by the API function a caller enters (and by
 * the demoter's thread for its loop) and held across the whole operation,
 * so that it sees one index. A few functions below it let that lock go and
 * take it again before they return, and they are the only ones: those that
 * wait for a device (a tier's submit, wait or probe, kvt_tier_run: the
 * demoter's batches and tombstones, write_copies, probe_degraded, the reads
 * of fetch.c) and those that wait on a condition variable (kvt_tiering_alloc:
 * make_room and wait_pass wait for the demoter to make room; demoter_wait
 * for work; store_get.c for a block another reader brings up). Each says so
 * in its contract ("released while ..."). This is needed: a device wait under the lock
 * would stop every other client for a device's latency, and the room an
 * allocation waits for is made by the demoter, which needs the lock; while
 * the callers hold records (busy, pending) that the wait must not let go.
 * So a caller of such a function looks its records up again after the call
 * (they may have moved or gone), as reserve_locked and fetch.c do; no other
 * function lets go of a lock it did not take. */
#ifndef KVT_STORE_STORE_IMPL_H
#define KVT_STORE_STORE_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "kvtier/store.h"
#include "store/catalog.h"
#include "store/ghost.h"
#include "tiers/codec.h"
#include "tiers/tier.h"

#define MAX_NAMESPACES 65535

struct kvt_tiering;

struct kvt_ns {
	struct kvt_store *store;
	uint16_t id; /* 1-based; the index keys blocks by (id, key) */
	struct kvt_ns_desc desc;
	uint64_t block_bytes;
	struct kvt_key salt;
	/* how its blocks are encoded when written to a storage tier; guarded
	 * by the store's lock */
	struct kvt_codec_cfg codec;
};

struct kvt_store {
	pthread_mutex_t lock;
	pthread_cond_t moved;       /* a block finished moving up (store/fetch.c) */
	struct kvt_store_opts opts;
	struct kvt_catalog cat;
	struct kvt_mem_tier *mem;   /* tier 0: where blocks are read and written */
	struct kvt_ns **ns;         /* by id - 1; NULL once detached */
	uint32_t n_ns;              /* ids handed out: 1..n_ns */
	uint32_t live_ns;           /* namespaces attached */
	uint16_t *free_ids;         /* ids of detached namespaces, reused first */
	uint32_t n_free_ids;
	struct kvt_store_stats counters; /* tier[] holds hits/bytes/evictions/errors */
	struct kvt_tiering *tiering; /* the storage tiers after mem, the demoter */
	bool warm;                  /* the memory tier outlives the process (store/warm.h) */
	struct kvt_warm_stats warm_stats;
	/* keys kvt_read_into read straight from a keyed tier (no record of
	 * them here): a second read of one is left to the caller's acquire,
	 * which keeps it (store/read_into.c) */
	struct kvt_ghost read_keyed;
};

/* The 64-bit name of a namespace in storage tiers' records: the first 8
 * bytes of its salt, itself a digest of its descriptor. */
uint64_t kvt_ns_storage_id(const struct kvt_ns *ns);

/* A namespace descriptor's identity (its salt): SHA-256 over its fields.
 * Returns 0, -ENOMEM, -EIO. */
int kvt_ns_digest(const struct kvt_ns_desc *d, struct kvt_key *out);

/* Open the memory tier opts ask for. Returns 0 and *out, or the errors of
 * its open (-EINVAL, -ENOMEM). */
int kvt_store_open_mem(const struct kvt_store_opts *opts, struct kvt_mem_tier **out);

/* Record i of the store's index. */
static inline struct kvt_rec *rec(struct kvt_store *s, uint32_t i)
{
	return kvt_index_rec(s->cat.idx, i);
}

/* Open the storage tiers opts ask for and add them to s's list (lock not
 * held). Returns 0 or the -errno of a tier's open. */
int kvt_store_add_tiers(struct kvt_store *s, const struct kvt_store_opts *opts);

#endif /* KVT_STORE_STORE_IMPL_H */
