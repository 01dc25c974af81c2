/* Movement between DRAM and SSD: see tiering.h. */
#include "store/tiering.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/log.h"
#include "tiers/dram.h"
#include "tiers/ssd.h"

/* Blocks per demotion round: enough to keep the device queue full, few
 * enough that the lock is not away long. */
#define DEMOTE_BATCH 32
/* Tombstones waiting while the tier cannot take them (degraded) are capped:
 * past this, a removal is not logged (the block may come back on reopen). */
#define MAX_PENDING_TOMBS 65536
/* Probes of a degraded SSD tier: after 1 s, then doubling up to 64 s. */
#define PROBE_FIRST_NS 1000000000ULL
#define PROBE_MAX_NS (64 * 1000000000ULL)
/* An SSD record that no longer exists (dropped by segment release). */
#define LOC_GONE UINT64_MAX

struct kvt_tiering {
	struct kvt_ssd *ssd;
	uint64_t dram_capacity;
	double high, low;

	pthread_t thread;
	bool started, stop;
	pthread_cond_t wake;     /* the demoter waits here */
	pthread_cond_t progress; /* make_room and promotion waiters */
	uint64_t rounds;         /* demotion rounds finished */
	uint64_t last_progress;  /* blocks the last round moved, or SSD room it made */
	bool want_room;

	/* removals to log (tombstones), each with the sequence number it got
	 * when the block was removed */
	struct kvt_ssd_write *tombs;
	size_t n_tombs, cap_tombs;
	bool tombs_new;          /* queued since the demoter last took them */

	/* a degraded tier is probed, with backoff */
	uint64_t probe_at;       /* CLOCK_MONOTONIC ns; 0: not degraded yet seen */
	uint64_t probe_backoff;  /* ns */

	/* records recovery found whose namespace has not attached yet */
	struct kvt_ssd_rec_info *recovered;
	size_t n_recovered, cap_recovered;

	/* records being promoted: a second reader waits rather than read twice */
	uint32_t *promoting;
	size_t n_promoting, cap_promoting;

	/* clean[i]: the SSD copy a promoted record i keeps (LOC_GONE if none),
	 * so a block read back stays durable, and demoting it again is free */
	uint64_t *clean;
	size_t cap_clean, clean_cursor;

	/* records in DRAM whose copy segment release dropped: written again */
	uint32_t *rewrite;
	size_t n_rewrite, cap_rewrite;

	/* held[i]: the SSD record that record i holds (kvt_ssd_hold) while it is
	 * on SSD pinned or busy, so segment release never drops it; LOC_GONE if none */
	uint64_t *held;
	size_t cap_held;
};

static inline struct kvt_rec *rec(struct kvt_store *s, uint32_t i)
{
	return kvt_index_rec(s->cat.idx, i);
}

/* The 64-bit namespace id written into SSD records: the first 8 bytes of
 * the namespace's salt, itself a digest of its descriptor. */
static uint64_t ns_ssd_id(const struct kvt_ns *ns)
{
	uint64_t v;

	memcpy(&v, ns->salt.bytes, sizeof(v));
	return le64toh(v);
}

static struct kvt_ns *ns_of_ssd_id(struct kvt_store *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_ns; i++)
		if (s->ns[i] && ns_ssd_id(s->ns[i]) == id)
			return s->ns[i];
	return NULL;
}

static uint64_t clean_get(const struct kvt_tiering *t, uint32_t i)
{
	return i < t->cap_clean ? t->clean[i] : LOC_GONE;
}

