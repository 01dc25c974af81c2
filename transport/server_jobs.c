/* SPDX-License-Identifier: Apache-2.0 */
/* The copy workers of the sidecar server: SAVE gathers engine pages into
 * reserved DRAM slots and commits them; LOAD acquires the blocks (bringing
 * them up from SSD when needed) and scatters each into engine pages as it
 * comes in, the last ones layer by layer, posting a progress note after
 * each layer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier/device.h"
#include "transport/server_int.h"

void kvt_job_free(struct kvt_job *job)
{
	if (!job)
		return;
	kvt_engine_mem_put(job->mem);
	free(job->keys);
	free(job->pages);
	free(job->tiers);
	free(job);
}

void kvt_job_release_arrays(struct kvt_job *job)
{
	free(job->keys);
	free(job->pages);
	free(job->tiers);
	job->keys = NULL;
	job->pages = NULL;
	job->tiers = NULL;
}

void kvt_jobs_notify(struct kvt_server *srv, struct kvt_job *job, bool final)
{
	uint64_t one = 1;
	bool wake = false;

	pthread_mutex_lock(&srv->nlock);
	if (final)
		job->note_final = true;
	/* already queued: the loop will see the latest state when it takes it */
	if (!job->note_queued) {
		job->note_queued = true;
		job->note_next = NULL;
		if (srv->note_tail) {
			srv->note_tail->note_next = job;
		} else {
			/* the loop drains the list whole: only an empty one needs a wake */
			srv->note_head = job;
			wake = true;
		}
		srv->note_tail = job;
	}
	pthread_mutex_unlock(&srv->nlock);
	if (wake && write(srv->wake.fd, &one, sizeof(one)) < 0) {
		/* the eventfd counter is saturated: the loop is awake anyway */
	}
}

static bool cancelled(const struct kvt_job *job)
{
	return __atomic_load_n(&job->conn->dead, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&job->conn->srv->stop, __ATOMIC_ACQUIRE) > 1;
}

/* Blocks a worker holds at once (reserved or acquired) before copying them:
 * a request of more blocks goes through in windows, so that no request needs
 * more DRAM slots than the tier has. A window also ends early when the store
 * has no slot to give (-ENOSPC): what it holds is copied and let go first. */
#define WINDOW 64

/* A copy worker. Its device streams and event are created on first use,
 * one set per device layer backend it copies through, and kept. */
struct worker_dev {
	struct kvt_dev *dev;
	struct kvt_dev_stream *stream[2]; /* [0] saves, [1] loads (high priority) */
	struct kvt_dev_event *ev;
};

struct worker {
	struct kvt_server *srv;
	struct worker_dev devs[2];        /* the cuda and the host backend */
};

/* The two copy back ends: engine memory mapped by the daemon and copied
 * with memcpy (direct), or reached through the device layer. */
struct copy_ops {
	/* Copy engine pages[k] into blocks[k], k < n. Returns 0 or -errno. */
	int (*gather)(struct worker *w, struct kvt_job *job, const uint32_t *pages,
		      void *const *blocks, size_t n);
	/* Copy blocks[k] into engine pages[k]. With progress, job->layers_done
	 * advances (and a note is posted) as each layer of all n is in place. */
	int (*scatter)(struct worker *w, struct kvt_job *job, const uint32_t *pages,
		       void *const *blocks, size_t n, bool progress);
};

static void layer_done(struct kvt_server *srv, struct kvt_job *job, uint32_t layer)
{
	__atomic_store_n(&job->layers_done, (int)layer + 1, __ATOMIC_RELEASE);
	if (layer + 1 < job->mem->layers)
		kvt_jobs_notify(srv, job, false);
}

/* ---- direct copies of mapped engine memory ------------------------------ */

static int direct_gather(struct worker *w, struct kvt_job *job, const uint32_t *pages,
			 void *const *blocks, size_t n)
{
	for (size_t k = 0; k < n; k++)
		kvt_engine_mem_gather(job->mem, pages[k], blocks[k]);
	return 0;
}

