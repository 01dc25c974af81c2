/* SPDX-License-Identifier: Apache-2.0 */
/* Block checksums: XXH3-64 at the widest vector unit the CPU has (the
 * library's run-time dispatch where it has one, as Debian's does: AVX2 or
 * AVX-512 where present, about twice the SSE2 build's rate), and copies
 * that compute one on the way. The sums are XXH3_64bits' own, whichever
 * unit computed them.
 *
 * A copy that hashes what it wrote, a cache-sized chunk at a time, reads
 * the bytes for the hash from cache instead of from DRAM a second time: a
 * block's put costs about a copy, not a copy and a pass over the block. */
#ifndef KVT_UTIL_BLOCK_SUM_H
#define KVT_UTIL_BLOCK_SUM_H

#include <stddef.h>
#include <stdint.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* A sum over bytes given in pieces (64-byte aligned, as XXH3's state is:
 * on the stack or in a struct the compiler lays out, or aligned_alloc). */
struct kvt_sum {
	XXH3_state_t st;
};

/* XXH3-64 of len bytes at p. */
uint64_t kvt_block_sum(const void *p, size_t len);

/* memcpy(dst, src, len), returning XXH3-64 of the bytes. */
uint64_t kvt_copy_sum(void *dst, const void *src, size_t len);

void kvt_sum_begin(struct kvt_sum *s);

/* Add len bytes at p to s. */
void kvt_sum_add(struct kvt_sum *s, const void *p, size_t len);

/* memcpy(dst, src, len) and add the bytes to s. */
void kvt_sum_copy(struct kvt_sum *s, void *dst, const void *src, size_t len);

/* The sum of every byte added since kvt_sum_begin. */
uint64_t kvt_sum_end(struct kvt_sum *s);

#endif /* KVT_UTIL_BLOCK_SUM_H */
