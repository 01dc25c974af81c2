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


/* What a lent slot carries for the store, kept in kvt_slot.priv. */
struct slot_priv {
	uint64_t handle;       /* the record */
	struct kvt_key parent; /* a reservation's parent, resolved at commit */
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

static inline void slot_lend(struct kvt_slot *slot, uint64_t handle, const struct kvt_key *parent)
{
	struct slot_priv p = { .handle = handle, .has_parent = parent != NULL };

	if (parent)
		p.parent = *parent;
	memset(slot->priv, 0, sizeof(slot->priv));
	memcpy(slot->priv, &p, sizeof(p));
}

#endif /* KVT_STORE_STORE_BLOCKS_H */
