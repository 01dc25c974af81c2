/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier — the device layer: moving KV blocks between an engine's paged GPU
 * memory and contiguous block buffers (pinned host DRAM or device memory).
 *
 * Two backends sit behind one API:
 *   - cuda: the CUDA runtime; gather/scatter run as kernels on the GPU.
 *   - host: plain host memory; "device memory" is a memfd region another
 *     process can map, streams are worker threads. Used wherever no GPU exists,
 *     with the same semantics: work queued on a stream runs asynchronously and
 *     its completion is visible only through events (or stream callbacks).
 *
 * Pointers named "device" below are device addresses (CUDA) or addresses in a
 * memfd region (host). Block buffers may be device memory, host memory that is
 * registered or allocated here (pinned; "mapped" for zero-copy kernels), or
 * pageable host memory (staged, slower).
 *
 * Every function returns 0 (or a count) or a negative errno. A CUDA error is
 * mapped to an errno (-ENOMEM, -EINVAL, -ENODEV, -EFAULT, -EEXIST, -ENOENT,
 * -EOPNOTSUPP, -EAGAIN, else -EIO) and its own message is kept, per thread, for
 * kvt_dev_last_error(). Handles are opaque; a destructor accepts NULL. */
#ifndef KVTIER_DEVICE_H
#define KVTIER_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_dev;        /* an opened backend bound to one device */
struct kvt_dev_mem;    /* device memory, allocated here or imported */
struct kvt_dev_stream; /* an ordered queue of asynchronous work */
struct kvt_dev_event;  /* a marker recorded on a stream */
struct kvt_dev_layout; /* an engine's KV layout, registered for gather/scatter */

/* ---- opening a backend ------------------------------------------------- */

enum kvt_dev_backend {
	KVT_DEV_AUTO = 0, /* cuda when a GPU is usable, else host (reason logged once) */
	KVT_DEV_CUDA = 1, /* cuda or fail with -ENODEV */
	KVT_DEV_HOST = 2, /* host, even where a GPU exists */
};

struct kvt_dev_opts {
	size_t size;                  /* sizeof(struct kvt_dev_opts), set by _init */
	enum kvt_dev_backend backend; /* default KVT_DEV_AUTO */
	int device;                   /* CUDA device ordinal, default 0 */
};

/* Fill opts with the defaults as far as size_bytes (sizeof(*opts) for a
 * caller of this version) reaches; see "Versioned structs" in types.h. */
void kvt_dev_opts_init(struct kvt_dev_opts *opts, size_t size_bytes);

/* Open a backend. Returns 0 and *out (owned by the caller, freed by
 * kvt_dev_close), -EINVAL for bad opts, -ENODEV when KVT_DEV_CUDA is asked for
 * and no GPU (or no CUDA build) is there, -ENOMEM. */
int kvt_dev_open(const struct kvt_dev_opts *opts, struct kvt_dev **out);

/* Close a backend. Everything created from it (streams, events, memory,
 * layouts) must be freed first; what is still alive is leaked, not freed.
 * NULL is accepted. */
void kvt_dev_close(struct kvt_dev *dev);

/* "cuda", "host" or "auto". Never NULL. */
const char *kvt_dev_backend_name(enum kvt_dev_backend backend);

#define KVT_DEV_NAME_MAX 128

struct kvt_dev_info {
	size_t size;                  /* sizeof(struct kvt_dev_info), set by the caller */
	enum kvt_dev_backend backend; /* KVT_DEV_CUDA or KVT_DEV_HOST */
	int device;                   /* ordinal in use */
	int device_count;             /* GPUs seen (0 on host) */
	char name[KVT_DEV_NAME_MAX];  /* "NVIDIA H100 80GB HBM3", "host" */
	char pci_bus_id[32];          /* "0000:17:00.0", "" on host */
	uint64_t total_mem_bytes;     /* device memory (host: physical RAM) */
	uint64_t free_mem_bytes;
	int cc_major, cc_minor;       /* compute capability, 0.0 on host */
	int pcie_gen, pcie_width;     /* current link, 0 when unknown */
	int multiprocessors;          /* SMs (host: online CPUs) */
	bool can_map_host;            /* kernels can access mapped host memory */
	bool ipc;                     /* kvt_dev_mem_export/import work */
	char fallback_reason[KVT_DEV_NAME_MAX]; /* why AUTO chose host, "" otherwise */
};

