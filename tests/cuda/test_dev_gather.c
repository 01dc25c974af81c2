/* SPDX-License-Identifier: Apache-2.0 */
/* Gather and scatter are exact: on random layouts (the three kinds, random
 * shapes, element sizes, strides, pages per block, page ids) and on every path
 * (direct, staged, the per-layer baseline), the bytes moved equal those of a
 * plain element-by-element reference loop over a host mirror of the engine's
 * tensors, and a scatter touches nothing but the pages it targets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/cuda/dev_test.h"

static uint64_t seed;

#define MAX_TENSORS 16

/* One random engine: its layout, its tensors on the device and their host
 * mirror (what the device must hold). */
struct engine {
	struct kvt_dev_layout_desc d;
	uint32_t n_kv;
	uint64_t chunk, ps, ks;   /* page bytes, page stride, K-to-V stride */
	int n_tensors;
	size_t tensor_len;
	struct kvt_dev_mem *mem[MAX_TENSORS];
	uint8_t *mirror[MAX_TENSORS];
	void *k_base[MAX_TENSORS / 2], *v_base[MAX_TENSORS / 2];
	/* the engine address of (layer, kv) in mirror coordinates */
	int tensor_of[MAX_TENSORS / 2][2];
	uint64_t off_of[MAX_TENSORS / 2][2];
	uint64_t block_bytes;
};

static uint32_t rnd(uint64_t *s, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(kvt_test_rand(s) % (hi - lo + 1));
}

static void engine_make(struct kvt_dev *dev, struct kvt_dev_stream *st, uint64_t *s,
			struct engine *e)
{
	static const uint32_t elems[] = { 1, 2, 4 };
	static const uint32_t dims[] = { 1, 3, 8, 16, 64, 72, 128 };
	bool interleaved;
	uint32_t pad;

	memset(e, 0, sizeof(*e));
	kvt_dev_layout_desc_init(&e->d, sizeof(e->d));
	e->d.kind = (enum kvt_layout)rnd(s, KVT_LAYOUT_PAGED_KV, KVT_LAYOUT_MLA);
	e->d.layers = rnd(s, 1, MAX_TENSORS / 2);
	e->d.kv_heads = e->d.kind == KVT_LAYOUT_MLA ? 1 : rnd(s, 1, 4);
	e->d.head_dim = dims[rnd(s, 0, 6)];
	e->d.elem_bytes = elems[rnd(s, 0, 2)];
	e->d.page_tokens = rnd(s, 1, 16);
	e->d.pages_per_block = rnd(s, 1, 3);
	e->d.num_pages = rnd(s, e->d.pages_per_block * 2, 48);
	e->n_kv = e->d.kind == KVT_LAYOUT_MLA ? 1 : 2;
	e->chunk = (uint64_t)e->d.page_tokens * e->d.kv_heads * e->d.head_dim * e->d.elem_bytes;
	/* padding between pages, in whole elements half the time, else any bytes */
	pad = rnd(s, 0, 1) ? rnd(s, 0, 3) * e->d.elem_bytes : rnd(s, 0, 17);
	interleaved = e->d.kind == KVT_LAYOUT_PAGED_KV && rnd(s, 0, 1);
	if (interleaved) {
		/* [num_pages][2][...]: K then V inside each page slot */
		e->ps = 2 * e->chunk + pad;
		e->ks = e->chunk + (pad ? rnd(s, 0, pad) : 0);
		e->d.page_stride = e->ps;
		e->d.kv_stride = e->ks;
	} else {
		e->ps = e->chunk + pad;
		e->d.page_stride = pad || rnd(s, 0, 1) ? e->ps : 0;
		e->ks = e->d.num_pages * e->ps;
	}
	e->tensor_len = e->d.num_pages * e->ps +
			(e->d.kind == KVT_LAYOUT_PAGED_KV && !interleaved ? e->ks : 0);
	e->n_tensors = e->d.kind == KVT_LAYOUT_SPLIT_KV ? 2 * e->d.layers : e->d.layers;

