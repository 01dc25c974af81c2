/* SPDX-License-Identifier: Apache-2.0 */
/* The device layer's inside: the objects behind the opaque handles of
 * kvtier/device.h, and the ops table each backend (host_backend.c,
 * cuda_backend.c) fills. device.c and layout.c check arguments and plan;
 * a backend only executes. */
#ifndef KVT_CUDA_BACKEND_H
#define KVT_CUDA_BACKEND_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvtier/device.h"

/* Caps of one gather/scatter launch, so that its arguments travel by value
 * (kernel parameters), never through memory that a later call could reuse. */
#define KVT_GS_MAX_BLOCKS 32
#define KVT_GS_MAX_PAGES 512

enum kvt_dev_dir {
	KVT_DEV_GATHER = 0,  /* pages -> blocks */
	KVT_DEV_SCATTER = 1, /* blocks -> pages */
};

/* One launch of gather/scatter: up to KVT_GS_MAX_BLOCKS blocks, layers
 * [layer_begin, layer_end). The chunk (block b, layer l, kv k, page p) is
 * chunk_bytes contiguous on both sides:
 *   engine: bases[l * n_kv + k] + pages[b * ppb + p] * page_stride
 *   block:  blocks[b] + block_off + (((l - layer_begin) * n_kv + k) * ppb + p) * chunk_bytes
 * block_off is layer_begin's offset in a whole block buffer, or 0 when the
 * blocks are staging slices holding only the layers of this launch. */
struct kvt_gs_args {
	const uint64_t *bases; /* [layers * n_kv], device-accessible */
	uint64_t chunk_bytes;
	uint64_t page_stride;
	uint64_t block_off;
	uint32_t n_kv, ppb;
	uint32_t layer_begin, layer_end;
	uint32_t n_blocks;
	uint32_t dir;          /* enum kvt_dev_dir */
	uint32_t base_align;   /* power of two (<= 16) dividing every engine
	                        * address, page_stride and chunk_bytes */
	uint64_t blocks[KVT_GS_MAX_BLOCKS];
	uint32_t pages[KVT_GS_MAX_PAGES];
};

#ifdef __CUDACC__
#define KVT_HOST_DEVICE __host__ __device__
#else
#define KVT_HOST_DEVICE
#endif

/* Chunks of one launch. */
static inline KVT_HOST_DEVICE uint64_t kvt_gs_chunks(const struct kvt_gs_args *a)
{
	return (uint64_t)a->n_blocks * (a->layer_end - a->layer_begin) * a->n_kv * a->ppb;
}

/* Where chunk c of a launch comes from and goes to. Shared by the kernels and
 * the host backend, so the host-backend tests prove the kernels' indexing. */
static inline KVT_HOST_DEVICE void kvt_gs_chunk(const struct kvt_gs_args *a, uint64_t c,
						const char **src, char **dst)
{
	const uint32_t nl = a->layer_end - a->layer_begin;
	const uint32_t p = (uint32_t)(c % a->ppb);
	uint32_t k, lr, b;
	char *eng, *blk;

	c /= a->ppb;
	k = (uint32_t)(c % a->n_kv);
	c /= a->n_kv;
	lr = (uint32_t)(c % nl);
	b = (uint32_t)(c / nl);
	eng = (char *)(uintptr_t)a->bases[(a->layer_begin + lr) * a->n_kv + k] +
	      (uint64_t)a->pages[b * a->ppb + p] * a->page_stride;
	blk = (char *)(uintptr_t)a->blocks[b] + a->block_off +
	      (((uint64_t)lr * a->n_kv + k) * a->ppb + p) * a->chunk_bytes;
	*src = a->dir == KVT_DEV_GATHER ? eng : blk;
	*dst = a->dir == KVT_DEV_GATHER ? blk : eng;
}

struct kvt_dev_backend_ops;

struct kvt_dev {
	const struct kvt_dev_backend_ops *ops;
	enum kvt_dev_backend backend;
	int device;
	char fallback_reason[KVT_DEV_NAME_MAX];
	void *priv; /* the backend's */
};

struct kvt_dev_mem {
	struct kvt_dev *dev;
	void *ptr;        /* device address of the memory (import: base + offset) */
	size_t len;
	void *base;       /* what to free or unmap */
	size_t map_len;
	int fd;           /* host: the memfd, -1 otherwise */
	bool imported;
};

