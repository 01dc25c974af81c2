/* SPDX-License-Identifier: Apache-2.0 */
/* Engine memory: its parts (sealed memfds mapped into the daemon, or memory
 * opened through the device layer) and where each layer lies in them. */
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

/* The bits of p->faulted for its host_len bytes: 0 or -ENOMEM. */
static int faulted_alloc(struct kvt_engine_part *p)
{
	uint64_t chunks = (p->host_len + KVT_ENGINE_MEM_CHUNK - 1) / KVT_ENGINE_MEM_CHUNK;

	p->faulted = calloc((size_t)((chunks + 63) / 64) + 1, sizeof(*p->faulted));
	return p->faulted ? 0 : -ENOMEM;
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

/* Part i of r into p: mapped here (dev NULL) or imported through dev.
 * Returns the part's first byte in this process, or NULL with *err. */
static uint8_t *part_open(struct kvt_dev *dev, int fd, const struct kvt_region *r,
			  uint32_t i, struct kvt_engine_part *p, int *err)
{
	const struct kvt_region_part *rp = &r->parts[i];
	struct kvt_dev_ipc_handle h;
	uint64_t total = rp->offset + rp->bytes; /* kvt_region_check bounds both */

	*err = fd >= 0 ? check_memfd(fd, total) : 0;
	if (*err)
		return NULL;
	if (!dev) {
		if (fd < 0 || total > SIZE_MAX) {
			*err = -EINVAL;
			return NULL;
		}
		p->map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p->map == MAP_FAILED) {
			p->map = NULL;
			*err = -errno;
			return NULL;
		}
		p->map_len = p->host_len = total;
		p->host = p->map;
		*err = faulted_alloc(p);
		return *err ? NULL : p->map + rp->offset;
	}
	memset(&h, 0, sizeof(h));
	h.backend = fd >= 0 ? KVT_DEV_HOST : KVT_DEV_CUDA;
	h.fd = fd;
	h.len = rp->bytes;
	h.offset = rp->offset;
	if (fd < 0 && rp->ipc)
		memcpy(h.bytes, rp->ipc, r->ipc_len < KVT_DEV_IPC_BYTES ? r->ipc_len :
		       KVT_DEV_IPC_BYTES);
	*err = kvt_dev_mem_import(dev, &h, &p->dmem);
	if (*err)
		return NULL;
	if (fd >= 0) {
		p->host = kvt_dev_mem_ptr(p->dmem);
		p->host_len = rp->bytes;
		*err = faulted_alloc(p);
		if (*err)
			return NULL;
	}
	return kvt_dev_mem_ptr(p->dmem);
}

/* The layout of m for the device layer's gather and scatter. */
static int layout_open(struct kvt_engine_mem *m, const struct kvt_ns_desc *d)
{
	struct kvt_dev_layout_desc ld;
	void **v_base = calloc(m->layers, sizeof(*v_base));
	int err;

	if (!v_base)
		return -ENOMEM;
	for (uint32_t l = 0; l < m->layers; l++)
		v_base[l] = m->layer_base[l] + m->kv_stride;
	kvt_dev_layout_desc_init(&ld, sizeof(ld));
	ld.kind = d->layout;
	ld.layers = d->layers;
	ld.kv_heads = d->kv_heads;
	ld.head_dim = d->head_dim;
	ld.elem_bytes = (uint32_t)kvt_dtype_bytes(d->dtype);
	ld.page_tokens = d->block_tokens;
	ld.pages_per_block = 1;
	ld.num_pages = m->pages;
	ld.page_stride = m->page_stride;
	ld.kv_stride = d->layout == KVT_LAYOUT_PAGED_KV ? m->kv_stride : 0;
	ld.k_base = (void **)m->layer_base;
	ld.v_base = d->layout == KVT_LAYOUT_SPLIT_KV ? v_base : NULL;
	err = kvt_dev_layout_create(m->dev, &ld, &m->layout);
	free(v_base);
	return err;
}

