/* SPDX-License-Identifier: Apache-2.0 */
/* The RDMA peer transport: one-sided READs of other nodes' DRAM slots.
 *
 * Memory. The DRAM tier's region is registered once, in pieces no larger
 * than the device's max_mr_size; consecutive pieces overlap by mr_overlap
 * (the largest block), so every block lies whole inside one piece and is
 * read with one work request. The owner registers it REMOTE_READ only; a
 * reader registers the same region LOCAL_WRITE as READ destinations.
 *
 * Owner side. A reader asks over the TCP control channel for a queue pair
 * (QP_CONNECT: kvt_rdma_accept makes one that allows remote READs, tied to
 * that connection) and for a lease on the blocks it wants (cluster/lease.h):
 * the reply carries each block's address, rkey (kvt_rdma_key), generation
 * and checksum.
 *
 * Reader side. RC queue pairs per peer are made lazily (endpoints exchanged
 * through exchange_cb, which kvt_peer_qp_connect serves) and pooled. A read
 * of n blocks spreads them over up to qps_per_peer queue pairs, posts READs
 * as chains up to max_wr in flight per queue pair, and polls completions in
 * batches. A block's bytes are used only if its READ completed before the
 * lease's end (as the reader counts it, from when it asked) and its XXH3
 * matches the owner's; a queue pair that reports an error (retry exceeded:
 * the peer or the link is gone; remote access: the rkey or range was
 * refused; flush) is destroyed, and its blocks fail with a status the caller
 * can act on (retry over TCP, another holder, or recompute).
 *
 * Every verbs call goes through a const struct kvt_verbs_ops (verbs.h). */
#ifndef KVT_CLUSTER_PEER_RDMA_H
#define KVT_CLUSTER_PEER_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/directory.h" /* struct kvt_node_mr */
#include "cluster/peer_server.h"
#include "cluster/verbs.h"

struct kvt_rdma_opts {
	size_t size;                 /* sizeof(struct kvt_rdma_opts), set by _init */
	const struct kvt_verbs_ops *verbs; /* NULL: libibverbs */
	const char *device;          /* NULL: the first device */
	uint8_t port;                /* 1 */
	int gid_index;               /* 0; RoCE v2 is often 1 or 3; -1: none (IB) */
	uint32_t qps_per_peer;       /* queue pairs a read spreads over (2) */
	uint32_t max_wr;             /* READs in flight per queue pair (64) */
	uint32_t poll_batch;         /* completions taken per poll (32) */
	uint64_t mr_overlap;         /* pieces of a region overlap by this (64 MiB) */
	/* Reader: exchange endpoints with `peer` for a new queue pair; *conn is
	 * what keeps the owner's side alive, given back to release_cb when the
	 * queue pair goes. */
	int (*exchange_cb)(void *arg, const char *peer, const struct kvt_peer_ep *local,
			   struct kvt_peer_ep *remote, void **conn);
	void (*release_cb)(void *arg, void *conn);
	void *exchange_arg;
	kvt_log_cb log;
	void *log_arg;
};

/* One block to READ. */
struct kvt_rdma_item {
	void *dst;                   /* inside memory registered LOCAL_WRITE */
	uint64_t remote;             /* the owner's address, from the lease */
	uint32_t rkey, len;
	uint64_t xxh3;               /* the owner's checksum, from the lease */
	uint64_t valid_until_ns;     /* the lease's end on this node's monotonic clock */
	int status;                  /* out: 0 or why the bytes are not to be used */
};

struct kvt_rdma_stats {
	uint64_t reads, bytes;       /* READs that completed and verified */
	uint64_t posted, completions, polls;
	uint64_t qps_created, qps_destroyed, qps_accepted;
	uint64_t retry_exceeded, remote_access, flushed, other_errors;
	uint64_t lease_expired, checksum_errors, timeouts;
	uint32_t mrs;
};

struct kvt_rdma;

void kvt_rdma_opts_init(struct kvt_rdma_opts *opts, size_t size_bytes);

/* Open the device. Returns 0 and *out, -EOPNOTSUPP (built without
 * libibverbs and no provider given), -ENODEV (no such device), -ENETDOWN
 * (port down), -EINVAL, or the provider's error. */
int kvt_rdma_open(const struct kvt_rdma_opts *opts, struct kvt_rdma **out);

/* What the device offers. */
const struct kvt_verbs_attr *kvt_rdma_attr(const struct kvt_rdma *r);

/* Register [base, base + len) for `access` (KVT_VERBS_REMOTE_READ or
 * KVT_VERBS_LOCAL_WRITE), in pieces as the device requires. Returns 0,
 * -EINVAL (max_mr_size not above mr_overlap, and the region is larger), or
 * the provider's error (nothing stays registered). */
int kvt_rdma_register(struct kvt_rdma *r, void *base, uint64_t len, unsigned access);

/* The key (rkey for REMOTE_READ, lkey for LOCAL_WRITE) of a registered
 * piece holding [addr, addr + len) whole. Returns 0 or -ENOENT. */
int kvt_rdma_key(struct kvt_rdma *r, const void *addr, uint64_t len, unsigned access,
		 uint32_t *key);

/* The REMOTE_READ pieces of the region at base, as offsets from base, for
 * the node's directory record. Returns how many (up to max written). */
int kvt_rdma_mrs(struct kvt_rdma *r, const void *base, struct kvt_node_mr *out, size_t max);

/* Owner: a queue pair for the reader at remote, tied to connection conn;
 * local gets its endpoint. */
int kvt_rdma_accept(struct kvt_rdma *r, uint64_t conn, const struct kvt_peer_ep *remote,
		    struct kvt_peer_ep *local);

/* Owner: connection conn closed; its queue pairs go. */
void kvt_rdma_conn_closed(struct kvt_rdma *r, uint64_t conn);

/* Owner: the hooks for kvt_peer_server_opts.rdma. */
struct kvt_peer_rdma_hooks kvt_rdma_owner_hooks(struct kvt_rdma *r);

/* Reader: READ items[0..n) from `peer` (a name exchange_cb understands),
 * waiting at most timeout_ms. Sets every status: 0, -ESTALE (the lease
 * ended before the READ completed), -EIO (checksum mismatch, or a provider
 * error), -ETIMEDOUT (retry exceeded, or no completion in time),
 * -EACCES (remote access refused), -ECANCELED (flushed or not posted: the
 * queue pair failed first), -EFAULT (dst not registered), or the error of
 * setting up a queue pair. Returns the number of items read and verified,
 * or -EINVAL. */
int kvt_rdma_read(struct kvt_rdma *r, const char *peer, struct kvt_rdma_item *items, size_t n,
		  unsigned timeout_ms);

void kvt_rdma_stats(struct kvt_rdma *r, struct kvt_rdma_stats *out);

/* Destroy every queue pair, deregister, close the device. NULL is accepted. */
void kvt_rdma_close(struct kvt_rdma *r);

#endif /* KVT_CLUSTER_PEER_RDMA_H */
