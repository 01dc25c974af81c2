/* SPDX-License-Identifier: Apache-2.0 */
/* The catalog: what the store knows about its blocks, without their bytes.
 *
 * It ties the index, one eviction policy per tier and the per-tier accounting
 * together, and keeps them consistent through every change a block goes
 * through: published into a tier, used, moved to another tier, held (pinned or
 * being read), dropped. The store's data path and the trace replay both make
 * their decisions through it, so a replay exercises the real policy code.
 * Not thread-safe: the caller's lock guards it. */
#ifndef KVT_STORE_CATALOG_H
#define KVT_STORE_CATALOG_H

#include <stdbool.h>
#include <stdint.h>

#include "store/admission.h"
#include "store/index.h"
#include "store/policy.h"

struct kvt_catalog {
	struct kvt_index *idx;
	struct kvt_policy policy[KVT_TIER_COUNT];
	struct kvt_admission admission; /* ops NULL: every demotion admitted */
	uint64_t used_bytes[KVT_TIER_COUNT];
	uint64_t blocks[KVT_TIER_COUNT];
	/* Optional: called when record i becomes held (its first pin or busy
	 * hold) or stops being held (its last one goes), in any state: the
	 * one place a hold starts or ends, for a tier that must know. */
	void (*hold_cb)(void *arg, uint32_t i, bool held);
	void *hold_arg;
	/* Optional: called when record i has become live in a tier (published,
	 * or moved there), its tier and loc set: for a tier that keeps what is
	 * needed to find the block again after a restart. */
	void (*placed_cb)(void *arg, uint32_t i);
	void *placed_arg;
};

/* Set up an index for about `expected` blocks and one `ops` policy per tier.
 * Returns 0, -ENOMEM. */
int kvt_catalog_init(struct kvt_catalog *cat, const struct kvt_policy_ops *ops,
		     size_t expected);
void kvt_catalog_fini(struct kvt_catalog *cat);

/* Make pending record i (r->size set) live in tier t, linked under the stored
 * block (same namespace) whose key is parent, if any. */
void kvt_catalog_publish(struct kvt_catalog *cat, uint32_t i, enum kvt_tier t,
			 const struct kvt_key *parent);

/* Record i (live) was used. */
void kvt_catalog_touch(struct kvt_catalog *cat, uint32_t i);

/* Move live record i to tier `to` (demotion, promotion). */
void kvt_catalog_move(struct kvt_catalog *cat, uint32_t i, enum kvt_tier to);

/* Live record i (held busy) is being written out of its tier: its parent
 * stops counting it as a child there now, as if it had left, so that the
 * parent can become a tail and go in the same batch, in the order its
 * policy would give once the child had left. Until the write ends, the
 * record counts in no parent's kids_here (KVT_REC_LEAVING); the move that
 * follows a write that took, or kvt_catalog_stayed after one that did not,
 * ends that, and so do retire and drop. A record with no parent in its
 * tier is left alone. */
void kvt_catalog_leaving(struct kvt_catalog *cat, uint32_t i);

/* The write of record i, marked by kvt_catalog_leaving, ended and it stays
 * in its tier (failed, refused, read, pinned meanwhile): its parent counts
 * it again. No-op for a record not marked. Call before its hold goes. */
void kvt_catalog_stayed(struct kvt_catalog *cat, uint32_t i);

/* Holds keep a live record out of its policy (never a victim) while > 0:
 * pins (kvt_pin) and busy (a reader or mover has its bytes). When the last
 * hold goes, the record takes the place its last use gives it: a hold is
 * not a use (a reader touches the record when it takes it). The record's
 * pins and busy are the only count of its holds; hold_cb mirrors their
 * first and last into a tier. */
void kvt_catalog_pin(struct kvt_catalog *cat, uint32_t i, int delta);
void kvt_catalog_busy(struct kvt_catalog *cat, uint32_t i, int delta);

/* Take live record i out of sight while readers still hold its bytes: it
 * leaves its policy and its prefix (children orphaned), state DYING, but stays
 * accounted until kvt_catalog_drop. */
void kvt_catalog_retire(struct kvt_catalog *cat, uint32_t i);

/* Forget record i in any state: accounting, policy, links, index. */
void kvt_catalog_drop(struct kvt_catalog *cat, uint32_t i);

/* The coldest evictable record of tier t, KVT_NIL if none. */
uint32_t kvt_catalog_victim(struct kvt_catalog *cat, enum kvt_tier t);

/* Use admission rule ops (NULL: none) for demotions into tier `into`,
 * replacing the one in use. Returns 0 or -ENOMEM (then no rule). */
int kvt_catalog_set_admission(struct kvt_catalog *cat, const struct kvt_admission_ops *ops,
			      enum kvt_tier into);

/* Whether live record i, evicted from its tier, should be written into tier
 * `to` (true) or dropped. True when no rule covers `to`. */
bool kvt_catalog_admit(struct kvt_catalog *cat, uint32_t i, enum kvt_tier to);

#endif /* KVT_STORE_CATALOG_H */
