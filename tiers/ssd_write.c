/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's write batch path: each record prepared (encoded,
 * checksummed) outside the lock, given pages and issued in chunks of
 * ssd->chunk records, one fdatasync per segment a chunk touched (group
 * commit), then completed; and kvt_ssd_write, a batch in one call. */
#include "tiers/ssd_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/codec.h"
#include "util/block_sum.h"

/* ---- writes ------------------------------------------------------------ */

/* Encode the payload (outside every lock: compression is CPU time). A raw
 * block in a slot with room is written from the slot: its header goes in
 * the page before it, its padding is zeroed, and one write carries both. */
static int write_prepare(struct kvt_ssd *ssd, struct kvt_tier_io *w, struct wrec *c)
{
	bool raw = !w->codec || w->codec->id == KVT_CODEC_RAW;

	memset(c, 0, sizeof(*c));
	if (w->tomb) {
		/* a header alone */
		c->codec = KVT_CODEC_RAW;
		c->sum = kvt_block_sum(NULL, 0);
		c->pages = 1;
		return 0;
	}
	if (!w->buf || !w->len)
		return -EINVAL;
	if (pages_of(kvt_codec_bound(w->len)) + 1 > ssd->seg_pages &&
	    pages_of(w->len) + 1 > ssd->seg_pages)
		return -EFBIG;
	if (raw && aligned(w->buf)) {
		c->stored = w->len;
		c->codec = KVT_CODEC_RAW;
		c->sum = kvt_block_sum(w->buf, w->len);
		/* the padding leaves with the block: zeros, not a neighbour's bytes */
		if (w->room && w->len % PAGE)
			memset((char *)w->buf + w->len, 0, PAGE - w->len % PAGE);
	} else {
		size_t cap = kvt_codec_bound(w->len);
		void *scratch = NULL;
		long n;

		c->stage_len = PAGE + pages_of(cap) * PAGE;
		c->stage = kvt_ssd_stage_get(&ssd->stages, c->stage_len, &c->stage_cap);
		if (!c->stage)
			return -ENOMEM;
		if (!raw && kvt_codec_scratch_bytes(w->codec->id, w->len)) {
			scratch = malloc(kvt_codec_scratch_bytes(w->codec->id, w->len));
			if (!scratch)
				return -ENOMEM;
		}
		if (raw) {
			memcpy(c->stage + PAGE, w->buf, w->len);
			n = (long)w->len;
			c->codec = KVT_CODEC_RAW;
		} else {
			n = kvt_codec_encode(w->codec, w->buf, w->len, c->stage + PAGE, cap,
					     scratch, &c->codec);
		}
		free(scratch);
		if (n < 0)
			return (int)n;
		c->stored = (uint64_t)n;
		memset(c->stage + PAGE + n, 0, pages_of((uint64_t)n) * PAGE - (uint64_t)n);
		c->stage_len = PAGE + pages_of((uint64_t)n) * PAGE;
		c->sum = kvt_block_sum(c->stage + PAGE, (size_t)n);
	}
	c->pages = (uint32_t)(1 + pages_of(c->stored));
	if (c->pages > ssd->seg_pages || pages_of(c->stored) > LOC_MAX_PPAGES)
		return -EFBIG;
	return 0;
}

/* Where record i's header is encoded: its stage, the page before its slot,
 * or an arena page. */
static char *header_page(struct sbatch *sb, size_t i)
{
	struct kvt_tier_io *w = &sb->b->io[i];
	struct wrec *c = &sb->w[i];

	if (c->stage)
		return c->stage;
	if (w->room && !w->tomb)
		return (char *)w->buf - PAGE;
	return sb->arena + i * 2 * PAGE;
}

/* Prepare records up to `end` (encode, checksum: CPU time, outside every
 * lock). With writes in flight, the queue is topped up after each record,
 * so the device does not idle while the next records are prepared. */
static void write_prepare_upto(struct sbatch *sb, size_t end)
{
	for (; sb->prepped < end; sb->prepped++) {
		struct kvt_tier_io *w = &sb->b->io[sb->prepped];
		struct wrec *c = &sb->w[sb->prepped];

		w->res = write_prepare(sb->ssd, w, c);
		if (!w->res && !c->stage && (w->tomb || !w->room) && !sb->arena &&
		    !(sb->arena = aligned_alloc(PAGE, sb->b->n * 2 * PAGE)))
			w->res = -ENOMEM;
		if (sb->run)
			kvt_ssd_io_poll(sb->run);
	}
}

/* Give records [from, to) of the chunk pages in the log and pending
 * records, encode their headers, and issue their writes: the chunk's run
 * starts with the first of them, later ones join it. */
