/* SPDX-License-Identifier: Apache-2.0 */
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
 * A block with a reuse class (kvt_rec's reuse_class, the engine's hint, 1
 * to KVT_REUSE_CLASS_MAX) is judged within its reuse class: end or inner of
 * that class, 30 classes beside the two above. Their sampled blocks are
 * judged (read in the tier or not) when they leave it or once HORIZON
 * times as many blocks as the tier holds were admitted after them, which
 * comes first: a policy that keeps the blocks read in the tier (class-lru,
 * for one) lets go of the unread ones only, and counted when they leave,
 * a class would look as if never read. Their reads count with a margin of
 * MARGIN square roots of them, so that a class is refused on many samples
 * rather than on a few unlucky ones. Blocks without a class (0) are judged
 * as before, on every sampled block when it leaves.
 *
 * A block whose parent the rule refused is refused, and not sampled, while
 * it is not stored again: a request reaches it only past that parent,
 * which it misses, storing the parent and the blocks after it again. Until 20
 * sampled blocks of a class have been judged, ends are refused and inner
 * blocks admitted. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "store/admission.h"

#define MIN_USEFUL 0.1    /* reads back per sampled block written, to admit */
#define ROOM 0.7          /* share of g a class must be read back */
#define MIN_SAMPLES 20
#define DECAY 0.999       /* weight of the past per sampled block that left */
#define GONE_DECAY 0.9999 /* per block that left */
#define HORIZON 0.4       /* sampled hinted blocks are judged this many times
                           * the blocks in the tier admissions later */
#define MIN_HORIZON 1024  /* blocks in the tier, at least, for HORIZON */
#define MARGIN 4.5        /* square roots of its reads a class gets */

/* More bits of the per-record byte, beside KVT_REUSED: sampled when
 * admitted, read since, an end then; whether a block was ever stored under
 * it, and whether the rule refused its parent; judged (a sampled block of
 * a reuse class); admitted and not left the tier since. */
enum {
	SAMPLED = 2, READ = 4, WAS_END = 8, HAD_CHILD = 16, PARENT_REFUSED = 32, JUDGED = 64,
	ADMITTED = 128
};

enum { INNER, END, CLASSES };

/* Reuse classes (kvt_rec's reuse_class), 0 = no hint. */
#define REUSE_CLASSES (KVT_REUSE_CLASS_MAX + 1)

/* Sampled blocks of a class, weighted: read in the tier, and all. */
struct rate {
	double read, written;
};

/* A sampled block of a hinted class, judged once `horizon` admissions
 * followed it. */
struct due {
	uint64_t hash;   /* its key's, to tell it from a later record i */
	uint64_t seq;    /* admissions before it */
	uint32_t i;
};

struct useful {
	struct kvt_reuse reuse;
	struct rate all[CLASSES];               /* every block, at leaving */
	struct rate by[REUSE_CLASSES][CLASSES]; /* hinted ones, at their horizon */
	struct due *due;                        /* a ring, oldest at due_head */
	size_t due_cap, due_head, due_n;
	uint64_t seq;                           /* admissions */
	struct kvt_ghost gone;      /* the blocks that left the tier last */
	double left, back;          /* weighted: blocks that left; of them,
	                             * stored again while gone remembered them */
	uint64_t in_tier;           /* admitted and not left (each once, by
	                             * ADMITTED): gone's size */
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
		free(s->due);
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
	uint8_t *pb = kvt_reuse_bits(&s->reuse, i);

	/* admitted, then dropped before it reached the tier: the record
	 * number is taken again */
	if (pb && (*pb & ADMITTED) && s->in_tier)
		s->in_tier--;
	kvt_reuse_stored(&s->reuse, a, i);
	if (r->parent != KVT_NIL && (pb = kvt_reuse_bits(&s->reuse, r->parent)))
		*pb |= HAD_CHILD;
	if (kvt_ghost_take(&s->gone, kvt_ghost_hash(r), &tag, &age))
		s->back += 1;
}

static unsigned reuse_class(const struct kvt_rec *r)
{
	return r->reuse_class < REUSE_CLASSES ? r->reuse_class : 0;
}

/* Sampled block i of hinted class rc is judged: read in the tier or not. */
static void judge(struct useful *s, uint8_t *b, unsigned rc)
{
	struct rate *m = &s->by[rc][*b & WAS_END ? END : INNER];

	m->read = m->read * DECAY + !!(*b & READ);
	m->written = m->written * DECAY + 1;
	*b |= JUDGED;
}

/* Admissions after which a sampled block of a hinted class is judged. */
static uint64_t horizon(const struct useful *s)
{
	return (uint64_t)(HORIZON * (double)(s->in_tier > MIN_HORIZON ? s->in_tier : MIN_HORIZON));
}

