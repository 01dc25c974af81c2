/* SPDX-License-Identifier: Apache-2.0 */
/* The host backend: the device API over plain host memory, for machines
 * without a GPU. "Device memory" is a memfd region (so another process can map
 * it from a passed fd), each stream is a worker thread running its queue in
 * order, and events complete when the worker reaches them — the caller sees
 * completion only through events, stream sync and callbacks, as with CUDA. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/backend.h"
#include "util/fault_guard.h"

/* ---- the registry of memory kernels may touch --------------------------- */

enum range_kind {
	RANGE_REGISTERED, /* caller's memory, kvt_dev_host_register */
	RANGE_HOST_ALLOC, /* kvt_dev_host_alloc, to munmap */
	RANGE_DEVICE,     /* kvt_dev_mem_alloc/import: device memory */
};

struct range {
	uintptr_t base;
	size_t len;
	unsigned flags;
	enum range_kind kind;
};

struct host_dev {
	pthread_mutex_t lock;
	struct range *ranges;
	size_t n_ranges, cap_ranges;
};

static struct host_dev *hd(struct kvt_dev *dev)
{
	return dev->priv;
}

static bool overlaps(const struct range *r, uintptr_t base, size_t len)
{
	return base < r->base + r->len && r->base < base + len;
}

static int range_add(struct kvt_dev *dev, void *p, size_t len, unsigned flags,
		     enum range_kind kind)
{
	struct host_dev *h = hd(dev);
	uintptr_t base = (uintptr_t)p;
	int rc = 0;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n_ranges; i++) {
		if (overlaps(&h->ranges[i], base, len)) {
			rc = kvt_dev_fail(-EEXIST, "host: [%p, +%zu) overlaps a registered range",
					  p, len);
			goto out;
		}
	}
	if (h->n_ranges == h->cap_ranges) {
		size_t cap = h->cap_ranges ? 2 * h->cap_ranges : 16;
		struct range *r = realloc(h->ranges, cap * sizeof(*r));

		if (!r) {
			rc = -ENOMEM;
			goto out;
		}
		h->ranges = r;
		h->cap_ranges = cap;
	}
	h->ranges[h->n_ranges++] = (struct range){ base, len, flags, kind };
out:
	pthread_mutex_unlock(&h->lock);
	return rc;
}

/* Remove the range starting at p of the given kind; its length, or 0. */
static size_t range_del(struct kvt_dev *dev, const void *p, enum range_kind kind)
{
	struct host_dev *h = hd(dev);
	size_t len = 0;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n_ranges; i++) {
		if (h->ranges[i].base == (uintptr_t)p && h->ranges[i].kind == kind) {
			len = h->ranges[i].len;
			h->ranges[i] = h->ranges[--h->n_ranges];
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return len;
}

static int host_open(struct kvt_dev *dev, const struct kvt_dev_opts *opts)
{
	struct host_dev *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	dev->priv = h;
	dev->device = 0;
	return 0;
}

static void host_close(struct kvt_dev *dev)
{
	struct host_dev *h = hd(dev);

	pthread_mutex_destroy(&h->lock);
	free(h->ranges);
	free(h);
}

static int host_info(struct kvt_dev *dev, struct kvt_dev_info *info)
{
	long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
	long psz = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);

	snprintf(info->name, sizeof(info->name), "host");
	info->device_count = 0;
	info->total_mem_bytes = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	info->free_mem_bytes = avail > 0 && psz > 0 ? (uint64_t)avail * (uint64_t)psz : 0;
	info->multiprocessors = cpus > 0 ? (int)cpus : 1;
	info->can_map_host = true;
	info->ipc = true;
	return 0;
}

/* ---- pinned host memory ------------------------------------------------ */

/* Nothing DMAs from host memory here, so registering only records the range
 * (which decides, as on CUDA, whether kernels may reach it). */
static int host_host_register(struct kvt_dev *dev, void *ptr, size_t len, unsigned flags)
{
	return range_add(dev, ptr, len, flags, RANGE_REGISTERED);
}