/* Grow a per-record array of locs to hold index i, new entries LOC_GONE. */
static int locs_reserve(uint64_t **v, size_t *cap, uint32_t i)
{
	size_t n = *cap ? *cap : 1024;
	uint64_t *nv;

	if (i < *cap)
		return 0;
	while (n <= i)
		n *= 2;
	nv = realloc(*v, n * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	for (size_t k = *cap; k < n; k++)
		nv[k] = LOC_GONE;
	*v = nv;
	*cap = n;
	return 0;
}

static int clean_set(struct kvt_tiering *t, uint32_t i, uint64_t loc)
{
	if (locs_reserve(&t->clean, &t->cap_clean, i))
		return -ENOMEM;
	t->clean[i] = loc;
	return 0;
}

void kvt_tiering_sync_hold(struct kvt_store *s, uint32_t i)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_rec *r = rec(s, i);
	uint64_t want = LOC_GONE, have = i < t->cap_held ? t->held[i] : LOC_GONE;

	if (r->state == KVT_REC_LIVE && r->tier == KVT_TIER_SSD && r->loc != LOC_GONE &&
	    (r->pins || r->busy))
		want = r->loc;
	if (want == have)
		return;
	if (have != LOC_GONE) {
		kvt_ssd_hold(t->ssd, have, -1); /* -ENOENT: freed or dropped since */
		t->held[i] = LOC_GONE;
	}
	/* without memory to note the hold, the record is only as safe as before */
	if (want != LOC_GONE && !locs_reserve(&t->held, &t->cap_held, i) &&
	    !kvt_ssd_hold(t->ssd, want, +1))
		t->held[i] = want;
}

void kvt_tiering_forget(struct kvt_store *s, uint32_t i)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t loc = clean_get(t, i);

	if (i < t->cap_held && t->held[i] != LOC_GONE) {
		kvt_ssd_hold(t->ssd, t->held[i], -1);
		t->held[i] = LOC_GONE;
	}
	if (loc != LOC_GONE) {
		kvt_ssd_free(t->ssd, loc);
		t->clean[i] = LOC_GONE;
	}
}

static int remember_cb(const struct kvt_ssd_rec_info *r, void *arg)
{
	struct kvt_tiering *t = arg;

	if (t->n_recovered == t->cap_recovered) {
		size_t cap = t->cap_recovered ? 2 * t->cap_recovered : 256;
		struct kvt_ssd_rec_info *v = realloc(t->recovered, cap * sizeof(*v));
		if (!v)
			return 1; /* no memory to remember it: let the tier free it */
		t->recovered = v;
		t->cap_recovered = cap;
	}
	t->recovered[t->n_recovered++] = *r;
	return 0;
}

static void forget_dropped(struct kvt_store *s);

void kvt_tiering_import(struct kvt_store *s, struct kvt_ns *ns)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t id = ns_ssd_id(ns);
	size_t keep = 0;

	forget_dropped(s); /* none of what segment release dropped is indexed */
	/* oldest first, so a parent is usually indexed before its children */
	for (size_t k = 0; k < t->n_recovered; k++) {
		struct kvt_ssd_rec_info *r = &t->recovered[k];
		uint32_t i;

		if (r->ns_id != id) {
			t->recovered[keep++] = *r;
			continue;
		}
		if (r->raw_len != ns->block_bytes ||
		    kvt_index_insert(s->cat.idx, ns->id, &r->key, &i)) {
			kvt_ssd_free(t->ssd, r->loc);
			continue;
		}
		rec(s, i)->size = (uint32_t)r->raw_len;
		rec(s, i)->loc = r->loc;
		kvt_catalog_publish(&s->cat, i, KVT_TIER_SSD, r->has_parent ? &r->parent : NULL);
	}
	t->n_recovered = keep;
}

void kvt_tiering_free(struct kvt_store *s, uint64_t loc)
{
	if (loc != LOC_GONE)
		kvt_ssd_free(s->tiering->ssd, loc);
}

/* Drop a held (busy) record after a failed move; the last holder frees it. */
static void unhold(struct kvt_store *s, uint32_t i)
{
	kvt_catalog_busy(&s->cat, i, -1);
	kvt_tiering_sync_hold(s, i);
	if (rec(s, i)->state == KVT_REC_DYING && rec(s, i)->busy == 0)
		kvt_store_discard(s, i);
}

