/* SPDX-License-Identifier: Apache-2.0 */
/* The eviction cascade of the accounting replay; see cascade.h. */
#include "bench/trace/cascade.h"

#include <errno.h>
#include <string.h>

int kvt_cascade_init(struct kvt_cascade *c, const struct kvt_policy_ops *ops,
		     const uint64_t cap[KVT_TIER_COUNT], kvt_policy_cost_cb cost_cb,
		     void *cost_arg)
{
	int err;

	memset(c, 0, sizeof(*c));
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		if (!cap[t])
			continue;
		c->cap[t] = cap[t];
		c->order[c->n_tiers++] = (uint8_t)t;
	}
	if (!c->n_tiers)
		return -EINVAL;
	c->link = ops->leaf_changed != NULL;
	err = kvt_catalog_init(&c->cat, ops, 1 << 16);
	if (err)
		return err;
	for (int t = 0; t < KVT_TIER_COUNT; t++) {
		c->cat.policy[t].cost_cb = cost_cb;
		c->cat.policy[t].cost_arg = cost_arg;
	}
	return 0;
}

void kvt_cascade_fini(struct kvt_cascade *c)
{
	if (c->n_tiers)
		kvt_catalog_fini(&c->cat);
	c->n_tiers = 0;
}

/* The configured tier after t, KVT_TIER_NONE after the last. */
static uint8_t below(const struct kvt_cascade *c, uint8_t t)
{
	for (int k = 0; k + 1 < c->n_tiers; k++)
		if (c->order[k] == t)
			return c->order[k + 1];
	return KVT_TIER_NONE;
}

static void note_size(struct kvt_cascade *c, uint8_t t)
{
	if (c->cat.blocks[t] > c->st[t].peak_blocks)
		c->st[t].peak_blocks = c->cat.blocks[t];
}

/* Evict from tier t until it fits: each victim goes one tier down (which may
 * overflow in turn) or, from the last tier, out of the catalog. */
static void make_room(struct kvt_cascade *c, uint8_t t)
{
	while (c->cat.blocks[t] > c->cap[t]) {
		uint32_t v = kvt_catalog_victim(&c->cat, t);
		uint8_t next;

		if (v == KVT_NIL)
			return; /* nothing evictable: stay over capacity */
		c->st[t].evicted++;
		next = below(c, t);
		if (next != KVT_TIER_NONE && !kvt_catalog_admit(&c->cat, v, next)) {
			c->st[next].refused++;
			next = KVT_TIER_NONE;
		}
		if (next == KVT_TIER_NONE) {
			kvt_catalog_drop(&c->cat, v);
			c->drops++;
			continue;
		}
		kvt_catalog_move(&c->cat, v, next);
		c->st[next].demoted_in++;
		make_room(c, next);
		note_size(c, next);
	}
}

int kvt_cascade_insert(struct kvt_cascade *c, const struct kvt_key *key,
		       const struct kvt_key *parent, uint32_t size, uint32_t mrc_tick,
		       unsigned reuse_class)
{
	uint8_t top = c->order[0];
	uint32_t i;
	int err = kvt_index_insert(c->cat.idx, 0, key, &i);

	if (err)
		return err;
	kvt_index_rec(c->cat.idx, i)->size = size;
	kvt_index_rec(c->cat.idx, i)->mrc_tick = mrc_tick;
	kvt_index_rec(c->cat.idx, i)->reuse_class =
		(uint8_t)(reuse_class <= KVT_REUSE_CLASS_MAX ? reuse_class : 0);
	kvt_catalog_publish(&c->cat, i, top, c->link ? parent : NULL);
	c->st[top].inserted++;
	make_room(c, top);
	note_size(c, top);
	return 0;
}

void kvt_cascade_use(struct kvt_cascade *c, uint32_t i, bool promote)
{
	uint8_t top = c->order[0], from = kvt_index_rec(c->cat.idx, i)->tier;

	if (!promote || from == top) {
		kvt_catalog_touch(&c->cat, i);
		return;
	}
	kvt_catalog_move(&c->cat, i, top);
	c->st[from].promoted_out++;
	c->st[top].promoted_in++;
	make_room(c, top);
	note_size(c, top);
}
