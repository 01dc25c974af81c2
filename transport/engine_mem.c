/* SPDX-License-Identifier: Apache-2.0 */
/* Engine memory on the host backend: a sealed memfd mapped into the daemon. */
#include "transport/engine_mem.h"

#include "kvtier/device.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#include "util/block_sum.h"

/* a*b + acc without overflow, or false. */
static bool mul_add(uint64_t a, uint64_t b, uint64_t *acc)
{
	uint64_t p;

	return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(*acc, p, acc);
}

/* The layout of r stays inside [offset, offset + bytes): 0 or -EINVAL. */
static int layout_fits(const struct kvt_req_register *r, uint32_t kvn, uint64_t page_bytes)
{
	uint64_t end = r->offset, total;

	if (kvn < 1 || kvn > 2 || page_bytes == 0 || r->layers == 0 || r->pages == 0)
		return -EINVAL;
	if (kvn == 1 && r->kv_stride != 0)
		return -EINVAL;
	if (!mul_add(r->layers - 1, r->layer_stride, &end) ||
	    !mul_add(kvn - 1, r->kv_stride, &end) ||
	    !mul_add(r->pages - 1, r->page_stride, &end) ||
	    __builtin_add_overflow(end, page_bytes, &end) ||
	    __builtin_add_overflow(r->offset, r->bytes, &total) ||
	    end > total || total > SIZE_MAX)
		return -EINVAL;
	if (r->pages > 1 && r->page_stride < page_bytes)
		return -EINVAL; /* pages would overlap */
	return 0;
}

/* A memfd the daemon maps must be sealed against shrinking. */
static int check_memfd(int fd, uint64_t total)
{
	struct stat st;
	int seals;

	if (fstat(fd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < total)
		return -EINVAL;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	return 0;
}

int kvt_engine_mem_import(struct kvt_dev *dev, int fd, const struct kvt_req_register *r,
			  const struct kvt_ns_desc *d, struct kvt_engine_mem **out)
{
	struct kvt_dev_layout_desc ld;
	struct kvt_dev_ipc_handle h;
	struct kvt_engine_mem *m;
	uint32_t kvn = d->layout == KVT_LAYOUT_MLA ? 1 : 2;
	uint64_t page = (uint64_t)d->block_tokens * d->kv_heads * d->head_dim *
			kvt_dtype_bytes(d->dtype);
	void **k_base = NULL, **v_base = NULL;
	uint8_t *base;
	int err;

	if (!dev || r->layers != d->layers)
		return -EINVAL;
	err = layout_fits(r, kvn, page);
	if (!err && fd >= 0)
		err = check_memfd(fd, r->offset + r->bytes);
	if (err)
		return err;
	m = calloc(1, sizeof(*m));
	k_base = calloc(r->layers, sizeof(*k_base));
	v_base = calloc(r->layers, sizeof(*v_base));
	if (!m || !k_base || !v_base) {
		err = -ENOMEM;
		goto fail;
	}
	memset(&h, 0, sizeof(h));
	h.backend = fd >= 0 ? KVT_DEV_HOST : KVT_DEV_CUDA;
	h.fd = fd;
	h.len = r->bytes;
	h.offset = r->offset;
	if (r->ipc_len)
		memcpy(h.bytes, r->ipc, r->ipc_len < KVT_DEV_IPC_BYTES ? r->ipc_len : KVT_DEV_IPC_BYTES);
	err = kvt_dev_mem_import(dev, &h, &m->dmem);
	if (err)
		goto fail;
	base = kvt_dev_mem_ptr(m->dmem);
	for (uint32_t l = 0; l < r->layers; l++) {
		k_base[l] = base + (uint64_t)l * r->layer_stride;
		v_base[l] = (uint8_t *)k_base[l] + r->kv_stride;
	}
	kvt_dev_layout_desc_init(&ld, sizeof(ld));
	ld.kind = d->layout;
	ld.layers = d->layers;
	ld.kv_heads = d->kv_heads;
	ld.head_dim = d->head_dim;
	ld.elem_bytes = (uint32_t)kvt_dtype_bytes(d->dtype);
	ld.page_tokens = d->block_tokens;
	ld.pages_per_block = 1;
	ld.num_pages = r->pages;
	ld.page_stride = r->page_stride;
	ld.kv_stride = d->layout == KVT_LAYOUT_PAGED_KV ? r->kv_stride : 0;
	ld.k_base = k_base;
	ld.v_base = d->layout == KVT_LAYOUT_SPLIT_KV ? v_base : NULL;
	err = kvt_dev_layout_create(dev, &ld, &m->layout);
	if (err)
		goto fail;
	free(k_base);
	free(v_base);
	m->refs = 1;
	if (fd >= 0) {
		m->host = kvt_dev_mem_ptr(m->dmem);
		m->host_len = r->bytes;
	}
	pthread_mutex_init(&m->populate_lock, NULL);
	m->dev = dev;
	m->ns = r->ns;
	m->layers = r->layers;
	m->pages = r->pages;
	m->kvn = kvn;
	m->layer_stride = r->layer_stride;
	m->kv_stride = r->kv_stride;
	m->page_stride = r->page_stride;
	m->page_bytes = page;
	*out = m;
	return 0;

fail:
	if (m)
		kvt_dev_mem_free(m->dmem);
	free(m);
	free(k_base);
	free(v_base);
	return err;
}

int kvt_engine_mem_map(int fd, const struct kvt_req_register *r, uint32_t kvn,
		       uint64_t page_bytes, struct kvt_engine_mem **out)
{
	struct kvt_engine_mem *m;
	uint64_t total;
	struct stat st;
	int seals, err;

	/* the last byte of the last page of the last layer must lie inside */
	err = layout_fits(r, kvn, page_bytes);
	if (err)
		return err;
	total = r->offset + r->bytes; /* layout_fits checked it cannot wrap */
	if (fstat(fd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < total)
		return -EINVAL;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m->map == MAP_FAILED) {
		err = -errno;
		free(m);
		return err;
	}
	m->refs = 1;
	m->host = m->map;
	m->host_len = total;
	pthread_mutex_init(&m->populate_lock, NULL);
	m->map_len = total;
	m->base = m->map + r->offset;
	m->ns = r->ns;
	m->layers = r->layers;
	m->pages = r->pages;
	m->kvn = kvn;
	m->layer_stride = r->layer_stride;
	m->kv_stride = r->kv_stride;
	m->page_stride = r->page_stride;
	m->page_bytes = page_bytes;
	*out = m;
	return 0;
}

/* Map [p, p + len) in without changing a byte. */
static void populate(uint8_t *p, uint64_t len)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uint8_t *start = (uint8_t *)((uintptr_t)p & ~(pg - 1));
	uint64_t n = len + (uint64_t)(p - start);

	if (madvise(start, n, MADV_POPULATE_WRITE) == 0 || errno != EINVAL)
		return;
	/* before Linux 5.14: a read maps each page of a shared memfd */
	for (uint64_t off = 0; off < n; off += pg)
		(void)*(volatile uint8_t *)(start + off);
}

