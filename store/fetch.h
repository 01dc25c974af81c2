/* SPDX-License-Identifier: Apache-2.0 */
/* Reading blocks up from storage tiers into memory-tier slots, for one
 * caller (kvt_acquire_many and the calls built on it). Every block of a
 * request that lies in a storage tier is read at once: one batch per tier,
 * all in flight together, each record verified by its tier as it completes,
 * moved into the memory tier (its record kept in a tier that takes
 * demotions as a clean copy) and handed to the caller while later ones are
 * still in flight. Blocks a KEYED tier answers for, which the index lacks,
 * are read by key into fresh slots and join the index in the memory tier
 * (a promotion from a tier that had no index record).
 *
 * add and add_key run with the store's lock held; run with it not held. */
#ifndef KVT_STORE_FETCH_H
#define KVT_STORE_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "store/store_impl.h"
#include "tiers/tier.h"

struct kvt_fetch;

/* Called as each block is in (res 0: record i is in the memory tier, live,
 * held busy for the caller) or failed (res < 0: nothing is held), with the
 * store's lock not held. in_flight: blocks of the fetch still being read
 * (added and not done yet). */
typedef void (*kvt_fetch_cb)(void *arg, size_t k, uint32_t i, int res, size_t in_flight);

/* A fetch of up to max blocks, reporting each to cb. NULL without memory. */
struct kvt_fetch *kvt_fetch_new(struct kvt_store *s, size_t max, kvt_fetch_cb cb, void *arg);
void kvt_fetch_free(struct kvt_fetch *f);

/* What kvt_fetch_add found. */
enum {
	KVT_FETCH_QUEUED = 0,  /* a memory slot is taken, the read will run */
	KVT_FETCH_IN_MEM = 1,  /* the block came up meanwhile: lend it */
	KVT_FETCH_MOVING = 2,  /* another reader is bringing it up: wait */
};

/* Bring record i (live, in a storage tier, held busy by the caller) up for
 * the caller's slot k: a memory slot is taken for it, and it is marked
 * moving. When the slot has to wait for the demoter to make room, the reads
 * added before it are put in flight and driven to their end first (cb is
 * called for each, as in kvt_fetch_wait), so they run while the demoter
 * writes; the lock is let go meanwhile. Returns
 * KVT_FETCH_*, or -ENOSPC (no slot), -ENOENT (the record is gone or its
 * tier lost it), -ENOMEM, -EINVAL (more than max). */
int kvt_fetch_add(struct kvt_fetch *f, uint32_t i, size_t k);

/* Fetch key from keyed tier t for slot k, as a block of ns whose parent is
 * `parent` (NULL: none known): a pending record and a memory slot are
 * taken. Returns 0, -EEXIST (the key is stored, or pending elsewhere),
 * -ENOSPC, -ENOMEM, -EINVAL. */
int kvt_fetch_add_key(struct kvt_fetch *f, struct kvt_ns *ns, struct kvt_storage_tier *t,
		      const struct kvt_key *key, const struct kvt_key *parent, size_t k);

/* Put everything added since the last submit in flight (one batch per
 * tier). cb is called once per block, by kvt_fetch_wait (or here, for a
 * batch its tier refused). Lock not held. */
void kvt_fetch_submit(struct kvt_fetch *f);

/* Blocks added and not done yet (before submit: those added). */
size_t kvt_fetch_in_flight(const struct kvt_fetch *f);

/* Put what is left in flight, drive every batch to its end (in the order
 * submitted), calling cb as each block is done; the fetch is then empty,
 * ready for new adds. */
void kvt_fetch_wait(struct kvt_fetch *f);

#endif /* KVT_STORE_FETCH_H */
