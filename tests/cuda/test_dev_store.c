/* SPDX-License-Identifier: Apache-2.0 */
/* The save and load paths through the store's DRAM tier: the store's region is
 * registered once as mapped pinned memory; a save gathers engine pages
 * straight into reserved DRAM slots (direct path, no bounce buffer) and
 * commits them when the event says the copy is done; a load scatters acquired
 * slots into other engine pages with per-layer events. The pages that come
 * back equal the pages that were saved, byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier/store.h"
#include "tests/cuda/dev_test.h"

enum { LAYERS = 4, HEADS = 2, DIM = 64, TOKENS = 16, PAGES = 16, BLOCKS = 4 };

static void saved_pages_come_back_through_dram_slots(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_store_opts so;
	struct kvt_store *store;
	struct kvt_ns_desc nd;
	struct kvt_ns *ns;
	struct kvt_dev_stream *save, *load;
	struct kvt_dev_layout_desc d;
	struct kvt_dev_layout *lay;
	struct kvt_dev_event *saved, *layer_ev[LAYERS];
	struct kvt_dev_xfer_opts xo;
	struct kvt_dev_mem *t[LAYERS];
	struct kvt_slot slot[BLOCKS];
	struct kvt_key keys[BLOCKS];
	void *base[LAYERS], *blocks[BLOCKS], *region;
	uint8_t *mirror[LAYERS], *back;
	uint32_t tokens[BLOCKS * TOKENS], from[BLOCKS] = { 9, 2, 14, 5 }, to[BLOCKS] = { 0, 11, 3, 7 };
	uint64_t region_len, page = (uint64_t)TOKENS * HEADS * DIM * 2, tensor = 2 * PAGES * page;
	uint64_t s = kvt_test_seed();

	kvt_store_opts_init(&so, sizeof(so));
	so.dram_bytes = 32ull << 20;
	so.dram_huge_pages = false;
	assert_int_equal(kvt_store_open(&so, &store), 0);
	kvt_ns_desc_init(&nd, sizeof(nd));
	snprintf(nd.model_id, sizeof(nd.model_id), "test/device");
	nd.layout = KVT_LAYOUT_PAGED_KV;
	nd.dtype = KVT_DTYPE_BF16;
	nd.layers = LAYERS;
	nd.kv_heads = HEADS;
	nd.head_dim = DIM;
	nd.block_tokens = TOKENS;
	nd.tp_size = 1;
	assert_int_equal(kvt_ns_attach(store, &nd, &ns), 0);
	assert_int_equal(kvt_store_dram_region(store, &region, &region_len), 0);
	assert_int_equal(kvt_dev_host_register(dev, region, region_len, KVT_DEV_HOST_MAPPED), 0);

	assert_int_equal(kvt_dev_stream_create(dev, false, &save), 0);
	assert_int_equal(kvt_dev_stream_create(dev, true, &load), 0);
	for (int l = 0; l < LAYERS; l++) {
		assert_int_equal(kvt_dev_mem_alloc(dev, tensor, &t[l]), 0);
		base[l] = kvt_dev_mem_ptr(t[l]);
		mirror[l] = malloc(tensor);
		assert_non_null(mirror[l]);
		kvt_test_fill(mirror[l], tensor, kvt_test_rand(&s));
		assert_int_equal(kvt_dev_copy_async(save, base[l], mirror[l], tensor), 0);
		assert_int_equal(kvt_dev_event_create(dev, &layer_ev[l]), 0);
	}
	kvt_dev_layout_desc_init(&d, sizeof(d));
	d.kind = KVT_LAYOUT_PAGED_KV;
	d.layers = LAYERS;
	d.kv_heads = HEADS;
	d.head_dim = DIM;
	d.elem_bytes = 2;
	d.page_tokens = TOKENS;
	d.num_pages = PAGES;
	d.k_base = base;
	assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), 0);
	/* the device layer and the store agree on a block's size */
	assert_int_equal(kvt_dev_layout_bytes(lay), kvt_ns_block_bytes(ns));

	/* save: reserve slots, gather into them in place, commit once done */
	for (int i = 0; i < BLOCKS * TOKENS; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_ns_prefix_keys(ns, tokens, BLOCKS * TOKENS, keys, BLOCKS), BLOCKS);
	for (int b = 0; b < BLOCKS; b++) {
		assert_int_equal(kvt_reserve(ns, &keys[b], b ? &keys[b - 1] : NULL, &slot[b]), 0);
		blocks[b] = slot[b].data;
	}
	assert_int_equal(kvt_dev_event_create(dev, &saved), 0);
	kvt_dev_xfer_opts_init(&xo, sizeof(xo));
	xo.path = KVT_DEV_PATH_DIRECT; /* registered mapped: no staging */
	assert_int_equal(kvt_dev_gather(lay, save, from, BLOCKS, blocks, &xo), 0);
	assert_int_equal(kvt_dev_event_record(saved, save), 0);
	assert_int_equal(kvt_dev_event_wait(saved), 0);
	for (int b = 0; b < BLOCKS; b++)
		assert_int_equal(kvt_commit(ns, &slot[b]), 0);
	assert_int_equal(kvt_lookup(ns, keys, BLOCKS, NULL), BLOCKS);

	/* load: acquire, scatter into other pages, layer by layer */
	for (int b = 0; b < BLOCKS; b++) {
		assert_int_equal(kvt_acquire(ns, &keys[b], &slot[b]), 0);
		blocks[b] = slot[b].data;
	}
	kvt_dev_xfer_opts_init(&xo, sizeof(xo));
	xo.layer_events = layer_ev;
	assert_int_equal(kvt_dev_scatter(lay, load, to, BLOCKS, (const void *const *)blocks, &xo),
			 0);
	for (int l = 0; l < LAYERS; l++)
		assert_int_equal(kvt_dev_event_wait(layer_ev[l]), 0);
	for (int b = 0; b < BLOCKS; b++)
		kvt_release(ns, &slot[b]);

	back = malloc(tensor);
	assert_non_null(back);
	for (int l = 0; l < LAYERS; l++) {
		assert_int_equal(kvt_dev_copy_async(load, back, base[l], tensor), 0);
		assert_int_equal(kvt_dev_stream_sync(load), 0);
		for (int b = 0; b < BLOCKS; b++)
			for (int kv = 0; kv < 2; kv++)
				assert_memory_equal(back + kv * PAGES * page + to[b] * page,
						    mirror[l] + kv * PAGES * page + from[b] * page,
						    page);
	}

	free(back);
	kvt_dev_event_destroy(saved);
	kvt_dev_layout_destroy(lay);
	for (int l = 0; l < LAYERS; l++) {
		kvt_dev_event_destroy(layer_ev[l]);
		kvt_dev_mem_free(t[l]);
		free(mirror[l]);
	}
	kvt_dev_stream_destroy(save);
	kvt_dev_stream_destroy(load);
	assert_int_equal(kvt_dev_host_unregister(dev, region), 0);
	kvt_store_close(store);
	kvt_dev_close(dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(saved_pages_come_back_through_dram_slots),
	};

	dev_test_require();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