	for (int t = 0; t < e->n_tensors; t++) {
		assert_int_equal(kvt_dev_mem_alloc(dev, e->tensor_len, &e->mem[t]), 0);
		e->mirror[t] = malloc(e->tensor_len);
		assert_non_null(e->mirror[t]);
		kvt_test_fill(e->mirror[t], e->tensor_len, kvt_test_rand(s));
		assert_int_equal(kvt_dev_copy_async(st, kvt_dev_mem_ptr(e->mem[t]), e->mirror[t],
						    e->tensor_len), 0);
	}
	for (uint32_t l = 0; l < e->d.layers; l++) {
		if (e->d.kind == KVT_LAYOUT_SPLIT_KV) {
			e->k_base[l] = kvt_dev_mem_ptr(e->mem[2 * l]);
			e->v_base[l] = kvt_dev_mem_ptr(e->mem[2 * l + 1]);
			e->tensor_of[l][0] = 2 * (int)l;
			e->tensor_of[l][1] = 2 * (int)l + 1;
			e->off_of[l][0] = e->off_of[l][1] = 0;
		} else {
			e->k_base[l] = kvt_dev_mem_ptr(e->mem[l]);
			e->tensor_of[l][0] = e->tensor_of[l][1] = (int)l;
			e->off_of[l][0] = 0;
			e->off_of[l][1] = e->ks;
		}
	}
	e->d.k_base = e->k_base;
	e->d.v_base = e->d.kind == KVT_LAYOUT_SPLIT_KV ? e->v_base : NULL;
	e->block_bytes = kvt_dev_layout_block_bytes(&e->d);
	assert_int_equal(e->block_bytes, (uint64_t)e->n_kv * e->d.layers * e->chunk *
						 e->d.pages_per_block);
	assert_int_equal(kvt_dev_stream_sync(st), 0);
}

static void engine_free(struct engine *e)
{
	for (int t = 0; t < e->n_tensors; t++) {
		kvt_dev_mem_free(e->mem[t]);
		free(e->mirror[t]);
	}
}

/* The reference: element by element, block order [layer][kv][token][head][dim]. */
static void reference(struct engine *e, bool gather, const uint32_t *pages, size_t n,
		      uint8_t **blocks)
{
	const struct kvt_dev_layout_desc *d = &e->d;
	uint32_t bt = d->page_tokens * d->pages_per_block, eb = d->elem_bytes;

	for (size_t b = 0; b < n; b++)
		for (uint32_t l = 0; l < d->layers; l++)
			for (uint32_t kv = 0; kv < e->n_kv; kv++)
				for (uint32_t t = 0; t < bt; t++)
					for (uint32_t h = 0; h < d->kv_heads; h++)
						for (uint32_t x = 0; x < d->head_dim; x++) {
	uint32_t page = pages[b * d->pages_per_block + t / d->page_tokens];
	uint32_t tp = t % d->page_tokens;
	uint8_t *eng = e->mirror[e->tensor_of[l][kv]] + e->off_of[l][kv] + page * e->ps +
		       (((uint64_t)tp * d->kv_heads + h) * d->head_dim + x) * eb;
	uint8_t *blk = blocks[b] +
		       ((((uint64_t)l * e->n_kv + kv) * bt + t) * d->kv_heads * d->head_dim +
			(uint64_t)h * d->head_dim + x) * eb;

	if (gather)
		memcpy(blk, eng, eb);
	else
		memcpy(eng, blk, eb);
						}
}

/* separate mapped buffers, pageable ones, device ones, or one mapped run of
 * adjacent blocks (as consecutive DRAM slots are) */
enum buf_kind { BUF_MAPPED, BUF_PAGEABLE, BUF_DEVICE, BUF_RUN, BUF_KINDS };

/* Block buffers of one kind, and a host view of each. */
struct bufs {
	enum buf_kind kind;
	size_t n;
	void **blocks;       /* what gather/scatter get */
	uint8_t **host;      /* host view (for BUF_DEVICE, copies) */
	struct kvt_dev_mem **mem;
	void *run;
};

