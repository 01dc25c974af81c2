/* SPDX-License-Identifier: Apache-2.0 */
/* The block index: 128-bit key (+ namespace) -> block record.
 *
 * Records live in a chunked array and are named by a uint32 index, so the
 * hash table, the policy lists and the parent/child links are 4 bytes each and
 * records never move. The hash table is open addressing with linear probing
 * and backward-shift deletion (no tombstones), holding (tag, record) pairs so
 * most probes never touch a record. Not thread-safe: the store's lock guards it.
 *
 * Parent/child links: a record knows its parent (if the parent was stored when
 * the child was linked) and its cached children, so the policy can prefer
 * chain tails (leaves) and a removed parent can orphan its children. */
#ifndef KVT_STORE_INDEX_H
#define KVT_STORE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"

#define KVT_NIL UINT32_MAX

enum kvt_rec_state {
	KVT_REC_FREE = 0,    /* on the free list */
	KVT_REC_PENDING = 1, /* reserved, being filled; invisible to lookups */
	KVT_REC_LIVE = 2,    /* visible */
	KVT_REC_DYING = 3,   /* removed while readers hold it; freed on last release */
};

/* kvt_rec.flags */
enum {
	KVT_REC_MOVING = 1u << 0, /* being read up from a storage tier */
	KVT_REC_LEAVING = 1u << 1, /* being written down: already not counted
	                            * in its parent's kids_here (store/catalog.h) */
	KVT_REC_UNVERIFIED = 1u << 2, /* found in a region handed over at a
	                            * restart: its bytes are checked against
	                            * checksum before they are first used */
	KVT_REC_READ_STRAIGHT = 1u << 3, /* read once from a storage tier
	                            * straight into a caller's memory: the
	                            * next read brings it up into DRAM */
};

struct kvt_rec {
	struct kvt_key key;
	uint64_t loc;          /* tier-specific location (slot, SSD offset) */
	uint64_t copy_loc;     /* a clean copy in tier copy_tier (a block read up
	                        * from a storage tier keeps its record there) */
	uint64_t checksum;     /* XXH3-64 of the raw bytes, 0 = not computed */
	uint64_t pval;         /* policy's value: frequency, priority, ... */
	uint32_t pprev, pnext; /* policy's list links or heap position */
	uint32_t parent;       /* KVT_NIL: none stored (root or orphan) */
	uint32_t first_child;  /* cached children, a doubly linked sibling list */
	uint32_t next_sibling; /* (doubly: a shared system prompt can have */
	uint32_t prev_sibling; /*  thousands of children, unlinked in O(1)) */
	uint32_t size;         /* bytes of the block (raw) */
	uint32_t depth;        /* position in its prefix chain (0 = first block) */
	uint32_t kids_here;    /* cached children in the same tier as this record */
	uint16_t ns;           /* namespace number within the store */
	uint8_t tier;          /* enum kvt_tier */
	uint8_t state;         /* enum kvt_rec_state */
	uint16_t pins;
	uint16_t busy;         /* readers/movers holding the slot */
	uint8_t copy_tier;     /* enum kvt_tier of copy_loc; KVT_TIER_NONE: no copy */
	uint8_t flags;         /* KVT_REC_* flags */
	uint8_t reuse_class;   /* the engine's reuse-class hint when the block
	                        * was first stored (0 = none, up to
	                        * KVT_REUSE_CLASS_MAX; include/kvtier/store.h);
	                        * fills padding */
	uint32_t mrc_tick;     /* the MRC estimator's tick at the last reference,
	                        * 0 = none (store/mrc.h); fills the padding */
};

struct kvt_index;

/* Create an index sized for about `expected` records (it grows as needed).
 * Returns 0, -ENOMEM. */
int kvt_index_create(size_t expected, struct kvt_index **out);
void kvt_index_destroy(struct kvt_index *idx);

/* The record named by i (valid until it is freed). */
struct kvt_rec *kvt_index_rec(const struct kvt_index *idx, uint32_t i);

/* Find the record of (ns, key); KVT_NIL if absent. Finds records in any state
 * but FREE: callers check ->state. */
uint32_t kvt_index_find(const struct kvt_index *idx, uint16_t ns, const struct kvt_key *key);

/* Batched finds overlap their cache misses: hash every key, prefetch the
 * table slots, prefetch the records they name, then find. */
uint32_t kvt_index_hash(uint16_t ns, const struct kvt_key *key);
void kvt_index_prefetch_slot(const struct kvt_index *idx, uint32_t hash);
void kvt_index_prefetch_rec(const struct kvt_index *idx, uint32_t hash);
uint32_t kvt_index_find_hashed(const struct kvt_index *idx, uint16_t ns,
			       const struct kvt_key *key, uint32_t hash);

/* Insert a new record for (ns, key), zeroed but for key, ns, parent/children
 * (KVT_NIL) and state (PENDING). Returns its number in *out, or -EEXIST with
 * *out = the existing record, or -ENOMEM. */
int kvt_index_insert(struct kvt_index *idx, uint16_t ns, const struct kvt_key *key,
		     uint32_t *out);

/* Remove record i from the table and free it. Unlinks it from its parent and
 * orphans its children first (their parent becomes KVT_NIL). */
void kvt_index_erase(struct kvt_index *idx, uint32_t i);

/* Detach record i from its parent's child list (parent becomes KVT_NIL). */
void kvt_index_unlink(struct kvt_index *idx, uint32_t i);

/* Make every child of record i an orphan (parent KVT_NIL); i is left childless. */
void kvt_index_orphan_children(struct kvt_index *idx, uint32_t i);

/* Link child under parent (both live): child->parent = parent, and child
 * joins parent's child list. */
void kvt_index_link(struct kvt_index *idx, uint32_t parent, uint32_t child);

/* Whether i names a record slot of the index (in use or free): the check a
 * number coming from outside (a slot handle) must pass before kvt_index_rec. */
bool kvt_index_valid(const struct kvt_index *idx, uint32_t i);

/* Record numbers handed out so far: every valid i is below it (a scan of
 * all records checks ->state). */
uint32_t kvt_index_high(const struct kvt_index *idx);

/* Number of records in use. */
size_t kvt_index_count(const struct kvt_index *idx);

/* Number of records in use of namespace ns, in any state. */
uint32_t kvt_index_ns_count(const struct kvt_index *idx, uint16_t ns);

/* Bytes of memory the index holds (records, table, free list). */
size_t kvt_index_memory(const struct kvt_index *idx);

#endif /* KVT_STORE_INDEX_H */
