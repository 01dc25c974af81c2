/* SPDX-License-Identifier: Apache-2.0 */
/* The fake verbs provider (see verbs_fake.h). */
#include "verbs_fake.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct fake_verbs fake;

/* the owner side of a test runs on peer-server threads */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

struct kvt_verbs_dev {
	int unused;
};

struct kvt_verbs_mr {
	int index;
};

struct wc_q {
	struct kvt_verbs_wc *v;
	size_t head, n, cap;
};

struct kvt_verbs_qp {
	uint32_t qpn;
	bool remote_read, connected, error;
	struct wc_q done;         /* completions ready */
	struct wc_q stalled;      /* READs that will complete only by flushing */
};

static uint32_t next_qpn = 0x100, next_key = 0x1000;

void fake_reset(uint64_t max_mr_size, uint32_t max_qp_wr)
{
	pthread_mutex_lock(&mu);
	memset(&fake, 0, sizeof(fake));
	fake.n_devices = 1;
	fake.max_mr_size = max_mr_size;
	fake.max_qp_wr = max_qp_wr;
	fake.fail_at = -1;
	fake.corrupt_at = -1;
	pthread_mutex_unlock(&mu);
}

static void push(struct wc_q *q, uint64_t wr_id, enum kvt_verbs_wc_status s)
{
	if (q->head + q->n == q->cap) {
		if (q->head) {
			memmove(q->v, q->v + q->head, q->n * sizeof(*q->v));
			q->head = 0;
		} else {
			q->cap = q->cap ? 2 * q->cap : 64;
			q->v = realloc(q->v, q->cap * sizeof(*q->v));
		}
	}
	q->v[q->head + q->n++] = (struct kvt_verbs_wc){ .wr_id = wr_id, .status = s };
}

static int f_devices(char (*names)[32], int max)
{
	for (int i = 0; i < fake.n_devices && i < max; i++)
		strcpy(names[i], "fake0");
	return fake.n_devices;
}

static int f_open(const char *device, uint8_t port, int gid_index, struct kvt_verbs_dev **out,
		  struct kvt_verbs_attr *attr)
{
	if (fake.n_devices == 0 || (device && strcmp(device, "fake0")))
		return -ENODEV;
	*out = calloc(1, sizeof(**out));
	memset(attr, 0, sizeof(*attr));
	strcpy(attr->name, "fake0");
	attr->max_mr_size = fake.max_mr_size;
	attr->max_qp_wr = fake.max_qp_wr;
	attr->max_msg_sz = 1u << 31;
	attr->port = port;
	attr->active_mtu = 5;
	attr->lid = 1;
	attr->gid[15] = 1;
	return 0;
}

static void f_close(struct kvt_verbs_dev *d)
{
	free(d);
}

static int f_reg(struct kvt_verbs_dev *d, void *addr, uint64_t len, unsigned access,
		 struct kvt_verbs_mr **out, uint32_t *lkey, uint32_t *rkey)
{
	struct kvt_verbs_mr *m;

	if (len > fake.max_mr_size)
		return -EINVAL; /* as a NIC refuses a region over max_mr_size */
	pthread_mutex_lock(&mu);
	if (fake.n_mrs == FAKE_MAX_MRS) {
		pthread_mutex_unlock(&mu);
		return -ENOMEM;
	}
	m = calloc(1, sizeof(*m));
	m->index = fake.n_mrs++;
	fake.mrs[m->index] = (struct fake_mr_rec){ .addr = (uintptr_t)addr, .len = len,
						    .access = access, .key = next_key++, .live = true };
	*lkey = *rkey = fake.mrs[m->index].key;
	pthread_mutex_unlock(&mu);
	*out = m;
	return 0;
}

static void f_dereg(struct kvt_verbs_mr *m)
{
	pthread_mutex_lock(&mu);
	fake.mrs[m->index].live = false;
	pthread_mutex_unlock(&mu);
	free(m);
}

static int f_mkqp(struct kvt_verbs_dev *d, uint32_t max_wr, bool remote_read,
		  struct kvt_verbs_qp **out, struct kvt_peer_ep *local)
{
	struct kvt_verbs_qp *q = calloc(1, sizeof(*q));

	pthread_mutex_lock(&mu);
	q->qpn = next_qpn++;
	q->remote_read = remote_read;
	fake.qps_created++;
	fake.qps_remote_read += remote_read;
	pthread_mutex_unlock(&mu);
	memset(local, 0, sizeof(*local));
	local->qpn = q->qpn;
	local->psn = 7;
	local->lid = 1;
	local->port = 1;
	local->mtu = 5;
	*out = q;
	return 0;
}

