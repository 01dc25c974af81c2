/* SPDX-License-Identifier: Apache-2.0 */
/* The RDMA peer transport (see peer_rdma.h). */
#include "cluster/peer_rdma.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "transport/sockio.h"
#include "util/block_sum.h"
#include "util/log.h"

#define MAX_QPS_PER_READ 16

struct mr {
	struct kvt_verbs_mr *h;
	uintptr_t addr;
	uint64_t len;
	unsigned access;
	uint32_t lkey, rkey;
};

/* A queue pair: the owner's (tied to a connection) or a reader's (pooled
 * per peer, holding the exchange's connection). */
struct qp {
	struct qp *next;
	struct kvt_verbs_qp *h;
	uint64_t conn;            /* owner */
	char peer[KVT_PEER_ID_MAX + 64]; /* reader */
	void *xconn;              /* reader: from exchange_cb */
};

struct kvt_rdma {
	struct kvt_rdma_opts o;
	const struct kvt_verbs_ops *v;
	struct kvt_verbs_dev *dev;
	struct kvt_verbs_attr attr;
	pthread_mutex_t mu;
	struct mr *mrs;
	size_t n_mrs;
	struct qp *owner_qps;
	struct qp *idle;          /* reader queue pairs not in use */
	struct kvt_rdma_stats st;
};

void kvt_rdma_opts_init(struct kvt_rdma_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->port = 1;
	opts->qps_per_peer = 2;
	opts->max_wr = 64;
	opts->poll_batch = 32;
	opts->mr_overlap = 64ull << 20;
}

#define rlog(r, lvl, ...) kvt_log_to((r)->o.log, (r)->o.log_arg, lvl, __VA_ARGS__)

static const char *verr(const struct kvt_rdma *r)
{
	return r->v->errstr ? r->v->errstr() : "";
}

int kvt_rdma_open(const struct kvt_rdma_opts *o, struct kvt_rdma **out)
{
	struct kvt_rdma *r;
	int err;

	if (!o || !out || o->size != sizeof(*o) || !o->qps_per_peer ||
	    o->qps_per_peer > MAX_QPS_PER_READ || !o->max_wr || !o->poll_batch || !o->port)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->o = *o;
	r->o.device = NULL;
	r->v = o->verbs ? o->verbs : kvt_verbs_ibv();
	if (!r->v) {
		free(r);
		return -EOPNOTSUPP;
	}
	err = r->v->open(o->device, o->port, o->gid_index, &r->dev, &r->attr);
	if (err) {
		free(r);
		return err;
	}
	if (r->o.max_wr > r->attr.max_qp_wr)
		r->o.max_wr = r->attr.max_qp_wr;
	pthread_mutex_init(&r->mu, NULL);
	rlog(r, KVT_LOG_INFO, "event=rdma.open provider=%s device=%s port=%u mtu=%u max_mr=%" PRIu64,
	     r->v->name, r->attr.name, r->attr.port, 128u << r->attr.active_mtu, r->attr.max_mr_size);
	*out = r;
	return 0;
}

const struct kvt_verbs_attr *kvt_rdma_attr(const struct kvt_rdma *r)
{
	return &r->attr;
}

/* ---- memory ------------------------------------------------------------ */

int kvt_rdma_register(struct kvt_rdma *r, void *base, uint64_t len, unsigned access)
{
	uint64_t max = r->attr.max_mr_size, step, off = 0;
	size_t first, n;
	struct mr *grown;
	int err = 0;

	if (!base || !len || (access != KVT_VERBS_REMOTE_READ && access != KVT_VERBS_LOCAL_WRITE))
		return -EINVAL;
	if (len <= max) {
		step = len;
	} else {
		/* overlapping pieces: a block up to mr_overlap never straddles two */
		if (max <= r->o.mr_overlap)
			return -EINVAL;
		step = max - r->o.mr_overlap;
	}
	n = len <= max ? 1 : (size_t)((len - max + step - 1) / step) + 1;
	pthread_mutex_lock(&r->mu);
	grown = realloc(r->mrs, (r->n_mrs + n) * sizeof(*r->mrs));
	if (!grown) {
		pthread_mutex_unlock(&r->mu);
		return -ENOMEM;
	}
	r->mrs = grown;
	first = r->n_mrs;
	for (size_t i = 0; i < n; i++, off += step) {
		struct mr *m = &r->mrs[first + i];
		uint64_t piece = len - off < max ? len - off : max;

		m->addr = (uintptr_t)base + off;
		m->len = piece;
		m->access = access;
		err = r->v->reg_mr(r->dev, (void *)m->addr, piece, access, &m->h, &m->lkey, &m->rkey);
		if (err) {
			rlog(r, KVT_LOG_ERROR, "event=rdma.reg_mr_failed bytes=%" PRIu64 " err=\"%s\"",
			     piece, verr(r));
			for (size_t j = first; j < first + i; j++)
				r->v->dereg_mr(r->mrs[j].h);
			break;
		}
	}
	if (!err) {
		r->n_mrs += n;
		r->st.mrs = (uint32_t)r->n_mrs;
	}
	pthread_mutex_unlock(&r->mu);
	return err;
}

