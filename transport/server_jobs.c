/* The copy workers of the sidecar server: SAVE gathers engine pages into
 * reserved DRAM slots and commits them; LOAD acquires the blocks (bringing
 * them up from SSD when needed) and scatters them into engine pages layer by
 * layer, posting a progress note after each layer. */
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
	free(job);
}

void kvt_job_release_arrays(struct kvt_job *job)
{
	free(job->keys);
	free(job->pages);
	job->keys = NULL;
	job->pages = NULL;
}

void kvt_jobs_notify(struct kvt_server *srv, struct kvt_job *job, bool final)
{
	uint64_t one = 1;
	bool wake;

	if (!final && __atomic_exchange_n(&job->notify_pending, 1, __ATOMIC_ACQ_REL))
		return; /* one progress note in the queue is enough */
	pthread_mutex_lock(&srv->nlock);
	if (srv->n_notes == srv->cap_notes) {
		size_t cap = srv->cap_notes ? srv->cap_notes * 2 : 64;
		void *p = realloc(srv->notes, cap * sizeof(*srv->notes));
		if (!p) {
			/* progress is advisory; a final note must not be lost, so
			 * retry until memory comes back */
			pthread_mutex_unlock(&srv->nlock);
			if (!final) {
				__atomic_store_n(&job->notify_pending, 0, __ATOMIC_RELEASE);
				return;
			}
			usleep(1000);
			kvt_jobs_notify(srv, job, final);
			return;
		}
		srv->notes = p;
		srv->cap_notes = cap;
	}
	srv->notes[srv->n_notes].job = job;
	srv->notes[srv->n_notes].final = final;
	wake = srv->n_notes++ == 0;
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

/* ---- copies through the device layer (CUDA, or its host backend) -------- */

struct layer_ctx {
	struct kvt_server *srv;
	struct kvt_job *job;
};

/* A scatter's layer is in engine memory (on a backend thread). */
static void on_layer(void *arg, uint32_t layer)
{
	struct layer_ctx *x = arg;

	__atomic_store_n(&x->job->layers_done, (int)layer + 1, __ATOMIC_RELEASE);
	if (layer + 1 < x->job->mem->layers)
		kvt_jobs_notify(x->srv, x->job, false);
}

/* Gather (save) or scatter (load) n blocks on a stream of their own and wait
 * for it. Returns 0 or -errno (logged with the backend's message). */
static int dev_xfer(struct kvt_server *srv, struct kvt_job *job, bool save,
		    const uint32_t *pages, void *const *blocks, size_t n)
{
	struct kvt_engine_mem *m = job->mem;
	struct layer_ctx ctx = { srv, job };
	struct kvt_dev_xfer_opts o;
	struct kvt_dev_stream *stream = NULL;
	struct kvt_dev_event *ev = NULL;
	int err;

	err = kvt_dev_stream_create(m->dev, !save, &stream);
	if (!err)
		err = kvt_dev_event_create(m->dev, &ev);
	if (err)
		goto out;
	kvt_dev_xfer_opts_init(&o, sizeof(o));
	if (!save) {
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
	if (err)
		kvt_srv_log(srv, KVT_LOG_WARN, "event=%s.device_error ticket=%llu err=\"%s\" dev=\"%s\"",
			    save ? "save" : "load", (unsigned long long)job->ticket,
			    kvt_strerror(err), kvt_dev_last_error());
	kvt_dev_event_destroy(ev);
	kvt_dev_stream_destroy(stream);
	return err;
}

/* Tell the cluster which leading keys of a SAVE are stored (its hints). */
static void saved(struct kvt_server *srv, struct kvt_job *job, uint32_t n)
{
	if (n && srv->opts.hooks.saved_cb)
		srv->opts.hooks.saved_cb(srv->opts.hooks.arg, job->ns, job->keys, n);
}

/* SAVE through the device layer: reserve every slot, one gather, commit. */
static int32_t run_save_dev(struct kvt_server *srv, struct kvt_job *job)
{
	struct kvt_slot *slots = calloc(job->n, sizeof(*slots));
	void **blocks = calloc(job->n, sizeof(*blocks));
	uint32_t *pages = calloc(job->n, sizeof(*pages));
	uint32_t i, m = 0;
	int err = 0;

	if (!slots || !blocks || !pages) {
		free(slots);
		free(blocks);
		free(pages);
		return -ENOMEM;
	}
	for (i = 0; i < job->n; i++) {
		const struct kvt_key *parent = i ? &job->keys[i - 1] :
					       job->has_parent ? &job->parent : NULL;

		if (cancelled(job)) {
			err = -ECANCELED;
			break;
		}
		err = kvt_reserve(job->ns, &job->keys[i], parent, &slots[m]);
		if (err == -EEXIST) {
			__atomic_add_fetch(&srv->c.save_present, 1, __ATOMIC_RELAXED);
			err = 0;
			continue;
		}
		if (err)
			break;
		blocks[m] = slots[m].data;
		pages[m++] = job->pages[i];
	}
	if (m) {
		int xerr = dev_xfer(srv, job, true, pages, blocks, m);

		for (uint32_t k = 0; k < m; k++) {
			if (xerr) {
				kvt_abort(job->ns, &slots[k]);
				continue;
			}
			if (kvt_commit(job->ns, &slots[k]) == 0) {
				__atomic_add_fetch(&srv->c.save_blocks, 1, __ATOMIC_RELAXED);
				__atomic_add_fetch(&srv->c.gather_bytes, slots[k].len, __ATOMIC_RELAXED);
			}
		}
		if (xerr) {
			i = 0;
			err = xerr;
		}
	}
	free(slots);
	free(blocks);
	free(pages);
	__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
	saved(srv, job, i);
	return i == 0 && err ? err : (int32_t)i;
}

/* Result: the number of leading keys stored after the SAVE (newly saved or
 * already present), or a negative errno when the first one fails. */
static int32_t run_save(struct kvt_server *srv, struct kvt_job *job)
{
	struct kvt_slot slot;
	uint32_t i;
	int err = 0;

	for (i = 0; i < job->n; i++) {
		const struct kvt_key *parent = i ? &job->keys[i - 1] :
					       job->has_parent ? &job->parent : NULL;

		if (cancelled(job)) {
			err = -ECANCELED;
			break;
		}
		err = kvt_reserve(job->ns, &job->keys[i], parent, &slot);
		if (err == -EEXIST) {
			__atomic_add_fetch(&srv->c.save_present, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (err)
			break;
		kvt_engine_mem_gather(job->mem, job->pages[i], slot.data);
		err = kvt_commit(job->ns, &slot);
		if (err)
			break;
		__atomic_add_fetch(&srv->c.save_blocks, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&srv->c.gather_bytes, slot.len, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
	saved(srv, job, i);
	return i == 0 && err ? err : (int32_t)i;
}

/* LOAD missed keys[from]: ask the cluster for the rest of the prefix, once
 * per LOAD. True when it brought keys[from] into the store. */
static bool fetch_remote(struct kvt_server *srv, struct kvt_job *job, uint32_t from, bool *tried)
{
	const struct kvt_key *parent = from ? &job->keys[from - 1] :
				       job->has_parent ? &job->parent : NULL;
	int n;

	*tried = true;
	if (!srv->opts.hooks.fetch_cb || cancelled(job))
		return false;
	n = srv->opts.hooks.fetch_cb(srv->opts.hooks.arg, job->ns, job->keys + from,
				     job->n - from, parent);
	if (n <= 0)
		return false;
	__atomic_add_fetch(&srv->c.load_remote, (uint64_t)n, __ATOMIC_RELAXED);
	return true;
}

/* Result: the number of leading blocks loaded (a miss ends the prefix). */
static int32_t run_load(struct kvt_server *srv, struct kvt_job *job)
{
	struct kvt_slot *slots = calloc(job->n, sizeof(*slots));
	bool fetched_remote = false;
	uint32_t got = 0;
	int err = 0;

	if (!slots)
		return -ENOMEM;
	for (; got < job->n; got++) {
		if (cancelled(job)) {
			err = -ECANCELED;
			break;
		}
		err = kvt_acquire(job->ns, &job->keys[got], &slots[got]);
		if (err == -ENOENT && !fetched_remote && fetch_remote(srv, job, got, &fetched_remote))
			err = kvt_acquire(job->ns, &job->keys[got], &slots[got]);
		if (err)
			break;
	}
	if (job->mem->layout && got && err != -ECANCELED) {
		void **blocks = calloc(got, sizeof(*blocks));
		int xerr = blocks ? 0 : -ENOMEM;

		for (uint32_t i = 0; blocks && i < got; i++)
			blocks[i] = slots[i].data;
		if (!xerr)
			xerr = dev_xfer(srv, job, false, job->pages, blocks, got);
		free(blocks);
		for (uint32_t i = 0; i < got; i++) {
			if (!xerr)
				__atomic_add_fetch(&srv->c.scatter_bytes, slots[i].len, __ATOMIC_RELAXED);
			kvt_release(job->ns, &slots[i]);
		}
		free(slots);
		if (xerr)
			return xerr;
		__atomic_add_fetch(&srv->c.load_blocks, got, __ATOMIC_RELAXED);
		if (got < job->n)
			__atomic_add_fetch(&srv->c.load_misses, job->n - got, __ATOMIC_RELAXED);
		__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
		return (int32_t)got;
	}
	if (got < job->n && err != -ECANCELED) {
		__atomic_add_fetch(&srv->c.load_misses, job->n - got, __ATOMIC_RELAXED);
		kvt_srv_log(srv, KVT_LOG_DEBUG, "event=load.short ticket=%llu blocks=%u of=%u err=\"%s\"",
			    (unsigned long long)job->ticket, got, job->n, kvt_strerror(err));
	}
	for (uint32_t l = 0; l < job->mem->layers && got && err != -ECANCELED; l++) {
		for (uint32_t i = 0; i < got; i++)
			kvt_engine_mem_scatter_layer(job->mem, job->pages[i], l, slots[i].data);
		__atomic_store_n(&job->layers_done, (int)l + 1, __ATOMIC_RELEASE);
		if (l + 1 < job->mem->layers)
			kvt_jobs_notify(srv, job, false);
	}
	for (uint32_t i = 0; i < got; i++) {
		__atomic_add_fetch(&srv->c.scatter_bytes, slots[i].len, __ATOMIC_RELAXED);
		kvt_release(job->ns, &slots[i]);
	}
	free(slots);
	if (err == -ECANCELED)
		return err;
	__atomic_add_fetch(&srv->c.load_blocks, got, __ATOMIC_RELAXED);
	__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
	return (int32_t)got;
}

static void *worker_main(void *arg)
{
	struct kvt_server *srv = arg;
	struct kvt_job *job;

	for (;;) {
		pthread_mutex_lock(&srv->qlock);
		while (!srv->qhead && !srv->qstop)
			pthread_cond_wait(&srv->qcond, &srv->qlock);
		job = srv->qhead;
		if (!job) {
			pthread_mutex_unlock(&srv->qlock);
			return NULL;
		}
		srv->qhead = job->qnext;
		if (!srv->qhead)
			srv->qtail = NULL;
		job->qnext = NULL;
		pthread_mutex_unlock(&srv->qlock);

		if (job->op == KVT_OP_SAVE)
			job->result = job->mem->layout ? run_save_dev(srv, job) : run_save(srv, job);
		else
			job->result = run_load(srv, job);
		kvt_jobs_notify(srv, job, true);
	}
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
