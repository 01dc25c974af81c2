/* SPDX-License-Identifier: Apache-2.0 */
/* A fake verbs provider for the RDMA transport's tests: memory regions,
 * queue pairs and READs in this process (a READ is a memcpy between two
 * registered regions, with the keys and ranges checked as a NIC would),
 * every work request recorded, completions generated in batches, and
 * errors injected on demand: retry exceeded, remote access, flush, silence,
 * corrupted bytes. One fabric per process: all regions of all "nodes" of a
 * test are in it. */
#ifndef KVT_TESTS_CLUSTER_VERBS_FAKE_H
#define KVT_TESTS_CLUSTER_VERBS_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/verbs.h"

#define FAKE_MAX_MRS 64
#define FAKE_LOG 8192

struct fake_mr_rec {
	uintptr_t addr;
	uint64_t len;
	unsigned access;
	uint32_t key;
	bool live;
};

struct fake_verbs {
	/* the device */
	int n_devices;            /* 0: open fails -ENODEV */
	uint64_t max_mr_size;
	uint32_t max_qp_wr;
	/* what happened */
	struct fake_mr_rec mrs[FAKE_MAX_MRS];
	int n_mrs;
	int qps_created, qps_destroyed, qps_connected, qps_remote_read;
	int post_calls, poll_calls, set_error_calls;
	size_t posted, longest_chain;
	int largest_poll;         /* most completions one poll returned */
	struct kvt_verbs_read log[FAKE_LOG];
	size_t n_log;
	/* what to do: indexes count READs posted since fake_reset */
	long fail_at;             /* this READ fails with fail_status; -1 none */
	enum kvt_verbs_wc_status fail_status;
	long corrupt_at;          /* this READ delivers one flipped byte; -1 none */
	bool stall;               /* no completion until the queue pair errors */
	int per_poll;             /* completions a poll may return (0: all asked) */
};

extern struct fake_verbs fake;
extern const struct kvt_verbs_ops fake_verbs_ops;

/* Forget everything; a device with max_mr_size and max_qp_wr. */
void fake_reset(uint64_t max_mr_size, uint32_t max_qp_wr);

#endif
