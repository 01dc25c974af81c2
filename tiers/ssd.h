/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier: an append-only log of fixed-size segment files in one data
 * directory, written and read with O_DIRECT through the I/O engine (ssd_io.h).
 *
 * The tier is addressed by location: a write returns each record's `loc`, and
 * reads, frees take it back. Who owns which key is the caller's business (the
 * store's index); the tier only keeps, per segment, which records are live so
 * it can reclaim space. On open it rebuilds that from the segments (recovery,
 * ssd_recover.h) and reports every live record through a callback, so the
 * caller can rebuild its index.
 *
 * Nothing it cannot account for is deleted: a segment file it cannot read,
 * or one of another directory, is moved to quarantine/ and reported; a file
 * named like a segment that is not one is left in place and reported.
 *
 * Space is reclaimed by releasing whole segments: a segment whose records are
 * all freed is deleted at once, and when the tier is at capacity the segment
 * with the smallest live fraction is deleted if that fraction is at most
 * reclaim_live_fraction, its remaining live records reported as dropped
 * (kvt_ssd_take_dropped). A segment holding a record the caller holds
 * (kvt_ssd_hold: pinned, or being read) is never released that way; the next
 * emptiest is. Otherwise a write gets -ENOSPC: the caller evicts.
 *
 * Removal is logged: a tombstone (kvt_ssd_write with tomb set) hides every
 * older record of its key from recovery. A segment holding tombstones is
 * released only once no older segment remains (then nothing older can exist
 * for them to hide), so a tombstone never goes before what it hides.
 *
 * A reopened tier appends to its last segment after the last valid record.
 * Each segment gets a summary file when it is sealed (and the open one at
 * close), so opening reads summaries rather than every byte.
 *
 * A loc names one record of one segment: once that record is freed or its
 * segment released, the loc is stale for good (a later record at the same
 * place gets a different loc), so frees and reads of it find nothing.
 *
 * Durability: a write's result is 0 only once its record is on the device
 * (O_DIRECT, and fdatasync of the segment unless opts.sync is off).
 *
 * Batches are asynchronous (kvt_ssd_submit, then kvt_ssd_wait, which hands
 * each record over as it completes) and independent: each runs on an I/O
 * ring of its own, so reads never wait behind a write batch or its
 * fdatasync, and concurrent readers proceed together. A block in a slot with
 * room (a memory tier's slot: a page before it, padding after) is written
 * with its header in one device write, and read back in one.
 *
 * Thread-safe; frees, holds, stats and dropped lists never wait for I/O: a
 * new segment file is made (preallocated, synced, its directory synced)
 * with the tier's lock let go, one at a time, while reads and writes into
 * other segments go on. A write batch makes the next one ahead (a spare),
 * once the active segment is half full, while its writes are in flight,
 * so that the device's queue does not wait for it; close deletes a spare
 * never used. */
#ifndef KVT_TIERS_SSD_H
#define KVT_TIERS_SSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"
#include "tiers/codec.h"
#include "tiers/ssd_io.h"
#include "tiers/tier.h"

struct kvt_ssd;

/* Write batches in flight at once. Each writes chunks of at most
 * max(16, 2 x queue_depth) records (one fdatasync per segment a chunk
 * touches), so this many chunks is what a crash can cut short (recovery
 * counts damage among the last so many records as torn). */
#define KVT_SSD_WRITE_BATCHES 4

struct kvt_ssd_opts {
	size_t size;                   /* sizeof(struct kvt_ssd_opts), set by _init */
	const char *dir;               /* data directory, created if absent (required) */
	uint64_t capacity_bytes;       /* disk space the tier may use (required) */
	uint64_t segment_bytes;        /* segment file size; 0 = 256 MiB; 4 KiB multiple */
	uint32_t queue_depth;          /* I/O operations in flight per batch; 0 = 32 */
	uint64_t max_inflight_bytes;   /* bytes in flight; 0 = 256 MiB */
	uint32_t threads;              /* fallback pool size; 0 = min(queue_depth, 8) */
	bool force_threads;            /* use the pread/pwrite pool, not io_uring */
	bool sync;                     /* fdatasync segments before acking (default true) */
	double reclaim_live_fraction;  /* release a segment at most this live (0.25) */
	uint64_t *seq_shared;          /* NULL, or a counter (from 1) several tiers
	                                * share, so that their records are ordered as
	                                * one (the devices of a stripe): records take
	                                * their sequence numbers from it, and open
	                                * raises it past every number found */
};

/* The bits of a loc the tier uses (the low ones): a layer over several tiers
 * may keep its own number in the bits above (tiers/ssd_stripe.h). */
#define KVT_SSD_LOC_BITS 60

void kvt_ssd_opts_init(struct kvt_ssd_opts *opts, size_t size_bytes);

/* A record as recovery found it, or as reported dropped. */
struct kvt_ssd_rec_info {
	uint64_t ns_id;
	struct kvt_key key;
	struct kvt_key parent;
	bool has_parent;
	enum kvt_codec_id codec;
	uint64_t raw_len;
	uint64_t stored_len;
	uint64_t seq;
	uint64_t loc;
};

/* Called by kvt_ssd_open for each valid record, oldest first (only the newest
 * record of an (ns_id, key) is reported). Return 0 to keep the record, non-zero
 * to have the tier free it (e.g. an unknown namespace). */
typedef int (*kvt_ssd_recover_cb)(const struct kvt_ssd_rec_info *rec, void *arg);

/* Open (creating or recovering) the tier in opts->dir. recover_cb may be NULL
 * (records are then kept, unreported). Returns 0 and *out, or -EINVAL (bad
 * opts, a file system that refuses O_DIRECT, or a meta file that is not a
 * kvtier SSD tier's), -EBUSY (another process has the directory open),
 * -EBADMSG (no segment carries the meta file's salt: nothing is touched),
 * -ENOMEM, or the -errno of the directory. Torn and corrupt records are
 * skipped, counted in stats and never reported; what recovery found is
 * logged. */
int kvt_ssd_open(const struct kvt_ssd_opts *opts, kvt_ssd_recover_cb recover_cb, void *arg,
		 struct kvt_ssd **out);

/* Close the tier (files stay on disk). NULL is accepted. */
void kvt_ssd_close(struct kvt_ssd *ssd);

/* Register memory (e.g. the DRAM tier's region) as fixed I/O buffers, so that
 * writes from it and reads into it skip page pinning. The memory must outlive
 * the tier. Returns 0 (also when the kernel refuses; logged) or -errno. */
int kvt_ssd_register_region(struct kvt_ssd *ssd, void *ptr, size_t len);

/* Put a batch of kvt_tier_io records in flight: writes (b->write: blocks,
 * or removals with tomb set) or reads by loc; then kvt_ssd_wait must
 * follow. A write's record is acknowledged (done_cb, res 0, loc set) once
 * durable; a read's once its bytes are verified against the checksum its
 * header carried. Results are those of kvt_ssd_write and kvt_ssd_read.
 * Returns 0, or -EINVAL / -ENOMEM with every res set and nothing in flight.
 * A write waits while KVT_SSD_WRITE_BATCHES others are in flight. */
int kvt_ssd_submit(struct kvt_ssd *ssd, struct kvt_tier_batch *b);

/* Drive a submitted batch to its end, calling b->done_cb for each record as
 * it completes, on this thread. */
void kvt_ssd_wait(struct kvt_ssd *ssd, struct kvt_tier_batch *b);

/* One block to write. The caller fills the inputs; kvt_ssd_write fills loc,
 * res, lat_ns. data needs no alignment (a 4 KiB aligned block whose codec
 * leaves it raw is written straight from data, else through a staging copy);
 * with room, the page before data and the padding after it to a 4 KiB
 * multiple are the tier's while it runs, and header and block go in one
 * write. */
struct kvt_ssd_write {
	uint64_t ns_id;
	struct kvt_key key;
	struct kvt_key parent;
	bool has_parent;
	const void *data;
	size_t len;
	bool room;                         /* see above */
	const struct kvt_codec_cfg *codec; /* NULL = raw */
	bool tomb;                         /* a tombstone of key: no data, no loc */
	uint64_t seq;                      /* 0, or one from kvt_ssd_seq_reserve */
	uint64_t loc;                      /* out */
	int res;                           /* out, see kvt_ssd_write */
	uint64_t lat_ns;                   /* out: device time of the record's I/O */
};

/* Write w[0..n) as one batch (submit and wait). Each w[i].res is 0 (durable, w[i].loc set),
 * -ENOSPC (the tier is at capacity and no segment can be released: free
 * something and retry), -EFBIG (larger than a segment), -EIO (the device
 * failed: the tier is now degraded), -EROFS (the tier was already degraded),
 * -EINVAL or -ENOMEM. Returns the number of records written, or -EINVAL. */
int kvt_ssd_write(struct kvt_ssd *ssd, struct kvt_ssd_write *w, size_t n);

/* One block to read back: the record at loc must be (ns_id, key) of len
 * bytes. buf needs no alignment; with room (buf padded to a 4 KiB multiple)
 * the block lands in one read. */
struct kvt_ssd_read {
	uint64_t loc;
	uint64_t ns_id;
	struct kvt_key key;
	void *buf;
	size_t len;
	bool room;
	int res;         /* out, see kvt_ssd_read */
	uint64_t lat_ns; /* out */
};

/* Read r[0..n) as one batch (submit and wait). Each r[i].res is 0 (buf holds the block,
 * checksum verified against the one its header carried), -EBADMSG (checksum
 * mismatch or undecodable payload: counted, and buf may hold garbage: a miss,
 * never data), -ENOENT (loc no longer holds that record of that key and
 * length), -EIO (device error: the tier is now degraded), -EINVAL, -ENOMEM.
 * Returns the number of records read, or -EINVAL. */
int kvt_ssd_read(struct kvt_ssd *ssd, struct kvt_ssd_read *r, size_t n);

/* A sequence number for a record to be written later (a tombstone of a
 * removal): it orders the record before anything written after this call. */
uint64_t kvt_ssd_seq_reserve(struct kvt_ssd *ssd);

/* Mark the record at loc dead; its segment is deleted once all are. A stale
 * loc (its record already freed, or dropped with its segment) is a no-op. */
void kvt_ssd_free(struct kvt_ssd *ssd, uint64_t loc);

/* Hold (delta +1) or release (-1) the live record at loc: while held, reclaim
 * never releases its segment (kvt_ssd_free still frees it, and its holds go
 * with it). Holds nest. Returns 0, -ENOENT (stale loc, record not live, or
 * releasing a record not held), -EINVAL. */
int kvt_ssd_hold(struct kvt_ssd *ssd, uint64_t loc, int delta);

/* Move up to max records that segment release dropped (their locs are gone)
 * into out. Returns how many; the caller removes them from its index. */
size_t kvt_ssd_take_dropped(struct kvt_ssd *ssd, struct kvt_ssd_rec_info *out, size_t max);

struct kvt_ssd_stats {
	uint64_t capacity_bytes;
	uint64_t used_bytes;          /* disk bytes of live records, headers included */
	uint64_t live_raw_bytes;      /* block bytes of live records */
	uint64_t blocks;              /* live records */
	uint64_t segments;            /* segment files in use */
	uint64_t segments_spare;      /* ... and made ahead, empty (0 or 1) */
	uint64_t segments_created, segments_released;
	uint64_t reclaim_dropped;     /* live records dropped by segment release */
	uint64_t writes, write_raw_bytes, write_stored_bytes, compressed_writes;
	uint64_t reads, read_bytes;
	uint64_t read_sets_shared;    /* sets of reads completed together offered
	                               * to the tier's helper thread */
	uint64_t reads_helped;        /* ... and the reads it checked */
	uint64_t checksum_failures;   /* reads whose record did not verify */
	uint64_t stale_reads;         /* reads of a loc that no longer holds the key */
	uint64_t write_errors, read_errors, sync_errors;
	uint64_t tombstones;          /* tombstones in segments on disk */
	uint64_t tombstones_written;
	/* what the last open found (see kvt_ssd_recovery) */
	uint64_t recovered;           /* live records reported */
	uint64_t recovery_torn;       /* records a crash cut short, skipped */
	uint64_t recovery_corrupt;    /* records that failed their checks, skipped */
	uint64_t recovery_superseded; /* older copies of a key */
	uint64_t recovery_removed;    /* records hidden by a tombstone */
	uint64_t recovery_scanned;    /* segments read whole */
	uint64_t recovery_summaries;  /* segments read from their summary */
	uint64_t recovery_summaries_rejected; /* summaries that failed a check */
	uint64_t quarantined;         /* segment files moved to quarantine/ */
	uint64_t foreign;             /* files named like segments, left in place */
	uint64_t open_ns;             /* how long the open took */
	bool degraded;                /* a device error stopped writes */
	int degraded_error;           /* the -errno that degraded the tier */
	uint64_t probes;              /* kvt_ssd_probe calls on a degraded tier */
	uint64_t resumed;             /* of which brought it back */
	uint64_t stages_made;         /* staging buffers allocated (tiers/ssd_stage.h) */
	uint64_t stages_reused;       /* ... and handed out again */
	struct kvt_ssd_io_stats io;
};

void kvt_ssd_stats(struct kvt_ssd *ssd, struct kvt_ssd_stats *out);

/* True once a device error has stopped writes. */
bool kvt_ssd_degraded(struct kvt_ssd *ssd);

/* Try whether a degraded tier can be written again: a page written and
 * synced, and a new segment made. On success the tier takes writes again
 * (logged, counted in resumed) in that new segment. Returns 0 (resumed, or
 * not degraded), or the -errno that keeps it degraded. */
int kvt_ssd_probe(struct kvt_ssd *ssd);

/* Give up on the device: every live record is moved to the dropped list
 * (kvt_ssd_take_dropped: the caller forgets them, they become misses), the
 * tier is degraded with err and stays so (probes fail with it) until it is
 * closed, and nothing on the device is deleted (its segments may be read
 * again by a later open, once the device works). Reads and frees of the old
 * locs find nothing. Logged once, with what. Returns how many records it
 * dropped (0 the second time). */
size_t kvt_ssd_abandon(struct kvt_ssd *ssd, int err, const char *what);

/* The tier as a storage tier of tiers/tier.h (kind KVT_TIER_SSD, caps
 * DEMOTE), for a store's list of tiers: kvt_ssd_open of opts, the records
 * recovery found kept for take_recovered, the ops mapped onto the calls
 * above. Returns 0 and *out (closed by its ops->close), or the errors of
 * kvt_ssd_open. */
int kvt_ssd_tier_open(const struct kvt_ssd_opts *opts, struct kvt_storage_tier **out);

/* The SSD tier under t, a tier kvt_ssd_tier_open made. */
struct kvt_ssd *kvt_ssd_tier_ssd(struct kvt_storage_tier *t);

#ifdef KVT_TESTING
/* Tests: inject faults into the I/O engine (see kvt_ssd_io_inject). */
void kvt_ssd_inject(struct kvt_ssd *ssd, enum kvt_ssd_io_kind kind, uint32_t skip,
		    uint32_t count, int err);

/* Tests: cb(arg) is called as a tier is about to make a new segment file
 * (with no lock of the tier held), in every tier of the process. NULL
 * removes it. Not for production use. */
typedef void (*kvt_ssd_create_hook_cb)(void *arg);
void kvt_ssd_set_create_hook(kvt_ssd_create_hook_cb cb, void *arg);
#endif

#endif /* KVT_TIERS_SSD_H */
