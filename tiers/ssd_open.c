/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's options, open and close: the data directory locked and
 * its meta file read, recovery run (ssd_recover.c) and what it found
 * applied (files moved aside or deleted, segments taken into slots, live
 * records reported), and at close the summaries that spare the next open a
 * scan. */
#include "tiers/ssd_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "util/log.h"
#include "tiers/ssd_helper.h"
#include "util/clock.h"
#include "util/opts.h"

#define META_NAME "kvtier-ssd.meta"
#define QUARANTINE_DIR "quarantine"

/* Stages kept for reuse: a LOAD of 32 encoded blocks of 2 MiB holds 32 at
 * once. */
#define STAGE_KEEP_BYTES (80ull << 20)

static const struct kvt_ssd_opts ssd_defaults = {
	.size = sizeof(struct kvt_ssd_opts),
	.sync = true,
	.reclaim_live_fraction = 0.25,
};

void kvt_ssd_opts_init(struct kvt_ssd_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &ssd_defaults, sizeof(ssd_defaults));
}

/* ---- open --------------------------------------------------------------- */

/* The meta file's line before its checksum. */
static int meta_text(char *buf, size_t len, unsigned version, uint64_t salt)
{
	return snprintf(buf, len, "kvtier-ssd %u salt %016llx", version, (unsigned long long)salt);
}

static uint64_t meta_sum(unsigned version, uint64_t salt)
{
	char text[64];
	int n = meta_text(text, sizeof(text), version, salt);

	return XXH3_64bits(text, (size_t)n);
}

/* Lock the directory (one process per directory) and read its meta file:
 * *have is set when it names a salt. Returns 0, 1 (a file of an older
 * version: to be written again), 2 (damaged: its checksum fails, so its
 * salt is not used), -EBUSY, -EINVAL (a file that is not a kvtier SSD
 * tier's: nothing is touched), or -errno. */
