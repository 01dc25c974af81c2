/* SPDX-License-Identifier: Apache-2.0 */
/* A ghost list: the hashes of the last `cap` blocks that left a cache, in
 * the order they left, each with a small tag (KVT_GHOST_TAG_BITS bits), so a policy can tell a block
 * that comes back from one never seen (ARC's B1/B2, 2Q's A1out). Bounded:
 * the oldest is forgotten when a new one comes. Not thread-safe. */
#ifndef KVT_STORE_GHOST_H
#define KVT_STORE_GHOST_H

#include <stdbool.h>
#include <stdint.h>

#include "store/index.h"

/* A tag is this many bits, which replace the low bits of the hash. */
#define KVT_GHOST_TAG_BITS 5
#define KVT_GHOST_TAG_MASK ((1u << KVT_GHOST_TAG_BITS) - 1)

struct kvt_ghost {
	uint64_t *ring;   /* hash | tag in the low bits, in order of arrival; 0 = taken */
	uint32_t *table;  /* ring position + 1 by hash, 0 = empty; twice cap */
	uint32_t cap;     /* a power of two */
	uint64_t added;   /* hashes ever added: the next one's sequence number */
	uint32_t count[2]; /* entries remembered, by the low bit of their tag */
};

/* The hash a ghost list remembers a record's key (and namespace) by. */
uint64_t kvt_ghost_hash(const struct kvt_rec *r);
/* The same for a key of namespace number ns that has no record. */
uint64_t kvt_ghost_hash_key(const struct kvt_key *key, uint16_t ns);

/* An empty ghost list of cap (rounded up to a power of two, at least 64)
 * entries. Returns 0 or -ENOMEM. */
int kvt_ghost_init(struct kvt_ghost *g, uint32_t cap);
void kvt_ghost_fini(struct kvt_ghost *g);

/* Remember hash h (its low bits are replaced by tag), forgetting the oldest
 * entry when full. A hash already there is remembered again, as new. */
void kvt_ghost_add(struct kvt_ghost *g, uint64_t h, unsigned tag);

/* If h is remembered: forget it, and return true with its tag and its age
 * (entries added since it). */
bool kvt_ghost_take(struct kvt_ghost *g, uint64_t h, unsigned *tag, uint64_t *age);

/* Keep up to cap entries from now on (the newest kept when shrinking).
 * Returns 0 or -ENOMEM (then nothing changed). */
int kvt_ghost_resize(struct kvt_ghost *g, uint32_t cap);

#endif /* KVT_STORE_GHOST_H */
