/* SPDX-License-Identifier: Apache-2.0 */
/* Versioned option structs: a caller built against an older, smaller struct
 * (its size is where the newer fields begin) gets defaults for what it lacks,
 * and nothing past its size is ever written; a larger, unknown size is
 * refused. Checked through the helper itself and every struct that uses it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "kvtier/device.h"
#include "kvtier/model.h"
#include "kvtier/store.h"
#include "tiers/dram.h"
#include "tiers/ssd_io.h"
#include "transport/server.h"
#include "util/opts.h"

#define MARK 0xa5

/* Room for any of the structs, with sentinel bytes past the caller's size. */
union room {
	uint8_t bytes[1024];
	size_t size;
	max_align_t align;
};

static void fill_marks(union room *r)
{
	memset(r->bytes, MARK, sizeof(r->bytes));
}

/* Every byte of r from `from` on still holds the sentinel. */
static void assert_untouched(const union room *r, size_t from)
{
	for (size_t i = from; i < sizeof(r->bytes); i++)
		if (r->bytes[i] != MARK)
			fail_msg("byte %zu past the caller's size %zu was written", i, from);
}

struct toy {
	size_t size;
	uint32_t a, b;
	uint64_t c;
};

static const struct toy toy_defaults = { .size = sizeof(struct toy), .a = 1, .b = 2, .c = 3 };

static void the_helper_keeps_to_the_callers_size(void **state)
{
	union room r;
	struct toy *t = (struct toy *)r.bytes, whole;

	fill_marks(&r);
	kvt_opts_init(t, offsetof(struct toy, c), &toy_defaults, sizeof(toy_defaults));
	assert_int_equal(t->size, offsetof(struct toy, c));
	assert_int_equal(t->a, 1);
	assert_int_equal(t->b, 2);
	assert_untouched(&r, offsetof(struct toy, c));

	/* an older caller's fields win, the newer field keeps its default */
	t->a = 10;
	whole = toy_defaults;
	assert_int_equal(kvt_opts_load(&whole, sizeof(whole), t), 0);
	assert_int_equal(whole.size, sizeof(whole));
	assert_int_equal(whole.a, 10);
	assert_int_equal(whole.b, 2);
	assert_int_equal(whole.c, 3);

	/* a newer caller's larger struct names fields unknown here */
	t->size = sizeof(struct toy) + 8;
	assert_int_equal(kvt_opts_load(&whole, sizeof(whole), t), -EINVAL);
	t->size = sizeof(size_t) - 1;
	assert_int_equal(kvt_opts_load(&whole, sizeof(whole), t), -EINVAL);
	assert_int_equal(kvt_opts_load(&whole, sizeof(whole), NULL), -EINVAL);

	/* too small to hold even the size: nothing written */
	fill_marks(&r);
	kvt_opts_init(t, 4, &toy_defaults, sizeof(toy_defaults));
	assert_untouched(&r, 0);

	/* a struct filled for the caller: its prefix, and its size says so */
	fill_marks(&r);
	t->size = offsetof(struct toy, b);
	assert_int_equal(kvt_opts_store(t, &toy_defaults, sizeof(toy_defaults)), 0);
	assert_int_equal(t->size, offsetof(struct toy, b));
	assert_int_equal(t->a, 1);
	assert_untouched(&r, offsetof(struct toy, b));
	t->size = 4096;
	assert_int_equal(kvt_opts_store(t, &toy_defaults, sizeof(toy_defaults)), 0);
	assert_int_equal(t->size, sizeof(struct toy));
}

