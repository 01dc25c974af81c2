/* The SSD tier: segment files, record placement, recovery, reclaim. */
#include "tiers/ssd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "tiers/ssd_format.h"
#include "util/opts.h"

#define PAGE KVT_SSD_PAGE
#define META_NAME "kvtier-ssd.meta"
#define SCAN_WINDOW (4u << 20)

/* loc = generation:24 | slot:16 | header page:24. Slots are reused (the
 * lowest free one), so a record's loc carries its segment's generation, a
 * per-slot counter bumped each time the slot gets a segment: a loc kept past
 * its segment's release never names the record that later sits at the same
 * slot and page (it would take 2^24 reuses of the slot in between). The
 * generation is never 0, so neither is a loc. */
#define LOC_GEN_SHIFT 40
#define LOC_SLOT_SHIFT 24
#define LOC_MAX_GEN ((1u << 24) - 1)
#define LOC_MAX_SLOTS (1u << 16)
#define LOC_MAX_PAGE ((1u << 24) - 1)
#define LOC_MAX_PPAGES LOC_MAX_PAGE

static uint64_t loc_make(uint32_t gen, uint32_t slot, uint32_t page)
{
	return (uint64_t)gen << LOC_GEN_SHIFT | (uint64_t)slot << LOC_SLOT_SHIFT | page;
}

static uint32_t loc_gen(uint64_t loc) { return (uint32_t)(loc >> LOC_GEN_SHIFT) & LOC_MAX_GEN; }
static uint32_t loc_slot(uint64_t loc) { return (uint32_t)(loc >> LOC_SLOT_SHIFT) & 0xffff; }
static uint32_t loc_page(uint64_t loc) { return (uint32_t)loc & LOC_MAX_PAGE; }

static uint64_t pages_of(uint64_t bytes) { return (bytes + PAGE - 1) / PAGE; }

enum { REC_PENDING = 0, REC_LIVE = 1, REC_DEAD = 2 };

/* What the tier keeps in memory of each record: enough to read and verify
 * its payload without reading its header again (one I/O per read). */
struct seg_rec {
	uint64_t ns_id;
	struct kvt_key key;
	uint64_t raw_len;
	uint64_t stored_len;
	uint64_t sum;    /* XXH3-64 of the stored payload, as in the header */
	uint32_t page;   /* of the header */
	uint32_t pages;  /* header included */
	uint32_t held;   /* kvt_ssd_hold count: the caller pins or reads it */
	uint8_t state;
	uint8_t codec;
};

struct seg {
	bool used;
	bool sealed;     /* no more appends */
	int fd;
	uint64_t id;     /* file number */
	uint32_t n_pages, next_page;
	uint64_t live_pages;
	uint32_t users;  /* batches with I/O on this file */
	uint32_t gen;    /* of the slot: bumped each time it gets a segment */
	uint32_t held;   /* live records with a hold: reclaim passes it by */
	struct seg_rec *recs; /* sorted by page */
	size_t n_recs, cap_recs;
};

struct kvt_ssd {
	struct kvt_ssd_opts opts;
	char *dir;
	int dir_fd, meta_fd;
	uint64_t salt;
	struct kvt_ssd_io *io;
	uint32_t seg_pages;

	pthread_mutex_t batch_lock; /* one batch at a time: it owns the arena */
	char *arena;                /* per record: header page + tail page */
	uint32_t chunk;             /* records per batch chunk */

	pthread_mutex_t lock;       /* guards everything below */
	struct seg *segs;
	uint32_t n_slots, max_segs, segs_used;
	int active;
	uint64_t next_seq, next_seg_id;
	struct kvt_ssd_rec_info *dropped;
	size_t n_dropped, cap_dropped;
	struct kvt_ssd_stats st;
};

static const struct kvt_ssd_opts ssd_defaults = {
	.size = sizeof(struct kvt_ssd_opts),
	.sync = true,
	.reclaim_live_fraction = 0.25,
};

void kvt_ssd_opts_init(struct kvt_ssd_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &ssd_defaults, sizeof(ssd_defaults));
}

/* ---- segments (lock held) ---------------------------------------------- */

static void seg_path(const struct kvt_ssd *ssd, uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/seg-%016" PRIx64 ".kvt", ssd->dir, id);
}

static void degrade(struct kvt_ssd *ssd, int err, const char *what)
{
	if (ssd->st.degraded)
		return;
	ssd->st.degraded = true;
	ssd->st.degraded_error = err;
	kvt_ssd_log("%s failed (%s): tier degraded, no further writes; durable records "
		    "stay readable", what, strerror(-err));
}

/* Whether an operation's result says the device failed (it degrades the
 * tier), rather than a lack of memory or an interrupted request (the batch
 * fails, the tier stays as it was). Errors of the engine itself, not of an
 * operation, never degrade. */
static bool device_error(int err)
{
	return err && err != -ENOMEM && err != -EAGAIN && err != -EINTR && err != -ECANCELED;
}

static void seg_release(struct kvt_ssd *ssd, uint32_t slot)
{
	struct seg *s = &ssd->segs[slot];
	char path[4096];

	kvt_ssd_io_set_file(ssd->io, slot, -1);
	close(s->fd);
	seg_path(ssd, s->id, path, sizeof(path));
	if (unlink(path))
		kvt_ssd_log("cannot delete %s: %s", path, strerror(errno));
	uint32_t gen = s->gen;

	free(s->recs);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->gen = gen; /* the next segment here bumps it: old locs go stale */
	if ((int)slot == ssd->active)
		ssd->active = -1;
	ssd->segs_used--;
	ssd->st.segments_released++;
}

