/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier: segment files, record placement, reclaim, tombstones,
 * summaries, holds and frees, stats, probing a degraded tier; the batches'
 * memory and kvt_ssd_submit / kvt_ssd_wait, which hand a batch to the write
 * path (ssd_write.c) or the read path (ssd_read.c). Open and close are
 * ssd_open.c, recovery ssd_recover.c; ssd_internal.h says which file owns
 * what. */
#include "tiers/ssd_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "util/log.h"

#ifdef KVT_TESTING
static kvt_ssd_create_hook_cb create_hook;
static void *create_hook_arg;

void kvt_ssd_set_create_hook(kvt_ssd_create_hook_cb cb, void *arg)
{
	create_hook = cb;
	create_hook_arg = arg;
}

static void run_create_hook(void)
{
	if (create_hook)
		create_hook(create_hook_arg);
}
#else
static void run_create_hook(void) {}
#endif

/* ---- segments (lock held) ---------------------------------------------- */

void kvt_ssd_degrade(struct kvt_ssd *ssd, int err, const char *what)
{
	if (ssd->st.degraded)
		return;
	ssd->st.degraded = true;
	ssd->st.degraded_error = err;
	kvt_log(KVT_LOG_ERROR, "event=ssd.degraded dir=%s what=\"%s\" err=\"%s\" "
		"action=\"no writes until a probe succeeds; durable records stay readable\"",
		ssd->dir, what, strerror(-err));
}

static bool is_oldest(const struct kvt_ssd *ssd, const struct seg *s)
{
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		if (ssd->segs[i].used && ssd->segs[i].id < s->id)
			return false;
	return true;
}

/* Tombstones hide older records of their keys, which can only sit in this
 * segment or older ones: they must stay until no older segment is left. */
static bool tombs_needed(const struct kvt_ssd *ssd, const struct seg *s)
{
	return s->tombs && !is_oldest(ssd, s);
}

/* Close a segment's file and clear its slot (its records are forgotten). */
void kvt_ssd_seg_drop(struct kvt_ssd *ssd, uint32_t slot)
{
	struct seg *s = &ssd->segs[slot];
	uint32_t gen = s->gen;

	kvt_ssd_io_set_file(ssd->io, slot, -1);
	close(s->fd);
	ssd->st.tombstones -= s->tombs;
	free(s->recs);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->gen = gen; /* the next segment here bumps it: old locs go stale */
	if ((int)slot == ssd->active)
		ssd->active = -1;
	if ((int)slot == ssd->spare)
		ssd->spare = -1;
	ssd->segs_used--;
}

static void seg_release(struct kvt_ssd *ssd, uint32_t slot)
{
	struct seg *s = &ssd->segs[slot];
	char name[64];

	kvt_ssd_sum_name(s->id, name, sizeof(name));
	if (unlinkat(ssd->dir_fd, name, 0) && errno != ENOENT)
		kvt_log(KVT_LOG_WARN, "event=ssd.unlink_failed dir=%s file=%s err=\"%s\"", ssd->dir,
			name, strerror(errno));
	kvt_ssd_seg_name(s->id, name, sizeof(name));
	if (unlinkat(ssd->dir_fd, name, 0))
		kvt_log(KVT_LOG_WARN, "event=ssd.unlink_failed dir=%s file=%s err=\"%s\"", ssd->dir,
			name, strerror(errno));
	kvt_ssd_seg_drop(ssd, slot);
	ssd->st.segments_released++;
}

static bool releasable(const struct kvt_ssd *ssd, const struct seg *s)
{
	return s->used && s->sealed && !s->live_pages && !s->users && !tombs_needed(ssd, s);
}

/* Release the segment in slot if nothing in it is needed any more; then the
 * oldest segment too, while that frees tombstones that kept it. */
