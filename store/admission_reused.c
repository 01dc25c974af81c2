/* "reused": only blocks used at least twice go down to the tier.
 *
 * Used twice means used while cached, or stored again while a ghost list of
 * the blocks this rule turned away (four times as many as the index holds)
 * still remembers them: a block refused on its way down comes back, is
 * missed once, and is admitted the next time. Most blocks a KV cache drops
 * are used once (a one-off prompt, the last partial block of a request), and
 * those are the writes this rule saves; the price is the first return of a
 * block that would have been read back from the tier. */
#include <errno.h>
#include <stdlib.h>

#include "store/admission.h"
#include "store/ghost.h"

#define GHOST_FACTOR 4

struct reused {
	struct kvt_rec_bytes used; /* per record: used twice */
	struct kvt_ghost refused;
};

static int reused_init(struct kvt_admission *a)
{
	struct reused *s = calloc(1, sizeof(*s));
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

static void reused_fini(struct kvt_admission *a)
{
	struct reused *s = a->state;

	if (s) {
		kvt_ghost_fini(&s->refused);
		kvt_rec_bytes_free(&s->used);
	}
	free(s);
	a->state = NULL;
}

static void reused_stored(struct kvt_admission *a, uint32_t i)
{
	struct reused *s = a->state;
	uint8_t *b = kvt_rec_byte(&s->used, i);
	unsigned tag;
	uint64_t age;

	if (b)
		*b = kvt_ghost_take(&s->refused, kvt_ghost_hash(kvt_index_rec(a->idx, i)), &tag, &age);
}

static void reused_used(struct kvt_admission *a, uint32_t i)
{
	uint8_t *b = kvt_rec_byte(&((struct reused *)a->state)->used, i);

	if (b)
		*b = 1;
}

static bool reused_admit(struct kvt_admission *a, uint32_t i)
{
	struct reused *s = a->state;
	uint8_t *b = kvt_rec_byte(&s->used, i);

	if (!b || *b)
		return true; /* out of memory: admit, as with no rule */
	if ((uint64_t)s->refused.cap < GHOST_FACTOR * kvt_index_count(a->idx))
		(void)kvt_ghost_resize(&s->refused, s->refused.cap * 2); /* -ENOMEM: smaller */
	kvt_ghost_add(&s->refused, kvt_ghost_hash(kvt_index_rec(a->idx, i)), 0);
	return false;
}

const struct kvt_admission_ops kvt_admission_reused_ops = {
	.name = "reused",
	.init = reused_init,
	.fini = reused_fini,
	.stored = reused_stored,
	.used = reused_used,
	.admit = reused_admit,
};