static void write_issue(struct sbatch *sb, size_t from, size_t to)
{
	struct kvt_ssd *ssd = sb->ssd;
	struct kvt_tier_io *w = sb->b->io;
	struct wrec *c = sb->w;
	size_t first = sb->n_ops;
	int rc;

	pthread_mutex_lock(&ssd->lock);
	for (size_t i = from; i < to; i++) {
		struct kvt_ssd_hdr h;
		struct kvt_ssd_rec r;

		if (w[i].res)
			continue;
		if (ssd->st.degraded) {
			w[i].res = -EROFS;
			continue;
		}
		w[i].res = kvt_ssd_alloc_pages(ssd, c[i].pages, &c[i].slot, &c[i].page);
		if (w[i].res)
			continue;
		h = (struct kvt_ssd_hdr){
			.seq = w[i].seq ? w[i].seq : kvt_ssd_seq_next(ssd), .ns_id = w[i].ns_id,
			.key = w[i].key, .codec = (uint8_t)c[i].codec,
			.raw_len = w[i].tomb ? 0 : w[i].len, .stored_len = c[i].stored,
			.payload_sum = c[i].sum };
		if (w[i].tomb)
			h.flags = KVT_SSD_F_TOMB;
		else if (w[i].has_parent)
			h.flags = KVT_SSD_F_PARENT;
		if (h.flags & KVT_SSD_F_PARENT)
			h.parent = w[i].parent;
		r = (struct kvt_ssd_rec){ .ns_id = h.ns_id, .key = h.key, .parent = h.parent,
					  .seq = h.seq, .raw_len = h.raw_len,
					  .stored_len = c[i].stored, .sum = c[i].sum,
					  .page = c[i].page, .pages = c[i].pages,
					  .state = KVT_SSD_REC_PENDING, .codec = (uint8_t)c[i].codec,
					  .hflags = (uint8_t)h.flags };
		w[i].res = kvt_ssd_seg_add_rec(&ssd->segs[c[i].slot], &r);
		if (w[i].res)
			continue;
		ssd->segs[c[i].slot].users++;
		ssd->segs[c[i].slot].writers++;
		c[i].placed = true;
		kvt_ssd_hdr_encode(&h, ssd->salt, header_page(sb, i));
	}
	pthread_mutex_unlock(&ssd->lock);

	for (size_t i = from; i < to; i++) {
		uint64_t off = (uint64_t)c[i].page * PAGE;
		size_t n0 = sb->n_ops;

		if (w[i].res)
			continue;
		c[i].op0 = n0;
		if (c[i].stage) {
			sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot, off, c[i].stage,
						     c[i].stage_len);
		} else if (w[i].tomb) {
			sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot, off,
						     header_page(sb, i), PAGE);
		} else if (w[i].room) {
			/* header and block, one write from the slot */
			sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot, off,
						     (char *)w[i].buf - PAGE,
						     PAGE + pages_of(w[i].len) * PAGE);
		} else {
			size_t body = w[i].len & ~(size_t)(PAGE - 1), tail = w[i].len - body;
			char *hp = header_page(sb, i);

			sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot, off, hp, PAGE);
			if (body)
				sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot, off + PAGE,
							     w[i].buf, body);
			if (tail) {
				memcpy(hp + PAGE, (const char *)w[i].buf + body, tail);
				memset(hp + PAGE + tail, 0, PAGE - tail);
				sb->ops[sb->n_ops++] = io_op(KVT_SSD_IO_WRITE, c[i].slot,
							     off + PAGE + body, hp + PAGE, PAGE);
			}
		}
		c[i].n_ops = sb->n_ops - n0;
		for (size_t j = n0; j < sb->n_ops; j++)
			sb->rec_of_op[j] = i;
	}
	if (sb->n_ops == first)
		return;
	if (sb->run_err)
		rc = sb->run_err;
	else if (sb->run)
		rc = kvt_ssd_io_add(sb->run, sb->n_ops - first);
	else /* room for up to three writes and one sync per record */
		rc = sb->run_err = kvt_ssd_io_start(ssd->io, sb->ops, sb->n_ops,
						    4 * sb->chunk_n, &sb->run);
	if (rc)
		for (size_t j = first; j < sb->n_ops; j++)
			sb->ops[j].res = rc;
}

/* Start the current chunk: its records are issued as they are prepared, a
 * group of at least ISSUE_BYTES at a time, so the first writes are in
 * flight while the rest of the chunk is checksummed or encoded. */
#define ISSUE_BYTES (1u << 20)

