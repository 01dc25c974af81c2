/* SPDX-License-Identifier: Apache-2.0 */
/* The device API's contract at its edges: bad arguments and invalid layouts
 * get -EINVAL with a message, out-of-range pages -ERANGE, buffers kernels
 * cannot reach -EFAULT on the direct path, double registration -EEXIST,
 * unknown registrations -ENOENT, and a failed CUDA open -ENODEV with the
 * runtime's reason kept for the log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "tests/cuda/dev_test.h"

static void open_rejects_bad_options(void **state)
{
	struct kvt_dev_opts o;
	struct kvt_dev *dev = (struct kvt_dev *)&o;

	assert_int_equal(kvt_dev_open(NULL, NULL), -EINVAL);
	kvt_dev_opts_init(&o, sizeof(o));
	o.size = 3;
	assert_int_equal(kvt_dev_open(&o, &dev), -EINVAL);
	assert_null(dev);
	assert_string_not_equal(kvt_dev_last_error(), "");
	kvt_dev_opts_init(&o, sizeof(o));
	o.backend = (enum kvt_dev_backend)7;
	assert_int_equal(kvt_dev_open(&o, &dev), -EINVAL);
	kvt_dev_opts_init(&o, sizeof(o));
	o.device = -1;
	assert_int_equal(kvt_dev_open(&o, &dev), -EINVAL);
	kvt_dev_close(NULL);
}

static void cuda_open_fails_with_enodev_and_a_reason_or_works(void **state)
{
	struct kvt_dev_opts o;
	struct kvt_dev_info info = { .size = sizeof(info) };
	struct kvt_dev *dev = NULL;
	int rc;

	kvt_dev_opts_init(&o, sizeof(o));
	o.backend = KVT_DEV_CUDA;
	rc = kvt_dev_open(&o, &dev);
	if (rc == 0) {
		assert_int_equal(kvt_dev_info(dev, &info), 0);
		assert_int_equal(info.backend, KVT_DEV_CUDA);
		assert_true(info.device_count >= 1);
		assert_true(info.cc_major >= 7);
		assert_true(info.total_mem_bytes > 0);
		kvt_dev_close(dev);
		return;
	}
	assert_int_equal(rc, -ENODEV);
	assert_null(dev);
	assert_true(strstr(kvt_dev_last_error(), "GPU") || strstr(kvt_dev_last_error(), "CUDA"));

	/* AUTO then falls back to host and says why */
	o.backend = KVT_DEV_AUTO;
	assert_int_equal(kvt_dev_open(&o, &dev), 0);
	assert_int_equal(kvt_dev_info(dev, &info), 0);
	assert_int_equal(info.backend, KVT_DEV_HOST);
	assert_string_not_equal(info.fallback_reason, "");
	kvt_dev_close(dev);
}

static void info_describes_the_backend(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_info info = { .size = sizeof(info) };
	struct kvt_dev_info tiny = { .size = 1 };

	assert_int_equal(kvt_dev_info(dev, &info), 0);
	assert_int_equal(info.backend, KVT_TEST_BACKEND);
	assert_string_not_equal(info.name, "");
	assert_true(info.total_mem_bytes > 0);
	assert_true(info.multiprocessors > 0);
	assert_true(info.can_map_host);
	assert_int_equal(kvt_dev_info(dev, &tiny), -EINVAL);
	assert_int_equal(kvt_dev_info(NULL, &info), -EINVAL);
	assert_string_equal(kvt_dev_backend_name(KVT_DEV_HOST), "host");
	assert_string_equal(kvt_dev_backend_name(KVT_DEV_CUDA), "cuda");
	kvt_dev_close(dev);
}

static void host_registration_errors(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	size_t len = 1 << 20;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *q = NULL;

	assert_true(p != MAP_FAILED);
	assert_int_equal(kvt_dev_host_register(dev, NULL, len, 0), -EINVAL);
	assert_int_equal(kvt_dev_host_register(dev, p, 0, 0), -EINVAL);
	assert_int_equal(kvt_dev_host_register(dev, p, len, 0x80), -EINVAL);
	assert_int_equal(kvt_dev_host_unregister(dev, p), -ENOENT);
	assert_string_not_equal(kvt_dev_last_error(), "");
	assert_int_equal(kvt_dev_host_register(dev, p, len, KVT_DEV_HOST_MAPPED), 0);
	assert_int_equal(kvt_dev_host_register(dev, p, len, 0), -EEXIST);
	assert_int_equal(kvt_dev_host_unregister(dev, p), 0);
	assert_int_equal(kvt_dev_host_unregister(dev, p), -ENOENT);
	assert_int_equal(kvt_dev_host_alloc(dev, 0, 0, &q), -EINVAL);
	assert_int_equal(kvt_dev_host_alloc(dev, 4096, 0, NULL), -EINVAL);
	kvt_dev_host_free(dev, NULL);
	munmap(p, len);
	kvt_dev_close(dev);
}

