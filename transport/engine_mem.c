/* SPDX-License-Identifier: Apache-2.0 */
/* Engine memory on the host backend: a sealed memfd mapped into the daemon. */
#include "transport/engine_mem.h"

#include "kvtier/device.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#include "util/block_sum.h"
#include "util/fault_guard.h"

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

/* The bits of m->faulted for host_len bytes: 0 or -ENOMEM. */
static int faulted_alloc(struct kvt_engine_mem *m)
{
	uint64_t chunks = (m->host_len + KVT_ENGINE_MEM_CHUNK - 1) / KVT_ENGINE_MEM_CHUNK;

	m->faulted = calloc((size_t)((chunks + 63) / 64) + 1, sizeof(*m->faulted));
	return m->faulted ? 0 : -ENOMEM;
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
	k_base = v_base = NULL;
	m->refs = 1;
	if (fd >= 0) {
		m->host = kvt_dev_mem_ptr(m->dmem);
		m->host_len = r->bytes;
		err = faulted_alloc(m);
		if (err)
			goto fail;
	}
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
	if (m) {
		kvt_dev_layout_destroy(m->layout);
		kvt_dev_mem_free(m->dmem);
	}
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
	m->map_len = total;
	err = faulted_alloc(m);
	if (err) {
		munmap(m->map, total);
		free(m);
		return err;
	}
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

struct span {
	uint8_t *p;
	uint64_t len;
};

/* before Linux 5.14: a read maps each page of a shared memfd */
static void read_each_page(void *arg)
{
	const struct span *sp = arg;
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);

	for (uint64_t off = 0; off < sp->len; off += pg)
		(void)*(volatile uint8_t *)(sp->p + off);
}

/* Map chunks [c0, c1) of m in without changing a byte. */
static void populate_chunks(const struct kvt_engine_mem *m, uint64_t c0, uint64_t c1)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uint8_t *p = m->host + c0 * KVT_ENGINE_MEM_CHUNK;
	uint64_t len = c1 * KVT_ENGINE_MEM_CHUNK > m->host_len ?
		       m->host_len - c0 * KVT_ENGINE_MEM_CHUNK : (c1 - c0) * KVT_ENGINE_MEM_CHUNK;
	/* host lies at the registered offset, which need not be page aligned */
	struct span sp = { (uint8_t *)((uintptr_t)p & ~(pg - 1)), 0 };

	sp.len = len + (uint64_t)(p - sp.p);
	if (madvise(sp.p, sp.len, MADV_POPULATE_WRITE) == 0 || errno != EINVAL)
		return;
	(void)kvt_fault_guard_run(m->host, m->host_len, read_each_page, &sp);
}

static bool chunk_faulted(const struct kvt_engine_mem *m, uint64_t c)
{
	return __atomic_load_n(&m->faulted[c / 64], __ATOMIC_RELAXED) & (1ull << (c % 64));
}

/* Fault in the chunks of [p, p + len) not faulted in yet, runs of them at a
 * time. Two workers may populate one chunk at once: harmless. */
static void populate_range(struct kvt_engine_mem *m, const uint8_t *p, uint64_t len)
{
	uint64_t off = (uint64_t)(p - m->host);
	uint64_t c = off / KVT_ENGINE_MEM_CHUNK, end = (off + len - 1) / KVT_ENGINE_MEM_CHUNK + 1;

	while (c < end) {
		uint64_t run = c;

		while (run < end && !chunk_faulted(m, run))
			run++;
		if (run > c) {
			populate_chunks(m, c, run);
			for (; c < run; c++)
				__atomic_or_fetch(&m->faulted[c / 64], 1ull << (c % 64),
						  __ATOMIC_RELAXED);
		}
		while (c < end && chunk_faulted(m, c))
			c++;
	}
}

static uint8_t *layout_base(const struct kvt_engine_mem *m)
{
	return m->base ? m->base : m->host;
}

void kvt_engine_mem_populate(struct kvt_engine_mem *m, const uint32_t *pages, uint32_t n)
{
	if (!m->host)
		return;
	for (uint32_t k = 0; k < n; k++) {
		if (pages[k] >= m->pages)
			continue;
		for (uint32_t l = 0; l < m->layers; l++)
			for (uint32_t kv = 0; kv < m->kvn; kv++)
				populate_range(m, layout_base(m) + (uint64_t)l * m->layer_stride +
						  (uint64_t)kv * m->kv_stride +
						  (uint64_t)pages[k] * m->page_stride, m->page_bytes);
	}
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
	free(m->faulted);
	free(m);
}

static uint8_t *page_addr(const struct kvt_engine_mem *m, uint32_t page, uint32_t layer,
			  uint32_t kv)
{
	return m->base + (uint64_t)layer * m->layer_stride + (uint64_t)kv * m->kv_stride +
	       (uint64_t)page * m->page_stride;
}

/* One guarded copy of a page's pieces. */
struct page_copy {
	const struct kvt_engine_mem *m;
	uint32_t page, layer;
	uint8_t *block;
	const uint8_t *src;
	struct kvt_sum *sum;    /* gather: summed on the way when not NULL */
};

static void gather_fn(void *arg)
{
	struct page_copy *c = arg;
	uint8_t *dst = c->block;

	for (uint32_t l = 0; l < c->m->layers; l++)
		for (uint32_t kv = 0; kv < c->m->kvn; kv++, dst += c->m->page_bytes) {
			if (c->sum)
				kvt_sum_copy(c->sum, dst, page_addr(c->m, c->page, l, kv),
					     c->m->page_bytes);
			else
				memcpy(dst, page_addr(c->m, c->page, l, kv), c->m->page_bytes);
		}
}

int kvt_engine_mem_gather(const struct kvt_engine_mem *m, uint32_t page, void *block)
{
	struct page_copy c = { .m = m, .page = page, .block = block };

	return kvt_fault_guard_run(m->host, m->host_len, gather_fn, &c);
}

int kvt_engine_mem_gather_sum(const struct kvt_engine_mem *m, uint32_t page, void *block,
			      uint64_t *sum)
{
	struct kvt_sum st;
	struct page_copy c = { .m = m, .page = page, .block = block, .sum = &st };
	int err;

	kvt_sum_begin(&st);
	err = kvt_fault_guard_run(m->host, m->host_len, gather_fn, &c);
	*sum = kvt_sum_end(&st);
	return err;
}

void kvt_engine_mem_pieces(const struct kvt_engine_mem *m, uint32_t page, struct iovec *v)
{
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t kv = 0; kv < m->kvn; kv++, v++)
			*v = (struct iovec){ .iov_base = page_addr(m, page, l, kv),
					     .iov_len = m->page_bytes };
}

static void scatter_fn(void *arg)
{
	struct page_copy *c = arg;
	const uint8_t *src = c->src;

	for (uint32_t kv = 0; kv < c->m->kvn; kv++, src += c->m->page_bytes)
		memcpy(page_addr(c->m, c->page, c->layer, kv), src, c->m->page_bytes);
}

int kvt_engine_mem_scatter_layer(const struct kvt_engine_mem *m, uint32_t page,
				 uint32_t layer, const void *block)
{
	struct page_copy c = { .m = m, .page = page, .layer = layer,
			       .src = (const uint8_t *)block +
				      (uint64_t)layer * m->kvn * m->page_bytes };

	return kvt_fault_guard_run(m->host, m->host_len, scatter_fn, &c);
}
