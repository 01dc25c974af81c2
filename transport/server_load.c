/* SPDX-License-Identifier: Apache-2.0 */
/* A LOAD on a copy worker: the blocks are acquired in windows (read up from
 * SSD, fetched from other nodes, or read straight into the engine's pages)
 * and each is delivered to engine memory as it comes in, the last ones
 * layer by layer. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/server_copy.h"

/* What a LOAD's blocks cost to deliver, by the tier LOOKUP saw them in. A
 * LOAD's reads overlap, so a block is charged the time from the delivery
 * before it (or from the LOAD's start) to its own, from acquiring it (an
 * SSD read, when it was there) to its last layer in engine memory; blocks
 * delivered together share theirs. What a LOAD charges adds up to the time
 * it took, so bytes over time is what each tier delivered. */
struct load_meter {
	uint64_t bytes[KVT_TIER_COUNT], ns[KVT_TIER_COUNT];
	uint64_t last_ns;         /* the last delivery, or the LOAD's start */
};

static void meter_delivered(struct load_meter *lm, const struct kvt_job *job, uint32_t first,
			    const struct kvt_slot *slots, uint32_t n)
{
	uint64_t now = kvt_now_ns(), share = (now - lm->last_ns) / n;

	lm->last_ns = now;
	for (uint32_t k = 0; k < n; k++) {
		uint8_t t = job->tiers[first + k];

		if (t <= KVT_TIER_NONE || t >= KVT_TIER_COUNT)
			continue;
		lm->bytes[t] += slots[k].len;
		lm->ns[t] += share;
	}
}

/* A LOAD goes through in windows of LOAD_WINDOW keys, each acquired on a
 * thread of its own (its SSD reads submitted, reaped and verified there),
 * two at a time: the next window's reads are in flight while the worker
 * copies this one's blocks to engine memory, so the device's queue does not
 * drain at a window's end, and checking reads and copying blocks run side
 * by side. The worker sends a window's blocks in order, each as soon as it
 * and every block before it are in; those of the LOAD's last window that
 * come in when nothing is left being read go together, layer by layer, so
 * each layer can be posted. A block after a miss is never sent: the LOAD's
 * result is a prefix. The two windows hold WINDOW slots at most. */
#define LOAD_WINDOW (WINDOW / 2)

/* Blocks on SSD, and those other nodes hold, go straight into engine memory
 * where the engine's pages are mapped here (kvt_read_into): no DRAM slot, no
 * copy. The reads of a window start only once every key before it was
 * found (in the index, or held by another node), so that no page after a
 * miss is written. */
struct load_plan {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t edge;            /* keys [0, edge) of the job were found */
	bool stop;                /* a miss (or a window that could not look):
	                           * no window reads straight from now on */
};

struct load_window {
	struct kvt_job *job;
	struct load_plan *plan;   /* NULL: every block through a DRAM slot */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	bool threaded;            /* acquired on thread (else by the worker) */
	bool overlapped;          /* started while the other window held slots */
	uint32_t got, want;       /* keys [got, got + want) */
	/* mu: what the acquirer reported */
	bool rep[LOAD_WINDOW];    /* res[k] is in: slots[k] lent when 0 and
	                           * not direct[k] */
	bool late[LOAD_WINDOW];   /* it came when nothing was left being read */
	bool direct[LOAD_WINDOW]; /* it is in engine memory already */
	int res[LOAD_WINDOW];
	bool finished;            /* kvt_acquire_many returned */
	/* the acquirer's own (kvt_acquire_many writes them) */
	int ares[LOAD_WINDOW];
	struct kvt_slot slots[LOAD_WINDOW];
	struct kvt_slot aslots[LOAD_WINDOW];
	struct kvt_key akeys[LOAD_WINDOW];
	uint32_t amap[LOAD_WINDOW];  /* key of the window of each acquired one */
	bool planned;             /* kvt_read_into looked at every key */
	struct iovec *iov;        /* LOAD_WINDOW blocks' pieces (plan only) */
	unsigned iovcnt[LOAD_WINDOW];
	const struct iovec *dst[LOAD_WINDOW];
};

static void report(struct load_window *lw, size_t k, int res, bool late, bool direct)
{
	pthread_mutex_lock(&lw->mu);
	lw->res[k] = res;
	lw->late[k] = late;
	lw->direct[k] = direct;
	lw->rep[k] = true;
	pthread_cond_signal(&lw->cv);
	pthread_mutex_unlock(&lw->mu);
}

/* Whether blocks can be read straight into m (copied directly, so not
 * through the device layer): mapped here, and few enough pieces for one
 * read (the store reads from SSD only into pieces of whole 4 KiB pages, for
 * O_DIRECT; from other nodes into any). */
