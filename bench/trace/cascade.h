/* The eviction cascade of the accounting replay: records of one block index
 * spread over up to four tiers (HBM, DRAM, SSD, remote), each with a capacity
 * in blocks and its own instance of a store policy. A block evicted from a
 * tier is demoted to the next configured tier; one evicted from the last is
 * dropped from the index. Keeps each record's kids_here (children in its own
 * tier) and tells the policies when a record stops or starts being a tail. */
#ifndef KVT_TRACE_CASCADE_H
#define KVT_TRACE_CASCADE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/types.h"
#include "store/index.h"
#include "store/policy.h"

#define KVT_CASCADE_INFINITE UINT64_MAX

/* What moved through one tier. */
struct kvt_cascade_tier_stats {
	uint64_t blocks, peak_blocks;
	uint64_t inserted;    /* new blocks written here */
	uint64_t demoted_in;  /* blocks evicted from the tier above into this one */
	uint64_t promoted_in; /* hits brought up from a lower tier */
	uint64_t evicted;     /* blocks that left for lack of room */
	uint64_t promoted_out;
};

struct kvt_cascade {
	struct kvt_index *idx;
	struct kvt_policy pol[KVT_TIER_COUNT];
	uint64_t cap[KVT_TIER_COUNT];     /* blocks; 0 = tier absent */
	uint8_t order[KVT_TIER_COUNT];    /* configured tiers, fastest first */
	int n_tiers;
	uint64_t drops;                   /* records freed so far: an epoch for
	                                   * callers that cache record numbers */
	struct kvt_cascade_tier_stats st[KVT_TIER_COUNT];
};

/* Set up c over idx with capacity cap[t] (blocks) for tier t (0 = absent;
 * index KVT_TIER_NONE ignored) and one instance of ops per configured tier.
 * Returns 0, -EINVAL (no tier configured), or -ENOMEM. */
int kvt_cascade_init(struct kvt_cascade *c, struct kvt_index *idx,
		     const struct kvt_policy_ops *ops, const uint64_t cap[KVT_TIER_COUNT],
		     kvt_policy_cost_cb cost_cb, void *cost_arg);
void kvt_cascade_fini(struct kvt_cascade *c);

/* Add a new live record for key under parent (KVT_NIL for none) into the
 * first tier, then evict down the cascade as needed. Returns 0 and *out
 * (which may already have been demoted, or dropped if the tiers hold
 * nothing: then *out = KVT_NIL), or -ENOMEM. */
int kvt_cascade_insert(struct kvt_cascade *c, const struct kvt_key *key, uint32_t parent,
		       uint32_t depth, uint32_t size, uint32_t *out);

/* Record i was used: touched in its tier, or with promote moved to the first
 * tier (evicting down the cascade as needed). */
void kvt_cascade_use(struct kvt_cascade *c, uint32_t i, bool promote);

#endif /* KVT_TRACE_CASCADE_H */
