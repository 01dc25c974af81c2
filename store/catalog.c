/* SPDX-License-Identifier: Apache-2.0 */
/* The catalog: see catalog.h. */
#include "store/catalog.h"

#include <errno.h>
#include <string.h>

static inline struct kvt_rec *rec(const struct kvt_catalog *cat, uint32_t i)
{
	return kvt_index_rec(cat->idx, i);
}

/* Only live records nobody holds are the policy's to order. */
static bool in_policy(const struct kvt_rec *r)
{
	return r->state == KVT_REC_LIVE && r->pins == 0 && r->busy == 0;
}

int kvt_catalog_init(struct kvt_catalog *cat, const struct kvt_policy_ops *ops,
		     size_t expected)
{
	int t, err;

	memset(cat, 0, sizeof(*cat));
	err = kvt_index_create(expected, &cat->idx);
	if (err)
		return err;
	for (t = 0; t < KVT_TIER_COUNT; t++) {
		err = kvt_policy_init(&cat->policy[t], ops, cat->idx);
		if (err)
			goto fail;
	}
	return 0;
fail:
	while (--t >= 0)
		kvt_policy_fini(&cat->policy[t]);
	kvt_index_destroy(cat->idx);
	cat->idx = NULL;
	return err;
}

void kvt_catalog_fini(struct kvt_catalog *cat)
{
	kvt_admission_fini(&cat->admission);
	for (int t = 0; t < KVT_TIER_COUNT; t++)
		kvt_policy_fini(&cat->policy[t]);
	kvt_index_destroy(cat->idx);
	cat->idx = NULL;
}

static void policy_leaf(struct kvt_catalog *cat, uint32_t i, bool is_leaf)
{
	struct kvt_rec *r = rec(cat, i);
	struct kvt_policy *p = &cat->policy[r->tier];

	if (in_policy(r) && p->ops->leaf_changed)
		p->ops->leaf_changed(p, i, is_leaf);
}

/* i entered its tier: its parent, if in the same tier, gains a child there. */
static void parent_gain(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i), *p;

	if (r->parent == KVT_NIL || (r->flags & KVT_REC_LEAVING))
		return;
	p = rec(cat, r->parent);
	if (p->tier == r->tier && p->kids_here++ == 0)
		policy_leaf(cat, r->parent, false);
}

/* i is leaving its tier (or its parent): the reverse of parent_gain. One
 * marked leaving was taken off its parent's count already. */
static void parent_lose(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i), *p;

	if (r->flags & KVT_REC_LEAVING) {
		r->flags &= (uint8_t)~KVT_REC_LEAVING;
		return;
	}
	if (r->parent == KVT_NIL)
		return;
	p = rec(cat, r->parent);
	if (p->tier == r->tier && --p->kids_here == 0)
		policy_leaf(cat, r->parent, true);
}

static uint32_t count_kids_in(const struct kvt_catalog *cat, uint32_t i, uint8_t tier)
{
	uint32_t n = 0;

	for (uint32_t c = rec(cat, i)->first_child; c != KVT_NIL; c = rec(cat, c)->next_sibling)
		n += rec(cat, c)->tier == tier && rec(cat, c)->state == KVT_REC_LIVE &&
		     !(rec(cat, c)->flags & KVT_REC_LEAVING);
	return n;
}

void kvt_catalog_leaving(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i);

	if (r->state != KVT_REC_LIVE || (r->flags & KVT_REC_LEAVING) || r->parent == KVT_NIL ||
	    rec(cat, r->parent)->tier != r->tier)
		return;
	parent_lose(cat, i);
	r->flags |= KVT_REC_LEAVING;
}

void kvt_catalog_stayed(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i);

	if (!(r->flags & KVT_REC_LEAVING))
		return;
	r->flags &= (uint8_t)~KVT_REC_LEAVING;
	parent_gain(cat, i);
}

void kvt_catalog_publish(struct kvt_catalog *cat, uint32_t i, enum kvt_tier t,
			 const struct kvt_key *parent)
{
	struct kvt_rec *r = rec(cat, i);
	uint32_t p = parent ? kvt_index_find(cat->idx, r->ns, parent) : KVT_NIL;

	r->tier = (uint8_t)t;
	r->state = KVT_REC_LIVE;
	r->flags &= (uint8_t)~KVT_REC_LEAVING;
	r->kids_here = 0;
	r->depth = 0;
	if (p != KVT_NIL && p != i && rec(cat, p)->state == KVT_REC_LIVE) {
		kvt_index_link(cat->idx, p, i);
		r->depth = rec(cat, p)->depth + 1;
	}
	/* children stored before this block (it was evicted and comes back)
	 * stay orphans: they name it only by key, and relinking them would cost
	 * a scan; the next save of those children relinks nothing either, which
	 * only makes them tails, the safe side. */
	cat->used_bytes[t] += r->size;
	cat->blocks[t]++;
	parent_gain(cat, i);
	if (in_policy(r))
		cat->policy[t].ops->insert(&cat->policy[t], i);
	if (cat->admission.ops && cat->admission.ops->stored)
		cat->admission.ops->stored(&cat->admission, i);
	if (cat->placed_cb)
		cat->placed_cb(cat->placed_arg, i);
}