static int meta_open(struct kvt_ssd *ssd, bool *have)
{
	char buf[128];
	unsigned long long salt, sum;
	unsigned version;
	ssize_t r;
	int n;

	*have = false;
	ssd->meta_fd = openat(ssd->dir_fd, META_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (ssd->meta_fd < 0)
		return -errno;
	if (flock(ssd->meta_fd, LOCK_EX | LOCK_NB))
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	r = pread(ssd->meta_fd, buf, sizeof(buf) - 1, 0);
	if (r < 0)
		return -errno;
	buf[r] = 0;
	n = sscanf(buf, "kvtier-ssd %u salt %llx sum %llx", &version, &salt, &sum);
	if (n >= 2 && (version == 1 || version == KVT_SSD_FORMAT)) {
		/* a bit flipped in the salt may leave a valid hex digit: only
		 * the checksum tells it from another directory's salt */
		if (n == 3 && sum != meta_sum(version, salt)) {
			kvt_log(KVT_LOG_ERROR, "event=ssd.meta_damaged file=%s/%s action=\"its "
				"checksum fails: the salt comes from the segments and the file is "
				"written again\"", ssd->dir, META_NAME);
			return 2;
		}
		ssd->salt = salt;
		*have = true;
		/* files of before the checksum are written again with it */
		return version == KVT_SSD_FORMAT && n == 3 ? 0 : 1;
	}
	if (r > 0) {
		kvt_log(KVT_LOG_ERROR, "event=ssd.meta_invalid file=%s/%s action=\"refusing to open: "
			"not a kvtier SSD tier file; nothing was touched\"", ssd->dir, META_NAME);
		return -EINVAL;
	}
	return 0;
}

static int meta_write(struct kvt_ssd *ssd)
{
	char buf[96];
	int n = meta_text(buf, sizeof(buf), KVT_SSD_FORMAT, ssd->salt);

	n += snprintf(buf + n, sizeof(buf) - (size_t)n, " sum %016llx\n",
		      (unsigned long long)meta_sum(KVT_SSD_FORMAT, ssd->salt));

	if (pwrite(ssd->meta_fd, buf, (size_t)n, 0) != n || ftruncate(ssd->meta_fd, n) ||
	    fsync(ssd->meta_fd) || fsync(ssd->dir_fd))
		return errno ? -errno : -EIO;
	return 0;
}

static int probe_odirect(struct kvt_ssd *ssd)
{
	int fd = openat(ssd->dir_fd, ".odirect-probe", O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	int rc = fd < 0 ? -errno : 0;

	if (fd >= 0)
		close(fd);
	unlinkat(ssd->dir_fd, ".odirect-probe", 0);
	if (rc == -EINVAL)
		kvt_log(KVT_LOG_ERROR, "event=ssd.odirect_refused dir=%s", ssd->dir);
	return rc;
}

/* Move a file aside into quarantine/ (a new name if one is taken). Returns
 * 0 or -errno (it then stays where it is). */
static int quarantine(struct kvt_ssd *ssd, const char *name)
{
	char to[NAME_MAX + 16];
	int qfd, rc = 0;

	if (mkdirat(ssd->dir_fd, QUARANTINE_DIR, 0755) && errno != EEXIST)
		return -errno;
	qfd = openat(ssd->dir_fd, QUARANTINE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (qfd < 0)
		return -errno;
	snprintf(to, sizeof(to), "%s", name);
	for (int k = 1; !faccessat(qfd, to, F_OK, AT_SYMLINK_NOFOLLOW) && k < 1000; k++)
		snprintf(to, sizeof(to), "%s.%d", name, k);
	if (renameat(ssd->dir_fd, name, qfd, to) || fsync(qfd) || fsync(ssd->dir_fd))
		rc = -errno;
	close(qfd);
	return rc;
}

static void apply_files(struct kvt_ssd *ssd, const struct kvt_ssd_recovery *r)
{
	for (size_t i = 0; i < r->n_files; i++) {
		const struct kvt_ssd_found_file *f = &r->files[i];
		int rc;

		switch (f->fate) {
		case KVT_SSD_FILE_FOREIGN:
			ssd->st.foreign++;
			kvt_log(KVT_LOG_WARN, "event=ssd.foreign_file dir=%s file=\"%s\" reason=\"%s\" "
				"action=\"left in place\"", ssd->dir, f->name, f->why);
			break;
		case KVT_SSD_FILE_QUARANTINE:
			rc = quarantine(ssd, f->name);
			if (!rc)
				ssd->st.quarantined++;
			else
				ssd->st.foreign++;
			kvt_log(KVT_LOG_WARN, "event=ssd.quarantine dir=%s file=\"%s\" reason=\"%s\" "
				"action=\"%s%s\"", ssd->dir, f->name, f->why,
				rc ? "left in place: cannot move it: " : "moved to " QUARANTINE_DIR "/",
				rc ? strerror(-rc) : "");
			break;
		case KVT_SSD_FILE_STALE:
			rc = unlinkat(ssd->dir_fd, f->name, 0) ? -errno : 0;
			kvt_log(KVT_LOG_INFO, "event=ssd.stale_file dir=%s file=\"%s\" reason=\"%s\" "
				"action=\"%s\"", ssd->dir, f->name, f->why,
				rc ? "cannot delete it" : "deleted");
			break;
		}
	}
}

/* Take the segments recovery adopted into slots, mark the live records
 * (those recover_cb keeps), continue the newest segment, and let go of the
 * segments nothing is left in. */
static int apply_segments(struct kvt_ssd *ssd, struct kvt_ssd_recovery *r,
			  kvt_ssd_recover_cb cb, void *arg)
{
	for (size_t i = 0; i < r->n_segs; i++) {
		struct kvt_ssd_found_seg *f = &r->segs[i];
		struct seg *s = &ssd->segs[i];
		int rc = kvt_ssd_io_set_file(ssd->io, (uint32_t)i, f->fd);

		if (rc)
			return rc;
		*s = (struct seg){ .used = true, .sealed = true, .summary = f->summary, .fd = f->fd,
				   .id = f->id, .nonce = f->nonce, .n_pages = f->n_pages,
				   .next_page = f->end, .gen = 1, .tombs = f->tombs,
				   .recs = f->recs, .n_recs = f->n_recs, .cap_recs = f->n_recs };
		if (f->file_bytes)
			kvt_log(KVT_LOG_WARN, "event=ssd.segment_size dir=%s segment=%" PRIu64
				" bytes=%" PRIu64 " expected=%" PRIu64 " records=%zu damaged=%u "
				"action=\"kept the records that verify; sealed\"", ssd->dir, f->id,
				f->file_bytes, f->seg_bytes, f->n_recs, f->damaged);
		f->fd = -1;
		f->recs = NULL;
		ssd->segs_used++;
		ssd->st.tombstones += f->tombs;
	}
	for (size_t i = 0; i < r->n_cands; i++) {
		struct kvt_ssd_cand *c = &r->cands[i];
		struct seg *s = &ssd->segs[c->seg];
		struct kvt_ssd_rec *x = &s->recs[c->rec];

		c->info.loc = loc_make(s->gen, c->seg, x->page);
		if (cb && cb(&c->info, arg))
			continue;
		x->state = KVT_SSD_REC_LIVE;
		s->live_pages += x->pages;
		ssd->st.blocks++;
		ssd->st.live_raw_bytes += x->raw_len;
		ssd->st.recovered++;
	}
	/* appends go on in the newest segment, after its last valid record; a
	 * summary written when it was left open would then no longer be whole.
	 * One with damaged records (a crash) is sealed instead: records after
	 * them would make them look like corruption to a later scan */
	if (r->n_segs && !r->segs[r->n_segs - 1].sealed && !r->segs[r->n_segs - 1].damaged) {
		uint32_t last = (uint32_t)r->n_segs - 1;
		struct seg *s = &ssd->segs[last];
		char name[64];

		kvt_ssd_sum_name(s->id, name, sizeof(name));
		if (!r->segs[last].open_summary ||
		    ((!unlinkat(ssd->dir_fd, name, 0) || errno == ENOENT) && !kvt_ssd_sync_dir(ssd))) {
			s->sealed = false;
			s->summary = false;
			ssd->active = (int)last;
		}
	}
	for (uint32_t i = 0; i < (uint32_t)r->n_segs; i++) {
		struct seg *s = &ssd->segs[i];
		char name[64];

		if (!s->used || s->live_pages || (int)i == ssd->active ||
		    r->segs[i].damaged == r->segs[i].torn || s->tombs)
			continue;
		/* nothing live, but corrupt records: not ours to delete */
		kvt_ssd_seg_name(s->id, name, sizeof(name));
		kvt_ssd_seg_drop(ssd, i);
		if (!quarantine(ssd, name)) {
			ssd->st.quarantined++;
			kvt_log(KVT_LOG_WARN, "event=ssd.quarantine dir=%s file=%s reason=\"%u corrupt "
				"record(s) and nothing live\" action=\"moved to " QUARANTINE_DIR "/\"",
				ssd->dir, name, r->segs[i].damaged - r->segs[i].torn);
		}
		kvt_ssd_sum_name(s->id, name, sizeof(name));
		unlinkat(ssd->dir_fd, name, 0);
	}
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		kvt_ssd_seg_maybe_release(ssd, i);
	/* sealed segments that were scanned get their summary now, so that no
	 * later open scans them again (and takes old torn writes for damage) */
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		if (ssd->segs[i].used && ssd->segs[i].sealed && !ssd->segs[i].summary)
			kvt_ssd_summary_write(ssd, i, ssd->segs[i].gen);
	return 0;
}

/* Act on what recovery found: files moved aside or deleted, the meta file
 * rewritten if it was missing, the segments taken in. */
static int apply_recovery(struct kvt_ssd *ssd, struct kvt_ssd_recovery *r, bool meta_old,
			  kvt_ssd_recover_cb cb, void *arg)
{
	int rc;

	apply_files(ssd, r);
	if (r->salt_from == KVT_SSD_SALT_NONE &&
	    getrandom(&r->salt, sizeof(r->salt), 0) != sizeof(r->salt))
		return -EIO;
	ssd->salt = r->salt;
	if (r->salt_from != KVT_SSD_SALT_META || meta_old) {
		rc = meta_write(ssd);
		if (rc)
			return rc;
		if (r->salt_from == KVT_SSD_SALT_SEGMENTS)
			kvt_log(KVT_LOG_WARN, "event=ssd.meta_rebuilt dir=%s file=%s segments=%zu "
				"reason=\"missing, empty or damaged: the salt comes from the segments\"",
				ssd->dir, META_NAME, r->n_segs);
	}
	ssd->next_seq = r->next_seq;
	if (ssd->opts.seq_shared) {
		uint64_t cur = __atomic_load_n(ssd->opts.seq_shared, __ATOMIC_RELAXED);

		while (cur < r->next_seq &&
		       !__atomic_compare_exchange_n(ssd->opts.seq_shared, &cur, r->next_seq, true,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
	}
	ssd->next_seg_id = r->next_seg_id;
	ssd->st.recovery_torn = r->torn;
	ssd->st.recovery_corrupt = r->corrupt;
	ssd->st.recovery_superseded = r->superseded;
	ssd->st.recovery_removed = r->removed;
	ssd->st.recovery_scanned = r->scanned;
	ssd->st.recovery_summaries = r->summaries;
	ssd->st.recovery_summaries_rejected = r->summaries_rejected;
	return apply_segments(ssd, r, cb, arg);
}

static void log_recovery(struct kvt_ssd *ssd)
{
	const struct kvt_ssd_stats *st = &ssd->st;

	kvt_log(st->recovery_torn || st->recovery_corrupt || st->quarantined || st->foreign ?
		KVT_LOG_WARN : KVT_LOG_INFO,
		"event=ssd.recovered dir=%s segments=%u records=%" PRIu64 " torn=%" PRIu64
		" corrupt=%" PRIu64 " superseded=%" PRIu64 " removed=%" PRIu64 " tombstones=%" PRIu64
		" quarantined=%" PRIu64 " foreign=%" PRIu64 " from_summaries=%" PRIu64
		" scanned=%" PRIu64 " summaries_rejected=%" PRIu64 " ms=%.1f", ssd->dir,
		ssd->segs_used, st->recovered, st->recovery_torn, st->recovery_corrupt,
		st->recovery_superseded, st->recovery_removed, st->tombstones, st->quarantined,
		st->foreign, st->recovery_summaries, st->recovery_scanned,
		st->recovery_summaries_rejected, (double)st->open_ns / 1e6);
}

int kvt_ssd_open(const struct kvt_ssd_opts *opts, kvt_ssd_recover_cb recover_cb, void *arg,
		 struct kvt_ssd **out)
{
	struct kvt_ssd_opts o = ssd_defaults;
	struct kvt_ssd_io_opts io_opts;
	struct kvt_ssd_recovery rcv;
	struct kvt_ssd *ssd;
	bool have_salt = false;
	uint64_t t0;
	int rc = -ENOMEM, meta;

	if (!out || kvt_opts_load(&o, sizeof(o), opts))
		return -EINVAL;
	opts = &o; /* from here on, fields the caller lacks are at their defaults */
	if (!opts->dir || !opts->capacity_bytes ||
	    (opts->segment_bytes % PAGE) || opts->reclaim_live_fraction < 0 ||
	    opts->reclaim_live_fraction > 1)
		return -EINVAL;
	ssd = calloc(1, sizeof(*ssd));
	if (!ssd)
		return -ENOMEM;
	ssd->opts = *opts;
	ssd->active = ssd->spare = -1;
	ssd->dir_fd = ssd->meta_fd = -1;
	if (!ssd->opts.segment_bytes)
		ssd->opts.segment_bytes = 256ULL << 20;
	if (!ssd->opts.queue_depth)
		ssd->opts.queue_depth = 32;
	if (ssd->opts.segment_bytes / PAGE > LOC_MAX_PAGE ||
	    ssd->opts.segment_bytes < 2 * PAGE) {
		rc = -EINVAL;
		goto err_ssd;
	}
	ssd->seg_pages = (uint32_t)(ssd->opts.segment_bytes / PAGE);
	ssd->max_segs = (uint32_t)(ssd->opts.capacity_bytes / ssd->opts.segment_bytes);
	if (!ssd->max_segs || ssd->max_segs >= LOC_MAX_SLOTS / 2) {
		rc = -EINVAL;
		goto err_ssd;
	}
	ssd->dir = strdup(opts->dir);
	ssd->sb_page = aligned_alloc(PAGE, PAGE);
	if (!ssd->dir || !ssd->sb_page)
		goto err_dir;
	pthread_mutex_init(&ssd->lock, NULL);
	pthread_cond_init(&ssd->batch_cv, NULL);
	pthread_cond_init(&ssd->create_cv, NULL);
	kvt_ssd_stages_init(&ssd->stages, STAGE_KEEP_BYTES);
	if (kvt_ssd_helper_start(&ssd->helper))
		kvt_log(KVT_LOG_WARN, "event=ssd.no_helper dir=%s action=\"reads checked on "
			"one thread\"", ssd->dir);

	if (mkdir(ssd->dir, 0755) && errno != EEXIST) {
		rc = -errno;
		goto err_lock;
	}
	ssd->dir_fd = open(ssd->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ssd->dir_fd < 0) {
		rc = -errno;
		goto err_lock;
	}
	rc = probe_odirect(ssd);
	if (rc)
		goto err_dirfd;
	meta = meta_open(ssd, &have_salt);
	if (meta < 0) {
		rc = meta;
		goto err_meta;
	}
	t0 = kvt_now_ns();
	/* records per fdatasync (group commit); with KVT_SSD_WRITE_BATCHES
	 * of them in flight, what a crash can cut */
	ssd->chunk = ssd->opts.queue_depth * 2 < 16 ? 16 : ssd->opts.queue_depth * 2;
	/* a crash can cut the records of every write batch in flight */
	rc = kvt_ssd_recover(ssd->dir_fd, have_salt ? &ssd->salt : NULL,
			     ssd->chunk * KVT_SSD_WRITE_BATCHES, &rcv);
	if (rc == -EBADMSG)
		kvt_log(KVT_LOG_ERROR, "event=ssd.salt_mismatch dir=%s file=%s action=\"refusing to "
			"open: no segment carries the meta file's salt, so one of them is another "
			"directory's; nothing was touched (remove the meta file to take the "
			"segments' salt, or move the segments away)\"", ssd->dir, META_NAME);
	else if (rc)
		kvt_log(KVT_LOG_ERROR, "event=ssd.recovery_failed dir=%s err=\"%s\"", ssd->dir,
			strerror(-rc));
	if (rc)
		goto err_meta;
	if (rcv.n_segs >= LOC_MAX_SLOTS / 2) {
		kvt_log(KVT_LOG_ERROR, "event=ssd.too_many_segments dir=%s segments=%zu max=%u",
			ssd->dir, rcv.n_segs, LOC_MAX_SLOTS / 2 - 1);
		rc = -EINVAL;
		goto err_rcv;
	}
	ssd->n_slots = ssd->max_segs + (uint32_t)rcv.n_segs + 1;
	ssd->segs = calloc(ssd->n_slots, sizeof(*ssd->segs));
	if (!ssd->segs) {
		rc = -ENOMEM;
		goto err_segs;
	}
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		ssd->segs[i].fd = -1;
	kvt_ssd_io_opts_init(&io_opts, sizeof(io_opts));
	/* queue_depth counts records: a record from a slot with room is one
	 * operation, from other memory up to three */
	io_opts.queue_depth = ssd->opts.queue_depth;
	io_opts.max_inflight_bytes = ssd->opts.max_inflight_bytes;
	io_opts.max_files = ssd->n_slots;
	io_opts.threads = ssd->opts.threads;
	io_opts.force_threads = ssd->opts.force_threads;
	rc = kvt_ssd_io_open(&io_opts, &ssd->io);
	if (rc)
		goto err_segs;
	rc = apply_recovery(ssd, &rcv, meta == 1, recover_cb, arg);
	if (rc)
		goto err_recover;
	kvt_ssd_recovery_fini(&rcv);
	ssd->st.open_ns = kvt_now_ns() - t0;
	log_recovery(ssd);
	*out = ssd;
	return 0;

err_recover:
	for (uint32_t i = 0; i < ssd->n_slots; i++) {
		if (ssd->segs[i].fd >= 0)
			close(ssd->segs[i].fd);
		free(ssd->segs[i].recs);
	}
	kvt_ssd_io_close(ssd->io);
err_segs:
	free(ssd->segs);
err_rcv:
	kvt_ssd_recovery_fini(&rcv);
err_meta:
	if (ssd->meta_fd >= 0)
		close(ssd->meta_fd);
err_dirfd:
	close(ssd->dir_fd);
err_lock:
	kvt_ssd_helper_stop(ssd->helper);
	kvt_ssd_stages_fini(&ssd->stages);
	pthread_cond_destroy(&ssd->create_cv);
	pthread_cond_destroy(&ssd->batch_cv);
	pthread_mutex_destroy(&ssd->lock);
err_dir:
	free(ssd->sb_page);
	free(ssd->dir);
err_ssd:
	free(ssd);
	return rc;
}

void kvt_ssd_close(struct kvt_ssd *ssd)
{
	if (!ssd)
		return;
	/* a spare made ahead goes: the next open would continue it, empty,
	 * rather than the segment the records went to */
	if (ssd->spare >= 0) {
		char name[64];

		kvt_ssd_seg_name(ssd->segs[ssd->spare].id, name, sizeof(name));
		if (unlinkat(ssd->dir_fd, name, 0))
			kvt_log(KVT_LOG_WARN, "event=ssd.unlink_failed dir=%s file=%s err=\"%s\"",
				ssd->dir, name, strerror(errno));
		kvt_ssd_seg_drop(ssd, (uint32_t)ssd->spare);
	}
	/* summaries of every segment that lacks one, the open one included,
	 * so the next open reads them rather than the segments */
	kvt_ssd_summaries_due(ssd);
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		if (ssd->segs[i].used && !ssd->segs[i].summary)
			kvt_ssd_summary_write(ssd, i, ssd->segs[i].gen);

	kvt_ssd_io_close(ssd->io);
	for (uint32_t i = 0; i < ssd->n_slots; i++) {
		if (ssd->segs[i].fd >= 0)
			close(ssd->segs[i].fd);
		free(ssd->segs[i].recs);
	}
	free(ssd->segs);
	free(ssd->sb_page);
	free(ssd->dropped);
	free(ssd->sealed);
	close(ssd->meta_fd); /* drops the directory lock */
	close(ssd->dir_fd);
	kvt_ssd_helper_stop(ssd->helper);
	kvt_ssd_stages_fini(&ssd->stages);
	pthread_cond_destroy(&ssd->create_cv);
	pthread_cond_destroy(&ssd->batch_cv);
	pthread_mutex_destroy(&ssd->lock);
	free(ssd->dir);
	free(ssd);
}