static int host_host_unregister(struct kvt_dev *dev, void *ptr)
{
	if (!range_del(dev, ptr, RANGE_REGISTERED))
		return kvt_dev_fail(-ENOENT, "host: %p is not registered", ptr);
	return 0;
}

static int host_host_alloc(struct kvt_dev *dev, size_t len, unsigned flags, void **out)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int rc;

	if (p == MAP_FAILED)
		return kvt_dev_fail(-ENOMEM, "host: cannot map %zu bytes", len);
	rc = range_add(dev, p, len, flags, RANGE_HOST_ALLOC);
	if (rc) {
		munmap(p, len);
		return rc;
	}
	*out = p;
	return 0;
}

static void host_host_free(struct kvt_dev *dev, void *ptr)
{
	size_t len = range_del(dev, ptr, RANGE_HOST_ALLOC);

	if (len)
		munmap(ptr, len);
}

static void *host_kernel_ptr(struct kvt_dev *dev, const void *p, size_t len)
{
	struct host_dev *h = hd(dev);
	uintptr_t a = (uintptr_t)p;
	void *r = NULL;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n_ranges; i++) {
		const struct range *g = &h->ranges[i];

		if (a >= g->base && len <= g->len && a - g->base <= g->len - len &&
		    (g->kind == RANGE_DEVICE || (g->flags & KVT_DEV_HOST_MAPPED))) {
			r = (void *)p;
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return r;
}

/* ---- device memory: memfd regions --------------------------------------- */

static int host_mem_alloc(struct kvt_dev *dev, size_t len, struct kvt_dev_mem *mem)
{
	int fd, rc;
	void *p;

	fd = memfd_create("kvtier-dev", MFD_CLOEXEC);
	if (fd < 0)
		return kvt_dev_fail(-errno, "host: memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)len) < 0) {
		rc = kvt_dev_fail(-errno, "host: ftruncate memfd to %zu: %s", len, strerror(errno));
		goto err_close;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = kvt_dev_fail(-ENOMEM, "host: mmap memfd of %zu bytes: %s", len, strerror(errno));
		goto err_close;
	}
	rc = range_add(dev, p, len, 0, RANGE_DEVICE);
	if (rc)
		goto err_unmap;
	mem->ptr = mem->base = p;
	mem->len = mem->map_len = len;
	mem->fd = fd;
	return 0;

err_unmap:
	munmap(p, len);
err_close:
	close(fd);
	return rc;
}

static void host_mem_free(struct kvt_dev_mem *mem)
{
	range_del(mem->dev, mem->base, RANGE_DEVICE);
	munmap(mem->base, mem->map_len);
	if (mem->fd >= 0)
		close(mem->fd);
}

static int host_mem_export(struct kvt_dev_mem *mem, struct kvt_dev_ipc_handle *out)
{
	out->fd = mem->fd;
	out->len = mem->len;
	out->offset = (uint64_t)((char *)mem->ptr - (char *)mem->base);
	return 0;
}

static int host_mem_import(struct kvt_dev *dev, const struct kvt_dev_ipc_handle *h,
			   struct kvt_dev_mem *mem)
{
	struct stat st;
	size_t map_len;
	int fd, rc;
	void *p;

	if (h->fd < 0 || fstat(h->fd, &st) < 0)
		return kvt_dev_fail(-EINVAL, "host: import of a bad fd %d", h->fd);
	if (h->offset > (uint64_t)st.st_size || h->len > (uint64_t)st.st_size - h->offset)
		return kvt_dev_fail(-EINVAL, "host: import of [%llu, +%llu) past the %lld bytes "
					     "of the memfd", (unsigned long long)h->offset,
				    (unsigned long long)h->len, (long long)st.st_size);
	fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return kvt_dev_fail(-errno, "host: dup fd: %s", strerror(errno));
	map_len = (size_t)(h->offset + h->len);
	p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = kvt_dev_fail(-EFAULT, "host: mmap of the imported fd: %s", strerror(errno));
		goto err_close;
	}
	rc = range_add(dev, p, map_len, 0, RANGE_DEVICE);
	if (rc)
		goto err_unmap;
	mem->base = p;
	mem->map_len = map_len;
	mem->ptr = (char *)p + h->offset;
	mem->len = (size_t)h->len;
	mem->fd = fd;
	return 0;

err_unmap:
	munmap(p, map_len);
err_close:
	close(fd);
	return rc;
}