/* Record i is leaving its tier: the admission rule of that tier hears it. */
static void admission_left(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_admission *a = &cat->admission;

	if (a->ops && a->ops->left && rec(cat, i)->tier == a->tier)
		a->ops->left(a, i);
}

void kvt_catalog_touch(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i);

	/* a held record is used too: its pval says so when the hold ends */
	if (r->state == KVT_REC_LIVE)
		cat->policy[r->tier].ops->touch(&cat->policy[r->tier], i);
	if (cat->admission.ops && cat->admission.ops->used)
		cat->admission.ops->used(&cat->admission, i);
}

void kvt_catalog_move(struct kvt_catalog *cat, uint32_t i, enum kvt_tier to)
{
	struct kvt_rec *r = rec(cat, i);
	bool tracked = in_policy(r);

	if (tracked)
		cat->policy[r->tier].ops->remove(&cat->policy[r->tier], i);
	admission_left(cat, i);
	parent_lose(cat, i);
	cat->used_bytes[r->tier] -= r->size;
	cat->blocks[r->tier]--;
	r->tier = (uint8_t)to;
	r->kids_here = count_kids_in(cat, i, r->tier);
	cat->used_bytes[to] += r->size;
	cat->blocks[to]++;
	parent_gain(cat, i);
	/* it enters the tier as its most recent; a held one takes its place
	 * (in the new policy's own terms) when the hold ends */
	if (tracked)
		cat->policy[to].ops->insert(&cat->policy[to], i);
	else if (r->state == KVT_REC_LIVE)
		cat->policy[to].ops->touch(&cat->policy[to], i);
	if (cat->placed_cb && r->state == KVT_REC_LIVE)
		cat->placed_cb(cat->placed_arg, i);
}

static void hold(struct kvt_catalog *cat, uint32_t i, uint16_t *counter, int delta)
{
	struct kvt_rec *r = rec(cat, i);
	bool before = in_policy(r), held = r->pins || r->busy;
	struct kvt_policy *p = &cat->policy[r->tier];

	*counter = (uint16_t)(*counter + delta);
	if (before && !in_policy(r))
		p->ops->remove(p, i);
	else if (!before && in_policy(r))
		(p->ops->restore ? p->ops->restore : p->ops->insert)(p, i);
	if (cat->hold_cb && held != (r->pins || r->busy))
		cat->hold_cb(cat->hold_arg, i, !held);
}

void kvt_catalog_pin(struct kvt_catalog *cat, uint32_t i, int delta)
{
	hold(cat, i, &rec(cat, i)->pins, delta);
}

void kvt_catalog_busy(struct kvt_catalog *cat, uint32_t i, int delta)
{
	hold(cat, i, &rec(cat, i)->busy, delta);
}

/* Leave the prefix graph: no longer a child of its parent, no longer a parent. */
static void detach_links(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i);

	parent_lose(cat, i);
	kvt_index_unlink(cat->idx, i);
	kvt_index_orphan_children(cat->idx, i);
	r->kids_here = 0;
}

void kvt_catalog_retire(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i);

	if (in_policy(r))
		cat->policy[r->tier].ops->remove(&cat->policy[r->tier], i);
	admission_left(cat, i);
	detach_links(cat, i);
	r->state = KVT_REC_DYING;
}

void kvt_catalog_drop(struct kvt_catalog *cat, uint32_t i)
{
	struct kvt_rec *r = rec(cat, i);

	if (r->state == KVT_REC_LIVE || r->state == KVT_REC_DYING) {
		if (in_policy(r))
			cat->policy[r->tier].ops->remove(&cat->policy[r->tier], i);
		if (r->state == KVT_REC_LIVE)
			admission_left(cat, i); /* a dying one left at retire */
		detach_links(cat, i);
		cat->used_bytes[r->tier] -= r->size;
		cat->blocks[r->tier]--;
	}
	kvt_index_erase(cat->idx, i);
}

uint32_t kvt_catalog_victim(struct kvt_catalog *cat, enum kvt_tier t)
{
	return cat->policy[t].ops->victim(&cat->policy[t]);
}

int kvt_catalog_set_admission(struct kvt_catalog *cat, const struct kvt_admission_ops *ops,
			      enum kvt_tier into)
{
	kvt_admission_fini(&cat->admission);
	return ops ? kvt_admission_init(&cat->admission, ops, cat->idx, (uint8_t)into) : 0;
}

bool kvt_catalog_admit(struct kvt_catalog *cat, uint32_t i, enum kvt_tier to)
{
	struct kvt_admission *a = &cat->admission;
	bool ok;

	if (!a->ops || to != a->tier)
		return true;
	ok = a->ops->admit(a, i);
	if (ok)
		a->admitted++;
	else
		a->refused++;
	return ok;
}
