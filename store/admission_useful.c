/* "useful": blocks used once are written only in classes the tier reads
 * back often enough for the room they take there.
 *
 * A block used twice (as "reused" counts it: struct kvt_reuse) has shown it
 * returns: it is admitted. Blocks used once fall in two classes: ends (no
 * block was ever stored under them: where a request stopped, most often its
 * partial last block, which the next turn asks for under another key) and
 * inner ones. One in 16 of them, by key hash, is always admitted: these
 * sampled blocks tell, per class, how often a block written into the tier
 * is read from it before it leaves (an exponentially weighted fraction, r).
 *
 * What room in the tier is worth is measured too: a ghost list remembers as
 * many of the blocks that left the tier as it holds, and g is the fraction
 * of them stored again while remembered, the hits a tier twice as large
 * would have added per block it let go. A class is refused when
 * r < max(ROOM x g, 1/10): a tier too small for what comes back keeps its
 * room for the blocks likelier to come back, one that holds everything that
 * comes back (g near 0) takes every class but one almost never read.
 *
 * A block whose parent the rule refused is refused, and not sampled, while
 * it is not stored again: a request reaches it only past that parent,
 * which it misses, storing the parent and the blocks after it again. Until 20
 * sampled blocks of a class have left the tier, ends are refused and inner
 * blocks admitted. */
#include <errno.h>
#include <stdlib.h>

#include "store/admission.h"

#define MIN_USEFUL 0.1    /* reads back per sampled block written, to admit */
#define ROOM 0.7          /* share of g a class must be read back */
#define MIN_SAMPLES 20
#define DECAY 0.999       /* weight of the past per sampled block that left */
#define GONE_DECAY 0.9999 /* per block that left */

/* More bits of the per-record byte, beside KVT_REUSED: sampled when
 * admitted, read since, an end then; whether a block was ever stored under
 * it, and whether the rule refused its parent. */
enum { SAMPLED = 2, READ = 4, WAS_END = 8, HAD_CHILD = 16, PARENT_REFUSED = 32 };

enum { INNER, END, CLASSES };

struct useful {
	struct kvt_reuse reuse;
	double read[CLASSES], written[CLASSES]; /* sampled blocks, weighted */
	struct kvt_ghost gone;      /* the blocks that left the tier last */
	double left, back;          /* weighted: blocks that left; of them,
	                             * stored again while gone remembered them */
	uint64_t in_tier;           /* admitted and not left: gone's size */
};

static int useful_init(struct kvt_admission *a)
{
	struct useful *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return -ENOMEM;
	err = kvt_reuse_init(&s->reuse);
	if (!err) {
		err = kvt_ghost_init(&s->gone, 1024);
		if (err)
			kvt_reuse_fini(&s->reuse);
	}
	if (err) {
		free(s);
		return err;
	}
	a->state = s;
	return 0;
}

static void useful_fini(struct kvt_admission *a)
{
	struct useful *s = a->state;

	if (s) {
		kvt_ghost_fini(&s->gone);
		kvt_reuse_fini(&s->reuse);
	}
	free(s);
	a->state = NULL;
}

static void useful_stored(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	unsigned tag;
	uint64_t age;
	const struct kvt_rec *r = kvt_index_rec(a->idx, i);
	uint8_t *pb;

	kvt_reuse_stored(&s->reuse, a, i);
	if (r->parent != KVT_NIL && (pb = kvt_reuse_bits(&s->reuse, r->parent)))
		*pb |= HAD_CHILD;
	if (kvt_ghost_take(&s->gone, kvt_ghost_hash(r), &tag, &age))
		s->back += 1;
}

static void useful_used(struct kvt_admission *a, uint32_t i)
{
	uint8_t *b = kvt_reuse_bits(&((struct useful *)a->state)->reuse, i);

	if (!b)
		return;
	*b |= KVT_REUSED;
	if ((*b & SAMPLED) && kvt_index_rec(a->idx, i)->tier == a->tier)
		*b |= READ;
}

/* The reads back per block written a class must show to be admitted. */
static double bar(const struct useful *s)
{
	double g = s->left >= MIN_SAMPLES ? ROOM * s->back / s->left : 0;

	return g > MIN_USEFUL ? g : MIN_USEFUL;
}

static bool useful_admit(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	const struct kvt_rec *r = kvt_index_rec(a->idx, i);
	uint8_t *b = kvt_reuse_bits(&s->reuse, i);
	int c;

	if (!b)
		return true; /* out of memory: admit, as with no rule */
	if (*b & PARENT_REFUSED)
		goto refuse; /* its prefix is stored nowhere */
	if (*b & KVT_REUSED)
		goto admit;
	c = *b & HAD_CHILD ? INNER : END;
	if (kvt_ghost_hash(r) >> 60 == 0) {
		/* one in 16: sampled, always admitted */
		*b = (uint8_t)((*b & HAD_CHILD) | SAMPLED | (c == END ? WAS_END : 0));
		goto admit;
	}
	if (s->written[c] < MIN_SAMPLES ? c != END : s->read[c] >= bar(s) * s->written[c])
		goto admit;
refuse:
	kvt_reuse_refuse(&s->reuse, a, i);
	for (uint32_t k = r->first_child; k != KVT_NIL; k = kvt_index_rec(a->idx, k)->next_sibling)
		if ((b = kvt_reuse_bits(&s->reuse, k)))
			*b |= PARENT_REFUSED;
	return false;
admit:
	s->in_tier++;
	return true;
}

static void useful_left(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	uint8_t *b = kvt_reuse_bits(&s->reuse, i);
	int c;

	if (s->in_tier)
		s->in_tier--;
	if (s->gone.cap < s->in_tier)
		(void)kvt_ghost_resize(&s->gone, s->gone.cap * 2); /* -ENOMEM: smaller */
	kvt_ghost_add(&s->gone, kvt_ghost_hash(kvt_index_rec(a->idx, i)), 0);
	s->left = s->left * GONE_DECAY + 1;
	s->back *= GONE_DECAY;
	if (!b || !(*b & SAMPLED))
		return;
	c = *b & WAS_END ? END : INNER;
	s->read[c] = s->read[c] * DECAY + !!(*b & READ);
	s->written[c] = s->written[c] * DECAY + 1;
	*b &= KVT_REUSED | HAD_CHILD | PARENT_REFUSED;
}

const struct kvt_admission_ops kvt_admission_useful_ops = {
	.name = "useful",
	.init = useful_init,
	.fini = useful_fini,
	.stored = useful_stored,
	.used = useful_used,
	.admit = useful_admit,
	.left = useful_left,
};
