/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's read batch path: every record's payload read at once, each
 * record checked (its checksum, its decoding) as its I/O completes, with
 * the tier's helper thread when a set is large, then handed over; and
 * kvt_ssd_read, a batch in one call. */
#include "tiers/ssd_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/block_sum.h"
#include "util/fault_guard.h"
#include "util/log.h"
#include "tiers/codec.h"
#include "tiers/ssd_helper.h"

/* ---- reads ------------------------------------------------------------- */

struct iov_sum {
	const struct kvt_tier_io *io;
	struct kvt_sum st;
};

static void iov_sum_fn(void *arg)
{
	struct iov_sum *x = arg;

	for (unsigned j = 0; j < x->io->iovcnt; j++)
		kvt_sum_add(&x->st, x->io->iov[j].iov_base, x->io->iov[j].iov_len);
}

/* Whether the record read into io->iov verifies there (0), or -EFAULT: the
 * pieces are another's memory (an engine's pages), which it may write
 * while the read runs, or map to the same pages twice, or punch a hole in;
 * a sum that fails there says nothing of the record (tiers/tier.h). */
static int iov_verify(const struct kvt_tier_io *io, uint64_t sum)
{
	struct iov_sum x = { .io = io };
	uintptr_t lo = UINTPTR_MAX, hi = 0;

	for (unsigned j = 0; j < io->iovcnt; j++) {
		uintptr_t p = (uintptr_t)io->iov[j].iov_base;

		lo = p < lo ? p : lo;
		hi = p + io->iov[j].iov_len > hi ? p + io->iov[j].iov_len : hi;
	}
	kvt_sum_begin(&x.st);
	if (kvt_fault_guard_run((const void *)lo, hi - lo, iov_sum_fn, &x))
		return -EFAULT;
	return kvt_sum_end(&x.st) == sum ? 0 : -EFAULT;
}

/* Check a payload that landed in io->buf (and tail page tp) or in the stage
 * against the checksum the header carried, and decode it. */
static int read_verify(struct kvt_tier_io *io, struct rrec *c, void *scratch)
{
	if (io->iov)
		return iov_verify(io, c->sum);
	if (c->stage) {
		if (kvt_block_sum(c->stage, c->stored) != c->sum)
			return -EBADMSG;
		return kvt_codec_decode((enum kvt_codec_id)c->codec, c->stage, c->stored, io->buf,
					io->len, scratch);
	}
	if (!c->tail)
		return kvt_block_sum(io->buf, io->len) == c->sum ? 0 : -EBADMSG;

	size_t body = io->len & ~(size_t)(PAGE - 1), tail = io->len - body;
	struct kvt_sum st;

	kvt_sum_begin(&st);
	kvt_sum_add(&st, io->buf, body);
	kvt_sum_add(&st, c->tail, tail);
	if (kvt_sum_end(&st) != c->sum)
		return -EBADMSG;
	memcpy((char *)io->buf + body, c->tail, tail);
	return 0;
}

/* Whether a read into pieces can land whole: raw on the device, every
 * piece 4 KiB aligned and long, len bytes in all (0 or -EOPNOTSUPP, -EINVAL
 * for pieces that do not add up to len). */
static int iov_readable(const struct kvt_tier_io *io, uint8_t codec)
{
	size_t sum = 0;

	if (codec != KVT_CODEC_RAW || io->iovcnt > IOV_MAX || (io->len & (PAGE - 1)))
		return -EOPNOTSUPP;
	for (unsigned j = 0; j < io->iovcnt; j++) {
		if (!aligned(io->iov[j].iov_base) || (io->iov[j].iov_len & (PAGE - 1)))
			return -EOPNOTSUPP;
		sum += io->iov[j].iov_len;
	}
	return sum == io->len ? 0 : -EINVAL;
}

/* Reads fetch the payload only: the header was verified when the record was
 * written or recovered, and what it vouches for (key, lengths, codec, the
 * payload's checksum) is in memory. One I/O per block, checksum verified as
 * it completes. */
