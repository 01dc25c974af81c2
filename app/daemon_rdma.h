/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's RDMA side in a cluster (--rdma-device): the device opened, the
 * store's DRAM region registered for peers' READs, the lease table that
 * lends blocks to them, and what the node's directory record says of both. */
#ifndef KVT_APP_DAEMON_RDMA_H
#define KVT_APP_DAEMON_RDMA_H

#include <jansson.h>

#include "cluster/directory.h"
#include "cluster/lease.h"
#include "kvtier/store.h"
#include "cluster/peer_client.h"
#include "cluster/peer_rdma.h"
#include "transport/textbuf.h"

/* Open `device` through verbs (NULL: libibverbs), register the store's DRAM
 * region REMOTE_READ only (the peer tier registers it LOCAL_WRITE for its
 * own reads when the store adds it), open the lease table, and fill self's
 * RDMA connection data and region descriptor (transports gains
 * KVT_NODE_RDMA). Queue pairs to peers are set up over cli. On failure the
 * reason is logged (for a device that does not open: the devices found)
 * and nothing stays open. Returns 0 and both handles (the caller closes
 * them: the lease table before the RDMA handle), -ENODEV (no such device),
 * -EOPNOTSUPP (built without libibverbs), -E2BIG (the region needs more
 * pieces than a record holds), or the transport's error. */
int kvtd_rdma_open(const char *device, const struct kvt_verbs_ops *verbs, struct kvt_store *store,
		   struct kvt_peer_client *cli, struct kvt_node_info *self, struct kvt_rdma **rdma,
		   struct kvt_lease_table **leases);

/* The RDMA side's counters: this node's READs of peers' blocks (rdma) and
 * the leases it lends to peers' READs (leases), as the "rdma" object of
 * STATS' cluster section (a new reference) and as /metrics lines appended to b. */
json_t *kvtd_rdma_json(struct kvt_rdma *rdma, struct kvt_lease_table *leases);
void kvtd_rdma_prom(struct kvt_textbuf *b, struct kvt_rdma *rdma, struct kvt_lease_table *leases);

#endif /* KVT_APP_DAEMON_RDMA_H */
