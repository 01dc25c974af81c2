/* SPDX-License-Identifier: Apache-2.0 */
/* Live miss-ratio curves: a sampled reuse-distance estimator of the block
 * reference stream, giving the hit ratio an LRU cache of any capacity would
 * have had on it, in a fixed memory budget whatever the number of blocks.
 *
 * How (SHARDS-style spatial sampling, with two additions):
 *  - a block is sampled when the 64-bit hash of its key falls below a
 *    threshold (rate R = threshold / 2^64, at most max_rate); the sampled
 *    blocks' last reference times live in a table of bounded size, and when
 *    it fills the threshold drops (fixed-size SHARDS) and R with it;
 *  - the reuse distance of a sampled reference (distinct blocks referenced
 *    since its block's previous reference) is read from a histogram of the
 *    previous-reference times of every reference, kept in exponentially
 *    wider time buckets (about 1.6% resolution at any age): a reference whose
 *    previous time is known is a repeat inside every window that contains
 *    both, so distinct = references in the window - repeats in it;
 *  - references are post-stratified by reuse time: callers that keep a
 *    per-block "last reference tick" (the store's records do) pass it in, the
 *    estimator counts every reference in its reuse-time stratum (or
 *    "unknown"), and the curve is sum over strata of the stratum's share of
 *    references times its sampled fraction of reuses within the capacity. The
 *    sampled keys then only have to tell how reuse time maps to distance, not
 *    which blocks are reused, which removes most of the sampling noise.
 * Without ticks (prev = 0 always, or use_ticks off) this is plain SHARDS: every reference falls
 * in the "unknown" stratum and repeats are counted from the sample, 1/R each.
 *
 * A hit here is the LRU stack's: a reference hits a cache of C blocks when
 * fewer than C distinct other blocks were referenced since its previous one.
 * For prefix caches where each request references its blocks root first,
 * that is also the leading-prefix hit (a block's distance is never smaller
 * than its parent's).
 *
 * Not thread-safe: callers serialise (the store under its lock). */
#ifndef KVT_STORE_MRC_H
#define KVT_STORE_MRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvtier/types.h"

struct kvt_mrc;

struct kvt_mrc_opts {
	size_t size;          /* sizeof(struct kvt_mrc_opts), set by _init */
	double max_rate;      /* highest sampling rate (default 0.01) */
	size_t budget_bytes;  /* memory of the estimator, all included (default 4 MiB) */
	uint64_t seed;        /* mixed into the sampling hash (default 0) */
	uint64_t half_life;   /* references after which old counts weigh half;
	                       * 0 = never forget (default) */
	bool use_ticks;       /* use the callers' previous ticks (default true);
	                       * false: plain SHARDS, from the sample alone */
};

struct kvt_mrc_stats {
	uint64_t refs;         /* references counted toward the hit ratio */
	uint64_t sampled_refs; /* of them, references to sampled blocks */
	uint64_t sampled_keys; /* blocks in the sample table now */
	uint64_t known_prev;   /* references that came with a previous tick */
	double rate;           /* sampling rate now */
	size_t memory_bytes;   /* bytes held, fixed at open */
};

void kvt_mrc_opts_init(struct kvt_mrc_opts *o, size_t size);

/* Create an estimator. Returns 0, -EINVAL (size, rate not in (0, 1], budget
 * too small for the fixed tables), -ENOMEM. */
int kvt_mrc_open(const struct kvt_mrc_opts *o, struct kvt_mrc **out);
void kvt_mrc_close(struct kvt_mrc *m); /* NULL is accepted */

/* The first fields of struct kvt_mrc: what every reference touches, so that
 * the common case is a few instructions inline. Not for callers to touch. */
#define KVT_MRC_BATCH 64
/* One reference in 2^KVT_MRC_COUNT_BITS, by a hash of block and time, is
 * counted in detail (see mrc.c). */
#define KVT_MRC_COUNT_BITS 4
#define KVT_MRC_COUNTED(h, now) \
	((((h) ^ (now)) * 0x9e3779b97f4a7c15ull) >> (64 - KVT_MRC_COUNT_BITS) == 0)