static void store_opts_of_an_older_caller(void **state)
{
	const size_t old = offsetof(struct kvt_store_opts, dram_low_watermark);
	union room r;
	struct kvt_store_opts *o = (struct kvt_store_opts *)r.bytes;
	struct kvt_store *s;

	fill_marks(&r);
	kvt_store_opts_init(o, old);
	assert_int_equal(o->size, old);
	assert_true(o->dram_huge_pages);
	assert_string_equal(o->policy, "tail-lru");
	assert_untouched(&r, old);
	o->dram_bytes = 1 << 20;
	o->dram_huge_pages = false;
	assert_int_equal(kvt_store_open(o, &s), 0);
	kvt_store_close(s);

	o->size = sizeof(struct kvt_store_opts) + 8;
	assert_int_equal(kvt_store_open(o, &s), -EINVAL);
	o->size = 0;
	assert_int_equal(kvt_store_open(o, &s), -EINVAL);
}

static void small_desc(struct kvt_ns_desc *d, size_t size)
{
	kvt_ns_desc_init(d, size);
	snprintf(d->model_id, sizeof(d->model_id), "older/model");
	d->layers = 2;
	d->kv_heads = 1;
	d->head_dim = 64;
	d->block_tokens = 16;
}

static void ns_desc_and_stats_of_an_older_caller(void **state)
{
	const size_t old = offsetof(struct kvt_ns_desc, tenant_salt);
	const size_t old_stats = offsetof(struct kvt_store_stats, index_bytes);
	struct kvt_store_opts o;
	struct kvt_ns_desc whole;
	struct kvt_ns *ns_old, *ns_whole;
	struct kvt_store *s;
	union room r;
	struct kvt_ns_desc *d = (struct kvt_ns_desc *)r.bytes;
	struct kvt_store_stats *st = (struct kvt_store_stats *)r.bytes;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = 1 << 20;
	o.dram_huge_pages = false;
	assert_int_equal(kvt_store_open(&o, &s), 0);

	fill_marks(&r);
	small_desc(d, old);
	assert_int_equal(d->tp_size, 1);
	assert_int_equal(d->layout, KVT_LAYOUT_PAGED_KV);
	assert_untouched(&r, old);
	assert_int_equal(kvt_ns_desc_block_bytes(d), 8192);
	assert_int_equal(kvt_ns_attach(s, d, &ns_old), 0);
	/* the salt it could not give is the default, none: the same namespace
	 * as a whole descriptor without one */
	small_desc(&whole, sizeof(whole));
	assert_int_equal(kvt_ns_attach(s, &whole, &ns_whole), 0);
	assert_ptr_equal(ns_old, ns_whole);

	d->size = sizeof(struct kvt_ns_desc) + 4;
	assert_int_equal(kvt_ns_desc_block_bytes(d), 0);
	assert_int_equal(kvt_ns_attach(s, d, &ns_old), -EINVAL);

	fill_marks(&r);
	st->size = old_stats;
	assert_int_equal(kvt_store_stats(s, st), 0);
	assert_int_equal(st->size, old_stats);
	assert_int_equal(st->namespaces, 1);
	assert_untouched(&r, old_stats);
	kvt_store_close(s);
}

static void model_opts_of_an_older_caller(void **state)
{
	const size_t old = offsetof(struct kvt_sizing_opts, mfu);
	const size_t old_plan = offsetof(struct kvt_plan_opts, prefill_flops_s);
	struct kvt_sizing_opts whole;
	struct kvt_sizing a, b;
	struct kvt_plan_opts *p;
	struct kvt_plan plan;
	struct kvt_model m;
	uint8_t tiers[2] = { KVT_TIER_DRAM, KVT_TIER_DRAM };
	union room r;
	struct kvt_sizing_opts *o = (struct kvt_sizing_opts *)r.bytes;

	assert_int_equal(kvt_model_load("Qwen3-8B", &m), 0);
	fill_marks(&r);
	kvt_sizing_opts_init(o, old);
	assert_untouched(&r, old);
	kvt_sizing_opts_init(&whole, sizeof(whole));
	assert_int_equal(kvt_model_size(&m, NULL, o, &a), 0);
	assert_int_equal(kvt_model_size(&m, NULL, &whole, &b), 0);
	assert_memory_equal(&a, &b, sizeof(a)); /* mfu at its default */
	o->size = sizeof(whole) + 8;
	assert_int_equal(kvt_model_size(&m, NULL, o, &a), -EINVAL);

	/* prefill_flops_s is required: a caller too old to give it is refused */
	fill_marks(&r);
	p = (struct kvt_plan_opts *)r.bytes;
	kvt_plan_opts_init(p, old_plan);
	assert_untouched(&r, old_plan);
	p->model = &m;
	p->block_tokens = 16;
	assert_int_equal(kvt_plan_prefix(p, tiers, 2, &plan, NULL), -EINVAL);
	p->size = sizeof(struct kvt_plan_opts);
	p->prefill_flops_s = 1e14;
	assert_int_equal(kvt_plan_prefix(p, tiers, 2, &plan, NULL), 0);
}

