/* SPDX-License-Identifier: Apache-2.0 */
/* "class-lru": tail-lru that learns, per reuse class, how often fresh
 * blocks come back, and sends the fresh blocks of rarely reused classes
 * first.
 *
 * An engine may tag the blocks it stores with a reuse class (kvt_rec's
 * reuse_class, a small number it chooses: kvtier's replay and connector use
 * the bit length of the request's output token count). A block is "fresh"
 * when it enters the tier unknown, and "proven" once it is used while there,
 * or enters again while a ghost list (the keys of the last blocks that
 * left, four times as many as the tier holds, each with the class it left
 * as) still remembers it. Per class the policy counts fresh blocks in, and
 * those that came back (used while fresh, or back from the ghost list after
 * leaving fresh); a class with enough blocks whose rate is under half the
 * mean rate of all hinted classes is "cold", and its fresh blocks are
 * ordered as if they had been used AGE_FACTOR times the tier's count of
 * ticks earlier: they go before any other tail but for much older ones.
 * Counts are halved now and then, so the rates follow the workload.
 *
 * Where classes come back equally often (or carry nothing, as class 0,
 * which is never cold) no class is cold and the policy is tail-lru: only
 * chain tails are evictable, in order of last use. Each class's fresh
 * blocks, the proven blocks (and request ends, below) are lists of their
 * own in order of use, so victim() compares the tails of at most
 * KVT_REUSE_CLASS_MAX + 3 lists.
 *
 * "class-ends" is class-lru that also sends request ends first, as
 * ghost-ends does (store/policy_ghost.c): a block that has never had a child
 * in the tier is most often a partial last block, which the next turn does
 * not share; the oldest end goes before any other tail once it is not among
 * the newest (used in the last quarter of the tier's count of ticks). */
#include <stdlib.h>

#include "store/policy_tails.h"

/* Lists (store/policy_tails.h): the fresh blocks of class c are list c;
 * then proven, then ends. */
enum { N_CLASSES = KVT_REUSE_CLASS_MAX + 1, PROVEN_L = N_CLASSES, END_L, N_LISTS };

/* Ghost tags: the class a block left as, and whether it left proven. */
#define TAG_PROVEN (1u << 4)

/* Fresh blocks of a cold class count as used this many times the tier's
 * count of ticks earlier than they were. */
#define AGE_FACTOR 2

/* A class is cold when its rate is under this share of the mean rate. */
#define COLD_SHARE 0.5

/* A class is judged once this many of its fresh blocks came in. */
#define MIN_BORN 64

/* Which classes are cold is worked out again after this many changes of
 * the counts (a class's rate moves little with one block). */
#define JUDGE_EVERY 64

/* Counts are halved once this many times the records tracked were born. */
#define HALF_LIFE 16

struct cl {
	struct kvt_ptails t;    /* first: p->state points at it */
	uint32_t changes;       /* of the counts since `cold` was worked out */
	uint16_t cold;          /* bit c: class c is cold */
	double born[N_CLASSES]; /* fresh blocks that came in, per class */
	double back[N_CLASSES]; /* of them, those that came back */
	double born_all;        /* born since the last halving */
};

_Static_assert(N_LISTS <= KVT_PTAILS_LISTS, "a list per class, proven and ends");

static inline unsigned class_of(const struct cl *g, const struct kvt_rec *r)
{
	return kvt_ptails_fresh_list(&g->t, r);
}

static int cl_init(struct kvt_policy *p)
{
	return kvt_ptails_open(p, sizeof(struct cl), N_CLASSES, false);
}

static int ce_init(struct kvt_policy *p)
{
	return kvt_ptails_open(p, sizeof(struct cl), N_CLASSES, true);
}

/* A fresh block of class c came back (used, or back from the ghost list). */
static void came_back(struct cl *g, unsigned c)
{
	if (c) {
		g->back[c] += 1;
		g->changes++;
	}
}

/* A fresh block of class c came in. */
static void was_born(struct cl *g, unsigned c)
{
	if (!c)
		return;
	g->born[c] += 1;
	g->born_all += 1;
	g->changes++;
	if (g->born_all > (double)HALF_LIFE * (double)(g->t.n > 1024 ? g->t.n : 1024)) {
		for (unsigned k = 1; k < N_CLASSES; k++) {
			g->born[k] /= 2;
			g->back[k] /= 2;
		}
		g->born_all /= 2;
	}
}

