/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend: the device API over the CUDA runtime (linked statically,
 * so a machine without the runtime installed still runs the binaries and
 * falls back to the host backend). Every CUDA error becomes a negative errno
 * here, with the runtime's own message kept for kvt_dev_last_error(). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <cuda.h> /* driver types only: entry points come through the runtime */
#include <cuda_runtime_api.h>

#include "cuda/backend.h"
#include "cuda/gather_kernels.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) <= KVT_DEV_IPC_BYTES, "IPC handle does not fit");

static int map_err(cudaError_t e, const char *what)
{
	int err;

	switch (e) {
	case cudaSuccess: return 0;
	case cudaErrorMemoryAllocation: err = -ENOMEM; break;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevice:
	case cudaErrorInvalidResourceHandle: err = -EINVAL; break;
	case cudaErrorNotReady: err = -EAGAIN; break;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorDevicesUnavailable:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice: err = -ENODEV; break;
	case cudaErrorInvalidDevicePointer:
	case cudaErrorIllegalAddress:
	case cudaErrorMapBufferObjectFailed: err = -EFAULT; break;
	case cudaErrorHostMemoryAlreadyRegistered: err = -EEXIST; break;
	case cudaErrorHostMemoryNotRegistered: err = -ENOENT; break;
	case cudaErrorNotSupported:
	case cudaErrorNoKernelImageForDevice: err = -EOPNOTSUPP; break;
	default: err = -EIO; break;
	}
	kvt_dev_fail(err, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
	/* clear a non-sticky error so that it does not surface in a later call */
	if (e != cudaErrorNotReady)
		(void)cudaGetLastError();
	return err;
}

#define CU(call) map_err((call), #call)

/* The runtime's current device is per thread; callers may use any thread. */
static int use(struct kvt_dev *dev)
{
	return CU(cudaSetDevice(dev->device));
}

static int cuda_open(struct kvt_dev *dev, const struct kvt_dev_opts *opts)
{
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		map_err(e, "no usable GPU: cudaGetDeviceCount");
		return kvt_dev_fail(-ENODEV, "%s", kvt_dev_last_error());
	}
	if (n == 0)
		return kvt_dev_fail(-ENODEV, "no usable GPU: no CUDA device");
	if (opts->device >= n)
		return kvt_dev_fail(-ENODEV, "no CUDA device %d (%d present)", opts->device, n);
	dev->device = opts->device;
	if (use(dev))
		return kvt_dev_fail(-ENODEV, "%s", kvt_dev_last_error());
	/* create the context now, so that a broken driver shows at open */
	e = cudaFree(NULL);
	if (e != cudaSuccess) {
		map_err(e, "no usable GPU: context creation");
		return kvt_dev_fail(-ENODEV, "%s", kvt_dev_last_error());
	}
	return 0;
}

static void cuda_close(struct kvt_dev *dev)
{
}

/* Current PCIe link of the device, from sysfs; 0 when unknown. */
static void pcie_link(const char *bus_id, int *gen, int *width)
{
	static const struct { double gts; int gen; } gens[] = {
		{ 2.5, 1 }, { 5, 2 }, { 8, 3 }, { 16, 4 }, { 32, 5 }, { 64, 6 }, { 128, 7 },
	};
	char path[128], lower[32];
	double gts = 0;
	size_t i;
	FILE *f;

	*gen = *width = 0;
	for (i = 0; i < sizeof(lower) - 1 && bus_id[i]; i++)
		lower[i] = (char)tolower((unsigned char)bus_id[i]);
	lower[i] = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_speed", lower);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%lf", &gts) == 1)
			for (size_t g = 0; g < sizeof(gens) / sizeof(gens[0]); g++)
				if (gts > gens[g].gts - 0.1 && gts < gens[g].gts + 0.1)
					*gen = gens[g].gen;
		fclose(f);
	}
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_width", lower);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", width) != 1)
			*width = 0;
		fclose(f);
	}
}