int kvt_ssd_read_submit(struct kvt_ssd *ssd, struct kvt_tier_batch *b)
{
	struct sbatch *sb = kvt_ssd_sbatch_new(ssd, b, 2);
	struct kvt_tier_io *r = b->io;
	size_t scratch = 0;
	struct rrec *c;
	int rc;

	if (!sb || !(sb->r = calloc(b->n ? b->n : 1, sizeof(*sb->r))) ||
	    !(sb->checks = calloc(b->n ? b->n : 1, sizeof(*sb->checks)))) {
		if (sb)
			kvt_ssd_sbatch_free(sb);
		kvt_ssd_fail_all(b, -ENOMEM);
		return -ENOMEM;
	}
	c = sb->r;
	pthread_mutex_lock(&ssd->lock);
	for (size_t i = 0; i < b->n; i++) {
		uint32_t slot = loc_slot(r[i].loc), page = loc_page(r[i].loc);
		struct kvt_ssd_rec *rec = NULL;
		struct seg *s;

		r[i].lat_ns = 0;
		r[i].res = 0;
		if ((!r[i].buf && !r[i].iov) || !r[i].len || r[i].by_key || (r[i].iov && !r[i].iovcnt)) {
			r[i].res = -EINVAL;
			continue;
		}
		/* a loc whose segment was released, or whose record was freed or
		 * is another's, is stale: a miss, never a read of what lies there */
		if (slot < ssd->n_slots && (s = &ssd->segs[slot])->used &&
		    s->gen == loc_gen(r[i].loc))
			rec = kvt_ssd_seg_find(s, page);
		if (!rec || rec->state != KVT_SSD_REC_LIVE ||
		    rec->ns_id != r[i].ns_id || memcmp(&rec->key, &r[i].key, sizeof(rec->key)) ||
		    rec->raw_len != r[i].len) {
			ssd->st.stale_reads++;
			r[i].res = -ENOENT;
			continue;
		}
		if (r[i].iov && (r[i].res = iov_readable(&r[i], rec->codec)))
			continue;
		s->users++;
		c[i].pinned = true;
		c[i].stored = rec->stored_len;
		c[i].sum = rec->sum;
		c[i].codec = rec->codec;
		if (!r[i].iov && (rec->codec != KVT_CODEC_RAW || !aligned(r[i].buf))) {
			size_t sc = kvt_codec_scratch_bytes((enum kvt_codec_id)rec->codec, r[i].len);

			scratch = sc > scratch ? sc : scratch;
			c[i].stage = kvt_ssd_stage_get(&ssd->stages, pages_of(rec->stored_len) * PAGE,
						       &c[i].stage_cap);
			if (!c[i].stage)
				r[i].res = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&ssd->lock);
	if (scratch && (!(sb->scratch[0] = malloc(scratch)) || !(sb->scratch[1] = malloc(scratch))))
		for (size_t i = 0; i < b->n; i++)
			if (c[i].stage && !r[i].res)
				r[i].res = -ENOMEM;

	for (size_t i = 0; i < b->n; i++) {
		uint64_t off = (uint64_t)(loc_page(r[i].loc) + 1) * PAGE;
		uint32_t slot = loc_slot(r[i].loc);
		size_t n0 = sb->n_ops;

		if (r[i].res)
			continue;
		if (r[i].iov) {
			sb->ops[sb->n_ops] = io_op(KVT_SSD_IO_READ, slot, off, NULL, r[i].len);
			sb->ops[sb->n_ops].iov = r[i].iov;
			sb->ops[sb->n_ops++].iovcnt = r[i].iovcnt;
		} else if (c[i].stage) {
			sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_READ, slot, off, c[i].stage,
						     pages_of(c[i].stored) * PAGE);
		} else if (r[i].room) {
			sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_READ, slot, off, r[i].buf,
						     pages_of(r[i].len) * PAGE);
		} else {
			size_t body = r[i].len & ~(size_t)(PAGE - 1), tail = r[i].len - body;

			if (body)
				sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_READ, slot, off, r[i].buf, body);
			if (tail && !sb->arena &&
			    !(sb->arena = aligned_alloc(PAGE, b->n * 2 * PAGE))) {
				r[i].res = -ENOMEM;
				sb->n_ops = n0;
				continue;
			}
			if (tail) {
				c[i].tail = sb->arena + i * 2 * PAGE + PAGE;
				sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_READ, slot, off + body,
							     c[i].tail, PAGE);
			}
		}
		sb->left[i] = (uint32_t)(sb->n_ops - n0);
		c[i].op0 = n0;
		c[i].n_ops = sb->n_ops - n0;
		for (size_t j = n0; j < sb->n_ops; j++)
			sb->rec_of_op[j] = i;
	}
	if (sb->n_ops) {
		rc = kvt_ssd_io_start(ssd->io, sb->ops, sb->n_ops, sb->n_ops, &sb->run);
		if (rc)
			for (size_t j = 0; j < sb->n_ops; j++)
				sb->ops[j].res = rc;
	}
	b->priv = sb;
	return 0;
}

/* Record i of a read batch is done: its result, from its ops and its
 * checksum. Counts into the tallies t. */
static void read_finish(struct sbatch *sb, size_t i, uint64_t t[4], void *scratch)
{
	struct kvt_tier_io *r = &sb->b->io[i];
	int err = 0;
	bool dev = false;

	for (size_t j = sb->r[i].op0; j < sb->r[i].op0 + sb->r[i].n_ops; j++) {
		if (!err) {
			err = sb->ops[j].res;
			dev = device_error(err);
		}
		if (sb->ops[j].lat_ns > r->lat_ns)
			r->lat_ns = sb->ops[j].lat_ns;
	}
	if (err && r->iov && (err == -EFAULT || err == -EINVAL)) {
		r->res = -EFAULT; /* the pieces', not the device's */
		return;
	}
	if (err) {
		t[1]++;
		t[2] += dev;
		r->res = dev ? -EIO : err;
		return;
	}
	r->res = read_verify(r, &sb->r[i], scratch);
	if (r->res == -EBADMSG)
		t[0]++;
	if (!r->res)
		t[3] += r->len;
}

