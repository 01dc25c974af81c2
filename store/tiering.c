/* SPDX-License-Identifier: Apache-2.0 */
/* Movement over the store's list of tiers: see tiering.h. */
#include "store/tiering.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/log.h"
#include "store/warm.h"
#include "util/clock.h"

/* Blocks per demotion batch: enough to keep the device queue full, few
 * enough that a batch's records are acknowledged soon. The batches of a
 * pass someone waits for are a quarter of that, so the wait is short. */
#define DEMOTE_BATCH 32
/* Demotion batches in flight: while one is synced (its group commit),
 * the others' writes keep the device busy; four short batches of a pass
 * someone waits for are as deep a queue as one long one. A storage tier
 * takes this many write batches at once (KVT_SSD_WRITE_BATCHES). */
#define DEMOTE_INFLIGHT 4
/* Times one allocation waits for the demoter to free room: each wait ends
 * with room freed, so only an allocation that others keep beating to the
 * room gets this far. Room can come a block at a time with no write (the
 * admission rule refusing blocks), and then a saver that is running beats
 * one being woken often: 32 rounds were lost in a row under load. */
#define ALLOC_ROUNDS 1024
/* Memory-tier records with a clean copy below, remembered newest last (see
 * drop_clean); older ones fall off. */
#define CLEAN_RING 1024
/* Tombstones waiting while a tier cannot take them (degraded) are capped:
 * past this, a removal is not logged (the block may come back on reopen). */
#define MAX_PENDING_TOMBS 65536
/* Probes of a degraded storage tier: after 1 s, then doubling up to 64 s. */
#define PROBE_FIRST_NS 1000000000ULL
#define PROBE_MAX_NS (64 * 1000000000ULL)

/* A storage tier in the list, with what the store keeps for it. */
struct storage {
	struct kvt_storage_tier *t;
	/* records it found at open whose namespace has not attached yet */
	struct kvt_tier_rec *recovered;
	size_t n_recovered, cap_recovered;
	/* removals to log (tombstones), each with the sequence number it got
	 * when the block was removed */
	struct kvt_tier_io *tombs;
	size_t n_tombs, cap_tombs;
	/* a degraded tier is probed, with backoff */
	uint64_t probe_at;        /* CLOCK_MONOTONIC ns; 0: not seen degraded */
	uint64_t probe_backoff;   /* ns */
};

/* A demotion batch and the records it holds busy. */
struct wbatch {
	struct kvt_tier_batch b;
	struct kvt_tier_io io[DEMOTE_BATCH];
	struct kvt_codec_cfg codec[DEMOTE_BATCH]; /* copies: the lock is let go */
	uint32_t idx[DEMOTE_BATCH];
	struct storage *to;
};

struct kvt_tiering {
	struct storage st[KVT_MAX_STORAGE_TIERS];
	size_t n;
	double high, low;

	pthread_t thread;
	bool started, stop;
	pthread_cond_t wake;       /* the demoter waits here */
	pthread_cond_t progress;   /* allocations waiting for room */
	uint32_t waiters;          /* allocations waiting for room */
	uint64_t asks, asks_seen;  /* make_room calls; those a pass has started for */
	uint64_t want_bytes;       /* what they wait for now (each counted once) */
	uint64_t freed;            /* times the demoter freed memory-tier room */
	uint64_t passes_started, passes_ended;
	bool tombs_new;            /* queued since the demoter last took them */

	/* records in the memory tier whose copy a storage tier dropped: written
	 * again */
	uint32_t *rewrite;
	size_t n_rewrite, cap_rewrite;
	uint32_t copy_cursor;      /* where the last scan for spare copies ended */

	/* records that got a clean copy (read up for a reader, or a spare
	 * written), oldest first from clean_head; KVT_NIL: taken or stale */
	uint32_t clean[CLEAN_RING];
	uint32_t clean_head, clean_n;

	struct wbatch wb[DEMOTE_INFLIGHT];
};

static inline struct kvt_rec *rec(struct kvt_store *s, uint32_t i)
{
	return kvt_index_rec(s->cat.idx, i);
}

static struct storage *storage_of(struct kvt_store *s, unsigned kind)
{
	struct kvt_tiering *t = s->tiering;

	for (size_t k = 0; k < t->n; k++)
		if (t->st[k].t->kind == kind)
			return &t->st[k];
	return NULL;
}

struct kvt_storage_tier *kvt_tiering_tier(struct kvt_store *s, enum kvt_tier kind)
{
	struct storage *st = storage_of(s, kind);

	return st ? st->t : NULL;
}

bool kvt_tiering_has(struct kvt_store *s, unsigned caps)
{
	struct kvt_tiering *t = s->tiering;

	for (size_t k = 0; k < t->n; k++)
		if ((t->st[k].t->caps & caps) == caps)
			return true;
	return false;
}

