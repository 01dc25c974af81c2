/* SPDX-License-Identifier: Apache-2.0 */
/* The libibverbs provider of the verbs ops (see verbs.h). Built when
 * libibverbs is found (KVT_HAVE_RDMA); otherwise kvt_verbs_ibv() is NULL and
 * the RDMA transport reports -EOPNOTSUPP. */
#include "cluster/verbs.h"

#ifndef KVT_HAVE_RDMA

const struct kvt_verbs_ops *kvt_verbs_ibv(void)
{
	return (const struct kvt_verbs_ops *)0;
}

#else

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <infiniband/verbs.h>

struct kvt_verbs_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t port;
	int gid_index;
	int max_rd_atom;
	struct kvt_verbs_attr attr;
};

struct kvt_verbs_mr {
	struct ibv_mr *mr;
};

struct kvt_verbs_qp {
	struct kvt_verbs_dev *dev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t psn;
};

static __thread char errbuf[160];

static int fail(int err, const char *what)
{
	snprintf(errbuf, sizeof(errbuf), "%s: %s", what, strerror(err));
	return -err;
}

static const char *ibv_errstr(void)
{
	return errbuf;
}

static int ibv_devices(char (*names)[32], int max)
{
	struct ibv_device **list;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list)
		return fail(errno ? errno : ENODEV, "ibv_get_device_list");
	for (int i = 0; i < n && i < max; i++)
		snprintf(names[i], 32, "%s", ibv_get_device_name(list[i]));
	ibv_free_device_list(list);
	return n;
}

static int ibv_open_dev(const char *device, uint8_t port, int gid_index,
			struct kvt_verbs_dev **out, struct kvt_verbs_attr *attr)
{
	struct ibv_device **list, *pick = NULL;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	struct kvt_verbs_dev *d;
	int n = 0, err;

	list = ibv_get_device_list(&n);
	if (!list)
		return fail(errno ? errno : ENODEV, "ibv_get_device_list");
	for (int i = 0; i < n && !pick; i++)
		if (!device || strcmp(device, ibv_get_device_name(list[i])) == 0)
			pick = list[i];
	if (!pick) {
		ibv_free_device_list(list);
		return fail(ENODEV, device ? device : "no RDMA device");
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		ibv_free_device_list(list);
		return -ENOMEM;
	}
	d->ctx = ibv_open_device(pick);
	snprintf(d->attr.name, sizeof(d->attr.name), "%s", ibv_get_device_name(pick));
	ibv_free_device_list(list);
	if (!d->ctx) {
		err = fail(errno ? errno : ENODEV, "ibv_open_device");
		goto fail_free;
	}
	if ((err = ibv_query_device(d->ctx, &da))) {
		err = fail(err, "ibv_query_device");
		goto fail_ctx;
	}
	if ((err = ibv_query_port(d->ctx, port, &pa))) {
		err = fail(err, "ibv_query_port");
		goto fail_ctx;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		err = fail(ENETDOWN, "port not active");
		goto fail_ctx;
	}
	memset(&gid, 0, sizeof(gid));
	if (gid_index >= 0 && (err = ibv_query_gid(d->ctx, port, gid_index, &gid))) {
		err = fail(err, "ibv_query_gid");
		goto fail_ctx;
	}
	if (pa.link_layer == IBV_LINK_LAYER_ETHERNET && gid.global.interface_id == 0 &&
	    gid.global.subnet_prefix == 0) {
		err = fail(EINVAL, "RoCE needs a GID: no GID at that index");
		goto fail_ctx;
	}
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		err = fail(errno ? errno : ENOMEM, "ibv_alloc_pd");
		goto fail_ctx;
	}
	d->port = port;
	d->gid_index = gid_index;
	d->max_rd_atom = da.max_qp_rd_atom > 0 ? da.max_qp_rd_atom : 1;
	d->attr.max_mr_size = da.max_mr_size;
	d->attr.max_qp_wr = (uint32_t)da.max_qp_wr;
	d->attr.max_msg_sz = pa.max_msg_sz;
	d->attr.port = port;
	d->attr.active_mtu = (uint8_t)pa.active_mtu;
	d->attr.lid = pa.lid;
	memcpy(d->attr.gid, gid.raw, 16);
	*attr = d->attr;
	*out = d;
	return 0;
