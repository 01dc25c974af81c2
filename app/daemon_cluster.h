/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd in a cluster: what the daemon holds when --cluster is given.
 *
 *  - joins the directory (Redis) under its node id and peer address at
 *    start, and leaves it at close;
 *  - serves this node's blocks to authenticated peers (the peer server;
 *    SSD-resident blocks are staged into DRAM by kvt_acquire);
 *  - writes a hint when a SAVE stores blocks, republishes the hints of the
 *    blocks it saved last when it rejoins under a new epoch, and forgets a
 *    hint when a peer asks for a block this node no longer holds;
 *  - adds the peer tier to the store (cluster/peer_tier.h), so LOOKUP and
 *    LOAD reach other nodes' blocks through the store, as they reach the
 *    SSD tier's;
 *  - the cluster's counters for STATS and /metrics.
 *
 * Built with the cluster feature (KVT_HAVE_CLUSTER); without it, open
 * fails (the configuration already refuses --cluster) and the rest does
 * nothing. */
#ifndef KVT_APP_DAEMON_CLUSTER_H
#define KVT_APP_DAEMON_CLUSTER_H

#include <errno.h>
#include <stdio.h>

#include "app/daemon_config.h"
#include "kvtier/store.h"
#include "transport/server.h"

struct kvtd_cluster;

#ifdef KVT_HAVE_CLUSTER
/* Join the cluster cfg names (cfg->cluster non-empty): read the secret,
 * listen for peers, open the directory (which joins on its own thread, so
 * an unreachable Redis only means local-only until it answers), and add
 * the peer tier to store. Fills *hooks for the sidecar server. Returns 0
 * and *out, or -errno with the reason logged. */
int kvtd_cluster_open(const struct kvtd_config *cfg, struct kvt_store *store,
		      struct kvt_server_hooks *hooks, struct kvtd_cluster **out);

/* One line for the start-up summary. */
void kvtd_cluster_describe(struct kvtd_cluster *cl, FILE *f);

/* Leave the directory, close the peer server and the connections to
 * peers. The sidecar server must be closed first. NULL is accepted. */
void kvtd_cluster_close(struct kvtd_cluster *cl);
#else
static inline int kvtd_cluster_open(const struct kvtd_config *cfg, struct kvt_store *store,
				    struct kvt_server_hooks *hooks, struct kvtd_cluster **out)
{
	(void)cfg, (void)store, (void)hooks, (void)out;
	return -EOPNOTSUPP;
}

static inline void kvtd_cluster_describe(struct kvtd_cluster *cl, FILE *f)
{
	(void)cl, (void)f;
}

static inline void kvtd_cluster_close(struct kvtd_cluster *cl)
{
	(void)cl;
}
#endif

#endif /* KVT_APP_DAEMON_CLUSTER_H */