size_t kvt_tiering_keyed(struct kvt_store *s, struct kvt_storage_tier **out, size_t max)
{
	struct kvt_tiering *t = s->tiering;
	size_t n = 0;

	for (size_t k = 0; k < t->n && n < max; k++)
		if (t->st[k].t->caps & KVT_TIER_CAP_KEYED)
			out[n++] = t->st[k].t;
	return n;
}

static bool degraded(struct storage *st)
{
	return st->t->ops->degraded(st->t);
}

/* Where demotions go: the first storage tier that takes them and works. */
static struct storage *target(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;

	for (size_t k = 0; k < t->n; k++)
		if ((t->st[k].t->caps & KVT_TIER_CAP_DEMOTE) && !degraded(&t->st[k]))
			return &t->st[k];
	return NULL;
}

static struct kvt_ns *ns_of_storage_id(struct kvt_store *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_ns; i++)
		if (s->ns[i] && kvt_ns_storage_id(s->ns[i]) == id)
			return s->ns[i];
	return NULL;
}

/* ---- holds, moves, copies --------------------------------------------------- */

/* The catalog's report of a record's first or last hold: the storage tier
 * holding the record holds it too, so it never drops it for room. */
static void hold_cb(void *arg, uint32_t i, bool held)
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
		hold_cb(s, i, false);
	r->loc = loc;
	kvt_catalog_move(&s->cat, i, to);
	if (held)
		hold_cb(s, i, true);
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
static void drop_copy(struct kvt_store *s, struct kvt_rec *r)
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
		drop_copy(s, r);
	kvt_catalog_drop(&s->cat, i);
}

/* Drop a held (busy) record after a move; the last holder of a removed one
 * frees it. */
static void unhold(struct kvt_store *s, uint32_t i)
{
	kvt_catalog_busy(&s->cat, i, -1);
	if (rec(s, i)->state == KVT_REC_DYING && rec(s, i)->busy == 0)
		kvt_tiering_discard(s, i);
}

/* ---- what storage tiers report ------------------------------------------- */

static int recovered_push(struct storage *st, const struct kvt_tier_rec *r)
{
	if (st->n_recovered == st->cap_recovered) {
		size_t cap = st->cap_recovered ? 2 * st->cap_recovered : 256;
		struct kvt_tier_rec *v = realloc(st->recovered, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		st->recovered = v;
		st->cap_recovered = cap;
	}
	st->recovered[st->n_recovered++] = *r;
	return 0;
}

void kvt_tiering_import(struct kvt_store *s, struct kvt_ns *ns)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t id = kvt_ns_storage_id(ns);

	kvt_tiering_forget_dropped(s); /* none of what tiers dropped is indexed */
	for (size_t k = 0; k < t->n; k++) {
		struct storage *st = &t->st[k];
		size_t keep = 0;

		/* oldest first, so a parent is usually indexed before its children */
		for (size_t j = 0; j < st->n_recovered; j++) {
			struct kvt_tier_rec *r = &st->recovered[j];
			uint32_t i;

			if (r->ns_id != id) {
				st->recovered[keep++] = *r;
				continue;
			}
			if (r->len != ns->block_bytes ||
			    kvt_index_insert(s->cat.idx, ns->id, &r->key, &i)) {
				st->t->ops->free(st->t, r->loc);
				continue;
			}
			rec(s, i)->size = (uint32_t)r->len;
			rec(s, i)->loc = r->loc;
			kvt_catalog_publish(&s->cat, i, st->t->kind, r->has_parent ? &r->parent : NULL);
		}
		st->n_recovered = keep;
	}
}

/* Have the demoter write record i's block again (it lost its copy). */
static void want_rewrite(struct kvt_tiering *t, uint32_t i)
{
	if (t->n_rewrite == t->cap_rewrite) {
		size_t cap = t->cap_rewrite ? 2 * t->cap_rewrite : 64;
		uint32_t *v = realloc(t->rewrite, cap * sizeof(*v));
		if (!v)
			return; /* durable again at its next demotion */
		t->rewrite = v;
		t->cap_rewrite = cap;
	}
	t->rewrite[t->n_rewrite++] = i;
	pthread_cond_signal(&t->wake);
}

static int cmp_loc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Drop from st->recovered the records whose locs (sorted) are gone, so that
 * neither eviction nor a later attach of their namespace uses them.
 * Returns how many there were. */