struct kvt_dev_stream {
	struct kvt_dev *dev;
	void *priv;
	void *staging;       /* device staging buffer of the staged path */
	size_t staging_len;
};

struct kvt_dev_event {
	struct kvt_dev *dev;
	void *priv;
};

struct kvt_dev_layout {
	struct kvt_dev *dev;
	enum kvt_layout kind;
	uint32_t layers, n_kv, ppb;
	uint64_t num_pages;
	uint64_t chunk_bytes;    /* one page of one layer's K (or V, or latent) */
	uint64_t page_stride;
	uint64_t layer_bytes;    /* n_kv * ppb * chunk_bytes */
	uint64_t block_bytes;    /* layers * layer_bytes */
	uint32_t base_align;     /* see struct kvt_gs_args */
	uint64_t *bases;         /* [layers * n_kv] host copy */
	void *dev_bases;         /* the backend's copy kernels read */
};

struct kvt_dev_backend_ops {
	const char *name;
	int (*open)(struct kvt_dev *dev, const struct kvt_dev_opts *opts);
	void (*close)(struct kvt_dev *dev);
	int (*info)(struct kvt_dev *dev, struct kvt_dev_info *info);

	int (*host_register)(struct kvt_dev *dev, void *ptr, size_t len, unsigned flags);
	int (*host_unregister)(struct kvt_dev *dev, void *ptr);
	int (*host_alloc)(struct kvt_dev *dev, size_t len, unsigned flags, void **out);
	void (*host_free)(struct kvt_dev *dev, void *ptr);
	/* The address kernels use for [p, p + len) (device memory, mapped
	 * pinned host), NULL when kernels cannot reach all of it. */
	void *(*kernel_ptr)(struct kvt_dev *dev, const void *p, size_t len);

	int (*mem_alloc)(struct kvt_dev *dev, size_t len, struct kvt_dev_mem *mem);
	void (*mem_free)(struct kvt_dev_mem *mem);
	int (*mem_export)(struct kvt_dev_mem *mem, struct kvt_dev_ipc_handle *out);
	int (*mem_import)(struct kvt_dev *dev, const struct kvt_dev_ipc_handle *h,
			  struct kvt_dev_mem *mem);

	int (*stream_create)(struct kvt_dev_stream *s, bool high_priority);
	void (*stream_destroy)(struct kvt_dev_stream *s);
	int (*stream_sync)(struct kvt_dev_stream *s);
	int (*stream_wait_event)(struct kvt_dev_stream *s, struct kvt_dev_event *ev);
	int (*stream_callback)(struct kvt_dev_stream *s, kvt_dev_done_cb cb, void *arg);
	/* Device memory of len bytes, freed in stream order (staging). */
	int (*stream_alloc)(struct kvt_dev_stream *s, size_t len, void **out);
	void (*stream_free)(struct kvt_dev_stream *s, void *p);

	int (*event_create)(struct kvt_dev_event *ev);
	void (*event_destroy)(struct kvt_dev_event *ev);
	int (*event_record)(struct kvt_dev_event *ev, struct kvt_dev_stream *s);
	int (*event_query)(struct kvt_dev_event *ev);
	int (*event_wait)(struct kvt_dev_event *ev);

	int (*copy_async)(struct kvt_dev_stream *s, void *dst, const void *src, size_t len);

	int (*layout_upload)(struct kvt_dev_layout *layout);
	void (*layout_release)(struct kvt_dev_layout *layout);
	/* Queue one launch; args is copied before return. */
	int (*gs_launch)(struct kvt_dev_stream *s, const struct kvt_gs_args *args);
};

extern const struct kvt_dev_backend_ops kvt_dev_host_ops;
#ifdef KVT_HAVE_CUDA
extern const struct kvt_dev_backend_ops kvt_dev_cuda_ops;
#endif

/* Keep msg (printf format) as this thread's last error and return err. */
int kvt_dev_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Run one gather/scatter launch on the CPU (the host backend's "kernel"). */
void kvt_gs_run_cpu(const struct kvt_gs_args *args);

#endif /* KVT_CUDA_BACKEND_H */
