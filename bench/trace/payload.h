/* SPDX-License-Identifier: Apache-2.0 */
/* Payload replay: the requests of a trace through the public store API
 * (kvt_store_open, kvt_ns_attach, kvt_lookup, kvt_get, kvt_put) with real
 * block bytes at a scaled block size, to see the tiers' own behaviour: the
 * slab allocator, the policy as the store drives it, copies. Each request
 * looks up its keys, reads back its hit blocks (checking their bytes), and
 * puts its missing ones. Keys as in replay.h. */
#ifndef KVT_TRACE_PAYLOAD_H
#define KVT_TRACE_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/trace/reader.h"
#include "kvtier/store.h"

struct kvt_payload_opts {
	size_t size;            /* sizeof(struct kvt_payload_opts), set by _init */
	const char *policy;     /* store policy (default "lru") */
	uint32_t block_tokens;  /* tokens per hash id (default 512) */
	uint64_t block_bytes;   /* scaled block size, a multiple of 4 x block_tokens
	                         * (default 64 KiB) */
	uint64_t dram_blocks;   /* DRAM tier capacity in blocks (default 4,096) */
	const char *ssd_dir;    /* SSD tier directory, NULL for none */
	uint64_t ssd_blocks;    /* SSD tier capacity in blocks */
	bool reuse_class;       /* store blocks with the reuse class of their
	                         * request's output length (kvt_put_class;
	                         * default on) */
};

struct kvt_payload_stats {
	uint64_t requests, blocks, tokens, hit_blocks, hit_tokens;
	uint64_t tier_hits[KVT_TIER_COUNT]; /* hit blocks by the tier the lookup saw */
	uint64_t puts, put_exists, put_nospace, bad_bytes;
	uint64_t bytes_put, bytes_got;
	struct kvt_store_stats store;
};

struct kvt_payload;

void kvt_payload_opts_init(struct kvt_payload_opts *opts, size_t size_bytes);

/* Open a store for the replay. Returns 0 and *out, -EINVAL (bad sizes or
 * policy), -ENOMEM, or the store's error. */
int kvt_payload_open(const struct kvt_payload_opts *opts, struct kvt_payload **out);

/* Replay one request. Returns 0, or the store's error (-EIO for a block
 * whose bytes came back wrong is counted in bad_bytes, not returned). */
int kvt_payload_request(struct kvt_payload *p, const struct kvt_trace_req *req);

/* Counters so far, the store's included. Returns 0 or the store's error. */
int kvt_payload_stats(struct kvt_payload *p, struct kvt_payload_stats *out);

/* NULL is accepted. */
void kvt_payload_close(struct kvt_payload *p);

#endif /* KVT_TRACE_PAYLOAD_H */