static int cuda_info(struct kvt_dev *dev, struct kvt_dev_info *info)
{
	struct cudaDeviceProp p;
	size_t free_b = 0, total_b = 0;
	int n = 0, rc;

	if ((rc = use(dev)) || (rc = CU(cudaGetDeviceCount(&n))) ||
	    (rc = CU(cudaGetDeviceProperties(&p, dev->device))) ||
	    (rc = CU(cudaMemGetInfo(&free_b, &total_b))))
		return rc;
	info->device_count = n;
	snprintf(info->name, sizeof(info->name), "%.*s", (int)sizeof(info->name) - 1, p.name);
	snprintf(info->pci_bus_id, sizeof(info->pci_bus_id), "%04x:%02x:%02x.0", p.pciDomainID,
		 p.pciBusID, p.pciDeviceID);
	info->total_mem_bytes = total_b;
	info->free_mem_bytes = free_b;
	info->cc_major = p.major;
	info->cc_minor = p.minor;
	info->multiprocessors = p.multiProcessorCount;
	info->can_map_host = p.canMapHostMemory != 0;
	info->ipc = true;
	pcie_link(info->pci_bus_id, &info->pcie_gen, &info->pcie_width);
	return 0;
}

/* ---- pinned host memory ------------------------------------------------ */

static int cuda_host_register(struct kvt_dev *dev, void *ptr, size_t len, unsigned flags)
{
	unsigned f = cudaHostRegisterPortable;
	int rc = use(dev);

	if (rc)
		return rc;
	if (flags & KVT_DEV_HOST_MAPPED)
		f |= cudaHostRegisterMapped;
	return CU(cudaHostRegister(ptr, len, f));
}

static int cuda_host_unregister(struct kvt_dev *dev, void *ptr)
{
	int rc = use(dev);

	return rc ? rc : CU(cudaHostUnregister(ptr));
}

static int cuda_host_alloc(struct kvt_dev *dev, size_t len, unsigned flags, void **out)
{
	unsigned f = cudaHostAllocPortable;
	int rc = use(dev);

	if (rc)
		return rc;
	if (flags & KVT_DEV_HOST_MAPPED)
		f |= cudaHostAllocMapped;
	rc = CU(cudaHostAlloc(out, len, f));
	if (rc == 0)
		memset(*out, 0, len);
	return rc;
}

static void cuda_host_free(struct kvt_dev *dev, void *ptr)
{
	CU(cudaFreeHost(ptr));
}

static void *reachable(const void *p)
{
	struct cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	switch (a.type) {
	case cudaMemoryTypeDevice:
	case cudaMemoryTypeManaged:
	case cudaMemoryTypeHost:
		return a.devicePointer;
	default:
		return NULL;
	}
}

static void *cuda_kernel_ptr(struct kvt_dev *dev, const void *p, size_t len)
{
	char *first = reachable(p), *last;

	if (!first || len <= 1)
		return first;
	/* both ends, mapped contiguously: the buffer lies in one allocation */
	last = reachable((const char *)p + len - 1);
	return last == first + len - 1 ? first : NULL;
}

/* ---- device memory ----------------------------------------------------- */

static int cuda_mem_alloc(struct kvt_dev *dev, size_t len, struct kvt_dev_mem *mem)
{
	void *p = NULL;
	int rc = use(dev);

	if (rc || (rc = CU(cudaMalloc(&p, len))))
		return rc;
	/* cudaMemset runs on the legacy stream, which kvtier's non-blocking
	 * streams do not wait for: finish it before anyone can use the memory */
	rc = CU(cudaMemset(p, 0, len));
	if (!rc)
		rc = CU(cudaDeviceSynchronize());
	if (rc) {
		cudaFree(p);
		return rc;
	}
	mem->ptr = mem->base = p;
	mem->len = mem->map_len = len;
	return 0;
}

static void cuda_mem_free(struct kvt_dev_mem *mem)
{
	if (use(mem->dev))
		return;
	if (mem->imported)
		CU(cudaIpcCloseMemHandle(mem->base));
	else
		CU(cudaFree(mem->base));
}