/* Work out which classes are cold: those with enough fresh blocks whose
 * rate of coming back is under half the mean rate of the hinted classes. */
static void judge(struct cl *g)
{
	double born = 0, back = 0, mean;
	uint16_t cold = 0;

	for (unsigned c = 1; c < N_CLASSES; c++) {
		born += g->born[c];
		back += g->back[c];
	}
	mean = born > 0 ? back / born : 0;
	for (unsigned c = 1; c < N_CLASSES; c++)
		if (g->born[c] >= MIN_BORN && g->back[c] < COLD_SHARE * mean * g->born[c])
			cold |= (uint16_t)(1u << c);
	g->cold = cold;
	g->changes = 0;
}

static void cl_insert(struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;
	struct kvt_rec *r = kvt_ptails_rec(p, i);
	bool proven = kvt_ptails_proven(r);
	unsigned tag;
	uint64_t age;

	/* a new record's pval is 0 (fresh); one coming back from another tier
	 * keeps its state */
	if (!proven && kvt_ghost_take(&g->t.ghost, kvt_ghost_hash(r), &tag, &age)) {
		if (!(tag & TAG_PROVEN))
			came_back(g, tag & (N_CLASSES - 1));
		proven = true;
	} else if (!proven) {
		was_born(g, class_of(g, r));
	}
	kvt_ptails_insert(p, i, proven);
}

/* Back from a hold that was not a use: tracked again, in the place its last
 * use gives it, with nothing learned. */
static void cl_restore(struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;

	g->t.n++;
	if (kvt_ptails_rec(p, i)->kids_here == 0)
		kvt_plist_place_by_use(p->idx, kvt_ptails_list_for(p, i), i, KVT_PTAILS_SHIFT);
}

static void cl_touch(struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;
	const struct kvt_rec *r = kvt_ptails_rec(p, i);

	if (!kvt_ptails_proven(r))
		came_back(g, class_of(g, r));
	kvt_ptails_touch(p, i);
}

static void cl_remove(struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;
	const struct kvt_rec *r = kvt_ptails_rec(p, i);

	kvt_ptails_remove(p, i, kvt_ptails_proven(r) ? TAG_PROVEN : class_of(g, r));
}

static uint32_t cl_victim(struct kvt_policy *p)
{
	struct cl *g = p->state;
	uint64_t age = AGE_FACTOR * g->t.n, best_t = UINT64_MAX;
	uint32_t e = g->t.list[END_L].tail, best = KVT_NIL;

	if (g->changes >= JUDGE_EVERY)
		judge(g);
	if (kvt_ptails_old_end(p) != KVT_NIL)
		return e;
	/* the smallest last use, counted `age` later for all but cold classes'
	 * fresh blocks */
	for (unsigned l = 0; l < END_L; l++) {
		uint32_t t = g->t.list[l].tail;
		uint64_t u;

		if (t == KVT_NIL)
			continue;
		u = kvt_ptails_used(kvt_ptails_rec(p, t)) +
		    (l < N_CLASSES && (g->cold >> l & 1) ? 0 : age);
		if (u < best_t) {
			best_t = u;
			best = t;
		}
	}
	return best != KVT_NIL ? best : e;
}

const struct kvt_policy_ops kvt_policy_class_lru_ops = {
	.name = "class-lru",
	.init = cl_init,
	.fini = kvt_ptails_close,
	.insert = cl_insert,
	.touch = cl_touch,
	.remove = cl_remove,
	.restore = cl_restore,
	.leaf_changed = kvt_ptails_leaf_changed,
	.victim = cl_victim,
};

const struct kvt_policy_ops kvt_policy_class_ends_ops = {
	.name = "class-ends",
	.init = ce_init,
	.fini = kvt_ptails_close,
	.insert = cl_insert,
	.touch = cl_touch,
	.remove = cl_remove,
	.restore = cl_restore,
	.leaf_changed = kvt_ptails_leaf_changed,
	.victim = cl_victim,
};
