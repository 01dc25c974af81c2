/* SPDX-License-Identifier: Apache-2.0 */
/* Memory-tier slots: an allocation that finds the tier full makes room by
 * moving blocks down to their clean copies, dropping what the admission
 * rule refuses, or waiting for the demoter. See tiering.h. */
#include "store/tiering_impl.h"

#include <errno.h>
#include <pthread.h>

/* Times one allocation waits for the demoter to free room. It bounds
 * starvation, not time: each wait ends with room freed (or a pass that
 * found none, which ends the loop), so only an allocation that others keep
 * beating to the room gets this far, and it then fails with -ENOSPC rather
 * than wait without end. Room can come a block at a time with no write
 * (the admission rule refusing blocks), and then a saver that is running
 * beats one being woken often: 32 rounds were lost in a row under load, so
 * the bound is well above that (32x), and still a bound. */
#define ALLOC_ROUNDS 1024

/* Ask the demoter for `bytes` of room and wait until it frees some, or ends
 * a pass started after this call without freeing any. Returns whether room
 * was freed (retry). */
static bool make_room(struct kvt_store *s, uint64_t bytes)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t freed = t->freed, pass = t->passes_started + 1;

	t->waiters++;
	t->asks++;
	t->want_bytes += bytes;
	pthread_cond_signal(&t->wake);
	while (t->freed == freed && t->passes_ended < pass && !t->stop)
		pthread_cond_wait(&t->progress, &s->lock);
	t->waiters--;
	t->want_bytes -= bytes;
	return t->freed != freed;
}

/* Whether a demotion pass is under way that this thread may wait for. */
static bool pass_to_wait(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;

	return t->passes_ended < t->passes_started && t->started && !t->stop &&
	       !pthread_equal(pthread_self(), t->thread);
}

/* Wait for the demotion pass under way, if any, to end: the blocks its
 * batches hold busy can be taken then. Returns whether there was one. */
static bool wait_pass(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t pass = t->passes_started;

	if (!pass_to_wait(s))
		return false;
	while (t->passes_ended < pass && !t->stop)
		pthread_cond_wait(&t->progress, &s->lock);
	return true;
}

/* Let go of memory-tier record `victim`'s slot if it has a clean copy in a
 * storage tier: it moves down to it, nothing is written. Returns whether it
 * did. Lock held. */
static bool drop_to_copy(struct kvt_store *s, uint32_t victim)
{
	struct kvt_rec *r = rec(s, victim);
	uint64_t copy = r->copy_loc;
	enum kvt_tier ct = r->copy_tier;

	if (ct == KVT_TIER_NONE)
		return false;
	s->counters.tier[s->mem->kind].evictions++;
	s->mem->ops->free(s->mem, r->loc);
	r->copy_tier = KVT_TIER_NONE;
	kvt_tiering_move(s, victim, ct, copy);
	return true;
}

/* Give up the slot of the oldest remembered record that still has a clean
 * copy below and that nobody holds: it goes back to its copy, nothing is
 * written. The coldest block is tried first (drop_to_copy); this is for
 * when it has no copy, so that a block read up for a reader (a LOAD) does
 * not wait for the demoter's writes, nor share the device with them, while
 * DRAM holds blocks the storage tier holds too. A SAVE still waits: the
 * blocks read up stay in DRAM as the policy orders them unless readers need
 * their room. Returns whether it freed one. Lock held. */
static bool drop_clean(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	bool freed = false;

	for (uint32_t j = 0; j < t->clean_n && !freed; j++) {
		uint32_t *slot = &t->clean[(t->clean_head + j) % CLEAN_RING], i = *slot;
		struct kvt_rec *r;

		if (i == KVT_NIL)
			continue;
		r = rec(s, i);
		if (r->state != KVT_REC_LIVE || r->tier != s->mem->kind ||
		    r->copy_tier == KVT_TIER_NONE) {
			*slot = KVT_NIL; /* gone, moved or dirty again: forget it */
			continue;
		}
		if (r->busy || r->pins || (r->flags & KVT_REC_MOVING))
			continue; /* held now: maybe later */
		*slot = KVT_NIL;
		freed = drop_to_copy(s, i);
	}
	while (t->clean_n && t->clean[t->clean_head] == KVT_NIL) {
		t->clean_head = (t->clean_head + 1) % CLEAN_RING;
		t->clean_n--;
	}
	return freed;
}

/* kvt_tiering_alloc, and kvt_tiering_alloc_now when !wait. */
static int alloc(struct kvt_store *s, uint64_t bytes, uint64_t *loc, bool wait)
{
	struct kvt_tiering *t = s->tiering;

	for (int rounds = 0;;) {
		int err = s->mem->ops->alloc(s->mem, bytes, loc);
		uint32_t victim;

		if (err != -ENOSPC)
			return err;
		victim = kvt_catalog_victim(&s->cat, s->mem->kind);
		/* a victim with a clean copy needs no write: it goes down now,
		 * and its room is this allocation's (asking the demoter would
		 * wait for whatever write it is in the middle of) */
		if (victim != KVT_NIL && drop_to_copy(s, victim))
			continue;
		/* a block read up for a reader (the only caller that does not
		 * wait) takes the room of one read up before, not a write's */
		if (!wait && drop_clean(s))
			continue;
		/* with a working tier to demote to, overflow demotes and nothing
		 * is dropped but what the admission rule refuses: when no pass
		 * frees room (all busy or pinned) or others keep taking it, the
		 * caller gets -ENOSPC rather than wait without end */
		if (target(s) && t->started && !t->stop && !pthread_equal(pthread_self(), t->thread)) {
			/* a victim the rule refuses needs no write: it goes here,
			 * and its room is this allocation's (left to the demoter,
			 * the room would go to whoever saves next, time after time) */
			if (victim != KVT_NIL && kvt_tiering_refuse(s, victim, target(s)))
				continue;
			if (!wait)
				return -EAGAIN;
			if (rounds++ < ALLOC_ROUNDS && make_room(s, bytes))
				continue;
			/* a tier that failed meanwhile takes nothing: drop */
			if (target(s))
				return -ENOSPC;
			victim = kvt_catalog_victim(&s->cat, s->mem->kind);
			if (victim != KVT_NIL && drop_to_copy(s, victim))
				continue;
		}
		if (victim == KVT_NIL && !wait && pass_to_wait(s))
			return -EAGAIN;
		if (victim == KVT_NIL && rounds++ < ALLOC_ROUNDS && wait_pass(s))
			continue; /* every block was in the demoter's batches */
		if (victim == KVT_NIL)
			return -ENOSPC;
		s->counters.tier[s->mem->kind].evictions++;
		s->counters.dram_dropped++;
		kvt_tiering_discard(s, victim);
	}
}

int kvt_tiering_alloc(struct kvt_store *s, uint64_t bytes, uint64_t *loc)
{
	return alloc(s, bytes, loc, true);
}

int kvt_tiering_alloc_now(struct kvt_store *s, uint64_t bytes, uint64_t *loc)
{
	return alloc(s, bytes, loc, false);
}

void kvt_tiering_kick(struct kvt_store *s)
{
	if (above(s, s->tiering->high) && target(s))
		pthread_cond_signal(&s->tiering->wake);
}