/* Make room on SSD for about `bytes`: first records no namespace claimed,
 * then the SSD policy's coldest blocks, and only when none is left the
 * spare copies of blocks that are in DRAM. A block read back sits in DRAM,
 * where it is more recent than any block only on SSD (the SSD policy takes
 * a block coming down as its most recent), so its copy goes after them: it
 * stays durable as long as colder blocks are kept. Every record let go is
 * counted: an eviction when the block is lost, a dropped copy when not.
 * Returns the number of records let go. */
static uint64_t evict_ssd(struct kvt_store *s, uint64_t bytes)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t freed = 0, n_freed = 0;

	while (freed < bytes && t->n_recovered) {
		struct kvt_ssd_rec_info *r = &t->recovered[--t->n_recovered];
		kvt_ssd_free(t->ssd, r->loc);
		freed += r->raw_len;
		s->counters.tier[KVT_TIER_SSD].evictions++;
		n_freed++;
	}
	while (freed < bytes) {
		uint32_t v = kvt_catalog_victim(&s->cat, KVT_TIER_SSD);
		if (v == KVT_NIL)
			break;
		freed += rec(s, v)->size;
		s->counters.tier[KVT_TIER_SSD].evictions++;
		kvt_store_discard(s, v);
		n_freed++;
	}
	for (size_t n = 0; freed < bytes && n < t->cap_clean; n++) {
		uint32_t i = (uint32_t)(t->clean_cursor++ % t->cap_clean);
		if (t->clean[i] != LOC_GONE) {
			freed += rec(s, i)->size;
			kvt_tiering_forget(s, i);
			s->counters.ssd_copies_dropped++;
			n_freed++;
		}
	}
	return n_freed;
}

static int cmp_loc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Drop from t->recovered the records whose locs (sorted) are gone, so that
 * neither evict_ssd nor a later attach of their namespace uses them.
 * Returns how many there were. */
static size_t prune_recovered(struct kvt_tiering *t, const uint64_t *gone, size_t n)
{
	size_t keep = 0, pruned;

	for (size_t k = 0; k < t->n_recovered; k++)
		if (!bsearch(&t->recovered[k].loc, gone, n, sizeof(*gone), cmp_loc))
			t->recovered[keep++] = t->recovered[k];
	pruned = t->n_recovered - keep;
	t->n_recovered = keep;
	return pruned;
}

/* Have the demoter write record i's block again (it lost its SSD copy). */
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

/* Forget the records segment release dropped from the SSD tier. */
static void forget_dropped(struct kvt_store *s)
{
	struct kvt_ssd_rec_info d[64];
	uint64_t unclaimed[64];
	size_t n;

	while ((n = kvt_ssd_take_dropped(s->tiering->ssd, d, 64)) > 0) {
		size_t n_unclaimed = 0;

		for (size_t k = 0; k < n; k++) {
			struct kvt_ns *ns = ns_of_ssd_id(s, d[k].ns_id);
			uint32_t i = ns ? kvt_index_find(s->cat.idx, ns->id, &d[k].key) : KVT_NIL;
			struct kvt_rec *r;

			/* not indexed: a recovered record not imported yet (its
			 * namespace may be attaching right now) */
			if (i == KVT_NIL) {
				unclaimed[n_unclaimed++] = d[k].loc;
				continue;
			}
			r = rec(s, i);
			if (clean_get(s->tiering, i) == d[k].loc) {
				/* the block stays in DRAM; its copy is written again */
				s->tiering->clean[i] = LOC_GONE;
				s->counters.ssd_copies_dropped++;
				want_rewrite(s->tiering, i);
				continue;
			}
			if (r->tier != KVT_TIER_SSD || r->loc != d[k].loc)
				continue;
			r->loc = LOC_GONE;
			kvt_tiering_sync_hold(s, i);
			s->counters.tier[KVT_TIER_SSD].evictions++;
			if (r->state == KVT_REC_LIVE && r->busy)
				kvt_catalog_retire(&s->cat, i);
			else if (!r->busy)
				kvt_store_discard(s, i);
		}
		if (n_unclaimed) {
			qsort(unclaimed, n_unclaimed, sizeof(*unclaimed), cmp_loc);
			s->counters.tier[KVT_TIER_SSD].evictions +=
				prune_recovered(s->tiering, unclaimed, n_unclaimed);
		}
	}
}