void kvt_ssd_seg_maybe_release(struct kvt_ssd *ssd, uint32_t slot)
{
	if (ssd->abandoned || !releasable(ssd, &ssd->segs[slot]))
		return;
	seg_release(ssd, slot);
	for (;;) {
		uint32_t oldest = UINT32_MAX;

		for (uint32_t i = 0; i < ssd->n_slots; i++)
			if (ssd->segs[i].used &&
			    (oldest == UINT32_MAX || ssd->segs[i].id < ssd->segs[oldest].id))
				oldest = i;
		if (oldest == UINT32_MAX || !releasable(ssd, &ssd->segs[oldest]))
			return;
		seg_release(ssd, oldest);
	}
}

struct kvt_ssd_rec *kvt_ssd_seg_find(struct seg *s, uint32_t page)
{
	size_t lo = 0, hi = s->n_recs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->recs[mid].page < page)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n_recs && s->recs[lo].page == page ? &s->recs[lo] : NULL;
}

int kvt_ssd_seg_add_rec(struct seg *s, const struct kvt_ssd_rec *r)
{
	if (s->n_recs == s->cap_recs) {
		size_t cap = s->cap_recs ? 2 * s->cap_recs : 64;
		struct kvt_ssd_rec *n = realloc(s->recs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->recs = n;
		s->cap_recs = cap;
	}
	s->recs[s->n_recs++] = *r;
	return 0;
}

static void rec_kill(struct kvt_ssd *ssd, struct seg *s, struct kvt_ssd_rec *r)
{
	if (r->held) {
		s->held--;
		r->held = 0;
	}
	if (r->state == KVT_SSD_REC_LIVE) {
		s->live_pages -= r->pages;
		ssd->st.blocks--;
		ssd->st.live_raw_bytes -= r->raw_len;
	}
	if (r->state != KVT_SSD_REC_TOMB)
		r->state = KVT_SSD_REC_DEAD;
}

/* Move the live record r of the segment in slot to the dropped list (its
 * loc is gone): 0, or -ENOMEM (it stays). */
static int drop_rec(struct kvt_ssd *ssd, uint32_t slot, struct kvt_ssd_rec *r)
{
	struct seg *s = &ssd->segs[slot];

	if (ssd->n_dropped == ssd->cap_dropped) {
		size_t cap = ssd->cap_dropped ? 2 * ssd->cap_dropped : 64;
		struct kvt_ssd_rec_info *d = realloc(ssd->dropped, cap * sizeof(*d));

		if (!d)
			return -ENOMEM;
		ssd->dropped = d;
		ssd->cap_dropped = cap;
	}
	ssd->dropped[ssd->n_dropped++] = (struct kvt_ssd_rec_info){
		.ns_id = r->ns_id, .key = r->key, .raw_len = r->raw_len,
		.loc = loc_make(s->gen, slot, r->page) };
	rec_kill(ssd, s, r);
	return 0;
}

/* Release the emptiest sealed segment if it is empty enough. */
static int reclaim_one(struct kvt_ssd *ssd)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t i = 0; i < ssd->n_slots; i++) {
		struct seg *s = &ssd->segs[i];
		if (s->used && s->sealed && !s->users && !s->held && !tombs_needed(ssd, s) &&
		    (best == UINT32_MAX || s->live_pages < ssd->segs[best].live_pages))
			best = i;
	}
	if (best == UINT32_MAX)
		return -ENOSPC;
	struct seg *s = &ssd->segs[best];
	if ((double)s->live_pages > ssd->opts.reclaim_live_fraction * s->n_pages)
		return -ENOSPC;
	for (size_t i = 0; i < s->n_recs; i++) {
		if (s->recs[i].state != KVT_SSD_REC_LIVE)
			continue;
		if (drop_rec(ssd, best, &s->recs[i]))
			return -ENOMEM;
		ssd->st.reclaim_dropped++;
	}
	s->live_pages = 0;
	kvt_ssd_seg_maybe_release(ssd, best);
	return 0;
}