static int cuda_mem_export(struct kvt_dev_mem *mem, struct kvt_dev_ipc_handle *out)
{
	cudaIpcMemHandle_t h;
	int rc = use(mem->dev);

	if (rc || (rc = CU(cudaIpcGetMemHandle(&h, mem->base))))
		return rc == -EINVAL || rc == -EIO ? kvt_dev_fail(-EOPNOTSUPP, "%s",
								  kvt_dev_last_error()) : rc;
	memcpy(out->bytes, &h, sizeof(h));
	out->len = mem->len;
	out->offset = (uint64_t)((char *)mem->ptr - (char *)mem->base);
	return 0;
}

/* cuMemGetAddressRange, reached through the runtime so the program needs no
 * link to libcuda (and still starts on machines without the driver). */
typedef CUresult (*get_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
static get_range_fn get_range;
static pthread_once_t get_range_once = PTHREAD_ONCE_INIT;

static void find_get_range(void)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
					     cudaEnableDefault, &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		get_range = (get_range_fn)fn;
}

/* The exporter's offset and length are the client's word: check them against
 * the allocation the handle really opened, so a hostile REGISTER cannot aim
 * the daemon's copies past it (into another engine's memory or its own). */
static int check_import_range(void *p, uint64_t offset, uint64_t len)
{
	CUdeviceptr base = 0;
	size_t size = 0;
	uint64_t start;

	pthread_once(&get_range_once, find_get_range);
	if (!get_range)
		return kvt_dev_fail(-ENOSYS, "cuMemGetAddressRange unavailable: cannot bound an "
					     "imported IPC handle");
	if (get_range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
		return kvt_dev_fail(-EFAULT, "cuMemGetAddressRange failed on an imported handle");
	start = (uint64_t)((uintptr_t)p - (uintptr_t)base);
	if (start > size || offset > size - start || len > size - start - offset)
		return kvt_dev_fail(-EINVAL, "IPC handle: offset %llu + length %llu exceed the "
					     "%zu-byte allocation",
				    (unsigned long long)offset, (unsigned long long)len, size);
	return 0;
}

static int cuda_mem_import(struct kvt_dev *dev, const struct kvt_dev_ipc_handle *h,
			   struct kvt_dev_mem *mem)
{
	cudaIpcMemHandle_t ih;
	void *p = NULL;
	int rc = use(dev);

	if (rc)
		return rc;
	memcpy(&ih, h->bytes, sizeof(ih));
	rc = CU(cudaIpcOpenMemHandle(&p, ih, cudaIpcMemLazyEnablePeerAccess));
	if (rc)
		return rc == -ENOMEM ? rc : kvt_dev_fail(-EFAULT, "%s", kvt_dev_last_error());
	rc = check_import_range(p, h->offset, h->len);
	if (rc) {
		cudaIpcCloseMemHandle(p);
		return rc;
	}
	mem->base = p;
	mem->map_len = (size_t)(h->offset + h->len);
	mem->ptr = (char *)p + h->offset;
	mem->len = (size_t)h->len;
	return 0;
}

/* ---- streams and events ------------------------------------------------ */

static cudaStream_t cs(struct kvt_dev_stream *s)
{
	return (cudaStream_t)s->priv;
}

static int cuda_stream_create(struct kvt_dev_stream *s, bool high_priority)
{
	int least = 0, greatest = 0, rc = use(s->dev);
	cudaStream_t st;

	if (rc || (rc = CU(cudaDeviceGetStreamPriorityRange(&least, &greatest))))
		return rc;
	/* non-blocking: never serialised behind the engine's legacy stream */
	rc = CU(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking,
					     high_priority ? greatest : least));
	if (rc)
		return rc;
	s->priv = st;
	return 0;
}

static void cuda_stream_destroy(struct kvt_dev_stream *s)
{
	CU(cudaStreamDestroy(cs(s)));
}

static int cuda_stream_sync(struct kvt_dev_stream *s)
{
	return CU(cudaStreamSynchronize(cs(s)));
}

static int cuda_stream_wait_event(struct kvt_dev_stream *s, struct kvt_dev_event *ev)
{
	return CU(cudaStreamWaitEvent(cs(s), (cudaEvent_t)ev->priv, 0));
}

struct host_fn {
	kvt_dev_done_cb cb;
	void *arg;
};

