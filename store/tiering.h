/* SPDX-License-Identifier: Apache-2.0 */
/* Movement of blocks over the store's ordered list of tiers: tier 0 is the
 * memory tier (DRAM), the storage tiers follow (SSD, then the cluster's peer
 * tier where the daemon has one).
 * The list, the background demoter, eviction from storage tiers, the clean
 * copies blocks read back keep, holds mirrored into the tiers, removals
 * logged (tombstones), degraded tiers probed, the records tiers report
 * (found at open, dropped for room) kept in the index. No tier is named:
 * tiers are found by their kind and their caps (tiers/tier.h).
 *
 * Demotion is write-back: when the memory tier's occupancy passes the high
 * watermark the demoter writes its policy's coldest blocks, straight from
 * their slots (the region is registered with every storage tier), to the
 * first storage tier that takes demotions and works, and frees each slot
 * once its record is durable, until occupancy is below the low watermark.
 * A block the catalog's admission rule for that tier refuses
 * (store/admission.h) is not written: it is dropped, its slot freed at
 * once; a block with a clean copy there moves down whatever the rule.
 * Two batches are in flight at a time, so the device has the next one
 * while the first is synced. An allocation that finds the memory tier full
 * takes the slot of a coldest block that has a clean copy at once (it moves
 * down to it, nothing is written), and otherwise waits only until the
 * demoter has freed some room (a batch), not for the whole pass. A block being read
 * or pinned is not moved. A block read back (store/fetch.c) keeps its
 * record in the storage tier as a clean copy (kvt_rec.copy_loc), so it
 * stays durable and its next demotion writes nothing; spare copies go only
 * after every block that is on that tier alone. When a storage tier is
 * full, its policy's coldest blocks are evicted (dropped: a cache need not
 * keep them; moving them down to a later tier would need memory slots
 * under the very pressure that caused it).
 *
 * Holds: a record's pins and busy counts (store/catalog.c) are its only
 * holds; the catalog reports the first and the last (hold_cb), and this
 * file passes them to the storage tier that has the record, and moves them
 * along when the record changes tier. A degraded storage tier is probed at
 * growing intervals (1 s to 64 s) and written again once a probe succeeds.
 *
 * All functions but open, add and close run with the store's lock held. */
#ifndef KVT_STORE_TIERING_H
#define KVT_STORE_TIERING_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store_impl.h"
#include "tiers/tier.h"

/* Storage tiers a store can have. */
#define KVT_MAX_STORAGE_TIERS 4

/* Set up tiering over s->mem with no storage tier yet (watermarks from
 * opts) and start the demoter. Returns 0, -EINVAL (bad watermarks),
 * -ENOMEM, or a pthread error. */
int kvt_tiering_open(struct kvt_store *s, const struct kvt_store_opts *opts);

/* Stop the demoter, log the removals still waiting, close every storage
 * tier. Accepts a store whose tiering did not open (s->tiering NULL). */
void kvt_tiering_close(struct kvt_store *s);

/* Append storage tier t to the list (the store owns it from now on, also
 * on failure): the memory region is registered with it and the records it
 * recovered are kept until their namespace attaches. Lock not held. Returns
 * 0, -ENOSPC (KVT_MAX_STORAGE_TIERS already), -EEXIST (a tier of its kind
 * is there), -ENOMEM. */
int kvt_tiering_add(struct kvt_store *s, struct kvt_storage_tier *t);

/* The storage tier of a kind, NULL for none (or the memory tier's kind). */
struct kvt_storage_tier *kvt_tiering_tier(struct kvt_store *s, enum kvt_tier kind);

/* Whether some storage tier has every cap of caps. */
bool kvt_tiering_has(struct kvt_store *s, unsigned caps);

/* The KEYED storage tiers, in order, into out[0..max): how many. */
size_t kvt_tiering_keyed(struct kvt_store *s, struct kvt_storage_tier **out, size_t max);

/* Index the recovered records of namespace ns (just created). */
void kvt_tiering_import(struct kvt_store *s, struct kvt_ns *ns);

/* A memory-tier slot for `bytes`: with a storage tier that takes
 * demotions and works, the demoter makes room (dropping only blocks the
 * admission rule refuses) and
 * this waits until it has, a bounded number of times; without one, the
 * policy's coldest blocks are dropped. The lock is released while waiting.
 * Returns 0, -ENOSPC (nothing can move or be evicted, or others took every
 * slot freed), -EINVAL, -ENOBUFS (the tier's errors). */
int kvt_tiering_alloc(struct kvt_store *s, uint64_t bytes, uint64_t *loc);

/* kvt_tiering_alloc without waiting: -EAGAIN where that would wait for the
 * demoter (room comes only once it has written blocks out). What needs no
 * wait is done: a victim with a clean copy goes down to it, one the
 * admission rule refuses is dropped. */
int kvt_tiering_alloc_now(struct kvt_store *s, uint64_t bytes, uint64_t *loc);

/* Wake the demoter if the memory tier is above the high watermark (after a
 * block entered it or stopped being busy: it may now be demoted). */
void kvt_tiering_kick(struct kvt_store *s);

/* Move record i to tier `to` at loc: accounting, policies, and its holds
 * carried from the old tier's record to the new one. */
void kvt_tiering_move(struct kvt_store *s, uint32_t i, enum kvt_tier to, uint64_t loc);

/* Keep the record at loc in tier `t` as record i's clean copy (i is in the
 * memory tier now); false when it cannot be kept (the record was freed). */
bool kvt_tiering_keep_copy(struct kvt_store *s, uint32_t i, enum kvt_tier t, uint64_t loc);

/* Record i (live) is being removed by the caller: log its removal in every
 * storage tier that takes demotions (a tombstone, with a sequence number
 * taken now, so a later write of the key wins over it), written by the
 * demoter or at close. */
void kvt_tiering_removed(struct kvt_store *s, uint32_t i);

/* Free record i's bytes in its tier and its copy, and forget it. */
void kvt_tiering_discard(struct kvt_store *s, uint32_t i);

/* Forget the records the storage tiers dropped for room (their locs are
 * gone): blocks lost are evictions, copies lost are written again. */
void kvt_tiering_forget_dropped(struct kvt_store *s);

/* Write every block only the memory tier holds, that the admission rule
 * of the first working storage tier that takes demotions admits, to that
 * tier as a clean copy (it stays in memory), until deadline_ns
 * (CLOCK_MONOTONIC). Lock not held. Returns 0 (out filled), -ENODEV (no
 * such tier), -ENOMEM. */
int kvt_tiering_write_down(struct kvt_store *s, uint64_t deadline_ns, struct kvt_write_down *out);

/* Fill every storage tier's stats into st. */
void kvt_tiering_stats(struct kvt_store *s, struct kvt_store_stats *st);

/* The named counters of the storage tier of a kind into out[0..max): the
 * tier's own, then what the store counts for it (copies dropped, blocks its
 * admission rule refused, for a tier that takes demotions). Returns how
 * many; 0 for no such tier. */
size_t kvt_tiering_counters(struct kvt_store *s, enum kvt_tier kind, struct kvt_counter *out,
			    size_t max);

/* Tier kind's devices (its devices op) into out[0..max): how many. Lock
 * held. */
size_t kvt_tiering_devices(struct kvt_store *s, enum kvt_tier kind, struct kvt_tier_device *out,
			   size_t max);

#endif /* KVT_STORE_TIERING_H */