static void write_chunk_start(struct sbatch *sb)
{
	size_t end = sb->chunk0 + sb->chunk_n, from = sb->chunk0;
	uint64_t bytes = 0;

	sb->n_ops = sb->reaped = 0;
	sb->run = NULL;
	sb->run_err = 0;
	for (size_t i = sb->chunk0; i < end; i++) {
		write_prepare_upto(sb, i + 1);
		bytes += sb->w[i].pages * (uint64_t)PAGE;
		if (bytes >= ISSUE_BYTES || i + 1 == end) {
			write_issue(sb, from, i + 1);
			from = i + 1;
			bytes = 0;
		}
	}
}

/* Reap the chunk's run until every operation added so far is reported,
 * preparing records towards prep_goal meanwhile at the pace operations
 * complete: with n operations outstanding, all but n - queue_depth of them
 * are prepared (at queue depth 1: one ahead, then one per completion; all
 * by the time the window alone is left). Not all at once: on a machine
 * with few cores, the kernel's share of a direct write (its completion, the
 * conversion of preallocated extents) waits for a core, and a thread that
 * checksums a whole chunk in one go holds one for milliseconds while the
 * write in flight at queue depth 1 waits behind it. Nor later: the device
 * would idle while the last ones are prepared. */
static void write_reap_all(struct sbatch *sb)
{
	size_t qd = sb->ssd->opts.queue_depth, k = 0;

	do {
		size_t left, keep;

		sb->reaped += k;
		left = sb->n_ops - sb->reaped;
		keep = left > qd ? left - qd : 0; /* records that may wait */
		if (sb->prep_goal > keep)
			write_prepare_upto(sb, sb->prep_goal - keep);
	} while ((k = kvt_ssd_io_reap(sb->run, sb->done, sb->cap_ops)));
}

/* Wait for the chunk's writes, sync the segments they touched, ack them. */
static void write_chunk_finish(struct sbatch *sb)
{
	struct kvt_ssd *ssd = sb->ssd;
	struct kvt_tier_io *w = sb->b->io;
	struct wrec *c = sb->w;
	size_t end = sb->chunk0 + sb->chunk_n, first_sync = sb->n_ops;

	if (sb->run) {
		write_reap_all(sb);
		/* group commit: one fdatasync per segment touched by the chunk */
		for (size_t i = sb->chunk0; i < end && ssd->opts.sync; i++) {
			bool ok = !w[i].res;
			size_t j;

			for (size_t k = c[i].op0; ok && k < c[i].op0 + c[i].n_ops; k++)
				ok = !sb->ops[k].res;
			if (!ok)
				continue;
			for (j = first_sync; j < sb->n_ops && sb->ops[j].file != c[i].slot; j++)
				;
			if (j == sb->n_ops)
				sb->ops[sb->n_ops++] = (struct kvt_ssd_io_op){ .kind = KVT_SSD_IO_SYNC,
									       .file = c[i].slot };
			c[i].sync_op = j;
		}
		if (sb->n_ops > first_sync) {
			kvt_ssd_io_add(sb->run, sb->n_ops - first_sync);
			write_reap_all(sb);
		}
		kvt_ssd_io_end(sb->run);
		sb->run = NULL;
	}

	pthread_mutex_lock(&ssd->lock);
	for (size_t i = sb->chunk0; i < end; i++) {
		struct seg *s;
		struct kvt_ssd_rec *r;
		int err = 0;
		bool dev = false;

		if (!c[i].placed)
			continue;
		s = &ssd->segs[c[i].slot];
		r = kvt_ssd_seg_find(s, c[i].page);
		for (size_t j = c[i].op0; j < c[i].op0 + c[i].n_ops && !err; j++) {
			err = sb->ops[j].res;
			dev = device_error(err);
			if (sb->ops[j].lat_ns > w[i].lat_ns)
				w[i].lat_ns = sb->ops[j].lat_ns;
		}
		if (!err && ssd->opts.sync) {
			err = sb->ops[c[i].sync_op].res;
			dev = device_error(err);
			if (err)
				ssd->st.sync_errors++;
		}
		if (err) {
			ssd->st.write_errors++;
			r->state = KVT_SSD_REC_DEAD;
			w[i].res = dev ? -EIO : err;
			if (dev)
				kvt_ssd_degrade(ssd, err, "writing a record");
		} else if (w[i].tomb) {
			r->state = KVT_SSD_REC_TOMB;
			r->flags |= KVT_SSD_REC_ONDISK;
			s->tombs++;
			ssd->st.tombstones++;
			ssd->st.tombstones_written++;
			w[i].loc = 0;
		} else {
			r->state = KVT_SSD_REC_LIVE;
			r->flags |= KVT_SSD_REC_ONDISK;
			s->live_pages += r->pages;
			w[i].loc = loc_make(s->gen, c[i].slot, c[i].page);
			ssd->st.blocks++;
			ssd->st.live_raw_bytes += w[i].len;
			ssd->st.writes++;
			ssd->st.write_raw_bytes += w[i].len;
			ssd->st.write_stored_bytes += c[i].stored;
			if (c[i].codec != KVT_CODEC_RAW)
				ssd->st.compressed_writes++;
		}
		s->users--;
		s->writers--;
		kvt_ssd_seg_maybe_release(ssd, c[i].slot);
	}
	pthread_mutex_unlock(&ssd->lock);
	for (size_t i = sb->chunk0; i < end && sb->b->done_cb; i++)
		sb->b->done_cb(sb->b, i);
}