static void bufs_make(struct kvt_dev *dev, enum buf_kind kind, size_t n, uint64_t len,
		      struct bufs *b)
{
	b->kind = kind;
	b->run = NULL;
	b->n = n;
	b->blocks = calloc(n, sizeof(void *));
	b->host = calloc(n, sizeof(uint8_t *));
	b->mem = calloc(n, sizeof(*b->mem));
	assert_true(b->blocks && b->host && b->mem);
	if (kind == BUF_RUN)
		assert_int_equal(kvt_dev_host_alloc(dev, n * len, KVT_DEV_HOST_MAPPED, &b->run), 0);
	for (size_t i = 0; i < n; i++) {
		switch (kind) {
		case BUF_RUN:
			b->blocks[i] = b->host[i] = (uint8_t *)b->run + i * len;
			break;
		case BUF_MAPPED:
			assert_int_equal(kvt_dev_host_alloc(dev, len, KVT_DEV_HOST_MAPPED,
							    &b->blocks[i]), 0);
			b->host[i] = b->blocks[i];
			break;
		case BUF_PAGEABLE:
			b->blocks[i] = b->host[i] = malloc(len);
			assert_non_null(b->host[i]);
			memset(b->host[i], 0, len);
			break;
		default:
			assert_int_equal(kvt_dev_mem_alloc(dev, len, &b->mem[i]), 0);
			b->blocks[i] = kvt_dev_mem_ptr(b->mem[i]);
			b->host[i] = calloc(1, len);
			assert_non_null(b->host[i]);
			break;
		}
	}
}

static void bufs_free(struct kvt_dev *dev, struct bufs *b)
{
	for (size_t i = 0; i < b->n; i++) {
		if (b->kind == BUF_MAPPED) {
			kvt_dev_host_free(dev, b->blocks[i]);
		} else if (b->kind == BUF_PAGEABLE) {
			free(b->host[i]);
		} else if (b->kind == BUF_DEVICE) {
			kvt_dev_mem_free(b->mem[i]);
			free(b->host[i]);
		}
	}
	kvt_dev_host_free(dev, b->run);
	free(b->blocks);
	free(b->host);
	free(b->mem);
}

/* Device-side block buffers <-> their host views. */
static void bufs_sync(struct kvt_dev_stream *st, struct bufs *b, uint64_t len, bool to_host)
{
	if (b->kind != BUF_DEVICE)
		return;
	for (size_t i = 0; i < b->n; i++)
		assert_int_equal(to_host ? kvt_dev_copy_async(st, b->host[i], b->blocks[i], len) :
					   kvt_dev_copy_async(st, b->blocks[i], b->host[i], len),
				 0);
	assert_int_equal(kvt_dev_stream_sync(st), 0);
}

static enum kvt_dev_path pick_path(uint64_t *s, enum buf_kind kind)
{
	/* pageable buffers are not reachable by kernels: never DIRECT */
	static const enum kvt_dev_path any[] = { KVT_DEV_PATH_AUTO, KVT_DEV_PATH_DIRECT,
						 KVT_DEV_PATH_STAGED, KVT_DEV_PATH_PER_LAYER };
	static const enum kvt_dev_path pageable[] = { KVT_DEV_PATH_AUTO, KVT_DEV_PATH_STAGED,
						      KVT_DEV_PATH_PER_LAYER };

	return kind == BUF_PAGEABLE ? pageable[rnd(s, 0, 2)] : any[rnd(s, 0, 3)];
}

