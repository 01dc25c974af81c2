/* SPDX-License-Identifier: Apache-2.0 */
/* The device layer's front: picks a backend at open, checks arguments, keeps
 * the last error message, and hands the work to the backend's ops table. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/backend.h"
#include "util/opts.h"
#include "util/log.h"

static _Thread_local char last_error[256];

int kvt_dev_fail(int err, const char *fmt, ...)
{
	char msg[sizeof(last_error)];
	va_list ap;

	/* through msg: the arguments may be last_error itself */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(last_error, msg, sizeof(msg));
	return err;
}

const char *kvt_dev_last_error(void)
{
	return last_error;
}

const char *kvt_dev_backend_name(enum kvt_dev_backend backend)
{
	switch (backend) {
	case KVT_DEV_CUDA: return "cuda";
	case KVT_DEV_HOST: return "host";
	default: return "auto";
	}
}

static const struct kvt_dev_opts dev_defaults = {
	.size = sizeof(struct kvt_dev_opts),
	.backend = KVT_DEV_AUTO,
	.device = 0,
};

void kvt_dev_opts_init(struct kvt_dev_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &dev_defaults, sizeof(dev_defaults));
}

/* The fallback to host is said once per process, not once per open. */
static void log_fallback_once(const char *reason)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;

	if (!atomic_flag_test_and_set(&said))
		kvt_log(KVT_LOG_INFO, "event=device.host_backend reason=\"%s\"", reason);
}

int kvt_dev_open(const struct kvt_dev_opts *opts, struct kvt_dev **out)
{
	struct kvt_dev_opts o = dev_defaults;
	struct kvt_dev *dev;
	int rc;

	if (!out)
		return kvt_dev_fail(-EINVAL, "kvt_dev_open: out is NULL");
	*out = NULL;
	if (opts && kvt_opts_load(&o, sizeof(o), opts))
		return kvt_dev_fail(-EINVAL, "kvt_dev_open: bad opts size");
	if (o.backend < KVT_DEV_AUTO || o.backend > KVT_DEV_HOST || o.device < 0)
		return kvt_dev_fail(-EINVAL, "kvt_dev_open: bad backend or device");

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->device = o.device;

	if (o.backend != KVT_DEV_HOST) {
#ifdef KVT_HAVE_CUDA
		dev->ops = &kvt_dev_cuda_ops;
		dev->backend = KVT_DEV_CUDA;
		rc = dev->ops->open(dev, &o);
		if (rc == 0)
			goto done;
		snprintf(dev->fallback_reason, sizeof(dev->fallback_reason), "%s",
			 kvt_dev_last_error());
#else
		rc = kvt_dev_fail(-ENODEV, "built without CUDA");
		snprintf(dev->fallback_reason, sizeof(dev->fallback_reason), "built without CUDA");
#endif
		if (o.backend == KVT_DEV_CUDA)
			goto err_free;
		log_fallback_once(dev->fallback_reason);
	}
	dev->ops = &kvt_dev_host_ops;
	dev->backend = KVT_DEV_HOST;
	rc = dev->ops->open(dev, &o);
	if (rc)
		goto err_free;
#ifdef KVT_HAVE_CUDA
done:
#endif
	*out = dev;
	return 0;

err_free:
	free(dev);
	return rc;
}

void kvt_dev_close(struct kvt_dev *dev)
{
	if (!dev)
		return;
	dev->ops->close(dev);
	free(dev);
}

int kvt_dev_info(struct kvt_dev *dev, struct kvt_dev_info *info)
{
	struct kvt_dev_info full;
	int rc;

	if (!dev || !info || info->size < sizeof(info->size))
		return kvt_dev_fail(-EINVAL, "kvt_dev_info: bad arguments");
	memset(&full, 0, sizeof(full));
	full.size = sizeof(full);
	full.backend = dev->backend;
	full.device = dev->device;
	snprintf(full.fallback_reason, sizeof(full.fallback_reason), "%s", dev->fallback_reason);
	rc = dev->ops->info(dev, &full);
	if (rc)
		return rc;
	/* a caller built against an older, smaller struct gets its prefix */
	return kvt_opts_store(info, &full, sizeof(full));
}

/* ---- pinned host memory ------------------------------------------------ */

int kvt_dev_host_register(struct kvt_dev *dev, void *ptr, size_t len, unsigned flags)
{
	if (!dev || !ptr || !len || (flags & ~KVT_DEV_HOST_MAPPED))
		return kvt_dev_fail(-EINVAL, "kvt_dev_host_register: bad arguments");
	return dev->ops->host_register(dev, ptr, len, flags);
}

int kvt_dev_host_unregister(struct kvt_dev *dev, void *ptr)
{
	if (!dev || !ptr)
		return kvt_dev_fail(-EINVAL, "kvt_dev_host_unregister: bad arguments");
	return dev->ops->host_unregister(dev, ptr);
}

int kvt_dev_host_alloc(struct kvt_dev *dev, size_t len, unsigned flags, void **out)
{
	if (!dev || !len || !out || (flags & ~KVT_DEV_HOST_MAPPED))
		return kvt_dev_fail(-EINVAL, "kvt_dev_host_alloc: bad arguments");
	*out = NULL;
	return dev->ops->host_alloc(dev, len, flags, out);
}

void kvt_dev_host_free(struct kvt_dev *dev, void *ptr)
{
	if (dev && ptr)
		dev->ops->host_free(dev, ptr);
}

/* ---- device memory ----------------------------------------------------- */

