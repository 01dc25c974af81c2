/* SPDX-License-Identifier: Apache-2.0 */
/* Recency lists threaded through the records' pprev/pnext links, for the
 * policies that order blocks by use: one list (lru, tail-lru) or one per
 * class of block (ghost-lru, class-lru). A record is on one list at most,
 * the head its most recent use. The caller says which list a record is on;
 * the store's lock guards them. */
#ifndef KVT_STORE_POLICY_LIST_H
#define KVT_STORE_POLICY_LIST_H

#include <stdbool.h>
#include <stdint.h>

#include "store/index.h"

struct kvt_plist {
	uint32_t head, tail; /* most / least recently used */
};

static inline void kvt_plist_init(struct kvt_plist *l)
{
	l->head = l->tail = KVT_NIL;
}

/* Whether record i is on l (it is on no other list than l if on any). */
static inline bool kvt_plist_has(const struct kvt_index *idx, const struct kvt_plist *l,
				 uint32_t i)
{
	const struct kvt_rec *r = kvt_index_rec(idx, i);

	return r->pprev != KVT_NIL || r->pnext != KVT_NIL || l->head == i;
}

static inline void kvt_plist_unlink(const struct kvt_index *idx, struct kvt_plist *l,
				    uint32_t i)
{
	struct kvt_rec *r = kvt_index_rec(idx, i);

	if (r->pprev != KVT_NIL)
		kvt_index_rec(idx, r->pprev)->pnext = r->pnext;
	else
		l->head = r->pnext;
	if (r->pnext != KVT_NIL)
		kvt_index_rec(idx, r->pnext)->pprev = r->pprev;
	else
		l->tail = r->pprev;
	r->pprev = r->pnext = KVT_NIL;
}

/* Insert i after prev (toward the cold end); prev KVT_NIL = at the head. */
static inline void kvt_plist_insert_after(const struct kvt_index *idx, struct kvt_plist *l,
					  uint32_t prev, uint32_t i)
{
	struct kvt_rec *r = kvt_index_rec(idx, i);
	uint32_t next = prev == KVT_NIL ? l->head : kvt_index_rec(idx, prev)->pnext;

	r->pprev = prev;
	r->pnext = next;
	if (prev != KVT_NIL)
		kvt_index_rec(idx, prev)->pnext = i;
	else
		l->head = i;
	if (next != KVT_NIL)
		kvt_index_rec(idx, next)->pprev = i;
	else
		l->tail = i;
}

/* Place i by its last use (pval >> shift, a tick): after the last record,
 * from the cold end, used more recently than it. The list is in order of
 * use, so one used last (back from a read) goes to the head at once, and a
 * cold one (a parent that became a tail again) is found from the tail in a
 * few steps. */
static inline void kvt_plist_place_by_use(const struct kvt_index *idx, struct kvt_plist *l,
					  uint32_t i, unsigned shift)
{
	uint64_t use = kvt_index_rec(idx, i)->pval >> shift;
	uint32_t cur = l->tail;

	if (l->head != KVT_NIL && kvt_index_rec(idx, l->head)->pval >> shift <= use) {
		kvt_plist_insert_after(idx, l, KVT_NIL, i);
		return;
	}
	while (cur != KVT_NIL && kvt_index_rec(idx, cur)->pval >> shift < use)
		cur = kvt_index_rec(idx, cur)->pprev;
	kvt_plist_insert_after(idx, l, cur, i);
}

#endif /* KVT_STORE_POLICY_LIST_H */