static void one_round(struct kvt_dev *dev, uint64_t *s, bool gather, int round)
{
	struct kvt_dev_stream *st;
	struct kvt_dev_layout *lay;
	struct kvt_dev_event *ev[MAX_TENSORS / 2] = { 0 };
	struct kvt_dev_xfer_opts xo;
	struct engine e;
	struct bufs b;
	uint8_t **want;
	uint32_t *pages;
	size_t n, n_pages;
	bool layer_events;

	assert_int_equal(kvt_dev_stream_create(dev, rnd(s, 0, 1), &st), 0);
	engine_make(dev, st, s, &e);
	assert_int_equal(kvt_dev_layout_create(dev, &e.d, &lay), 0);
	assert_int_equal(kvt_dev_layout_bytes(lay), e.block_bytes);

	/* more than one launch's worth of blocks now and then */
	n = rnd(s, 0, 3) ? rnd(s, 1, 6) : rnd(s, 30, 70);
	if (!gather && n * e.d.pages_per_block > e.d.num_pages)
		n = e.d.num_pages / e.d.pages_per_block;
	n_pages = n * e.d.pages_per_block;
	pages = malloc(n_pages * sizeof(*pages));
	assert_non_null(pages);
	if (gather) {
		/* repeats allowed: two blocks may read the same page */
		for (size_t i = 0; i < n_pages; i++)
			pages[i] = rnd(s, 0, (uint32_t)e.d.num_pages - 1);
	} else {
		/* distinct targets, a random permutation's prefix */
		uint32_t *perm = malloc(e.d.num_pages * sizeof(*perm));

		assert_non_null(perm);
		for (uint32_t i = 0; i < e.d.num_pages; i++)
			perm[i] = i;
		for (uint32_t i = (uint32_t)e.d.num_pages - 1; i > 0; i--) {
			uint32_t j = rnd(s, 0, i), t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		memcpy(pages, perm, n_pages * sizeof(*pages));
		free(perm);
	}

	bufs_make(dev, (enum buf_kind)rnd(s, 0, BUF_KINDS - 1), n, e.block_bytes, &b);
	want = calloc(n, sizeof(*want));
	assert_non_null(want);
	for (size_t i = 0; i < n; i++) {
		want[i] = malloc(e.block_bytes);
		assert_non_null(want[i]);
		if (gather) {
			memset(want[i], 0, e.block_bytes);
		} else {
			kvt_test_fill(b.host[i], e.block_bytes, kvt_test_rand(s));
			memcpy(want[i], b.host[i], e.block_bytes);
		}
	}
	bufs_sync(st, &b, e.block_bytes, false);

	kvt_dev_xfer_opts_init(&xo, sizeof(xo));
	xo.path = pick_path(s, b.kind);
	layer_events = rnd(s, 0, 2) == 0;
	if (layer_events) {
		for (uint32_t l = 0; l < e.d.layers; l++)
			assert_int_equal(kvt_dev_event_create(dev, &ev[l]), 0);
		xo.layer_events = ev;
	}
	print_message("round %d: %s kind %d layers %u heads %u dim %u elem %u page_tokens %u "
		      "ppb %u pages %llu stride %llu/%llu blocks %zu buf %d path %d events %d\n",
		      round, gather ? "gather" : "scatter", e.d.kind, e.d.layers, e.d.kv_heads,
		      e.d.head_dim, e.d.elem_bytes, e.d.page_tokens, e.d.pages_per_block,
		      (unsigned long long)e.d.num_pages, (unsigned long long)e.ps,
		      (unsigned long long)e.ks, n, b.kind, xo.path, layer_events);

	if (gather)
		assert_int_equal(kvt_dev_gather(lay, st, pages, n, b.blocks, &xo), 0);
	else
		assert_int_equal(kvt_dev_scatter(lay, st, pages, n, (const void *const *)b.blocks,
						 &xo), 0);
	reference(&e, gather, pages, n, want);
	if (layer_events)
		for (uint32_t l = 0; l < e.d.layers; l++)
			assert_int_equal(kvt_dev_event_wait(ev[l]), 0);
	assert_int_equal(kvt_dev_stream_sync(st), 0);

	if (gather) {
		bufs_sync(st, &b, e.block_bytes, true);
		for (size_t i = 0; i < n; i++)
			assert_memory_equal(b.host[i], want[i], e.block_bytes);
	} else {
		/* the whole tensors: targeted pages replaced, all else untouched */
		uint8_t *got = malloc(e.tensor_len);

		assert_non_null(got);
		for (int t = 0; t < e.n_tensors; t++) {
			assert_int_equal(kvt_dev_copy_async(st, got, kvt_dev_mem_ptr(e.mem[t]),
							    e.tensor_len), 0);
			assert_int_equal(kvt_dev_stream_sync(st), 0);
			assert_memory_equal(got, e.mirror[t], e.tensor_len);
		}
		free(got);
	}

	for (size_t i = 0; i < n; i++)
		free(want[i]);
	free(want);
	for (uint32_t l = 0; l < e.d.layers; l++)
		kvt_dev_event_destroy(ev[l]);
	bufs_free(dev, &b);
	free(pages);
	kvt_dev_layout_destroy(lay);
	engine_free(&e);
	kvt_dev_stream_destroy(st);
}

static void gather_random_layouts_match_reference(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	uint64_t s = seed ^ 0x9e3779b97f4a7c15ULL;

	for (int r = 0; r < 40; r++)
		one_round(dev, &s, true, r);
	kvt_dev_close(dev);
}

static void scatter_random_layouts_match_reference(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	uint64_t s = seed ^ 0xc2b2ae3d27d4eb4fULL;

	for (int r = 0; r < 40; r++)
		one_round(dev, &s, false, r);
	kvt_dev_close(dev);
}

/* The byte order of a block, spelled out on a tiny paged layout: 2 layers,
 * 1 head, head_dim 2, 1-byte elements, 2 tokens per page. */
static void block_order_is_layer_kv_token_head_dim(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_stream *st;
	struct kvt_dev_layout *lay;
	struct kvt_dev_layout_desc d;
	struct kvt_dev_mem *t[2];
	void *base[2], *blk;
	uint8_t host[2][2 * 3 * 4];  /* [2][3 pages][2 tokens x 2 dims] per layer */
	uint8_t got[16];
	static const uint8_t want[16] = {
		/* layer 0: K of page 2, then V of page 2 */
		8, 9, 10, 11, 32, 33, 34, 35,
		/* layer 1 */
		108, 109, 110, 111, 132, 133, 134, 135,
	};
	uint32_t page = 2;

	for (int l = 0; l < 2; l++) {
		for (int i = 0; i < 24; i++)
			host[l][i] = (uint8_t)(100 * l + (i < 12 ? i : 24 + (i - 12)));
		assert_int_equal(kvt_dev_mem_alloc(dev, sizeof(host[l]), &t[l]), 0);
		base[l] = kvt_dev_mem_ptr(t[l]);
	}
	assert_int_equal(kvt_dev_stream_create(dev, false, &st), 0);
	for (int l = 0; l < 2; l++)
		assert_int_equal(kvt_dev_copy_async(st, base[l], host[l], sizeof(host[l])), 0);
	kvt_dev_layout_desc_init(&d, sizeof(d));
	d.kind = KVT_LAYOUT_PAGED_KV;
	d.layers = 2;
	d.kv_heads = 1;
	d.head_dim = 2;
	d.elem_bytes = 1;
	d.page_tokens = 2;
	d.num_pages = 3;
	d.k_base = base;
	assert_int_equal(kvt_dev_layout_block_bytes(&d), 16);
	assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), 0);
	assert_int_equal(kvt_dev_host_alloc(dev, 16, KVT_DEV_HOST_MAPPED, &blk), 0);
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, &blk, NULL), 0);
	assert_int_equal(kvt_dev_stream_sync(st), 0);
	memcpy(got, blk, 16);
	assert_memory_equal(got, want, 16);

	kvt_dev_host_free(dev, blk);
	kvt_dev_layout_destroy(lay);
	kvt_dev_stream_destroy(st);
	kvt_dev_mem_free(t[0]);
	kvt_dev_mem_free(t[1]);
	kvt_dev_close(dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(block_order_is_layer_kv_token_head_dim),
		cmocka_unit_test(gather_random_layouts_match_reference),
		cmocka_unit_test(scatter_random_layouts_match_reference),
	};

	dev_test_require();
	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
