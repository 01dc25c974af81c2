/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's RDMA side in a cluster (see daemon_rdma.h). */
#include "app/daemon_rdma.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "app/daemon_log.h"
#include "cluster/peer_tier.h"
#include "transport/prom_text.h"
#include "transport/stats_json.h"

/* Log why `device` did not open, naming the devices libibverbs does find;
 * returns the error to stop the start with (-ENODEV: no such device). */
static int open_failed(const char *device, const struct kvt_verbs_ops *verbs, int err)
{
	const struct kvt_verbs_ops *v = verbs ? verbs : kvt_verbs_ibv();
	char names[16][32], list[16 * 33] = "";
	int n = v ? v->devices(names, 16) : -EOPNOTSUPP;
	bool present = false;

	for (int i = 0; i < n && i < 16; i++) {
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "", names[i]);
		present = present || strcmp(names[i], device) == 0;
	}
	if (!v)
		kvtd_log(KVT_LOG_ERROR, "event=cluster.rdma.open_failed device=%s err=\"kvtierd was built "
			 "without libibverbs\" hint=\"remove rdma_device to run over TCP\"", device);
	else if (!present)
		kvtd_log(KVT_LOG_ERROR, "event=cluster.rdma.open_failed device=%s err=\"no such RDMA "
			 "device\" found=\"%s\" hint=\"%s\"", device, n > 0 ? list : "none",
			 n > 0 ? "set rdma_device to a device found (ibv_devices lists them)" :
			 "libibverbs finds no RDMA device on this machine; remove rdma_device to "
			 "run over TCP");
	else
		kvtd_log(KVT_LOG_ERROR, "event=cluster.rdma.open_failed device=%s err=\"%s\" found=\"%s\"",
			 device, kvt_strerror(err), list);
	return !v ? -EOPNOTSUPP : present ? err : -ENODEV;
}

int kvtd_rdma_open(const char *device, const struct kvt_verbs_ops *verbs, struct kvt_store *store,
		   struct kvt_peer_client *cli, struct kvt_node_info *self, struct kvt_rdma **rdma_out,
		   struct kvt_lease_table **leases_out)
{
	const struct kvt_verbs_attr *a;
	struct kvt_lease_table *leases = NULL;
	struct kvt_rdma *rdma = NULL;
	struct kvt_rdma_opts ro;
	struct kvt_lease_opts lo;
	uint64_t len;
	void *base;
	int err, n;

	*rdma_out = NULL;
	*leases_out = NULL;
	kvt_rdma_opts_init(&ro, sizeof(ro));
	ro.verbs = verbs;
	ro.device = device;
	ro.exchange_cb = kvt_peer_tier_rdma_exchange_cb;
	ro.release_cb = kvt_peer_tier_rdma_release_cb;
	ro.exchange_arg = cli;
	ro.log = kvtd_log_cb;
	err = kvt_rdma_open(&ro, &rdma);
	if (err)
		return open_failed(device, verbs, err);
	err = kvt_store_dram_region(store, &base, &len);
	if (!err)
		err = kvt_rdma_register(rdma, base, len, KVT_VERBS_REMOTE_READ);
	if (err) {
		kvtd_log(KVT_LOG_ERROR, "event=cluster.rdma.register_failed device=%s err=\"%s\"", device,
			 kvt_strerror(err));
		goto fail;
	}
	n = kvt_rdma_mrs(rdma, base, self->region.mrs, KVT_NODE_MAX_MRS);
	if (n < 1 || n > KVT_NODE_MAX_MRS) {
		kvtd_log(KVT_LOG_ERROR, "event=cluster.rdma.register_failed device=%s pieces=%d "
			 "err=\"more pieces than a node record holds (%d)\"", device, n, KVT_NODE_MAX_MRS);
		err = -E2BIG;
		goto fail;
	}
	kvt_lease_opts_init(&lo, sizeof(lo));
	lo.log = kvtd_log_cb;
	err = kvt_lease_table_open(&lo, &leases);
	if (err)
		goto fail;
	a = kvt_rdma_attr(rdma);
	self->transports |= KVT_NODE_RDMA;
	snprintf(self->rdma.device, sizeof(self->rdma.device), "%s", a->name);
	self->rdma.port = a->port;
	memcpy(self->rdma.gid, a->gid, sizeof(self->rdma.gid));
	self->rdma.lid = a->lid;
	self->region.base = (uintptr_t)base;
	self->region.bytes = len;
	self->region.n_mrs = (uint32_t)n;
	kvtd_log(KVT_LOG_INFO, "event=cluster.rdma.ready device=%s port=%u bytes=%" PRIu64 " pieces=%d",
		 a->name, a->port, len, n);
	*rdma_out = rdma;
	*leases_out = leases;
	return 0;
fail:
	kvt_rdma_close(rdma);
	return err;
}