/* Probe the device of dev, filling info as far as info->size (set by the
 * caller) reaches. Returns 0 or -EINVAL. */
int kvt_dev_info(struct kvt_dev *dev, struct kvt_dev_info *info);

/* The message of the last error a kvt_dev_* call returned on this thread
 * (the CUDA message for CUDA errors), "" if none. Valid until the thread's
 * next failing call. */
const char *kvt_dev_last_error(void);

/* ---- pinned host memory ------------------------------------------------ */

/* Flags of kvt_dev_host_register and kvt_dev_host_alloc. */
#define KVT_DEV_HOST_MAPPED 0x1u /* visible to kernels (zero-copy gather/scatter) */

/* Pin [ptr, ptr + len) (e.g. the DRAM tier's region) so async copies from and
 * to it run at full speed, and with KVT_DEV_HOST_MAPPED map it for kernels.
 * ptr and len should be page-aligned. Returns 0, -EINVAL, -EEXIST if it
 * overlaps a registered range, -ENOMEM when the pages cannot be locked. The
 * memory stays owned by the caller and must outlive the registration. */
int kvt_dev_host_register(struct kvt_dev *dev, void *ptr, size_t len, unsigned flags);

/* Undo kvt_dev_host_register of the range starting at ptr. Work using it must
 * have completed. Returns 0 or -ENOENT. */
int kvt_dev_host_unregister(struct kvt_dev *dev, void *ptr);

/* Allocate len bytes of pinned host memory (zeroed), mapped with
 * KVT_DEV_HOST_MAPPED. Returns 0 and *out, or -EINVAL, -ENOMEM. Free with
 * kvt_dev_host_free. */
int kvt_dev_host_alloc(struct kvt_dev *dev, size_t len, unsigned flags, void **out);

/* Free memory of kvt_dev_host_alloc. NULL is accepted. */
void kvt_dev_host_free(struct kvt_dev *dev, void *ptr);

/* ---- device memory ----------------------------------------------------- */

/* Allocate len bytes of device memory (host: a zeroed memfd region, so that it
 * can be exported). Returns 0 and *out, or -EINVAL, -ENOMEM. */
int kvt_dev_mem_alloc(struct kvt_dev *dev, size_t len, struct kvt_dev_mem **out);

/* Free memory allocated or imported here (an import is unmapped; the exporter's
 * memory lives on). Work using it must have completed. NULL is accepted. */
void kvt_dev_mem_free(struct kvt_dev_mem *mem);

/* The device address of mem and its length. */
void *kvt_dev_mem_ptr(const struct kvt_dev_mem *mem);
size_t kvt_dev_mem_len(const struct kvt_dev_mem *mem);

/* What travels to another process so that it can open the same memory. On
 * CUDA `bytes` holds a cudaIpcMemHandle_t and fd is -1; on host `fd` is the
 * memfd, to be passed over a Unix socket (SCM_RIGHTS) — the receiver stores
 * the fd it received there. `offset` lets an exporter name memory inside a
 * larger allocation (an engine's KV pool). */
#define KVT_DEV_IPC_BYTES 64
struct kvt_dev_ipc_handle {
	uint32_t backend;                  /* enum kvt_dev_backend of the exporter */
	int32_t fd;                        /* host: the memfd; cuda: -1 */
	uint64_t len;                      /* bytes from offset on */
	uint64_t offset;                   /* from the start of the allocation */
	uint8_t bytes[KVT_DEV_IPC_BYTES];  /* cuda: the IPC memory handle */
};

/* Describe mem for another process. The handle's fd stays owned by mem (valid
 * while mem lives; the sender may close nothing). Returns 0, -EINVAL, or
 * -EOPNOTSUPP where the device cannot export. */
int kvt_dev_mem_export(struct kvt_dev_mem *mem, struct kvt_dev_ipc_handle *out);

/* Open memory exported by another process (an engine's KV pool). The handle's
 * fd is duplicated, so the caller still owns and closes its own. Returns 0 and
 * *out, -EINVAL (backend mismatch, bad handle), -EFAULT when the memory cannot
 * be opened, -ENOMEM. kvt_dev_mem_ptr(*out) is the address at handle->offset. */
int kvt_dev_mem_import(struct kvt_dev *dev, const struct kvt_dev_ipc_handle *handle,
		       struct kvt_dev_mem **out);