int kvt_ssd_write_submit(struct kvt_ssd *ssd, struct kvt_tier_batch *b)
{
	struct sbatch *sb = kvt_ssd_sbatch_new(ssd, b, 4);

	if (!sb) {
		kvt_ssd_fail_all(b, -ENOMEM);
		return -ENOMEM;
	}
	sb->w = calloc(b->n ? b->n : 1, sizeof(*sb->w));
	if (!sb->w) {
		kvt_ssd_sbatch_free(sb);
		kvt_ssd_fail_all(b, -ENOMEM);
		return -ENOMEM;
	}
	/* a bounded number of write batches at once, so that recovery knows
	 * how many records a crash can have cut (ssd->chunk of each) */
	pthread_mutex_lock(&ssd->lock);
	while (ssd->write_batches >= KVT_SSD_WRITE_BATCHES)
		pthread_cond_wait(&ssd->batch_cv, &ssd->lock);
	ssd->write_batches++;
	pthread_mutex_unlock(&ssd->lock);
	sb->slot = true;
	for (size_t i = 0; i < b->n; i++) {
		b->io[i].lat_ns = 0;
		b->io[i].loc = 0;
		b->io[i].res = 0;
	}
	sb->chunk0 = 0;
	sb->chunk_n = b->n < ssd->chunk ? b->n : ssd->chunk;
	write_chunk_start(sb);
	b->priv = sb;
	return 0;
}

void kvt_ssd_write_wait(struct kvt_ssd *ssd, struct kvt_tier_batch *b)
{
	struct sbatch *sb = b->priv;

	for (;;) {
		size_t next = sb->chunk0 + sb->chunk_n + ssd->chunk;

		/* while this chunk's writes are in flight: the summaries of
		 * segments sealed, the next segment's file, then the next
		 * chunk's records */
		kvt_ssd_summaries_due(ssd);
		kvt_ssd_spare_due(ssd);
		sb->prep_goal = next < b->n ? next : b->n;
		write_chunk_finish(sb);
		sb->chunk0 += sb->chunk_n;
		if (sb->chunk0 >= b->n)
			break;
		sb->chunk_n = b->n - sb->chunk0 < ssd->chunk ? b->n - sb->chunk0 : ssd->chunk;
		write_chunk_start(sb);
	}
	b->priv = NULL;
	kvt_ssd_sbatch_free(sb);
	kvt_ssd_summaries_due(ssd);
}

/* ---- one-call batches ------------------------------------------------------ */

int kvt_ssd_write(struct kvt_ssd *ssd, struct kvt_ssd_write *w, size_t n)
{
	struct kvt_tier_io *io;
	struct kvt_tier_batch b = { .write = true, .n = n };
	int ok = 0;

	if (!ssd || (n && !w))
		return -EINVAL;
	if (!n)
		return 0;
	io = calloc(n, sizeof(*io));
	if (!io) {
		for (size_t i = 0; i < n; i++)
			w[i].res = -ENOMEM;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		io[i] = (struct kvt_tier_io){ .ns_id = w[i].ns_id, .key = w[i].key,
					      .parent = w[i].parent, .has_parent = w[i].has_parent,
					      .tomb = w[i].tomb, .room = w[i].room, .seq = w[i].seq,
					      .codec = w[i].codec, .buf = (void *)w[i].data,
					      .len = w[i].len };
	b.io = io;
	if (!kvt_ssd_submit(ssd, &b))
		kvt_ssd_wait(ssd, &b);
	for (size_t i = 0; i < n; i++) {
		w[i].res = io[i].res;
		w[i].loc = io[i].loc;
		w[i].lat_ns = io[i].lat_ns;
		ok += !io[i].res;
	}
	free(io);
	return ok;
}