fail_ctx:
	ibv_close_device(d->ctx);
fail_free:
	free(d);
	return err;
}

static void ibv_close_dev(struct kvt_verbs_dev *d)
{
	if (!d)
		return;
	ibv_dealloc_pd(d->pd);
	ibv_close_device(d->ctx);
	free(d);
}

static int ibv_reg(struct kvt_verbs_dev *d, void *addr, uint64_t len, unsigned access,
		   struct kvt_verbs_mr **out, uint32_t *lkey, uint32_t *rkey)
{
	int flags = 0;
	struct kvt_verbs_mr *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	if (access & KVT_VERBS_LOCAL_WRITE)
		flags |= IBV_ACCESS_LOCAL_WRITE;
	if (access & KVT_VERBS_REMOTE_READ)
		flags |= IBV_ACCESS_REMOTE_READ;
	m->mr = ibv_reg_mr(d->pd, addr, len, flags);
	if (!m->mr) {
		int err = fail(errno ? errno : ENOMEM, "ibv_reg_mr");

		free(m);
		return err;
	}
	*lkey = m->mr->lkey;
	*rkey = m->mr->rkey;
	*out = m;
	return 0;
}

static void ibv_dereg(struct kvt_verbs_mr *m)
{
	if (!m)
		return;
	ibv_dereg_mr(m->mr);
	free(m);
}

static int ibv_mkqp(struct kvt_verbs_dev *d, uint32_t max_wr, bool remote_read,
		    struct kvt_verbs_qp **out, struct kvt_peer_ep *local)
{
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };
	struct kvt_verbs_qp *q;
	int err;

	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->dev = d;
	q->cq = ibv_create_cq(d->ctx, (int)max_wr, NULL, NULL, 0);
	if (!q->cq) {
		err = fail(errno ? errno : ENOMEM, "ibv_create_cq");
		goto fail_free;
	}
	ia.send_cq = q->cq;
	ia.recv_cq = q->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = max_wr;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	q->qp = ibv_create_qp(d->pd, &ia);
	if (!q->qp) {
		err = fail(errno ? errno : ENOMEM, "ibv_create_qp");
		goto fail_cq;
	}
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = d->port;
	a.qp_access_flags = remote_read ? IBV_ACCESS_REMOTE_READ : 0;
	err = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS);
	if (err) {
		err = fail(err, "ibv_modify_qp(INIT)");
		goto fail_qp;
	}
	if (getrandom(&q->psn, sizeof(q->psn), 0) != sizeof(q->psn))
		q->psn = (uint32_t)(uintptr_t)q;
	q->psn &= 0xffffff;
	memset(local, 0, sizeof(*local));
	local->qpn = q->qp->qp_num;
	local->psn = q->psn;
	local->lid = d->attr.lid;
	local->port = d->port;
	local->mtu = d->attr.active_mtu;
	memcpy(local->gid, d->attr.gid, 16);
	*out = q;
	return 0;
fail_qp:
	ibv_destroy_qp(q->qp);
fail_cq:
	ibv_destroy_cq(q->cq);
fail_free:
	free(q);
	return err;
}

static bool gid_set(const uint8_t *g)
{
	for (int i = 0; i < 16; i++)
		if (g[i])
			return true;
	return false;
}

static int ibv_connect(struct kvt_verbs_qp *q, const struct kvt_peer_ep *r)
{
	struct kvt_verbs_dev *d = q->dev;
	struct ibv_qp_attr a = { 0 };
	int atom = d->max_rd_atom < 16 ? d->max_rd_atom : 16, err;

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)(r->mtu < d->attr.active_mtu ? r->mtu : d->attr.active_mtu);
	a.dest_qp_num = r->qpn;
	a.rq_psn = r->psn;
	a.max_dest_rd_atomic = (uint8_t)atom;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = r->lid;
	a.ah_attr.sl = 0;
	a.ah_attr.port_num = d->port;
	if (gid_set(r->gid)) { /* RoCE, or IB across subnets */
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)(d->gid_index < 0 ? 0 : d->gid_index);
		a.ah_attr.grh.hop_limit = 64;
	}
	err = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (err)
		return fail(err, "ibv_modify_qp(RTR)");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;   /* 4.096 us x 2^14 = 67 ms per try */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = q->psn;
	a.max_rd_atomic = (uint8_t)atom;
	err = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					       IBV_QP_MAX_QP_RD_ATOMIC);
	return err ? fail(err, "ibv_modify_qp(RTS)") : 0;
}

