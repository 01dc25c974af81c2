/* SPDX-License-Identifier: Apache-2.0 */
/* The reader's side of the peer transport: fetch blocks from other nodes
 * over TCP, and the control requests of RDMA reads (leases, queue pairs).
 *
 * Connections are authenticated with the cluster secret (peer_auth.h),
 * made lazily and kept in a pool per peer (up to conns_per_peer idle). A
 * fetch of n blocks spreads them over up to conns_per_peer connections, each
 * streaming a contiguous run; the calling thread drives all of them with
 * poll(). Every block's bytes are received straight into the caller's
 * memory (a DRAM slot from kvt_reserve, or the pieces of an engine's KV
 * pages), hashed as they arrive, and accepted only if the XXH3 the owner
 * computed matches.
 *
 * A peer that dies or a link that drops mid-transfer: a connection that
 * makes no progress for timeout_ms fails its remaining blocks with
 * -ETIMEDOUT (-ECONNRESET when the peer closed), and the peer is then
 * answered -EHOSTDOWN at once for down_ms, so other callers do not wait on
 * it too. The caller retries another holder or reports a miss.
 *
 * A peer that makes progress, but too little (a byte now and then), is cut
 * by the fetch's deadline: timeout_ms plus the bytes asked at min_rate
 * bytes a second, counted from the call, over connecting, the handshake
 * and every block. What is not in by then fails with -ETIMEDOUT, the peer
 * is counted and logged slow, and answered -EHOSTDOWN for slow_down_ms.
 *
 * Thread-safe: concurrent fetches use distinct connections. */
#ifndef KVT_CLUSTER_PEER_CLIENT_H
#define KVT_CLUSTER_PEER_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvtier/types.h"
#include "cluster/peer_auth.h"
#include "cluster/peer_proto.h"
#include "kvtier/log.h" /* kvt_log_cb */

struct kvt_peer_client_opts {
	size_t size;               /* sizeof(struct kvt_peer_client_opts), set by _init */
	const char *node_id;       /* this node (kvt_node_id_valid) */
	const struct kvt_peer_secret *secret; /* required; copied */
	unsigned conns_per_peer;   /* connections a fetch spreads over (4) */
	unsigned timeout_ms;       /* connect + handshake; no progress (2000) */
	unsigned down_ms;          /* a failed peer is answered -EHOSTDOWN (1000) */
	uint64_t min_rate;         /* bytes/s a fetch is allowed at least, on top
	                            * of timeout_ms (8 MiB/s) */
	unsigned slow_down_ms;     /* a peer that missed a fetch's deadline is
	                            * answered -EHOSTDOWN (10000) */
	kvt_log_cb log;
	void *log_arg;
};

/* A peer: its node id (checked at the handshake) and address. */
struct kvt_peer_target {
	const char *node_id;
	const char *addr;          /* "HOST:PORT" */
	uint64_t epoch;            /* its directory epoch, 0 if unknown: a new one
	                            * (the node restarted) drops pooled connections
	                            * and its failure record */
};

/* One block to fetch: into dst, or when iov is set into its pieces, in
 * order (iovcnt of them, block_bytes in all). */
struct kvt_peer_item {
	struct kvt_key key;
	void *dst;                 /* block_bytes of room */
	const struct iovec *iov;
	unsigned iovcnt;
	int status;                /* out: 0, or why the block was not fetched */
};

/* Counters of one peer. */
struct kvt_peer_stats {
	char node_id[KVT_PEER_ID_MAX + 1];
	char addr[128];
	uint64_t blocks, bytes;    /* fetched and verified */
	uint64_t misses;           /* the owner did not hold the block */
	uint64_t checksum_errors;  /* bytes that did not match: never used */
	uint64_t timeouts, conn_errors, auth_errors;
	uint64_t slow;             /* fetches cut at their deadline */
	uint64_t connects;
	uint32_t idle_conns;
	bool down;                 /* answered -EHOSTDOWN now */
};

struct kvt_peer_client;

void kvt_peer_client_opts_init(struct kvt_peer_client_opts *opts, size_t size_bytes);

/* Returns 0 and *out, -EINVAL, -ENOMEM. */
int kvt_peer_client_open(const struct kvt_peer_client_opts *opts, struct kvt_peer_client **out);

/* Fetch items[0..n) of the namespace with salt `salt` (blocks of
 * block_bytes) from peer t, within timeout_ms + n * block_bytes / min_rate.
 * Sets every item's status: 0, -ENOENT (the owner
 * does not hold it), -EIO (checksum mismatch), -ETIMEDOUT (no progress for
 * timeout_ms, or not in by the deadline), -ECONNRESET,
 * -EHOSTDOWN (the peer failed recently), -EACCES (refused: wrong secret),
 * -ESTALE (another node answers at that address), -EBADF (the owner does
 * not have the namespace), -EPROTO (the owner broke the protocol). Returns
 * the number of items fetched, or -EINVAL (an item's pieces do not add up
 * to block_bytes: nothing is asked, every item gets -EINVAL). */
int kvt_peer_fetch(struct kvt_peer_client *c, const struct kvt_peer_target *t,
		   const struct kvt_key *salt, uint64_t block_bytes, struct kvt_peer_item *items,
		   size_t n);

/* Ask t for a lease of lease_ms on keys[0..n) (n <= KVT_PEER_MAX_KEYS);
 * out[i] gets each block's entry, checked: its key is keys[i]. *sent_ns is
 * the monotonic time the request left, from which the reader counts the
 * lease. Returns 0 with *lease_id and *granted_ms, or the owner's refusal
 * (-EOPNOTSUPP: no RDMA, -ENOSPC, -EBADF) or a transport error. */
int kvt_peer_lease(struct kvt_peer_client *c, const struct kvt_peer_target *t,
		   const struct kvt_key *salt, uint64_t block_bytes, const struct kvt_key *keys,
		   uint32_t n, uint32_t lease_ms, struct kvt_peer_lease_entry *out,
		   uint64_t *lease_id, uint32_t *granted_ms, uint64_t *sent_ns);

/* Return a lease. Returns the number of blocks the owner released, or
 * -ENOENT (it had expired), or a transport error. */
int kvt_peer_release(struct kvt_peer_client *c, const struct kvt_peer_target *t,
		     uint64_t lease_id);

/* A connection of its own to t, outside the pool, for state that lives as
 * long as the connection (an RDMA queue pair). */
struct kvt_peer_conn;

/* Exchange RDMA endpoints with t over a new dedicated connection: the
 * owner's queue pair lives until kvt_peer_conn_close. Returns 0 with
 * *remote and *conn, or an error. */
int kvt_peer_qp_connect(struct kvt_peer_client *c, const struct kvt_peer_target *t,
			const struct kvt_peer_ep *local, struct kvt_peer_ep *remote,
			struct kvt_peer_conn **conn);

void kvt_peer_conn_close(struct kvt_peer_conn *conn);

/* Counters of up to max peers. Returns the number of peers known. */
int kvt_peer_client_stats(struct kvt_peer_client *c, struct kvt_peer_stats *out, size_t max);

/* Close every connection. NULL is accepted. No call may be running. */
void kvt_peer_client_close(struct kvt_peer_client *c);

#endif /* KVT_CLUSTER_PEER_CLIENT_H */
