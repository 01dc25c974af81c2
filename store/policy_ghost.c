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
#include <errno.h>
#include <stdlib.h>

#include "store/ghost.h"
#include "store/policy.h"
#include "store/policy_list.h"

enum { FRESH = 0, PROVEN = 1, END = 2 };

/* pval: the last use tick above two bits, INNER (the block has had a child
 * in a tier: it is not where a request ended) and its class (PROVEN). */
#define PROVEN_BIT 1u
#define INNER_BIT 2u
#define PVAL_SHIFT 2

struct gl {
	struct kvt_plist list[3];  /* per list: fresh, proven, ends */
	bool ends;                 /* ghost-ends: request ends on their own list */
	uint64_t tick;
	uint64_t n, n_fresh;       /* records tracked, of them fresh */
	double share;              /* target share of fresh records, 0..1 */
	struct kvt_ghost ghost;    /* tag: the class the block left as */
};

/* The ghost list remembers this many times the records tracked. */
#define GHOST_FACTOR 4

/* ghost-ends: request ends used in the last n / this many ticks stay. */
#define END_WINDOW_DIV 4

static inline struct kvt_rec *rec(const struct kvt_policy *p, uint32_t i)
{
	return kvt_index_rec(p->idx, i);
}

static inline unsigned cls(const struct kvt_rec *r)
{
	return (unsigned)(r->pval & PROVEN_BIT);
}

static inline uint64_t used(const struct kvt_rec *r)
{
	return r->pval >> PVAL_SHIFT;
}

/* The list a tail is kept on: its class, or END for a request's end under
 * ghost-ends. */
static inline unsigned list_of(const struct gl *g, const struct kvt_rec *r)
{
	return g->ends && !(r->pval & INNER_BIT) ? END : cls(r);
}

/* The list record i is on (or goes on), by its class. */
static inline struct kvt_plist *list_for(const struct kvt_policy *p, uint32_t i)
{
	struct gl *g = p->state;

	return &g->list[list_of(g, rec(p, i))];
}

static bool on_list(const struct kvt_policy *p, uint32_t i)
{
	return kvt_plist_has(p->idx, list_for(p, i), i);
}

static void list_unlink(struct kvt_policy *p, uint32_t i)
{
	kvt_plist_unlink(p->idx, list_for(p, i), i);
}

/* Insert i into its list after prev (toward the cold end); prev KVT_NIL =
 * at the head. */
static void list_insert_after(struct kvt_policy *p, uint32_t prev, uint32_t i)
{
	kvt_plist_insert_after(p->idx, list_for(p, i), prev, i);
}

/* Place tail i by its last use (store/policy_list.h). */
static void place_by_use(struct kvt_policy *p, uint32_t i)
{
	kvt_plist_place_by_use(p->idx, list_for(p, i), i, PVAL_SHIFT);
}

static int gl_open(struct kvt_policy *p, bool ends)
{
	struct gl *g = calloc(1, sizeof(*g));
	int err;

	if (!g)
		return -ENOMEM;
	for (int l = 0; l < 3; l++)
		kvt_plist_init(&g->list[l]);
	g->ends = ends;
	g->share = 0.5;
	err = kvt_ghost_init(&g->ghost, 1024);
	if (err) {
		free(g);
		return err;
	}
	p->state = g;
	return 0;
}

static int gl_init(struct kvt_policy *p)
{
	return gl_open(p, false);
}

static int ge_init(struct kvt_policy *p)
{
	return gl_open(p, true);
}

static void gl_fini(struct kvt_policy *p)
{
	struct gl *g = p->state;

	if (g)
		kvt_ghost_fini(&g->ghost);
	free(g);
	p->state = NULL;
}

/* A block came back that left as class `was`, `age` evictions ago: as in
 * ARC, the step is larger when the other class's ghosts outnumber its own. */
