/* SPDX-License-Identifier: Apache-2.0 */
/* The two kinds of tier, each behind a const ops table. The store core calls
 * tiers only through these tables and runs over an ordered list of them: one
 * memory tier first (DRAM now, HBM later), then storage tiers (SSD, and the
 * cluster's peer tier). It names none of them.
 *
 * A memory tier hands out slots the caller fills or reads in place, all in
 * one region to register once with CUDA, io_uring or a NIC. Every slot has
 * `headroom` bytes in front of it (a storage tier writes its record header
 * there, so header and block leave in one device write) and is padded to a
 * 4 KiB multiple after the block (so a read lands whole pages in place).
 *
 * A storage tier writes blocks from, and reads them into, memory-tier slots,
 * in batches, asynchronously: submit() puts a batch in flight and returns;
 * wait() drives it to the end, calling the batch's done_cb for each record
 * as it completes, on the waiting thread, so the caller can use a block
 * while later ones are still in flight. Where a block lies in the tier is a
 * `loc` the tier hands out at write; UINT64_MAX is never one.
 *
 * What a storage tier may do is said by its caps:
 *  - KVT_TIER_CAP_DEMOTE: it takes demotions (the store writes cold blocks
 *    to it, and reads them back by loc). It then also gets removals
 *    (tombstone records), and holds: a record the store holds (pinned, or
 *    being read) is never dropped by the tier to make room.
 *  - KVT_TIER_CAP_KEYED: it can answer for blocks the store's index does
 *    not have (a peer tier: blocks other nodes hold). The store asks
 *    lookup() after a local miss, and reads such blocks by key (by_key);
 *    each fetched block joins the index in the memory tier.
 *  - KVT_TIER_CAP_READ_IOV: it reads a block straight into the caller's
 *    pieces of memory (io->iov), no memory-tier slot in between.
 * Ops a tier has no use for may be NULL where marked optional.
 *
 * Threading: every op may be called from any thread, never with the store's
 * lock held, except free, hold, seq_reserve, take_dropped, degraded, stats
 * and counters, which the store calls under its lock: they must not block
 * on I/O. devices is called under the store's lock too. */
#ifndef KVT_TIERS_TIER_H
#define KVT_TIERS_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvtier/store.h"
#include "tiers/codec.h"

/* No location: what a record lost by its tier has. */
#define KVT_LOC_NONE UINT64_MAX

/* Bytes in front of every memory-tier slot that a storage tier may use
 * while it writes the slot's block (a 4 KiB page: the SSD record header). */
#define KVT_TIER_HEADROOM 4096u

/* ---- memory tiers --------------------------------------------------------- */

struct kvt_mem_tier;

struct kvt_mem_tier_ops {
	const char *name;
	/* Reserve a slot for `bytes`: 0 and *loc, -ENOSPC when full, -EINVAL
	 * for a size no slot holds, -ENOBUFS when no new slot size fits. */
	int (*alloc)(struct kvt_mem_tier *t, uint64_t bytes, uint64_t *loc);
	void (*free)(struct kvt_mem_tier *t, uint64_t loc);
	/* The block's bytes at loc (headroom before, padding after). */
	void *(*slot_ptr)(struct kvt_mem_tier *t, uint64_t loc);
	/* The one region holding every slot. */
	void *(*region)(struct kvt_mem_tier *t, uint64_t *len);
	/* The largest block a slot holds. */
	uint64_t (*max_block)(const struct kvt_mem_tier *t);
	/* Bytes no new block can use (what watermarks compare to capacity). */
	uint64_t (*occupied)(const struct kvt_mem_tier *t);
	/* Capacity into out (the store merges its counters in). */
	void (*stats)(struct kvt_mem_tier *t, struct kvt_tier_stats *out);
	/* Optional: the tier's named counters into out[0..max), see
	 * kvt_tier_counters_copy. Returns how many were written. */
	size_t (*counters)(struct kvt_mem_tier *t, struct kvt_counter *out, size_t max);
	void (*close)(struct kvt_mem_tier *t);
};

