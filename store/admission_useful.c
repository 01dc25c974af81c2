/* "useful": blocks of a class the tier actually reads back.
 *
 * Two classes: fresh (used once) and reused (used twice, as "reused" counts
 * it, with a ghost list of refused blocks). One block in 16, by key hash, is
 * always admitted: these sampled blocks tell, per class, how often a block
 * written into the tier is read from it before it leaves (an exponentially
 * weighted fraction). A class read back less than 1 time in 10 is refused.
 * So the rule follows the tier's reach: a small tier, which fresh blocks
 * rarely come back to in time, stops taking them; a large one, which they
 * do come back to, keeps them. Until 20 sampled blocks of a class have left
 * the tier, its blocks are admitted. */
#include <errno.h>
#include <stdlib.h>

#include "store/admission.h"
#include "store/ghost.h"

#define GHOST_FACTOR 4
#define MIN_USEFUL 0.1  /* reads back per sampled block written, to admit */
#define MIN_SAMPLES 20
#define DECAY 0.999     /* weight of the past per sampled block that left */

/* Per-record bits. */
enum { USED = 1, SAMPLED = 2, READ = 4, WAS_USED = 8 };

struct useful {
	struct kvt_rec_bytes bits;
	struct kvt_ghost refused;
	double read[2], written[2]; /* per class (fresh 0, reused 1), weighted */
};

static int useful_init(struct kvt_admission *a)
{
	struct useful *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return -ENOMEM;
	err = kvt_ghost_init(&s->refused, 1024);
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
		kvt_ghost_fini(&s->refused);
		kvt_rec_bytes_free(&s->bits);
	}
	free(s);
	a->state = NULL;
}

static void useful_stored(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	uint8_t *b = kvt_rec_byte(&s->bits, i);
	unsigned tag;
	uint64_t age;

	if (b)
		*b = kvt_ghost_take(&s->refused, kvt_ghost_hash(kvt_index_rec(a->idx, i)), &tag,
				    &age) ? USED : 0;
}

static void useful_used(struct kvt_admission *a, uint32_t i)
{
	uint8_t *b = kvt_rec_byte(&((struct useful *)a->state)->bits, i);

	if (!b)
		return;
	*b |= USED;
	if ((*b & SAMPLED) && kvt_index_rec(a->idx, i)->tier == a->tier)
		*b |= READ;
}

static bool useful_admit(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	const struct kvt_rec *r = kvt_index_rec(a->idx, i);
	uint8_t *b = kvt_rec_byte(&s->bits, i);
	uint64_t h = kvt_ghost_hash(r);
	int c;

	if (!b)
		return true;
	c = !!(*b & USED);
	if (h >> 60 == 0) { /* one in 16: sampled, always admitted */
		*b = (uint8_t)((*b & USED) | SAMPLED | (c ? WAS_USED : 0));
		return true;
	}
	if (s->written[c] < MIN_SAMPLES || s->read[c] >= MIN_USEFUL * s->written[c])
		return true;
	if ((uint64_t)s->refused.cap < GHOST_FACTOR * kvt_index_count(a->idx))
		(void)kvt_ghost_resize(&s->refused, s->refused.cap * 2);
	kvt_ghost_add(&s->refused, h, 0);
	return false;
}

static void useful_left(struct kvt_admission *a, uint32_t i)
{
	struct useful *s = a->state;
	uint8_t *b = kvt_rec_byte(&s->bits, i);
	int c;

	if (!b || !(*b & SAMPLED))
		return;
	c = !!(*b & WAS_USED);
	s->read[c] = s->read[c] * DECAY + !!(*b & READ);
	s->written[c] = s->written[c] * DECAY + 1;
	*b &= USED;
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