static void adapt(struct gl *g, unsigned was, uint64_t age)
{
	double mine = g->ghost.count[was] + 1.0, other = g->ghost.count[!was];
	double step = (other > mine ? other / mine : 1.0) / (double)(g->n ? g->n : 1);

	if (age > g->n)
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
	struct kvt_rec *r = rec(p, i);
	unsigned c = cls(r), was;
	uint64_t inner = (r->pval & INNER_BIT) | (r->kids_here ? INNER_BIT : 0), age;

	/* a new record's pval is 0 (fresh); one coming back from a hold or
	 * another tier keeps its class */
	if (c == FRESH && kvt_ghost_take(&g->ghost, kvt_ghost_hash(r), &was, &age)) {
		adapt(g, was, age);
		c = PROVEN;
	}
	r->pval = ++g->tick << PVAL_SHIFT | inner | c;
	r->pprev = r->pnext = KVT_NIL;
	g->n++;
	g->n_fresh += c == FRESH;
	if ((uint64_t)g->ghost.cap < GHOST_FACTOR * g->n && g->ghost.cap < (1u << 30))
		(void)kvt_ghost_resize(&g->ghost, g->ghost.cap * 2); /* on -ENOMEM: smaller */
	if (r->kids_here == 0)
		list_insert_after(p, KVT_NIL, i);
}

static void gl_touch(struct kvt_policy *p, uint32_t i)
{
	struct gl *g = p->state;
	struct kvt_rec *r = rec(p, i);
	bool listed = on_list(p, i);

	if (listed)
		list_unlink(p, i);
	if (cls(r) == FRESH)
		g->n_fresh--;
	r->pval = ++g->tick << PVAL_SHIFT | (r->pval & INNER_BIT) | PROVEN;
	if (listed)
		list_insert_after(p, KVT_NIL, i);
}

static void gl_remove(struct kvt_policy *p, uint32_t i)
{
	struct gl *g = p->state;
	struct kvt_rec *r = rec(p, i);

	if (on_list(p, i))
		list_unlink(p, i);
	g->n--;
	g->n_fresh -= cls(r) == FRESH;
	/* held blocks stay in the tier: only those leaving it are ghosts */
	if (!r->pins && !r->busy)
		kvt_ghost_add(&g->ghost, kvt_ghost_hash(r), cls(r));
}

static void gl_leaf_changed(struct kvt_policy *p, uint32_t i, bool is_leaf)
{
	if (is_leaf && !on_list(p, i))
		place_by_use(p, i);
	else if (!is_leaf && on_list(p, i))
		list_unlink(p, i);
	if (!is_leaf)
		rec(p, i)->pval |= INNER_BIT; /* after the unlink: it names the list */
}

/* Whether the oldest request end may go before every other tail: not when
 * it was used in the last quarter of the tier's count of ticks, so that the
 * newest block of a chain being stored (or of requests stored side by side)
 * is not evicted before its next block links to it. */
static bool end_is_old(const struct gl *g, const struct kvt_rec *r)
{
	return g->tick - used(r) > g->n / END_WINDOW_DIV;
}

static uint32_t gl_victim(struct kvt_policy *p)
{
	struct gl *g = p->state;
	uint32_t f = g->list[FRESH].tail, o = g->list[PROVEN].tail, e = g->list[END].tail;

	if (e != KVT_NIL && ((f == KVT_NIL && o == KVT_NIL) ||
			     end_is_old(g, rec(p, e))))
		return e;
	if (f == KVT_NIL)
		return o;
	if (o == KVT_NIL || (double)g->n_fresh > g->share * (double)g->n ||
	    used(rec(p, f)) < used(rec(p, o)))
		return f;
	return o;
}

const struct kvt_policy_ops kvt_policy_ghost_lru_ops = {
	.name = "ghost-lru",
	.init = gl_init,
	.fini = gl_fini,
	.insert = gl_insert,
	.touch = gl_touch,
	.remove = gl_remove,
	.leaf_changed = gl_leaf_changed,
	.victim = gl_victim,
};

const struct kvt_policy_ops kvt_policy_ghost_ends_ops = {
	.name = "ghost-ends",
	.init = ge_init,
	.fini = gl_fini,
	.insert = gl_insert,
	.touch = gl_touch,
	.remove = gl_remove,
	.leaf_changed = gl_leaf_changed,
	.victim = gl_victim,
};
