/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of the SSD tier, shared by its files; its API is ssd.h.
 *   ssd.c        segments: files, record placement, reclaim, tombstones,
 *                summaries; holds, frees, stats, probing a degraded tier;
 *                a batch's memory and kvt_ssd_submit / kvt_ssd_wait
 *   ssd_write.c  the write batch path: records prepared, issued in chunks,
 *                synced once per segment (group commit), completed;
 *                kvt_ssd_write
 *   ssd_read.c   the read batch path: submitted at once, each record
 *                checked (checksum, decoding; with the helper thread) as
 *                its I/O completes; kvt_ssd_read
 *   ssd_open.c   options, open (the meta file, what recovery found applied:
 *                files moved aside, segments taken in) and close
 * Beside them: ssd_recover.c (recovery, at open), ssd_format.c (what is on
 * disk), ssd_io.c (the I/O engine), ssd_stage.c (staging buffers),
 * ssd_helper.c (the thread that shares reads' checks) and ssd_tier.c (the
 * tier ops table). Not for the store or the tests: they use ssd.h. */
#ifndef KVT_TIERS_SSD_INTERNAL_H
#define KVT_TIERS_SSD_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tiers/ssd.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd_io.h"
#include "tiers/ssd_recover.h"
#include "tiers/ssd_stage.h"

struct kvt_ssd_helper;

#define PAGE KVT_SSD_PAGE

/* loc = [device:4] | generation:20 | slot:16 | header page:24. Slots are
 * reused (the lowest free one), so a record's loc carries its segment's
 * generation, a per-slot counter bumped each time the slot gets a segment: a
 * loc kept past its segment's release never names the record that later
 * sits at the same slot and page (it would take about 2^20 reuses of the
 * slot in between). The generation is never 0, so neither is a loc, and
 * never all ones, so a loc with a device number in its top KVT_SSD_LOC_BITS
 * bits (ssd_stripe.c) is never KVT_LOC_NONE. The tier reads no bit above
 * them. */
#define LOC_GEN_SHIFT 40
#define LOC_SLOT_SHIFT 24
#define LOC_MAX_GEN ((1u << (KVT_SSD_LOC_BITS - LOC_GEN_SHIFT)) - 2)
#define LOC_MAX_SLOTS (1u << 16)
#define LOC_MAX_PAGE ((1u << 24) - 1)
#define LOC_MAX_PPAGES LOC_MAX_PAGE

static inline uint64_t loc_make(uint32_t gen, uint32_t slot, uint32_t page)
{
	return (uint64_t)gen << LOC_GEN_SHIFT | (uint64_t)slot << LOC_SLOT_SHIFT | page;
}

static inline uint32_t loc_gen(uint64_t loc)
{
	return (uint32_t)(loc >> LOC_GEN_SHIFT) & ((1u << (KVT_SSD_LOC_BITS - LOC_GEN_SHIFT)) - 1);
}
static inline uint32_t loc_slot(uint64_t loc) { return (uint32_t)(loc >> LOC_SLOT_SHIFT) & 0xffff; }
static inline uint32_t loc_page(uint64_t loc) { return (uint32_t)loc & LOC_MAX_PAGE; }

static inline uint64_t pages_of(uint64_t bytes) { return (bytes + PAGE - 1) / PAGE; }

struct seg {
	bool used;
	bool sealed;     /* no more appends */
	bool summary;    /* its summary file is on disk and whole */
	int fd;
	uint64_t id;     /* file number */
	uint64_t nonce;  /* of its superblock */
	uint32_t n_pages, next_page;
	uint64_t live_pages;
	uint32_t users;  /* records of batches with I/O on this file */
	uint32_t writers; /* of which writes: its summary waits for them */
	uint32_t gen;    /* of the slot: bumped each time it gets a segment */
	uint32_t held;   /* live records with a hold: reclaim passes it by */
	uint32_t tombs;  /* tombstones on disk in it */
	struct kvt_ssd_rec *recs; /* sorted by page */
	size_t n_recs, cap_recs;
};

/* A segment sealed since the last summaries were written. */
struct sealed_seg {
	uint32_t slot, gen;
};

struct kvt_ssd {
	struct kvt_ssd_opts opts;
	char *dir;
	int dir_fd, meta_fd;
	uint64_t salt;
	struct kvt_ssd_io *io;
	uint32_t seg_pages;

	uint32_t chunk;             /* records per write chunk */

	pthread_mutex_t lock;       /* guards everything below */
	uint32_t write_batches;     /* in flight, at most KVT_SSD_WRITE_BATCHES */
	pthread_cond_t batch_cv;
	char *sb_page;              /* a page for superblocks and probes */
	struct seg *segs;
	uint32_t n_slots, max_segs, segs_used;
	int active;
	int spare;                  /* a segment made ahead, empty: the next active
	                             * one; or -1 (see kvt_ssd_spare_due) */
	int spare_err;              /* making a spare failed: none until a segment
	                             * is made when needed again */
	bool creating;              /* a segment file is being made, lock let go */
	pthread_cond_t create_cv;   /* ... and is made */
	uint64_t next_seq, next_seg_id; /* next_seq: see kvt_ssd_seq_next */
	bool abandoned;             /* kvt_ssd_abandon: nothing is deleted, nothing
	                             * written, until close */
	struct kvt_ssd_rec_info *dropped;
	size_t n_dropped, cap_dropped;
	struct sealed_seg *sealed;  /* their summaries are due */
	size_t n_sealed, cap_sealed;
	struct kvt_ssd_stats st;
	struct kvt_ssd_stages stages; /* its own lock */
	struct kvt_ssd_helper *helper; /* shares the checks of reads; NULL: none */
};

/* ---- batches ------------------------------------------------------------ */