int kvt_dev_mem_alloc(struct kvt_dev *dev, size_t len, struct kvt_dev_mem **out)
{
	struct kvt_dev_mem *mem;
	int rc;

	if (!dev || !len || !out)
		return kvt_dev_fail(-EINVAL, "kvt_dev_mem_alloc: bad arguments");
	*out = NULL;
	mem = calloc(1, sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	mem->dev = dev;
	mem->fd = -1;
	rc = dev->ops->mem_alloc(dev, len, mem);
	if (rc) {
		free(mem);
		return rc;
	}
	*out = mem;
	return 0;
}

void kvt_dev_mem_free(struct kvt_dev_mem *mem)
{
	if (!mem)
		return;
	mem->dev->ops->mem_free(mem);
	free(mem);
}

void *kvt_dev_mem_ptr(const struct kvt_dev_mem *mem)
{
	return mem ? mem->ptr : NULL;
}

size_t kvt_dev_mem_len(const struct kvt_dev_mem *mem)
{
	return mem ? mem->len : 0;
}

int kvt_dev_mem_export(struct kvt_dev_mem *mem, struct kvt_dev_ipc_handle *out)
{
	if (!mem || !out)
		return kvt_dev_fail(-EINVAL, "kvt_dev_mem_export: bad arguments");
	memset(out, 0, sizeof(*out));
	out->backend = (uint32_t)mem->dev->backend;
	out->fd = -1;
	return mem->dev->ops->mem_export(mem, out);
}

int kvt_dev_mem_import(struct kvt_dev *dev, const struct kvt_dev_ipc_handle *handle,
		       struct kvt_dev_mem **out)
{
	struct kvt_dev_mem *mem;
	int rc;

	if (!dev || !handle || !out || !handle->len)
		return kvt_dev_fail(-EINVAL, "kvt_dev_mem_import: bad arguments");
	*out = NULL;
	if (handle->backend != (uint32_t)dev->backend)
		return kvt_dev_fail(-EINVAL, "kvt_dev_mem_import: handle of backend %u, device is %s",
				    handle->backend, kvt_dev_backend_name(dev->backend));
	mem = calloc(1, sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	mem->dev = dev;
	mem->fd = -1;
	mem->imported = true;
	rc = dev->ops->mem_import(dev, handle, mem);
	if (rc) {
		free(mem);
		return rc;
	}
	*out = mem;
	return 0;
}

/* ---- streams and events ------------------------------------------------ */

int kvt_dev_stream_create(struct kvt_dev *dev, bool high_priority,
			  struct kvt_dev_stream **out)
{
	struct kvt_dev_stream *s;
	int rc;

	if (!dev || !out)
		return kvt_dev_fail(-EINVAL, "kvt_dev_stream_create: bad arguments");
	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dev = dev;
	rc = dev->ops->stream_create(s, high_priority);
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void kvt_dev_stream_destroy(struct kvt_dev_stream *s)
{
	if (!s)
		return;
	s->dev->ops->stream_sync(s);
	if (s->staging)
		s->dev->ops->stream_free(s, s->staging);
	s->dev->ops->stream_destroy(s);
	free(s);
}

int kvt_dev_stream_sync(struct kvt_dev_stream *s)
{
	if (!s)
		return kvt_dev_fail(-EINVAL, "kvt_dev_stream_sync: NULL stream");
	return s->dev->ops->stream_sync(s);
}

int kvt_dev_stream_wait_event(struct kvt_dev_stream *s, struct kvt_dev_event *ev)
{
	if (!s || !ev || s->dev != ev->dev)
		return kvt_dev_fail(-EINVAL, "kvt_dev_stream_wait_event: bad arguments");
	return s->dev->ops->stream_wait_event(s, ev);
}

int kvt_dev_stream_callback(struct kvt_dev_stream *s, kvt_dev_done_cb cb, void *arg)
{
	if (!s || !cb)
		return kvt_dev_fail(-EINVAL, "kvt_dev_stream_callback: bad arguments");
	return s->dev->ops->stream_callback(s, cb, arg);
}

int kvt_dev_event_create(struct kvt_dev *dev, struct kvt_dev_event **out)
{
	struct kvt_dev_event *ev;
	int rc;

	if (!dev || !out)
		return kvt_dev_fail(-EINVAL, "kvt_dev_event_create: bad arguments");
	*out = NULL;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	ev->dev = dev;
	rc = dev->ops->event_create(ev);
	if (rc) {
		free(ev);
		return rc;
	}
	*out = ev;
	return 0;
}

void kvt_dev_event_destroy(struct kvt_dev_event *ev)
{
	if (!ev)
		return;
	ev->dev->ops->event_destroy(ev);
	free(ev);
}

int kvt_dev_event_record(struct kvt_dev_event *ev, struct kvt_dev_stream *s)
{
	if (!ev || !s || ev->dev != s->dev)
		return kvt_dev_fail(-EINVAL, "kvt_dev_event_record: bad arguments");
	return ev->dev->ops->event_record(ev, s);
}

int kvt_dev_event_query(struct kvt_dev_event *ev)
{
	if (!ev)
		return kvt_dev_fail(-EINVAL, "kvt_dev_event_query: NULL event");
	return ev->dev->ops->event_query(ev);
}

int kvt_dev_event_wait(struct kvt_dev_event *ev)
{
	if (!ev)
		return kvt_dev_fail(-EINVAL, "kvt_dev_event_wait: NULL event");
	return ev->dev->ops->event_wait(ev);
}

int kvt_dev_copy_async(struct kvt_dev_stream *s, void *dst, const void *src, size_t len)
{
	if (!s || !dst || !src)
		return kvt_dev_fail(-EINVAL, "kvt_dev_copy_async: bad arguments");
	if (!len)
		return 0;
	return s->dev->ops->copy_async(s, dst, src, len);
}