struct kvt_mem_tier {
	const struct kvt_mem_tier_ops *ops;
	enum kvt_tier kind;    /* what lookups report for its blocks */
	uint64_t capacity;     /* bytes of slots */
	uint32_t headroom;     /* bytes before each slot (KVT_TIER_HEADROOM or 0) */
};

/* ---- storage tiers -------------------------------------------------------- */

enum {
	KVT_TIER_CAP_DEMOTE = 1u << 0,
	KVT_TIER_CAP_KEYED = 1u << 1,
	KVT_TIER_CAP_READ_IOV = 1u << 2, /* reads into io->iov (see below) */
};

/* One record of a batch: a block to write, a removal to log, or a block to
 * read back. The caller fills the inputs; the tier fills the outputs. */
struct kvt_tier_io {
	uint64_t ns_id;           /* the namespace's 64-bit name on storage */
	const struct kvt_key *ns_salt; /* read: the namespace's whole name (a
	                           * remote tier asks other nodes by it) */
	struct kvt_key key;
	struct kvt_key parent;    /* write: the block before it in its prefix */
	bool has_parent;
	bool tomb;                /* write: log key's removal (no data, no loc) */
	bool by_key;              /* read: by key rather than loc (KEYED tiers) */
	bool room;                /* buf is a memory-tier slot: KVT_TIER_HEADROOM
	                           * bytes before it and padding to 4 KiB after
	                           * are the tier's to use while the io runs */
	uint64_t seq;             /* write: 0, or from seq_reserve */
	const struct kvt_codec_cfg *codec; /* write: NULL = raw */
	void *buf;                /* the block (read: where it lands) */
	size_t len;               /* its bytes */
	/* read, KVT_TIER_CAP_READ_IOV tiers only: the block lands in these
	 * pieces instead of buf (another's memory: an engine's KV pages), len
	 * bytes in all; a tier located by loc (the SSD tier, O_DIRECT) is
	 * given pieces 4 KiB aligned and a multiple of 4 KiB; a record the
	 * tier cannot read so (compressed, say) gets -EOPNOTSUPP */
	const struct iovec *iov;
	unsigned iovcnt;
	uint64_t loc;             /* write: out; read: in (unless by_key) */
	int res;                  /* out: 0 or -errno, see below */
	uint64_t lat_ns;          /* out: device time of the record */
};

/* Results: 0; -ENOENT (read: no such record, or loc no longer holds it);
 * -EBADMSG (read: the bytes failed their checksum: a miss, never data; buf
 * may hold garbage); -EFAULT (read into iov: the pieces could not be written
 * (EFAULT, EINVAL from the kernel), or the bytes failed their checksum there:
 * another's memory, which its owner may write or punch meanwhile, so the
 * record is not blamed and nothing is counted against the tier; the caller
 * reads it again into memory of its own to know); -ENOSPC (write: full, nothing the tier may drop: the
 * store evicts and retries); -EFBIG (larger than the tier takes); -EIO (the
 * device failed: the tier degrades); -EROFS (write to a degraded tier);
 * -ETIMEDOUT, -ECONNRESET (a remote tier); -EINVAL, -ENOMEM. */

struct kvt_tier_batch {
	bool write;
	struct kvt_tier_io *io;
	size_t n;
	/* Called once per record as it completes (res set), in completion
	 * order, on the thread in wait(), with no lock of the tier held. May
	 * be NULL. */
	void (*done_cb)(struct kvt_tier_batch *b, size_t i);
	void *arg;
	void *priv;               /* the tier's, from submit to the end of wait */
};

/* A record a tier holds that the store's index may not (yet) have: found at
 * open (take_recovered), or dropped by the tier to make room (take_dropped). */
struct kvt_tier_rec {
	uint64_t ns_id;
	struct kvt_key key;
	struct kvt_key parent;
	bool has_parent;
	uint64_t len;
	uint64_t loc;
};

struct kvt_storage_tier;