static int direct_scatter(struct worker *w, struct kvt_job *job, const uint32_t *pages,
			  void *const *blocks, size_t n, bool progress)
{
	for (uint32_t l = 0; l < job->mem->layers; l++) {
		for (size_t k = 0; k < n; k++)
			kvt_engine_mem_scatter_layer(job->mem, pages[k], l, blocks[k]);
		if (progress)
			layer_done(w->srv, job, l);
	}
	return 0;
}

static const struct copy_ops direct_copy = { direct_gather, direct_scatter };

/* ---- copies through the device layer (CUDA, or its host backend) -------- */

/* The worker's stream (save or load) and event on dev, created if need be. */
static int worker_stream(struct worker *w, struct kvt_dev *dev, bool load,
			 struct kvt_dev_stream **stream, struct kvt_dev_event **ev)
{
	struct worker_dev *wd = NULL;
	int err;

	for (size_t k = 0; k < 2 && !wd; k++)
		if (w->devs[k].dev == dev || !w->devs[k].dev)
			wd = &w->devs[k];
	if (!wd)
		return -ENODEV; /* a server has at most two device layer backends */
	wd->dev = dev;
	if (!wd->stream[load]) {
		err = kvt_dev_stream_create(dev, load, &wd->stream[load]);
		if (err)
			return err;
	}
	if (!wd->ev) {
		err = kvt_dev_event_create(dev, &wd->ev);
		if (err)
			return err;
	}
	*stream = wd->stream[load];
	*ev = wd->ev;
	return 0;
}

static void worker_dev_reset(struct worker_dev *wd)
{
	kvt_dev_event_destroy(wd->ev);
	kvt_dev_stream_destroy(wd->stream[0]);
	kvt_dev_stream_destroy(wd->stream[1]);
	memset(wd, 0, sizeof(*wd));
}

/* Drop the worker's stream and event on dev after an error: the next job
 * starts from new ones rather than from a stream in an unknown state. */
static void worker_dev_drop(struct worker *w, struct kvt_dev *dev)
{
	for (size_t k = 0; k < 2; k++)
		if (w->devs[k].dev == dev)
			worker_dev_reset(&w->devs[k]);
}

struct layer_ctx {
	struct kvt_server *srv;
	struct kvt_job *job;
};

/* A scatter's layer is in engine memory (on a backend thread). */
static void on_layer(void *arg, uint32_t layer)
{
	struct layer_ctx *x = arg;

	layer_done(x->srv, x->job, layer);
}

/* Gather (save) or scatter (load) n blocks on the worker's stream and wait
 * for them. Returns 0 or -errno (logged with the backend's message). */
static int dev_xfer(struct worker *w, struct kvt_job *job, bool save, const uint32_t *pages,
		    void *const *blocks, size_t n, bool progress)
{
	struct kvt_engine_mem *m = job->mem;
	struct layer_ctx ctx = { w->srv, job };
	struct kvt_dev_xfer_opts o;
	struct kvt_dev_stream *stream = NULL;
	struct kvt_dev_event *ev = NULL;
	int err;

	err = worker_stream(w, m->dev, !save, &stream, &ev);
	if (err)
		goto out;
	kvt_dev_xfer_opts_init(&o, sizeof(o));
	if (progress) {
		o.layer_cb = on_layer;
		o.layer_cb_arg = &ctx;
	}
	err = save ? kvt_dev_gather(m->layout, stream, pages, n, blocks, &o)
		   : kvt_dev_scatter(m->layout, stream, pages, n, (const void *const *)blocks, &o);
	if (!err)
		err = kvt_dev_event_record(ev, stream);
	if (!err)
		err = kvt_dev_event_wait(ev);
	else
		kvt_dev_stream_sync(stream); /* nothing may still run on these buffers */
out:
	if (err) {
		kvt_srv_log(w->srv, KVT_LOG_WARN, "event=%s.device_error ticket=%llu err=\"%s\" "
			    "dev=\"%s\"", save ? "save" : "load", (unsigned long long)job->ticket,
			    kvt_strerror(err), kvt_dev_last_error());
		worker_dev_drop(w, m->dev);
	}
	return err;
}

