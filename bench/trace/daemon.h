/* SPDX-License-Identifier: Apache-2.0 */
/* Daemon replay: the requests of a trace through a running kvtierd, over its
 * socket with libkvtier-client, as an engine would send them: LOOKUP of the
 * request's keys, LOAD of the stored leading blocks into engine memory, SAVE
 * of the rest under the last one loaded (with the reuse class of the
 * request's output length, kvt_reuse_class_of), each waited for. So the daemon's
 * own store, demoter and admission rule decide what lands on SSD, and its
 * STATS say what it cost. Keys as in replay.h; block bytes are not checked
 * (the daemon checks its own). */
#ifndef KVT_TRACE_DAEMON_H
#define KVT_TRACE_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/trace/reader.h"
#include "kvtier/types.h"

struct kvt_daemon_replay_opts {
	size_t size;           /* sizeof(struct kvt_daemon_replay_opts), set by _init */
	const char *socket;    /* kvtierd's socket (NULL: the client's default) */
	const char *token;     /* tenant token (NULL: the client's default) */
	uint32_t block_tokens; /* tokens of a block in the namespace (default 16) */
	uint64_t block_bytes;  /* bytes of a block, a multiple of 4 x block_tokens
	                        * (default 16 KiB: one layer, one bf16 head) */
	uint32_t pages;        /* engine pages, the most blocks one LOAD or SAVE
	                        * carries (default 1,024) */
	bool reuse_class;      /* SAVE with the reuse class of the request's
	                        * output length (default on) */
};

struct kvt_daemon_replay_stats {
	uint64_t requests, blocks, tokens;
	uint64_t hit_blocks;                /* leading blocks the LOOKUPs found */
	uint64_t tier_hits[KVT_TIER_COUNT]; /* of them, by the tier LOOKUP named */
	uint64_t loaded, load_short;        /* blocks LOAD delivered; found but gone
	                                     * by the LOAD */
	uint64_t saved, save_short;         /* blocks SAVE stored; asked, not stored */
};

struct kvt_daemon_replay;

void kvt_daemon_replay_opts_init(struct kvt_daemon_replay_opts *opts, size_t size_bytes);

/* Connect, open the namespace "trace-replay" and register engine memory.
 * Returns 0 and *out, -EINVAL (sizes), -ENOMEM, or the client's error
 * (-ENOENT, -ECONNREFUSED: no daemon there). */
int kvt_daemon_replay_open(const struct kvt_daemon_replay_opts *opts,
			   struct kvt_daemon_replay **out);

/* Replay one request. Returns 0 or the client's error. */
int kvt_daemon_replay_request(struct kvt_daemon_replay *d, const struct kvt_trace_req *req);

/* Counters so far. */
void kvt_daemon_replay_stats(const struct kvt_daemon_replay *d,
			     struct kvt_daemon_replay_stats *out);

/* The daemon's STATS (JSON text, malloc'd: the caller frees it) once its
 * demoter is still: DRAM's evictions and SSD's bytes written the same in two
 * replies 100 ms apart (at most 30 s). Returns 0, -ETIMEDOUT (then *json is
 * the last reply), or the client's error. */
int kvt_daemon_replay_settled_stats(struct kvt_daemon_replay *d, char **json);

/* NULL is accepted. */
void kvt_daemon_replay_close(struct kvt_daemon_replay *d);

#endif /* KVT_TRACE_DAEMON_H */
