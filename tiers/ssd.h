/* The SSD tier: an append-only log of fixed-size segment files in one data
 * directory, written and read with O_DIRECT through the I/O engine (ssd_io.h).
 *
 * The tier is addressed by location: a write returns each record's `loc`, and
 * reads, frees take it back. Who owns which key is the caller's business (the
 * store's index); the tier only keeps, per segment, which records are live so
 * it can reclaim space. On open it rebuilds that from the segments and reports
 * every valid record through a callback, so the caller can rebuild its index.
 *
 * Space is reclaimed by releasing whole segments: a segment whose records are
 * all freed is deleted at once, and when the tier is at capacity the segment
 * with the smallest live fraction is deleted if that fraction is at most
 * reclaim_live_fraction, its remaining live records reported as dropped
 * (kvt_ssd_take_dropped). A segment holding a record the caller holds
 * (kvt_ssd_hold: pinned, or being read) is never released that way; the next
 * emptiest is. Otherwise a write gets -ENOSPC: the caller evicts.
 *
 * A loc names one record of one segment: once that record is freed or its
 * segment released, the loc is stale for good (a later record at the same
 * place gets a different loc), so frees and reads of it find nothing.
 *
 * Durability: a write's result is 0 only once its record is on the device
 * (O_DIRECT, and fdatasync of the segment unless opts.sync is off).
 *
 * Thread-safe. Batches are executed one at a time; frees, stats and dropped
 * lists do not wait for I/O. */
#ifndef KVT_TIERS_SSD_H
#define KVT_TIERS_SSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"
#include "tiers/codec.h"
#include "tiers/ssd_io.h"

struct kvt_ssd;

struct kvt_ssd_opts {
	size_t size;                   /* sizeof(struct kvt_ssd_opts), set by _init */
	const char *dir;               /* data directory, created if absent (required) */
	uint64_t capacity_bytes;       /* disk space the tier may use (required) */
	uint64_t segment_bytes;        /* segment file size; 0 = 256 MiB; 4 KiB multiple */
	uint32_t queue_depth;          /* records in flight (2 I/O ops each); 0 = 32 */
	uint64_t max_inflight_bytes;   /* bytes in flight; 0 = 256 MiB */
	uint32_t threads;              /* fallback pool size; 0 = min(queue_depth, 8) */
	bool force_threads;            /* use the pread/pwrite pool, not io_uring */
	bool sync;                     /* fdatasync segments before acking (default true) */
	double reclaim_live_fraction;  /* release a segment at most this live (0.25) */
};

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
 * opts, or a file system that refuses O_DIRECT), -ENOMEM, or the -errno of
 * the directory or its files. Torn and corrupt records are skipped, counted
 * in stats (recovery_skipped) and never reported. */
int kvt_ssd_open(const struct kvt_ssd_opts *opts, kvt_ssd_recover_cb recover_cb, void *arg,
		 struct kvt_ssd **out);

/* Close the tier (files stay on disk). NULL is accepted. */
void kvt_ssd_close(struct kvt_ssd *ssd);

/* Register memory (e.g. the DRAM tier's region) as fixed I/O buffers, so that
 * writes from it and reads into it skip page pinning. The memory must outlive
 * the tier. Returns 0 (also when the kernel refuses; logged) or -errno. */
int kvt_ssd_register_region(struct kvt_ssd *ssd, void *ptr, size_t len);

/* One block to write. The caller fills the inputs; kvt_ssd_write fills loc,
 * res, lat_ns. data needs no alignment (a 4 KiB aligned block whose codec
 * leaves it raw is written straight from data, else through a staging copy). */
struct kvt_ssd_write {
	uint64_t ns_id;
	struct kvt_key key;
	struct kvt_key parent;
	bool has_parent;
	const void *data;
	size_t len;
	const struct kvt_codec_cfg *codec; /* NULL = raw */
	uint64_t loc;                      /* out */
	int res;                           /* out, see kvt_ssd_write */
	uint64_t lat_ns;                   /* out: device time of the record's I/O */
};

/* Write w[0..n) as one batch. Each w[i].res is 0 (durable, w[i].loc set),
 * -ENOSPC (the tier is at capacity and no segment can be released: free
 * something and retry), -EFBIG (larger than a segment), -EIO (the device
 * failed: the tier is now degraded), -EROFS (the tier was already degraded),
 * -EINVAL or -ENOMEM. Returns the number of records written, or -EINVAL. */
int kvt_ssd_write(struct kvt_ssd *ssd, struct kvt_ssd_write *w, size_t n);

/* One block to read back: the record at loc must be (ns_id, key) of len
 * bytes. buf needs no alignment. */
struct kvt_ssd_read {
	uint64_t loc;
	uint64_t ns_id;
	struct kvt_key key;
	void *buf;
	size_t len;
	int res;         /* out, see kvt_ssd_read */
	uint64_t lat_ns; /* out */
};

/* Read r[0..n) as one batch. Each r[i].res is 0 (buf holds the block,
 * checksum verified against the one its header carried), -EBADMSG (checksum
 * mismatch or undecodable payload: counted, and buf may hold garbage: a miss,
 * never data), -ENOENT (loc no longer holds that record of that key and
 * length), -EIO (device error: the tier is now degraded), -EINVAL, -ENOMEM.
 * Returns the number of records read, or -EINVAL. */
int kvt_ssd_read(struct kvt_ssd *ssd, struct kvt_ssd_read *r, size_t n);

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
	uint64_t segments_created, segments_released;
	uint64_t reclaim_dropped;     /* live records dropped by segment release */
	uint64_t writes, write_raw_bytes, write_stored_bytes, compressed_writes;
	uint64_t reads, read_bytes;
	uint64_t checksum_failures;   /* reads whose record did not verify */
	uint64_t stale_reads;         /* reads of a loc that no longer holds the key */
	uint64_t write_errors, read_errors, sync_errors;
	uint64_t recovered;           /* records reported by the last open */
	uint64_t recovery_skipped;    /* torn or corrupt records skipped at open */
	uint64_t recovery_superseded; /* older copies of a key found at open */
	bool degraded;                /* a device error stopped writes */
	int degraded_error;           /* the -errno that degraded the tier */
	struct kvt_ssd_io_stats io;
};

void kvt_ssd_stats(struct kvt_ssd *ssd, struct kvt_ssd_stats *out);

/* True once a device error has stopped writes. */
bool kvt_ssd_degraded(struct kvt_ssd *ssd);

#ifdef KVT_TESTING
/* Tests: inject faults into the I/O engine (see kvt_ssd_io_inject). */
void kvt_ssd_inject(struct kvt_ssd *ssd, enum kvt_ssd_io_kind kind, uint32_t skip,
		    uint32_t count, int err);
#endif

#endif /* KVT_TIERS_SSD_H */