static int dev_gather(struct worker *w, struct kvt_job *job, const uint32_t *pages,
		      void *const *blocks, size_t n)
{
	return dev_xfer(w, job, true, pages, blocks, n, false);
}

static int dev_scatter(struct worker *w, struct kvt_job *job, const uint32_t *pages,
		       void *const *blocks, size_t n, bool progress)
{
	return dev_xfer(w, job, false, pages, blocks, n, progress);
}

static const struct copy_ops device_copy = { dev_gather, dev_scatter };

static const struct copy_ops *copy_of(const struct kvt_job *job)
{
	return job->mem->layout ? &device_copy : &direct_copy;
}

/* ---- SAVE --------------------------------------------------------------- */

/* Gather a window of reserved slots and commit them (abort them all when
 * the copy fails). Returns 0 or the copy's error. */
static int save_window(struct worker *w, struct kvt_job *job, struct kvt_slot *slots,
		       void **blocks, const uint32_t *pages, uint32_t m)
{
	struct kvt_server *srv = w->srv;
	int err = m ? copy_of(job)->gather(w, job, pages, blocks, m) : 0;

	for (uint32_t k = 0; k < m; k++) {
		if (err) {
			kvt_abort(job->ns, &slots[k]);
			continue;
		}
		if (kvt_commit(job->ns, &slots[k]) == 0) {
			__atomic_add_fetch(&srv->c.save_blocks, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&srv->c.gather_bytes, slots[k].len, __ATOMIC_RELAXED);
		}
	}
	return err;
}

/* Result: the number of leading keys stored after the SAVE (newly saved or
 * already present), or a negative errno when the first one fails. */
static int32_t run_save(struct worker *w, struct kvt_job *job)
{
	struct kvt_slot slots[WINDOW];
	void *blocks[WINDOW];
	uint32_t pages[WINDOW];
	uint32_t i = 0, m = 0, first = 0; /* first: key of slots[0] */
	int err = 0;

	while (i < job->n) {
		const struct kvt_key *parent = i ? &job->keys[i - 1] :
					       job->has_parent ? &job->parent : NULL;

		if (cancelled(job)) {
			err = -ECANCELED;
			break;
		}
		if (!m)
			first = i;
		err = kvt_reserve_class(job->ns, &job->keys[i], parent, job->reuse_class,
					&slots[m]);
		if (err == -EEXIST) {
			__atomic_add_fetch(&w->srv->c.save_present, 1, __ATOMIC_RELAXED);
			err = 0;
			i++;
			continue;
		}
		if (err == -ENOSPC && m) {
			/* the tier has no slot for now: let this window go, retry i */
			err = save_window(w, job, slots, blocks, pages, m);
			m = 0;
			if (err) {
				i = first;
				break;
			}
			continue;
		}
		if (err)
			break;
		blocks[m] = slots[m].data;
		pages[m++] = job->pages[i++];
		if (m == WINDOW) {
			err = save_window(w, job, slots, blocks, pages, m);
			m = 0;
			if (err) {
				i = first;
				break;
			}
		}
	}
	if (m) {
		int xerr = save_window(w, job, slots, blocks, pages, m);

		if (xerr) {
			i = first;
			err = xerr;
		}
	}
	__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
	if (i && w->srv->opts.hooks.saved_cb) /* the cluster's hints */
		w->srv->opts.hooks.saved_cb(w->srv->opts.hooks.arg, job->ns, job->keys, i);
	return i == 0 && err ? err : (int32_t)i;
}

/* ---- LOAD --------------------------------------------------------------- */

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

/* A window of a LOAD, keys[got..got+want), being acquired. A block goes to
 * engine memory (and its slot back to the store) as soon as it and every
 * block before it in the window are in, while the window's other reads
 * still run; those that come in when nothing is left being read go
 * together once the acquire returns, layer by layer in the LOAD's last
 * window, so each layer can be posted. A block after a miss is never
 * scattered: the LOAD's result is a prefix. */