static void null_handles_are_rejected(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_stream *st;
	struct kvt_dev_event *ev;
	struct kvt_dev_mem *m;
	struct kvt_dev_ipc_handle h;
	char buf[8];

	assert_int_equal(kvt_dev_mem_alloc(dev, 0, &m), -EINVAL);
	assert_int_equal(kvt_dev_mem_alloc(NULL, 8, &m), -EINVAL);
	assert_int_equal(kvt_dev_mem_export(NULL, &h), -EINVAL);
	assert_int_equal(kvt_dev_stream_create(dev, false, NULL), -EINVAL);
	assert_int_equal(kvt_dev_stream_sync(NULL), -EINVAL);
	assert_int_equal(kvt_dev_event_query(NULL), -EINVAL);
	assert_int_equal(kvt_dev_event_wait(NULL), -EINVAL);
	assert_int_equal(kvt_dev_stream_create(dev, false, &st), 0);
	assert_int_equal(kvt_dev_event_create(dev, &ev), 0);
	assert_int_equal(kvt_dev_event_record(NULL, st), -EINVAL);
	assert_int_equal(kvt_dev_event_record(ev, NULL), -EINVAL);
	assert_int_equal(kvt_dev_stream_wait_event(st, NULL), -EINVAL);
	assert_int_equal(kvt_dev_stream_callback(st, NULL, NULL), -EINVAL);
	assert_int_equal(kvt_dev_copy_async(st, NULL, buf, 8), -EINVAL);
	assert_int_equal(kvt_dev_copy_async(st, buf, buf, 0), 0);
	assert_null(kvt_dev_mem_ptr(NULL));
	assert_int_equal(kvt_dev_mem_len(NULL), 0);
	kvt_dev_mem_free(NULL);
	kvt_dev_stream_destroy(NULL);
	kvt_dev_event_destroy(NULL);
	kvt_dev_layout_destroy(NULL);
	kvt_dev_event_destroy(ev);
	kvt_dev_stream_destroy(st);
	kvt_dev_close(dev);
}

/* A valid descriptor for the layout tests; each test breaks one field. */
static void valid_desc(struct kvt_dev_layout_desc *d, void **k, void **v)
{
	kvt_dev_layout_desc_init(d, sizeof(*d));
	d->kind = KVT_LAYOUT_SPLIT_KV;
	d->layers = 2;
	d->kv_heads = 2;
	d->head_dim = 8;
	d->elem_bytes = 2;
	d->page_tokens = 4;
	d->num_pages = 4;
	d->k_base = k;
	d->v_base = v;
}

static void invalid_layouts_are_rejected(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_mem *m;
	struct kvt_dev_layout_desc d;
	struct kvt_dev_layout *lay = NULL;
	void *k[2], *v[2], *knull[2];
	char *base;

	assert_int_equal(kvt_dev_mem_alloc(dev, 4 * 4096, &m), 0);
	base = kvt_dev_mem_ptr(m);
	k[0] = base, k[1] = base + 4096, v[0] = base + 8192, v[1] = base + 12288;
	knull[0] = base, knull[1] = NULL;

	valid_desc(&d, k, v);
	assert_int_equal(kvt_dev_layout_block_bytes(&d), 2 * 2 * 4 * 2 * 8 * 2);
	assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), 0);
	kvt_dev_layout_destroy(lay);

#define BAD(stmt)                                                                  \
	do {                                                                       \
		valid_desc(&d, k, v);                                              \
		stmt;                                                              \
		assert_int_equal(kvt_dev_layout_block_bytes(&d), 0);               \
		assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), -EINVAL);   \
		assert_null(lay);                                                  \
	} while (0)
	BAD(d.size = 8);
	BAD(d.kind = (enum kvt_layout)0);
	BAD(d.kind = (enum kvt_layout)9);
	BAD(d.layers = 0);
	BAD(d.kv_heads = 0);
	BAD(d.head_dim = 0);
	BAD(d.page_tokens = 0);
	BAD(d.num_pages = 0);
	BAD(d.elem_bytes = 3);
	BAD(d.pages_per_block = 0);
	BAD(d.pages_per_block = 100000);
	BAD(d.page_stride = 8);
	BAD((d.kind = KVT_LAYOUT_MLA, d.kv_heads = 2));
	BAD((d.kind = KVT_LAYOUT_PAGED_KV, d.kv_stride = 16));
#undef BAD
	/* sizes are fine, the pointers are not */
	valid_desc(&d, k, NULL);
	assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), -EINVAL);
	valid_desc(&d, NULL, v);
	assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), -EINVAL);
	valid_desc(&d, knull, v);
	assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), -EINVAL);
	assert_string_not_equal(kvt_dev_last_error(), "");
	assert_int_equal(kvt_dev_layout_create(dev, NULL, &lay), -EINVAL);

	kvt_dev_mem_free(m);
	kvt_dev_close(dev);
}