static size_t prune_recovered(struct storage *st, const uint64_t *gone, size_t n)
{
	size_t keep = 0, pruned;

	for (size_t k = 0; k < st->n_recovered; k++)
		if (!bsearch(&st->recovered[k].loc, gone, n, sizeof(*gone), cmp_loc))
			st->recovered[keep++] = st->recovered[k];
	pruned = st->n_recovered - keep;
	st->n_recovered = keep;
	return pruned;
}

static void forget_dropped_of(struct kvt_store *s, struct storage *st)
{
	unsigned kind = st->t->kind;
	struct kvt_tier_rec d[64];
	uint64_t unclaimed[64];
	size_t n;

	if (!st->t->ops->take_dropped)
		return;
	while ((n = st->t->ops->take_dropped(st->t, d, 64)) > 0) {
		size_t n_unclaimed = 0;

		for (size_t k = 0; k < n; k++) {
			struct kvt_ns *ns = ns_of_storage_id(s, d[k].ns_id);
			uint32_t i = ns ? kvt_index_find(s->cat.idx, ns->id, &d[k].key) : KVT_NIL;
			struct kvt_rec *r;

			/* not indexed: a recovered record not imported yet (its
			 * namespace may be attaching right now) */
			if (i == KVT_NIL) {
				unclaimed[n_unclaimed++] = d[k].loc;
				continue;
			}
			r = rec(s, i);
			if (r->copy_tier == kind && r->copy_loc == d[k].loc) {
				/* the block stays in memory; its copy is written again */
				r->copy_tier = KVT_TIER_NONE;
				s->counters.ssd_copies_dropped++;
				want_rewrite(s->tiering, i);
				continue;
			}
			if (r->tier != kind || r->loc != d[k].loc)
				continue;
			r->loc = KVT_LOC_NONE;
			s->counters.tier[kind].evictions++;
			if (r->state == KVT_REC_LIVE && r->busy)
				kvt_catalog_retire(&s->cat, i);
			else if (!r->busy)
				kvt_tiering_discard(s, i);
		}
		if (n_unclaimed) {
			qsort(unclaimed, n_unclaimed, sizeof(*unclaimed), cmp_loc);
			s->counters.tier[kind].evictions += prune_recovered(st, unclaimed, n_unclaimed);
		}
	}
}

void kvt_tiering_forget_dropped(struct kvt_store *s)
{
	for (size_t k = 0; k < s->tiering->n; k++)
		forget_dropped_of(s, &s->tiering->st[k]);
}

/* Make room in storage tier st for about `bytes`: first records no
 * namespace claimed, then its policy's coldest blocks, and only when none
 * is left the spare copies of blocks that are in memory. A block read back
 * sits in memory, where it is more recent than any block only in st (the
 * tier's policy takes a block coming down as its most recent), so its copy
 * goes after them: it stays durable as long as colder blocks are kept.
 * Every record let go is counted: an eviction when the block is lost, a
 * dropped copy when not. Returns the number of records let go. */
static uint64_t evict_from(struct kvt_store *s, struct storage *st, uint64_t bytes)
{
	struct kvt_tiering *t = s->tiering;
	unsigned kind = st->t->kind;
	uint64_t freed = 0, n_freed = 0;
	uint32_t high = kvt_index_high(s->cat.idx);

	while (freed < bytes && st->n_recovered) {
		struct kvt_tier_rec *r = &st->recovered[--st->n_recovered];

		st->t->ops->free(st->t, r->loc);
		freed += r->len;
		s->counters.tier[kind].evictions++;
		n_freed++;
	}
	while (freed < bytes) {
		uint32_t v = kvt_catalog_victim(&s->cat, kind);

		if (v == KVT_NIL)
			break;
		freed += rec(s, v)->size;
		s->counters.tier[kind].evictions++;
		kvt_tiering_discard(s, v);
		n_freed++;
	}
	for (uint32_t n = 0; freed < bytes && n < high; n++) {
		uint32_t i = t->copy_cursor++ % high;
		struct kvt_rec *r = rec(s, i);

		if (r->state != KVT_REC_FREE && r->copy_tier == kind) {
			freed += r->size;
			drop_copy(s, r);
			s->counters.ssd_copies_dropped++;
			n_freed++;
		}
	}
	return n_freed;
}

/* ---- the demoter ------------------------------------------------------------ */

static bool above(struct kvt_store *s, double mark)
{
	/* occupancy counts slot rounding and slab tails: a 40 MiB block fills a
	 * 64 MiB slab, though its bytes are 62% of it */
	return (double)s->mem->ops->occupied(s->mem) > mark * (double)s->mem->capacity;
}

/* The memory tier freed room: allocations waiting for it retry. */
static void room_freed(struct kvt_tiering *t)
{
	t->freed++;
	pthread_cond_broadcast(&t->progress);
}

