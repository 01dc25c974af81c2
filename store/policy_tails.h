/* SPDX-License-Identifier: Apache-2.0 */
/* What ghost-lru and class-lru (store/policy_ghost.c, store/policy_class.c)
 * share: chain tails on recency lists by class, a ghost list of the blocks
 * that left, and, in their "-ends" forms, request ends on a list of their
 * own. Each policy keeps only how it chooses among the lists' tails and what
 * it learns from blocks coming back.
 *
 * A block is "fresh" when it enters the tier unknown, and "proven" once it
 * is used while there, or enters again while the ghost list remembers it.
 * Fresh tails are on one list per reuse class (n_fresh lists: ghost-lru
 * keeps all on list 0), proven ones on list n_fresh, request ends (blocks
 * that never had a child in a tier, under the "-ends" forms) on n_fresh + 1.
 * Only chain tails are on a list (a block is useless without its parent); a
 * block that becomes a tail again is placed by its last use. */
#ifndef KVT_STORE_POLICY_TAILS_H
#define KVT_STORE_POLICY_TAILS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/ghost.h"
#include "store/policy.h"
#include "store/policy_list.h"

/* pval: the last use tick above two bits, INNER (the block has had a child
 * in a tier: it is not where a request ended) and PROVEN. */
#define KVT_PTAILS_PROVEN 1u
#define KVT_PTAILS_INNER 2u
#define KVT_PTAILS_SHIFT 2

/* Request ends used in the last n / this many ticks stay. */
#define KVT_PTAILS_END_WINDOW_DIV 4

/* The most lists: a fresh list per reuse class, proven, ends. */
#define KVT_PTAILS_LISTS (KVT_REUSE_CLASS_MAX + 3)

/* The first member of the policy's state (p->state points at it). */
struct kvt_ptails {
	struct kvt_plist list[KVT_PTAILS_LISTS];
	unsigned n_fresh;       /* fresh lists: reuse classes 0..n_fresh-1 */
	bool ends;              /* request ends on their own list */
	uint64_t tick;
	uint64_t n;             /* records tracked */
	struct kvt_ghost ghost; /* tag: the policy's, of the class a block left as */
};

static inline struct kvt_rec *kvt_ptails_rec(const struct kvt_policy *p, uint32_t i)
{
	return kvt_index_rec(p->idx, i);
}

static inline bool kvt_ptails_proven(const struct kvt_rec *r)
{
	return r->pval & KVT_PTAILS_PROVEN;
}

/* The tick of r's last use. */
static inline uint64_t kvt_ptails_used(const struct kvt_rec *r)
{
	return r->pval >> KVT_PTAILS_SHIFT;
}

static inline unsigned kvt_ptails_proven_list(const struct kvt_ptails *t)
{
	return t->n_fresh;
}

static inline unsigned kvt_ptails_end_list(const struct kvt_ptails *t)
{
	return t->n_fresh + 1;
}

/* r's reuse class as a fresh list: 0 for a class out of range (and for
 * every class where there is one fresh list). */
static inline unsigned kvt_ptails_fresh_list(const struct kvt_ptails *t,
					     const struct kvt_rec *r)
{
	return r->reuse_class < t->n_fresh ? r->reuse_class : 0;
}

/* The list a tail is kept on. */
static inline unsigned kvt_ptails_list_of(const struct kvt_ptails *t, const struct kvt_rec *r)
{
	if (t->ends && !(r->pval & KVT_PTAILS_INNER))
		return kvt_ptails_end_list(t);
	return kvt_ptails_proven(r) ? kvt_ptails_proven_list(t) : kvt_ptails_fresh_list(t, r);
}

/* The list record i is on (or goes on). */
static inline struct kvt_plist *kvt_ptails_list_for(const struct kvt_policy *p, uint32_t i)
{
	struct kvt_ptails *t = p->state;

	return &t->list[kvt_ptails_list_of(t, kvt_ptails_rec(p, i))];
}

static inline bool kvt_ptails_on_list(const struct kvt_policy *p, uint32_t i)
{
	return kvt_plist_has(p->idx, kvt_ptails_list_for(p, i), i);
}

/* Record i was used: proven, and at the head of its list if it is a tail.
 * The caller learns from a fresh block's use before. Inline: lookups call it
 * for every hit. */
static inline void kvt_ptails_touch(struct kvt_policy *p, uint32_t i)
{
	struct kvt_ptails *t = p->state;
	struct kvt_rec *r = kvt_ptails_rec(p, i);
	bool listed = kvt_ptails_on_list(p, i);

	if (listed)
		kvt_plist_unlink(p->idx, kvt_ptails_list_for(p, i), i);
	r->pval = ++t->tick << KVT_PTAILS_SHIFT | (r->pval & KVT_PTAILS_INNER) | KVT_PTAILS_PROVEN;
	if (listed)
		kvt_plist_insert_after(p->idx, kvt_ptails_list_for(p, i), KVT_NIL, i);
}

/* Allocate the policy's state of `size` bytes, a struct kvt_ptails first,
 * zeroed but for it, into p->state. 0 or -ENOMEM. */
int kvt_ptails_open(struct kvt_policy *p, size_t size, unsigned n_fresh, bool ends);

/* The policy ops' fini. */
void kvt_ptails_close(struct kvt_policy *p);

/* Record i entered the tier, proven or not (the caller has asked the ghost
 * list); a new record's pval is 0, one back from a hold or another tier
 * keeps its INNER bit. */
void kvt_ptails_insert(struct kvt_policy *p, uint32_t i, bool proven);

/* Record i left the tier, or is held: a block that left becomes a ghost
 * with ghost_tag. */
void kvt_ptails_remove(struct kvt_policy *p, uint32_t i, unsigned ghost_tag);

/* The policy ops' leaf_changed. */
void kvt_ptails_leaf_changed(struct kvt_policy *p, uint32_t i, bool is_leaf);

/* The oldest request end, if it may go before every other tail: not when it
 * was used in the last n / KVT_PTAILS_END_WINDOW_DIV ticks, so that the
 * newest block of a chain being stored (or of requests stored side by side)
 * is not evicted before its next block links to it. KVT_NIL otherwise. */
static inline uint32_t kvt_ptails_old_end(const struct kvt_policy *p)
{
	const struct kvt_ptails *t = p->state;
	uint32_t e = t->list[kvt_ptails_end_list(t)].tail;

	if (e != KVT_NIL &&
	    t->tick - kvt_ptails_used(kvt_ptails_rec(p, e)) > t->n / KVT_PTAILS_END_WINDOW_DIV)
		return e;
	return KVT_NIL;
}

#endif /* KVT_STORE_POLICY_TAILS_H */
