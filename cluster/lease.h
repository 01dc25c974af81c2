/* SPDX-License-Identifier: Apache-2.0 */
/* Leases on blocks an owner lends to remote readers.
 *
 * Before a peer reads blocks straight out of this node's DRAM slots (RDMA
 * one-sided READs), it asks for a lease: each block is acquired through the
 * public store API (kvt_acquire_local: this node's blocks only, staged
 * from SSD into DRAM if need be, then neither evicted nor moved while
 * held) and checksummed, and the reply tells where its bytes are. The
 * lease ends when the reader returns it, when the connection it was
 * granted on closes, or when it expires; then the blocks are released. A reader uses what it read only if its read completed
 * before the lease's end as measured from its own send time (the owner's
 * clock started later, so it held the block at least that long) and the
 * checksum matches.
 *
 * Thread-safe. A background thread expires leases. */
#ifndef KVT_CLUSTER_LEASE_H
#define KVT_CLUSTER_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier/store.h"
#include "kvtier/log.h" /* kvt_log_cb */

struct kvt_lease_opts {
	size_t size;            /* sizeof(struct kvt_lease_opts), set by _init */
	uint32_t max_blocks;    /* blocks held by all leases together (65536) */
	uint32_t max_lease_ms;  /* longer requests are cut to this (10000) */
	kvt_log_cb log;
	void *log_arg;
};

/* One block of a lease. */
struct kvt_lease_grant {
	int status;             /* 0, or the kvt_acquire_local error (-ENOENT, ...) */
	struct kvt_key key;
	const void *data;       /* the slot (status 0) */
	uint64_t len;
	uint64_t generation;    /* unique to this grant of this block, never 0 */
	uint64_t xxh3;          /* XXH3-64 of the block's bytes */
};

struct kvt_lease_stats {
	uint64_t active;        /* leases now */
	uint64_t blocks_held;
	uint64_t granted, returned, expired, refused;
};

struct kvt_lease_table;

void kvt_lease_opts_init(struct kvt_lease_opts *opts, size_t size_bytes);

/* Returns 0 and *out, -EINVAL, -ENOMEM, or the pthread_create error. */
int kvt_lease_table_open(const struct kvt_lease_opts *opts, struct kvt_lease_table **out);

/* Lease keys[0..n) of ns for lease_ms (cut to max_lease_ms; *granted_ms
 * says how long) to `owner`, a tag naming who holds it (a connection).
 * out[i] tells each block's fate; blocks that cannot be acquired are simply
 * not held. Returns 0 with *lease_id (never 0), or -ENOSPC (more than
 * max_blocks would be held: nothing granted), -EINVAL, -ENOMEM. */
int kvt_lease_grant(struct kvt_lease_table *t, struct kvt_ns *ns, const struct kvt_key *keys,
		    uint32_t n, uint32_t lease_ms, uint64_t owner, uint32_t *granted_ms,
		    struct kvt_lease_grant *out, uint64_t *lease_id);

/* Return a lease early. Returns the number of blocks released, or -ENOENT
 * (unknown, already expired, or another owner's). */
int kvt_lease_return(struct kvt_lease_table *t, uint64_t lease_id, uint64_t owner);

/* Return every lease of owner (its connection closed). Returns how many. */
int kvt_lease_return_owner(struct kvt_lease_table *t, uint64_t owner);

void kvt_lease_stats(struct kvt_lease_table *t, struct kvt_lease_stats *out);

/* Release every lease and stop the thread. NULL is accepted. The store must
 * still be open. */
void kvt_lease_table_close(struct kvt_lease_table *t);

#endif /* KVT_CLUSTER_LEASE_H */
