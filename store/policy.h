/* SPDX-License-Identifier: Apache-2.0 */
/* Eviction policies: which block of a tier leaves first.
 *
 * A policy instance orders the evictable records of one tier. The store tells
 * it what happens to records (insert, touch, remove, leaf change) and asks it
 * for the coldest one (victim). Records that are pinned or busy are removed
 * from the policy while they are, so victim() never returns them. Policies keep
 * their per-record state in the record's pval/pprev/pnext fields. Not
 * thread-safe: the store's lock guards them.
 *
 * Built in, by name:
 *   "lru"      — least recently used over all records of the tier
 *   "tail-lru" — least recently used over chain tails: a record with a cached
 *                child is not evictable, so a prefix is evicted from its end
 *   "lfu"      — least frequently used, LRU among equals
 *   "cost"     — keeps what is most expensive to recompute per byte
 *                (GreedyDual-Size: priority = clock + cost/size), evicting
 *                chain tails only, as tail-lru does
 *   "ghost-lru" — tail-lru whose fresh blocks (not used while here, nor
 *                remembered by a ghost list of recent evictions) go first
 *                while over an adaptive share (store/policy_ghost.c)
 *   "ghost-ends" — ghost-lru whose request ends (blocks that never had a
 *                child: mostly partial last blocks) go first, bar the newest
 *   "class-lru" — tail-lru that learns, per reuse class (kvt_rec's
 *                reuse_class, the engine's hint), how often fresh blocks
 *                come back, and sends first the fresh blocks of classes that
 *                rarely do; with no class it is tail-lru (store/policy_class.c)
 *   "class-ends" — class-lru whose request ends go first, as in ghost-ends
 *
 * A policy reads what it needs of a record at insert: its kids_here, its
 * reuse_class, its pval when it comes back from another tier. */
#ifndef KVT_STORE_POLICY_H
#define KVT_STORE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/index.h"

struct kvt_policy;

/* Recompute cost of a record, in arbitrary but consistent units (e.g. FLOPs
 * or seconds), for the cost-aware policy. NULL means cost = depth + 1. */
typedef double (*kvt_policy_cost_cb)(const struct kvt_rec *rec, void *arg);

struct kvt_policy_ops {
	const char *name;
	/* allocate private state into p->state; 0 or -errno */
	int (*init)(struct kvt_policy *p);
	void (*fini)(struct kvt_policy *p);
	/* record i entered the tier as the most recently used */
	void (*insert)(struct kvt_policy *p, uint32_t i);
	/* record i was used (also while held: then only its pval changes) */
	void (*touch)(struct kvt_policy *p, uint32_t i);
	/* record i left the tier (or became pinned/busy) */
	void (*remove)(struct kvt_policy *p, uint32_t i);
	/* record i is back from a hold (pin, read, a move that failed) that was
	 * not itself a use: it takes the place its pval says, not the hot end
	 * (a use while held was a touch before it). NULL: insert */
	void (*restore)(struct kvt_policy *p, uint32_t i);
	/* record i gained its first cached child (is_leaf false) or lost its last */
	void (*leaf_changed)(struct kvt_policy *p, uint32_t i, bool is_leaf);
	/* the coldest evictable record, KVT_NIL if none */
	uint32_t (*victim)(struct kvt_policy *p);
};

struct kvt_policy {
	const struct kvt_policy_ops *ops;
	struct kvt_index *idx;
	kvt_policy_cost_cb cost_cb;
	void *cost_arg;
	void *state;
};

/* The ops table of a built-in policy by name, NULL if unknown. */
const struct kvt_policy_ops *kvt_policy_find(const char *name);

/* The i-th built-in policy, NULL past the last: to list them all. */
const struct kvt_policy_ops *kvt_policy_at(size_t i);

/* Comma-separated names of the built-in policies, for --help texts. */
const char *kvt_policy_names(void);

/* Set up p with ops over idx. Returns 0 or -ENOMEM. */
int kvt_policy_init(struct kvt_policy *p, const struct kvt_policy_ops *ops,
		    struct kvt_index *idx);
void kvt_policy_fini(struct kvt_policy *p);

#endif /* KVT_STORE_POLICY_H */