struct load_window {
	struct worker *w;
	struct kvt_job *job;
	const struct copy_ops *cp;
	struct load_meter *lm;
	uint32_t got, want;
	uint32_t sent;            /* blocks [0, sent) are in engine memory, let go */
	int err;                  /* a copy error, or -ECANCELED: nothing more is sent */
	bool in[WINDOW];          /* came in, not sent yet */
	int res[WINDOW];
	struct kvt_slot slots[WINDOW];
};

/* Scatter blocks [sent, upto) of the window (every one in), with layer
 * progress or not, and let them go. A copy error keeps them lent (the
 * caller lets them go) and ends the window's deliveries. */
static void deliver(struct load_window *lw, uint32_t upto, bool progress)
{
	struct kvt_job *job = lw->job;
	struct kvt_server *srv = lw->w->srv;
	void *blocks[WINDOW];
	uint32_t first = lw->sent, n = upto - first;
	int err;

	if (!n || lw->err)
		return;
	for (uint32_t k = 0; k < n; k++)
		blocks[k] = lw->slots[first + k].data;
	err = lw->cp->scatter(lw->w, job, job->pages + lw->got + first, blocks, n, progress);
	if (err) {
		lw->err = err;
		return;
	}
	meter_delivered(lw->lm, job, lw->got + first, lw->slots + first, n);
	for (uint32_t k = first; k < upto; k++) {
		__atomic_add_fetch(&srv->c.scatter_bytes, lw->slots[k].len, __ATOMIC_RELAXED);
		kvt_release(job->ns, &lw->slots[k]);
		lw->in[k] = false;
	}
	lw->sent = upto;
}

/* kvt_acquire_many's report of block k: sent at once when it extends the
 * window's delivered prefix and reads are still running. */
static void on_landed(void *arg, size_t k, int res, size_t reading)
{
	struct load_window *lw = arg;
	uint32_t upto = lw->sent;

	lw->in[k] = res == 0;
	if (!reading || lw->err)
		return;
	if (cancelled(lw->job)) {
		lw->err = -ECANCELED;
		return;
	}
	while (upto < lw->want && lw->in[upto])
		upto++;
	deliver(lw, upto, false);
}

/* Acquire the window's keys at once: those on SSD are read together, and
 * those only other nodes hold are fetched by the store's peer tier, with a
 * cluster; each is sent on as it lands. Returns m, the leading blocks of the
 * window that came (those not sent yet still lent in slots[sent..m)); *err
 * gets the miss that ended the prefix (0 when all came); what came after it
 * goes back. */
static uint32_t acquire_window(struct load_window *lw, int *err)
{
	struct kvt_job *job = lw->job;
	uint32_t want = lw->want, m = 0;
	int rc;

	lw->sent = 0;
	memset(lw->in, 0, sizeof(lw->in));
	rc = kvt_acquire_many(job->ns, &job->keys[lw->got], want, lw->slots, lw->res, on_landed,
			      lw);
	if (rc < 0) {
		*err = rc;
		return 0;
	}
	while (m < want && lw->res[m] == 0)
		m++;
	*err = m < want ? lw->res[m] : 0;
	for (uint32_t k = m + 1; k < want; k++)
		kvt_release(job->ns, &lw->slots[k]);
	return m;
}

/* Result: the number of leading blocks loaded (a miss ends the prefix), or a
 * negative errno when not even the first could be (-ENOSPC: the DRAM tier
 * had no slot to bring it up into). Layer progress is posted for the last
 * window, the one that completes every layer of the request. */