static int f_connect(struct kvt_verbs_qp *q, const struct kvt_peer_ep *remote)
{
	pthread_mutex_lock(&mu);
	q->connected = remote->qpn != 0;
	fake.qps_connected++;
	pthread_mutex_unlock(&mu);
	return q->connected ? 0 : -EINVAL;
}

static const struct fake_mr_rec *find_mr(uint32_t key, uintptr_t addr, uint64_t len,
					 unsigned access)
{
	for (int i = 0; i < fake.n_mrs; i++) {
		const struct fake_mr_rec *m = &fake.mrs[i];

		if (m->live && m->key == key && (m->access & access) && addr >= m->addr &&
		    len <= m->len && addr - m->addr <= m->len - len)
			return m;
	}
	return NULL;
}

static int f_post(struct kvt_verbs_qp *q, const struct kvt_verbs_read *wrs, size_t n)
{
	pthread_mutex_lock(&mu);
	fake.post_calls++;
	if (n > fake.longest_chain)
		fake.longest_chain = n;
	for (size_t i = 0; i < n; i++) {
		const struct kvt_verbs_read *w = &wrs[i];
		long g = (long)fake.posted++;
		enum kvt_verbs_wc_status s = KVT_WC_OK;

		if (fake.n_log < FAKE_LOG)
			fake.log[fake.n_log++] = *w;
		if (q->error || !q->connected)
			s = KVT_WC_FLUSHED;
		else if (g == fake.fail_at)
			s = fake.fail_status;
		else if (!find_mr(w->lkey, (uintptr_t)w->local, w->len, KVT_VERBS_LOCAL_WRITE))
			s = KVT_WC_OTHER_ERROR; /* local protection error */
		else if (!find_mr(w->rkey, w->remote, w->len, KVT_VERBS_REMOTE_READ))
			s = KVT_WC_REMOTE_ACCESS;
		if (s != KVT_WC_OK)
			q->error = true; /* an RC queue pair stops at its first error */
		if (s == KVT_WC_OK && fake.stall) {
			push(&q->stalled, w->wr_id, KVT_WC_OK);
			continue;
		}
		if (s == KVT_WC_OK) {
			memcpy(w->local, (const void *)(uintptr_t)w->remote, w->len);
			if (g == fake.corrupt_at)
				((uint8_t *)w->local)[w->len / 2] ^= 0x40;
		}
		push(&q->done, w->wr_id, s);
	}
	pthread_mutex_unlock(&mu);
	return (int)n;
}

static int f_poll(struct kvt_verbs_qp *q, struct kvt_verbs_wc *wc, int max)
{
	int n;

	pthread_mutex_lock(&mu);
	fake.poll_calls++;
	if (fake.per_poll && max > fake.per_poll)
		max = fake.per_poll;
	n = q->done.n < (size_t)max ? (int)q->done.n : max;
	if (n)
		memcpy(wc, q->done.v + q->done.head, (size_t)n * sizeof(*wc));
	q->done.head += (size_t)n;
	q->done.n -= (size_t)n;
	if (n > fake.largest_poll)
		fake.largest_poll = n;
	pthread_mutex_unlock(&mu);
	return n;
}

static int f_seterr(struct kvt_verbs_qp *q)
{
	pthread_mutex_lock(&mu);
	fake.set_error_calls++;
	q->error = true;
	for (size_t i = 0; i < q->stalled.n; i++)
		push(&q->done, q->stalled.v[q->stalled.head + i].wr_id, KVT_WC_FLUSHED);
	q->stalled.n = 0;
	pthread_mutex_unlock(&mu);
	return 0;
}

static void f_rmqp(struct kvt_verbs_qp *q)
{
	pthread_mutex_lock(&mu);
	fake.qps_destroyed++;
	pthread_mutex_unlock(&mu);
	free(q->done.v);
	free(q->stalled.v);
	free(q);
}

static const char *f_errstr(void)
{
	return "fake provider";
}

const struct kvt_verbs_ops fake_verbs_ops = {
	.name = "fake",
	.devices = f_devices,
	.open = f_open,
	.close = f_close,
	.reg_mr = f_reg,
	.dereg_mr = f_dereg,
	.create_qp = f_mkqp,
	.connect_qp = f_connect,
	.post_reads = f_post,
	.poll = f_poll,
	.set_error = f_seterr,
	.destroy_qp = f_rmqp,
	.errstr = f_errstr,
};
