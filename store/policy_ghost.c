/* SPDX-License-Identifier: Apache-2.0 */
/* "ghost-lru": recency with a ghost list deciding how long a fresh block
 * may stay.
 *
 * A block is "fresh" when it enters the tier unknown, and "proven" once it is
 * used while there, or enters again while the ghost list (the keys of the
 * last blocks that left, four times as many as the tier holds) still
 * remembers it. Most blocks of a KV cache are used once and never again (a
 * one-off prompt, the last partial block of a request); a block used twice
 * is far more likely to be used a third time. So fresh blocks go first
 * while they hold more than a target share of the tier; below it, the least
 * recently used block goes, fresh or proven, as in LRU.
 *
 * The target adapts as ARC's does: a block that comes back soon after it
 * left as fresh (within as many evictions as the tier holds) says fresh
 * blocks deserved more room, one that comes back soon after it left as
 * proven says they deserved less. A workload where every block is used twice
 * close together (a conversation's next turn) so keeps its LRU behaviour;
 * one where fresh blocks rarely come back in reach gives them little room.
 *
 * Like tail-lru, only chain tails are evictable (a block is useless without
 * its parent); a block that becomes a tail again is placed by its last use.
 * Held blocks (pins, busy) leave the lists without entering the ghost list.
 *
 * "ghost-ends" is ghost-lru that also sends request ends first: a block that
 * has never had a child in a tier is where a request stopped, and in a KV
 * cache that is most often a partial last block, keyed by its own tokens,
 * which the next turn (a longer prompt) does not share. Such ends wait on a
 * list of their own, and the oldest of them goes before any other tail once
 * it is no longer among the newest (the chain being stored must keep its
 * last block until the next one links to it). A block that gains a child
 * leaves that list for good. */
#include <stdlib.h>

#include "store/policy_tails.h"

/* Lists (store/policy_tails.h): all fresh tails on one, proven, ends. */
enum { FRESH = 0, PROVEN = 1, END = 2 };

struct gl {
	struct kvt_ptails t;       /* first: p->state points at it */
	uint64_t n_fresh;          /* records tracked that are fresh */
	double share;              /* target share of fresh records, 0..1 */
};

static int gl_open(struct kvt_policy *p, bool ends)
{
	int err = kvt_ptails_open(p, sizeof(struct gl), 1, ends);

	if (!err)
		((struct gl *)p->state)->share = 0.5;
	return err;
}

static int gl_init(struct kvt_policy *p)
{
	return gl_open(p, false);
}

static int ge_init(struct kvt_policy *p)
{
	return gl_open(p, true);
}

/* A block came back that left as class `was`, `age` evictions ago: as in
 * ARC, the step is larger when the other class's ghosts outnumber its own. */
static void adapt(struct gl *g, unsigned was, uint64_t age)
{
	double mine = g->t.ghost.count[was] + 1.0, other = g->t.ghost.count[!was];
	double step = (other > mine ? other / mine : 1.0) / (double)(g->t.n ? g->t.n : 1);

	if (age > g->t.n)
		return; /* too long ago to say anything about the margin */
	g->share += was == FRESH ? step : -step;
	if (g->share < 0)
		g->share = 0;
	else if (g->share > 1)
		g->share = 1;
}

static void gl_insert(struct kvt_policy *p, uint32_t i)
{
	struct gl *g = p->state;
	struct kvt_rec *r = kvt_ptails_rec(p, i);
	bool proven = kvt_ptails_proven(r);
	unsigned was;
	uint64_t age;

	/* a new record's pval is 0 (fresh); one coming back from a hold or
	 * another tier keeps its class */
	if (!proven && kvt_ghost_take(&g->t.ghost, kvt_ghost_hash(r), &was, &age)) {
		adapt(g, was, age);
		proven = true;
	}
	g->n_fresh += !proven;
	kvt_ptails_insert(p, i, proven);
}

static void gl_touch(struct kvt_policy *p, uint32_t i)
{
	struct gl *g = p->state;

	if (!kvt_ptails_proven(kvt_ptails_rec(p, i)))
		g->n_fresh--;
	kvt_ptails_touch(p, i);
}

static void gl_remove(struct kvt_policy *p, uint32_t i)
{
	struct gl *g = p->state;
	bool proven = kvt_ptails_proven(kvt_ptails_rec(p, i));

	g->n_fresh -= !proven;
	kvt_ptails_remove(p, i, proven ? PROVEN : FRESH); /* ghost tag: the class */
}

static uint32_t gl_victim(struct kvt_policy *p)
{
	struct gl *g = p->state;
	uint32_t f = g->t.list[FRESH].tail, o = g->t.list[PROVEN].tail, e = g->t.list[END].tail;

	if (kvt_ptails_old_end(p) != KVT_NIL || (f == KVT_NIL && o == KVT_NIL))
		return e;
	if (f == KVT_NIL)
		return o;
	if (o == KVT_NIL || (double)g->n_fresh > g->share * (double)g->t.n ||
	    kvt_ptails_used(kvt_ptails_rec(p, f)) < kvt_ptails_used(kvt_ptails_rec(p, o)))
		return f;
	return o;
}

const struct kvt_policy_ops kvt_policy_ghost_lru_ops = {
	.name = "ghost-lru",
	.init = gl_init,
	.fini = kvt_ptails_close,
	.insert = gl_insert,
	.touch = gl_touch,
	.remove = gl_remove,
	.leaf_changed = kvt_ptails_leaf_changed,
	.victim = gl_victim,
};

const struct kvt_policy_ops kvt_policy_ghost_ends_ops = {
	.name = "ghost-ends",
	.init = ge_init,
	.fini = kvt_ptails_close,
	.insert = gl_insert,
	.touch = gl_touch,
	.remove = gl_remove,
	.leaf_changed = kvt_ptails_leaf_changed,
	.victim = gl_victim,
};
