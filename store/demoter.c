/* SPDX-License-Identifier: Apache-2.0 */
/* The demoter: writes the memory tier's coldest blocks down to a storage
 * tier (write-back demotion), writes again the copies tiers dropped, logs
 * removals, probes degraded tiers; and the write-down of a clean stop. See
 * tiering.h. */
#include "store/tiering_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/warm.h"
#include "util/clock.h"
#include "util/log.h"

/* Probes of a degraded storage tier: after 1 s, then doubling up to 64 s. */
#define PROBE_FIRST_NS 1000000000ULL
#define PROBE_MAX_NS (64 * 1000000000ULL)

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
bool kvt_tiering_refuse(struct kvt_store *s, uint32_t i, struct storage *to)
{
	struct kvt_rec *r = rec(s, i);

	if (kvt_catalog_admit(&s->cat, i, to->t->kind))
		return false;
	s->counters.tier[s->mem->kind].evictions++;
	to->refused++;
	to->refused_bytes += r->size;
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
		if (kvt_tiering_refuse(s, i, to)) {
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
		kvt_tiering_unhold(s, i);
	}
	kvt_tiering_forget_dropped(s);
	*refused = full_bytes && kvt_tiering_evict_from(s, to, full_bytes, true) ? full_bytes : 0;
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
				kvt_tiering_want_rewrite(s->tiering, i);
		}
		kvt_tiering_unhold(s, i);
	}
	kvt_tiering_forget_dropped(s);
	return taken;
}

/* Write again the blocks in memory whose copy a tier dropped (they were
 * read back, so they are in use), so that they stay durable; a block that
 * left memory meanwhile, or has a copy again, is passed by. One the tier
 * had no room for is tried again after eviction made some. Lock held;
 * released during the write. */
void kvt_tiering_rewrite_copies(struct kvt_store *s)
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
	if (full_bytes && !kvt_tiering_evict_from(s, to, full_bytes, true))
		t->n_rewrite = 0;
}

int kvt_tiering_write_down(struct kvt_store *s, uint64_t deadline_ns, struct kvt_write_down *out)
{
	uint64_t t0 = kvt_now_ns(), full = 0;
	struct storage *to;
	struct wbatch *b = malloc(sizeof(*b));
	uint32_t *list = NULL;
	size_t n = 0, done = 0;
	uint64_t evicted0 = 0; /* then how many the tier evicted for room */
	const char *why;
	bool no_room = false;
	int err = 0;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	to = target(s);
	if (to)
		evicted0 = s->counters.tier[to->t->kind].evictions;
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
		 * demotion, but never from the copies of blocks in memory: those
		 * are what this write-down wrote (it would evict its own writes,
		 * and keep no more), or blocks already kept. When nothing else
		 * can go, the tier is at capacity and the rest stays in DRAM */
		if (full && !kvt_tiering_evict_from(s, to, full, false)) {
			no_room = true;
			break;
		}
	}
	out->left = n - out->written;
	if (to)
		evicted0 = s->counters.tier[to->t->kind].evictions - evicted0;
	why = no_room ? "the tier is full: the rest stays only in DRAM" :
	      to && degraded(to) ? "the tier is degraded" : "out of time";
	out->ms = (kvt_now_ns() - t0) / 1000000;
	pthread_mutex_unlock(&s->lock);
	if (out->left)
		kvt_log(KVT_LOG_WARN, "event=write_down.stopped kept=%llu dropped=%llu evicted=%llu "
			"reason=\"%s\"", (unsigned long long)out->written,
			(unsigned long long)out->left, (unsigned long long)evicted0, why);
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

void *kvt_tiering_demoter_main(void *arg)
{
	struct kvt_store *s = arg;
	struct kvt_tiering *t = s->tiering;

	pthread_mutex_lock(&s->lock);
	while (!t->stop) {
		uint64_t next_probe;

		t->tombs_new = false;
		for (size_t k = 0; k < t->n; k++)
			if (t->st[k].n_tombs && !degraded(&t->st[k]))
				kvt_tiering_write_tombs(s, &t->st[k]);
		if (t->n_rewrite)
			kvt_tiering_rewrite_copies(s);
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