static void host_fn_run(void *arg)
{
	struct host_fn *f = arg;

	f->cb(f->arg, 0);
	free(f);
}

static int cuda_stream_callback(struct kvt_dev_stream *s, kvt_dev_done_cb cb, void *arg)
{
	struct host_fn *f = malloc(sizeof(*f));
	int rc;

	if (!f)
		return -ENOMEM;
	f->cb = cb;
	f->arg = arg;
	rc = CU(cudaLaunchHostFunc(cs(s), host_fn_run, f));
	if (rc)
		free(f);
	return rc;
}

static int cuda_stream_alloc(struct kvt_dev_stream *s, size_t len, void **out)
{
	int rc = use(s->dev);

	return rc ? rc : CU(cudaMallocAsync(out, len, cs(s)));
}

static void cuda_stream_free(struct kvt_dev_stream *s, void *p)
{
	CU(cudaFreeAsync(p, cs(s)));
}

static int cuda_event_create(struct kvt_dev_event *ev)
{
	cudaEvent_t e;
	int rc = use(ev->dev);

	if (rc || (rc = CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming))))
		return rc;
	ev->priv = e;
	return 0;
}

static void cuda_event_destroy(struct kvt_dev_event *ev)
{
	CU(cudaEventDestroy((cudaEvent_t)ev->priv));
}

static int cuda_event_record(struct kvt_dev_event *ev, struct kvt_dev_stream *s)
{
	return CU(cudaEventRecord((cudaEvent_t)ev->priv, cs(s)));
}

static int cuda_event_query(struct kvt_dev_event *ev)
{
	cudaError_t e = cudaEventQuery((cudaEvent_t)ev->priv);

	return e == cudaErrorNotReady ? -EAGAIN : map_err(e, "cudaEventQuery");
}

static int cuda_event_wait(struct kvt_dev_event *ev)
{
	return CU(cudaEventSynchronize((cudaEvent_t)ev->priv));
}

static int cuda_copy_async(struct kvt_dev_stream *s, void *dst, const void *src, size_t len)
{
	return CU(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, cs(s)));
}

/* ---- gather and scatter ------------------------------------------------- */

static int cuda_layout_upload(struct kvt_dev_layout *lay)
{
	size_t len = (size_t)lay->layers * lay->n_kv * sizeof(uint64_t);
	void *p = NULL;
	int rc = use(lay->dev);

	if (rc || (rc = CU(cudaMalloc(&p, len))))
		return rc;
	/* a pageable cudaMemcpy may return before its DMA lands, and kernels on
	 * non-blocking streams do not wait for the legacy stream */
	rc = CU(cudaMemcpy(p, lay->bases, len, cudaMemcpyHostToDevice));
	if (!rc)
		rc = CU(cudaDeviceSynchronize());
	if (rc) {
		cudaFree(p);
		return rc;
	}
	lay->dev_bases = p;
	return 0;
}

static void cuda_layout_release(struct kvt_dev_layout *lay)
{
	if (lay->dev_bases)
		CU(cudaFree(lay->dev_bases));
	lay->dev_bases = NULL;
}

static int cuda_gs_launch(struct kvt_dev_stream *s, const struct kvt_gs_args *args)
{
	int rc = use(s->dev);

	return rc ? rc : map_err((cudaError_t)kvt_cuda_gs_launch(args, s->priv), "gather/scatter launch");
}

const struct kvt_dev_backend_ops kvt_dev_cuda_ops = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.info = cuda_info,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.kernel_ptr = cuda_kernel_ptr,
	.mem_alloc = cuda_mem_alloc,
	.mem_free = cuda_mem_free,
	.mem_export = cuda_mem_export,
	.mem_import = cuda_mem_import,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_sync = cuda_stream_sync,
	.stream_wait_event = cuda_stream_wait_event,
	.stream_callback = cuda_stream_callback,
	.stream_alloc = cuda_stream_alloc,
	.stream_free = cuda_stream_free,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
	.event_wait = cuda_event_wait,
	.copy_async = cuda_copy_async,
	.layout_upload = cuda_layout_upload,
	.layout_release = cuda_layout_release,
	.gs_launch = cuda_gs_launch,
};