/* The records of a read batch whose I/O completed together, to check. */
struct read_checks {
	struct sbatch *sb;
	size_t *recs, n;
	uint64_t t[2][4]; /* tallies of read_finish, per thread */
};

static void read_check_one(void *arg, size_t k, unsigned who)
{
	struct read_checks *rc = arg;

	read_finish(rc->sb, rc->recs[k], rc->t[who], rc->sb->scratch[who]);
}

/* Bytes below which checking records costs less than waking the helper. */
#define HELP_MIN_BYTES (2u << 20)

/* Check the records in rc (their checksums, their decoding), with the
 * tier's helper when there are several and enough bytes, then hand them
 * over in order. Counts into h: sets offered to the helper, records it
 * checked. */
static void read_check(struct kvt_ssd *ssd, struct read_checks *rc, uint64_t h[2])
{
	struct kvt_tier_batch *b = rc->sb->b;
	uint64_t bytes = 0;

	for (size_t j = 0; j < rc->n; j++)
		bytes += b->io[rc->recs[j]].len;
	if (rc->n > 1 && bytes >= HELP_MIN_BYTES) {
		h[0]++;
		h[1] += kvt_ssd_helper_run(ssd->helper, rc->n, read_check_one, rc);
	} else
		for (size_t j = 0; j < rc->n; j++)
			read_check_one(rc, j, 0);
	for (size_t j = 0; j < rc->n && b->done_cb; j++)
		b->done_cb(b, rc->recs[j]);
	rc->n = 0;
}

void kvt_ssd_read_wait(struct kvt_ssd *ssd, struct kvt_tier_batch *b)
{
	struct sbatch *sb = b->priv;
	struct read_checks rc = { .sb = sb, .recs = sb->checks };
	uint64_t t[4]; /* checksum failures, errors, device errors, bytes */
	uint64_t ok = 0, helped[2] = { 0, 0 }; /* sets offered, records checked */
	size_t k;

	/* records that failed before any I/O are reported first */
	for (size_t i = 0; i < b->n && b->done_cb; i++)
		if (b->io[i].res)
			b->done_cb(b, i);
	if (sb->run) {
		while ((k = kvt_ssd_io_reap(sb->run, sb->done, sb->cap_ops)) > 0) {
			for (size_t d = 0; d < k; d++) {
				size_t i = sb->rec_of_op[sb->done[d]];

				if (!--sb->left[i])
					rc.recs[rc.n++] = i;
			}
			read_check(ssd, &rc, helped);
		}
		kvt_ssd_io_end(sb->run);
	} else {
		/* the engine could not start: every op carries its error */
		for (size_t i = 0; i < b->n; i++)
			if (!b->io[i].res && sb->left[i])
				rc.recs[rc.n++] = i;
		read_check(ssd, &rc, helped);
	}
	for (int j = 0; j < 4; j++)
		t[j] = rc.t[0][j] + rc.t[1][j];
	for (size_t i = 0; i < b->n; i++)
		ok += !b->io[i].res;

	pthread_mutex_lock(&ssd->lock);
	for (size_t i = 0; i < b->n; i++)
		if (sb->r[i].pinned) {
			ssd->segs[loc_slot(b->io[i].loc)].users--;
			kvt_ssd_seg_maybe_release(ssd, loc_slot(b->io[i].loc));
		}
	ssd->st.reads += ok;
	ssd->st.read_sets_shared += helped[0];
	ssd->st.reads_helped += helped[1];
	ssd->st.read_bytes += t[3];
	ssd->st.checksum_failures += t[0];
	ssd->st.read_errors += t[1];
	if (t[0])
		kvt_log(KVT_LOG_WARN, "event=ssd.read_verify_failed dir=%s records=%" PRIu64
			" action=\"treated as misses\"", ssd->dir, t[0]);
	if (t[2])
		kvt_ssd_degrade(ssd, -EIO, "reading a record");
	pthread_mutex_unlock(&ssd->lock);
	b->priv = NULL;
	kvt_ssd_sbatch_free(sb);
}

/* ---- one-call batches ------------------------------------------------------ */

int kvt_ssd_read(struct kvt_ssd *ssd, struct kvt_ssd_read *r, size_t n)
{
	struct kvt_tier_io *io;
	struct kvt_tier_batch b = { .n = n };
	int ok = 0;

	if (!ssd || (n && !r))
		return -EINVAL;
	if (!n)
		return 0;
	io = calloc(n, sizeof(*io));
	if (!io) {
		for (size_t i = 0; i < n; i++)
			r[i].res = -ENOMEM;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		io[i] = (struct kvt_tier_io){ .ns_id = r[i].ns_id, .key = r[i].key, .room = r[i].room,
					      .buf = r[i].buf, .len = r[i].len, .loc = r[i].loc };
	b.io = io;
	if (!kvt_ssd_submit(ssd, &b))
		kvt_ssd_wait(ssd, &b);
	for (size_t i = 0; i < n; i++) {
		r[i].res = io[i].res;
		r[i].lat_ns = io[i].lat_ns;
		ok += !io[i].res;
	}
	free(io);
	return ok;
}
