/* SPDX-License-Identifier: Apache-2.0 */
/* The owner's side of the peer transport: a TCP listener that serves this
 * node's blocks to authenticated peers.
 *
 * Each connection is served by its own thread (a bounded number): the
 * cluster handshake first (peer_auth.h: a peer without the secret gets
 * nothing), then GET requests answered block by block from the DRAM slots
 * (kvt_acquire_local stages an SSD block into DRAM first, and never asks
 * other nodes; header and bytes leave in one sendmsg straight from the
 * slot, no staging copy), LEASE and RELEASE for RDMA readers, and
 * QP_CONNECT through the RDMA hooks. A peer that stops reading fails its
 * send after timeout_ms without progress; a malformed frame gets an error
 * reply, a broken stream closes only that connection.
 *
 * Blocks are found by their namespace's salt through find_ns_cb, so the
 * server names no namespace registry of its own. */
#ifndef KVT_CLUSTER_PEER_SERVER_H
#define KVT_CLUSTER_PEER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/store.h"
#include "cluster/peer_auth.h"
#include "kvtier/log.h" /* kvt_log_cb */

struct kvt_lease_table;

/* What the RDMA owner side provides (peer_rdma.h fills it); all optional. */
struct kvt_peer_rdma_hooks {
	/* The rkey of the registered memory holding [addr, addr + len);
	 * 0 or -ENOENT. */
	int (*rkey_cb)(void *arg, const void *addr, uint64_t len, uint32_t *rkey);
	/* Create a queue pair for the reader at `remote`, tied to connection
	 * conn; fill `local`. 0 or -errno. */
	int (*accept_qp_cb)(void *arg, uint64_t conn, const struct kvt_peer_ep *remote,
			    struct kvt_peer_ep *local);
	/* Connection conn closed: destroy its queue pairs. */
	void (*conn_closed_cb)(void *arg, uint64_t conn);
	void *arg;
};

struct kvt_peer_server_opts {
	size_t size;                /* sizeof(struct kvt_peer_server_opts), set by _init */
	const char *listen;         /* "ADDR:PORT"; port 0 picks one (kvt_peer_server_port) */
	const char *node_id;        /* this node, told to peers (kvt_node_id_valid) */
	const struct kvt_peer_secret *secret; /* required; copied */
	/* The namespace whose salt is `salt`, or NULL (the request fails with
	 * -EBADF). Called from connection threads. */
	struct kvt_ns *(*find_ns_cb)(void *arg, const struct kvt_key *salt);
	void *find_ns_arg;
	/* Optional: a GET asked for key of ns and this node does not hold it
	 * (evicted since its hint was written). Called with find_ns_arg,
	 * from connection threads. */
	void (*miss_cb)(void *arg, struct kvt_ns *ns, const struct kvt_key *key);
	struct kvt_lease_table *leases; /* NULL: LEASE answered -EOPNOTSUPP */
	struct kvt_peer_rdma_hooks rdma; /* rkey_cb NULL: no RDMA offered */
	unsigned timeout_ms;        /* handshake; a frame once begun; a send without
	                             * progress (5000) */
	unsigned max_conns;         /* connections at once; more are closed (256) */
	kvt_log_cb log;
	void *log_arg;
	/* Connections in their handshake hold a descriptor and a poll entry,
	 * no thread and none of max_conns' places: anyone who can reach the
	 * port, secret or not, can hold max_unauth of them for at most
	 * auth_timeout_ms, never a node's place. Past max_unauth one is cut,
	 * never the new one (a node's connection from a flooded address proves
	 * the secret within a round trip; the flood's never do, and are the
	 * older): the oldest of the address holding the most when it holds
	 * max_unauth_per_source or more, else the oldest. A node is cut only if
	 * max_unauth connections arrive during its round trip. */
	unsigned auth_timeout_ms;   /* the handshake's deadline (2000; at most timeout_ms) */
	unsigned max_unauth;        /* in all (1024; at most 4096, and an eighth
	                             * of the open-file limit) */
	unsigned max_unauth_per_source; /* from one address before its own are
	                             * cut first (8) */
};

struct kvt_peer_server_stats {
	uint64_t conns;             /* connections now, in their handshake or not */
	uint64_t accepted, refused; /* refused: authenticated past max_conns */
	uint64_t auth_failures;     /* handshakes that failed: wrong secret, garbage,
	                             * silence past auth_timeout_ms */
	uint64_t unauth_dropped;    /* connections cut in their handshake for the
	                             * max_unauth* bounds */
	uint64_t requests, bad_requests;
	uint64_t blocks_sent, bytes_sent;
	uint64_t misses;            /* blocks asked for and not held */
	uint64_t send_errors;       /* connections lost while sending */
	uint64_t leases;
};

struct kvt_peer_server;

void kvt_peer_server_opts_init(struct kvt_peer_server_opts *opts, size_t size_bytes);

/* Bind and start accepting. Returns 0 and *out, -EINVAL (bad opts), or the
 * bind/listen error (-EADDRINUSE, ...). */
int kvt_peer_server_open(const struct kvt_peer_server_opts *opts, struct kvt_peer_server **out);

/* The bound TCP port. */
int kvt_peer_server_port(const struct kvt_peer_server *srv);

void kvt_peer_server_stats(struct kvt_peer_server *srv, struct kvt_peer_server_stats *out);

/* Stop accepting, end every connection (blocks being sent are released),
 * join the threads. NULL is accepted. */
void kvt_peer_server_close(struct kvt_peer_server *srv);

#endif /* KVT_CLUSTER_PEER_SERVER_H */