static int ibv_post(struct kvt_verbs_qp *q, const struct kvt_verbs_read *wrs, size_t n)
{
	struct ibv_send_wr *w, *bad = NULL;
	struct ibv_sge *sg;
	int err;

	if (n == 0)
		return 0;
	w = calloc(n, sizeof(*w));
	sg = calloc(n, sizeof(*sg));
	if (!w || !sg) {
		free(w);
		free(sg);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		sg[i].addr = (uint64_t)(uintptr_t)wrs[i].local;
		sg[i].length = wrs[i].len;
		sg[i].lkey = wrs[i].lkey;
		w[i].wr_id = wrs[i].wr_id;
		w[i].sg_list = &sg[i];
		w[i].num_sge = 1;
		w[i].opcode = IBV_WR_RDMA_READ;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].wr.rdma.remote_addr = wrs[i].remote;
		w[i].wr.rdma.rkey = wrs[i].rkey;
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
	}
	err = ibv_post_send(q->qp, w, &bad);
	/* on failure, bad is the first request not posted */
	size_t posted = !err ? n
			: bad ? (size_t)(((uintptr_t)bad - (uintptr_t)w) / sizeof(*w))
			      : 0;
	free(w);
	free(sg);
	if (err) {
		fail(err, "ibv_post_send");
		return posted ? (int)posted : -err;
	}
	return (int)n;
}

static int ibv_pollcq(struct kvt_verbs_qp *q, struct kvt_verbs_wc *wc, int max)
{
	struct ibv_wc w[64];
	int n;

	if (max > 64)
		max = 64;
	n = ibv_poll_cq(q->cq, max, w);
	if (n < 0)
		return fail(EIO, "ibv_poll_cq");
	for (int i = 0; i < n; i++) {
		wc[i].wr_id = w[i].wr_id;
		wc[i].vendor_err = w[i].vendor_err;
		switch (w[i].status) {
		case IBV_WC_SUCCESS:
			wc[i].status = KVT_WC_OK;
			break;
		case IBV_WC_RETRY_EXC_ERR:
		case IBV_WC_RNR_RETRY_EXC_ERR:
			wc[i].status = KVT_WC_RETRY_EXCEEDED;
			break;
		case IBV_WC_REM_ACCESS_ERR:
			wc[i].status = KVT_WC_REMOTE_ACCESS;
			break;
		case IBV_WC_WR_FLUSH_ERR:
			wc[i].status = KVT_WC_FLUSHED;
			break;
		default:
			wc[i].status = KVT_WC_OTHER_ERROR;
		}
	}
	return n;
}

static int ibv_seterr(struct kvt_verbs_qp *q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	int err = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);

	return err ? fail(err, "ibv_modify_qp(ERR)") : 0;
}

static void ibv_rmqp(struct kvt_verbs_qp *q)
{
	if (!q)
		return;
	ibv_destroy_qp(q->qp);
	ibv_destroy_cq(q->cq);
	free(q);
}

static const struct kvt_verbs_ops ibv_ops = {
	.name = "ibverbs",
	.devices = ibv_devices,
	.open = ibv_open_dev,
	.close = ibv_close_dev,
	.reg_mr = ibv_reg,
	.dereg_mr = ibv_dereg,
	.create_qp = ibv_mkqp,
	.connect_qp = ibv_connect,
	.post_reads = ibv_post,
	.poll = ibv_pollcq,
	.set_error = ibv_seterr,
	.destroy_qp = ibv_rmqp,
	.errstr = ibv_errstr,
};

const struct kvt_verbs_ops *kvt_verbs_ibv(void)
{
	return &ibv_ops;
}

#endif /* KVT_HAVE_RDMA */