size_t kvt_ssd_abandon(struct kvt_ssd *ssd, int err, const char *what)
{
	size_t n = 0;

	if (!ssd)
		return 0;
	pthread_mutex_lock(&ssd->lock);
	if (ssd->abandoned) {
		pthread_mutex_unlock(&ssd->lock);
		return 0;
	}
	if (!ssd->st.degraded) {
		ssd->st.degraded = true;
		ssd->st.degraded_error = err;
	}
	ssd->abandoned = true;
	for (uint32_t slot = 0; slot < ssd->n_slots; slot++)
		for (size_t i = 0; ssd->segs[slot].used && i < ssd->segs[slot].n_recs; i++)
			if (ssd->segs[slot].recs[i].state == KVT_SSD_REC_LIVE &&
			    !drop_rec(ssd, slot, &ssd->segs[slot].recs[i]))
				n++;
	kvt_log(KVT_LOG_ERROR, "event=ssd.abandoned dir=%s what=\"%s\" err=\"%s\" dropped=%zu "
		"action=\"its blocks are misses; its files stay for a later open\"", ssd->dir, what,
		strerror(-err), n);
	pthread_mutex_unlock(&ssd->lock);
	return n;
}

/* Fsync the directory (new or renamed entries), when the tier syncs. */
int kvt_ssd_sync_dir(struct kvt_ssd *ssd)
{
	return ssd->opts.sync && fsync(ssd->dir_fd) ? -errno : 0;
}

/* Rename from to to in dir, never over an existing file. */
static int rename_new(int dir, const char *from, const char *to)
{
	if (!renameat2(dir, from, dir, to, RENAME_NOREPLACE))
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -1;
	/* a file system without RENAME_NOREPLACE: look first */
	if (!faccessat(dir, to, F_OK, AT_SYMLINK_NOFOLLOW)) {
		errno = EEXIST;
		return -1;
	}
	return renameat(dir, from, dir, to);
}

/* Make a segment file: a temporary name, preallocated, its superblock
 * written (and synced), then renamed, so that a file with a segment's name
 * always has a superblock. Called without the lock. Returns 0 and *fd, or
 * -errno (nothing left). */