static void tier_opts_of_an_older_caller(void **state)
{
	const size_t old_dram = offsetof(struct kvt_dram_opts, huge_pages);
	const size_t old_io = offsetof(struct kvt_ssd_io_opts, force_threads);
	struct kvt_mem_tier *dram;
	struct kvt_ssd_io *io;
	union room r;
	struct kvt_dram_opts *d = (struct kvt_dram_opts *)r.bytes;
	struct kvt_ssd_io_opts *o = (struct kvt_ssd_io_opts *)r.bytes;

	fill_marks(&r);
	kvt_dram_opts_init(d, old_dram);
	assert_untouched(&r, old_dram);
	d->bytes = 1 << 20;
	d->slab_bytes = 1 << 20;
	assert_int_equal(kvt_dram_open(d, &dram), 0);
	dram->ops->close(dram);
	d->size = sizeof(struct kvt_dram_opts) + 8;
	assert_int_equal(kvt_dram_open(d, &dram), -EINVAL);

	fill_marks(&r);
	kvt_ssd_io_opts_init(o, old_io);
	assert_untouched(&r, old_io);
	o->queue_depth = 4;
	assert_int_equal(kvt_ssd_io_open(o, &io), 0);
	kvt_ssd_io_close(io);
	o->size = sizeof(struct kvt_ssd_io_opts) + 8;
	assert_int_equal(kvt_ssd_io_open(o, &io), -EINVAL);
}

