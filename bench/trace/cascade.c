/* The eviction cascade of the accounting replay; see cascade.h. */
#include "bench/trace/cascade.h"

#include <errno.h>
#include <string.h>

static inline struct kvt_rec *rec(const struct kvt_cascade *c, uint32_t i)
{
	return kvt_index_rec(c->idx, i);
}

int kvt_cascade_init(struct kvt_cascade *c, struct kvt_index *idx,
		     const struct kvt_policy_ops *ops, const uint64_t cap[KVT_TIER_COUNT],
		     kvt_policy_cost_cb cost_cb, void *cost_arg)
{
	int err;

	memset(c, 0, sizeof(*c));
	c->idx = idx;
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		if (!cap[t])
			continue;
		err = kvt_policy_init(&c->pol[t], ops, idx);
		if (err) {
			kvt_cascade_fini(c);
			return err;
		}
		c->pol[t].cost_cb = cost_cb;
		c->pol[t].cost_arg = cost_arg;
		c->cap[t] = cap[t];
		c->order[c->n_tiers++] = (uint8_t)t;
	}
	return c->n_tiers ? 0 : -EINVAL;
}

void kvt_cascade_fini(struct kvt_cascade *c)
{
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++)
		if (c->pol[t].ops)
			kvt_policy_fini(&c->pol[t]);
	c->n_tiers = 0;
}

static void leaf_changed(struct kvt_cascade *c, uint32_t i, bool is_leaf)
{
	struct kvt_policy *p = &c->pol[rec(c, i)->tier];

	if (p->ops->leaf_changed)
		p->ops->leaf_changed(p, i, is_leaf);
}

/* Take i out of its tier. */
static void leave(struct kvt_cascade *c, uint32_t i)
{
	struct kvt_rec *r = rec(c, i);
	struct kvt_policy *p = &c->pol[r->tier];

	p->ops->remove(p, i);
	c->st[r->tier].blocks--;
	if (r->parent != KVT_NIL) {
		struct kvt_rec *pr = rec(c, r->parent);

		if (pr->tier == r->tier && --pr->kids_here == 0)
			leaf_changed(c, r->parent, true);
	}
	r->tier = KVT_TIER_NONE;
}

/* Put i into tier t as its most recently used record. */
static void enter(struct kvt_cascade *c, uint32_t i, uint8_t t)
{
	struct kvt_rec *r = rec(c, i);
	struct kvt_policy *p = &c->pol[t];
	struct kvt_cascade_tier_stats *st = &c->st[t];

	r->tier = t;
	r->kids_here = 0;
	for (uint32_t k = r->first_child; k != KVT_NIL; k = rec(c, k)->next_sibling)
		r->kids_here += rec(c, k)->tier == t;
	p->ops->insert(p, i);
	if (++st->blocks > st->peak_blocks)
		st->peak_blocks = st->blocks;
	if (r->parent != KVT_NIL) {
		struct kvt_rec *pr = rec(c, r->parent);

		if (pr->tier == t && pr->kids_here++ == 0)
			leaf_changed(c, r->parent, false);
	}
}

/* The configured tier after t, KVT_TIER_NONE after the last. */
static uint8_t below(const struct kvt_cascade *c, uint8_t t)
{
	for (int k = 0; k + 1 < c->n_tiers; k++)
		if (c->order[k] == t)
			return c->order[k + 1];
	return KVT_TIER_NONE;
}

/* Evict from tier t until it fits: each victim goes one tier down (which may
 * overflow in turn) or, from the last tier, out of the index. */
static void make_room(struct kvt_cascade *c, uint8_t t)
{
	struct kvt_policy *p = &c->pol[t];

	while (c->st[t].blocks > c->cap[t]) {
		uint32_t v = p->ops->victim(p);
		uint8_t next;

		if (v == KVT_NIL)
			return; /* nothing evictable: stay over capacity */
		leave(c, v);
		c->st[t].evicted++;
		next = below(c, t);
		if (next == KVT_TIER_NONE) {
			kvt_index_erase(c->idx, v);
			c->drops++;
			continue;
		}
		enter(c, v, next);
		c->st[next].demoted_in++;
		make_room(c, next);
	}
}

int kvt_cascade_insert(struct kvt_cascade *c, const struct kvt_key *key, uint32_t parent,
		       uint32_t depth, uint32_t size, uint32_t *out)
{
	uint8_t top = c->order[0];
	uint64_t drops = c->drops;
	struct kvt_rec *r;
	uint32_t i;
	int err = kvt_index_insert(c->idx, 0, key, &i);

	if (err)
		return err == -EEXIST ? -EINVAL : err;
	r = rec(c, i);
	r->state = KVT_REC_LIVE;
	r->depth = depth;
	r->size = size;
	if (parent != KVT_NIL)
		kvt_index_link(c->idx, parent, i);
	enter(c, i, top);
	c->st[top].inserted++;
	make_room(c, top);
	/* a dropped record may be i itself (it is then free, its number reusable) */
	*out = c->drops == drops || kvt_index_find(c->idx, 0, key) == i ? i : KVT_NIL;
	return 0;
}

void kvt_cascade_use(struct kvt_cascade *c, uint32_t i, bool promote)
{
	struct kvt_rec *r = rec(c, i);
	uint8_t top = c->order[0], from = r->tier;

	if (!promote || from == top) {
		struct kvt_policy *p = &c->pol[from];

		p->ops->touch(p, i);
		return;
	}
	leave(c, i);
	c->st[from].promoted_out++;
	enter(c, i, top);
	c->st[top].promoted_in++;
	make_room(c, top);
}