/* Release what m holds; m itself too. */
static void mem_free(struct kvt_engine_mem *m)
{
	if (m->layout)
		kvt_dev_layout_destroy(m->layout);
	for (uint32_t i = 0; m->parts && i < m->n_parts; i++) {
		if (m->parts[i].map)
			munmap(m->parts[i].map, m->parts[i].map_len);
		kvt_dev_mem_free(m->parts[i].dmem);
		free(m->parts[i].faulted);
	}
	free(m->parts);
	free(m->layer_base);
	free(m->layer_part);
	free(m);
}

int kvt_engine_mem_open(struct kvt_dev *dev, const int *fds, const struct kvt_region *r,
			const struct kvt_ns_desc *d, struct kvt_engine_mem **out)
{
	struct kvt_engine_mem *m;
	uint8_t **part_base;
	int err = 0;

	if (r->layers != d->layers || r->n_parts == 0 || (!fds && !dev))
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	part_base = calloc(r->n_parts, sizeof(*part_base));
	if (!m || !part_base) {
		free(m);
		free(part_base);
		return -ENOMEM;
	}
	m->refs = 1;
	m->dev = dev;
	m->ns = r->ns;
	m->layers = r->layers;
	m->pages = r->pages;
	m->kvn = d->layout == KVT_LAYOUT_MLA ? 1 : 2;
	m->kv_stride = r->kv_stride;
	m->page_stride = r->page_stride;
	m->page_bytes = (uint64_t)d->block_tokens * d->kv_heads * d->head_dim *
			kvt_dtype_bytes(d->dtype);
	m->parts = calloc(r->n_parts, sizeof(*m->parts));
	m->layer_base = calloc(r->layers, sizeof(*m->layer_base));
	m->layer_part = calloc(r->layers, sizeof(*m->layer_part));
	m->n_parts = r->n_parts; /* the parts not opened are zero: mem_free skips them */
	if (!m->parts || !m->layer_base || !m->layer_part)
		err = -ENOMEM;
	for (uint32_t i = 0; !err && i < r->n_parts; i++)
		part_base[i] = part_open(dev, fds ? fds[i] : -1, r, i, &m->parts[i], &err);
	for (uint32_t l = 0; !err && l < r->layers; l++) {
		m->layer_part[l] = r->layer[l].part;
		m->layer_base[l] = part_base[r->layer[l].part] + r->layer[l].offset;
		m->on_host |= m->parts[r->layer[l].part].host != NULL;
	}
	if (!err && dev)
		err = layout_open(m, d);
	free(part_base);
	if (err) {
		mem_free(m);
		return err;
	}
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

/* Map chunks [c0, c1) of part p in without changing a byte. */
static void populate_chunks(const struct kvt_engine_part *p, uint64_t c0, uint64_t c1)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uint8_t *at = p->host + c0 * KVT_ENGINE_MEM_CHUNK;
	uint64_t len = c1 * KVT_ENGINE_MEM_CHUNK > p->host_len ?
		       p->host_len - c0 * KVT_ENGINE_MEM_CHUNK : (c1 - c0) * KVT_ENGINE_MEM_CHUNK;
	/* host lies at the registered offset, which need not be page aligned */
	struct span sp = { (uint8_t *)((uintptr_t)at & ~(pg - 1)), 0 };

	sp.len = len + (uint64_t)(at - sp.p);
	if (madvise(sp.p, sp.len, MADV_POPULATE_WRITE) == 0 || errno != EINVAL)
		return;
	(void)kvt_fault_guard_run(p->host, p->host_len, read_each_page, &sp);
}

static bool chunk_faulted(const struct kvt_engine_part *p, uint64_t c)
{
	return __atomic_load_n(&p->faulted[c / 64], __ATOMIC_RELAXED) & (1ull << (c % 64));
}

