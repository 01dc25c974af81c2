/* SPDX-License-Identifier: Apache-2.0 */
/* The verbs that the RDMA transport uses, as a const ops table: a real
 * provider over libibverbs (verbs_ibv.c, built where libibverbs is found)
 * and, in the tests, a fake one that records work requests, generates
 * completions and injects errors, so the transport's logic is tested
 * without a NIC.
 *
 * The table is one level above raw ibv_* calls: each op is one step the
 * transport takes (register memory, make an RC queue pair and connect it,
 * post a chain of READs, poll completions), and the provider owns the
 * ibverbs details (protection domain, completion queue, address vectors).
 * Every op returns 0 (or a count) or a negative errno; a provider keeps
 * its library's own message for the log (errstr). */
#ifndef KVT_CLUSTER_VERBS_H
#define KVT_CLUSTER_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/peer_proto.h" /* struct kvt_peer_ep */

struct kvt_verbs_dev;
struct kvt_verbs_mr;
struct kvt_verbs_qp;

/* What the opened device and port offer. */
struct kvt_verbs_attr {
	char name[32];
	uint64_t max_mr_size;     /* a larger region is registered in pieces */
	uint32_t max_qp_wr;
	uint32_t max_msg_sz;      /* the largest READ */
	uint8_t port;
	uint8_t active_mtu;       /* ibv_mtu: 1 (256) .. 5 (4096) */
	uint16_t lid;
	uint8_t gid[16];
};

enum kvt_verbs_access {
	KVT_VERBS_LOCAL_WRITE = 1u << 0,   /* READ destinations */
	KVT_VERBS_REMOTE_READ = 1u << 1,   /* what peers may read */
};

/* One RDMA READ: len bytes at (remote, rkey) into local (lkey). */
struct kvt_verbs_read {
	uint64_t wr_id;
	void *local;
	uint32_t lkey;
	uint32_t len;
	uint64_t remote;
	uint32_t rkey;
};

enum kvt_verbs_wc_status {
	KVT_WC_OK = 0,
	KVT_WC_RETRY_EXCEEDED,    /* the peer did not answer: gone, or the link */
	KVT_WC_REMOTE_ACCESS,     /* rkey or range refused by the peer */
	KVT_WC_FLUSHED,           /* not executed: the queue pair was in error */
	KVT_WC_OTHER_ERROR,
};

struct kvt_verbs_wc {
	uint64_t wr_id;
	enum kvt_verbs_wc_status status;
	uint32_t vendor_err;
};

struct kvt_verbs_ops {
	const char *name;
	/* Names of the devices present, up to max; returns how many exist. */
	int (*devices)(char (*names)[32], int max);
	/* Open a device (NULL: the first) and its port; attr describes them. */
	int (*open)(const char *device, uint8_t port, int gid_index, struct kvt_verbs_dev **out,
		    struct kvt_verbs_attr *attr);
	void (*close)(struct kvt_verbs_dev *dev);
	int (*reg_mr)(struct kvt_verbs_dev *dev, void *addr, uint64_t len, unsigned access,
		      struct kvt_verbs_mr **out, uint32_t *lkey, uint32_t *rkey);
	void (*dereg_mr)(struct kvt_verbs_mr *mr);
	/* An RC queue pair with its own completion queue, in INIT; `local`
	 * gets its endpoint. remote_read: peers may READ through it. */
	int (*create_qp)(struct kvt_verbs_dev *dev, uint32_t max_wr, bool remote_read,
			 struct kvt_verbs_qp **out, struct kvt_peer_ep *local);
	/* Move it to RTR and RTS towards `remote`. */
	int (*connect_qp)(struct kvt_verbs_qp *qp, const struct kvt_peer_ep *remote);
	/* Post wrs[0..n) as one chain, every one signalled. Returns how many
	 * were posted (fewer when the queue refused one), or -errno. */
	int (*post_reads)(struct kvt_verbs_qp *qp, const struct kvt_verbs_read *wrs, size_t n);
	/* Up to max completions; returns how many, or -errno. */
	int (*poll)(struct kvt_verbs_qp *qp, struct kvt_verbs_wc *wc, int max);
	/* Move the queue pair to ERROR: what is outstanding completes FLUSHED. */
	int (*set_error)(struct kvt_verbs_qp *qp);
	void (*destroy_qp)(struct kvt_verbs_qp *qp);
	/* The provider's message for the last failure (for the log). */
	const char *(*errstr)(void);
};

/* The libibverbs provider, or NULL when kvtier was built without RDMA. */
const struct kvt_verbs_ops *kvt_verbs_ibv(void);

#endif /* KVT_CLUSTER_VERBS_H */
