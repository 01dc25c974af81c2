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
#include <errno.h>
#include <stdlib.h>

#include "store/ghost.h"
#include "store/policy.h"
#include "store/policy_list.h"

/* Lists: the fresh blocks of class c are list c; then proven, then ends. */
enum { N_CLASSES = KVT_REUSE_CLASS_MAX + 1, PROVEN_L = N_CLASSES, END_L, N_LISTS };

/* pval: the last use tick above two bits, INNER (the block has had a child
 * in a tier) and PROVEN. */
#define PROVEN_BIT 1u
#define INNER_BIT 2u
#define PVAL_SHIFT 2

/* Ghost tags: the class a block left as, and whether it left proven. */
#define TAG_PROVEN (1u << 4)

/* The ghost list remembers this many times the records tracked. */
#define GHOST_FACTOR 4

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

/* class-ends: request ends used in the last n / this many ticks stay. */
#define END_WINDOW_DIV 4

struct cl {
	struct kvt_plist list[N_LISTS]; /* each class's fresh blocks, proven, ends */
	bool ends;              /* class-ends: request ends on their own list */
	uint32_t changes;       /* of the counts since `cold` was worked out */
	uint16_t cold;          /* bit c: class c is cold */
	uint64_t tick;
	uint64_t n;             /* records tracked */
	double born[N_CLASSES]; /* fresh blocks that came in, per class */
	double back[N_CLASSES]; /* of them, those that came back */
	double born_all;        /* born since the last halving */
	struct kvt_ghost ghost; /* tag: class | TAG_PROVEN */
};

static inline struct kvt_rec *rec(const struct kvt_policy *p, uint32_t i)
{
	return kvt_index_rec(p->idx, i);
}

static inline bool proven(const struct kvt_rec *r)
{
	return r->pval & PROVEN_BIT;
}

static inline uint64_t used(const struct kvt_rec *r)
{
	return r->pval >> PVAL_SHIFT;
}

static inline unsigned class_of(const struct kvt_rec *r)
{
	return r->reuse_class < N_CLASSES ? r->reuse_class : 0;
}

static inline unsigned list_of(const struct cl *g, const struct kvt_rec *r)
{
	if (g->ends && !(r->pval & INNER_BIT))
		return END_L;
	return proven(r) ? PROVEN_L : class_of(r);
}

/* The list record i is on (or goes on), by its class. */
static inline struct kvt_plist *list_for(const struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;

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

static int cl_open(struct kvt_policy *p, bool ends)
{
	struct cl *g = calloc(1, sizeof(*g));
	int err;

	if (!g)
		return -ENOMEM;
	for (int l = 0; l < N_LISTS; l++)
		kvt_plist_init(&g->list[l]);
	g->ends = ends;
	err = kvt_ghost_init(&g->ghost, 1024);
	if (err) {
		free(g);
		return err;
	}
	p->state = g;
	return 0;
}

static int cl_init(struct kvt_policy *p)
{
	return cl_open(p, false);
}

static int ce_init(struct kvt_policy *p)
{
	return cl_open(p, true);
}

static void cl_fini(struct kvt_policy *p)
{
	struct cl *g = p->state;

	if (g)
		kvt_ghost_fini(&g->ghost);
	free(g);
	p->state = NULL;
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
	if (g->born_all > (double)HALF_LIFE * (double)(g->n > 1024 ? g->n : 1024)) {
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
	struct kvt_rec *r = rec(p, i);
	uint64_t inner = (r->pval & INNER_BIT) | (r->kids_here ? INNER_BIT : 0), age;
	unsigned pr = proven(r), tag;

	/* a new record's pval is 0 (fresh); one coming back from another tier
	 * keeps its state */
	if (!pr && kvt_ghost_take(&g->ghost, kvt_ghost_hash(r), &tag, &age)) {
		if (!(tag & TAG_PROVEN))
			came_back(g, tag & (N_CLASSES - 1));
		pr = 1;
	} else if (!pr) {
		was_born(g, class_of(r));
	}
	r->pval = ++g->tick << PVAL_SHIFT | inner | pr;
	r->pprev = r->pnext = KVT_NIL;
	g->n++;
	if ((uint64_t)g->ghost.cap < GHOST_FACTOR * g->n && g->ghost.cap < (1u << 30))
		(void)kvt_ghost_resize(&g->ghost, g->ghost.cap * 2); /* on -ENOMEM: smaller */
	if (r->kids_here == 0)
		list_insert_after(p, KVT_NIL, i);
}

/* Back from a hold that was not a use: tracked again, in the place its last
 * use gives it, with nothing learned. */
static void cl_restore(struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;

	g->n++;
	if (rec(p, i)->kids_here == 0)
		place_by_use(p, i);
}

static void cl_touch(struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;
	struct kvt_rec *r = rec(p, i);
	bool listed = on_list(p, i);

	if (listed)
		list_unlink(p, i);
	if (!proven(r))
		came_back(g, class_of(r));
	r->pval = ++g->tick << PVAL_SHIFT | (r->pval & INNER_BIT) | PROVEN_BIT;
	if (listed)
		list_insert_after(p, KVT_NIL, i);
}

static void cl_remove(struct kvt_policy *p, uint32_t i)
{
	struct cl *g = p->state;
	struct kvt_rec *r = rec(p, i);

	if (on_list(p, i))
		list_unlink(p, i);
	g->n--;
	/* held blocks stay in the tier: only those leaving it are ghosts */
	if (!r->pins && !r->busy)
		kvt_ghost_add(&g->ghost, kvt_ghost_hash(r),
			      proven(r) ? TAG_PROVEN : class_of(r));
}

static void cl_leaf_changed(struct kvt_policy *p, uint32_t i, bool is_leaf)
{
	if (is_leaf && !on_list(p, i))
		place_by_use(p, i);
	else if (!is_leaf && on_list(p, i))
		list_unlink(p, i);
	if (!is_leaf)
		rec(p, i)->pval |= INNER_BIT; /* after the unlink: it names the list */
}

static uint32_t cl_victim(struct kvt_policy *p)
{
	struct cl *g = p->state;
	uint64_t age = AGE_FACTOR * g->n, best_t = UINT64_MAX;
	uint32_t e = g->list[END_L].tail, best = KVT_NIL;

	if (g->changes >= JUDGE_EVERY)
		judge(g);
	if (e != KVT_NIL && g->tick - used(rec(p, e)) > g->n / END_WINDOW_DIV)
		return e;
	/* the smallest last use, counted `age` later for all but cold classes'
	 * fresh blocks */
	for (unsigned l = 0; l < END_L; l++) {
		uint32_t t = g->list[l].tail;
		uint64_t u;

		if (t == KVT_NIL)
			continue;
		u = used(rec(p, t)) + (l < N_CLASSES && (g->cold >> l & 1) ? 0 : age);
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
	.fini = cl_fini,
	.insert = cl_insert,
	.touch = cl_touch,
	.remove = cl_remove,
	.restore = cl_restore,
	.leaf_changed = cl_leaf_changed,
	.victim = cl_victim,
};

const struct kvt_policy_ops kvt_policy_class_ends_ops = {
	.name = "class-ends",
	.init = ce_init,
	.fini = cl_fini,
	.insert = cl_insert,
	.touch = cl_touch,
	.remove = cl_remove,
	.restore = cl_restore,
	.leaf_changed = cl_leaf_changed,
	.victim = cl_victim,
};