/* ---- events ------------------------------------------------------------- */

/* An event counts records and completions. Queued ops hold a reference, so
 * destroying an event with work pending is safe, as with cudaEventDestroy. */
struct host_event {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t recorded, completed;
	int err;        /* lock: a stream's error when it was last signalled */
	atomic_int refs;
};

static void event_put(struct host_event *e)
{
	if (atomic_fetch_sub(&e->refs, 1) == 1) {
		pthread_cond_destroy(&e->cond);
		pthread_mutex_destroy(&e->lock);
		free(e);
	}
}

static int host_event_create(struct kvt_dev_event *ev)
{
	struct host_event *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	atomic_init(&e->refs, 1);
	ev->priv = e;
	return 0;
}

static void host_event_destroy(struct kvt_dev_event *ev)
{
	event_put(ev->priv);
}

static int host_event_query(struct kvt_dev_event *ev)
{
	struct host_event *e = ev->priv;
	int rc;

	pthread_mutex_lock(&e->lock);
	rc = e->completed >= e->recorded ? 0 : -EAGAIN;
	pthread_mutex_unlock(&e->lock);
	return rc;
}

static void event_wait_gen(struct host_event *e, uint64_t gen)
{
	pthread_mutex_lock(&e->lock);
	while (e->completed < gen)
		pthread_cond_wait(&e->cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
}

static int host_event_wait(struct kvt_dev_event *ev)
{
	struct host_event *e = ev->priv;
	uint64_t gen;

	int err;

	pthread_mutex_lock(&e->lock);
	gen = e->recorded;
	pthread_mutex_unlock(&e->lock);
	event_wait_gen(e, gen);
	pthread_mutex_lock(&e->lock);
	err = e->err;
	e->err = 0;
	pthread_mutex_unlock(&e->lock);
	return err;
}

/* ---- streams: one worker thread each ------------------------------------ */

enum op_kind { OP_COPY, OP_GS, OP_SIGNAL, OP_WAIT, OP_CALLBACK, OP_FREE };

struct op {
	struct op *next;
	enum op_kind kind;
	union {
		struct { void *dst; const void *src; size_t len; } copy;
		struct kvt_gs_args *gs;
		struct { struct host_event *e; uint64_t gen; } ev;
		struct { kvt_dev_done_cb cb; void *arg; } cb;
		void *free;
	} u;
};

struct host_stream {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct op *head, *tail;
	uint64_t queued, finished;
	bool stop;
	int err;        /* lock: a copy's fault, sticky as a CUDA stream's */
};

static void copy_fn(void *arg)
{
	const struct op *op = arg;

	if (op->kind == OP_COPY)
		memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.len);
	else
		kvt_gs_run_cpu(op->u.gs);
}

/* A copy under a fault guard: memory imported from another process (an
 * engine's memfd) may have a hole no page can back (huge pages, none free),
 * which is the stream's error (-EFAULT), not the end of the process. Once a
 * stream has failed, its copies are skipped, as on a CUDA stream. */
static void op_copy(struct host_stream *hs, struct op *op)
{
	int err;

	pthread_mutex_lock(&hs->lock);
	err = hs->err;
	pthread_mutex_unlock(&hs->lock);
	if (!err && kvt_fault_guard_run(NULL, SIZE_MAX, copy_fn, op)) {
		kvt_dev_fail(-EFAULT, "host: a copy touched memory that cannot be backed "
				      "(a hole punched in huge pages?)");
		pthread_mutex_lock(&hs->lock);
		hs->err = -EFAULT;
		pthread_mutex_unlock(&hs->lock);
	}
}

