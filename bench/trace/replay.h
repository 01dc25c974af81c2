/* SPDX-License-Identifier: Apache-2.0 */
/* Accounting replay: requests of a trace through kvtier's own block index and
 * eviction policies, with tier capacities in blocks, counting what would have
 * hit. No block bytes move; this is the fast mode, for sweeps.
 *
 * Semantics, per request in trace order: its hits are its leading blocks that
 * are cached (in any tier), counted by tier; from the first miss on nothing
 * more counts as a hit. Then every block of the request, in order, is used
 * (made most recently used in its tier, or moved to the first tier with
 * promotion) or inserted into the first tier, evicting down the tiers as the
 * policy says when a tier is over capacity. The parent of block i is block
 * i-1 of the request. Hash id h maps to the 128-bit key whose first 8 bytes
 * are h (little-endian) and the rest zero. */
#ifndef KVT_TRACE_REPLAY_H
#define KVT_TRACE_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/trace/cascade.h"
#include "bench/trace/reader.h"
#include "kvtier/types.h"
#include "store/mrc.h"
#include "store/policy.h"

#define KVT_REPLAY_INFINITE KVT_CASCADE_INFINITE

struct kvt_replay_opts {
	size_t size;                       /* sizeof(struct kvt_replay_opts), set by _init */
	const char *policy;                /* a policy of store/policy.c's registry:
	                                    * "lru" (default), "tail-lru", ... */
	const char *ssd_admission;         /* admission rule for demotions into SSD
	                                    * (store/admission.h; default "always") */
	uint64_t capacity[KVT_TIER_COUNT]; /* blocks per tier; 0 = absent;
	                                    * default: DRAM infinite, nothing else */
	bool promote;                      /* move a hit below the first tier up to it */
	bool store_output;                 /* also store the blocks of the output */
	bool reuse_class;                  /* store each request's blocks with the
	                                    * reuse class of its output length,
	                                    * kvt_reuse_class_of() (default on) */
	bool ideal;                        /* also count infinite-capacity hits (default on) */
	uint32_t block_tokens;             /* tokens per hash id (default 512) */
	uint64_t block_bytes;              /* bytes of a block, for byte counts and
	                                    * the cost policy (default 512 x 147,456) */
	kvt_policy_cost_cb cost_cb;        /* recompute cost for "cost" (NULL: depth + 1) */
	void *cost_arg;
	struct kvt_mrc *mrc;               /* fed every block reference, with the
	                                    * records' last ticks (optional; not owned) */
};

struct kvt_replay_tier_stats {
	uint64_t capacity;          /* blocks, KVT_REPLAY_INFINITE for no limit */
	uint64_t hit_blocks, hit_tokens;
	uint64_t blocks, peak_blocks;
	uint64_t inserted, demoted_in, promoted_in, evicted, promoted_out;
	uint64_t refused;             /* demotions into it the admission rule refused */
	uint64_t bytes_in, bytes_out; /* written into it; read out (hits, demotions) */
};

struct kvt_replay_stats {
	uint64_t requests;
	uint64_t blocks, tokens;            /* input blocks (hash ids) and tokens */
	uint64_t hit_blocks, hit_tokens;
	uint64_t ideal_hit_blocks, ideal_hit_tokens;
	uint64_t output_blocks;             /* blocks stored for outputs */
	uint64_t dropped;                   /* evicted from the last tier */
	uint64_t index_bytes;               /* memory of the block index */
	struct kvt_replay_tier_stats tier[KVT_TIER_COUNT];
};

struct kvt_replay;

void kvt_replay_opts_init(struct kvt_replay_opts *opts, size_t size_bytes);

/* Create a replay. Returns 0 and *out, -EINVAL (unknown policy or admission
 * rule, no tier, zero block_tokens), or -ENOMEM. */
int kvt_replay_open(const struct kvt_replay_opts *opts, struct kvt_replay **out);

/* Replay one request. Returns 0 or -ENOMEM. */
int kvt_replay_request(struct kvt_replay *r, const struct kvt_trace_req *req);

/* Snapshot of the counters so far. */
void kvt_replay_stats(const struct kvt_replay *r, struct kvt_replay_stats *out);

/* The tiers its leading hits were found in, of the request replayed last:
 * *hits entries, valid until the next request. */
const uint8_t *kvt_replay_last_hits(const struct kvt_replay *r, size_t *hits);

/* NULL is accepted. */
void kvt_replay_close(struct kvt_replay *r);

/* The key of hash id h. */
void kvt_replay_key(uint64_t h, struct kvt_key *key);

/* The keys of req's hash ids in (*keys)[0..n_ids), with room for as many
 * tiers in *tiers: both grown (to 256 at least) past *cap when needed, for
 * a replay that drives a store or a daemon. Returns 0, or -ENOMEM (the
 * arrays as they were). */
int kvt_replay_keys(const struct kvt_trace_req *req, struct kvt_key **keys, uint8_t **tiers,
		    size_t *cap);

#endif /* KVT_TRACE_REPLAY_H */