static bool above(struct kvt_store *s, double mark)
{
	/* occupancy counts slot rounding and slab tails: a 40 MiB block fills a
	 * 64 MiB slab, though its bytes are 62% of it */
	return (double)kvt_dram_occupied(s->dram) > mark * (double)s->tiering->dram_capacity;
}

/* Hold DRAM record i busy and fill w to write its block from its slot,
 * straight, with a copy of its namespace's codec (the lock is let go while
 * the write runs). */
static void hold_for_write(struct kvt_store *s, uint32_t i, struct kvt_ssd_write *w,
			   struct kvt_codec_cfg *codec)
{
	struct kvt_rec *r = rec(s, i);

	kvt_catalog_busy(&s->cat, i, +1);
	*codec = s->ns[r->ns - 1]->ssd_codec;
	*w = (struct kvt_ssd_write){
		.ns_id = ns_ssd_id(s->ns[r->ns - 1]), .key = r->key,
		.data = s->dram->ops->slot_ptr(s->dram, r->loc), .len = r->size, .codec = codec };
	if (r->parent != KVT_NIL) {
		w->parent = rec(s, r->parent)->key;
		w->has_parent = true;
	}
}

/* One round: pick cold DRAM blocks, write them (lock released), move those
 * that became durable; if the SSD tier was full, evict there what the
 * refused writes needed. Returns the progress made: blocks moved plus SSD
 * records let go (a retry can then succeed). Lock held. */