static void seg_maybe_release(struct kvt_ssd *ssd, uint32_t slot)
{
	struct seg *s = &ssd->segs[slot];

	if (s->used && s->sealed && !s->live_pages && !s->users)
		seg_release(ssd, slot);
}

static struct seg_rec *seg_find(struct seg *s, uint32_t page)
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

static int seg_add_rec(struct seg *s, const struct seg_rec *r)
{
	if (s->n_recs == s->cap_recs) {
		size_t cap = s->cap_recs ? 2 * s->cap_recs : 64;
		struct seg_rec *n = realloc(s->recs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->recs = n;
		s->cap_recs = cap;
	}
	s->recs[s->n_recs++] = *r;
	return 0;
}

static void rec_kill(struct kvt_ssd *ssd, struct seg *s, struct seg_rec *r)
{
	if (r->held) {
		s->held--;
		r->held = 0;
	}
	if (r->state == REC_LIVE) {
		s->live_pages -= r->pages;
		ssd->st.blocks--;
		ssd->st.live_raw_bytes -= r->raw_len;
	}
	r->state = REC_DEAD;
}

/* Release the emptiest sealed segment if it is empty enough. */
static int reclaim_one(struct kvt_ssd *ssd)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t i = 0; i < ssd->n_slots; i++) {
		struct seg *s = &ssd->segs[i];
		if (s->used && s->sealed && !s->users && !s->held &&
		    (best == UINT32_MAX || s->live_pages < ssd->segs[best].live_pages))
			best = i;
	}
	if (best == UINT32_MAX)
		return -ENOSPC;
	struct seg *s = &ssd->segs[best];
	if ((double)s->live_pages > ssd->opts.reclaim_live_fraction * s->n_pages)
		return -ENOSPC;
	for (size_t i = 0; i < s->n_recs; i++) {
		struct seg_rec *r = &s->recs[i];
		if (r->state != REC_LIVE)
			continue;
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
			.loc = loc_make(s->gen, best, r->page) };
		ssd->st.reclaim_dropped++;
		rec_kill(ssd, s, r);
	}
	seg_release(ssd, best);
	return 0;
}

static int seg_create(struct kvt_ssd *ssd)
{
	uint32_t slot;
	char path[4096];
	struct seg *s;
	int fd, rc;

	while (ssd->segs_used >= ssd->max_segs) {
		rc = reclaim_one(ssd);
		if (rc)
			return rc;
	}
	for (slot = 0; slot < ssd->n_slots && ssd->segs[slot].used; slot++)
		;
	if (slot == ssd->n_slots)
		return -ENOSPC;
	s = &ssd->segs[slot];
	s->id = ssd->next_seg_id++;
	s->gen = s->gen == LOC_MAX_GEN ? 1 : s->gen + 1;
	seg_path(ssd, s->id, path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto err;
	}
	/* preallocate so that appends never meet a full disk half way */
	rc = posix_fallocate(fd, 0, (off_t)ssd->seg_pages * PAGE);
	if (rc == EOPNOTSUPP || rc == EINVAL)
		rc = ftruncate(fd, (off_t)ssd->seg_pages * PAGE) ? errno : 0;
	if (rc) {
		rc = -rc;
		goto err_file;
	}
	rc = kvt_ssd_io_set_file(ssd->io, slot, fd);
	if (rc)
		goto err_file;
	if (ssd->opts.sync && fsync(ssd->dir_fd)) {
		rc = -errno;
		kvt_ssd_io_set_file(ssd->io, slot, -1);
		goto err_file;
	}
	s->used = true;
	s->fd = fd;
	s->n_pages = ssd->seg_pages;
	ssd->segs_used++;
	ssd->active = (int)slot;
	ssd->st.segments_created++;
	return 0;

err_file:
	close(fd);
	unlink(path);
err:
	ssd->st.write_errors++;
	degrade(ssd, rc, "creating a segment file");
	return -EIO;
}

/* Room for pages in the active segment. 0 with slot and page set, -ENOSPC (at
 * capacity), -EIO (the device failed; degraded). */
static int alloc_pages(struct kvt_ssd *ssd, uint32_t pages, uint32_t *slot, uint32_t *page)
{
	struct seg *s;
	int rc;

	if (ssd->active >= 0) {
		s = &ssd->segs[ssd->active];
		if (s->next_page + pages <= s->n_pages)
			goto take;
		s->sealed = true;
		seg_maybe_release(ssd, (uint32_t)ssd->active);
		ssd->active = -1;
	}
	rc = seg_create(ssd);
	if (rc)
		return rc;
	s = &ssd->segs[ssd->active];
take:
	*slot = (uint32_t)ssd->active;
	*page = s->next_page;
	s->next_page += pages;
	return 0;
}

/* ---- writes ------------------------------------------------------------ */

struct wctx {
	char *stage;      /* staged: header + payload, else NULL */
	size_t stage_len;
	uint64_t stored;
	enum kvt_codec_id codec;
	uint64_t sum;
	uint32_t pages;   /* header included */
	uint32_t slot, page;
	size_t op0, n_ops;
	size_t sync_op;
};

static struct kvt_ssd_io_op io_op(enum kvt_ssd_io_kind kind, uint32_t file, uint64_t off,
				  void *buf, size_t len)
{
	return (struct kvt_ssd_io_op){ .kind = kind, .file = file, .off = off, .buf = buf, .len = len };
}