/* Fault in the chunks of [at, at + len) of part p not faulted in yet, runs
 * of them at a time. Two workers may populate one chunk at once: harmless. */
static void populate_range(const struct kvt_engine_part *p, const uint8_t *at, uint64_t len)
{
	uint64_t off = (uint64_t)(at - p->host);
	uint64_t c = off / KVT_ENGINE_MEM_CHUNK, end = (off + len - 1) / KVT_ENGINE_MEM_CHUNK + 1;

	while (c < end) {
		uint64_t run = c;

		while (run < end && !chunk_faulted(p, run))
			run++;
		if (run > c) {
			populate_chunks(p, c, run);
			for (; c < run; c++)
				__atomic_or_fetch(&p->faulted[c / 64], 1ull << (c % 64),
						  __ATOMIC_RELAXED);
		}
		while (c < end && chunk_faulted(p, c))
			c++;
	}
}

static uint8_t *page_addr(const struct kvt_engine_mem *m, uint32_t page, uint32_t layer,
			  uint32_t kv)
{
	return m->layer_base[layer] + (uint64_t)kv * m->kv_stride + (uint64_t)page * m->page_stride;
}

void kvt_engine_mem_populate(struct kvt_engine_mem *m, const uint32_t *pages, uint32_t n)
{
	if (!m->on_host)
		return;
	for (uint32_t k = 0; k < n; k++) {
		if (pages[k] >= m->pages)
			continue;
		for (uint32_t l = 0; l < m->layers; l++) {
			const struct kvt_engine_part *p = &m->parts[m->layer_part[l]];

			for (uint32_t kv = 0; p->host && kv < m->kvn; kv++)
				populate_range(p, page_addr(m, pages[k], l, kv), m->page_bytes);
		}
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
	mem_free(m);
}

/* One guarded copy of a layer's pieces of a page: the guard covers the
 * layer's part. */
struct page_copy {
	const struct kvt_engine_mem *m;
	uint32_t page, layer;
	uint8_t *block;         /* gather: where the layer's pieces go */
	const uint8_t *src;     /* scatter: where they come from */
	struct kvt_sum *sum;    /* gather: summed on the way when not NULL */
};

static void gather_fn(void *arg)
{
	struct page_copy *c = arg;
	uint8_t *dst = c->block;

	for (uint32_t kv = 0; kv < c->m->kvn; kv++, dst += c->m->page_bytes) {
		if (c->sum)
			kvt_sum_copy(c->sum, dst, page_addr(c->m, c->page, c->layer, kv),
				     c->m->page_bytes);
		else
			memcpy(dst, page_addr(c->m, c->page, c->layer, kv), c->m->page_bytes);
	}
}

static int guarded(const struct kvt_engine_mem *m, uint32_t layer, void (*fn)(void *),
		   struct page_copy *c)
{
	const struct kvt_engine_part *p = &m->parts[m->layer_part[layer]];

	return kvt_fault_guard_run(p->host, p->host_len, fn, c);
}

/* Every layer of page into block, each under its part's guard. */
static int gather(const struct kvt_engine_mem *m, uint32_t page, void *block,
		  struct kvt_sum *sum)
{
	struct page_copy c = { .m = m, .page = page, .block = block, .sum = sum };
	int err = 0;

	for (uint32_t l = 0; !err && l < m->layers; l++, c.block += m->kvn * m->page_bytes) {
		c.layer = l;
		err = guarded(m, l, gather_fn, &c);
	}
	return err;
}

int kvt_engine_mem_gather(const struct kvt_engine_mem *m, uint32_t page, void *block)
{
	return gather(m, page, block, NULL);
}

int kvt_engine_mem_gather_sum(const struct kvt_engine_mem *m, uint32_t page, void *block,
			      uint64_t *sum)
{
	struct kvt_sum st;
	int err;

	kvt_sum_begin(&st);
	err = gather(m, page, block, &st);
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

	return guarded(m, layer, scatter_fn, &c);
}