int kvt_rdma_key(struct kvt_rdma *r, const void *addr, uint64_t len, unsigned access,
		 uint32_t *key)
{
	uintptr_t a = (uintptr_t)addr;
	int err = -ENOENT;

	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < r->n_mrs; i++) {
		const struct mr *m = &r->mrs[i];

		if (m->access == access && a >= m->addr && len <= m->len && a - m->addr <= m->len - len) {
			*key = access == KVT_VERBS_REMOTE_READ ? m->rkey : m->lkey;
			err = 0;
			break;
		}
	}
	pthread_mutex_unlock(&r->mu);
	return err;
}

int kvt_rdma_mrs(struct kvt_rdma *r, const void *base, struct kvt_node_mr *out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < r->n_mrs; i++) {
		const struct mr *m = &r->mrs[i];

		if (m->access != KVT_VERBS_REMOTE_READ || m->addr < (uintptr_t)base)
			continue;
		if (n < max)
			out[n] = (struct kvt_node_mr){ .off = m->addr - (uintptr_t)base, .len = m->len,
						       .rkey = m->rkey };
		n++;
	}
	pthread_mutex_unlock(&r->mu);
	return (int)n;
}

/* ---- owner ------------------------------------------------------------- */

int kvt_rdma_accept(struct kvt_rdma *r, uint64_t conn, const struct kvt_peer_ep *remote,
		    struct kvt_peer_ep *local)
{
	struct qp *q = calloc(1, sizeof(*q));
	int err;

	if (!q)
		return -ENOMEM;
	err = r->v->create_qp(r->dev, 1, true, &q->h, local);
	if (!err) {
		err = r->v->connect_qp(q->h, remote);
		if (err)
			r->v->destroy_qp(q->h);
	}
	if (err) {
		rlog(r, KVT_LOG_WARN, "event=rdma.accept_failed conn=%" PRIu64 " err=\"%s\"", conn,
		     verr(r));
		free(q);
		return err;
	}
	q->conn = conn;
	pthread_mutex_lock(&r->mu);
	q->next = r->owner_qps;
	r->owner_qps = q;
	r->st.qps_accepted++;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

void kvt_rdma_conn_closed(struct kvt_rdma *r, uint64_t conn)
{
	struct qp **p, *q, *gone = NULL;

	pthread_mutex_lock(&r->mu);
	p = &r->owner_qps;
	while ((q = *p)) {
		if (q->conn == conn) {
			*p = q->next;
			q->next = gone;
			gone = q;
			r->st.qps_destroyed++;
		} else {
			p = &q->next;
		}
	}
	pthread_mutex_unlock(&r->mu);
	while (gone) {
		q = gone->next;
		r->v->destroy_qp(gone->h);
		free(gone);
		gone = q;
	}
}

static int hook_rkey(void *arg, const void *addr, uint64_t len, uint32_t *rkey)
{
	return kvt_rdma_key(arg, addr, len, KVT_VERBS_REMOTE_READ, rkey);
}

static int hook_accept(void *arg, uint64_t conn, const struct kvt_peer_ep *remote,
		       struct kvt_peer_ep *local)
{
	return kvt_rdma_accept(arg, conn, remote, local);
}

static void hook_closed(void *arg, uint64_t conn)
{
	kvt_rdma_conn_closed(arg, conn);
}

struct kvt_peer_rdma_hooks kvt_rdma_owner_hooks(struct kvt_rdma *r)
{
	return (struct kvt_peer_rdma_hooks){ .rkey_cb = hook_rkey, .accept_qp_cb = hook_accept,
					     .conn_closed_cb = hook_closed, .arg = r };
}

/* ---- reader ------------------------------------------------------------ */

static void qp_destroy(struct kvt_rdma *r, struct qp *q)
{
	r->v->destroy_qp(q->h);
	if (r->o.release_cb && q->xconn)
		r->o.release_cb(r->o.exchange_arg, q->xconn);
	pthread_mutex_lock(&r->mu);
	r->st.qps_destroyed++;
	pthread_mutex_unlock(&r->mu);
	free(q);
}

/* A pooled queue pair to peer, or a new one connected through exchange_cb. */
static struct qp *qp_get(struct kvt_rdma *r, const char *peer, int *err)
{
	struct kvt_peer_ep local, remote;
	struct qp **p, *q;