static bool aligned(const void *p)
{
	return ((uintptr_t)p & (PAGE - 1)) == 0;
}

/* Encode the payload (outside every lock: compression is CPU time). */
static int write_prepare(struct kvt_ssd *ssd, struct kvt_ssd_write *w, struct wctx *c)
{
	bool raw = !w->codec || w->codec->id == KVT_CODEC_RAW;

	memset(c, 0, sizeof(*c));
	if (!w->data || !w->len)
		return -EINVAL;
	if (pages_of(kvt_codec_bound(w->len)) + 1 > ssd->seg_pages &&
	    pages_of(w->len) + 1 > ssd->seg_pages)
		return -EFBIG;
	if (raw && aligned(w->data)) {
		c->stored = w->len;
		c->codec = KVT_CODEC_RAW;
		c->sum = XXH3_64bits(w->data, w->len);
	} else {
		size_t cap = kvt_codec_bound(w->len);
		void *scratch = NULL;
		long n;

		c->stage_len = PAGE + pages_of(cap) * PAGE;
		c->stage = aligned_alloc(PAGE, c->stage_len);
		if (!c->stage)
			return -ENOMEM;
		if (!raw && kvt_codec_scratch_bytes(w->codec->id, w->len)) {
			scratch = malloc(kvt_codec_scratch_bytes(w->codec->id, w->len));
			if (!scratch)
				return -ENOMEM;
		}
		if (raw) {
			memcpy(c->stage + PAGE, w->data, w->len);
			n = (long)w->len;
			c->codec = KVT_CODEC_RAW;
		} else {
			n = kvt_codec_encode(w->codec, w->data, w->len, c->stage + PAGE, cap,
					     scratch, &c->codec);
		}
		free(scratch);
		if (n < 0)
			return (int)n;
		c->stored = (uint64_t)n;
		memset(c->stage + PAGE + n, 0, pages_of((uint64_t)n) * PAGE - (uint64_t)n);
		c->stage_len = PAGE + pages_of((uint64_t)n) * PAGE;
		c->sum = XXH3_64bits(c->stage + PAGE, (size_t)n);
	}
	c->pages = (uint32_t)(1 + pages_of(c->stored));
	if (c->pages > ssd->seg_pages || pages_of(c->stored) > LOC_MAX_PPAGES)
		return -EFBIG;
	return 0;
}

static int write_chunk(struct kvt_ssd *ssd, struct kvt_ssd_write *w, size_t n)
{
	struct wctx *c = calloc(n, sizeof(*c));
	struct kvt_ssd_io_op *ops = calloc(4 * n, sizeof(*ops));
	size_t n_ops = 0, first_sync, ok = 0;
	int rc = 0;

	if (!c || !ops) {
		for (size_t i = 0; i < n; i++)
			w[i].res = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		w[i].lat_ns = 0;
		w[i].res = write_prepare(ssd, &w[i], &c[i]);
	}

	pthread_mutex_lock(&ssd->lock);
	for (size_t i = 0; i < n; i++) {
		struct seg_rec r;

		if (w[i].res)
			continue;
		if (ssd->st.degraded) {
			w[i].res = -EROFS;
			continue;
		}
		w[i].res = alloc_pages(ssd, c[i].pages, &c[i].slot, &c[i].page);
		if (w[i].res)
			continue;
		r = (struct seg_rec){ .ns_id = w[i].ns_id, .key = w[i].key, .raw_len = w[i].len,
				      .stored_len = c[i].stored, .sum = c[i].sum,
				      .page = c[i].page, .pages = c[i].pages, .state = REC_PENDING,
				      .codec = (uint8_t)c[i].codec };
		w[i].res = seg_add_rec(&ssd->segs[c[i].slot], &r);
		if (w[i].res)
			continue;
		ssd->segs[c[i].slot].users++;
		struct kvt_ssd_hdr h = {
			.seq = ssd->next_seq++, .ns_id = w[i].ns_id, .key = w[i].key,
			.flags = w[i].has_parent ? KVT_SSD_F_PARENT : 0, .codec = (uint8_t)c[i].codec,
			.raw_len = w[i].len, .stored_len = c[i].stored, .payload_sum = c[i].sum };
		if (w[i].has_parent)
			h.parent = w[i].parent;
		kvt_ssd_hdr_encode(&h, ssd->salt, c[i].stage ? c[i].stage : ssd->arena + i * 2 * PAGE);
	}
	pthread_mutex_unlock(&ssd->lock);

	for (size_t i = 0; i < n; i++) {
		uint64_t off = (uint64_t)c[i].page * PAGE;

		if (w[i].res)
			continue;
		c[i].op0 = n_ops;
		if (c[i].stage) {
			ops[n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot, off,
							       c[i].stage, c[i].stage_len);
		} else {
			size_t body = w[i].len & ~(size_t)(PAGE - 1), tail = w[i].len - body;
			char *hp = ssd->arena + i * 2 * PAGE;

			ops[n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot, off, hp, PAGE);
			if (body)
				ops[n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot,
								       off + PAGE, (void *)w[i].data, body);
			if (tail) {
				memcpy(hp + PAGE, (const char *)w[i].data + body, tail);
				memset(hp + PAGE + tail, 0, PAGE - tail);
				ops[n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot,
								       off + PAGE + body, hp + PAGE, PAGE);
			}
		}
		c[i].n_ops = n_ops - c[i].op0;
	}
	rc = kvt_ssd_io_run(ssd->io, ops, n_ops);
	if (rc)
		goto out_unpin;

	/* group commit: one fdatasync per segment touched by the batch */
	first_sync = n_ops;
	for (size_t i = 0; i < n && ssd->opts.sync; i++) {
		size_t j;

		if (w[i].res)
			continue;
		for (j = first_sync; j < n_ops && ops[j].file != c[i].slot; j++)
			;
		if (j == n_ops)
			ops[n_ops++] = (struct kvt_ssd_io_op){ .kind = KVT_SSD_IO_SYNC, .file = c[i].slot };
		c[i].sync_op = j;
	}
	if (n_ops > first_sync)
		rc = kvt_ssd_io_run(ssd->io, ops + first_sync, n_ops - first_sync);

out_unpin:
	pthread_mutex_lock(&ssd->lock);
	for (size_t i = 0; i < n; i++) {
		struct seg *s;
		struct seg_rec *r;
		int err = rc;
		bool dev = false;

		if (w[i].res)
			continue;
		s = &ssd->segs[c[i].slot];
		r = seg_find(s, c[i].page);
		for (size_t j = c[i].op0; j < c[i].op0 + c[i].n_ops && !err; j++) {
			err = ops[j].res;
			dev = device_error(err);
			if (ops[j].lat_ns > w[i].lat_ns)
				w[i].lat_ns = ops[j].lat_ns;
		}
		if (!err && ssd->opts.sync) {
			err = ops[c[i].sync_op].res;
			dev = device_error(err);
			if (err)
				ssd->st.sync_errors++;
		}
		if (err) {
			ssd->st.write_errors++;
			r->state = REC_DEAD;
			w[i].res = dev ? -EIO : err;
			if (dev)
				degrade(ssd, err, "writing a record");
		} else {
			r->state = REC_LIVE;
			s->live_pages += r->pages;
			w[i].loc = loc_make(s->gen, c[i].slot, c[i].page);
			ssd->st.blocks++;
			ssd->st.live_raw_bytes += w[i].len;
			ssd->st.writes++;
			ssd->st.write_raw_bytes += w[i].len;
			ssd->st.write_stored_bytes += c[i].stored;
			if (c[i].codec != KVT_CODEC_RAW)
				ssd->st.compressed_writes++;
			ok++;
		}
		s->users--;
		seg_maybe_release(ssd, c[i].slot);
	}
	pthread_mutex_unlock(&ssd->lock);
out:
	for (size_t i = 0; c && i < n; i++)
		free(c[i].stage);
	free(ops);
	free(c);
	return (int)ok;
}