static uint64_t demote_round(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_ssd_write w[DEMOTE_BATCH];
	struct kvt_codec_cfg codec[DEMOTE_BATCH]; /* copies: the lock is let go */
	uint32_t idx[DEMOTE_BATCH];
	uint64_t picked = 0, moved = 0, full_bytes = 0;
	size_t n = 0;

	for (int tries = 0; n < DEMOTE_BATCH && tries < 4 * DEMOTE_BATCH; tries++) {
		uint32_t i;
		struct kvt_rec *r;

		/* make_room wants at least one block; the watermark wants more */
		if ((n || moved) && !(t->want_room && n + moved < DEMOTE_BATCH / 4) &&
		    (double)(s->cat.used_bytes[KVT_TIER_DRAM] - picked) <=
			    t->low * (double)t->dram_capacity)
			break;
		i = kvt_catalog_victim(&s->cat, KVT_TIER_DRAM);
		if (i == KVT_NIL)
			break;
		r = rec(s, i);
		if (clean_get(t, i) != LOC_GONE) {
			/* its SSD copy is still there: nothing to write */
			s->dram->ops->free(s->dram, r->loc);
			r->loc = t->clean[i];
			t->clean[i] = LOC_GONE;
			kvt_catalog_move(&s->cat, i, KVT_TIER_SSD);
			s->counters.tier[KVT_TIER_DRAM].evictions++;
			moved++;
			continue;
		}
		hold_for_write(s, i, &w[n], &codec[n]);
		idx[n++] = i;
		picked += r->size;
	}
	if (!n)
		return moved;

	pthread_mutex_unlock(&s->lock);
	kvt_ssd_write(t->ssd, w, n);
	pthread_mutex_lock(&s->lock);

	for (size_t k = 0; k < n; k++) {
		uint32_t i = idx[k];
		struct kvt_rec *r = rec(s, i);

		if (w[k].res == 0 && r->state == KVT_REC_LIVE && r->busy == 1 && !r->pins) {
			s->dram->ops->free(s->dram, r->loc);
			r->loc = w[k].loc;
			kvt_catalog_move(&s->cat, i, KVT_TIER_SSD);
			s->counters.tier[KVT_TIER_DRAM].evictions++;
			s->counters.tier[KVT_TIER_SSD].bytes_in += r->size;
			moved++;
		} else if (w[k].res == 0) {
			/* read, pinned or removed meanwhile: it stays where it is */
			kvt_ssd_free(t->ssd, w[k].loc);
		} else if (w[k].res == -ENOSPC) {
			full_bytes += r->size;
		}
		unhold(s, i);
	}
	forget_dropped(s);
	if (full_bytes)
		moved += evict_ssd(s, full_bytes);
	return moved;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Queue a tombstone to write. Returns false when it cannot be kept. */
static bool tomb_queue(struct kvt_tiering *t, const struct kvt_ssd_write *w)
{
	if (t->n_tombs == t->cap_tombs) {
		size_t cap = t->cap_tombs ? 2 * t->cap_tombs : 64;
		struct kvt_ssd_write *v;

		if (t->n_tombs >= MAX_PENDING_TOMBS)
			return false;
		v = realloc(t->tombs, cap * sizeof(*v));
		if (!v)
			return false;
		t->tombs = v;
		t->cap_tombs = cap;
	}
	t->tombs[t->n_tombs++] = *w;
	return true;
}

/* Log the removals waiting (lock held; released during the write). Those
 * the tier could not take yet (degraded, full, out of memory) wait for the
 * demoter's next pass, or the close. */
static void write_tombstones(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_ssd_write *w = t->tombs;
	size_t n = t->n_tombs, lost = 0;

	t->tombs = NULL;
	t->n_tombs = t->cap_tombs = 0;
	t->tombs_new = false;
	pthread_mutex_unlock(&s->lock);
	kvt_ssd_write(t->ssd, w, n);
	pthread_mutex_lock(&s->lock);
	forget_dropped(s); /* the writes may have made room by releasing segments */
	for (size_t k = 0; k < n; k++)
		if (w[k].res && !tomb_queue(t, &w[k]))
			lost++;
	if (lost)
		kvt_log(KVT_LOG_WARN, "event=ssd.removal_not_logged removals=%zu", lost);
	free(w);
}

/* A degraded SSD tier is probed at growing intervals. Returns the time to
 * wait until the next probe (ns), 0 when the tier is not degraded. Lock
 * held; released during the probe. */
static uint64_t probe_degraded(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t now = mono_ns();

	if (!kvt_ssd_degraded(t->ssd)) {
		t->probe_at = 0;
		return 0;
	}
	if (!t->probe_at) {
		t->probe_backoff = PROBE_FIRST_NS;
		t->probe_at = now + t->probe_backoff;
	}
	if (now < t->probe_at)
		return t->probe_at - now;
	pthread_mutex_unlock(&s->lock);
	int rc = kvt_ssd_probe(t->ssd);
	pthread_mutex_lock(&s->lock);
	forget_dropped(s); /* a new segment may have come from releasing one */
	if (!rc) {
		t->probe_at = 0;
		return 0;
	}
	if (t->probe_backoff < PROBE_MAX_NS)
		t->probe_backoff *= 2;
	t->probe_at = mono_ns() + t->probe_backoff;
	return t->probe_backoff;
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

/* Write again the blocks in DRAM whose SSD copy segment release dropped
 * (they were read back, so they are in use), so that they stay durable; a
 * block that left DRAM meanwhile, or has a copy again, is passed by. Lock
 * held; released during the write. */
static void rewrite_copies(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_ssd_write w[DEMOTE_BATCH];
	struct kvt_codec_cfg codec[DEMOTE_BATCH];
	uint32_t idx[DEMOTE_BATCH];
	size_t n = 0;

	while (n < DEMOTE_BATCH && t->n_rewrite) {
		uint32_t i = t->rewrite[--t->n_rewrite];
		struct kvt_rec *r = rec(s, i);

		if (r->state != KVT_REC_LIVE || r->tier != KVT_TIER_DRAM ||
		    clean_get(t, i) != LOC_GONE)
			continue;
		hold_for_write(s, i, &w[n], &codec[n]);
		idx[n++] = i;
	}
	if (!n)
		return;
	pthread_mutex_unlock(&s->lock);
	kvt_ssd_write(t->ssd, w, n);
	pthread_mutex_lock(&s->lock);
	for (size_t k = 0; k < n; k++) {
		uint32_t i = idx[k];
		struct kvt_rec *r = rec(s, i);

		if (w[k].res == 0 && (r->state != KVT_REC_LIVE || r->tier != KVT_TIER_DRAM ||
				      clean_get(t, i) != LOC_GONE || clean_set(t, i, w[k].loc)))
			kvt_ssd_free(t->ssd, w[k].loc);
		else if (w[k].res == 0)
			s->counters.tier[KVT_TIER_SSD].bytes_in += r->size;
		unhold(s, i);
	}
	forget_dropped(s);
}

static void *demoter_main(void *arg)
{
	struct kvt_store *s = arg;
	struct kvt_tiering *t = s->tiering;

	pthread_mutex_lock(&s->lock);
	while (!t->stop) {
		uint64_t progress = 0, round, next_probe;
		bool wanted = t->want_room;

		if (t->n_tombs && !kvt_ssd_degraded(t->ssd))
			write_tombstones(s);
		if (t->n_rewrite && !kvt_ssd_degraded(t->ssd))
			rewrite_copies(s);
		if ((wanted || above(s, t->high)) && !kvt_ssd_degraded(t->ssd)) {
			/* write-back until below the low watermark, for as long as
			 * rounds make progress: a round that moves nothing (all
			 * busy or pinned) ends it until the next kick */
			do {
				round = demote_round(s);
				progress += round;
			} while (round && !t->stop && above(s, t->low) && !kvt_ssd_degraded(t->ssd) &&
				 !t->want_room);
		}
		if (wanted) {
			t->want_room = false;
			t->last_progress = progress;
			t->rounds++;
			pthread_cond_broadcast(&t->progress);
		}
		next_probe = probe_degraded(s);
		if (!t->want_room && !t->stop &&
		    !((t->tombs_new || t->n_rewrite) && !kvt_ssd_degraded(t->ssd)))
			demoter_wait(s, next_probe);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

void kvt_tiering_removed(struct kvt_store *s, uint32_t i)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_rec *r = rec(s, i);
	struct kvt_ssd_write w = { .ns_id = ns_ssd_id(s->ns[r->ns - 1]), .key = r->key,
				   .tomb = true, .seq = kvt_ssd_seq_reserve(t->ssd) };

	/* unlogged, the block may come back when the store reopens */
	if (!tomb_queue(t, &w))
		kvt_log(KVT_LOG_WARN, "event=ssd.removal_not_logged removals=1 pending=%zu",
			t->n_tombs);
	t->tombs_new = true;
	pthread_cond_signal(&t->wake);
}

bool kvt_tiering_make_room(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t round;

	if (!t->started || t->stop || pthread_equal(pthread_self(), t->thread))
		return false;
	round = t->rounds;
	t->want_room = true;
	pthread_cond_signal(&t->wake);
	/* the demoter answers every request with one round, which ends */
	while (t->rounds == round && !t->stop)
		pthread_cond_wait(&t->progress, &s->lock);
	return t->rounds != round && t->last_progress > 0;
}

bool kvt_tiering_usable(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;

	return t && t->started && !t->stop && !kvt_ssd_degraded(t->ssd) &&
	       !pthread_equal(pthread_self(), t->thread);
}

void kvt_tiering_kick(struct kvt_store *s)
{
	if (above(s, s->tiering->high))
		pthread_cond_signal(&s->tiering->wake);
}

static bool promoting(struct kvt_tiering *t, uint32_t i, size_t *at)
{
	for (size_t k = 0; k < t->n_promoting; k++)
		if (t->promoting[k] == i) {
			if (at)
				*at = k;
			return true;
		}
	return false;
}

int kvt_tiering_promote(struct kvt_store *s, uint32_t i)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_ssd_read r;
	uint64_t dram_loc, ssd_loc;
	size_t at;
	int err;

	while (promoting(t, i, NULL))
		pthread_cond_wait(&t->progress, &s->lock);
	if (rec(s, i)->state != KVT_REC_LIVE)
		return -ENOENT;
	if (rec(s, i)->tier != KVT_TIER_SSD)
		return 0; /* another reader promoted it meanwhile */
	if (rec(s, i)->loc == LOC_GONE)
		return -ENOENT;
	if (t->n_promoting == t->cap_promoting) {
		size_t cap = t->cap_promoting ? 2 * t->cap_promoting : 16;
		uint32_t *v = realloc(t->promoting, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->promoting = v;
		t->cap_promoting = cap;
	}
	t->promoting[t->n_promoting++] = i;
	err = kvt_store_dram_alloc(s, rec(s, i)->size, &dram_loc);
	if (err)
		goto done;
	ssd_loc = rec(s, i)->loc;
	r = (struct kvt_ssd_read){ .loc = ssd_loc, .ns_id = ns_ssd_id(s->ns[rec(s, i)->ns - 1]),
				   .key = rec(s, i)->key,
				   .buf = s->dram->ops->slot_ptr(s->dram, dram_loc),
				   .len = rec(s, i)->size };
	pthread_mutex_unlock(&s->lock);
	kvt_ssd_read(t->ssd, &r, 1);
	pthread_mutex_lock(&s->lock);

	if (r.res == 0 && rec(s, i)->loc == ssd_loc) {
		/* the SSD copy stays: the block remains durable */
		if (clean_set(t, i, ssd_loc))
			kvt_ssd_free(t->ssd, ssd_loc);
		rec(s, i)->loc = dram_loc;
		kvt_catalog_move(&s->cat, i, KVT_TIER_DRAM);
		kvt_tiering_sync_hold(s, i); /* the clean copy needs no hold */
		s->counters.tier[KVT_TIER_SSD].bytes_out += r.len;
		s->counters.tier[KVT_TIER_DRAM].bytes_in += r.len;
		err = 0;
		goto done;
	}
	s->dram->ops->free(s->dram, dram_loc);
	if (r.res == -EBADMSG) {
		s->counters.checksum_failures++;
		s->counters.tier[KVT_TIER_SSD].errors++;
		err = -EIO;
	} else if (r.res == -EIO) {
		s->counters.tier[KVT_TIER_SSD].errors++;
		err = -EIO;
	} else if (r.res == -ENOENT && rec(s, i)->loc == ssd_loc) {
		/* segment release dropped it before its entry here was updated:
		 * an eviction, counted once (forget_dropped finds the loc gone) */
		rec(s, i)->loc = LOC_GONE;
		kvt_tiering_sync_hold(s, i);
		s->counters.tier[KVT_TIER_SSD].evictions++;
		err = -ENOENT;
	} else {
		err = r.res ? r.res : -ENOENT;
	}
	/* a block that cannot be read back is dropped, never served */
	if (rec(s, i)->state == KVT_REC_LIVE)
		kvt_catalog_retire(&s->cat, i);
done:
	if (promoting(t, i, &at))
		t->promoting[at] = t->promoting[--t->n_promoting];
	pthread_cond_broadcast(&t->progress);
	return err;
}

int kvt_ns_set_ssd_codec(struct kvt_ns *ns, const char *codec, double min_ratio)
{
	struct kvt_store *s = ns ? ns->store : NULL;
	int id = kvt_codec_parse(codec);

	if (!s || !s->tiering || id < 0 || min_ratio < 0)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	kvt_codec_cfg_init(&ns->ssd_codec); /* min_ratio 0 means the default, 1.1 */
	ns->ssd_codec.id = (enum kvt_codec_id)id;
	if (min_ratio > 0)
		ns->ssd_codec.min_ratio = min_ratio;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

void kvt_tiering_stats(struct kvt_store *s, struct kvt_store_stats *st)
{
	struct kvt_tier_stats *ts = &st->tier[KVT_TIER_SSD];
	struct kvt_ssd_stats ss;

	kvt_ssd_stats(s->tiering->ssd, &ss);
	ts->present = true;
	ts->capacity_bytes = ss.capacity_bytes;
	ts->degraded = ss.degraded;
	ts->io_fallback = !ss.io.uring;
	ts->errors += ss.write_errors + ss.read_errors + ss.sync_errors;
	st->ssd = (struct kvt_ssd_health){
		.recovered = ss.recovered, .torn = ss.recovery_torn, .corrupt = ss.recovery_corrupt,
		.superseded = ss.recovery_superseded, .removed = ss.recovery_removed,
		.quarantined = ss.quarantined, .foreign = ss.foreign, .scanned = ss.recovery_scanned,
		.open_ms = ss.open_ns / 1000000, .tombstones = ss.tombstones, .probes = ss.probes,
		.resumed = ss.resumed };
}

int kvt_tiering_open(struct kvt_store *s, const struct kvt_store_opts *opts)
{
	struct kvt_tiering *t = calloc(1, sizeof(*t));
	struct kvt_ssd_opts so;
	struct kvt_tier_stats ds = { 0 };
	pthread_condattr_t ca;
	void *region;
	uint64_t len;
	int err;

	if (!t)
		return -ENOMEM;
	if (opts->dram_low_watermark <= 0 || opts->dram_high_watermark > 1 ||
	    opts->dram_low_watermark > opts->dram_high_watermark || !opts->ssd_bytes) {
		free(t);
		return -EINVAL;
	}
	t->high = opts->dram_high_watermark;
	t->low = opts->dram_low_watermark;
	s->dram->ops->stats(s->dram, &ds);
	t->dram_capacity = ds.capacity_bytes;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&t->progress, NULL);

	kvt_ssd_opts_init(&so, sizeof(so));
	so.dir = opts->ssd_dir;
	so.capacity_bytes = opts->ssd_bytes;
	so.segment_bytes = opts->ssd_segment_bytes;
	if (!so.segment_bytes) {
		/* a small tier still gets several segments, so that releasing
		 * one does not empty it (a block must fit in a segment) */
		so.segment_bytes = opts->ssd_bytes / 8 & ~(uint64_t)4095;
		if (so.segment_bytes < (4ULL << 20))
			so.segment_bytes = 4ULL << 20;
		if (so.segment_bytes > (256ULL << 20))
			so.segment_bytes = 256ULL << 20;
		if (so.segment_bytes > opts->ssd_bytes)
			so.segment_bytes = opts->ssd_bytes & ~(uint64_t)4095;
	}
	so.queue_depth = opts->ssd_queue_depth;
	so.force_threads = opts->ssd_force_threads;
	err = kvt_ssd_open(&so, remember_cb, t, &t->ssd);
	if (err)
		goto fail;
	region = kvt_dram_region(s->dram, &len);
	kvt_ssd_register_region(t->ssd, region, len);
	s->tiering = t;
	err = pthread_create(&t->thread, NULL, demoter_main, s);
	if (err) {
		err = -err;
		s->tiering = NULL;
		goto fail_ssd;
	}
	t->started = true;
	return 0;

fail_ssd:
	kvt_ssd_close(t->ssd);
fail:
	pthread_cond_destroy(&t->progress);
	pthread_cond_destroy(&t->wake);
	free(t->recovered);
	free(t);
	return err;
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
	/* removals not logged yet are logged now (nothing else runs) */
	if (t->n_tombs) {
		kvt_ssd_write(t->ssd, t->tombs, t->n_tombs);
		for (size_t k = 0; k < t->n_tombs; k++)
			if (t->tombs[k].res)
				kvt_log(KVT_LOG_WARN, "event=ssd.removal_not_logged err=\"%s\"",
					kvt_strerror(t->tombs[k].res));
	}
	kvt_ssd_close(t->ssd);
	pthread_cond_destroy(&t->progress);
	pthread_cond_destroy(&t->wake);
	free(t->clean);
	free(t->held);
	free(t->rewrite);
	free(t->tombs);
	free(t->promoting);
	free(t->recovered);
	free(t);
	s->tiering = NULL;
}