static int seg_file_create(struct kvt_ssd *ssd, uint64_t id, uint64_t nonce, int *fd_out)
{
	char tmp[80], name[64];
	struct kvt_ssd_sb sb = { .format = KVT_SSD_FORMAT, .salt = ssd->salt, .seg_id = id,
				 .seg_bytes = (uint64_t)ssd->seg_pages * PAGE, .nonce = nonce };
	char *page = aligned_alloc(PAGE, PAGE); /* sb_page is the lock's */
	int fd, rc;

	run_create_hook();
	if (!page)
		return -ENOMEM;
	kvt_ssd_seg_name(id, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	fd = openat(ssd->dir_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		free(page);
		return rc;
	}
	/* preallocate so that appends never meet a full disk half way */
	rc = posix_fallocate(fd, 0, (off_t)ssd->seg_pages * PAGE);
	if (rc == EOPNOTSUPP || rc == EINVAL)
		rc = ftruncate(fd, (off_t)ssd->seg_pages * PAGE) ? errno : 0;
	if (rc) {
		rc = -rc;
		goto err;
	}
	kvt_ssd_sb_encode(&sb, page);
	if (pwrite(fd, page, PAGE, 0) != PAGE) {
		rc = errno ? -errno : -EIO;
		goto err;
	}
	if ((ssd->opts.sync && fdatasync(fd)) || rename_new(ssd->dir_fd, tmp, name)) {
		rc = -errno;
		goto err;
	}
	free(page);
	rc = kvt_ssd_sync_dir(ssd);
	if (rc) {
		unlinkat(ssd->dir_fd, name, 0);
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
err:
	free(page);
	close(fd);
	unlinkat(ssd->dir_fd, tmp, 0);
	return rc;
}

/* A new segment in the lowest free slot: the active one, or with `spare`
 * the one made ahead (ssd->spare), which becomes the active one when that
 * is full. Its file is made with the lock let go: preallocating, syncing it
 * and its directory is I/O that reads, holds and frees (the store calls the
 * last two under its own lock) must not wait behind. One is made at a time:
 * a caller that finds one under way waits for it and returns 0 (look at the
 * active segment again), or returns 0 at once for a spare. A spare takes
 * only a free slot: making one ahead never releases a segment. Returns 0,
 * -ENOSPC (at capacity and nothing can be released), or the -errno of the
 * file (the caller decides whether that degrades the tier). Lock held. */
static int seg_make(struct kvt_ssd *ssd, bool spare)
{
	uint64_t nonce, id;
	struct timespec ts;
	uint32_t slot;
	struct seg *s;
	int fd = -1, rc;

	if (ssd->creating) {
		while (ssd->creating && !spare)
			pthread_cond_wait(&ssd->create_cv, &ssd->lock);
		return 0;
	}
	if (spare && ssd->segs_used >= ssd->max_segs)
		return -ENOSPC;
	while (ssd->segs_used >= ssd->max_segs) {
		rc = reclaim_one(ssd);
		if (rc)
			return rc;
	}
	for (slot = 0; slot < ssd->n_slots && ssd->segs[slot].used; slot++)
		;
	if (slot == ssd->n_slots || ssd->next_seg_id > KVT_SSD_MAX_SEG_ID)
		return -ENOSPC;
	/* the slot and the id stay free meanwhile: only this takes them */
	id = ssd->next_seg_id;
	clock_gettime(CLOCK_REALTIME, &ts);
	nonce = XXH3_64bits_withSeed(&ts, sizeof(ts), ssd->salt ^ id);
	ssd->creating = true;
	pthread_mutex_unlock(&ssd->lock);
	rc = seg_file_create(ssd, id, nonce, &fd);
	if (!rc) {
		rc = kvt_ssd_io_set_file(ssd->io, slot, fd);
		if (rc) {
			char name[64];
			kvt_ssd_seg_name(id, name, sizeof(name));
			unlinkat(ssd->dir_fd, name, 0);
			close(fd);
		}
	}
	pthread_mutex_lock(&ssd->lock);
	ssd->creating = false;
	pthread_cond_broadcast(&ssd->create_cv);
	if (rc)
		return rc;
	s = &ssd->segs[slot];
	s->gen = s->gen == LOC_MAX_GEN ? 1 : s->gen + 1;
	s->used = true;
	s->fd = fd;
	s->id = ssd->next_seg_id++;
	s->nonce = nonce;
	s->n_pages = ssd->seg_pages;
	s->next_page = 1; /* after the superblock */
	ssd->segs_used++;
	ssd->st.segments_created++;
	if (spare) {
		ssd->spare = (int)slot;
	} else {
		ssd->active = (int)slot;
		ssd->spare_err = 0;
	}
	return 0;
}

/* The next active segment: the spare if one was made, else a new one (see
 * seg_make). Lock held. */
static int seg_next(struct kvt_ssd *ssd)
{
	if (ssd->spare >= 0) {
		ssd->active = ssd->spare;
		ssd->spare = -1;
		return 0;
	}
	return seg_make(ssd, false);
}

/* The active segment takes no more records: its summary is due. */
static void seal_active(struct kvt_ssd *ssd)
{
	uint32_t slot = (uint32_t)ssd->active;
	struct seg *s = &ssd->segs[slot];

	s->sealed = true;
	ssd->active = -1;
	if (ssd->n_sealed == ssd->cap_sealed) {
		size_t cap = ssd->cap_sealed ? 2 * ssd->cap_sealed : 16;
		struct sealed_seg *v = realloc(ssd->sealed, cap * sizeof(*v));
		if (v) {
			ssd->sealed = v;
			ssd->cap_sealed = cap;
		}
	}
	/* without memory for the note, close writes the summary, or the
	 * next open scans the segment: slower, never wrong */
	if (ssd->n_sealed < ssd->cap_sealed)
		ssd->sealed[ssd->n_sealed++] = (struct sealed_seg){ slot, s->gen };
	kvt_ssd_seg_maybe_release(ssd, slot);
}

/* Room for pages in the active segment. 0 with slot and page set, -ENOSPC (at
 * capacity), -EIO (the device failed; degraded), -EROFS (degraded meanwhile).
 * The lock may be let go while a segment file is made. */
int kvt_ssd_alloc_pages(struct kvt_ssd *ssd, uint32_t pages, uint32_t *slot, uint32_t *page)
{
	for (;;) {
		struct seg *s;
		int rc;

		if (ssd->st.degraded)
			return -EROFS;
		if (ssd->active >= 0) {
			s = &ssd->segs[ssd->active];
			if (s->next_page + pages <= s->n_pages) {
				*slot = (uint32_t)ssd->active;
				*page = s->next_page;
				s->next_page += pages;
				return 0;
			}
			seal_active(ssd);
		}
		rc = seg_next(ssd);
		if (rc == -ENOSPC && ssd->segs_used >= ssd->max_segs)
			return rc;
		if (rc) {
			ssd->st.write_errors++;
			kvt_ssd_degrade(ssd, rc, "creating a segment file");
			return -EIO;
		}
	}
}

/* Make the next segment's file ahead of need, once the active segment is
 * half full, so that the write that fills it finds the next one made: made
 * when needed, the file (preallocated, its superblock written and synced,
 * renamed, its directory synced) is I/O the device's queue waits for. A
 * write batch calls it while its writes are in flight. Only into a free
 * slot; a failure is logged and leaves segments to be made when needed.
 * Tier lock not held. */
void kvt_ssd_spare_due(struct kvt_ssd *ssd)
{
	struct seg *a;
	int rc;

	pthread_mutex_lock(&ssd->lock);
	a = ssd->active >= 0 ? &ssd->segs[ssd->active] : NULL;
	if (a && ssd->spare < 0 && !ssd->creating && !ssd->spare_err && !ssd->st.degraded &&
	    2 * (uint64_t)a->next_page >= a->n_pages && ssd->segs_used < ssd->max_segs) {
		rc = seg_make(ssd, true);
		if (rc && rc != -ENOSPC) {
			ssd->spare_err = rc;
			kvt_log(KVT_LOG_WARN, "event=ssd.spare_failed dir=%s err=\"%s\" "
				"action=\"segments made when needed\"", ssd->dir, strerror(-rc));
		}
	}
	pthread_mutex_unlock(&ssd->lock);
}

/* ---- summaries ----------------------------------------------------------- */

/* Write buf as the summary of segment id: a temporary file, synced, then
 * renamed. Returns 0 or -errno. */
static int summary_file_write(struct kvt_ssd *ssd, uint64_t id, const void *buf, size_t len)
{
	char name[64], tmp[80];
	size_t done = 0;
	int fd, rc = 0;

	kvt_ssd_sum_name(id, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	fd = openat(ssd->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	while (done < len && !rc) {
		ssize_t w = write(fd, (const char *)buf + done, len - done);
		if (w < 0 && errno != EINTR)
			rc = -errno;
		else if (w > 0)
			done += (size_t)w;
	}
	if (!rc && fdatasync(fd))
		rc = -errno;
	close(fd);
	if (!rc && renameat(ssd->dir_fd, tmp, ssd->dir_fd, name))
		rc = -errno;
	if (rc)
		unlinkat(ssd->dir_fd, tmp, 0);
	else
		rc = kvt_ssd_sync_dir(ssd);
	return rc;
}

/* Write the summary of the segment in slot (of generation gen): the records
 * whole on disk in pages [1, next_page). No batch may be writing to it.
 * Called without the lock. Returns 0 or -errno. */
int kvt_ssd_summary_write(struct kvt_ssd *ssd, uint32_t slot, uint32_t gen)
{
	struct kvt_ssd_sum_entry *e = NULL;
	struct kvt_ssd_sum_info info;
	struct seg *s = &ssd->segs[slot];
	size_t n = 0, len;
	void *buf = NULL;
	uint64_t id;
	int rc;

	pthread_mutex_lock(&ssd->lock);
	/* an abandoned tier's records are dropped from memory, not from disk:
	 * a summary now would hide them from the next open */
	if (!s->used || s->gen != gen || s->summary || ssd->abandoned) {
		pthread_mutex_unlock(&ssd->lock);
		return 0;
	}
	e = calloc(s->n_recs ? s->n_recs : 1, sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&ssd->lock);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->n_recs; i++) {
		const struct kvt_ssd_rec *r = &s->recs[i];

		if (!(r->flags & KVT_SSD_REC_ONDISK))
			continue;
		e[n].page = r->page;
		e[n++].h = (struct kvt_ssd_hdr){
			.seq = r->seq, .ns_id = r->ns_id, .key = r->key, .parent = r->parent,
			.flags = r->hflags, .codec = r->codec, .raw_len = r->raw_len,
			.stored_len = r->stored_len, .payload_sum = r->sum };
	}
	id = s->id;
	info = (struct kvt_ssd_sum_info){ .seg_id = id, .nonce = s->nonce, .seg_pages = s->n_pages,
					  .covered = s->next_page, .sealed = s->sealed };
	pthread_mutex_unlock(&ssd->lock);

	len = kvt_ssd_sum_encode(&info, e, n, ssd->salt, &buf);
	rc = len ? summary_file_write(ssd, id, buf, len) : -ENOMEM;
	free(buf);
	free(e);

	pthread_mutex_lock(&ssd->lock);
	if (!rc && s->used && s->gen == gen) {
		s->summary = true;
	} else if (!rc) {
		/* released meanwhile: the summary describes nothing */
		char name[64];
		kvt_ssd_sum_name(id, name, sizeof(name));
		unlinkat(ssd->dir_fd, name, 0);
	}
	pthread_mutex_unlock(&ssd->lock);
	if (rc)
		kvt_log(KVT_LOG_WARN, "event=ssd.summary_failed dir=%s segment=%016" PRIx64
			" err=\"%s\" action=\"the next open scans it\"", ssd->dir, id, strerror(-rc));
	return rc;
}

/* Write the summaries of the segments sealed since the last call whose
 * writes have all completed (a summary lists the records whole on disk;
 * one written before a write in flight lands would miss it). The others
 * stay due. Tier lock not held. */
void kvt_ssd_summaries_due(struct kvt_ssd *ssd)
{
	for (size_t k = 0;;) {
		struct sealed_seg z;
		struct seg *s;

		pthread_mutex_lock(&ssd->lock);
		for (; k < ssd->n_sealed; k++) {
			s = &ssd->segs[ssd->sealed[k].slot];
			if (!s->used || s->gen != ssd->sealed[k].gen || !s->writers)
				break;
		}
		if (k == ssd->n_sealed) {
			pthread_mutex_unlock(&ssd->lock);
			return;
		}
		z = ssd->sealed[k];
		ssd->sealed[k] = ssd->sealed[--ssd->n_sealed];
		pthread_mutex_unlock(&ssd->lock);
		kvt_ssd_summary_write(ssd, z.slot, z.gen);
	}
}

/* ---- batches ------------------------------------------------------------ */

void kvt_ssd_sbatch_free(struct sbatch *sb)
{
	struct kvt_ssd *ssd = sb->ssd;

	for (size_t i = 0; i < sb->b->n; i++) {
		if (sb->w)
			kvt_ssd_stage_put(&ssd->stages, sb->w[i].stage, sb->w[i].stage_cap);
		if (sb->r)
			kvt_ssd_stage_put(&ssd->stages, sb->r[i].stage, sb->r[i].stage_cap);
	}
	if (sb->slot) {
		pthread_mutex_lock(&ssd->lock);
		ssd->write_batches--;
		pthread_cond_signal(&ssd->batch_cv);
		pthread_mutex_unlock(&ssd->lock);
	}
	free(sb->w);
	free(sb->r);
	free(sb->ops);
	free(sb->rec_of_op);
	free(sb->left);
	free(sb->done);
	free(sb->arena);
	free(sb->checks);
	free(sb->scratch[0]);
	free(sb->scratch[1]);
	free(sb);
}

struct sbatch *kvt_ssd_sbatch_new(struct kvt_ssd *ssd, struct kvt_tier_batch *b, size_t ops_per_rec)
{
	struct sbatch *sb = calloc(1, sizeof(*sb));
	size_t n = b->n;

	if (!sb)
		return NULL;
	sb->ssd = ssd;
	sb->b = b;
	sb->cap_ops = ops_per_rec * (n ? n : 1);
	sb->ops = calloc(sb->cap_ops, sizeof(*sb->ops));
	sb->rec_of_op = calloc(sb->cap_ops, sizeof(*sb->rec_of_op));
	sb->left = calloc(n ? n : 1, sizeof(*sb->left));
	sb->done = calloc(sb->cap_ops, sizeof(*sb->done));
	if (!sb->ops || !sb->rec_of_op || !sb->left || !sb->done) {
		kvt_ssd_sbatch_free(sb);
		return NULL;
	}
	return sb;
}

/* Every record of b fails with err (nothing was issued). */
void kvt_ssd_fail_all(struct kvt_tier_batch *b, int err)
{
	for (size_t i = 0; i < b->n; i++) {
		b->io[i].res = err;
		b->io[i].lat_ns = 0;
	}
}

int kvt_ssd_submit(struct kvt_ssd *ssd, struct kvt_tier_batch *b)
{
	if (!ssd || !b || (b->n && !b->io))
		return -EINVAL;
	b->priv = NULL;
	return b->write ? kvt_ssd_write_submit(ssd, b) : kvt_ssd_read_submit(ssd, b);
}

void kvt_ssd_wait(struct kvt_ssd *ssd, struct kvt_tier_batch *b)
{
	if (!ssd || !b || !b->priv)
		return;
	if (b->write)
		kvt_ssd_write_wait(ssd, b);
	else
		kvt_ssd_read_wait(ssd, b);
}

/* The record loc names, if its segment is still the one loc was made in;
 * NULL for a stale loc. Lock held. */
static struct kvt_ssd_rec *loc_rec(struct kvt_ssd *ssd, uint64_t loc)
{
	uint32_t slot = loc_slot(loc);
	struct seg *s;

	if (slot >= ssd->n_slots || !(s = &ssd->segs[slot])->used || s->gen != loc_gen(loc))
		return NULL;
	return kvt_ssd_seg_find(s, loc_page(loc));
}

void kvt_ssd_free(struct kvt_ssd *ssd, uint64_t loc)
{
	struct kvt_ssd_rec *r;

	if (!ssd)
		return;
	pthread_mutex_lock(&ssd->lock);
	if ((r = loc_rec(ssd, loc))) {
		rec_kill(ssd, &ssd->segs[loc_slot(loc)], r);
		kvt_ssd_seg_maybe_release(ssd, loc_slot(loc));
	}
	pthread_mutex_unlock(&ssd->lock);
}

int kvt_ssd_hold(struct kvt_ssd *ssd, uint64_t loc, int delta)
{
	struct kvt_ssd_rec *r;
	struct seg *s;
	int rc = 0;

	if (!ssd || (delta != 1 && delta != -1))
		return -EINVAL;
	pthread_mutex_lock(&ssd->lock);
	r = loc_rec(ssd, loc);
	if (!r || r->state != KVT_SSD_REC_LIVE || (delta < 0 && !r->held)) {
		rc = -ENOENT;
		goto out;
	}
	s = &ssd->segs[loc_slot(loc)];
	if (delta > 0 && r->held++ == 0)
		s->held++;
	else if (delta < 0 && --r->held == 0)
		s->held--;
out:
	pthread_mutex_unlock(&ssd->lock);
	return rc;
}

uint64_t kvt_ssd_seq_reserve(struct kvt_ssd *ssd)
{
	uint64_t seq;

	pthread_mutex_lock(&ssd->lock);
	seq = kvt_ssd_seq_next(ssd);
	pthread_mutex_unlock(&ssd->lock);
	return seq;
}

size_t kvt_ssd_take_dropped(struct kvt_ssd *ssd, struct kvt_ssd_rec_info *out, size_t max)
{
	size_t n;

	pthread_mutex_lock(&ssd->lock);
	n = ssd->n_dropped < max ? ssd->n_dropped : max;
	if (n)
		memcpy(out, ssd->dropped + ssd->n_dropped - n, n * sizeof(*out));
	ssd->n_dropped -= n;
	pthread_mutex_unlock(&ssd->lock);
	return n;
}

void kvt_ssd_stats(struct kvt_ssd *ssd, struct kvt_ssd_stats *out)
{
	pthread_mutex_lock(&ssd->lock);
	*out = ssd->st;
	out->capacity_bytes = (uint64_t)ssd->max_segs * ssd->seg_pages * PAGE;
	out->segments = ssd->segs_used - (ssd->spare >= 0);
	out->segments_spare = ssd->spare >= 0;
	out->used_bytes = 0;
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		out->used_bytes += ssd->segs[i].live_pages * PAGE;
	pthread_mutex_unlock(&ssd->lock);
	pthread_mutex_lock(&ssd->stages.lock);
	out->stages_made = ssd->stages.made;
	out->stages_reused = ssd->stages.reused;
	pthread_mutex_unlock(&ssd->stages.lock);
	kvt_ssd_io_stats(ssd->io, &out->io);
}

bool kvt_ssd_degraded(struct kvt_ssd *ssd)
{
	bool d;

	pthread_mutex_lock(&ssd->lock);
	d = ssd->st.degraded;
	pthread_mutex_unlock(&ssd->lock);
	return d;
}

#ifdef KVT_TESTING
void kvt_ssd_inject(struct kvt_ssd *ssd, enum kvt_ssd_io_kind kind, uint32_t skip,
		    uint32_t count, int err)
{
	kvt_ssd_io_inject(ssd->io, kind, skip, count, err);
}
#endif

int kvt_ssd_register_region(struct kvt_ssd *ssd, void *ptr, size_t len)
{
	if (!ssd)
		return -EINVAL;
	return kvt_ssd_io_add_buffer(ssd->io, ptr, len);
}

/* ---- probing a degraded tier ---------------------------------------------- */

/* Write and sync a page of a scratch file: can the device take writes? */
static int probe_write(struct kvt_ssd *ssd)
{
	int fd = openat(ssd->dir_fd, ".probe", O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC,
			0600);
	int rc = 0;

	if (fd < 0)
		return -errno;
	memset(ssd->sb_page, 0, PAGE);
	if (pwrite(fd, ssd->sb_page, PAGE, 0) != PAGE)
		rc = errno ? -errno : -EIO;
	else if (fdatasync(fd))
		rc = -errno;
	close(fd);
	unlinkat(ssd->dir_fd, ".probe", 0);
	return rc;
}

int kvt_ssd_probe(struct kvt_ssd *ssd)
{
	int rc;

	if (!ssd)
		return -EINVAL;
	pthread_mutex_lock(&ssd->lock);
	if (!ssd->st.degraded) {
		rc = 0;
		goto out;
	}
	ssd->st.probes++;
	rc = ssd->abandoned ? ssd->st.degraded_error : probe_write(ssd);
	if (!rc) {
		/* a failed write may have left a damaged record in the active
		 * segment: start clean in a new one */
		if (ssd->active >= 0)
			seal_active(ssd);
		rc = seg_next(ssd);
		if (rc == -ENOSPC && ssd->segs_used >= ssd->max_segs)
			rc = 0; /* the device writes; the next write reclaims */
	}
	if (rc) {
		kvt_log(KVT_LOG_DEBUG, "event=ssd.probe_failed dir=%s err=\"%s\"", ssd->dir,
			strerror(-rc));
		goto out;
	}
	kvt_log(KVT_LOG_WARN, "event=ssd.resumed dir=%s degraded_by=\"%s\" probes=%" PRIu64,
		ssd->dir, strerror(-ssd->st.degraded_error), ssd->st.probes);
	ssd->st.degraded = false;
	ssd->st.degraded_error = 0;
	ssd->st.resumed++;
out:
	pthread_mutex_unlock(&ssd->lock);
	kvt_ssd_summaries_due(ssd);
	return rc;
}