static void bad_transfers_are_rejected(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_stream *st;
	struct kvt_dev_mem *m;
	struct kvt_dev_layout_desc d;
	struct kvt_dev_layout *lay;
	struct kvt_dev_xfer_opts xo;
	void *k[2], *v[2], *blk, *blocks[1];
	void *pageable;
	uint32_t page;
	char *base;

	assert_int_equal(kvt_dev_mem_alloc(dev, 4 * 4096, &m), 0);
	base = kvt_dev_mem_ptr(m);
	k[0] = base, k[1] = base + 4096, v[0] = base + 8192, v[1] = base + 12288;
	valid_desc(&d, k, v);
	assert_int_equal(kvt_dev_layout_create(dev, &d, &lay), 0);
	assert_int_equal(kvt_dev_stream_create(dev, false, &st), 0);
	assert_int_equal(kvt_dev_host_alloc(dev, kvt_dev_layout_bytes(lay), KVT_DEV_HOST_MAPPED,
					    &blk), 0);
	pageable = malloc(kvt_dev_layout_bytes(lay));
	assert_non_null(pageable);
	blocks[0] = blk;

	page = 4; /* == num_pages */
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, NULL), -ERANGE);
	assert_int_equal(kvt_dev_scatter(lay, st, &page, 1, (const void *const *)blocks, NULL),
			 -ERANGE);
	assert_non_null(strstr(kvt_dev_last_error(), "page id"));
	page = 3;
	assert_int_equal(kvt_dev_gather(NULL, st, &page, 1, blocks, NULL), -EINVAL);
	assert_int_equal(kvt_dev_gather(lay, NULL, &page, 1, blocks, NULL), -EINVAL);
	assert_int_equal(kvt_dev_gather(lay, st, NULL, 1, blocks, NULL), -EINVAL);
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, NULL, NULL), -EINVAL);
	assert_int_equal(kvt_dev_gather(lay, st, &page, 0, NULL, NULL), 0);
	blocks[0] = NULL;
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, NULL), -EINVAL);

	kvt_dev_xfer_opts_init(&xo, sizeof(xo));
	xo.path = (enum kvt_dev_path)9;
	blocks[0] = blk;
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, &xo), -EINVAL);
	xo.size = 4;
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, &xo), -EINVAL);

	/* pageable memory: no kernel can reach it directly; staged is fine */
	kvt_dev_xfer_opts_init(&xo, sizeof(xo));
	xo.path = KVT_DEV_PATH_DIRECT;
	blocks[0] = pageable;
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, &xo), -EFAULT);
	xo.path = KVT_DEV_PATH_STAGED;
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, &xo), 0);
	xo.path = KVT_DEV_PATH_AUTO;
	assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, &xo), 0);
	assert_int_equal(kvt_dev_stream_sync(st), 0);
#ifndef KVT_TEST_CUDA
	/* mapped, but too short for a block: the kernel would run off its end */
	{
		void *small;

		assert_int_equal(kvt_dev_host_alloc(dev, kvt_dev_layout_bytes(lay) / 2,
						    KVT_DEV_HOST_MAPPED, &small), 0);
		blocks[0] = small;
		xo.path = KVT_DEV_PATH_DIRECT;
		assert_int_equal(kvt_dev_gather(lay, st, &page, 1, blocks, &xo), -EFAULT);
		kvt_dev_host_free(dev, small);
	}
#endif

	free(pageable);
	kvt_dev_host_free(dev, blk);
	kvt_dev_stream_destroy(st);
	kvt_dev_layout_destroy(lay);
	kvt_dev_mem_free(m);
	kvt_dev_close(dev);
}

static void import_rejects_foreign_handles(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_ipc_handle h;
	struct kvt_dev_mem *m = NULL;

	memset(&h, 0, sizeof(h));
	h.backend = KVT_TEST_BACKEND == KVT_DEV_HOST ? KVT_DEV_CUDA : KVT_DEV_HOST;
	h.fd = -1;
	h.len = 4096;
	assert_int_equal(kvt_dev_mem_import(dev, &h, &m), -EINVAL);
	assert_null(m);
	h.backend = KVT_TEST_BACKEND;
	h.len = 0;
	assert_int_equal(kvt_dev_mem_import(dev, &h, &m), -EINVAL);
#ifndef KVT_TEST_CUDA
	h.len = 4096;
	assert_int_equal(kvt_dev_mem_import(dev, &h, &m), -EINVAL); /* fd -1 */
#endif
	kvt_dev_close(dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(open_rejects_bad_options),
		cmocka_unit_test(cuda_open_fails_with_enodev_and_a_reason_or_works),
		cmocka_unit_test(info_describes_the_backend),
		cmocka_unit_test(host_registration_errors),
		cmocka_unit_test(null_handles_are_rejected),
		cmocka_unit_test(invalid_layouts_are_rejected),
		cmocka_unit_test(bad_transfers_are_rejected),
		cmocka_unit_test(import_rejects_foreign_handles),
	};

	dev_test_require();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