/* Hold memory-tier record i busy and fill io to write its block from its
 * slot to tier `to`, with a copy of its namespace's codec (the lock is let
 * go while the write runs). The record's sequence number is taken now,
 * under the lock: a removal once the lock is let go orders its tombstone
 * after it, however late the write starts. */
static void hold_for_write(struct kvt_store *s, uint32_t i, struct storage *to,
			   struct kvt_tier_io *io, struct kvt_codec_cfg *codec)
{
	struct kvt_rec *r = rec(s, i);
	struct kvt_ns *ns = s->ns[r->ns - 1];

	kvt_catalog_busy(&s->cat, i, +1);
	*codec = ns->codec;
	*io = (struct kvt_tier_io){ .ns_id = kvt_ns_storage_id(ns), .key = r->key,
				    .buf = s->mem->ops->slot_ptr(s->mem, r->loc), .len = r->size,
				    .codec = codec, .room = s->mem->headroom >= KVT_TIER_HEADROOM };
	if (to->t->ops->seq_reserve)
		io->seq = to->t->ops->seq_reserve(to->t);
	if (r->parent != KVT_NIL) {
		io->parent = rec(s, r->parent)->key;
		io->has_parent = true;
	}
}

/* Drop memory-tier record i (live, not held, no clean copy) if the
 * admission rule of tier `to` refuses it: it is never written, its slot is
 * free at once, and it counts as an eviction and as refused. Returns
 * whether it was dropped. Lock held. */
static bool refuse(struct kvt_store *s, uint32_t i, struct storage *to)
{
	struct kvt_rec *r = rec(s, i);

	if (kvt_catalog_admit(&s->cat, i, to->t->kind))
		return false;
	s->counters.tier[s->mem->kind].evictions++;
	s->counters.ssd_admission_refused++;
	s->counters.ssd_admission_refused_bytes += r->size;
	kvt_tiering_discard(s, i);
	return true;
}

/* A demotion pass: what it owes waiting allocations, what it has done. */
struct pass {
	uint64_t need;      /* bytes allocations asked for when it began */
	uint64_t got;       /* bytes it moved or put in flight so far */
	uint64_t in_flight; /* bytes of its batches not finished yet */
};

/* Whether the pass should take more blocks: waiting allocations are owed
 * bytes still, or occupancy (less what is already being written) is above
 * the low mark. Occupancy, as for the high mark: with slot headroom and
 * rounding, the blocks' own bytes may sit below the low mark while no slot
 * is free. An allocation waits for the bytes it needs, not for the whole
 * pass. */
static bool want_more(struct kvt_store *s, const struct pass *p)
{
	uint64_t occupied = s->mem->ops->occupied(s->mem);

	return p->got < p->need ||
	       (occupied > p->in_flight &&
		(double)(occupied - p->in_flight) > s->tiering->low * (double)s->mem->capacity);
}

/* Fill batch b with up to max of the memory policy's coldest blocks for
 * tier `to`. A block with a clean copy moves to it at once, writing
 * nothing; one the admission rule of `to` refuses is dropped at once (an
 * eviction, counted as refused). Both free their slot now. Returns the
 * number to write. Lock held. */
static size_t pick(struct kvt_store *s, struct wbatch *b, struct storage *to, size_t max,
		   struct pass *p)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t moved = 0;
	size_t n = 0;

	b->to = to;
	for (int tries = 0; n < max && tries < 4 * DEMOTE_BATCH; tries++) {
		uint32_t i;
		struct kvt_rec *r;

		if ((n || moved) && !want_more(s, p))
			break;
		i = kvt_catalog_victim(&s->cat, s->mem->kind);
		if (i == KVT_NIL)
			break;
		r = rec(s, i);
		p->got += r->size;
		if (r->copy_tier != KVT_TIER_NONE) {
			/* its copy is still there: nothing to write */
			uint64_t copy = r->copy_loc;
			enum kvt_tier ct = r->copy_tier;

			s->mem->ops->free(s->mem, r->loc);
			r->copy_tier = KVT_TIER_NONE;
			kvt_tiering_move(s, i, ct, copy);
			s->counters.tier[s->mem->kind].evictions++;
			moved++;
			continue;
		}
		if (refuse(s, i, to)) {
			moved++;
			continue;
		}
		/* a block found in a region handed over is checked before it is
		 * written anywhere: one that fails is dropped here */
		if (kvt_warm_verify(s, i, false)) {
			moved++;
			continue;
		}
		hold_for_write(s, i, to, &b->io[n], &b->codec[n]);
		/* its parent counts it gone now: a chain's next block can be
		 * this batch's next victim, if it is the coldest tail then */
		kvt_catalog_leaving(&s->cat, i);
		b->idx[n++] = i;
		p->in_flight += r->size;
	}
	if (n) {
		s->counters.demote_batches++;
		s->counters.demote_batch_blocks += n;
	}
	if (moved)
		room_freed(t);
	b->b = (struct kvt_tier_batch){ .write = true, .io = b->io, .n = n };
	return n;
}

