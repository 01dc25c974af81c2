/* SPDX-License-Identifier: Apache-2.0 */
/* The peer tier: blocks other nodes of the cluster hold, as a storage tier
 * of this node's store (tiers/tier.h, kind KVT_TIER_REMOTE, caps
 * KVT_TIER_CAP_KEYED), added with kvt_store_add_tier like any tier. The
 * store asks it after a local miss:
 *
 *  - lookup: how many leading keys live nodes other than this one hold,
 *    from the directory, in one bounded round trip (0 when the directory
 *    is out of reach or slow: the node works local-only);
 *  - reads by key: the blocks are fetched from their holders over the peer
 *    transport straight into the memory-tier slots the store gives (io.buf),
 *    XXH3-checked end to end, each run of keys one holder has in one
 *    request (with RDMA: a lease on the run over the TCP control channel,
 *    then one-sided READs through the verbs ops table, checked against the
 *    lease's checksums; a holder that lends nothing by RDMA is read over
 *    TCP); a block a holder fails (dead, cut off, evicted since its
 *    hint, wrong bytes) is asked of its next holder. Each record's res is 0,
 *    or why no holder served it: -ENOENT (none holds it), -EBADMSG (the
 *    bytes failed their checksum), -ETIMEDOUT, -ECONNRESET, -ECONNREFUSED,
 *    -EHOSTDOWN (the holder failed in the last down_ms), -EACCES (refused
 *    the cluster secret), -ENOTCONN (the directory is out of reach). The
 *    store serves none of those: a miss, never wrong bytes. Fetched blocks
 *    join the store's index in the memory tier; without RDMA a read can
 *    also land in the caller's pieces (io.iov, KVT_TIER_CAP_READ_IOV: an
 *    engine's pages, kvt_read_into), and such a block is not the store's.
 *
 * The holders a lookup found are kept for a moment, so the reads that
 * follow it (the store looks up, then reads) do not ask the directory
 * again. submit() runs the transfers, so they overlap the other tiers'
 * reads already in flight; wait() reports each record. The records are
 * asked in rounds (each one's first holder, then the next holder of those
 * that failed), and a round asks its holders at once: one on the calling
 * thread, each other one on a thread of its own (up to 8), so a prefix
 * spread over several nodes comes in at the rate of all their links.
 *
 * Time: a lookup waits at most the directory's lookup timeout (grown by 4
 * ms for each batch of keys) for each piece of KVT_DIR_MAX_LOOKUP_KEYS; a read
 * waits on each holder at most the peer client's no-progress timeout, and
 * in all at most its fetch deadline (the timeout plus the bytes at the
 * client's min_rate), and a holder that failed within the client's down_ms
 * (slow_down_ms, one that missed a deadline) is skipped at once.
 *
 * Thread-safe. The directory and the client are the caller's: they must
 * outlive every call into the store that can reach the tier. */
#ifndef KVT_CLUSTER_PEER_TIER_H
#define KVT_CLUSTER_PEER_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/directory.h"
#include "kvtier/store.h"
#include "cluster/peer_client.h"
#include "cluster/peer_rdma.h"

struct kvt_peer_tier_opts {
	size_t size;                  /* sizeof(struct kvt_peer_tier_opts), set by _init */
	struct kvt_dir *dir;          /* required */
	struct kvt_peer_client *client; /* required */
	/* Optional: keys[0..n) were fetched and handed to the store (this
	 * node holds them now: the cluster's hint). Called from the thread
	 * waiting on the read, with no lock of the tier held. */
	void (*fetched_cb)(void *arg, const struct kvt_key *keys, size_t n);
	void *fetched_arg;
	/* Optional: read by RDMA. Open it with kvt_peer_tier_rdma_exchange_cb
	 * and kvt_peer_tier_rdma_release_cb (arg: client); the tier registers
	 * the store's memory region with it (LOCAL_WRITE) when added. */
	struct kvt_rdma *rdma;
	unsigned rdma_lease_ms;       /* the lease asked for each read (2000) */
	unsigned rdma_timeout_ms;     /* the longest a read's READs take (2000) */
	kvt_log_cb log;
	void *log_arg;
};

struct kvt_peer_tier_stats {
	uint64_t lookups, lookup_keys;  /* lookups after a local miss, their keys */
	uint64_t lookup_remote_keys;    /* keys found held by other nodes */
	uint64_t lookup_cached_keys;    /* of them: found by a lookup of the last
	                                 * second, not asked of the directory again */
	uint64_t lookup_unanswered;     /* the directory could not tell in time */
	uint64_t fetches;               /* read batches */
	uint64_t blocks, bytes;         /* fetched and verified */
	uint64_t retries;               /* blocks asked of a next holder */
	uint64_t misses;                /* blocks the directory named and no holder served */
	uint64_t errors;                /* blocks a holder failed other than by not
	                                 * holding them (timeouts, resets, checksums,
	                                 * refusals) */
	uint64_t rdma_blocks;           /* of blocks: read by RDMA */
	uint64_t rdma_fallbacks;        /* requests sent over TCP: the holder lent
	                                 * nothing by RDMA (no NIC, no room) */
	uint64_t parallel_rounds;       /* read rounds that asked several holders at once */
	uint64_t fetching_max;          /* the most holder requests in flight at once */
};

struct kvt_peer_tier;

void kvt_peer_tier_opts_init(struct kvt_peer_tier_opts *opts, size_t size_bytes);

/* Returns 0 and *out, -EINVAL, -ENOMEM. */
int kvt_peer_tier_open(const struct kvt_peer_tier_opts *opts, struct kvt_peer_tier **out);

/* The tier to hand to kvt_store_add_tier (the store then owns it: it is
 * closed with the store, and pt stays valid until then). */
struct kvt_storage_tier *kvt_peer_tier_storage(struct kvt_peer_tier *pt);

void kvt_peer_tier_stats(struct kvt_peer_tier *pt, struct kvt_peer_tier_stats *out);

/* The exchange_cb and release_cb of kvt_rdma_opts for the peer tier's
 * reads (arg: the peer client): the tier names a peer "NODE@HOST:PORT",
 * and the queue pair's endpoints go over a dedicated connection to it
 * (kvt_peer_qp_connect). */
int kvt_peer_tier_rdma_exchange_cb(void *arg, const char *peer, const struct kvt_peer_ep *local,
				   struct kvt_peer_ep *remote, void **conn);
void kvt_peer_tier_rdma_release_cb(void *arg, void *conn);

/* Close a tier no store took. NULL is accepted. */
void kvt_peer_tier_close(struct kvt_peer_tier *pt);

#endif /* KVT_CLUSTER_PEER_TIER_H */
