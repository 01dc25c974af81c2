/* SPDX-License-Identifier: Apache-2.0 */
/* The eviction cascade of the accounting replay: blocks of the store's
 * catalog (its index and one instance of a store policy per tier) spread over
 * up to four tiers (HBM, DRAM, SSD, remote), each with a capacity in blocks.
 * A block evicted from a tier is demoted to the next configured tier; one
 * evicted from the last is dropped. Every decision is the catalog's and the
 * policy's, as in the store; only the capacities are counted in blocks.
 *
 * Blocks are linked under their parents only for policies that order by it
 * (those with a leaf_changed op: tail-lru, cost) and for SSD admission rules,
 * which look at a block's place in its chain (the replay sets link after
 * init). For the others the links change no decision, and unlinking an
 * evicted block from a parent with thousands of children (a shared system
 * prompt) is a scan of its siblings. */
#ifndef KVT_TRACE_CASCADE_H
#define KVT_TRACE_CASCADE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/types.h"
#include "store/catalog.h"

#define KVT_CASCADE_INFINITE UINT64_MAX

/* What moved through one tier. */
struct kvt_cascade_tier_stats {
	uint64_t peak_blocks;
	uint64_t inserted;    /* new blocks written here */
	uint64_t demoted_in;  /* blocks evicted from the tier above into this one */
	uint64_t promoted_in; /* hits brought up from a lower tier */
	uint64_t evicted;     /* blocks that left for lack of room */
	uint64_t promoted_out;
	uint64_t refused;     /* evicted from the tier above, not admitted here
	                       * (dropped instead) */
};

struct kvt_cascade {
	struct kvt_catalog cat;
	uint64_t cap[KVT_TIER_COUNT];     /* blocks; 0 = tier absent */
	uint8_t order[KVT_TIER_COUNT];    /* configured tiers, fastest first */
	int n_tiers;
	bool link;                        /* link blocks under their parents */
	uint64_t drops;                   /* records freed so far: an epoch for
	                                   * callers that cache record numbers */
	struct kvt_cascade_tier_stats st[KVT_TIER_COUNT];
};

/* Set up c with capacity cap[t] (blocks) for tier t (0 = absent; index
 * KVT_TIER_NONE ignored), policy ops in every tier, and cost_cb for the
 * cost-aware policy. Returns 0, -EINVAL (no tier configured), or -ENOMEM. */
int kvt_cascade_init(struct kvt_cascade *c, const struct kvt_policy_ops *ops,
		     const uint64_t cap[KVT_TIER_COUNT], kvt_policy_cost_cb cost_cb,
		     void *cost_arg);
void kvt_cascade_fini(struct kvt_cascade *c);

/* Store a new block under the stored block whose key is parent (NULL: none)
 * in the first tier, its record stamped with mrc_tick (store/mrc.h; 0 for
 * none) and reuse_class (kvtier/types.h; 0 = none, one out of range taken
 * as 0), then evict down the cascade as needed. Returns 0 or -ENOMEM;
 * -EEXIST if key is stored already. */
int kvt_cascade_insert(struct kvt_cascade *c, const struct kvt_key *key,
		       const struct kvt_key *parent, uint32_t size, uint32_t mrc_tick,
		       unsigned reuse_class);

/* Record i was used: touched in its tier, or with promote moved to the first
 * tier (evicting down the cascade as needed). */
void kvt_cascade_use(struct kvt_cascade *c, uint32_t i, bool promote);

/* Blocks now in tier t. */
static inline uint64_t kvt_cascade_blocks(const struct kvt_cascade *c, int t)
{
	return c->cat.blocks[t];
}

#endif /* KVT_TRACE_CASCADE_H */