/* A batch is done: move what became durable, let go of what a reader or a
 * pin kept. What a full tier refused is evicted for in the tier: *refused
 * gets its bytes when that made room (the pass owes them still, and tries
 * again), 0 when nothing could be let go. Returns the number of blocks that
 * left the memory tier. Lock held. */
static uint64_t finish(struct kvt_store *s, struct wbatch *b, uint64_t *refused)
{
	struct storage *to = b->to;
	uint64_t moved = 0, full_bytes = 0;

	for (size_t k = 0; k < b->b.n; k++) {
		uint32_t i = b->idx[k];
		struct kvt_rec *r = rec(s, i);
		struct kvt_tier_io *io = &b->io[k];

		if (io->res == 0 && r->state == KVT_REC_LIVE && r->busy == 1 && !r->pins &&
		    r->tier == s->mem->kind) {
			s->mem->ops->free(s->mem, r->loc);
			kvt_tiering_move(s, i, to->t->kind, io->loc);
			s->counters.tier[s->mem->kind].evictions++;
			s->counters.tier[to->t->kind].bytes_in += r->size;
			moved++;
		} else if (io->res == 0) {
			/* read, pinned or removed meanwhile: it stays where it is */
			to->t->ops->free(to->t, io->loc);
		} else if (io->res == -ENOSPC) {
			full_bytes += r->size;
		}
		/* one that stays is its parent's child here again */
		kvt_catalog_stayed(&s->cat, i);
		unhold(s, i);
	}
	kvt_tiering_forget_dropped(s);
	*refused = full_bytes && evict_from(s, to, full_bytes) ? full_bytes : 0;
	/* room in the tier below is not room here: only a block that left
	 * wakes the allocations waiting */
	if (moved)
		room_freed(s->tiering);
	return moved;
}

/* Write back until the `need` bytes waiting allocations asked for are on
 * their way and occupancy is below the low watermark, DEMOTE_INFLIGHT
 * batches at a time (one is prepared while the other is written), for as
 * long as batches make progress. Lock held; released while batches are
 * submitted and waited for. */
static void demote_pass(struct kvt_store *s, uint64_t need)
{
	struct kvt_tiering *t = s->tiering;
	struct pass p = { .need = need };
	size_t head = 0, inflight = 0;
	bool stuck = false;

	for (;;) {
		while (inflight < DEMOTE_INFLIGHT && !stuck && !t->stop) {
			struct wbatch *b = &t->wb[(head + inflight) % DEMOTE_INFLIGHT];
			struct storage *to = target(s);
			/* the batches of a pass someone waits for are short: its
			 * room comes back sooner, and reads (a LOAD waiting for
			 * slots) queue behind less */
			size_t max = p.got < p.need ? DEMOTE_BATCH / 4 : DEMOTE_BATCH;

			if (!to || !want_more(s, &p) || !pick(s, b, to, max, &p))
				break;
			pthread_mutex_unlock(&s->lock);
			to->t->ops->submit(to->t, &b->b);
			pthread_mutex_lock(&s->lock);
			inflight++;
		}
		if (!inflight)
			return;
		struct wbatch *b = &t->wb[head];
		uint64_t moved, refused;

		pthread_mutex_unlock(&s->lock);
		b->to->t->ops->wait(b->to->t, &b->b);
		pthread_mutex_lock(&s->lock);
		for (size_t k = 0; k < b->b.n; k++)
			p.in_flight -= b->io[k].len;
		moved = finish(s, b, &refused);
		p.got -= refused;
		/* a batch that moved nothing and made no room for what it could
		 * not write (all kept, or failed) ends the pass once what is in
		 * flight is back */
		stuck = (!moved && !refused) || stuck;
		head = (head + 1) % DEMOTE_INFLIGHT;
		inflight--;
	}
}

static bool tomb_queue(struct storage *st, const struct kvt_tier_io *w)
{
	if (st->n_tombs == st->cap_tombs) {
		size_t cap = st->cap_tombs ? 2 * st->cap_tombs : 64;
		struct kvt_tier_io *v;

		if (st->n_tombs >= MAX_PENDING_TOMBS)
			return false;
		v = realloc(st->tombs, cap * sizeof(*v));
		if (!v)
			return false;
		st->tombs = v;
		st->cap_tombs = cap;
	}
	st->tombs[st->n_tombs++] = *w;
	return true;
}

/* Log the removals waiting for st (lock held; released during the write).
 * Those the tier could not take yet (degraded, full, out of memory) wait
 * for the demoter's next pass, or the close. */
