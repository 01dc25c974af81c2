/* The store does not stall behind the SSD tier's I/O: while the demoter's
 * write batch is held in flight (by the I/O engine's test hook), store stats,
 * puts, gets and removes of DRAM blocks all return. Run with the argument
 * "threads" for the pread/pwrite pool. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batch_hold.h"
#include "kvtier/store.h"
#include "ssd_test.h"

/* 4 layers x 2 kv heads x 128 dims x bf16 x 16 tokens x K,V = 64 KiB */
#define BLOCK (64u << 10)
#define DRAM_BYTES (1u << 20) /* 16 slots */

static bool force_threads;
static uint64_t seed;

static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	k.bytes[8] = 0x6e;
	return k;
}

static void put_block(struct kvt_ns *ns, uint32_t n, char *buf)
{
	struct kvt_key k = key_n(n);

	kvt_test_fill(buf, BLOCK, seed + n);
	assert_int_equal(kvt_put(ns, &k, NULL, buf, BLOCK), 0);
}

static void store_calls_do_not_wait_for_the_demoter(void **state)
{
	char *dir = ssd_test_dir("store_nowait");
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_store *store;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_ns *ns;
	struct kvt_key k;

	(void)state;
	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = DRAM_BYTES;
	o.dram_huge_pages = false;
	o.dram_high_watermark = 0.5;
	o.dram_low_watermark = 0.25;
	o.ssd_dir = dir;
	o.ssd_bytes = 16 << 20;
	o.ssd_segment_bytes = 1 << 20;
	o.ssd_queue_depth = 8;
	o.ssd_force_threads = force_threads;
	assert_int_equal(kvt_store_open(&o, &store), 0);
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "test/ssd-nowait");
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 128;
	d.block_tokens = 16;
	assert_int_equal(kvt_ns_attach(store, &d, &ns), 0);
	assert_int_equal(kvt_ns_block_bytes(ns), BLOCK);

	/* above the high watermark: the demoter's first write batch parks */
	batch_hold_arm(0);
	for (uint32_t n = 0; n < 10; n++)
		put_block(ns, n, buf);
	assert_non_null(batch_hold_wait());

	/* none of these may wait for that batch (the watchdog fails a hang) */
	assert_int_equal(kvt_store_stats(store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].present);
	assert_int_equal(st.tier[KVT_TIER_SSD].io_fallback, force_threads);
	put_block(ns, 10, buf);
	kvt_test_fill(want, BLOCK, seed + 10);
	k = key_n(10);
	assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
	assert_memory_equal(buf, want, BLOCK);
	assert_int_equal(kvt_remove(ns, &k), 0);
	assert_int_equal(kvt_store_stats(store, &st), 0);

	batch_hold_release();
	kvt_ssd_io_set_test_hook(NULL, NULL);
	for (uint32_t n = 0; n < 10; n++) {
		k = key_n(n);
		kvt_test_fill(want, BLOCK, seed + n);
		assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
		assert_memory_equal(buf, want, BLOCK);
	}
	assert_int_equal(kvt_store_stats(store, &st), 0);
	assert_false(st.tier[KVT_TIER_SSD].degraded);
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
	free(want);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(store_calls_do_not_wait_for_the_demoter),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	seed = kvt_test_seed();
	batch_hold_watchdog(90);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
