/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier — the block store: namespaces, prefix keys, put/get, zero-copy slots,
 * lookup, pin, remove and stats.
 *
 * A store owns its tiers (pinned host DRAM, an SSD segment log when a
 * directory is given, and any tier added with kvt_store_add_tier, such as
 * the cluster's peer tier). Blocks live in namespaces; a namespace fixes
 * the block size from the model's KV layout. Every function is thread-safe: the index is
 * guarded by the store, while copies of block bytes run outside its lock.
 *
 * Errors are negative errnos; kvt_strerror() names them. Those common to every
 * call taking a namespace: -EINVAL for a NULL argument or a buffer of the wrong
 * size. */
#ifndef KVTIER_STORE_H
#define KVTIER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvtier/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_store;
struct kvt_ns;

/* ---- opening a store --------------------------------------------------- */

/* kvt_store_opts.ssd_codec "auto": shuf16-pack4 for bf16 namespaces (their
 * exponent bytes as 4-bit codes, 1.33x fewer bytes), raw for the others. */
#define KVT_SSD_CODEC_AUTO "auto"

/* One directory of an SSD tier over several drives (kvt_store_opts.ssd_dirs). */
struct kvt_ssd_dir {
	const char *path;         /* an existing directory, O_DIRECT-capable */
	uint64_t bytes;           /* capacity the tier may use there (0: left out) */
};

/* The most directories (drives) one SSD tier spans. */
#define KVT_SSD_MAX_DIRS 16

struct kvt_store_opts {
	size_t size;              /* sizeof(struct kvt_store_opts), set by _init */
	uint64_t dram_bytes;      /* DRAM tier capacity (required, > 0) */
	uint64_t dram_slab_bytes; /* slab size of the slot allocator; 0 = 64 MiB or
	                           * the largest block, whichever is larger */
	bool dram_huge_pages;     /* try MAP_HUGETLB first, else transparent huge
	                           * pages (default true); false: 4 KiB pages only */
	bool checksum_on_put;     /* XXH3 at put too, verified at get (default off) */
	const char *policy;       /* eviction policy: "tail-lru" (default), "lru",
	                           * "lfu", "cost", "ghost-lru", "ghost-ends",
	                           * "class-lru", "class-ends" (these two learn
	                           * from the reuse class of kvt_put_class and
	                           * kvt_reserve_class) */
	const char *ssd_dir;      /* SSD tier directory (O_DIRECT-capable file
	                           * system); NULL = no SSD tier */
	uint64_t ssd_bytes;       /* SSD tier capacity (required with ssd_dir) */
	uint64_t ssd_segment_bytes; /* segment file size; 0 = an eighth of
	                             * ssd_bytes, from 4 to 256 MiB */
	uint32_t ssd_queue_depth; /* SSD records in flight; 0 = 32 */
	bool ssd_force_threads;   /* skip io_uring, use the pread/pwrite pool */
	double dram_high_watermark; /* demote to SSD above this occupancy (0.90) */
	double dram_low_watermark;  /* ... until below this one (0.75) */
	const char *ssd_admission; /* which blocks leaving DRAM are written to the
	                            * SSD tier, the others being dropped: "always"
	                            * (NULL, the default: every block), "reused"
	                            * (blocks used at least twice), "useful"
	                            * (blocks of a class the SSD tier reads back);
	                            * no effect without an SSD tier */
	const char *ssd_codec;    /* how every namespace's blocks are encoded on
	                           * the SSD tier until kvt_ns_set_ssd_codec says
	                           * otherwise: a name kvt_ns_set_ssd_codec takes,
	                           * or KVT_SSD_CODEC_AUTO; NULL = "raw" */
	double ssd_codec_min_ratio; /* with ssd_codec: a block that shrinks less
	                             * than this is stored raw; 0 = 1.1 */
	bool dram_warm;           /* the DRAM tier lives in a memfd that outlives
	                           * the process (kvt_store_dram_fd), with a header
	                           * per committed block, so a successor handed the
	                           * fd finds the blocks again (default false) */
	int dram_fd;              /* with dram_warm (read only then): the DRAM
	                           * tier's memfd of a store before this one, to
	                           * take over (-1, set by _init: start empty). The store owns it from
	                           * kvt_store_open on, also when that fails. A
	                           * region of another version or geometry (DRAM
	                           * size, slab size, SSD tier or not) is refused,
	                           * logged, and the tier starts empty; a block
	                           * whose header or bytes do not verify is dropped,
	                           * never served. Its blocks rejoin the index at
	                           * open (their namespaces attached again from the
	                           * region's table), each checked against its
	                           * checksum before it is first used */
	const struct kvt_ssd_dir *ssd_dirs; /* the SSD tier over several
	                           * directories, one per drive (ssd_dir is then
	                           * NULL): n_ssd_dirs of them, at most
	                           * KVT_SSD_MAX_DIRS; each must exist (a missing
	                           * or unusable one is left out, logged and
	                           * reported by kvt_store_tier_devices, the
	                           * others serve); blocks are spread over them
	                           * (docs/ssd-tier.md) */
	size_t n_ssd_dirs;
};

/* Fill opts with the defaults as far as size_bytes (sizeof(*opts) for a
 * caller of this version) reaches; see "Versioned structs" in types.h. */
void kvt_store_opts_init(struct kvt_store_opts *opts, size_t size_bytes);

/* Open a store. Returns 0 and *out, or -EINVAL (bad opts, an unknown policy,
 * ssd_admission or ssd_codec among them), -ENOMEM (the DRAM region cannot be mapped),
 * -EBUSY (another store has ssd_dir open), -EBADMSG (ssd_dir's segments
 * are not of its meta file: nothing is touched), or the I/O error of the SSD
 * directory. Blocks found in ssd_dir join the index as their namespace
 * attaches. */
int kvt_store_open(const struct kvt_store_opts *opts, struct kvt_store **out);

/* The DRAM tier's region: one mapping holding every DRAM slot, for the
 * caller to register once with a GPU (pinned memory), io_uring (fixed
 * buffers) or a NIC (memory region), so blocks move without bounce copies.
 * Valid until kvt_store_close. Returns 0, or -EINVAL. */
int kvt_store_dram_region(struct kvt_store *store, void **base, uint64_t *len);

/* How far into that region the DRAM tier has ever handed out slots (it
 * hands them out from the start of the region): *end bytes from base. For
 * faulting the region in ahead of use instead of whole. Returns 0, or
 * -EINVAL. */
int kvt_store_dram_reach(struct kvt_store *store, uint64_t *end);

/* The memfd holding the DRAM tier of a store opened with dram_warm: the
 * store's (dup it to keep it past kvt_store_close, to hand to a successor
 * or to systemd's fd store). Returns the fd, or -EINVAL (NULL, or no
 * dram_warm). */
int kvt_store_dram_fd(struct kvt_store *store);

/* What kvt_store_write_down did. */
struct kvt_write_down {
	uint64_t written;        /* blocks written to the storage tier (they stay
	                          * in DRAM too, as clean copies) */
	uint64_t written_bytes;
	uint64_t refused;        /* blocks the admission rule kept off it */
	uint64_t left;           /* blocks not written: no room, a failing tier,
	                          * or the time ran out */
	uint64_t ms;             /* time taken */
};

/* Write every block only the DRAM tier holds down to the first storage
 * tier that takes demotions, under its admission rule, within timeout_ms:
 * what a clean stop without a successor does, so a stop loses nothing the
 * SSD tier has room for. Blocks stay in DRAM (and are served) meanwhile.
 * Returns 0 (out filled, may be NULL), -EINVAL, or -ENODEV (no such
 * tier). */
int kvt_store_write_down(struct kvt_store *store, unsigned timeout_ms, struct kvt_write_down *out);

/* A storage tier made by one of kvtier's tier constructors (the cluster's
 * peer tier: kvt_peer_tier_open in the kvtier-cluster library); its ops
 * table is internal (tiers/tier.h). */
struct kvt_storage_tier;

/* Add storage tier `tier` to an open store, after the tiers it has: blocks
 * it takes or answers for are found, read and counted through the store's
 * calls from now on, as those of the SSD tier are. A tier that answers for
 * blocks the store's index lacks (the peer tier) carries kvt_lookup past a
 * local miss and is read by kvt_acquire_many and the calls built on it.
 * The store owns the tier from this call on, also when it fails, and
 * closes it in kvt_store_close. Safe while the store is in use. Returns 0,
 * -EINVAL (NULL), -EEXIST (the store has a tier of that kind), -ENOSPC (it
 * has as many storage tiers as it takes), -ENOMEM. */
int kvt_store_add_tier(struct kvt_store *store, struct kvt_storage_tier *tier);

/* Walk the blocks the store holds in its own tiers (DRAM and SSD; not what
 * only a peer tier reaches): up to max keys into keys[] with their tier in
 * tiers[], from *cursor on (0 starts a walk), *cursor advanced. Each call
 * takes the store's lock for a bounded piece of the index, so it may return
 * 0 before the end; the walk is over when *cursor is KVT_SCAN_END. Blocks
 * stored or removed during a walk may be seen or not; each block present
 * throughout is seen once, in the tier it was in when its piece was read.
 * Returns the number written, or -EINVAL. */
#define KVT_SCAN_END UINT64_MAX
int kvt_store_scan(struct kvt_store *store, uint64_t *cursor, struct kvt_key *keys,
		   uint8_t *tiers, size_t max);

/* Stop what works behind the store's back and close its storage tiers (the
 * demoter stopped, removals logged, an SSD directory free for another
 * store), leaving the DRAM tier mapped: for a hand-over, the successor may
 * open the directory and the region while this process still unmaps the
 * region. Only kvt_store_close may follow. NULL is accepted. */
void kvt_store_quiesce(struct kvt_store *store);

/* Close a store and free everything it owns, namespaces included. Slots still
 * reserved or acquired become invalid. NULL is accepted. */
void kvt_store_close(struct kvt_store *store);

/* ---- namespaces -------------------------------------------------------- */

/* A namespace is described by struct kvt_ns_desc (kvtier/types.h). */

/* Bytes of one block of desc: (MLA ? 1 : 2) x layers x kv_heads x head_dim x
 * dtype bytes x block_tokens. Returns 0 for an invalid descriptor. */
uint64_t kvt_ns_desc_block_bytes(const struct kvt_ns_desc *desc);

/* Create the namespace of desc, or attach to it if one with the same
 * descriptor exists (it is then shared). Returns 0 and *out (owned by the
 * store), -EINVAL for an invalid descriptor, -EFBIG for a block larger than
 * the DRAM tier, -ENOSPC when the store holds 65,535 namespaces. */
int kvt_ns_attach(struct kvt_store *store, const struct kvt_ns_desc *desc,
		  struct kvt_ns **out);

/* Detach a namespace that holds nothing (no block in any tier, no
 * reservation, no reader) and free it, so a store serving many short-lived
 * namespaces does not run out of them: ns is invalid afterwards, and its
 * descriptor, attached again, makes a new namespace. kvt_ns_attach hands the
 * same ns to every attacher, so the caller must know it is the last user.
 * Returns 0, -EBUSY (it holds blocks: nothing changes), -EINVAL, -ENOMEM. */
int kvt_ns_detach(struct kvt_ns *ns);

uint64_t kvt_ns_block_bytes(const struct kvt_ns *ns);

/* How the namespace's blocks are compressed on the SSD tier: codec "raw"
 * (the default), "lz4", "shuf16-lz4" (the bytes of 16-bit elements
 * grouped by significance, for bf16/fp16, then LZ4), "blosc-bitshuf16-lz4"
 * (c-blosc: the bits of 16-bit elements grouped, then LZ4),
 * "blosc-shuf16-zstd" (c-blosc: byte planes, then zstd) or "shuf16-zstd"
 * (the low byte plane stored, the high one Huffman-coded by zstd; the best
 * ratio and speed of these on bf16 K/V). A block whose ratio
 * raw/stored is below min_ratio (0 = 1.1) is stored raw. Applies to blocks
 * written to SSD from now on; reads decode whatever a record holds. Returns
 * 0, or -EINVAL (unknown codec, no SSD tier). */
int kvt_ns_set_ssd_codec(struct kvt_ns *ns, const char *codec, double min_ratio);

/* Stable 128-bit identity of the namespace (a digest of its descriptor):
 * the salt of its prefix keys and its name on disk. */
const struct kvt_key *kvt_ns_salt(const struct kvt_ns *ns);

/* ---- prefix keys ------------------------------------------------------- */

/* Compute the keys of the full blocks of a token sequence:
 *   key[i] = SHA-256(salt || key[i-1] || tokens of block i)[0..16)
 * where key[-1] is `parent` (omitted when NULL: a sequence from its start) and
 * tokens are hashed as little-endian uint32. A trailing partial block gets no
 * key. Returns the number of keys written (<= max_keys), or -EINVAL. */
int kvt_prefix_keys(const void *salt, size_t salt_len, const struct kvt_key *parent,
		    const uint32_t *tokens, size_t n_tokens, uint32_t block_tokens,
		    struct kvt_key *keys, size_t max_keys);

/* kvt_prefix_keys with the namespace's salt and block_tokens. */
int kvt_ns_prefix_keys(const struct kvt_ns *ns, const uint32_t *tokens, size_t n_tokens,
		       struct kvt_key *keys, size_t max_keys);

/* ---- blocks ------------------------------------------------------------ */

/* Copy a block in. parent is the key of the block before it in its prefix,
 * or NULL for the first block. len must equal the namespace's block size.
 * Returns 0, -EEXIST if the key is already stored (the block is left as is,
 * and counts as used), -EBUSY if the key was removed but a reader still holds
 * its old bytes (retry once it is released), -ENOSPC if nothing can be
 * evicted to make room. */
int kvt_put(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
	    const void *data, size_t len);

/* kvt_put of a block with a reuse-class hint (kvtier/types.h: 0 = none,
 * up to KVT_REUSE_CLASS_MAX), which the eviction policy may learn from
 * ("class-lru"); a block already stored keeps the class it was first
 * stored with. kvt_put is this with class 0. Returns as kvt_put, and
 * -EINVAL for a class over KVT_REUSE_CLASS_MAX. */
int kvt_put_class(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
		  const void *data, size_t len, unsigned reuse_class);

/* Copy a block out into buf (len = block size). A block on SSD is read back
 * (and may be promoted). Returns 0, -ENOENT if absent, -EIO if its stored
 * checksum does not match (the block is then dropped and counted), and when
 * an SSD block must be promoted: -ENOSPC if no DRAM slot can be freed (all
 * pinned or being read), -ENOMEM. */
int kvt_get(struct kvt_ns *ns, const struct kvt_key *key, void *buf, size_t len);

/* A DRAM slot lent to the caller: for filling in place (reserve), or reading in
 * place (acquire). `data` is valid until commit/abort or release. */
struct kvt_slot {
	void *data;
	uint64_t len;
	/* The store's record of the loan (which block, and for a reservation its
	 * parent): opaque. The caller neither reads nor writes it, and hands the
	 * slot back as the store filled it. */
	uint64_t priv[4];
};

/* Reserve a DRAM slot for a new block, to fill in place (a device copy or an
 * SSD read lands there), then kvt_commit() or kvt_abort() it. The block is
 * invisible until committed. Errors as kvt_put; -EEXIST also when another
 * reservation of the key is open. */
int kvt_reserve(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
		struct kvt_slot *slot);

/* kvt_reserve of a block with a reuse-class hint, as kvt_put_class: the
 * block is committed with it. Returns as kvt_reserve, and -EINVAL for a
 * class over KVT_REUSE_CLASS_MAX. */
int kvt_reserve_class(struct kvt_ns *ns, const struct kvt_key *key,
		      const struct kvt_key *parent, unsigned reuse_class, struct kvt_slot *slot);

/* Publish a reserved block. Returns 0 or -EINVAL for a slot not reserved. */
int kvt_commit(struct kvt_ns *ns, struct kvt_slot *slot);

/* Whether the store keeps a checksum of each block of ns (a warm DRAM
 * tier, or checksum_on_put): then kvt_commit hashes the slot, unless the
 * caller gives the sum with kvt_commit_summed. */
bool kvt_ns_sums_blocks(const struct kvt_ns *ns);

/* kvt_commit of a slot whose bytes' XXH3-64 the caller computed as it
 * filled them (kvt_sum_copy), sparing a second pass over the block. A
 * wrong sum makes the block fail its verification (it is dropped, never
 * served). Returns as kvt_commit. */
int kvt_commit_summed(struct kvt_ns *ns, struct kvt_slot *slot, uint64_t xxh3);

/* The XXH3-64 of a lent slot's block (from kvt_acquire and the like) as
 * the store keeps it: computed when the block was stored, where the store
 * sums blocks (kvt_ns_sums_blocks), and checked before a block found at a
 * restart is lent. A sender can pass it on instead of reading the block
 * once more to hash it, and the receiver then checks the bytes against the
 * sum they had when they were stored. Returns 0 and *xxh3, -ENOENT (the
 * store keeps no sum of it: hash the bytes), -EINVAL. */
int kvt_slot_sum(struct kvt_ns *ns, const struct kvt_slot *slot, uint64_t *xxh3);

/* Drop a reservation; its slot is freed. */
void kvt_abort(struct kvt_ns *ns, struct kvt_slot *slot);

/* Lend a stored block's DRAM slot for reading in place (promoting it from SSD
 * first if need be). While acquired it is neither evicted nor moved. Returns
 * 0 or the errors of kvt_get. */
int kvt_acquire(struct kvt_ns *ns, const struct kvt_key *key, struct kvt_slot *slot);

/* kvt_acquire of a block this store holds itself: a tier that answers for
 * blocks the index lacks (the peer tier) is not asked after a miss. A
 * server of other nodes reads with it, so that a request is never passed
 * on from node to node. Returns as kvt_acquire (-ENOENT for a block only
 * other nodes hold). */
int kvt_acquire_local(struct kvt_ns *ns, const struct kvt_key *key, struct kvt_slot *slot);

/* Return an acquired slot. */
void kvt_release(struct kvt_ns *ns, struct kvt_slot *slot);

/* Called by kvt_acquire_many once per key as its block is lent (res 0:
 * slots[k] holds it) or has failed (res < 0), in the order blocks come in,
 * on the calling thread, with no lock of the store held (it may release the
 * slot at once). reading: blocks of the call still being read up from a
 * storage tier (or waited for while another reader brings them up, or
 * still waiting for a DRAM slot) when this one is reported; 0 means whatever is still unreported comes at
 * once, so a caller can use a block while reads run and leave the last
 * ones to handle together. */
typedef void (*kvt_acquire_cb)(void *arg, size_t k, int res, size_t reading);

/* Acquire the blocks of keys[0..n) at once, each as kvt_acquire would:
 * those in DRAM are lent at once; every block on SSD is read in one batch
 * (all of them in flight together, up to the tier's queue depth, each
 * verified as it completes), never behind the demoter's writes, and lent as
 * it lands, while the others are still being read. When DRAM slots for some
 * of them have to wait for the demoter to make room, those that have slots
 * are read (and lent, as they land) first, in a batch of their own, while
 * it does. A key's result goes to
 * res[k] (0, or an error of kvt_acquire: -ENOENT, -EIO, -ENOSPC when DRAM
 * has no slot for it, -ENOMEM) and to cb (may be NULL). Keys need not form
 * a prefix: a miss does not stop the others. Returns the number of blocks
 * acquired, or -EINVAL (NULL arrays with n > 0), -ENOMEM (nothing done). */
int kvt_acquire_many(struct kvt_ns *ns, const struct kvt_key *keys, size_t n,
		     struct kvt_slot *slots, int *res, kvt_acquire_cb cb, void *arg);

/* kvt_read_into: where each block goes and what the caller hears. */
struct kvt_read_into {
	const struct iovec *const *dst; /* dst[k]: pieces block k lands in, in
	                                 * order (read from SSD only where each
	                                 * is 4 KiB aligned and long) */
	const unsigned *dst_cnt;        /* dst_cnt[k]: pieces of dst[k] */
	int *res;                       /* out: res[k] */
	/* Each key looked at, before any read goes out: found is the number
	 * of leading keys the index holds, or other nodes hold after those
	 * (the cluster's peer tier). May be NULL. */
	void (*planned_cb)(void *arg, size_t found);
	kvt_acquire_cb landed_cb;       /* each result as it comes; may be NULL */
	void *arg;
};

/* Read the blocks of keys[0..n) that lie on a storage tier able to read
 * into another's memory (the SSD tier, a block stored raw) straight into
 * ri->dst[k], with no DRAM slot in between: nothing waits for DRAM room,
 * and the block stays where it is (no promotion). Each block is held while
 * it is read (a removal meanwhile takes effect after) and verified against
 * its checksum as it lands. The keys the index lacks after the leading
 * ones it holds are read so from other nodes, where the cluster's peer
 * tier reads over TCP: those the directory says others hold, up to the
 * first it does not, verified the same way and not kept here. A block
 * read so before is found but not read here: the caller's acquire keeps
 * it this time (a block loaded twice is likely to be loaded again).
 * res[k]: 0 (dst[k] holds the block), -EIO (its checksum failed: dropped,
 * and dst[k] holds garbage), -EFAULT (dst[k] could not be written, or the
 * block failed its checksum there, which the memory's owner may have
 * caused: writing it meanwhile, or naming the same pages for two keys;
 * nothing was dropped, and the caller acquires it, which verifies it in a
 * DRAM slot), or -EAGAIN: not read here (in DRAM, moving
 * between tiers, read so before, not readable so, a holder that failed,
 * or after the found keys, so no memory after a miss is written): the
 * caller acquires those (kvt_acquire_many). Returns the number of blocks
 * read, or -EINVAL, -ENOMEM (nothing read). */
int kvt_read_into(struct kvt_ns *ns, const struct kvt_key *keys, size_t n,
		  const struct kvt_read_into *ri);

/* Copy the blocks of keys[0..n) out into bufs[0..n) (each len = block
 * size), read as kvt_acquire_many reads them, each slot let go as soon as
 * its block is copied. res[k] gets 0 or the errors of kvt_get. Returns the
 * number of blocks copied, or -EINVAL, -ENOMEM. */
int kvt_get_many(struct kvt_ns *ns, const struct kvt_key *keys, size_t n, void *const *bufs,
		 size_t len, int *res);

/* Find the longest stored prefix of keys[0..n): the count of leading keys that
 * are stored. When tiers is not NULL, tiers[i] receives the tier of key i for
 * every i < n (KVT_TIER_NONE from the first miss on). Counts as a use of the
 * matched blocks for the eviction policy. Returns the count or -EINVAL. */
int kvt_lookup(struct kvt_ns *ns, const struct kvt_key *keys, size_t n, uint8_t *tiers);

/* Pin blocks: a pinned block is neither evicted nor moved between tiers. Pins
 * nest. Returns the number of keys pinned (absent keys are skipped). */
int kvt_pin(struct kvt_ns *ns, const struct kvt_key *keys, size_t n);

/* Undo kvt_pin. Returns the number of keys unpinned. */
int kvt_unpin(struct kvt_ns *ns, const struct kvt_key *keys, size_t n);

/* Remove a block. Its stored children stay, as orphans no prefix reaches.
 * Returns 0 or -ENOENT. A block being read is freed when its reader releases.
 * With an SSD tier the removal is logged there (a tombstone, written by the
 * demoter within moments, and at close), so the block does not come back
 * when the store reopens. */
int kvt_remove(struct kvt_ns *ns, const struct kvt_key *key);

/* ---- stats ------------------------------------------------------------- */

/* The fixed structs below (struct kvt_tier_stats, struct kvt_ssd_health and
 * the ssd_* fields of struct kvt_store_stats) are kept for callers built
 * against them and no longer grow: a tier's own counters, new ones
 * included, are its table of named counters (kvt_store_tier_counters),
 * which STATS, /metrics and `kvtier stats` walk (docs/tiers-interface.md). */

enum kvt_counter_kind {
	KVT_COUNTER_COUNTER = 0, /* only grows (a Prometheus counter) */
	KVT_COUNTER_GAUGE = 1,   /* goes up and down */
};

/* One named counter of a tier. The strings are static: they live as long
 * as the program (a tier's table is code). */
struct kvt_counter {
	const char *name;  /* [a-z0-9_], unique within its tier, no "_total"
	                    * (a counter's metric gets it) */
	const char *help;  /* one sentence, for /metrics' HELP */
	const char *unit;  /* "bytes", "blocks", "records", "segments", ... or "" */
	enum kvt_counter_kind kind;
	uint64_t value;
};

/* The most counters one tier reports. */
#define KVT_TIER_COUNTERS_MAX 64

struct kvt_tier_stats {
	uint64_t capacity_bytes;
	uint64_t used_bytes;   /* bytes of the blocks stored; SSD: the disk bytes
	                        * of their records (a 4 KiB header page each, the
	                        * payload, compressed or not, in whole 4 KiB pages) */
	uint64_t blocks;
	uint64_t hits;         /* lookups and gets served from this tier */
	uint64_t bytes_in;     /* written into this tier */
	uint64_t bytes_out;    /* read out of this tier */
	uint64_t evictions;    /* blocks that left the tier for lack of room
	                        * (DRAM: demoted or dropped; SSD: dropped) */
	uint64_t errors;       /* I/O errors and checksum mismatches */
	bool present;          /* the tier is configured */
	bool degraded;         /* failing: no longer written to */
	bool io_fallback;      /* SSD: a pread/pwrite thread pool does the I/O
	                        * (io_uring refused or disabled) */
};

/* The SSD tier's health, and what it found when the store opened. */
struct kvt_ssd_health {
	uint64_t recovered;    /* blocks found on SSD at open */
	uint64_t torn;         /* records a crash cut short, skipped at open */
	uint64_t corrupt;      /* records that failed their checks at open, skipped */
	uint64_t superseded;   /* older copies of blocks found at open */
	uint64_t removed;      /* blocks found removed (by a tombstone) at open */
	uint64_t quarantined;  /* segment files moved to quarantine/ at open */
	uint64_t foreign;      /* files named like segments, left in place at open */
	uint64_t scanned;      /* segments read whole at open (no valid summary) */
	uint64_t open_ms;      /* how long opening the tier took */
	uint64_t tombstones;   /* removals logged in the tier, on disk now */
	uint64_t probes;       /* write probes of a degraded tier */
	uint64_t resumed;      /* times a degraded tier came back */
};

/* The DRAM tier across a restart (kvt_store_opts.dram_warm). */
struct kvt_warm_stats {
	bool on;               /* the DRAM tier is a region that outlives the process */
	bool adopted;          /* this store took over a region handed in */
	bool refused;          /* a region was handed in and refused (another
	                        * version or geometry): the tier started empty */
	uint64_t generation;   /* restarts the region has lived through, +1 */
	uint64_t blocks;       /* blocks found in the region at open, indexed */
	uint64_t bytes;        /* and their bytes */
	uint64_t verified;     /* of those, checked and found whole (at first use) */
	uint64_t dropped_torn;      /* headers a kill left mid-commit */
	uint64_t dropped_header;    /* headers that failed their own checks */
	uint64_t dropped_namespace; /* blocks of a namespace the region's table
	                        * does not hold (or holds wrongly) */
	uint64_t dropped_checksum;  /* blocks whose bytes failed their checksum
	                        * when first used (never served) */
	uint64_t rebuild_us;   /* time to index the region at open */
	struct kvt_write_down write_down; /* the last kvt_store_write_down */
};

struct kvt_store_stats {
	size_t size;           /* sizeof(struct kvt_store_stats), set by the caller */
	struct kvt_tier_stats tier[KVT_TIER_COUNT];
	uint64_t namespaces;
	uint64_t blocks;
	uint64_t puts, gets, get_misses, removes;
	uint64_t lookups, lookup_keys, lookup_hit_keys;
	uint64_t checksum_failures;
	uint64_t index_bytes;  /* memory of the block index */
	/* Blocks lost for lack of room are tier[SSD].evictions plus
	 * dram_dropped plus ssd_admission_refused; tier[DRAM].evictions counts
	 * demotions too. */
	uint64_t dram_dropped; /* blocks dropped from DRAM for lack of room, kept
	                        * nowhere else (no working SSD tier) */
	uint64_t ssd_copies_dropped; /* spare SSD copies of blocks that are in
	                        * DRAM, let go for room (the block stays) */
	struct kvt_ssd_health ssd;
	/* Blocks the ssd_admission rule kept off the SSD tier: dropped from
	 * DRAM for room instead of written (counted in tier[DRAM].evictions
	 * too), and their bytes, the SSD writes saved. */
	uint64_t ssd_admission_refused;
	uint64_t ssd_admission_refused_bytes;
	/* Demotion batches the demoter wrote (each one group commit: one
	 * fdatasync per segment it touches), and the blocks they carried. */
	uint64_t demote_batches;
	uint64_t demote_batch_blocks;
	/* SSD records written encoded by a codec (kvt_store_opts.ssd_codec,
	 * kvt_ns_set_ssd_codec), and the bytes of all records written, before
	 * and after encoding: the codec's ratio is raw / stored. */
	uint64_t ssd_compressed_writes;
	uint64_t ssd_write_raw_bytes, ssd_write_stored_bytes;
	/* Blocks a storage tier recovered at open whose namespace no one has
	 * attached since: kept, and indexed at its first kvt_ns_attach. They
	 * are in tier[].blocks and tier[].used_bytes, not in blocks. */
	uint64_t recovered_unattached;
	struct kvt_warm_stats warm;
};

/* Snapshot of the counters, as far as stats->size (set by the caller)
 * reaches. Returns 0 or -EINVAL. */
int kvt_store_stats(struct kvt_store *store, struct kvt_store_stats *stats);

/* Snapshot of tier's named counters (its own, then those the store keeps
 * for it) into out[0..max), in the tier's order. Returns how many were
 * written (0 for a tier the store does not have), or -EINVAL. */
int kvt_store_tier_counters(struct kvt_store *store, enum kvt_tier tier, struct kvt_counter *out,
			    size_t max);

/* One device of a tier spread over several (the SSD tier over several
 * directories): what it holds, what went through it, and its state. */
enum kvt_device_state {
	KVT_DEVICE_OK = 0,       /* reads and writes */
	KVT_DEVICE_DEGRADED = 1, /* writes failed (a write error, a read-only
	                          * remount): reads only, probed for writes */
	KVT_DEVICE_OUT = 2,      /* taken out (I/O errors past a threshold, its
	                          * directory gone): its blocks are misses */
	KVT_DEVICE_MISSING = 3,  /* could not be opened at start */
};

struct kvt_tier_device {
	char path[512];          /* its directory (cut to fit) */
	enum kvt_device_state state;
	int error;               /* the -errno that degraded it or took it out, or 0 */
	uint64_t capacity_bytes;
	uint64_t used_bytes;
	uint64_t blocks;
	uint64_t writes, write_bytes; /* records written, their block bytes */
	uint64_t reads, read_bytes;   /* records read, their bytes */
	uint64_t errors;         /* I/O errors */
	uint64_t dropped;        /* blocks lost when it was taken out */
	uint64_t recovered;      /* blocks found on it at open */
};

/* "ok", "degraded", "out", "missing". */
const char *kvt_device_state_name(enum kvt_device_state s);

/* Snapshot of the devices of tier into out[0..max), in the order they were
 * configured. Returns how many (0 for a tier of one device, or one the store
 * does not have), or -EINVAL. */
int kvt_store_tier_devices(struct kvt_store *store, enum kvt_tier tier,
			   struct kvt_tier_device *out, size_t max);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_STORE_H */
