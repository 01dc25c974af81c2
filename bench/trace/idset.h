/* SPDX-License-Identifier: Apache-2.0 */
/* The set of hash ids seen so far, for the ideal (infinite capacity) hit
 * rate: membership is all that infinite capacity needs. Trace ids are dense
 * small integers in practice (the Mooncake traces, the generator and the
 * converter number blocks 0, 1, 2, ...), so ids below 2^30 live in a bitmap
 * that grows with the largest id (a bit per id: a few hundred KB for millions
 * of blocks, in cache where a hash table of records would miss); larger ids
 * go to an open-addressing hash set. */
#ifndef KVT_TRACE_IDSET_H
#define KVT_TRACE_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvt_idset {
	uint64_t *bits;
	size_t n_words;
	uint64_t *table; /* ids + 1 (0 = empty), for ids past the bitmap */
	size_t mask, count;
};

/* Add id. Returns 1 if it was new, 0 if present, -ENOMEM. */
int kvt_idset_add(struct kvt_idset *s, uint64_t id);

/* Free the set's memory and empty it. */
void kvt_idset_clear(struct kvt_idset *s);

#endif /* KVT_TRACE_IDSET_H */