/* ---- counters ---------------------------------------------------------- */

json_t *kvtd_rdma_json(struct kvt_rdma *rdma, struct kvt_lease_table *leases)
{
	json_t *o = json_object(), *l = json_object();
	struct kvt_rdma_stats rs;
	struct kvt_lease_stats ls;

	kvt_rdma_stats(rdma, &rs);
	kvt_lease_stats(leases, &ls);
	const struct kvt_json_count reads[] = {
		{ "reads", rs.reads },
		{ "bytes", rs.bytes },
		{ "posted", rs.posted },
		{ "registered_regions", rs.mrs },
		{ "qps_created", rs.qps_created },
		{ "qps_accepted", rs.qps_accepted },
		{ "qps_destroyed", rs.qps_destroyed },
		{ "retry_exceeded", rs.retry_exceeded },
		{ "remote_access_errors", rs.remote_access },
		{ "flushed", rs.flushed },
		{ "other_errors", rs.other_errors },
		{ "lease_expired", rs.lease_expired },
		{ "checksum_errors", rs.checksum_errors },
		{ "timeouts", rs.timeouts },
	};
	const struct kvt_json_count lent[] = {
		{ "active", ls.active },
		{ "blocks_held", ls.blocks_held },
		{ "granted", ls.granted },
		{ "returned", ls.returned },
		{ "expired", ls.expired },
		{ "refused", ls.refused },
	};

	KVT_JSON_SET_COUNTS(o, reads);
	KVT_JSON_SET_COUNTS(l, lent);
	json_object_set_new(o, "leases", l);
	return o;
}

void kvtd_rdma_prom(struct kvt_textbuf *b, struct kvt_rdma *rdma, struct kvt_lease_table *leases)
{
	struct kvt_rdma_stats rs;
	struct kvt_lease_stats ls;

	kvt_rdma_stats(rdma, &rs);
	kvt_lease_stats(leases, &ls);
	const struct kvt_prom_count reads[] = {
		{ "kvtier_rdma_reads_total", "counter",
		  "RDMA READs of peers' blocks that completed and verified.", rs.reads },
		{ "kvtier_rdma_read_bytes_total", "counter", "Bytes of those READs.", rs.bytes },
	};
	const struct kvt_prom_sample errors[] = {
		{ "retry_exceeded", rs.retry_exceeded },
		{ "remote_access", rs.remote_access },
		{ "flushed", rs.flushed },
		{ "lease_expired", rs.lease_expired },
		{ "checksum", rs.checksum_errors },
		{ "timeout", rs.timeouts },
		{ "other", rs.other_errors },
	};
	const struct kvt_prom_sample lent_now[] = {
		{ "leases", ls.active },
		{ "blocks", ls.blocks_held },
	};
	const struct kvt_prom_sample lent_ended[] = {
		{ "granted", ls.granted },
		{ "returned", ls.returned },
		{ "expired", ls.expired },
		{ "refused", ls.refused },
	};

	kvt_prom_counts(b, reads, KVT_COUNT_OF(reads));
	kvt_prom_labelled(b, "kvtier_rdma_errors_total", "counter", "RDMA READs that failed, by kind.",
			  "kind", errors, KVT_COUNT_OF(errors));
	kvt_prom_count(b, "kvtier_rdma_queue_pairs", "gauge",
		       "Queue pairs open (created and accepted, less destroyed).",
		       rs.qps_created + rs.qps_accepted - rs.qps_destroyed);
	kvt_prom_labelled(b, "kvtier_rdma_leases", "gauge",
			  "Leases lent to peers' READs now, and the blocks they hold.", "what",
			  lent_now, KVT_COUNT_OF(lent_now));
	kvt_prom_labelled(b, "kvtier_rdma_leases_total", "counter",
			  "Leases lent to peers, by how they ended.", "op", lent_ended,
			  KVT_COUNT_OF(lent_ended));
}