static void write_tombstones(struct kvt_store *s, struct storage *st)
{
	struct kvt_tier_batch b = { .write = true, .io = st->tombs, .n = st->n_tombs };
	size_t lost = 0;

	st->tombs = NULL;
	st->n_tombs = st->cap_tombs = 0;
	pthread_mutex_unlock(&s->lock);
	kvt_tier_run(st->t, &b);
	pthread_mutex_lock(&s->lock);
	kvt_tiering_forget_dropped(s); /* the writes may have made room */
	for (size_t k = 0; k < b.n; k++)
		if (b.io[k].res && !tomb_queue(st, &b.io[k]))
			lost++;
	if (lost)
		kvt_log(KVT_LOG_WARN, "event=%s.removal_not_logged removals=%zu", st->t->ops->name,
			lost);
	free(b.io);
}

/* Write the blocks of memory-tier records list[0..n) to tier `to` as clean
 * copies (they stay in memory), in batch b; one that left memory
 * meanwhile, has a copy, or fails its check is passed by. Returns how many
 * of list were taken; *full gets the bytes of those the tier had no room
 * for (queued to be written again when requeue), *copied and *copied_bytes count
 * those written. Lock held; released during the write. */
static size_t write_copies(struct kvt_store *s, struct wbatch *b, struct storage *to,
			   const uint32_t *list, size_t n_list, bool requeue, uint64_t *full,
			   uint64_t *copied, uint64_t *copied_bytes)
{
	size_t n = 0, taken = 0;

	b->to = to;
	while (n < DEMOTE_BATCH && taken < n_list) {
		uint32_t i = list[taken++];
		struct kvt_rec *r = rec(s, i);

		if (r->state != KVT_REC_LIVE || r->tier != s->mem->kind ||
		    r->copy_tier != KVT_TIER_NONE || kvt_warm_verify(s, i, r->busy || r->pins))
			continue;
		hold_for_write(s, i, to, &b->io[n], &b->codec[n]);
		b->idx[n++] = i;
	}
	if (!n)
		return taken;
	b->b = (struct kvt_tier_batch){ .write = true, .io = b->io, .n = n };
	pthread_mutex_unlock(&s->lock);
	kvt_tier_run(to->t, &b->b);
	pthread_mutex_lock(&s->lock);
	for (size_t k = 0; k < n; k++) {
		uint32_t i = b->idx[k];
		struct kvt_rec *r = rec(s, i);
		int res = b->io[k].res;

		if (res == 0 && (r->state != KVT_REC_LIVE || r->tier != s->mem->kind ||
				 !kvt_tiering_keep_copy(s, i, to->t->kind, b->io[k].loc))) {
			to->t->ops->free(to->t, b->io[k].loc);
		} else if (res == 0) {
			s->counters.tier[to->t->kind].bytes_in += r->size;
			(*copied)++;
			*copied_bytes += r->size;
		} else if (res == -ENOSPC && r->state == KVT_REC_LIVE) {
			*full += r->size;
			if (requeue)
				want_rewrite(s->tiering, i);
		}
		unhold(s, i);
	}
	kvt_tiering_forget_dropped(s);
	return taken;
}

/* Write again the blocks in memory whose copy a tier dropped (they were
 * read back, so they are in use), so that they stay durable; a block that
 * left memory meanwhile, or has a copy again, is passed by. One the tier
 * had no room for is tried again after eviction made some. Lock held;
 * released during the write. */
static void rewrite_copies(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	struct storage *to = target(s);
	uint32_t list[DEMOTE_BATCH];
	uint64_t full_bytes = 0, copied = 0, copied_bytes = 0;
	size_t n = 0;

	if (!to)
		return;
	while (n < DEMOTE_BATCH && t->n_rewrite)
		list[n++] = t->rewrite[--t->n_rewrite];
	write_copies(s, &t->wb[0], to, list, n, true, &full_bytes, &copied, &copied_bytes);
	/* no room: colder blocks make way (the retry stops when none can) */
	if (full_bytes && !evict_from(s, to, full_bytes))
		t->n_rewrite = 0;
}