/* Judge the sampled blocks of hinted classes `horizon` admissions old. */
static void judge_due(struct kvt_admission *a, uint64_t horizon)
{
	struct useful *s = a->state;

	while (s->due_n && s->seq - s->due[s->due_head].seq > horizon) {
		struct due *d = &s->due[s->due_head];
		uint8_t *b;

		s->due_head = (s->due_head + 1) % s->due_cap;
		s->due_n--;
		if (!kvt_index_valid(a->idx, d->i) ||
		    kvt_index_rec(a->idx, d->i)->state == KVT_REC_FREE ||
		    kvt_ghost_hash(kvt_index_rec(a->idx, d->i)) != d->hash)
			continue; /* gone, or its number taken by another */
		b = kvt_reuse_bits(&s->reuse, d->i);
		if (b && (*b & (SAMPLED | JUDGED)) == SAMPLED)
			judge(s, b, reuse_class(kvt_index_rec(a->idx, d->i)));
	}
}

/* Remember sampled record i of a hinted class, to judge it later. */
static void judge_later(struct kvt_admission *a, uint32_t i, uint64_t h)
{
	struct useful *s = a->state;

	if (s->due_n == s->due_cap) {
		size_t cap = s->due_cap ? 2 * s->due_cap : 256;
		struct due *d = malloc(cap * sizeof(*d));

		if (!d) {
			judge_due(a, 0); /* -ENOMEM: the oldest now */
			if (s->due_n == s->due_cap)
				return;
		} else {
			for (size_t k = 0; k < s->due_n; k++)
				d[k] = s->due[(s->due_head + k) % s->due_cap];
			free(s->due);
			s->due = d;
			s->due_cap = cap;
			s->due_head = 0;
		}
	}
	s->due[(s->due_head + s->due_n++) % s->due_cap] =
		(struct due){ .hash = h, .seq = s->seq, .i = i };
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

/* What class m's reads count for against the bar: the hinted classes' with
 * a margin of MARGIN times their square root (their spread, as counts of
 * rare events), so that a class is refused on many samples, not on a few
 * unlucky ones. */
static double reads(const struct rate *m, unsigned rc)
{
	return rc ? m->read + MARGIN * sqrt(m->read + 1) : m->read;
}

static bool useful_admit(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	const struct kvt_rec *r = kvt_index_rec(a->idx, i);
	uint8_t *b = kvt_reuse_bits(&s->reuse, i);
	unsigned rc = reuse_class(r);
	const struct rate *m;
	int c;

	judge_due(a, horizon(s));
	if (!b)
		return true; /* out of memory: admit, as with no rule */
	if (*b & PARENT_REFUSED)
		goto refuse; /* its prefix is stored nowhere */
	/* asked again while it stays (its write failed, or it was let
	 * through before): the same answer, counted once */
	if (*b & ADMITTED)
		return true;
	if (*b & KVT_REUSED)
		goto admit;
	c = *b & HAD_CHILD ? INNER : END;
	if (kvt_ghost_hash(r) >> 60 == 0) {
		/* one in 16: sampled, always admitted */
		*b = (uint8_t)((*b & HAD_CHILD) | SAMPLED | (c == END ? WAS_END : 0));
		if (rc)
			judge_later(a, i, kvt_ghost_hash(r));
		goto admit;
	}
	m = rc ? &s->by[rc][c] : &s->all[c];
	if (m->written < MIN_SAMPLES ? c != END : reads(m, rc) >= bar(s) * m->written)
		goto admit;
refuse:
	if ((*b & ADMITTED) && s->in_tier)
		s->in_tier--; /* admitted before its parent was refused */
	*b &= (uint8_t)~ADMITTED;
	kvt_reuse_refuse(&s->reuse, a, i);
	for (uint32_t k = r->first_child; k != KVT_NIL; k = kvt_index_rec(a->idx, k)->next_sibling)
		if ((b = kvt_reuse_bits(&s->reuse, k)))
			*b |= PARENT_REFUSED;
	return false;
admit:
	*b |= ADMITTED;
	s->in_tier++;
	s->seq++;
	return true;
}

static void useful_left(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	uint8_t *b = kvt_reuse_bits(&s->reuse, i);
	int c;

	/* counted when admitted (a block found in the tier at start was not) */
	if (s->in_tier && (!b || (*b & ADMITTED)))
		s->in_tier--;
	if (b)
		*b &= (uint8_t)~ADMITTED;
	if (s->gone.cap < s->in_tier)
		(void)kvt_ghost_resize(&s->gone, s->gone.cap * 2); /* -ENOMEM: smaller */
	kvt_ghost_add(&s->gone, kvt_ghost_hash(kvt_index_rec(a->idx, i)), 0);
	s->left = s->left * GONE_DECAY + 1;
	s->back *= GONE_DECAY;
	if (!b || !(*b & SAMPLED))
		return;
	c = *b & WAS_END ? END : INNER;
	s->all[c].read = s->all[c].read * DECAY + !!(*b & READ);
	s->all[c].written = s->all[c].written * DECAY + 1;
	if (reuse_class(kvt_index_rec(a->idx, i)) && !(*b & JUDGED))
		judge(s, b, reuse_class(kvt_index_rec(a->idx, i)));
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
