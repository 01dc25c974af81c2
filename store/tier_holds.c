/* SPDX-License-Identifier: Apache-2.0 */
/* Holds, moves and clean copies of records over the list of tiers: see
 * tiering.h. */
#include "store/tiering_impl.h"

/* The catalog's report of a record's first or last hold: the storage tier
 * holding the record holds it too, so it never drops it for room. */
void kvt_tiering_hold_cb(void *arg, uint32_t i, bool held)
{
	struct kvt_store *s = arg;
	struct kvt_rec *r = rec(s, i);
	struct storage *st = storage_of(s, r->tier);

	/* a hold of a record the tier dropped meanwhile finds nothing: harmless */
	if (st && st->t->ops->hold && r->loc != KVT_LOC_NONE)
		st->t->ops->hold(st->t, r->loc, held ? +1 : -1);
}

void kvt_tiering_move(struct kvt_store *s, uint32_t i, enum kvt_tier to, uint64_t loc)
{
	struct kvt_rec *r = rec(s, i);
	bool held = r->pins || r->busy;

	if (held)
		kvt_tiering_hold_cb(s, i, false);
	r->loc = loc;
	kvt_catalog_move(&s->cat, i, to);
	if (held)
		kvt_tiering_hold_cb(s, i, true);
}

static void clean_push(struct kvt_tiering *t, uint32_t i)
{
	if (t->clean_n == CLEAN_RING) {
		t->clean_head = (t->clean_head + 1) % CLEAN_RING; /* the oldest falls off */
		t->clean_n--;
	}
	t->clean[(t->clean_head + t->clean_n++) % CLEAN_RING] = i;
}

bool kvt_tiering_keep_copy(struct kvt_store *s, uint32_t i, enum kvt_tier t, uint64_t loc)
{
	struct kvt_rec *r = rec(s, i);
	struct storage *st = storage_of(s, t);

	if (!st || !(st->t->caps & KVT_TIER_CAP_DEMOTE) || r->copy_tier != KVT_TIER_NONE)
		return false;
	r->copy_tier = (uint8_t)t;
	r->copy_loc = loc;
	clean_push(s->tiering, i);
	return true;
}

/* Let go of record i's clean copy. */
void kvt_tiering_drop_copy(struct kvt_store *s, struct kvt_rec *r)
{
	struct storage *st = storage_of(s, r->copy_tier);

	if (st)
		st->t->ops->free(st->t, r->copy_loc);
	r->copy_tier = KVT_TIER_NONE;
	r->copy_loc = 0;
}

void kvt_tiering_discard(struct kvt_store *s, uint32_t i)
{
	struct kvt_rec *r = rec(s, i);
	struct storage *st;

	if (r->tier == s->mem->kind && r->state != KVT_REC_FREE)
		s->mem->ops->free(s->mem, r->loc);
	else if ((st = storage_of(s, r->tier)) && r->loc != KVT_LOC_NONE)
		st->t->ops->free(st->t, r->loc);
	if (r->copy_tier != KVT_TIER_NONE)
		kvt_tiering_drop_copy(s, r);
	kvt_catalog_drop(&s->cat, i);
}

/* Drop a held (busy) record after a move; the last holder of a removed one
 * frees it. */
void kvt_tiering_unhold(struct kvt_store *s, uint32_t i)
{
	kvt_catalog_busy(&s->cat, i, -1);
	if (rec(s, i)->state == KVT_REC_DYING && rec(s, i)->busy == 0)
		kvt_tiering_discard(s, i);
}
