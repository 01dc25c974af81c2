/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster directory: what the nodes of a cluster agree on, kept in an
 * existing store (Redis today), never in home-made consensus.
 *
 *  - Membership. Each node publishes its record (peer address, transports,
 *    RDMA connection data, DRAM region descriptor) under a TTL it renews, and
 *    takes an epoch from the store as its fencing token each time it (re)joins.
 *    A node whose record expired is gone.
 *  - A block index, as a hint: which live nodes hold a key, at which epoch, in
 *    which tier. Written when blocks are saved, deleted when they are evicted,
 *    under a TTL. A hint is only believed when its node is a member with the
 *    same epoch (a restarted node's old hints name blocks it lost).
 *
 * Every call is bounded in time. Writes (publish, forget) are queued and sent
 * in batches by the directory's own thread, never waited for; lookups wait
 * for the thread at most their timeout; membership is read from the last
 * snapshot. When the store is unreachable or slow the directory says so
 * (-ENOTCONN, -ETIMEDOUT), counts and logs it, and the node works local-only;
 * it reconnects and rejoins by itself.
 *
 * A backend is a const struct kvt_dir_ops table found by the URL's scheme
 * (redis://, unix://, sentinel:// for the primary that Redis Sentinels name), so an etcd membership with consistent hashing can take
 * Redis's place without a change to the callers. */
#ifndef KVT_CLUSTER_DIRECTORY_H
#define KVT_CLUSTER_DIRECTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"
#include "kvtier/log.h" /* kvt_log_cb */

#define KVT_NODE_ID_MAX 64     /* [A-Za-z0-9._-], 1..64 characters (kvt_node_id_valid) */
#define KVT_NODE_ADDR_MAX 128  /* "HOST:PORT" */
#define KVT_NODE_MAX_MRS 16    /* memory regions of one node's DRAM tier */
#define KVT_DIR_MAX_HOLDERS 4  /* holders reported per key */

enum kvt_node_transport {
	KVT_NODE_TCP = 1u << 0,
	KVT_NODE_RDMA = 1u << 1,
};

/* One memory region of a node's DRAM tier registered with its NIC: the
 * bytes [off, off + len) of the region, readable remotely with rkey. */
struct kvt_node_mr {
	uint64_t off, len;
	uint32_t rkey;
};

/* A node as the directory publishes it. */
struct kvt_node_info {
	char id[KVT_NODE_ID_MAX + 1];
	uint64_t epoch;                    /* set by the directory when it joins */
	char addr[KVT_NODE_ADDR_MAX + 1];  /* peer transport "HOST:PORT" */
	uint32_t transports;               /* KVT_NODE_* */
	struct {                           /* with KVT_NODE_RDMA */
		char device[32];
		uint8_t port;
		uint8_t gid[16];
		uint16_t lid;
	} rdma;
	struct {                           /* the DRAM tier, with KVT_NODE_RDMA */
		uint64_t base, bytes;
		uint32_t n_mrs;
		struct kvt_node_mr mrs[KVT_NODE_MAX_MRS];
	} region;
};

/* A live node holding a key. */
struct kvt_dir_holder {
	char node[KVT_NODE_ID_MAX + 1];
	char addr[KVT_NODE_ADDR_MAX + 1];
	uint64_t epoch;
	uint8_t tier;                      /* the holder's tier: KVT_TIER_DRAM, _SSD */
};

/* The holders of one key, best first (DRAM before SSD). */
struct kvt_dir_holders {
	uint32_t n;
	struct kvt_dir_holder h[KVT_DIR_MAX_HOLDERS];
};

/* Keys one kvt_dir_lookup takes at most: 4x the sidecar's LOOKUP. */
#define KVT_DIR_MAX_LOOKUP_KEYS 65536u
/* What a lookup may take past lookup_timeout_ms per lookup_batch_keys keys
 * (Redis answered 16,384 keys in about 10 ms on the build machine,
 * docs/cluster.md): a long prefix is not cut off by the deadline of a
 * short one, and a lookup still ends in bounded time. */
#define KVT_DIR_LOOKUP_MS_PER_BATCH 4u

struct kvt_dir_opts {
	size_t size;                /* sizeof(struct kvt_dir_opts), set by _init */
	const char *url;            /* redis://[:PASSWORD@]HOST[:PORT][/DB],
	                             * unix:///PATH[?db=N], or
	                             * sentinel://HOST:PORT[,...]/MASTER; required */
	const char *key_prefix;     /* prepended to every key; default "kvt:" */
	struct kvt_node_info self;  /* this node (id, addr, transports required;
	                             * epoch is ignored) */
	unsigned io_timeout_ms;     /* each connect and pipeline (250) */
	unsigned lookup_timeout_ms; /* the longest a lookup waits (50), plus
	                             * KVT_DIR_LOOKUP_MS_PER_BATCH per batch */
	unsigned lookup_batch_keys; /* keys per MGET of a lookup, the MGETs
	                             * pipelined in one round trip (1024) */
	unsigned member_ttl_ms;     /* membership TTL; renewed every third (3000) */
	unsigned hint_ttl_ms;       /* block hint TTL, refreshed by publish (600000) */
	unsigned max_queued_keys;   /* publish/forget keys queued at most; more are
	                             * dropped and counted (65536) */
	unsigned batch_keys;        /* keys per pipeline of writes (512) */
	unsigned replay_ms;         /* when the store's primary changes (a Sentinel
	                             * failover), the writes sent in this window
	                             * are sent again, at most max_queued_keys of
	                             * them (60000) */
	/* Called on the directory's thread when this node (re)joined with a new
	 * epoch: hints it published before are no longer believed, so the owner
	 * republishes what it holds. Must not call into the directory
	 * synchronously except publish. */
	void (*rejoin_cb)(void *arg, uint64_t epoch);
	void *rejoin_arg;
	kvt_log_cb log;             /* NULL = no logging */
	void *log_arg;
};

struct kvt_dir_stats {
	bool reachable;             /* the last exchange with the store worked */
	uint64_t epoch;             /* this node's, 0 before it joined */
	uint32_t members;           /* live nodes in the last snapshot, self included */
	uint64_t joins;             /* times this node took an epoch */
	uint64_t lookups, lookup_keys, lookup_hit_keys;
	uint64_t lookups_unreachable; /* answered -ENOTCONN at once: store down */
	uint64_t lookups_timed_out;   /* gave up after lookup_timeout_ms */
	uint64_t lookup_batches;      /* lookup pipelines the thread ran */
	uint64_t lookup_batch_ns;     /* their time on the thread: commands built,
	                               * sent, answered and parsed */
	uint64_t published_keys, forgotten_keys;
	uint64_t dropped_keys;      /* writes dropped: queue full, or not joined yet */
	uint64_t queued_keys;       /* writes queued now, not yet sent */
	uint64_t stale_hints;       /* hints of gone nodes or old epochs, ignored */
	uint64_t errors;            /* failed connects and pipelines */
	uint64_t reconnects;        /* connections re-established after a loss */
	uint64_t primary_changes;   /* reconnects that reached another server */
	uint64_t replayed_keys;     /* writes sent again to a new primary */
};

struct kvt_dir;

struct kvt_dir_ops {
	const char *name;           /* "redis" */
	int (*open)(const struct kvt_dir_opts *opts, struct kvt_dir **out);
	void (*publish)(struct kvt_dir *d, const struct kvt_key *keys, size_t n, uint8_t tier);
	void (*forget)(struct kvt_dir *d, const struct kvt_key *keys, size_t n);
	int (*lookup)(struct kvt_dir *d, const struct kvt_key *keys, size_t n,
		      struct kvt_dir_holders *out);
	int (*members)(struct kvt_dir *d, struct kvt_node_info *out, size_t max);
	int (*set_self)(struct kvt_dir *d, const struct kvt_node_info *self);
	void (*stats)(struct kvt_dir *d, struct kvt_dir_stats *out);
	void (*close)(struct kvt_dir *d);
};

/* Every backend's handle starts with this. */
struct kvt_dir {
	const struct kvt_dir_ops *ops;
};

void kvt_dir_opts_init(struct kvt_dir_opts *opts, size_t size_bytes);

/* Open the directory of opts->url and join: the first registration runs on
 * the directory's thread, so this returns at once even when the store is
 * down (the node then starts local-only and joins when it can). Returns 0
 * and *out, or -EINVAL (bad opts or URL, invalid node id or address),
 * -EPROTONOSUPPORT (no backend for the scheme), -ENOMEM. */
int kvt_dir_open(const struct kvt_dir_opts *opts, struct kvt_dir **out);

/* Queue hints that this node holds keys[0..n) in `tier`. Never blocks. While
 * the store is out of reach they wait in the queue and go out, in order, when
 * it is back; when the queue is full, or before this node first joined, they
 * are dropped (counted; the owner republishes at its rejoin). */
void kvt_dir_publish(struct kvt_dir *d, const struct kvt_key *keys, size_t n, uint8_t tier);

/* Queue the removal of this node's hints for keys[0..n) (evicted blocks). */
void kvt_dir_forget(struct kvt_dir *d, const struct kvt_key *keys, size_t n);

/* Find which other live nodes hold keys[0..n), n <= KVT_DIR_MAX_LOOKUP_KEYS,
 * in one round trip (an MGET per lookup_batch_keys keys, pipelined): out[i]
 * gets the holders of key i (this node excluded, stale hints dropped).
 * Returns the number of leading keys with at least one holder, or
 * -ENOTCONN (the store is unreachable now: answered at once), -ETIMEDOUT
 * (no answer within lookup_timeout_ms and the batches' allowance), -EINVAL,
 * -ENOMEM. */
int kvt_dir_lookup(struct kvt_dir *d, const struct kvt_key *keys, size_t n,
		   struct kvt_dir_holders *out);

/* Copy up to max live members (self included) from the last snapshot.
 * Never waits for the store. Returns the number of members (which may be
 * more than max). */
int kvt_dir_members(struct kvt_dir *d, struct kvt_node_info *out, size_t max);

/* Replace this node's record (say, once its RDMA region is registered); it
 * is published at the next renewal. Returns 0 or -EINVAL. */
int kvt_dir_set_self(struct kvt_dir *d, const struct kvt_node_info *self);

void kvt_dir_stats(struct kvt_dir *d, struct kvt_dir_stats *out);

/* Leave (the record is deleted when the store answers in time) and free
 * everything. NULL is accepted. */
void kvt_dir_close(struct kvt_dir *d);

#endif /* KVT_CLUSTER_DIRECTORY_H */