struct kvt_storage_tier_ops {
	const char *name;
	/* Put every record of b in flight (as deep as the tier's queue goes).
	 * Returns 0 (then wait() must follow), or -errno with nothing in
	 * flight (every res set to it). */
	int (*submit)(struct kvt_storage_tier *t, struct kvt_tier_batch *b);
	/* Drive b until every record is done, calling done_cb for each. */
	void (*wait)(struct kvt_storage_tier *t, struct kvt_tier_batch *b);
	/* Let go of the record at loc (a stale loc is a no-op). */
	void (*free)(struct kvt_storage_tier *t, uint64_t loc);
	/* Optional (DEMOTE): hold (+1) or release (-1) the record at loc;
	 * a held record is never dropped to make room. Holds nest. Returns 0
	 * or -ENOENT (stale loc). */
	int (*hold)(struct kvt_storage_tier *t, uint64_t loc, int delta);
	/* Optional: records the tier dropped to make room since the last call
	 * (their locs are gone), up to max. */
	size_t (*take_dropped)(struct kvt_storage_tier *t, struct kvt_tier_rec *out, size_t max);
	/* Optional: records the tier held when it opened, up to max; each is
	 * handed out once. */
	size_t (*take_recovered)(struct kvt_storage_tier *t, struct kvt_tier_rec *out, size_t max);
	/* Optional (DEMOTE): a sequence number ordering a record written later
	 * (a removal's tombstone) before anything written after this call. */
	uint64_t (*seq_reserve)(struct kvt_storage_tier *t);
	/* Whether a failure stopped writes (reads may still work). */
	bool (*degraded)(struct kvt_storage_tier *t);
	/* Optional: try whether a degraded tier works again: 0 when it does. */
	int (*probe)(struct kvt_storage_tier *t);
	/* Register the memory tier's region, so blocks move without copies. */
	int (*register_region)(struct kvt_storage_tier *t, void *base, uint64_t len);
	/* Fill st->tier[t->kind] (capacity, degraded, errors, ...) and any part
	 * of st that is the tier's own (st->ssd). Those structs no longer grow:
	 * a new counter goes in the tier's table (counters). */
	void (*stats)(struct kvt_storage_tier *t, struct kvt_store_stats *st);
	/* Optional: the tier's named counters into out[0..max), see
	 * kvt_tier_counters_copy. Returns how many were written. */
	size_t (*counters)(struct kvt_storage_tier *t, struct kvt_counter *out, size_t max);
	/* Optional: the tier's devices into out[0..max), where it spans
	 * several (struct kvt_tier_device). Returns how many. */
	size_t (*devices)(struct kvt_storage_tier *t, struct kvt_tier_device *out, size_t max);
	/* Optional (KEYED): how many leading keys of keys[0..n) the tier can
	 * serve, within a bounded time of its own (never blocking the caller
	 * on a peer or a directory that does not answer: 0 then). */
	int (*lookup)(struct kvt_storage_tier *t, uint64_t ns_id, const struct kvt_key *keys,
		      size_t n);
	void (*close)(struct kvt_storage_tier *t);
};

struct kvt_storage_tier {
	const struct kvt_storage_tier_ops *ops;
	enum kvt_tier kind;       /* what lookups report for its blocks */
	unsigned caps;            /* KVT_TIER_CAP_* */
};

/* Run a batch to the end: submit, then wait. Returns the number of records
 * whose res is 0. */
int kvt_tier_run(struct kvt_storage_tier *t, struct kvt_tier_batch *b);

/* A tier's named counters (its `counters` op) are a const table it fills
 * with the values of the moment and hands over with this: c[0..n) into
 * out[0..max). Returns how many were copied. Each name is the tier's to
 * choose; STATS shows it as tiers.<tier>.counters.<name>, /metrics as
 * kvtier_<tier>_<name> (with _total for a counter), `kvtier stats` in the
 * tier's lines: adding a counter is a row in the tier's table and nothing
 * else (docs/tiers-interface.md). */
size_t kvt_tier_counters_copy(struct kvt_counter *out, size_t max, const struct kvt_counter *c,
			      size_t n);

/* kvt_tier_counters_copy of a whole array. */
#define KVT_TIER_COUNTERS(out, max, table) \
	kvt_tier_counters_copy(out, max, table, sizeof(table) / sizeof((table)[0]))

#endif /* KVT_TIERS_TIER_H */