static void op_run(struct host_stream *hs, struct op *op)
{
	struct host_event *e;
	int err;

	switch (op->kind) {
	case OP_COPY:
		op_copy(hs, op);
		break;
	case OP_GS:
		op_copy(hs, op);
		free(op->u.gs);
		break;
	case OP_SIGNAL:
		e = op->u.ev.e;
		pthread_mutex_lock(&hs->lock);
		err = hs->err;
		pthread_mutex_unlock(&hs->lock);
		pthread_mutex_lock(&e->lock);
		if (err)
			e->err = err;
		if (e->completed < op->u.ev.gen)
			e->completed = op->u.ev.gen;
		pthread_cond_broadcast(&e->cond);
		pthread_mutex_unlock(&e->lock);
		event_put(e);
		break;
	case OP_WAIT:
		event_wait_gen(op->u.ev.e, op->u.ev.gen);
		event_put(op->u.ev.e);
		break;
	case OP_CALLBACK:
		pthread_mutex_lock(&hs->lock);
		err = hs->err;
		pthread_mutex_unlock(&hs->lock);
		op->u.cb.cb(op->u.cb.arg, err);
		break;
	case OP_FREE:
		free(op->u.free);
		break;
	}
}

static void *stream_worker(void *arg)
{
	struct host_stream *hs = arg;
	struct op *op;

	pthread_mutex_lock(&hs->lock);
	for (;;) {
		while (!hs->head && !hs->stop)
			pthread_cond_wait(&hs->work, &hs->lock);
		op = hs->head;
		if (!op)
			break;
		hs->head = op->next;
		if (!hs->head)
			hs->tail = NULL;
		pthread_mutex_unlock(&hs->lock);
		op_run(hs, op);
		free(op);
		pthread_mutex_lock(&hs->lock);
		hs->finished++;
		pthread_cond_broadcast(&hs->done);
	}
	pthread_mutex_unlock(&hs->lock);
	return NULL;
}

static struct op *op_new(enum op_kind kind)
{
	struct op *op = calloc(1, sizeof(*op));

	if (op)
		op->kind = kind;
	return op;
}

static void enqueue(struct kvt_dev_stream *s, struct op *op)
{
	struct host_stream *hs = s->priv;

	pthread_mutex_lock(&hs->lock);
	if (hs->tail)
		hs->tail->next = op;
	else
		hs->head = op;
	hs->tail = op;
	hs->queued++;
	pthread_cond_signal(&hs->work);
	pthread_mutex_unlock(&hs->lock);
}

static int host_stream_create(struct kvt_dev_stream *s, bool high_priority)
{
	struct host_stream *hs = calloc(1, sizeof(*hs));
	int rc;

	if (!hs)
		return -ENOMEM;
	pthread_mutex_init(&hs->lock, NULL);
	pthread_cond_init(&hs->work, NULL);
	pthread_cond_init(&hs->done, NULL);
	rc = pthread_create(&hs->thread, NULL, stream_worker, hs);
	if (rc) {
		pthread_cond_destroy(&hs->done);
		pthread_cond_destroy(&hs->work);
		pthread_mutex_destroy(&hs->lock);
		free(hs);
		return kvt_dev_fail(-rc, "host: cannot start a stream thread");
	}
	s->priv = hs;
	return 0;
}

static void host_stream_destroy(struct kvt_dev_stream *s)
{
	struct host_stream *hs = s->priv;

	pthread_mutex_lock(&hs->lock);
	hs->stop = true;
	pthread_cond_signal(&hs->work);
	pthread_mutex_unlock(&hs->lock);
	pthread_join(hs->thread, NULL);
	pthread_cond_destroy(&hs->done);
	pthread_cond_destroy(&hs->work);
	pthread_mutex_destroy(&hs->lock);
	free(hs);
}

static int host_stream_sync(struct kvt_dev_stream *s)
{
	struct host_stream *hs = s->priv;
	uint64_t target;
	int err;

	pthread_mutex_lock(&hs->lock);
	target = hs->queued;
	while (hs->finished < target)
		pthread_cond_wait(&hs->done, &hs->lock);
	err = hs->err;
	pthread_mutex_unlock(&hs->lock);
	return err;
}