static int32_t run_load(struct worker *w, struct kvt_job *job)
{
	struct kvt_server *srv = w->srv;
	struct load_meter lm = { .last_ns = kvt_now_ns() };
	struct load_window window = { .w = w, .job = job, .cp = copy_of(job), .lm = &lm };
	struct load_window *lw = &window;
	uint32_t got = 0;
	int err = 0;
	bool last = false;

	while (!last) {
		uint32_t want = job->n - got < WINDOW ? job->n - got : WINDOW, m = 0;

		lw->got = got;
		lw->want = want;
		if (cancelled(job))
			err = -ECANCELED;
		else if (!err)
			m = acquire_window(lw, &err);
		/* -ENOSPC with blocks in hand: send them, let them go, go on */
		last = got + m == job->n || (err && (err != -ENOSPC || !m));
		deliver(lw, m, last);
		for (uint32_t k = lw->sent; k < m; k++)
			kvt_release(job->ns, &lw->slots[k]);
		if (lw->err)
			return lw->err;
		if (err == -ECANCELED)
			return err;
		got += m;
		if (err == -ENOSPC && !last)
			err = 0;
	}
	if (got < job->n) {
		__atomic_add_fetch(&srv->c.load_misses, job->n - got, __ATOMIC_RELAXED);
		kvt_srv_log(srv, KVT_LOG_DEBUG, "event=load.short ticket=%llu blocks=%u of=%u err=\"%s\"",
			    (unsigned long long)job->ticket, got, job->n, kvt_strerror(err));
	}
	__atomic_add_fetch(&srv->c.load_blocks, got, __ATOMIC_RELAXED);
	for (unsigned t = 0; t < KVT_TIER_COUNT; t++)
		if (lm.bytes[t])
			kvt_tier_rates_add(&srv->rates, t, lm.bytes[t], lm.ns[t]);
	__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
	return !got && err == -ENOSPC ? err : (int32_t)got;
}

static void *worker_main(void *arg)
{
	struct worker w = { .srv = arg };
	struct kvt_server *srv = w.srv;
	struct kvt_job *job;

	for (;;) {
		pthread_mutex_lock(&srv->qlock);
		while (!srv->qhead && !srv->qstop)
			pthread_cond_wait(&srv->qcond, &srv->qlock);
		job = srv->qhead;
		if (!job) {
			pthread_mutex_unlock(&srv->qlock);
			break;
		}
		srv->qhead = job->qnext;
		if (!srv->qhead)
			srv->qtail = NULL;
		job->qnext = NULL;
		pthread_mutex_unlock(&srv->qlock);

		job->result = job->op == KVT_OP_SAVE ? run_save(&w, job) : run_load(&w, job);
		kvt_jobs_notify(srv, job, true);
	}
	for (size_t k = 0; k < 2; k++)
		worker_dev_reset(&w.devs[k]);
	return NULL;
}

void kvt_jobs_submit(struct kvt_server *srv, struct kvt_job *job)
{
	__atomic_add_fetch(&srv->busy_jobs, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&srv->qlock);
	job->qnext = NULL;
	if (srv->qtail)
		srv->qtail->qnext = job;
	else
		srv->qhead = job;
	srv->qtail = job;
	pthread_cond_signal(&srv->qcond);
	pthread_mutex_unlock(&srv->qlock);
}

int kvt_jobs_start(struct kvt_server *srv)
{
	unsigned n = srv->opts.workers ? srv->opts.workers : 4;

	srv->threads = calloc(n, sizeof(*srv->threads));
	if (!srv->threads)
		return -ENOMEM;
	for (; srv->n_threads < n; srv->n_threads++) {
		int err = pthread_create(&srv->threads[srv->n_threads], NULL, worker_main, srv);
		if (err) {
			kvt_jobs_stop(srv);
			return -err;
		}
	}
	return 0;
}

/* Workers finish the queue before they leave. */
void kvt_jobs_stop(struct kvt_server *srv)
{
	pthread_mutex_lock(&srv->qlock);
	srv->qstop = true;
	pthread_cond_broadcast(&srv->qcond);
	pthread_mutex_unlock(&srv->qlock);
	for (unsigned i = 0; i < srv->n_threads; i++)
		pthread_join(srv->threads[i], NULL);
	free(srv->threads);
	srv->threads = NULL;
	srv->n_threads = 0;
}