int kvt_tiering_write_down(struct kvt_store *s, uint64_t deadline_ns, struct kvt_write_down *out)
{
	uint64_t t0 = kvt_now_ns(), full = 0;
	struct storage *to;
	struct wbatch *b = malloc(sizeof(*b));
	uint32_t *list = NULL;
	size_t n = 0, done = 0;
	int err = 0;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	to = target(s);
	if (!to)
		err = -ENODEV;
	else if (!b || !(list = malloc((kvt_index_high(s->cat.idx) + 1) * sizeof(*list))))
		err = -ENOMEM;
	/* every block only the memory tier holds, that the tier's rule admits */
	for (uint32_t i = 0; !err && i < kvt_index_high(s->cat.idx); i++) {
		struct kvt_rec *r = rec(s, i);

		if (r->state != KVT_REC_LIVE || r->tier != s->mem->kind ||
		    r->copy_tier != KVT_TIER_NONE)
			continue;
		if (!kvt_catalog_admit(&s->cat, i, to->t->kind))
			out->refused++;
		else
			list[n++] = i;
	}
	while (!err && done < n && kvt_now_ns() < deadline_ns && !degraded(to)) {
		full = 0;
		done += write_copies(s, b, to, list + done, n - done, false, &full, &out->written,
				     &out->written_bytes);
		/* a full tier makes room from its coldest blocks, as for a
		 * demotion; when it cannot, the rest stays in DRAM only */
		if (full && !evict_from(s, to, full))
			break;
	}
	out->left = n - out->written;
	out->ms = (kvt_now_ns() - t0) / 1000000;
	pthread_mutex_unlock(&s->lock);
	free(list);
	free(b);
	return err;
}

/* Degraded storage tiers are probed at growing intervals. Returns the time
 * to wait until the next probe (ns), 0 when none is degraded. Lock held;
 * released during a probe. */
static uint64_t probe_degraded(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t next = 0;

	for (size_t k = 0; k < t->n; k++) {
		struct storage *st = &t->st[k];
		uint64_t now = kvt_now_ns();
		int rc;

		if (!st->t->ops->probe || !degraded(st)) {
			st->probe_at = 0;
			continue;
		}
		if (!st->probe_at) {
			st->probe_backoff = PROBE_FIRST_NS;
			st->probe_at = now + st->probe_backoff;
		}
		if (now >= st->probe_at) {
			pthread_mutex_unlock(&s->lock);
			rc = st->t->ops->probe(st->t);
			pthread_mutex_lock(&s->lock);
			kvt_tiering_forget_dropped(s); /* a new segment may have come from a release */
			if (!rc) {
				st->probe_at = 0;
				continue;
			}
			if (st->probe_backoff < PROBE_MAX_NS)
				st->probe_backoff *= 2;
			st->probe_at = kvt_now_ns() + st->probe_backoff;
		}
		now = kvt_now_ns();
		if (st->probe_at > now && (!next || st->probe_at - now < next))
			next = st->probe_at - now;
	}
	return next;
}

/* Wait for a kick, or until `ns` have passed (0: no limit). */
static void demoter_wait(struct kvt_store *s, uint64_t ns)
{
	struct kvt_tiering *t = s->tiering;
	struct timespec ts;

	if (!ns) {
		pthread_cond_wait(&t->wake, &s->lock);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ns / 1000000000ULL);
	ts.tv_nsec += (long)(ns % 1000000000ULL);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&t->wake, &s->lock, &ts);
}

static bool tombs_due(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;

	for (size_t k = 0; k < t->n; k++)
		if (t->st[k].n_tombs && !degraded(&t->st[k]))
			return true;
	return false;
}