	pthread_mutex_lock(&r->mu);
	for (p = &r->idle; (q = *p); p = &q->next)
		if (strcmp(q->peer, peer) == 0) {
			*p = q->next;
			break;
		}
	pthread_mutex_unlock(&r->mu);
	if (q)
		return q;
	if (!r->o.exchange_cb) {
		*err = -ENOTCONN;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		*err = -ENOMEM;
		return NULL;
	}
	snprintf(q->peer, sizeof(q->peer), "%s", peer);
	*err = r->v->create_qp(r->dev, r->o.max_wr, false, &q->h, &local);
	if (*err) {
		free(q);
		return NULL;
	}
	*err = r->o.exchange_cb(r->o.exchange_arg, peer, &local, &remote, &q->xconn);
	if (!*err)
		*err = r->v->connect_qp(q->h, &remote);
	if (*err) {
		rlog(r, KVT_LOG_WARN, "event=rdma.connect_failed peer=%s err=\"%s\"", peer,
		     kvt_strerror(*err));
		qp_destroy(r, q);
		return NULL;
	}
	pthread_mutex_lock(&r->mu);
	r->st.qps_created++;
	pthread_mutex_unlock(&r->mu);
	return q;
}

static void qp_put(struct kvt_rdma *r, struct qp *q)
{
	uint32_t same = 0;

	pthread_mutex_lock(&r->mu);
	for (struct qp *x = r->idle; x; x = x->next)
		same += strcmp(x->peer, q->peer) == 0;
	if (same < r->o.qps_per_peer) {
		q->next = r->idle;
		r->idle = q;
		q = NULL;
	}
	pthread_mutex_unlock(&r->mu);
	if (q)
		qp_destroy(r, q);
}

/* One queue pair's share of a read: items idx[0..n) of the caller's array. */
struct lane {
	struct qp *q;
	size_t *idx, n, next_post, outstanding;
	bool broken;
};

static int wc_errno(enum kvt_verbs_wc_status s)
{
	switch (s) {
	case KVT_WC_RETRY_EXCEEDED:
		return -ETIMEDOUT;
	case KVT_WC_REMOTE_ACCESS:
		return -EACCES;
	case KVT_WC_FLUSHED:
		return -ECANCELED;
	default:
		return -EIO;
	}
}

/* Post what fits in the lane's queue. */
static void post_more(struct kvt_rdma *r, struct lane *l, struct kvt_rdma_item *items,
		      struct kvt_verbs_read *wrs, struct kvt_rdma_stats *st)
{
	size_t room = r->o.max_wr - l->outstanding, k = 0;
	int posted;

