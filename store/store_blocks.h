/* SPDX-License-Identifier: Apache-2.0 */
/* What the block operations of the store's API share: a slot lent to a
 * caller (store_put.c, store_get.c, store_keys.c).
 * Not a public header. */
#ifndef KVT_STORE_STORE_BLOCKS_H
#define KVT_STORE_STORE_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "store/store_impl.h"
#include "store/tiering.h"


/* What a lent slot carries for the store, kept in kvt_slot.priv. */
struct slot_priv {
	uint64_t handle;       /* the record */
	union {
		struct kvt_key parent; /* a reservation's: resolved at commit */
		uint64_t sum;          /* a lent block's kept sum (0: none) */
	};
	bool has_parent;
};

_Static_assert(sizeof(struct slot_priv) <= sizeof(((struct kvt_slot *)0)->priv),
	       "struct kvt_slot has no room for the store's record of a loan");

static inline struct slot_priv slot_get(const struct kvt_slot *slot)
{
	struct slot_priv p;

	memcpy(&p, slot->priv, sizeof(p));
	return p;
}

static inline void slot_set(struct kvt_slot *slot, const struct slot_priv *p)
{
	memset(slot->priv, 0, sizeof(slot->priv));
	memcpy(slot->priv, p, sizeof(*p));
}

/* A reservation of record handle, with its parent (NULL: none). */
static inline void slot_lend(struct kvt_slot *slot, uint64_t handle, const struct kvt_key *parent)
{
	struct slot_priv p = { .handle = handle, .has_parent = parent != NULL };

	if (parent)
		p.parent = *parent;
	slot_set(slot, &p);
}

/* A stored block of record handle lent for reading, with the sum the store
 * kept of it (0: none), so that kvt_slot_sum needs no lock. */
static inline void slot_lend_stored(struct kvt_slot *slot, uint64_t handle, uint64_t sum)
{
	struct slot_priv p = { .handle = handle, .sum = sum };

	slot_set(slot, &p);
}

/* Hold record i for a reader (lock held): neither evicted nor moved. */
static inline void hold_locked(struct kvt_store *s, uint32_t i)
{
	kvt_catalog_touch(&s->cat, i);
	kvt_catalog_busy(&s->cat, i, +1);
}

/* Let go of a reader's hold on record i (lock held): a block removed while
 * held goes with its last reader, and one no longer held may be demoted. */
static inline void unhold_locked(struct kvt_store *s, uint32_t i)
{
	kvt_catalog_busy(&s->cat, i, -1);
	if (rec(s, i)->state == KVT_REC_DYING && rec(s, i)->busy == 0)
		kvt_tiering_discard(s, i);
	else if (rec(s, i)->busy == 0)
		kvt_tiering_kick(s); /* it may be demoted now */
}

#endif /* KVT_STORE_STORE_BLOCKS_H */
