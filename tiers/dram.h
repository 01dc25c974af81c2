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

#endif /* KVT_TIERS_DRAM_H */
