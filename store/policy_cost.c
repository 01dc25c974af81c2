/* SPDX-License-Identifier: Apache-2.0 */
/* "cost": GreedyDual-Size. Each record's priority is H = L + cost / size,
 * where cost is what recomputing the block would take (the policy's cost_cb,
 * or depth + 1 without one: a deeper block attends over a longer prefix) and
 * L is a clock that rises to the priority of each victim. A use resets H from
 * the current L, so a block that is cheap per byte but used often stays, while
 * one used long ago ages out as L passes it.
 *
 * Like tail-lru, only chain tails (no cached child in the tier) are
 * candidates: a block is useless without its parent, and a cost that grows
 * with depth would otherwise evict the prefixes every deeper block needs.
 * A record that becomes a tail again competes with the priority it had.
 *
 * Priorities are non-negative doubles kept in pval as their bit patterns,
 * which order like the values themselves. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/policy.h"
#include "store/policy_heap.h"

struct cost {
	struct kvt_policy_heap heap;
	double clock; /* L */
};

static uint64_t to_bits(double v)
{
	uint64_t b;

	if (!(v >= 0)) /* negative costs and NaN count as free to recompute */
		v = 0;
	memcpy(&b, &v, sizeof(b));
	return b;
}

static double from_bits(uint64_t b)
{
	double v;

	memcpy(&v, &b, sizeof(v));
	return v;
}

static uint64_t priority(const struct kvt_policy *p, uint32_t i)
{
	const struct cost *c = p->state;
	const struct kvt_rec *r = kvt_index_rec(p->idx, i);
	double cost = p->cost_cb ? p->cost_cb(r, p->cost_arg) : (double)r->depth + 1.0;
	double size = r->size ? (double)r->size : 1.0;

	return to_bits(c->clock + cost / size);
}

static int cost_init(struct kvt_policy *p)
{
	struct cost *c = malloc(sizeof(*c));

	if (!c)
		return -ENOMEM;
	kvt_policy_heap_init(&c->heap, p->idx);
	c->clock = 0;
	p->state = c;
	return 0;
}

static void cost_fini(struct kvt_policy *p)
{
	struct cost *c = p->state;

	if (c)
		kvt_policy_heap_fini(&c->heap);
	free(c);
	p->state = NULL;
}

static void cost_insert(struct kvt_policy *p, uint32_t i)
{
	struct cost *c = p->state;
	struct kvt_rec *r = kvt_index_rec(p->idx, i);

	r->pnext = KVT_NIL;
	if (r->kids_here == 0)
		(void)kvt_policy_heap_push(&c->heap, i, priority(p, i));
	else
		r->pval = priority(p, i);
}

static void cost_touch(struct kvt_policy *p, uint32_t i)
{
	struct cost *c = p->state;

	if (kvt_policy_heap_has(&c->heap, i))
		kvt_policy_heap_update(&c->heap, i, priority(p, i));
	else
		kvt_index_rec(p->idx, i)->pval = priority(p, i);
}

static void cost_leaf_changed(struct kvt_policy *p, uint32_t i, bool is_leaf)
{
	struct cost *c = p->state;
	bool on = kvt_policy_heap_has(&c->heap, i);

	if (is_leaf && !on)
		(void)kvt_policy_heap_push(&c->heap, i, kvt_index_rec(p->idx, i)->pval);
	else if (!is_leaf && on)
		kvt_policy_heap_remove(&c->heap, i);
}

/* Back from a hold: its priority stands. */
static void cost_restore(struct kvt_policy *p, uint32_t i)
{
	struct cost *c = p->state;
	struct kvt_rec *r = kvt_index_rec(p->idx, i);

	if (r->kids_here == 0)
		(void)kvt_policy_heap_push(&c->heap, i, r->pval);
}

static void cost_remove(struct kvt_policy *p, uint32_t i)
{
	struct cost *c = p->state;

	kvt_policy_heap_remove(&c->heap, i);
}

/* The caller evicts what this returns, so the clock rises to its priority
 * here; every priority is >= the clock, so an unused answer does no harm. */
static uint32_t cost_victim(struct kvt_policy *p)
{
	struct cost *c = p->state;
	uint32_t i = kvt_policy_heap_min(&c->heap);

	if (i != KVT_NIL)
		c->clock = from_bits(kvt_index_rec(p->idx, i)->pval);
	return i;
}

const struct kvt_policy_ops kvt_policy_cost_ops = {
	.name = "cost",
	.init = cost_init,
	.fini = cost_fini,
	.insert = cost_insert,
	.touch = cost_touch,
	.remove = cost_remove,
	.restore = cost_restore,
	.leaf_changed = cost_leaf_changed,
	.victim = cost_victim,
};