static int host_event_record(struct kvt_dev_event *ev, struct kvt_dev_stream *s)
{
	struct host_event *e = ev->priv;
	struct op *op = op_new(OP_SIGNAL);

	if (!op)
		return -ENOMEM;
	atomic_fetch_add(&e->refs, 1);
	pthread_mutex_lock(&e->lock);
	op->u.ev.gen = ++e->recorded;
	pthread_mutex_unlock(&e->lock);
	op->u.ev.e = e;
	enqueue(s, op);
	return 0;
}

static int host_stream_wait_event(struct kvt_dev_stream *s, struct kvt_dev_event *ev)
{
	struct host_event *e = ev->priv;
	struct op *op = op_new(OP_WAIT);

	if (!op)
		return -ENOMEM;
	atomic_fetch_add(&e->refs, 1);
	pthread_mutex_lock(&e->lock);
	op->u.ev.gen = e->recorded;
	pthread_mutex_unlock(&e->lock);
	op->u.ev.e = e;
	enqueue(s, op);
	return 0;
}

static int host_stream_callback(struct kvt_dev_stream *s, kvt_dev_done_cb cb, void *arg)
{
	struct op *op = op_new(OP_CALLBACK);

	if (!op)
		return -ENOMEM;
	op->u.cb.cb = cb;
	op->u.cb.arg = arg;
	enqueue(s, op);
	return 0;
}

static int host_stream_alloc(struct kvt_dev_stream *s, size_t len, void **out)
{
	void *p = aligned_alloc(64, (len + 63) & ~(size_t)63);

	if (!p)
		return kvt_dev_fail(-ENOMEM, "host: staging of %zu bytes", len);
	*out = p;
	return 0;
}

static void host_stream_free(struct kvt_dev_stream *s, void *p)
{
	struct op *op = op_new(OP_FREE);

	if (!op) {
		/* no way to defer it: wait for the stream instead */
		host_stream_sync(s);
		free(p);
		return;
	}
	op->u.free = p;
	enqueue(s, op);
}

static int host_copy_async(struct kvt_dev_stream *s, void *dst, const void *src, size_t len)
{
	struct op *op = op_new(OP_COPY);

	if (!op)
		return -ENOMEM;
	op->u.copy.dst = dst;
	op->u.copy.src = src;
	op->u.copy.len = len;
	enqueue(s, op);
	return 0;
}

static int host_layout_upload(struct kvt_dev_layout *lay)
{
	lay->dev_bases = lay->bases;
	return 0;
}

static void host_layout_release(struct kvt_dev_layout *lay)
{
	lay->dev_bases = NULL;
}

static int host_gs_launch(struct kvt_dev_stream *s, const struct kvt_gs_args *args)
{
	struct op *op = op_new(OP_GS);

	if (!op)
		return -ENOMEM;
	op->u.gs = malloc(sizeof(*args));
	if (!op->u.gs) {
		free(op);
		return -ENOMEM;
	}
	memcpy(op->u.gs, args, sizeof(*args));
	enqueue(s, op);
	return 0;
}

const struct kvt_dev_backend_ops kvt_dev_host_ops = {
	.name = "host",
	.open = host_open,
	.close = host_close,
	.info = host_info,
	.host_register = host_host_register,
	.host_unregister = host_host_unregister,
	.host_alloc = host_host_alloc,
	.host_free = host_host_free,
	.kernel_ptr = host_kernel_ptr,
	.mem_alloc = host_mem_alloc,
	.mem_free = host_mem_free,
	.mem_export = host_mem_export,
	.mem_import = host_mem_import,
	.stream_create = host_stream_create,
	.stream_destroy = host_stream_destroy,
	.stream_sync = host_stream_sync,
	.stream_wait_event = host_stream_wait_event,
	.stream_callback = host_stream_callback,
	.stream_alloc = host_stream_alloc,
	.stream_free = host_stream_free,
	.event_create = host_event_create,
	.event_destroy = host_event_destroy,
	.event_record = host_event_record,
	.event_query = host_event_query,
	.event_wait = host_event_wait,
	.copy_async = host_copy_async,
	.layout_upload = host_layout_upload,
	.layout_release = host_layout_release,
	.gs_launch = host_gs_launch,
};