/* ---- streams and events ------------------------------------------------ */

/* Create a stream. Use one for saves (device to host) and one for loads (host
 * to device) so that they overlap with each other and with the engine's
 * compute. high_priority asks for the device's highest stream priority (loads
 * the engine waits on). Returns 0 and *out, or -ENOMEM. */
int kvt_dev_stream_create(struct kvt_dev *dev, bool high_priority,
			  struct kvt_dev_stream **out);

/* Wait for all work queued on stream, then free it. NULL is accepted. */
void kvt_dev_stream_destroy(struct kvt_dev_stream *stream);

/* Block until all work queued on stream has completed. Returns 0, or the
 * first error of an asynchronous operation (-EIO, -EFAULT). */
int kvt_dev_stream_sync(struct kvt_dev_stream *stream);

/* Make later work on stream wait until ev's recorded work has completed
 * (ordering across streams, without blocking the caller). Returns 0. */
int kvt_dev_stream_wait_event(struct kvt_dev_stream *stream, struct kvt_dev_event *ev);

/* Callback run once the work queued before it on a stream has completed. It
 * runs on a backend thread and must not call kvt_dev_* functions. */
typedef void (*kvt_dev_done_cb)(void *arg, int status);

/* Queue cb(arg, status) on stream; status is 0 (on CUDA, work that failed
 * leaves the context broken and callbacks after it do not run). Returns 0,
 * -EINVAL, -ENOMEM. */
int kvt_dev_stream_callback(struct kvt_dev_stream *stream, kvt_dev_done_cb cb, void *arg);

int kvt_dev_event_create(struct kvt_dev *dev, struct kvt_dev_event **out);
void kvt_dev_event_destroy(struct kvt_dev_event *ev);

/* Record ev at the current end of stream: it completes when the work queued
 * before it has. Recording again moves it (the last record counts). */
int kvt_dev_event_record(struct kvt_dev_event *ev, struct kvt_dev_stream *stream);

/* Returns 0 when ev's work has completed (or ev was never recorded), -EAGAIN
 * while pending, or the error of that work. Never blocks. */
int kvt_dev_event_query(struct kvt_dev_event *ev);

/* Block until ev's work has completed. Returns 0 or its error. */
int kvt_dev_event_wait(struct kvt_dev_event *ev);

/* ---- plain copies ------------------------------------------------------ */

/* Queue a copy of len bytes from src to dst on stream; either side may be
 * device or host memory (the direction is inferred). Pageable host memory is
 * accepted but slower. Returns 0 or -EINVAL. */
int kvt_dev_copy_async(struct kvt_dev_stream *stream, void *dst, const void *src, size_t len);

/* ---- KV layouts -------------------------------------------------------- */

/* Where an engine keeps its KV, per layer (kind is enum kvt_layout):
 *   KVT_LAYOUT_PAGED_KV  one tensor per layer, [2][num_pages][page_tokens][kv_heads][head_dim]:
 *                        k_base[l] points at K of page 0, V at + kv_stride.
 *   KVT_LAYOUT_SPLIT_KV  two tensors per layer, k_base[l] and v_base[l], each
 *                        [num_pages][page_tokens][kv_heads][head_dim].
 *   KVT_LAYOUT_MLA       one latent tensor per layer, [num_pages][page_tokens][head_dim]
 *                        (kv_heads = 1).
 * Within a page the page_tokens x kv_heads x head_dim elements are dense;
 * page_stride (bytes between pages) and kv_stride allow interleaved pools,
 * e.g. [num_pages][2][...] is page_stride = 2 x page bytes, kv_stride = page
 * bytes.
 *
 * A block is pages_per_block pages (block_tokens = pages_per_block x
 * page_tokens), and its contiguous buffer is ordered
 *   [layers][K, V (MLA: latent only)][block_tokens][kv_heads][head_dim],
 * so the bytes of layer l are contiguous and come before those of layer l + 1;
 * its size is kvt_dev_layout_block_bytes(). */
