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

struct lru {
	uint32_t head, tail; /* most / least recently used */
	uint64_t tick;
};

static inline struct kvt_rec *rec(const struct kvt_policy *p, uint32_t i)
{
	return kvt_index_rec(p->idx, i);
}

static bool on_list(const struct kvt_policy *p, uint32_t i)
{
	const struct lru *l = p->state;
	const struct kvt_rec *r = rec(p, i);

	return r->pprev != KVT_NIL || r->pnext != KVT_NIL || l->head == i;
}

static void list_unlink(struct kvt_policy *p, uint32_t i)
{
	struct lru *l = p->state;
	struct kvt_rec *r = rec(p, i);

	if (r->pprev != KVT_NIL)
		rec(p, r->pprev)->pnext = r->pnext;
	else
		l->head = r->pnext;
	if (r->pnext != KVT_NIL)
		rec(p, r->pnext)->pprev = r->pprev;
	else
		l->tail = r->pprev;
	r->pprev = r->pnext = KVT_NIL;
}

/* Insert i after `prev` (toward the cold end); prev KVT_NIL = at the head. */
static void list_insert_after(struct kvt_policy *p, uint32_t prev, uint32_t i)
{
	struct lru *l = p->state;
	struct kvt_rec *r = rec(p, i);
	uint32_t next = prev == KVT_NIL ? l->head : rec(p, prev)->pnext;

	r->pprev = prev;
	r->pnext = next;
	if (prev != KVT_NIL)
		rec(p, prev)->pnext = i;
	else
		l->head = i;
	if (next != KVT_NIL)
		rec(p, next)->pprev = i;
	else
		l->tail = i;
}

static int lru_init(struct kvt_policy *p)
{
	struct lru *l = malloc(sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->head = l->tail = KVT_NIL;
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
	list_insert_after(p, KVT_NIL, i);
}

static void lru_touch(struct kvt_policy *p, uint32_t i)
{
	struct lru *l = p->state;

	rec(p, i)->pval = ++l->tick;
	if (on_list(p, i) && l->head != i) {
		list_unlink(p, i);
		list_insert_after(p, KVT_NIL, i);
	}
}

static void lru_remove(struct kvt_policy *p, uint32_t i)
{
	if (on_list(p, i))
		list_unlink(p, i);
}

static uint32_t lru_victim(struct kvt_policy *p)
{
	return ((struct lru *)p->state)->tail;
}

/* ---- tail-lru ----------------------------------------------------------- */

/* Place i by its last use: after the last record (from the cold end) used
 * more recently than it. The list is in order of use, so one used last
 * (back from a read) goes to the head at once, and a cold one is found from
 * the tail in a few steps. */
static void place_by_use(struct kvt_policy *p, uint32_t i)
{
	struct lru *l = p->state;
	uint64_t use = rec(p, i)->pval;
	uint32_t cur = l->tail;

	if (l->head != KVT_NIL && rec(p, l->head)->pval <= use) {
		list_insert_after(p, KVT_NIL, i);
		return;
	}
	while (cur != KVT_NIL && rec(p, cur)->pval < use)
		cur = rec(p, cur)->pprev;
	list_insert_after(p, cur, i);
}

static void lru_restore(struct kvt_policy *p, uint32_t i)
{
	place_by_use(p, i);
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
		list_insert_after(p, KVT_NIL, i);
}

static void tail_restore(struct kvt_policy *p, uint32_t i)
{
	if (rec(p, i)->kids_here == 0)
		place_by_use(p, i);
}

static void tail_leaf_changed(struct kvt_policy *p, uint32_t i, bool is_leaf)
{
	if (is_leaf && !on_list(p, i))
		place_by_use(p, i);
	else if (!is_leaf && on_list(p, i))
		list_unlink(p, i);
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
