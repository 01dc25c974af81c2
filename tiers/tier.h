/* One interface for every tier. The store core calls a tier only through its
 * const ops table; each implementation (dram.c, ssd.c, ...) fills one.
 *
 * Memory tiers (DRAM) hand out slots the caller fills or reads in place
 * (slot_ptr); storage tiers (SSD) write from and read into such slots. A
 * location (`loc`) is the tier's own name for where a block lies. */
#ifndef KVT_TIERS_TIER_H
#define KVT_TIERS_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier/store.h"

struct kvt_tier_impl;

struct kvt_tier_ops {
	const char *name;
	/* Reserve room for `bytes`; 0 and *loc, or -ENOSPC when full. */
	int (*alloc)(struct kvt_tier_impl *t, uint64_t bytes, uint64_t *loc);
	/* Give back the room at loc. */
	void (*free)(struct kvt_tier_impl *t, uint64_t loc);
	/* Address of the bytes at loc (memory tiers), NULL otherwise. */
	void *(*slot_ptr)(struct kvt_tier_impl *t, uint64_t loc);
	/* Capacity and usage (the counters the store keeps are merged in). */
	void (*stats)(struct kvt_tier_impl *t, struct kvt_tier_stats *out);
	void (*close)(struct kvt_tier_impl *t);
};

struct kvt_tier_impl {
	const struct kvt_tier_ops *ops;
	enum kvt_tier kind;
};

#endif /* KVT_TIERS_TIER_H */