struct kvt_dev_layout_desc {
	size_t size;              /* sizeof(struct kvt_dev_layout_desc), set by _init */
	enum kvt_layout kind;
	uint32_t layers;
	uint32_t kv_heads;        /* 1 for MLA */
	uint32_t head_dim;        /* MLA: kv_lora_rank + qk_rope_head_dim */
	uint32_t elem_bytes;      /* 1, 2 or 4 (kvt_dtype_bytes) */
	uint32_t page_tokens;     /* tokens per engine page */
	uint32_t pages_per_block; /* engine pages per kvtier block, default 1 */
	uint64_t num_pages;       /* pages per layer tensor (bounds page ids) */
	uint64_t page_stride;     /* bytes between pages; 0 = dense page bytes */
	uint64_t kv_stride;       /* PAGED_KV: bytes from K to V; 0 = num_pages x page_stride */
	void *const *k_base;      /* [layers] device addresses (PAGED: K of page 0) */
	void *const *v_base;      /* [layers] SPLIT_KV only, else NULL */
};

/* Fill desc with the defaults (pages_per_block = 1, the rest 0) as far as
 * size_bytes reaches, and set its size. */
void kvt_dev_layout_desc_init(struct kvt_dev_layout_desc *desc, size_t size_bytes);

/* Bytes of one contiguous block of desc, 0 for an invalid descriptor. */
uint64_t kvt_dev_layout_block_bytes(const struct kvt_dev_layout_desc *desc);

/* Register a layout with dev: validates it and copies the per-layer base
 * pointers (to the device). The tensors stay owned by the engine. Returns 0
 * and *out, -EINVAL for an invalid descriptor, -ENOMEM. */
int kvt_dev_layout_create(struct kvt_dev *dev, const struct kvt_dev_layout_desc *desc,
			  struct kvt_dev_layout **out);

/* Free a layout; work using it must have completed. NULL is accepted. */
void kvt_dev_layout_destroy(struct kvt_dev_layout *layout);

uint64_t kvt_dev_layout_bytes(const struct kvt_dev_layout *layout);

/* ---- gather and scatter ------------------------------------------------ */

enum kvt_dev_path {
	KVT_DEV_PATH_AUTO = 0,      /* direct when the buffers allow it, else staged */
	KVT_DEV_PATH_DIRECT = 1,    /* kernel reads/writes the block buffers in place:
	                             * device memory or mapped pinned host (zero-copy) */
	KVT_DEV_PATH_STAGED = 2,    /* kernel to a device staging buffer, then one
	                             * large copy per run of adjacent blocks */
	KVT_DEV_PATH_PER_LAYER = 3, /* baseline: one async memcpy per page per layer
	                             * per K/V, no kernel (kept for the bench) */
};

/* Called when layer `layer` of every block of a scatter is in place. Runs on
 * a backend thread; must not call kvt_dev_* functions. */
typedef void (*kvt_dev_layer_cb)(void *arg, uint32_t layer);

struct kvt_dev_xfer_opts {
	size_t size;                  /* sizeof(struct kvt_dev_xfer_opts), set by _init */
	enum kvt_dev_path path;       /* default KVT_DEV_PATH_AUTO */
	/* Per-layer completion (scatter; gather too): NULL, or [layers] events,
	 * event l recorded once layers 0..l of every block are done, so the
	 * engine's layer l can start while later layers still load. */
	struct kvt_dev_event *const *layer_events;
	kvt_dev_layer_cb layer_cb;    /* alternatively (or also) a callback per layer */
	void *layer_cb_arg;
};

void kvt_dev_xfer_opts_init(struct kvt_dev_xfer_opts *opts, size_t size_bytes);

/* Queue on stream the gather of n_blocks blocks: block i is the pages
 * pages[i x pages_per_block ...] of every layer, copied into the contiguous
 * buffer blocks[i] (kvt_dev_layout_block_bytes long). opts may be NULL.
 * Returns 0 once queued (completion by event), -EINVAL for NULL arguments,
 * -ERANGE for a page id >= num_pages, -EFAULT when the path is DIRECT and
 * some blocks[i] is not wholly device memory or mapped pinned host memory,
 * or a mapped CUDA error. */
int kvt_dev_gather(struct kvt_dev_layout *layout, struct kvt_dev_stream *stream,
		   const uint32_t *pages, size_t n_blocks, void *const *blocks,
		   const struct kvt_dev_xfer_opts *opts);

/* The reverse of kvt_dev_gather: copy block buffers into the engine's pages.
 * Same arguments and errors. */
int kvt_dev_scatter(struct kvt_dev_layout *layout, struct kvt_dev_stream *stream,
		    const uint32_t *pages, size_t n_blocks, const void *const *blocks,
		    const struct kvt_dev_xfer_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_DEVICE_H */
