/* Movement between DRAM and SSD: see tiering.h. */
#include "store/tiering.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tiers/dram.h"
#include "tiers/ssd.h"

/* Blocks per demotion round: enough to keep the device queue full, few
 * enough that the lock is not away long. */
#define DEMOTE_BATCH 32
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
	uint64_t last_moved;     /* blocks the last round moved */
	bool want_room;

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

void kvt_tiering_import(struct kvt_store *s, struct kvt_ns *ns)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t id = ns_ssd_id(ns);
	size_t keep = 0;

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
 * then the SSD policy's coldest blocks. */
static void evict_ssd(struct kvt_store *s, uint64_t bytes)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t freed = 0;

	while (freed < bytes && t->n_recovered) {
		struct kvt_ssd_rec_info *r = &t->recovered[--t->n_recovered];
		kvt_ssd_free(t->ssd, r->loc);
		freed += r->raw_len;
	}
	/* then the spare copies of blocks that are in DRAM anyway */
	for (size_t n = 0; freed < bytes && n < t->cap_clean; n++) {
		uint32_t i = (uint32_t)(t->clean_cursor++ % t->cap_clean);
		if (t->clean[i] != LOC_GONE) {
			freed += rec(s, i)->size;
			kvt_tiering_forget(s, i);
		}
	}
	while (freed < bytes) {
		uint32_t v = kvt_catalog_victim(&s->cat, KVT_TIER_SSD);
		if (v == KVT_NIL)
			break;
		freed += rec(s, v)->size;
		s->counters.tier[KVT_TIER_SSD].evictions++;
		kvt_store_discard(s, v);
	}
}

static int cmp_loc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Drop from t->recovered the records whose locs (sorted) are gone, so that
 * neither evict_ssd nor a later attach of their namespace uses them. */
static void prune_recovered(struct kvt_tiering *t, const uint64_t *gone, size_t n)
{
	size_t keep = 0;

	for (size_t k = 0; k < t->n_recovered; k++)
		if (!bsearch(&t->recovered[k].loc, gone, n, sizeof(*gone), cmp_loc))
			t->recovered[keep++] = t->recovered[k];
	t->n_recovered = keep;
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

			if (!ns)
				unclaimed[n_unclaimed++] = d[k].loc;
			if (i == KVT_NIL)
				continue;
			r = rec(s, i);
			if (clean_get(s->tiering, i) == d[k].loc) {
				s->tiering->clean[i] = LOC_GONE; /* the DRAM copy stays */
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

/* One round: pick cold DRAM blocks, write them (lock released), move those
 * that became durable. Returns the number moved. Lock held. */
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
		kvt_catalog_busy(&s->cat, i, +1);
		codec[n] = s->ns[r->ns - 1]->ssd_codec;
		w[n] = (struct kvt_ssd_write){
			.ns_id = ns_ssd_id(s->ns[r->ns - 1]), .key = r->key,
			.data = s->dram->ops->slot_ptr(s->dram, r->loc), .len = r->size,
			.codec = &codec[n] };
		if (r->parent != KVT_NIL) {
			w[n].parent = rec(s, r->parent)->key;
			w[n].has_parent = true;
		}
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
		evict_ssd(s, 2 * full_bytes);
	return moved;
}

static void *demoter_main(void *arg)
{
	struct kvt_store *s = arg;
	struct kvt_tiering *t = s->tiering;

	pthread_mutex_lock(&s->lock);
	while (!t->stop) {
		uint64_t moved = 0;
		bool wanted = t->want_room;

		if ((wanted || above(s, t->high)) && !kvt_ssd_degraded(t->ssd)) {
			/* write-back until below the low watermark */
			do {
				moved += demote_round(s);
			} while (!t->stop && above(s, t->low) && moved && !kvt_ssd_degraded(t->ssd) &&
				 !t->want_room);
		}
		if (wanted) {
			t->want_room = false;
			t->last_moved = moved;
			t->rounds++;
			pthread_cond_broadcast(&t->progress);
		}
		if (!t->want_room && !t->stop) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&t->wake, &s->lock, &ts);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

bool kvt_tiering_make_room(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t round;

	if (!t->started || t->stop || kvt_ssd_degraded(t->ssd) ||
	    pthread_equal(pthread_self(), t->thread))
		return false;
	round = t->rounds;
	t->want_room = true;
	pthread_cond_signal(&t->wake);
	while (t->rounds == round && !t->stop)
		pthread_cond_wait(&t->progress, &s->lock);
	return t->last_moved > 0;
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
}

int kvt_tiering_open(struct kvt_store *s, const struct kvt_store_opts *opts)
{
	struct kvt_tiering *t = calloc(1, sizeof(*t));
	struct kvt_ssd_opts so;
	struct kvt_tier_stats ds = { 0 };
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
	pthread_cond_init(&t->wake, NULL);
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
	kvt_ssd_close(t->ssd);
	pthread_cond_destroy(&t->progress);
	pthread_cond_destroy(&t->wake);
	free(t->clean);
	free(t->held);
	free(t->promoting);
	free(t->recovered);
	free(t);
	s->tiering = NULL;
}