static void device_structs_of_an_older_caller(void **state)
{
	const size_t old_dev = offsetof(struct kvt_dev_opts, device);
	const size_t old_info = offsetof(struct kvt_dev_info, pci_bus_id);
	const size_t old_desc = offsetof(struct kvt_dev_layout_desc, v_base);
	const size_t old_xfer = offsetof(struct kvt_dev_xfer_opts, layer_cb_arg);
	struct kvt_dev_mem *t[2];
	struct kvt_dev_stream *st;
	struct kvt_dev_layout *lay;
	struct kvt_dev *dev;
	void *base[2], *blk;
	uint32_t page = 1;
	union room r;
	struct kvt_dev_opts *o = (struct kvt_dev_opts *)r.bytes;
	struct kvt_dev_info *info = (struct kvt_dev_info *)r.bytes;
	struct kvt_dev_layout_desc *d = (struct kvt_dev_layout_desc *)r.bytes;
	struct kvt_dev_xfer_opts *x = (struct kvt_dev_xfer_opts *)r.bytes;

	/* an ordinal the caller could not give: device 0 */
	fill_marks(&r);
	kvt_dev_opts_init(o, old_dev);
	assert_untouched(&r, old_dev);
	o->backend = KVT_DEV_HOST;
	assert_int_equal(kvt_dev_open(o, &dev), 0);
	kvt_dev_close(dev);
	o->size = sizeof(struct kvt_dev_opts) + 8;
	assert_int_equal(kvt_dev_open(o, &dev), -EINVAL);
	o->size = old_dev;
	assert_int_equal(kvt_dev_open(o, &dev), 0);

	fill_marks(&r);
	info->size = old_info;
	assert_int_equal(kvt_dev_info(dev, info), 0);
	assert_int_equal(info->size, old_info);
	assert_int_equal(info->backend, KVT_DEV_HOST);
	assert_string_equal(info->name, "host");
	assert_untouched(&r, old_info);

	/* a paged layout needs no v_base, so an older descriptor describes it */
	for (int l = 0; l < 2; l++) {
		assert_int_equal(kvt_dev_mem_alloc(dev, 4 * 2 * 2, &t[l]), 0);
		base[l] = kvt_dev_mem_ptr(t[l]);
	}
	fill_marks(&r);
	kvt_dev_layout_desc_init(d, old_desc);
	assert_int_equal(d->pages_per_block, 1);
	assert_untouched(&r, old_desc);
	d->kind = KVT_LAYOUT_PAGED_KV;
	d->layers = 2;
	d->kv_heads = 1;
	d->head_dim = 2;
	d->elem_bytes = 1;
	d->page_tokens = 1;
	d->num_pages = 2;
	d->k_base = base;
	assert_int_equal(kvt_dev_layout_block_bytes(d), 8);
	assert_int_equal(kvt_dev_layout_create(dev, d, &lay), 0);
	d->size = sizeof(struct kvt_dev_layout_desc) + 8;
	assert_int_equal(kvt_dev_layout_block_bytes(d), 0);

	assert_int_equal(kvt_dev_stream_create(dev, false, &st), 0);
	assert_int_equal(kvt_dev_host_alloc(dev, 8, KVT_DEV_HOST_MAPPED, &blk), 0);
	fill_marks(&r);
	kvt_dev_xfer_opts_init(x, old_xfer);
	assert_untouched(&r, old_xfer);
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, &blk, x), 0);
	assert_int_equal(kvt_dev_stream_sync(st), 0);
	x->size = sizeof(struct kvt_dev_xfer_opts) + 8;
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, &blk, x), -EINVAL);

	kvt_dev_host_free(dev, blk);
	kvt_dev_stream_destroy(st);
	kvt_dev_layout_destroy(lay);
	kvt_dev_mem_free(t[0]);
	kvt_dev_mem_free(t[1]);
	kvt_dev_close(dev);
}

static void server_opts_of_an_older_caller(void **state)
{
	const size_t old = offsetof(struct kvt_server_opts, prefault_dram);
	const struct kvt_server_tenant tenant = { .name = "t", .token = "" };
	struct kvt_store_opts so;
	struct kvt_server *srv;
	struct kvt_store *s;
	char path[600], *dir = kvt_test_sockdir("opts-server");
	union room r;
	struct kvt_server_opts *o = (struct kvt_server_opts *)r.bytes;

	kvt_store_opts_init(&so, sizeof(so));
	so.dram_bytes = 1 << 20;
	so.dram_huge_pages = false;
	assert_int_equal(kvt_store_open(&so, &s), 0);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	fill_marks(&r);
	kvt_server_opts_init(o, old);
	assert_int_equal(o->workers, 4);
	assert_untouched(&r, old);
	o->socket_path = path;
	o->store = s;
	o->tenants = &tenant;
	o->n_tenants = 1;
	o->workers = 1;
	assert_int_equal(kvt_server_open(o, &srv), 0);
	kvt_server_close(srv);
	o->size = sizeof(struct kvt_server_opts) + 8;
	assert_int_equal(kvt_server_open(o, &srv), -EINVAL);
	kvt_store_close(s);
	kvt_test_rmdir(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_helper_keeps_to_the_callers_size),
		cmocka_unit_test(store_opts_of_an_older_caller),
		cmocka_unit_test(ns_desc_and_stats_of_an_older_caller),
		cmocka_unit_test(model_opts_of_an_older_caller),
		cmocka_unit_test(tier_opts_of_an_older_caller),
		cmocka_unit_test(device_structs_of_an_older_caller),
		cmocka_unit_test(server_opts_of_an_older_caller),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