struct kvt_mrc_hot {
	uint64_t now;    /* references so far; ticks are its low 32 bits */
	uint64_t thresh; /* a block is sampled when its hash is below */
	uint64_t limit;  /* now at which the slow path must run: a tick of 0 to
	                  * skip, a halving due, or a full batch to fold in */
	uint64_t refs;   /* references counted toward the hit ratio */
	uint64_t seed;   /* of kvt_mrc_hash */
	uint64_t seed32; /* of kvt_mrc_hash32: 32 bits of a mix of the seed */
	void *tab;       /* the sample table and its mask, for kvt_mrc_prefetch */
	uint64_t mask;
	uint32_t n_batch;
	struct { uint32_t now, prev; } batch[KVT_MRC_BATCH]; /* counted references,
	                  * folded into the counts by the slow path */
};

/* The 64-bit hash m samples on (its seed mixed in), of a block key in
 * namespace ns. Inline: every reference pays for it. */
static inline uint64_t kvt_mrc_hash(const struct kvt_mrc *m, uint16_t ns,
				    const struct kvt_key *key)
{
	const struct kvt_mrc_hot *hot = (const struct kvt_mrc_hot *)(const void *)m;
	uint64_t lo, hi, x;

	memcpy(&lo, key->bytes, 8);
	memcpy(&hi, key->bytes + 8, 8);
	x = lo ^ (hi + ((uint64_t)ns << 48) + hot->seed) * 0x9e3779b97f4a7c15ull;
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x ? x : 1; /* 0 marks an empty table slot */
}

/* The hash m samples on, from a uniform 32-bit hash of the block the caller
 * has already (the index's), with m's seed mixed in: one multiply, where
 * kvt_mrc_hash takes three. A caller uses one or the other for every
 * reference it gives m. */
static inline uint64_t kvt_mrc_hash32(const struct kvt_mrc *m, uint32_t h32)
{
	const struct kvt_mrc_hot *hot = (const struct kvt_mrc_hot *)(const void *)m;
	uint64_t x = ((uint64_t)h32 ^ hot->seed32) * 0x9e3779b97f4a7c15ull;

	return x ? x : 1;
}

/* The rest of kvt_mrc_ref. */
uint32_t kvt_mrc_ref_slow(struct kvt_mrc *m, uint64_t h, uint32_t prev);

/* One reference to the block of hash h (kvt_mrc_hash). prev: the tick this
 * call returned at the block's previous reference, if the caller kept it,
 * else 0. Returns the tick to keep for the next one (never 0). Ticks are the
 * low 32 bits of a reference counter: one older than 2^31 references is
 * taken as unknown. */
static inline uint32_t kvt_mrc_ref(struct kvt_mrc *m, uint64_t h, uint32_t prev)
{
	struct kvt_mrc_hot *hot = (struct kvt_mrc_hot *)(void *)m;
	uint64_t now = hot->now + 1;

	if (h < hot->thresh || now >= hot->limit)
		return kvt_mrc_ref_slow(m, h, prev);
	hot->now = now;
	hot->refs++;
	if (KVT_MRC_COUNTED(h, now)) {
		/* a counted reference waits in the batch; a full one is
		 * folded in by the next reference */
		hot->batch[hot->n_batch].now = (uint32_t)now;
		hot->batch[hot->n_batch].prev = prev;
		if (++hot->n_batch == KVT_MRC_BATCH)
			hot->limit = now + 1;
	}
	return (uint32_t)now;
}

/* Start loading what kvt_mrc_ref(m, h, ...) will read, when that is a cache
 * miss (the sampled blocks' table); for callers that hash a batch of keys
 * ahead of using them. */
static inline void kvt_mrc_prefetch(const struct kvt_mrc *m, uint64_t h)
{
	const struct kvt_mrc_hot *hot = (const struct kvt_mrc_hot *)(const void *)m;

	if (h < hot->thresh)
		__builtin_prefetch((const char *)hot->tab + (h & hot->mask) * 16);
}

/* A block that takes room without being looked up (it enters the stack but
 * is not counted in the hit ratio), e.g. an engine's output blocks. Returns
 * its tick, as kvt_mrc_ref. */
uint32_t kvt_mrc_insert(struct kvt_mrc *m, uint64_t h);

/* Estimated LRU hit ratios at capacities cap[0..n) (blocks) into hit[]. A
 * capacity of UINT64_MAX is infinite. Returns 0, or -EAGAIN before any
 * reference was counted. */
int kvt_mrc_curve(struct kvt_mrc *m, const uint64_t *cap, size_t n, double *hit);

void kvt_mrc_stats(const struct kvt_mrc *m, struct kvt_mrc_stats *out);

#endif /* KVT_STORE_MRC_H */