int kvt_ssd_write(struct kvt_ssd *ssd, struct kvt_ssd_write *w, size_t n)
{
	int ok = 0;

	if (!ssd || (n && !w))
		return -EINVAL;
	pthread_mutex_lock(&ssd->batch_lock);
	for (size_t i = 0; i < n; i += ssd->chunk)
		ok += write_chunk(ssd, w + i, n - i < ssd->chunk ? n - i : ssd->chunk);
	pthread_mutex_unlock(&ssd->batch_lock);
	return ok;
}

/* ---- reads ------------------------------------------------------------- */

struct rctx {
	char *stage;      /* staged: the stored payload, else NULL */
	uint64_t stored;  /* from the tier's memory of the record */
	uint64_t sum;
	uint8_t codec;
	size_t op0, n_ops;
	bool pinned;
};

/* Check a payload that landed in r->buf (and tail page tp) or in the stage
 * against the checksum the header carried, and decode it. */
static int read_verify(struct kvt_ssd_read *r, struct rctx *c, const char *tp)
{
	if (c->stage) {
		void *scratch = NULL;
		size_t sb = kvt_codec_scratch_bytes((enum kvt_codec_id)c->codec, r->len);
		int rc;

		if (XXH3_64bits(c->stage, c->stored) != c->sum)
			return -EBADMSG;
		if (sb && !(scratch = malloc(sb)))
			return -ENOMEM;
		rc = kvt_codec_decode((enum kvt_codec_id)c->codec, c->stage, c->stored, r->buf,
				      r->len, scratch);
		free(scratch);
		return rc;
	} else {
		size_t body = r->len & ~(size_t)(PAGE - 1), tail = r->len - body;
		XXH3_state_t st;

		XXH3_64bits_reset(&st);
		XXH3_64bits_update(&st, r->buf, body);
		XXH3_64bits_update(&st, tp, tail);
		if (XXH3_64bits_digest(&st) != c->sum)
			return -EBADMSG;
		memcpy((char *)r->buf + body, tp, tail);
		return 0;
	}
}

/* Reads fetch the payload only: the header was verified when the record was
 * written or recovered, and what it vouches for (key, lengths, codec, the
 * payload's checksum) is in memory. One I/O per block, checksum verified. */
