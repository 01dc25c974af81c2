/* SPDX-License-Identifier: Apache-2.0 */
/* "lru" and "tail-lru": recency lists threaded through the records.
 *
 * lru keeps every record of the tier on one list, most recent at the head.
 * tail-lru keeps only chain tails (records with no cached child in the tier)
 * on the list, so a prefix leaves from its end: its parent is useless without
 * it, and the parent is what the next request sharing the prefix needs first.
 * When a parent becomes a tail again it is placed by its own last use (pval,
 * a tick), which is usually right at the cold end where its child was. */
#include <errno.h>
#include <stdlib.h>

#include "store/policy.h"
#include "store/policy_list.h"

struct lru {
	struct kvt_plist list;
	uint64_t tick;
};

static inline struct kvt_rec *rec(const struct kvt_policy *p, uint32_t i)
{
	return kvt_index_rec(p->idx, i);
}

static inline struct kvt_plist *list(const struct kvt_policy *p)
{
	return &((struct lru *)p->state)->list;
}

static int lru_init(struct kvt_policy *p)
{
	struct lru *l = malloc(sizeof(*l));

	if (!l)
		return -ENOMEM;
	kvt_plist_init(&l->list);
	l->tick = 0;
	p->state = l;
	return 0;
}

static void lru_fini(struct kvt_policy *p)
{
	free(p->state);
	p->state = NULL;
}

static void lru_insert(struct kvt_policy *p, uint32_t i)
{
	struct lru *l = p->state;

	rec(p, i)->pval = ++l->tick;
	kvt_plist_insert_after(p->idx, &l->list, KVT_NIL, i);
}

static void lru_touch(struct kvt_policy *p, uint32_t i)
{
	struct lru *l = p->state;

	rec(p, i)->pval = ++l->tick;
	if (kvt_plist_has(p->idx, &l->list, i) && l->list.head != i) {
		kvt_plist_unlink(p->idx, &l->list, i);
		kvt_plist_insert_after(p->idx, &l->list, KVT_NIL, i);
	}
}

static void lru_remove(struct kvt_policy *p, uint32_t i)
{
	if (kvt_plist_has(p->idx, list(p), i))
		kvt_plist_unlink(p->idx, list(p), i);
}

static uint32_t lru_victim(struct kvt_policy *p)
{
	return list(p)->tail;
}

/* ---- tail-lru ----------------------------------------------------------- */

static void lru_restore(struct kvt_policy *p, uint32_t i)
{
	kvt_plist_place_by_use(p->idx, list(p), i, 0);
}

const struct kvt_policy_ops kvt_policy_lru_ops = {
	.name = "lru",
	.init = lru_init,
	.fini = lru_fini,
	.insert = lru_insert,
	.touch = lru_touch,
	.remove = lru_remove,
	.restore = lru_restore,
	.leaf_changed = NULL,
	.victim = lru_victim,
};

static void tail_insert(struct kvt_policy *p, uint32_t i)
{
	struct lru *l = p->state;
	struct kvt_rec *r = rec(p, i);

	r->pval = ++l->tick;
	if (r->kids_here == 0)
		kvt_plist_insert_after(p->idx, &l->list, KVT_NIL, i);
}

static void tail_restore(struct kvt_policy *p, uint32_t i)
{
	if (rec(p, i)->kids_here == 0)
		kvt_plist_place_by_use(p->idx, list(p), i, 0);
}

static void tail_leaf_changed(struct kvt_policy *p, uint32_t i, bool is_leaf)
{
	if (is_leaf && !kvt_plist_has(p->idx, list(p), i))
		kvt_plist_place_by_use(p->idx, list(p), i, 0);
	else if (!is_leaf && kvt_plist_has(p->idx, list(p), i))
		kvt_plist_unlink(p->idx, list(p), i);
}

const struct kvt_policy_ops kvt_policy_tail_lru_ops = {
	.name = "tail-lru",
	.init = lru_init,
	.fini = lru_fini,
	.insert = tail_insert,
	.touch = lru_touch,
	.remove = lru_remove,
	.restore = tail_restore,
	.leaf_changed = tail_leaf_changed,
	.victim = lru_victim,
};
