/* SPDX-License-Identifier: Apache-2.0 */
/* The DRAM tier: one large region carved into block slots.
 *
 * The region is a single mmap (huge pages when the system has them reserved,
 * else normal pages with transparent huge pages advised), so it can be
 * registered once with CUDA (pinned), io_uring (fixed buffers) and RDMA
 * (memory region), and blocks move between tiers without bounce copies.
 *
 * Slots come from a slab allocator: the region is cut into equal slabs, each
 * slab serves one slot size (the headroom, then a namespace's block size
 * rounded up to 4 KiB), and a slab whose slots are all free goes back to
 * the common pool. With one block size per store there is no fragmentation
 * at all; with several, free space is stranded at most in partly used
 * slabs, one slab per size. It is a memory tier of tiers/tier.h. */
#ifndef KVT_TIERS_DRAM_H
#define KVT_TIERS_DRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "tiers/tier.h"

#define KVT_DRAM_SLOT_ALIGN 4096u
#define KVT_DRAM_DEFAULT_SLAB (64ull << 20)

/* A versioned options struct (util/opts.h). */
struct kvt_dram_opts {
	size_t size;          /* sizeof(struct kvt_dram_opts), set by _init */
	uint64_t bytes;       /* capacity (required); rounded down to whole slabs */
	uint64_t slab_bytes;  /* 0 = KVT_DRAM_DEFAULT_SLAB */
	bool huge_pages;      /* try MAP_HUGETLB first, else transparent huge pages
	                       * (default true); false: 4 KiB pages only */
	uint32_t headroom;    /* bytes before every slot (a 4 KiB multiple, 0 or
	                       * KVT_TIER_HEADROOM: a storage tier's record header) */
	bool warm;            /* the region is a memfd that outlives the process,
	                       * with a header per slot (tiers/warm_region.h), so
	                       * that the next process rebuilds its index from it */
	int warm_fd;          /* with warm (read only then): a region handed in
	                       * to adopt (-1, the default: none). The tier owns it from the
	                       * call on; a region of another version or geometry
	                       * is refused (logged) and the tier starts empty */
};

void kvt_dram_opts_init(struct kvt_dram_opts *opts, size_t size_bytes);

/* Map the region. Returns 0 and *out, -EINVAL (capacity below one slab),
 * -ENOMEM. */
int kvt_dram_open(const struct kvt_dram_opts *opts, struct kvt_mem_tier **out);

/* Fault the pages of a DRAM tier's region [base, base + len) in, 64 MiB at a
 * time, so no put pays for first-touch page faults. MADV_POPULATE_WRITE maps
 * pages without changing their bytes, so this is safe while blocks are
 * stored; where the kernel lacks it, pages are touched by writing zeros,
 * which only `before_use` allows (nothing stored yet); otherwise that is
 * -EINVAL. Stops early once *stop (read atomically; NULL = never) is nonzero.
 * Returns 0 or -errno; *done (may be NULL) gets the bytes faulted in. */
int kvt_dram_prefault(void *base, uint64_t len, bool before_use, const int *stop,
		      uint64_t *done);

/* How far into the region slots have ever been handed out: the end of the
 * highest slab taken (slabs never used are taken lowest first, so the next
 * one to be used lies just past it); 0 for another tier. Read without the
 * store's lock, by a prefault that runs ahead of use. */
uint64_t kvt_dram_reach(struct kvt_mem_tier *t);

/* ---- warm restart (opts.warm) ---------------------------------------------- */

struct kvt_warm_region;
struct kvt_warm_slot;

/* What a warm tier found in a region it adopted: the locs of the slots
 * whose headers say committed (their bytes not verified yet), and the
 * slots it let go of. */
struct kvt_dram_found {
	const uint64_t *locs;
	size_t n;
	uint64_t torn;        /* headers a kill left mid-commit */
	uint64_t bad_header;  /* headers that fail their own checksum or fit
	                       * no slot */
};

/* The region of a warm tier, NULL for another tier. */
struct kvt_warm_region *kvt_dram_warm(struct kvt_mem_tier *t);

/* What the tier found at open (n = 0 for a new region). */
void kvt_dram_found(struct kvt_mem_tier *t, struct kvt_dram_found *out);

/* Forget the list of kvt_dram_found (its slots stay allocated until freed). */
void kvt_dram_found_done(struct kvt_mem_tier *t);

/* The header of the slot at loc. */
const struct kvt_warm_slot *kvt_dram_slot_hdr(struct kvt_mem_tier *t, uint64_t loc);

/* Write h as the committed header of the slot at loc. */
void kvt_dram_slot_commit(struct kvt_mem_tier *t, uint64_t loc, const struct kvt_warm_slot *h);

#endif /* KVT_TIERS_DRAM_H */
