/* SPDX-License-Identifier: Apache-2.0 */
/* The hint refresher (cluster/hint_refresh.c) over a real store with an SSD
 * tier: after a restart, the blocks recovered from SSD are handed over with
 * their tier at the first walk, and blocks in DRAM with theirs; a removed
 * block is not handed over again; walks repeat every every_ms and at once
 * when asked; a full backlog holds the walk back until it drains. The store
 * walk under it (kvt_store_scan) sees every block once. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/hint_refresh.h"
#include "helpers.h"

#define BLOCKS 160
#define MAX_SEEN 4096

static char *dir;
static struct kvt_store *store;
static struct kvt_ns *ns;
static struct kvt_key keys[BLOCKS];

/* What the refresher handed over, and the backlog it is shown. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct kvt_key seen[MAX_SEEN];
static uint8_t seen_tier[MAX_SEEN];
static size_t n_seen;
static size_t backlog;

static void publish(void *arg, const struct kvt_key *k, size_t n, uint8_t tier)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n && n_seen < MAX_SEEN; i++) {
		seen[n_seen] = k[i];
		seen_tier[n_seen++] = tier;
	}
	pthread_mutex_unlock(&mu);
}

static size_t get_backlog(void *arg)
{
	size_t b;

	(void)arg;
	pthread_mutex_lock(&mu);
	b = backlog;
	pthread_mutex_unlock(&mu);
	return b;
}

static void set_backlog(size_t b)
{
	pthread_mutex_lock(&mu);
	backlog = b;
	pthread_mutex_unlock(&mu);
}

static void forget_seen(void)
{
	pthread_mutex_lock(&mu);
	n_seen = 0;
	pthread_mutex_unlock(&mu);
}

/* How often key k was handed over, and in which tier (the last one). */
static int times_seen(const struct kvt_key *k, uint8_t *tier)
{
	int c = 0;

	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n_seen; i++)
		if (memcmp(&seen[i], k, sizeof(*k)) == 0) {
			c++;
			*tier = seen_tier[i];
		}
	pthread_mutex_unlock(&mu);
	return c;
}

static void open_store(void)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = 4 << 20; /* 64 KiB blocks: DRAM holds fewer than BLOCKS */
	o.dram_slab_bytes = 1 << 20;
	o.dram_huge_pages = false;
	o.ssd_dir = dir;
	o.ssd_bytes = 64 << 20;
	o.ssd_segment_bytes = 4 << 20;
	assert_int_equal(kvt_store_open(&o, &store), 0);
	kvt_ns_desc_init(&d, sizeof(d));
	strcpy(d.model_id, "test/hint-refresh");
	d.layout = KVT_LAYOUT_PAGED_KV;
	d.dtype = KVT_DTYPE_BF16;
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 128;
	d.block_tokens = 16;
	d.tp_size = 1;
	assert_int_equal(kvt_ns_attach(store, &d, &ns), 0);
}

static uint64_t walks(struct kvt_hint_refresh *h)
{
	struct kvt_hint_refresh_stats st;

	kvt_hint_refresh_stats(h, &st);
	return st.walks;
}

static bool walked_past(struct kvt_hint_refresh *h, uint64_t n, unsigned ms)
{
	for (unsigned i = 0; i < ms / 10 && walks(h) <= n; i++)
		kvt_test_sleep_ms(10);
	return walks(h) > n;
}

static struct kvt_hint_refresh *start(unsigned every_ms)
{
	struct kvt_hint_refresh_opts o;
	struct kvt_hint_refresh *h = NULL;

	kvt_hint_refresh_opts_init(&o, sizeof(o));
	o.store = store;
	o.every_ms = every_ms;
	o.batch_keys = 16; /* several pieces per walk */
	o.backlog_max = 100;
	o.publish_cb = publish;
	o.backlog_cb = get_backlog;
	assert_int_equal(kvt_hint_refresh_start(&o, &h), 0);
	return h;
}

/* Blocks put, the store closed and opened again: what is left is what was
 * on SSD, and each of them is handed over once per walk, as on SSD. */
static int setup(void **state)
{
	size_t bb;
	void *buf;

	(void)state;
	dir = kvt_test_mkdtemp("hint_refresh");
	assert_non_null(dir);
	open_store();
	bb = kvt_ns_block_bytes(ns);
	buf = malloc(bb);
	assert_non_null(buf);
	for (int i = 0; i < BLOCKS; i++) {
		memset(&keys[i], 0, sizeof(keys[i]));
		keys[i].bytes[0] = 0x5a;
		keys[i].bytes[1] = (uint8_t)i;
		memset(buf, i, bb);
		assert_int_equal(kvt_put(ns, &keys[i], i ? &keys[i - 1] : NULL, buf, bb), 0);
	}
	free(buf);
	kvt_store_close(store);
	open_store();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	return 0;
}