static int read_chunk(struct kvt_ssd *ssd, struct kvt_ssd_read *r, size_t n)
{
	struct rctx *c = calloc(n, sizeof(*c));
	struct kvt_ssd_io_op *ops = calloc(2 * n, sizeof(*ops));
	size_t n_ops = 0, ok = 0;
	uint64_t bad = 0, errs = 0, dev_errs = 0, bytes = 0;
	int rc;

	if (!c || !ops) {
		for (size_t i = 0; i < n; i++)
			r[i].res = -ENOMEM;
		goto out;
	}
	pthread_mutex_lock(&ssd->lock);
	for (size_t i = 0; i < n; i++) {
		uint32_t slot = loc_slot(r[i].loc), page = loc_page(r[i].loc);
		struct seg_rec *rec = NULL;
		struct seg *s;

		r[i].lat_ns = 0;
		r[i].res = 0;
		if (!r[i].buf || !r[i].len) {
			r[i].res = -EINVAL;
			continue;
		}
		/* a loc whose segment was released, or whose record was freed or
		 * is another's, is stale: a miss, never a read of what lies there */
		if (slot < ssd->n_slots && (s = &ssd->segs[slot])->used &&
		    s->gen == loc_gen(r[i].loc))
			rec = seg_find(s, page);
		if (!rec || rec->state != REC_LIVE ||
		    rec->ns_id != r[i].ns_id || memcmp(&rec->key, &r[i].key, sizeof(rec->key)) ||
		    rec->raw_len != r[i].len) {
			ssd->st.stale_reads++;
			r[i].res = -ENOENT;
			continue;
		}
		s->users++;
		c[i].pinned = true;
		c[i].stored = rec->stored_len;
		c[i].sum = rec->sum;
		c[i].codec = rec->codec;
		if (rec->codec != KVT_CODEC_RAW || !aligned(r[i].buf)) {
			c[i].stage = aligned_alloc(PAGE, pages_of(rec->stored_len) * PAGE);
			if (!c[i].stage)
				r[i].res = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&ssd->lock);

	for (size_t i = 0; i < n; i++) {
		uint64_t off = (uint64_t)(loc_page(r[i].loc) + 1) * PAGE;
		uint32_t slot = loc_slot(r[i].loc);

		if (r[i].res)
			continue;
		c[i].op0 = n_ops;
		if (c[i].stage) {
			ops[n_ops++] = io_op(KVT_SSD_IO_READ, slot, off, c[i].stage,
					     pages_of(c[i].stored) * PAGE);
		} else {
			size_t body = r[i].len & ~(size_t)(PAGE - 1), tail = r[i].len - body;

			if (body)
				ops[n_ops++] = io_op(KVT_SSD_IO_READ, slot, off, r[i].buf, body);
			if (tail)
				ops[n_ops++] = io_op(KVT_SSD_IO_READ, slot, off + body,
						     ssd->arena + i * 2 * PAGE + PAGE, PAGE);
		}
		c[i].n_ops = n_ops - c[i].op0;
	}
	rc = kvt_ssd_io_run(ssd->io, ops, n_ops);

	for (size_t i = 0; i < n; i++) {
		int err = rc;
		bool dev = false;

		if (r[i].res)
			continue;
		for (size_t j = c[i].op0; j < c[i].op0 + c[i].n_ops && !err; j++) {
			err = ops[j].res;
			dev = device_error(err);
			if (ops[j].lat_ns > r[i].lat_ns)
				r[i].lat_ns = ops[j].lat_ns;
		}
		if (err) {
			errs++;
			dev_errs += dev;
			r[i].res = dev ? -EIO : err;
			continue;
		}
		r[i].res = read_verify(&r[i], &c[i], ssd->arena + i * 2 * PAGE + PAGE);
		if (r[i].res == -EBADMSG)
			bad++;
		if (!r[i].res) {
			ok++;
			bytes += r[i].len;
		}
	}

	pthread_mutex_lock(&ssd->lock);
	for (size_t i = 0; i < n; i++)
		if (c[i].pinned) {
			ssd->segs[loc_slot(r[i].loc)].users--;
			seg_maybe_release(ssd, loc_slot(r[i].loc));
		}
	ssd->st.reads += ok;
	ssd->st.read_bytes += bytes;
	ssd->st.checksum_failures += bad;
	ssd->st.read_errors += errs;
	if (bad)
		kvt_ssd_log("%" PRIu64 " record(s) failed verification on read: treated as misses",
			    bad);
	if (dev_errs)
		degrade(ssd, -EIO, "reading a record");
	pthread_mutex_unlock(&ssd->lock);
out:
	for (size_t i = 0; c && i < n; i++)
		free(c[i].stage);
	free(ops);
	free(c);
	return (int)ok;
}

int kvt_ssd_read(struct kvt_ssd *ssd, struct kvt_ssd_read *r, size_t n)
{
	int ok = 0;

	if (!ssd || (n && !r))
		return -EINVAL;
	pthread_mutex_lock(&ssd->batch_lock);
	for (size_t i = 0; i < n; i += ssd->chunk)
		ok += read_chunk(ssd, r + i, n - i < ssd->chunk ? n - i : ssd->chunk);
	pthread_mutex_unlock(&ssd->batch_lock);
	return ok;
}

/* The record loc names, if its segment is still the one loc was made in;
 * NULL for a stale loc. Lock held. */
static struct seg_rec *loc_rec(struct kvt_ssd *ssd, uint64_t loc)
{
	uint32_t slot = loc_slot(loc);
	struct seg *s;

	if (slot >= ssd->n_slots || !(s = &ssd->segs[slot])->used || s->gen != loc_gen(loc))
		return NULL;
	return seg_find(s, loc_page(loc));
}

void kvt_ssd_free(struct kvt_ssd *ssd, uint64_t loc)
{
	struct seg_rec *r;

	if (!ssd)
		return;
	pthread_mutex_lock(&ssd->lock);
	if ((r = loc_rec(ssd, loc))) {
		rec_kill(ssd, &ssd->segs[loc_slot(loc)], r);
		seg_maybe_release(ssd, loc_slot(loc));
	}
	pthread_mutex_unlock(&ssd->lock);
}

int kvt_ssd_hold(struct kvt_ssd *ssd, uint64_t loc, int delta)
{
	struct seg_rec *r;
	struct seg *s;
	int rc = 0;

	if (!ssd || (delta != 1 && delta != -1))
		return -EINVAL;
	pthread_mutex_lock(&ssd->lock);
	r = loc_rec(ssd, loc);
	if (!r || r->state != REC_LIVE || (delta < 0 && !r->held)) {
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
	out->segments = ssd->segs_used;
	out->used_bytes = 0;
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		out->used_bytes += ssd->segs[i].live_pages * PAGE;
	pthread_mutex_unlock(&ssd->lock);
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

void kvt_ssd_inject(struct kvt_ssd *ssd, enum kvt_ssd_io_kind kind, uint32_t skip,
		    uint32_t count, int err)
{
	kvt_ssd_io_inject(ssd->io, kind, skip, count, err);
}

int kvt_ssd_register_region(struct kvt_ssd *ssd, void *ptr, size_t len)
{
	if (!ssd)
		return -EINVAL;
	return kvt_ssd_io_add_buffer(ssd->io, ptr, len);
}

/* ---- open and recovery ------------------------------------------------- */

/* A valid record found by the scan. */
struct cand {
	struct kvt_ssd_rec_info info;
	uint32_t slot;
	size_t rec;
};

struct scan {
	struct cand *v;
	size_t n, cap;
	char *win;           /* SCAN_WINDOW bytes */
	uint32_t win_page, win_pages;
};

static int scan_load(struct seg *s, struct scan *sc, uint32_t page)
{
	uint32_t want = SCAN_WINDOW / PAGE;
	ssize_t r;

	if (want > s->n_pages - page)
		want = s->n_pages - page;
	r = pread(s->fd, sc->win, (size_t)want * PAGE, (off_t)page * PAGE);
	if (r < 0)
		return -errno;
	sc->win_page = page;
	sc->win_pages = (uint32_t)((size_t)r / PAGE);
	return sc->win_pages ? 0 : -EIO;
}

/* Pointer to pages [page, page + n) of the segment, loading the window or,
 * for a record larger than it, reading into *big. */
static const char *scan_get(struct seg *s, struct scan *sc, uint32_t page, uint32_t n,
			    char **big, int *err)
{
	if (page >= sc->win_page && page + n <= sc->win_page + sc->win_pages)
		return sc->win + (size_t)(page - sc->win_page) * PAGE;
	if (n <= SCAN_WINDOW / PAGE) {
		*err = scan_load(s, sc, page);
		if (*err)
			return NULL;
		if (n > sc->win_pages) {
			*err = -EIO;
			return NULL;
		}
		return sc->win;
	}
	free(*big);
	*big = aligned_alloc(PAGE, (size_t)n * PAGE);
	if (!*big) {
		*err = -ENOMEM;
		return NULL;
	}
	if (pread(s->fd, *big, (size_t)n * PAGE, (off_t)page * PAGE) != (ssize_t)((size_t)n * PAGE)) {
		*err = -EIO;
		return NULL;
	}
	return *big;
}

/* Scan one segment: every page that starts a record whose header and payload
 * verify is a candidate; anything else is stepped over a page at a time,
 * because with several writes in flight a torn record can sit before acked
 * ones. */
static int scan_segment(struct kvt_ssd *ssd, uint32_t slot, struct scan *sc)
{
	struct seg *s = &ssd->segs[slot];
	char *big = NULL;
	int err = 0;

	sc->win_pages = 0;
	for (uint32_t p = 0; p < s->n_pages;) {
		const char *hp = scan_get(s, sc, p, 1, &big, &err);
		struct kvt_ssd_hdr h;
		uint64_t pp;

		if (!hp)
			break;
		if (kvt_ssd_hdr_decode(hp, ssd->salt, &h)) {
			p++;
			continue;
		}
		pp = pages_of(h.stored_len);
		const char *rec = p + 1 + pp <= s->n_pages && pp <= LOC_MAX_PPAGES ?
			scan_get(s, sc, p, (uint32_t)(1 + pp), &big, &err) : NULL;
		if (!rec && err)
			break;
		if (!rec || XXH3_64bits(rec + PAGE, h.stored_len) != h.payload_sum) {
			ssd->st.recovery_skipped++;
			p++;
			continue;
		}
		struct seg_rec r = { .ns_id = h.ns_id, .key = h.key, .raw_len = h.raw_len,
				     .stored_len = h.stored_len, .sum = h.payload_sum,
				     .page = p, .pages = (uint32_t)(1 + pp), .state = REC_DEAD,
				     .codec = h.codec };
		if (sc->n == sc->cap) {
			size_t cap = sc->cap ? 2 * sc->cap : 1024;
			struct cand *v = realloc(sc->v, cap * sizeof(*v));
			if (!v) {
				err = -ENOMEM;
				break;
			}
			sc->v = v;
			sc->cap = cap;
		}
		err = seg_add_rec(s, &r);
		if (err)
			break;
		sc->v[sc->n++] = (struct cand){
			.info = { .ns_id = h.ns_id, .key = h.key, .parent = h.parent,
				  .has_parent = h.flags & KVT_SSD_F_PARENT,
				  .codec = (enum kvt_codec_id)h.codec, .raw_len = h.raw_len,
				  .stored_len = h.stored_len, .seq = h.seq,
				  .loc = loc_make(s->gen, slot, p) },
			.slot = slot, .rec = s->n_recs - 1 };
		if (h.seq >= ssd->next_seq)
			ssd->next_seq = h.seq + 1;
		p += (uint32_t)(1 + pp);
	}
	free(big);
	return err;
}

static int cand_by_key_newest(const void *a, const void *b)
{
	const struct kvt_ssd_rec_info *x = &((const struct cand *)a)->info;
	const struct kvt_ssd_rec_info *y = &((const struct cand *)b)->info;
	int c;

	if (x->ns_id != y->ns_id)
		return x->ns_id < y->ns_id ? -1 : 1;
	c = memcmp(&x->key, &y->key, sizeof(x->key));
	if (c)
		return c;
	return x->seq > y->seq ? -1 : x->seq < y->seq;
}

static int cand_by_seq(const void *a, const void *b)
{
	uint64_t x = ((const struct cand *)a)->info.seq, y = ((const struct cand *)b)->info.seq;

	return x < y ? -1 : x > y;
}

static int name_to_id(const char *name, uint64_t *id)
{
	char *end;

	if (strncmp(name, "seg-", 4) || strlen(name) != 4 + 16 + 4 || strcmp(name + 20, ".kvt"))
		return -1;
	*id = strtoull(name + 4, &end, 16);
	return end == name + 20 ? 0 : -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Segment file numbers in the directory, sorted. */
static int list_segments(struct kvt_ssd *ssd, uint64_t **ids, size_t *n)
{
	DIR *d = opendir(ssd->dir);
	struct dirent *e;
	size_t cap = 0;

	*ids = NULL;
	*n = 0;
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		uint64_t id;
		if (name_to_id(e->d_name, &id))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			uint64_t *v = realloc(*ids, cap * sizeof(*v));
			if (!v) {
				closedir(d);
				return -ENOMEM;
			}
			*ids = v;
		}
		(*ids)[(*n)++] = id;
	}
	closedir(d);
	if (*n)
		qsort(*ids, *n, sizeof(**ids), cmp_u64);
	return 0;
}

/* Load or create the directory's salt; hold an exclusive lock on it so that
 * two processes never share a directory. */
static int open_meta(struct kvt_ssd *ssd)
{
	char buf[128];
	unsigned long long salt;
	ssize_t r;

	ssd->meta_fd = openat(ssd->dir_fd, META_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (ssd->meta_fd < 0)
		return -errno;
	if (flock(ssd->meta_fd, LOCK_EX | LOCK_NB))
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	r = pread(ssd->meta_fd, buf, sizeof(buf) - 1, 0);
	if (r < 0)
		return -errno;
	buf[r] = 0;
	if (sscanf(buf, "kvtier-ssd 1 salt %llx", &salt) == 1) {
		ssd->salt = salt;
		return 0;
	}
	if (r > 0) {
		kvt_ssd_log("%s/%s is not a kvtier SSD tier file", ssd->dir, META_NAME);
		return -EINVAL;
	}
	if (getrandom(&ssd->salt, sizeof(ssd->salt), 0) != sizeof(ssd->salt))
		return -EIO;
	int n = snprintf(buf, sizeof(buf), "kvtier-ssd 1 salt %016llx\n",
			 (unsigned long long)ssd->salt);
	if (pwrite(ssd->meta_fd, buf, (size_t)n, 0) != n || fsync(ssd->meta_fd) ||
	    fsync(ssd->dir_fd))
		return -errno ? -errno : -EIO;
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
		kvt_ssd_log("the file system of %s refuses O_DIRECT", ssd->dir);
	return rc;
}

static int recover(struct kvt_ssd *ssd, const uint64_t *ids, size_t n_ids,
		   kvt_ssd_recover_cb cb, void *arg)
{
	struct scan sc = { 0 };
	int rc = 0;

	sc.win = aligned_alloc(PAGE, SCAN_WINDOW);
	if (!sc.win)
		return -ENOMEM;
	for (size_t i = 0; i < n_ids; i++) {
		struct seg *s = &ssd->segs[i];
		char path[4096];
		struct stat stb;

		seg_path(ssd, ids[i], path, sizeof(path));
		s->fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		if (s->fd < 0 || fstat(s->fd, &stb)) {
			rc = -errno;
			kvt_ssd_log("cannot open %s: %s", path, strerror(errno));
			goto out;
		}
		s->used = s->sealed = true;
		s->gen = 1;
		s->id = ids[i];
		s->n_pages = s->next_page = (uint32_t)((uint64_t)stb.st_size / PAGE);
		ssd->segs_used++;
		if (ids[i] >= ssd->next_seg_id)
			ssd->next_seg_id = ids[i] + 1;
		rc = kvt_ssd_io_set_file(ssd->io, (uint32_t)i, s->fd);
		if (!rc)
			rc = scan_segment(ssd, (uint32_t)i, &sc);
		if (rc) {
			kvt_ssd_log("cannot scan %s: %s", path, strerror(-rc));
			goto out;
		}
	}

	/* the newest record of a key wins; older copies are dead */
	if (sc.n)
		qsort(sc.v, sc.n, sizeof(*sc.v), cand_by_key_newest);
	size_t keep = 0;
	for (size_t i = 0; i < sc.n; i++) {
		if (keep && sc.v[keep - 1].info.ns_id == sc.v[i].info.ns_id &&
		    !memcmp(&sc.v[keep - 1].info.key, &sc.v[i].info.key, KVT_KEY_BYTES)) {
			ssd->st.recovery_superseded++;
			continue;
		}
		sc.v[keep++] = sc.v[i];
	}
	if (keep)
		qsort(sc.v, keep, sizeof(*sc.v), cand_by_seq);
	for (size_t i = 0; i < keep; i++) {
		struct seg *s = &ssd->segs[sc.v[i].slot];
		struct seg_rec *r = &s->recs[sc.v[i].rec];

		if (cb && cb(&sc.v[i].info, arg))
			continue;
		r->state = REC_LIVE;
		s->live_pages += r->pages;
		ssd->st.blocks++;
		ssd->st.live_raw_bytes += r->raw_len;
		ssd->st.recovered++;
	}
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		seg_maybe_release(ssd, i);
	if (ssd->st.recovery_skipped)
		kvt_ssd_log("recovery skipped %" PRIu64 " torn or corrupt record(s)",
			    ssd->st.recovery_skipped);
out:
	free(sc.v);
	free(sc.win);
	return rc;
}

int kvt_ssd_open(const struct kvt_ssd_opts *opts, kvt_ssd_recover_cb recover_cb, void *arg,
		 struct kvt_ssd **out)
{
	struct kvt_ssd_opts o = ssd_defaults;
	struct kvt_ssd_io_opts io_opts;
	struct kvt_ssd *ssd;
	uint64_t *ids = NULL;
	size_t n_ids = 0;
	int rc = -ENOMEM;

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
	ssd->active = -1;
	ssd->dir_fd = ssd->meta_fd = -1;
	ssd->next_seq = 1;
	ssd->next_seg_id = 1;
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
	if (!ssd->dir)
		goto err_ssd;
	pthread_mutex_init(&ssd->lock, NULL);
	pthread_mutex_init(&ssd->batch_lock, NULL);

	if (mkdir(ssd->dir, 0755) && errno != EEXIST) {
		rc = -errno;
		goto err_dir;
	}
	ssd->dir_fd = open(ssd->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ssd->dir_fd < 0) {
		rc = -errno;
		goto err_dir;
	}
	rc = probe_odirect(ssd);
	if (rc)
		goto err_dirfd;
	rc = open_meta(ssd);
	if (rc)
		goto err_meta;
	rc = list_segments(ssd, &ids, &n_ids);
	if (rc)
		goto err_meta;
	ssd->n_slots = ssd->max_segs + (uint32_t)n_ids + 1;
	if (n_ids >= LOC_MAX_SLOTS / 2) {
		rc = -EINVAL;
		goto err_ids;
	}
	ssd->segs = calloc(ssd->n_slots, sizeof(*ssd->segs));
	if (!ssd->segs) {
		rc = -ENOMEM;
		goto err_ids;
	}
	for (uint32_t i = 0; i < ssd->n_slots; i++)
		ssd->segs[i].fd = -1;

	ssd->chunk = ssd->opts.queue_depth * 8 < 64 ? 64 : ssd->opts.queue_depth * 8;
	ssd->arena = aligned_alloc(PAGE, (size_t)ssd->chunk * 2 * PAGE);
	if (!ssd->arena) {
		rc = -ENOMEM;
		goto err_segs;
	}
	kvt_ssd_io_opts_init(&io_opts, sizeof(io_opts));
	/* queue_depth counts records: each is a header and a body operation */
	io_opts.queue_depth = ssd->opts.queue_depth * 2;
	io_opts.max_inflight_bytes = ssd->opts.max_inflight_bytes;
	io_opts.max_files = ssd->n_slots;
	io_opts.threads = ssd->opts.threads;
	io_opts.force_threads = ssd->opts.force_threads;
	rc = kvt_ssd_io_open(&io_opts, &ssd->io);
	if (rc)
		goto err_arena;
	rc = kvt_ssd_io_add_buffer(ssd->io, ssd->arena, (size_t)ssd->chunk * 2 * PAGE);
	if (rc)
		goto err_io;
	rc = recover(ssd, ids, n_ids, recover_cb, arg);
	if (rc)
		goto err_recover;
	free(ids);
	*out = ssd;
	return 0;

err_recover:
	for (uint32_t i = 0; i < ssd->n_slots; i++) {
		if (ssd->segs[i].fd >= 0)
			close(ssd->segs[i].fd);
		free(ssd->segs[i].recs);
	}
err_io:
	kvt_ssd_io_close(ssd->io);
err_arena:
	free(ssd->arena);
err_segs:
	free(ssd->segs);
err_ids:
	free(ids);
err_meta:
	if (ssd->meta_fd >= 0)
		close(ssd->meta_fd);
err_dirfd:
	close(ssd->dir_fd);
err_dir:
	pthread_mutex_destroy(&ssd->batch_lock);
	pthread_mutex_destroy(&ssd->lock);
	free(ssd->dir);
err_ssd:
	free(ssd);
	return rc;
}

void kvt_ssd_close(struct kvt_ssd *ssd)
{
	if (!ssd)
		return;
	kvt_ssd_io_close(ssd->io);
	for (uint32_t i = 0; i < ssd->n_slots; i++) {
		if (ssd->segs[i].fd >= 0)
			close(ssd->segs[i].fd);
		free(ssd->segs[i].recs);
	}
	free(ssd->segs);
	free(ssd->arena);
	free(ssd->dropped);
	close(ssd->meta_fd); /* drops the directory lock */
	close(ssd->dir_fd);
	pthread_mutex_destroy(&ssd->batch_lock);
	pthread_mutex_destroy(&ssd->lock);
	free(ssd->dir);
	free(ssd);
}
