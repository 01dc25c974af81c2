/* SPDX-License-Identifier: Apache-2.0 */
/* The copy workers' two back ends: engine memory the daemon maps, copied
 * with memcpy, or reached through the device layer (CUDA, or its host
 * backend) on the worker's streams; and a LOAD's layer progress notes (the
 * first layer's at once, the others at least PROGRESS_NS apart). */
#include <errno.h>
#include <string.h>

#include "kvtier/device.h"
#include "transport/server_copy.h"

/* Layer progress: a note wakes the loop and the engine, which costs the
 * worker about what copying 50-100 KiB does; after layer 0 a layer is
 * posted only PROGRESS_NS after the last note (a later note, or the final
 * one, covers those between), which bounds what notes take of a fast LOAD. */
#define PROGRESS_NS 100000
static void layer_done(struct kvt_server *srv, struct kvt_job *job, uint32_t layer)
{
	uint64_t now = kvt_now_ns();

	__atomic_store_n(&job->layers_done, (int)layer + 1, __ATOMIC_RELEASE);
	if (layer + 1 < job->mem->layers && (!layer || now - job->progress_ns >= PROGRESS_NS)) {
		job->progress_ns = now;
		kvt_jobs_notify(srv, job, false);
	}
}

/* ---- direct copies of mapped engine memory ------------------------------ */

void kvt_job_engine_fault(struct kvt_server *srv, const struct kvt_job *job, int err,
			  const char *action)
{
	kvt_srv_log(srv, KVT_LOG_WARN, "event=%s.engine_memory ticket=%llu conn=%llu uid=%u "
		    "err=\"%s\" action=\"%s\"", job->op == KVT_OP_SAVE ? "save" : "load",
		    (unsigned long long)job->ticket, (unsigned long long)job->conn->id,
		    (unsigned)job->conn->uid, kvt_strerror(err), action);
}

static int direct_gather(struct worker *w, struct kvt_job *job, const uint32_t *pages,
			 void *const *blocks, size_t n)
{
	int err = 0;

	for (size_t k = 0; k < n && !err; k++)
		err = kvt_engine_mem_gather(job->mem, pages[k], blocks[k]);
	if (err)
		kvt_job_engine_fault(w->srv, job, err, "SAVE failed");
	return err;
}

static int direct_scatter(struct worker *w, struct kvt_job *job, const uint32_t *pages,
			  void *const *blocks, size_t n, bool progress)
{
	int err = 0;

	for (uint32_t l = 0; l < job->mem->layers; l++) {
		for (size_t k = 0; k < n && !err; k++)
			err = kvt_engine_mem_scatter_layer(job->mem, pages[k], l, blocks[k]);
		if (err) {
			kvt_job_engine_fault(w->srv, job, err, "LOAD failed");
			return err;
		}
		if (progress)
			layer_done(w->srv, job, l);
	}
	return 0;
}

const struct copy_ops kvt_direct_copy = { direct_gather, direct_scatter };

/* ---- copies through the device layer (CUDA, or its host backend) -------- */

/* The worker's stream (save or load) and event on dev, created if need be. */
static int worker_stream(struct worker *w, struct kvt_dev *dev, bool load,
			 struct kvt_dev_stream **stream, struct kvt_dev_event **ev)
{
	struct worker_dev *wd = worker_dev_slot(w->devs, 2, dev);
	int err;

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
	if (err == -EFAULT && m->on_host) {
		kvt_job_engine_fault(w->srv, job, err, save ? "SAVE failed" : "LOAD failed");
		worker_dev_drop(w, m->dev);
	} else if (err) {
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

const struct copy_ops *kvt_copy_of(const struct kvt_job *job)
{
	return job->mem->layout ? &device_copy : &kvt_direct_copy;
}

void kvt_worker_fini(struct worker *w)
{
	for (size_t k = 0; k < 2; k++)
		worker_dev_reset(&w->devs[k]);
}
