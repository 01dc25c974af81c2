/* Movement of blocks between the DRAM and SSD tiers: the SSD tier's life in
 * the store, the background demoter, promotion on read, SSD eviction, and the
 * rebuild of the index from the segment log.
 *
 * Demotion is write-back: when DRAM occupancy passes the high watermark the
 * demoter writes the DRAM policy's coldest blocks to SSD in batches, straight
 * from their slots (the DRAM region is registered with the I/O engine), and
 * frees each slot once its record is durable, until occupancy is below the
 * low watermark. A block being read or pinned is not moved. When the SSD tier
 * is full, the SSD policy's coldest blocks (chain tails first under tail-lru)
 * are evicted. Promotion reads an SSD block into a fresh DRAM slot and moves
 * it there; from then on the DRAM policy decides how long it stays. Its SSD
 * record is kept as a clean copy (blocks never change once stored), so it
 * stays durable and its next demotion writes nothing; spare copies go only
 * after every block that is on SSD alone. Removals are logged in the SSD tier
 * (tombstones). A degraded SSD tier is probed at growing intervals (1 s to
 * 64 s) and written again once a probe succeeds.
 *
 * All functions but open/close run with the store's lock held. */
#ifndef KVT_STORE_TIERING_H
#define KVT_STORE_TIERING_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store_impl.h"

/* Open the SSD tier of opts (ssd_dir set), remember the records recovery
 * finds (they join the index as their namespace attaches), register the DRAM
 * region, start the demoter. Returns 0 or the -errno of kvt_ssd_open. */
int kvt_tiering_open(struct kvt_store *s, const struct kvt_store_opts *opts);

/* Stop the demoter and close the SSD tier. s->tiering NULL is accepted. */
void kvt_tiering_close(struct kvt_store *s);

/* Index the recovered records of namespace ns (just created). */
void kvt_tiering_import(struct kvt_store *s, struct kvt_ns *ns);

/* DRAM is full: have the demoter move blocks out, and wait for its round
 * (a round always ends: it moves what it can and returns; with the SSD tier
 * degraded it moves nothing, but its blocks in flight are let go). Returns
 * true when the round made progress (retry the allocation), false when
 * nothing could move (all busy or pinned, or degraded) or there is no
 * demoter to ask. */
bool kvt_tiering_make_room(struct kvt_store *s);

/* Whether the demoter can take blocks out of DRAM: started, not stopping,
 * SSD tier not degraded, and not called from the demoter itself. */
bool kvt_tiering_usable(struct kvt_store *s);

/* Wake the demoter if DRAM is above the high watermark (after a block
 * entered DRAM or stopped being busy: it may now be demoted). */
void kvt_tiering_kick(struct kvt_store *s);

/* Promote record i (live, on SSD, held busy by the caller) into DRAM. The
 * lock is released during the read. Returns 0 (i is now in DRAM), -ENOENT
 * (the record is gone), -EIO (checksum mismatch or device error: the block is
 * dropped and counted), -ENOSPC (no DRAM slot). */
int kvt_tiering_promote(struct kvt_store *s, uint32_t i);

/* Record i (live) is being removed by the caller: log its removal in the
 * SSD tier (a tombstone, with a sequence number taken now, so a later write
 * of the key wins over it), written by the demoter or at close. */
void kvt_tiering_removed(struct kvt_store *s, uint32_t i);

/* Record i is being discarded: free the SSD copy a promotion left it. */
void kvt_tiering_forget(struct kvt_store *s, uint32_t i);

/* Record i's pins, busy count, tier or loc changed: hold its SSD record while
 * it is live on SSD and pinned or busy (segment release then passes its
 * segment by), release the hold otherwise. Lock held. */
void kvt_tiering_sync_hold(struct kvt_store *s, uint32_t i);

/* Free the SSD record at loc (a discarded block). */
void kvt_tiering_free(struct kvt_store *s, uint64_t loc);

/* Fill the SSD tier's capacity, health and errors into st->tier[SSD] and
 * st->ssd. */
void kvt_tiering_stats(struct kvt_store *s, struct kvt_store_stats *st);

#endif /* KVT_STORE_TIERING_H */
