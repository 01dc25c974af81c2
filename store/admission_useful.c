/* "useful": blocks of a class the tier actually reads back.
 *
 * Two classes: fresh (used once) and reused (used twice, as "reused" counts
 * it: struct kvt_reuse). One block in 16, by key hash, is always admitted:
 * these sampled blocks tell, per class, how often a block written into the
 * tier is read from it before it leaves (an exponentially weighted
 * fraction). A class read back less than 1 time in 10 is refused. So the rule
 * follows the tier's reach: a small tier, which fresh blocks rarely come
 * back to in time, stops taking them; a large one, which they do come back
 * to, keeps them. Until 20 sampled blocks of a class have left the tier, its
 * blocks are admitted. */
#include <errno.h>
#include <stdlib.h>

#include "store/admission.h"

#define MIN_USEFUL 0.1  /* reads back per sampled block written, to admit */
#define MIN_SAMPLES 20
#define DECAY 0.999     /* weight of the past per sampled block that left */

/* More bits of the per-record byte, beside KVT_REUSED. */
enum { SAMPLED = 2, READ = 4, WAS_REUSED = 8 };

struct useful {
	struct kvt_reuse reuse;
	double read[2], written[2]; /* per class (fresh 0, reused 1), weighted */
};

static int useful_init(struct kvt_admission *a)
{
	struct useful *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return -ENOMEM;
	err = kvt_reuse_init(&s->reuse);
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

	if (s)
		kvt_reuse_fini(&s->reuse);
	free(s);
	a->state = NULL;
}

static void useful_stored(struct kvt_admission *a, uint32_t i)
{
	kvt_reuse_stored(&((struct useful *)a->state)->reuse, a, i);
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

static bool useful_admit(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	uint8_t *b = kvt_reuse_bits(&s->reuse, i);
	int c;

	if (!b)
		return true;
	c = !!(*b & KVT_REUSED);
	if (kvt_ghost_hash(kvt_index_rec(a->idx, i)) >> 60 == 0) {
		/* one in 16: sampled, always admitted */
		*b = (uint8_t)((*b & KVT_REUSED) | SAMPLED | (c ? WAS_REUSED : 0));
		return true;
	}
	if (s->written[c] < MIN_SAMPLES || s->read[c] >= MIN_USEFUL * s->written[c])
		return true;
	kvt_reuse_refuse(&s->reuse, a, i);
	return false;
}

static void useful_left(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	uint8_t *b = kvt_reuse_bits(&s->reuse, i);
	int c;

	if (!b || !(*b & SAMPLED))
		return;
	c = !!(*b & WAS_REUSED);
	s->read[c] = s->read[c] * DECAY + !!(*b & READ);
	s->written[c] = s->written[c] * DECAY + 1;
	*b &= KVT_REUSED;
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