static void the_scan_sees_every_block_once(void **state)
{
	struct kvt_key k[7];
	uint8_t t[7];
	uint64_t cursor = 0;
	int total = 0, n, calls = 0;

	(void)state;
	while (cursor != KVT_SCAN_END) {
		n = kvt_store_scan(store, &cursor, k, t, 7);
		assert_true(n >= 0 && n <= 7);
		for (int i = 0; i < n; i++)
			assert_int_equal(t[i], KVT_TIER_SSD); /* nothing read up yet */
		total += n;
		assert_true(++calls < 1000);
	}
	assert_int_equal(kvt_store_scan(store, &cursor, k, t, 7), 0);
	assert_int_equal(kvt_store_scan(store, NULL, k, t, 7), -EINVAL);
	cursor = 0;
	assert_int_equal(kvt_store_scan(store, &cursor, k, t, 0), -EINVAL);
	/* the recovered blocks: at least what DRAM could not hold */
	assert_true(total >= 60 && total <= BLOCKS);
}

static void recovered_blocks_are_handed_over_with_their_tier(void **state)
{
	struct kvt_hint_refresh *h;
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint8_t tiers[BLOCKS], tier = 0;
	int on_ssd = 0, handed = 0;
	size_t bb = kvt_ns_block_bytes(ns);
	void *buf = malloc(bb);

	(void)state;
	assert_non_null(buf);
	forget_seen();
	set_backlog(0);
	h = start(60000); /* only the first walk, and those asked for */
	assert_true(walked_past(h, 0, 5000));
	assert_int_equal(kvt_store_stats(store, &st), 0);
	for (int i = 0; i < BLOCKS; i++) {
		uint8_t t;

		if (kvt_lookup(ns, &keys[i], 1, &t) == 1) {
			assert_int_equal(t, KVT_TIER_SSD);
			assert_int_equal(times_seen(&keys[i], &tier), 1);
			assert_int_equal(tier, KVT_TIER_SSD);
			on_ssd++;
		} else {
			assert_int_equal(times_seen(&keys[i], &tier), 0);
		}
	}
	assert_int_equal(on_ssd, (int)st.tier[KVT_TIER_SSD].blocks);
	assert_true(on_ssd >= 60);

	/* one read up into DRAM is handed over as DRAM; one removed, not at all */
	for (int i = 0; i < BLOCKS; i++)
		tiers[i] = KVT_TIER_NONE;
	for (int i = 0; i < BLOCKS && handed < 2; i++) {
		if (kvt_lookup(ns, &keys[i], 1, &tiers[i]) != 1)
			continue;
		if (handed == 0)
			assert_int_equal(kvt_get(ns, &keys[i], buf, bb), 0);
		else
			assert_int_equal(kvt_remove(ns, &keys[i]), 0);
		tiers[i] = handed == 0 ? KVT_TIER_DRAM : KVT_TIER_NONE;
		handed++;
	}
	forget_seen();
	kvt_hint_refresh_now(h);
	assert_true(walked_past(h, 1, 5000));
	for (int i = 0; i < BLOCKS; i++) {
		if (tiers[i] == KVT_TIER_DRAM) {
			assert_int_equal(times_seen(&keys[i], &tier), 1);
			assert_int_equal(tier, KVT_TIER_DRAM);
		}
		if (tiers[i] == KVT_TIER_NONE && kvt_lookup(ns, &keys[i], 1, NULL) == 0)
			assert_int_equal(times_seen(&keys[i], &tier), 0);
	}
	kvt_hint_refresh_stop(h);
	free(buf);
}

static void walks_repeat_every_every_ms(void **state)
{
	struct kvt_hint_refresh *h;

	(void)state;
	set_backlog(0);
	h = start(50);
	/* a bound far from any scheduler's reach: 3 walks of 50 ms in 10 s */
	assert_true(walked_past(h, 3, 10000));
	kvt_hint_refresh_stop(h);
}

static void a_full_backlog_holds_the_walk_back(void **state)
{
	struct kvt_hint_refresh *h;
	uint8_t tier;

	(void)state;
	forget_seen();
	set_backlog(100); /* at backlog_max: nothing may be handed over */
	h = start(60000);
	kvt_test_sleep_ms(300);
	pthread_mutex_lock(&mu);
	assert_int_equal(n_seen, 0);
	pthread_mutex_unlock(&mu);
	assert_int_equal(walks(h), 0);
	set_backlog(99);
	assert_true(walked_past(h, 0, 5000));
	assert_true(n_seen > 0);
	(void)tier;
	kvt_hint_refresh_stop(h); /* and stopping while held back ends too: */
	set_backlog(1000);
	h = start(60000);
	kvt_test_sleep_ms(50);
	kvt_hint_refresh_stop(h);
}

static void bad_options_are_refused(void **state)
{
	struct kvt_hint_refresh_opts o;
	struct kvt_hint_refresh *h = NULL;

	(void)state;
	kvt_hint_refresh_opts_init(&o, sizeof(o));
	o.publish_cb = publish;
	assert_int_equal(kvt_hint_refresh_start(&o, &h), -EINVAL); /* no store */
	o.store = store;
	o.publish_cb = NULL;
	assert_int_equal(kvt_hint_refresh_start(&o, &h), -EINVAL);
	o.publish_cb = publish;
	o.every_ms = 0;
	assert_int_equal(kvt_hint_refresh_start(&o, &h), -EINVAL);
	assert_null(h);
	kvt_hint_refresh_stop(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_scan_sees_every_block_once),
		cmocka_unit_test(recovered_blocks_are_handed_over_with_their_tier),
		cmocka_unit_test(walks_repeat_every_every_ms),
		cmocka_unit_test(a_full_backlog_holds_the_walk_back),
		cmocka_unit_test(bad_options_are_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