void kvt_engine_mem_populate(struct kvt_engine_mem *m)
{
	if (!m->host || __atomic_load_n(&m->populated, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&m->populate_lock);
	if (!m->populated) {
		populate(m->host, m->host_len);
		__atomic_store_n(&m->populated, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&m->populate_lock);
}

void kvt_engine_mem_get(struct kvt_engine_mem *m)
{
	__atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
}

void kvt_engine_mem_put(struct kvt_engine_mem *m)
{
	if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (m->layout) {
		kvt_dev_layout_destroy(m->layout);
		kvt_dev_mem_free(m->dmem);
	} else {
		munmap(m->map, m->map_len);
	}
	pthread_mutex_destroy(&m->populate_lock);
	free(m);
}

static uint8_t *page_addr(const struct kvt_engine_mem *m, uint32_t page, uint32_t layer,
			  uint32_t kv)
{
	return m->base + (uint64_t)layer * m->layer_stride + (uint64_t)kv * m->kv_stride +
	       (uint64_t)page * m->page_stride;
}

void kvt_engine_mem_gather(const struct kvt_engine_mem *m, uint32_t page, void *block)
{
	uint8_t *dst = block;

	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t kv = 0; kv < m->kvn; kv++, dst += m->page_bytes)
			memcpy(dst, page_addr(m, page, l, kv), m->page_bytes);
}

uint64_t kvt_engine_mem_gather_sum(const struct kvt_engine_mem *m, uint32_t page, void *block)
{
	uint8_t *dst = block;
	struct kvt_sum sum;

	kvt_sum_begin(&sum);
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t kv = 0; kv < m->kvn; kv++, dst += m->page_bytes)
			kvt_sum_copy(&sum, dst, page_addr(m, page, l, kv), m->page_bytes);
	return kvt_sum_end(&sum);
}

void kvt_engine_mem_pieces(const struct kvt_engine_mem *m, uint32_t page, struct iovec *v)
{
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t kv = 0; kv < m->kvn; kv++, v++)
			*v = (struct iovec){ .iov_base = page_addr(m, page, l, kv),
					     .iov_len = m->page_bytes };
}

void kvt_engine_mem_scatter_layer(const struct kvt_engine_mem *m, uint32_t page,
				  uint32_t layer, const void *block)
{
	const uint8_t *src = (const uint8_t *)block + (uint64_t)layer * m->kvn * m->page_bytes;

	for (uint32_t kv = 0; kv < m->kvn; kv++, src += m->page_bytes)
		memcpy(page_addr(m, page, layer, kv), src, m->page_bytes);
}