/* A record of a write batch. */
struct wrec {
	char *stage;      /* staged: header + payload, else NULL */
	size_t stage_len, stage_cap;
	uint64_t stored;
	enum kvt_codec_id codec;
	uint64_t sum;
	uint32_t pages;   /* header included */
	uint32_t slot, page;
	size_t op0, n_ops;
	size_t sync_op;
	bool placed;      /* has pages, a pending record, a user count */
};

/* A record of a read batch. */
struct rrec {
	char *stage;      /* staged: the stored payload, else NULL */
	size_t stage_cap;
	uint64_t stored;  /* from the tier's memory of the record */
	uint64_t sum;
	uint8_t codec;
	bool pinned;      /* its segment's user count is taken */
	char *tail;       /* the tail page when the buffer has no room */
	size_t op0, n_ops;
};

/* A batch between submit and the end of wait (kvt_tier_batch.priv). Write
 * batches go in chunks of at most ssd->chunk records: pages, writes, one
 * fdatasync per segment touched (group commit), acks; reads all at once,
 * each record verified and handed over as its I/O completes. */
struct sbatch {
	struct kvt_ssd *ssd;
	struct kvt_tier_batch *b;
	struct kvt_ssd_io_op *ops;
	size_t n_ops, cap_ops;
	size_t *rec_of_op;        /* the record of each op */
	uint32_t *left;           /* per record: ops not completed yet */
	size_t *done;             /* reap buffer */
	struct kvt_ssd_io_run *run;
	char *arena;              /* 2 pages per record (header, tail) when a
	                           * record's buffer has no room for them */
	void *scratch[2];         /* read: codec scratch, one per thread that
	                           * verifies (the caller's, the helper's) */
	struct wrec *w;
	struct rrec *r;
	size_t *checks;           /* read: records whose I/O completed, to check */
	size_t chunk0, chunk_n;   /* write: the chunk in flight */
	size_t prepped;           /* write: records [0, prepped) are prepared */
	size_t prep_goal;         /* write: ... and [prepped, prep_goal) are to be
	                           * while the chunk's writes are in flight */
	size_t reaped;            /* write: operations of the chunk's run reported */
	int run_err;              /* write: the chunk's run could not start */
	bool slot;                /* holds one of the tier's write batch slots */
};

static inline struct kvt_ssd_io_op io_op(enum kvt_ssd_io_kind kind, uint32_t file, uint64_t off,
				  void *buf, size_t len)
{
	return (struct kvt_ssd_io_op){ .kind = kind, .file = file, .off = off, .buf = buf, .len = len };
}

static inline bool aligned(const void *p)
{
	return ((uintptr_t)p & (PAGE - 1)) == 0;
}

/* Whether an operation's result says the device failed (it degrades the
 * tier), rather than a lack of memory or an interrupted request (the batch
 * fails, the tier stays as it was). Errors of the engine itself, not of an
 * operation, never degrade. */
static inline bool device_error(int err)
{
	return err && err != -ENOMEM && err != -EAGAIN && err != -EINTR && err != -ECANCELED;
}

/* ---- ssd.c ---------------------------------------------------------------- */

/* The next record's sequence number: the tier's own counter, or the one
 * opts.seq_shared names (tiers that share it order their records as one).
 * Lock held. */
static inline uint64_t kvt_ssd_seq_next(struct kvt_ssd *ssd)
{
	if (ssd->opts.seq_shared)
		return __atomic_fetch_add(ssd->opts.seq_shared, 1, __ATOMIC_RELAXED);
	return ssd->next_seq++;
}

/* Segments and records; the tier's lock held. */
void kvt_ssd_degrade(struct kvt_ssd *ssd, int err, const char *what);
void kvt_ssd_seg_drop(struct kvt_ssd *ssd, uint32_t slot);
void kvt_ssd_seg_maybe_release(struct kvt_ssd *ssd, uint32_t slot);
struct kvt_ssd_rec *kvt_ssd_seg_find(struct seg *s, uint32_t page);
int kvt_ssd_seg_add_rec(struct seg *s, const struct kvt_ssd_rec *r);
int kvt_ssd_alloc_pages(struct kvt_ssd *ssd, uint32_t pages, uint32_t *slot, uint32_t *page);
/* Files; called without the lock (they take it where they need it). The
 * last two are work a write batch does while its writes are in flight. */
int kvt_ssd_sync_dir(struct kvt_ssd *ssd);
int kvt_ssd_summary_write(struct kvt_ssd *ssd, uint32_t slot, uint32_t gen);
void kvt_ssd_spare_due(struct kvt_ssd *ssd);
void kvt_ssd_summaries_due(struct kvt_ssd *ssd);

/* A batch's memory, ops_per_rec operations per record; freeing it gives
 * back its stages and its write batch slot. */
struct sbatch *kvt_ssd_sbatch_new(struct kvt_ssd *ssd, struct kvt_tier_batch *b,
				  size_t ops_per_rec);
void kvt_ssd_sbatch_free(struct sbatch *sb);
void kvt_ssd_fail_all(struct kvt_tier_batch *b, int err);

/* ---- ssd_write.c ---------------------------------------------------------- */

/* The two halves of kvt_ssd_submit / kvt_ssd_wait for a write batch. */
int kvt_ssd_write_submit(struct kvt_ssd *ssd, struct kvt_tier_batch *b);
void kvt_ssd_write_wait(struct kvt_ssd *ssd, struct kvt_tier_batch *b);

/* ---- ssd_read.c ----------------------------------------------------------- */

/* ... and for a read batch. */
int kvt_ssd_read_submit(struct kvt_ssd *ssd, struct kvt_tier_batch *b);
void kvt_ssd_read_wait(struct kvt_ssd *ssd, struct kvt_tier_batch *b);

#endif