	if (l->broken)
		return;
	while (k < room && l->next_post < l->n) {
		size_t i = l->idx[l->next_post++];
		struct kvt_rdma_item *it = &items[i];
		uint32_t lkey;

		if (kvt_rdma_key(r, it->dst, it->len, KVT_VERBS_LOCAL_WRITE, &lkey)) {
			it->status = -EFAULT;
			continue;
		}
		wrs[k++] = (struct kvt_verbs_read){ .wr_id = i, .local = it->dst, .lkey = lkey,
						    .len = it->len, .remote = it->remote,
						    .rkey = it->rkey };
	}
	if (k == 0)
		return;
	posted = r->v->post_reads(l->q->h, wrs, k);
	if (posted < 0)
		posted = 0;
	l->outstanding += (size_t)posted;
	st->posted += (uint64_t)posted;
	if ((size_t)posted < k) {
		/* the queue refused the rest: the queue pair is not to be trusted */
		rlog(r, KVT_LOG_WARN, "event=rdma.post_failed peer=%s posted=%d of=%zu err=\"%s\"",
		     l->q->peer, posted, k, verr(r));
		for (size_t j = (size_t)posted; j < k; j++)
			items[wrs[j].wr_id].status = -ECANCELED;
		l->broken = true;
	}
}

/* A completed READ: its bytes count only inside the lease and with the
 * owner's checksum. */
static void complete(struct kvt_rdma *r, struct kvt_rdma_item *it, const struct kvt_verbs_wc *wc,
		     struct lane *l, struct kvt_rdma_stats *st)
{
	if (wc->status != KVT_WC_OK) {
		it->status = wc_errno(wc->status);
		st->retry_exceeded += wc->status == KVT_WC_RETRY_EXCEEDED;
		st->remote_access += wc->status == KVT_WC_REMOTE_ACCESS;
		st->flushed += wc->status == KVT_WC_FLUSHED;
		st->other_errors += wc->status == KVT_WC_OTHER_ERROR;
		if (!l->broken && wc->status != KVT_WC_FLUSHED)
			rlog(r, KVT_LOG_WARN, "event=rdma.wc_error peer=%s status=%d vendor_err=%u",
			     l->q->peer, (int)wc->status, wc->vendor_err);
		l->broken = true;
		return;
	}
	if (kvt_now_ns() >= it->valid_until_ns) {
		it->status = -ESTALE; /* the owner may have let the slot go */
		st->lease_expired++;
		return;
	}
	if (kvt_block_sum(it->dst, it->len) != it->xxh3) {
		it->status = -EIO;
		st->checksum_errors++;
		return;
	}
	it->status = 0;
	st->reads++;
	st->bytes += it->len;
}

int kvt_rdma_read(struct kvt_rdma *r, const char *peer, struct kvt_rdma_item *items, size_t n,
		  unsigned timeout_ms)
{
	struct lane lanes[MAX_QPS_PER_READ] = { { 0 } };
	struct kvt_verbs_wc *wc = NULL;
	struct kvt_verbs_read *wrs = NULL;
	struct kvt_rdma_stats st = { 0 };
	uint64_t deadline = kvt_deadline_ms(timeout_ms);
	size_t k, *idx = NULL, left;
	int err = 0, ok = 0;

	if (!r || !peer || (n && !items) || !timeout_ms)
		return -EINVAL;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		items[i].status = -EINPROGRESS;
		if (items[i].len == 0 || items[i].len > r->attr.max_msg_sz)
			items[i].status = -EINVAL;
	}
	k = n < r->o.qps_per_peer ? n : r->o.qps_per_peer;
	idx = malloc(n * sizeof(*idx));
	wc = malloc(r->o.poll_batch * sizeof(*wc));
	wrs = malloc(r->o.max_wr * sizeof(*wrs));
	if (!idx || !wc || !wrs) {
		err = -ENOMEM;
		goto fail_all;
	}
	for (size_t j = 0; j < k; j++) {
		lanes[j].q = qp_get(r, peer, &err);
		if (!lanes[j].q) {
			k = j;
			break;
		}
	}
	if (k == 0)
		goto fail_all;
	/* contiguous runs per queue pair, skipping items already refused */
	{
		size_t m = 0, per, extra, at = 0;

		for (size_t i = 0; i < n; i++)
			if (items[i].status == -EINPROGRESS)
				idx[m++] = i;
		per = m / k;
		extra = m % k;
		for (size_t j = 0; j < k; j++) {
			lanes[j].idx = idx + at;
			lanes[j].n = per + (j < extra);
			at += lanes[j].n;
		}
	}
	left = 0;
	for (size_t j = 0; j < k; j++)
		left += lanes[j].n;
	while (left) {
		bool idle = true;

		for (size_t j = 0; j < k; j++) {
			struct lane *l = &lanes[j];
			int got;

			post_more(r, l, items, wrs, &st);
			if (!l->outstanding)
				continue;
			got = r->v->poll(l->q->h, wc, (int)r->o.poll_batch);
			st.polls++;
			if (got <= 0)
				continue;
			idle = false;
			st.completions += (uint64_t)got;
			for (int c = 0; c < got; c++) {
				if (wc[c].wr_id >= n)
					continue; /* not ours: a provider bug, never trusted */
				complete(r, &items[wc[c].wr_id], &wc[c], l, &st);
				l->outstanding--;
			}
		}
		left = 0;
		for (size_t j = 0; j < k; j++) {
			struct lane *l = &lanes[j];

			if (l->broken)
				while (l->next_post < l->n) /* never posted: not attempted */
					items[l->idx[l->next_post++]].status = -ECANCELED;
			left += l->outstanding + (l->n - l->next_post);
		}
		if (left && kvt_now_ns() >= deadline) {
			/* Out of time: move the late queue pairs to ERROR so what is
			 * outstanding flushes, then take those completions (the
			 * destinations must not be written after we return). */
			uint64_t drain = kvt_deadline_ms(1000);

			for (size_t j = 0; j < k; j++) {
				struct lane *l = &lanes[j];

				if (!l->outstanding && l->next_post == l->n)
					continue;
				r->v->set_error(l->q->h);
				l->broken = true;
				while (l->next_post < l->n)
					items[l->idx[l->next_post++]].status = -ETIMEDOUT;
				while (l->outstanding && kvt_now_ns() < drain) {
					int got = r->v->poll(l->q->h, wc, (int)r->o.poll_batch);

					for (int c = 0; c < got; c++)
						if (wc[c].wr_id < n) {
							items[wc[c].wr_id].status = -ETIMEDOUT;
							l->outstanding--;
						}
					if (got <= 0)
						sched_yield();
				}
				st.timeouts++;
			}
			for (size_t i = 0; i < n; i++)
				if (items[i].status == -EINPROGRESS)
					items[i].status = -ETIMEDOUT;
			break;
		}
		if (idle)
			sched_yield();
	}
	for (size_t j = 0; j < k; j++) {
		if (lanes[j].broken)
			qp_destroy(r, lanes[j].q);
		else
			qp_put(r, lanes[j].q);
	}
	for (size_t i = 0; i < n; i++) {
		if (items[i].status == -EINPROGRESS) /* a lane that got no queue pair */
			items[i].status = err ? err : -ECANCELED;
		ok += items[i].status == 0;
	}
	pthread_mutex_lock(&r->mu);
	r->st.reads += st.reads;
	r->st.bytes += st.bytes;
	r->st.posted += st.posted;
	r->st.completions += st.completions;
	r->st.polls += st.polls;
	r->st.retry_exceeded += st.retry_exceeded;
	r->st.remote_access += st.remote_access;
	r->st.flushed += st.flushed;
	r->st.other_errors += st.other_errors;
	r->st.lease_expired += st.lease_expired;
	r->st.checksum_errors += st.checksum_errors;
	r->st.timeouts += st.timeouts;
	pthread_mutex_unlock(&r->mu);
	free(idx);
	free(wc);
	free(wrs);
	return ok;
fail_all:
	for (size_t i = 0; i < n; i++)
		if (items[i].status == -EINPROGRESS)
			items[i].status = err;
	free(idx);
	free(wc);
	free(wrs);
	return 0;
}

void kvt_rdma_stats(struct kvt_rdma *r, struct kvt_rdma_stats *out)
{
	pthread_mutex_lock(&r->mu);
	*out = r->st;
	pthread_mutex_unlock(&r->mu);
}

void kvt_rdma_close(struct kvt_rdma *r)
{
	if (!r)
		return;
	while (r->idle) {
		struct qp *q = r->idle;

		r->idle = q->next;
		qp_destroy(r, q);
	}
	while (r->owner_qps) {
		struct qp *q = r->owner_qps;

		r->owner_qps = q->next;
		r->v->destroy_qp(q->h);
		free(q);
	}
	for (size_t i = 0; i < r->n_mrs; i++)
		r->v->dereg_mr(r->mrs[i].h);
	free(r->mrs);
	r->v->close(r->dev);
	pthread_mutex_destroy(&r->mu);
	free(r);
}