static void *demoter_main(void *arg)
{
	struct kvt_store *s = arg;
	struct kvt_tiering *t = s->tiering;

	pthread_mutex_lock(&s->lock);
	while (!t->stop) {
		uint64_t next_probe;

		t->tombs_new = false;
		for (size_t k = 0; k < t->n; k++)
			if (t->st[k].n_tombs && !degraded(&t->st[k]))
				write_tombstones(s, &t->st[k]);
		if (t->n_rewrite)
			rewrite_copies(s);
		if (t->asks != t->asks_seen || above(s, t->high)) {
			/* a pass answers everyone waiting when it started: it
			 * ends having freed room or found none to free */
			uint64_t need = t->want_bytes;

			t->asks_seen = t->asks;
			t->passes_started++;
			demote_pass(s, need);
			t->passes_ended++;
			pthread_cond_broadcast(&t->progress);
		}
		next_probe = probe_degraded(s);
		if (!t->stop && t->asks == t->asks_seen && !(t->tombs_new && tombs_due(s)) &&
		    !(t->n_rewrite && target(s)))
			demoter_wait(s, next_probe);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

void kvt_tiering_removed(struct kvt_store *s, uint32_t i)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_rec *r = rec(s, i);

	for (size_t k = 0; k < t->n; k++) {
		struct storage *st = &t->st[k];
		struct kvt_tier_io w = { .ns_id = kvt_ns_storage_id(s->ns[r->ns - 1]), .key = r->key,
					 .tomb = true };

		if (!(st->t->caps & KVT_TIER_CAP_DEMOTE))
			continue;
		w.seq = st->t->ops->seq_reserve ? st->t->ops->seq_reserve(st->t) : 0;
		/* unlogged, the block may come back when the store reopens */
		if (!tomb_queue(st, &w))
			kvt_log(KVT_LOG_WARN, "event=%s.removal_not_logged removals=1 pending=%zu",
				st->t->ops->name, st->n_tombs);
		t->tombs_new = true;
	}
	pthread_cond_signal(&t->wake);
}

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
			if (victim != KVT_NIL && refuse(s, victim, target(s)))
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

void kvt_tiering_stats(struct kvt_store *s, struct kvt_store_stats *st)
{
	for (size_t k = 0; k < s->tiering->n; k++) {
		const struct storage *sg = &s->tiering->st[k];
		struct kvt_storage_tier *t = sg->t;

		st->tier[t->kind].present = true;
		t->ops->stats(t, st);
		/* what the tier holds for namespaces not attached since a restart
		 * is on its media all the same: count it there */
		for (size_t j = 0; j < sg->n_recovered; j++)
			st->tier[t->kind].used_bytes += sg->recovered[j].len;
		st->tier[t->kind].blocks += sg->n_recovered;
		st->recovered_unattached += sg->n_recovered;
	}
}

/* ---- the list -------------------------------------------------------------- */

int kvt_tiering_add(struct kvt_store *s, struct kvt_storage_tier *t)
{
	struct kvt_tiering *tg = s->tiering;
	struct kvt_tier_rec r[64];
	struct storage st = { .t = t };
	void *region;
	uint64_t len;
	size_t n;
	int err = 0;

	region = s->mem->ops->region(s->mem, &len);
	t->ops->register_region(t, region, len);
	while (t->ops->take_recovered && !err && (n = t->ops->take_recovered(t, r, 64)) > 0)
		for (size_t k = 0; k < n && !err; k++)
			err = recovered_push(&st, &r[k]);
	pthread_mutex_lock(&s->lock);
	if (!err && tg->n == KVT_MAX_STORAGE_TIERS)
		err = -ENOSPC;
	if (!err && (storage_of(s, t->kind) || t->kind == s->mem->kind))
		err = -EEXIST;
	if (!err)
		tg->st[tg->n++] = st;
	pthread_mutex_unlock(&s->lock);
	if (err) {
		free(st.recovered);
		t->ops->close(t);
	}
	return err;
}

int kvt_tiering_open(struct kvt_store *s, const struct kvt_store_opts *opts)
{
	struct kvt_tiering *t;
	pthread_condattr_t ca;
	int err;

	if (opts->dram_low_watermark <= 0 || opts->dram_high_watermark > 1 ||
	    opts->dram_low_watermark > opts->dram_high_watermark)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->high = opts->dram_high_watermark;
	t->low = opts->dram_low_watermark;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&t->progress, NULL);
	s->tiering = t;
	s->cat.hold_cb = hold_cb;
	s->cat.hold_arg = s;
	err = pthread_create(&t->thread, NULL, demoter_main, s);
	if (err) {
		s->tiering = NULL;
		pthread_cond_destroy(&t->progress);
		pthread_cond_destroy(&t->wake);
		free(t);
		return -err;
	}
	t->started = true;
	return 0;
}

void kvt_tiering_close(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;

	if (!t)
		return;
	pthread_mutex_lock(&s->lock);
	t->stop = true;
	pthread_cond_broadcast(&t->wake);
	pthread_cond_broadcast(&t->progress);
	pthread_mutex_unlock(&s->lock);
	if (t->started)
		pthread_join(t->thread, NULL);
	/* blocks whose copy went lately are written again: a graceful close
	 * keeps every block that was durable (nothing else runs now) */
	pthread_mutex_lock(&s->lock);
	for (int round = 0; round < 64 && t->n_rewrite && target(s); round++)
		rewrite_copies(s);
	pthread_mutex_unlock(&s->lock);
	for (size_t k = 0; k < t->n; k++) {
		struct storage *st = &t->st[k];

		/* removals not logged yet are logged now (nothing else runs) */
		if (st->n_tombs) {
			struct kvt_tier_batch b = { .write = true, .io = st->tombs, .n = st->n_tombs };

			kvt_tier_run(st->t, &b);
			for (size_t j = 0; j < b.n; j++)
				if (b.io[j].res)
					kvt_log(KVT_LOG_WARN, "event=%s.removal_not_logged err=\"%s\"",
						st->t->ops->name, kvt_strerror(b.io[j].res));
		}
		st->t->ops->close(st->t);
		free(st->tombs);
		free(st->recovered);
	}
	pthread_cond_destroy(&t->progress);
	pthread_cond_destroy(&t->wake);
	free(t->rewrite);
	free(t);
	s->tiering = NULL;
}