static bool direct_ok(const struct kvt_engine_mem *m)
{
	return !m->layout && m->layers * m->kvn <= IOV_MAX;
}

/* kvt_acquire_many's report of its block j (the window's amap[j]), on the
 * acquirer's thread. */
static void on_landed(void *arg, size_t j, int res, size_t reading)
{
	struct load_window *lw = arg;
	uint32_t k = lw->amap[j];

	if (res == 0)
		lw->slots[k] = lw->aslots[j];
	report(lw, k, res, reading == 0, false);
}

/* kvt_read_into's report of block k: in engine memory, failed, or left for
 * the acquire after it (-EAGAIN; -EFAULT: engine memory did not hold what
 * was read, so it is read again through a DRAM slot). */
static void on_direct(void *arg, size_t k, int res, size_t reading)
{
	struct load_window *lw = arg;

	(void)reading;
	if (res == -EAGAIN || res == -EFAULT)
		return;
	lw->slots[k] = (struct kvt_slot){ .len = kvt_ns_block_bytes(lw->job->ns) };
	report(lw, k, res, false, res == 0);
}

/* kvt_read_into looked at the window's keys: found of them lead. */
static void on_planned(void *arg, size_t found)
{
	struct load_window *lw = arg;
	struct load_plan *p = lw->plan;

	pthread_mutex_lock(&p->mu);
	lw->planned = true;
	/* plan_wait let it look only once p->edge >= lw->got */
	if (found == lw->want && p->edge < lw->got + lw->want)
		p->edge = lw->got + lw->want;
	else if (found < lw->want)
		p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

/* Wait until every key before the window was found; false when a miss
 * (or a window that could not look) came first. */
static bool plan_wait(struct load_window *lw)
{
	struct load_plan *p = lw->plan;
	bool go;

	pthread_mutex_lock(&p->mu);
	while (!p->stop && p->edge < lw->got)
		pthread_cond_wait(&p->cv, &p->mu);
	go = !p->stop;
	pthread_mutex_unlock(&p->mu);
	return go;
}

static void plan_stop(struct load_plan *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

/* Read the window's blocks that are on SSD straight into engine memory;
 * the keys left (in DRAM, or not readable so) go to amap for the acquire. */
static uint32_t read_direct(struct load_window *lw)
{
	struct kvt_job *job = lw->job;
	struct kvt_read_into ri = { .dst = lw->dst, .dst_cnt = lw->iovcnt, .res = lw->ares,
				    .planned_cb = on_planned, .landed_cb = on_direct, .arg = lw };
	uint32_t left = 0, fault = 0;

	if (!plan_wait(lw) || kvt_read_into(job->ns, &job->keys[lw->got], lw->want, &ri) < 0 ||
	    !lw->planned) {
		/* nothing was read: everything through DRAM */
		plan_stop(lw->plan);
		for (uint32_t k = 0; k < lw->want; k++)
			lw->amap[k] = k;
		return lw->want;
	}
	for (uint32_t k = 0; k < lw->want; k++) {
		fault += lw->ares[k] == -EFAULT;
		if (lw->ares[k] == -EAGAIN || lw->ares[k] == -EFAULT)
			lw->amap[left++] = k;
	}
	if (fault) {
		char what[96];

		snprintf(what, sizeof(what), "%u blocks read again through DRAM, none dropped",
			 fault);
		kvt_job_engine_fault(job->conn->srv, job, -EFAULT, what);
	}
	return left;
}

/* Acquire the window's keys at once: those on SSD are read together
 * (straight into engine memory where it can be), and those only other
 * nodes hold are fetched by the store's peer tier, with a cluster; each is
 * reported as it lands. */
static void *acquire_main(void *arg)
{
	struct load_window *lw = arg;
	struct kvt_job *job = lw->job;
	uint32_t m = lw->want;
	int rc = 0;

	if (lw->plan) {
		m = read_direct(lw);
	} else {
		for (uint32_t k = 0; k < m; k++)
			lw->amap[k] = k;
	}
	for (uint32_t j = 0; j < m; j++)
		lw->akeys[j] = job->keys[lw->got + lw->amap[j]];
	if (m)
		rc = kvt_acquire_many(job->ns, lw->akeys, m, lw->aslots, lw->ares, on_landed, lw);

	pthread_mutex_lock(&lw->mu);
	/* a call that failed as a whole reported nothing */
	for (uint32_t k = 0; rc < 0 && k < lw->want; k++)
		if (!lw->rep[k]) {
			lw->res[k] = rc;
			lw->late[k] = true;
			lw->rep[k] = true;
		}
	lw->finished = true;
	pthread_cond_signal(&lw->cv);
	pthread_mutex_unlock(&lw->mu);
	return NULL;
}

/* Where block k of the window lands in engine memory, as pieces in the
 * order of a block ([layer][kv][page_bytes]). */
static void window_pieces(struct load_window *lw)
{
	const struct kvt_engine_mem *m = lw->job->mem;
	unsigned per = m->layers * m->kvn;

	for (uint32_t k = 0; k < lw->want; k++) {
		kvt_engine_mem_pieces(m, lw->job->pages[lw->got + k], lw->iov + (size_t)k * per);
		lw->dst[k] = lw->iov + (size_t)k * per;
		lw->iovcnt[k] = per;
	}
}

static void window_start(struct load_window *lw, struct kvt_job *job, uint32_t got,
			 uint32_t want, bool overlapped)
{
	lw->job = job;
	lw->got = got;
	lw->want = want;
	lw->overlapped = overlapped;
	lw->finished = false;
	lw->planned = false;
	memset(lw->rep, 0, sizeof(lw->rep));
	memset(lw->late, 0, sizeof(lw->late));
	memset(lw->direct, 0, sizeof(lw->direct));
	if (lw->plan)
		window_pieces(lw);
	lw->threaded = pthread_create(&lw->thread, NULL, acquire_main, lw) == 0;
	if (!lw->threaded)
		acquire_main(lw); /* no thread: acquired here, then sent */
}

/* Wait for the window's acquire to return and let go of the blocks lent
 * from `from` on that were not sent. */
static void window_end(struct load_window *lw, uint32_t from)
{
	if (lw->threaded)
		pthread_join(lw->thread, NULL);
	lw->threaded = false;
	for (uint32_t k = from; k < lw->want; k++)
		if (lw->res[k] == 0 && !lw->direct[k])
			kvt_release(lw->job->ns, &lw->slots[k]);
}

/* What the worker keeps for a LOAD. */
struct load_run {
	struct worker *w;
	struct kvt_job *job;
	const struct copy_ops *cp;
	struct load_meter lm;
	int err;                  /* a copy error, or -ECANCELED: nothing more is sent */
	/* the LOAD's timeline, logged at debug level */
	uint64_t first_ns;        /* its first delivery */
	uint32_t direct, copied;  /* blocks read straight into engine memory, copied */
};

/* Copy blocks [from, upto) of the window (every one in) to engine memory,
 * with layer progress or not, and let them go. A copy error keeps them
 * lent (window_end lets them go) and ends the LOAD's deliveries. */
static void deliver(struct load_run *lr, struct load_window *lw, uint32_t from, uint32_t upto,
		    bool progress)
{
	struct kvt_job *job = lr->job;
	struct kvt_server *srv = lr->w->srv;
	void *blocks[LOAD_WINDOW];
	uint32_t pages[LOAD_WINDOW];
	uint32_t n = upto - from, c = 0;
	int err = 0;

	/* blocks read straight into engine memory are there already */
	for (uint32_t k = from; k < upto; k++)
		if (!lw->direct[k]) {
			blocks[c] = lw->slots[k].data;
			pages[c++] = job->pages[lw->got + k];
		}
	if (c)
		err = lr->cp->scatter(lr->w, job, pages, blocks, c, progress);
	if (err) {
		lr->err = err;
		return;
	}
	meter_delivered(&lr->lm, job, lw->got + from, lw->slots + from, n);
	if (!lr->first_ns)
		lr->first_ns = lr->lm.last_ns;
	lr->copied += c;
	lr->direct += n - c;
	for (uint32_t k = from; k < upto; k++) {
		__atomic_add_fetch(&srv->c.scatter_bytes, lw->slots[k].len, __ATOMIC_RELAXED);
		if (!lw->direct[k])
			kvt_release(job->ns, &lw->slots[k]);
	}
}

/* Send the window's blocks in order as they come. Returns how many leading
 * blocks were sent; *miss gets the result of the one that ended the run
 * (0 when all were sent, or when the LOAD was cancelled or a copy failed:
 * lr->err). */
static uint32_t window_send(struct load_run *lr, struct load_window *lw, bool last, int *miss)
{
	uint32_t sent = 0;

	*miss = 0;
	while (sent < lw->want) {
		uint32_t upto;
		bool together = false;

		pthread_mutex_lock(&lw->mu);
		while (!lw->rep[sent])
			pthread_cond_wait(&lw->cv, &lw->mu);
		if (lw->res[sent]) {
			*miss = lw->res[sent];
			pthread_mutex_unlock(&lw->mu);
			break;
		}
		for (upto = sent; upto < lw->want && lw->rep[upto] && !lw->res[upto] &&
				  !(last && lw->late[upto]); upto++)
			;
		if (upto == sent) {
			/* the last window's blocks that came after every read:
			 * all of them at once, layer by layer */
			while (!lw->finished)
				pthread_cond_wait(&lw->cv, &lw->mu);
			for (upto = sent; upto < lw->want && !lw->res[upto]; upto++)
				;
			together = true;
		}
		pthread_mutex_unlock(&lw->mu);
		if (!lr->err && kvt_job_cancelled(lr->job))
			lr->err = -ECANCELED;
		if (lr->err)
			break;
		deliver(lr, lw, sent, upto, together);
		if (lr->err)
			break;
		sent = upto;
	}
	return sent;
}

/* Layer progress is posted for the last window, the one that completes
 * every layer of the request. */
int32_t kvt_run_load(struct worker *w, struct kvt_job *job)
{
	struct kvt_server *srv = w->srv;
	struct load_run lr = { .w = w, .job = job, .cp = kvt_copy_of(job),
			       .lm = { .last_ns = kvt_now_ns() } };
	uint64_t t0 = lr.lm.last_ns;
	struct load_window win[2];
	struct load_plan plan = { .edge = 0 };
	uint32_t got = 0, next = 0; /* next: the first key of no window yet */
	unsigned cur = 0, open = 0;
	bool direct = lr.cp == &kvt_direct_copy && direct_ok(job->mem);
	int err = 0;

	pthread_mutex_init(&plan.mu, NULL);
	pthread_cond_init(&plan.cv, NULL);
	for (int k = 0; k < 2; k++) {
		pthread_mutex_init(&win[k].mu, NULL);
		pthread_cond_init(&win[k].cv, NULL);
		win[k].threaded = false;
		win[k].iov = direct ? calloc((size_t)LOAD_WINDOW * job->mem->layers * job->mem->kvn,
					     sizeof(*win[k].iov)) : NULL;
		direct = direct && win[k].iov;
	}
	for (int k = 0; k < 2; k++)
		win[k].plan = direct ? &plan : NULL; /* both windows, or neither */
	for (;;) {
		struct load_window *lw;
		uint32_t m;
		int miss;

		/* the next windows' reads go out while this one is sent */
		while (open < 2 && next < job->n && !kvt_job_cancelled(job)) {
			uint32_t want = job->n - next < LOAD_WINDOW ? job->n - next : LOAD_WINDOW;

			window_start(&win[(cur + open) % 2], job, next, want, open > 0);
			next += want;
			open++;
		}
		if (!open) {
			if (got < job->n && !err)
				err = -ECANCELED;
			break;
		}
		lw = &win[cur];
		m = window_send(&lr, lw, lw->got + lw->want == job->n, &miss);
		window_end(lw, m);
		got += m;
		cur ^= 1;
		open--;
		if (lr.err)
			break;
		if (m == lw->want)
			continue;
		/* the window ended short: the other one's keys come after */
		if (open) {
			window_end(&win[cur], 0);
			cur ^= 1;
			open--;
		}
		next = got;
		/* no slot for now: go on from that key once what came went
		 * (a window started beside another may have found none) */
		if (miss == -ENOSPC && (m || lw->overlapped))
			continue;
		err = miss;
		break;
	}
	while (open) {
		window_end(&win[cur], 0);
		cur ^= 1;
		open--;
	}
	for (int k = 0; k < 2; k++) {
		pthread_mutex_destroy(&win[k].mu);
		pthread_cond_destroy(&win[k].cv);
		free(win[k].iov);
	}
	pthread_mutex_destroy(&plan.mu);
	pthread_cond_destroy(&plan.cv);
	if (lr.err)
		return lr.err;
	if (err == -ECANCELED)
		return err;
	if (got < job->n) {
		__atomic_add_fetch(&srv->c.load_misses, job->n - got, __ATOMIC_RELAXED);
		kvt_srv_log(srv, KVT_LOG_DEBUG, "event=load.short ticket=%llu blocks=%u of=%u err=\"%s\"",
			    (unsigned long long)job->ticket, got, job->n, kvt_strerror(err));
	}
	__atomic_add_fetch(&srv->c.load_blocks, got, __ATOMIC_RELAXED);
	kvt_srv_log(srv, KVT_LOG_DEBUG, "event=load.timeline ticket=%llu blocks=%u direct=%u "
		    "copied=%u first_us=%llu last_us=%llu", (unsigned long long)job->ticket, got,
		    lr.direct, lr.copied,
		    (unsigned long long)(lr.first_ns ? (lr.first_ns - t0) / 1000 : 0),
		    (unsigned long long)((lr.lm.last_ns - t0) / 1000));
	for (unsigned t = 0; t < KVT_TIER_COUNT; t++)
		if (lr.lm.bytes[t])
			kvt_tier_rates_add(&srv->rates, t, lr.lm.bytes[t], lr.lm.ns[t]);
	__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
	return !got && err == -ENOSPC ? err : (int32_t)got;
}
