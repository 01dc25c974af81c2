/* SPDX-License-Identifier: Apache-2.0 */
/* A binary min-heap of records for the policies that order by a value rather
 * than by recency ("lfu", "cost"). Records are ordered by (pval, pprev):
 * pval is the policy's value, pprev a 32-bit use tick that breaks ties in
 * favour of the least recently used; pnext holds the record's heap position.
 * Not thread-safe, like every policy. */
#ifndef KVT_STORE_POLICY_HEAP_H
#define KVT_STORE_POLICY_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "store/index.h"

struct kvt_policy_heap {
	struct kvt_index *idx;
	uint32_t *v;   /* record numbers, v[0] the minimum */
	uint32_t n, cap;
	uint32_t tick; /* compared with serial-number arithmetic, so it may wrap */
};

void kvt_policy_heap_init(struct kvt_policy_heap *h, struct kvt_index *idx);
void kvt_policy_heap_fini(struct kvt_policy_heap *h);

/* Whether record i is on the heap. */
bool kvt_policy_heap_has(const struct kvt_policy_heap *h, uint32_t i);

/* Add record i with value pval, stamped as just used. Returns 0 or -ENOMEM
 * (the record is then left off the heap, i.e. not evictable). */
int kvt_policy_heap_push(struct kvt_policy_heap *h, uint32_t i, uint64_t pval);

/* Give record i (on the heap) value pval, stamped as just used. */
void kvt_policy_heap_update(struct kvt_policy_heap *h, uint32_t i, uint64_t pval);

/* Take record i off the heap; a record not on it is ignored. */
void kvt_policy_heap_remove(struct kvt_policy_heap *h, uint32_t i);

/* The minimum record, KVT_NIL when empty. */
static inline uint32_t kvt_policy_heap_min(const struct kvt_policy_heap *h)
{
	return h->n ? h->v[0] : KVT_NIL;
}

#endif /* KVT_STORE_POLICY_HEAP_H */
