/* SPDX-License-Identifier: Apache-2.0 */
/* The store does not stall behind the SSD tier's I/O: while the demoter's
 * write batch is held in flight (by the I/O engine's test hook), store stats,
 * puts, gets and removes of DRAM blocks all return; while one is held in its
 * fdatasync, blocks on SSD are read back; a block removed while its write
 * is in flight stays removed after a restart; with every dirty block either
 * in that batch or needed, an allocation takes the slot of a block that has
 * a clean copy on SSD at once (the coldest such block; for a read, one
 * read back before when the coldest has none), and an acquire of blocks on SSD reads those
 * it has room for while it waits for room for the rest; blocks of a chain
 * pinned or removed while their batch is written leave the counts right.
 * Run with the argument "threads" for the pread/pwrite pool. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "batch_hold.h"
#include "kvtier/store.h"
#include "ssd_test.h"
#include "tiers/tier.h"

/* 4 layers x 2 kv heads x 128 dims x bf16 x 16 tokens x K,V = 64 KiB */
#define BLOCK (64u << 10)
#define DRAM_BYTES (1u << 20)
/* DRAM's slots: each block has the SSD record's headroom before it (15) */
#define DRAM_SLOTS (DRAM_BYTES / (BLOCK + KVT_TIER_HEADROOM))

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

/* Whether a batch is held in the hook now. */
static bool held(void)
{
	bool h;

	pthread_mutex_lock(&batch_hold.mu);
	h = batch_hold.entered;
	pthread_mutex_unlock(&batch_hold.mu);
	return h;
}

static void check_block(const void *bytes, uint32_t n)
{
	char *want = malloc(BLOCK);

	kvt_test_fill(want, BLOCK, seed + n);
	assert_memory_equal(bytes, want, BLOCK);
	free(want);
}

/* A store over dir with dram_bytes of DRAM, demoting from half full down
 * to `low` (0: a quarter), and its namespace of 64 KiB blocks. */
static struct kvt_store *open_store_low(const char *dir, uint64_t dram_bytes, double low,
					struct kvt_ns **ns)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_store *store;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = dram_bytes;
	o.dram_huge_pages = false;
	o.dram_high_watermark = 0.5;
	o.dram_low_watermark = low ? low : 0.25;
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
	assert_int_equal(kvt_ns_attach(store, &d, ns), 0);
	assert_int_equal(kvt_ns_block_bytes(*ns), BLOCK);
	return store;
}

static struct kvt_store *open_store(const char *dir, uint64_t dram_bytes, struct kvt_ns **ns)
{
	return open_store_low(dir, dram_bytes, 0, ns);
}

static void store_calls_do_not_wait_for_the_demoter(void **state)
{
	char *dir = ssd_test_dir("store_nowait");
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store *store;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_ns *ns;
	struct kvt_key k;

	(void)state;
	store = open_store(dir, DRAM_BYTES, &ns);

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

static uint64_t dram_blocks(struct kvt_store *store)
{
	struct kvt_store_stats st = { .size = sizeof(st) };

	assert_int_equal(kvt_store_stats(store, &st), 0);
	return st.tier[KVT_TIER_DRAM].blocks;
}

/* Readers never wait behind a write batch or its fdatasync: with the
 * demoter's batch held just before its sync, blocks already on SSD are read
 * back (one by one and in a batch). */
static void ssd_reads_do_not_wait_for_a_write_batch(void **state)
{
	char *dir = ssd_test_dir("store_nowait_read");
	char *buf = malloc(BLOCK);
	struct kvt_store *store;
	struct kvt_ns *ns;
	struct kvt_key keys[4];
	struct kvt_slot slots[4];
	int res[4], found = 0;
	uint32_t ids[4];
	uint32_t n = 0;

	(void)state;
	/* room for the reads beside the batch */
	store = open_store(dir, 4 * DRAM_BYTES, &ns);

	/* 40 blocks through 60 slots, half of them the high watermark: some
	 * go down; four of those are the ones read */
	for (; n < 40; n++)
		put_block(ns, n, buf);
	for (int tries = 0; found < 4 && tries < 200; tries++) {
		found = 0;
		for (uint32_t k = 0; k < n && found < 4; k++) {
			uint8_t tier = 0;

			ids[found] = k;
			keys[found] = key_n(k);
			kvt_lookup(ns, &keys[found], 1, &tier);
			found += tier == KVT_TIER_SSD;
		}
		if (found < 4)
			usleep(10000);
	}
	assert_int_equal(found, 4);

	/* the demoter's next batch parks just before its fdatasync: puts
	 * until it does (past the high watermark), but never into the 4
	 * slots the reads need (a put that needed room would wait for the
	 * batch, and so would the reads) */
	batch_hold_arm_kind(KVT_SSD_IO_SYNC, 0);
	for (int k = 0; k < 40 && !held() && dram_blocks(store) < 4 * DRAM_SLOTS - 4; k++) {
		put_block(ns, n++, buf);
		usleep(20000);
	}
	assert_non_null(batch_hold_wait());
	if (dram_blocks(store) > 4 * DRAM_SLOTS - 4)
		fail_msg("DRAM holds %llu blocks: no room for the reads",
			 (unsigned long long)dram_blocks(store));

	/* none of these may wait for that batch (the watchdog fails a hang) */
	assert_int_equal(kvt_get(ns, &keys[0], buf, BLOCK), 0);
	check_block(buf, ids[0]);
	assert_int_equal(kvt_acquire_many(ns, keys + 1, 3, slots, res, NULL, NULL), 3);
	for (uint32_t k = 0; k < 3; k++) {
		check_block(slots[k].data, ids[k + 1]);
		kvt_release(ns, &slots[k]);
	}

	batch_hold_release();
	kvt_ssd_io_set_test_hook(NULL, NULL);
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

/* A block removed while the demoter's batch holding it is in flight stays
 * removed after a restart. The batch is written in chunks of 16 records;
 * with the first chunk held, the blocks of the second are removed: their
 * tombstones must order after the data records written once the hold ends.
 * Before, a data record took its sequence number only when its chunk
 * started, after the tombstone's: recovery kept the data. */
static void removed_during_a_write_stays_removed(void **state)
{
	char *dir = ssd_test_dir("store_nowait_remove");
	char *buf = malloc(BLOCK);
	struct kvt_store *store;
	struct kvt_ns *ns;
	struct kvt_key k;
	uint32_t n = 0;

	(void)state;
	/* 60 slots: past 30 the demoter writes all but 3 in one batch */
	store = open_store_low(dir, 4 * DRAM_BYTES, 0.05, &ns);
	batch_hold_arm_kind(KVT_SSD_IO_WRITE, 0);
	for (; n < 40 && !held(); n++) {
		put_block(ns, n, buf);
		if (n >= 30)
			usleep(20000);
	}
	assert_non_null(batch_hold_wait());
	/* blocks 16..23 lie past the first chunk of that batch (coldest first) */
	for (uint32_t r = 16; r < 24; r++) {
		k = key_n(r);
		assert_int_equal(kvt_remove(ns, &k), 0);
	}
	batch_hold_release();
	kvt_ssd_io_set_test_hook(NULL, NULL);
	kvt_store_close(store);

	store = open_store(dir, 4 * DRAM_BYTES, &ns);
	for (uint32_t r = 0; r < n; r++) {
		k = key_n(r);
		if (r >= 16 && r < 24 && kvt_lookup(ns, &k, 1, NULL))
			fail_msg("block %u removed during its write came back", r);
		if (r < 16) {
			assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
			check_block(buf, r);
		}
	}
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

/* Arms the hook for the demoter's next write batch and puts blocks from *n
 * on until it holds one. DRAM is never filled before the hold: a put that
 * needed room then would wait for the batch (how many blocks the demoter
 * left in DRAM, and how many puts it lets by before its batch reaches the
 * hook, depend on timing); past the high watermark it is woken anyway. */
static void hold_next_write(struct kvt_store *store, struct kvt_ns *ns, uint32_t *n, char *buf)
{
	batch_hold_arm_kind(KVT_SSD_IO_WRITE, 0);
	for (int k = 0; k < 10 && !held() && dram_blocks(store) < DRAM_SLOTS - 1; k++)
		put_block(ns, (*n)++, buf);
	assert_non_null(batch_hold_wait());
}

/* Puts blocks [from, to) into a store of DRAM_BYTES (15 slots) and waits
 * for the demoter to go quiet below the high watermark; then the coldest
 * blocks are on SSD. */
static void fill_and_settle(struct kvt_store *store, struct kvt_ns *ns, uint32_t from,
			    uint32_t to, char *buf)
{
	struct kvt_store_stats st = { .size = sizeof(st) }, prev = { 0 };

	for (uint32_t n = from; n < to; n++)
		put_block(ns, n, buf);
	for (int tries = 0; tries < 500; tries++) {
		assert_int_equal(kvt_store_stats(store, &st), 0);
		if (st.tier[KVT_TIER_DRAM].blocks <= 7 && tries &&
		    st.tier[KVT_TIER_DRAM].blocks == prev.tier[KVT_TIER_DRAM].blocks &&
		    st.tier[KVT_TIER_SSD].blocks == prev.tier[KVT_TIER_SSD].blocks)
			return;
		prev = st;
		usleep(20000);
	}
	fail_msg("the demoter did not settle");
}

static bool on_ssd(struct kvt_ns *ns, uint32_t n)
{
	struct kvt_key k = key_n(n);
	uint8_t tier = 0;

	return kvt_lookup(ns, &k, 1, &tier) == 1 && tier == KVT_TIER_SSD;
}

/* Wait until fewer than `below` blocks are in DRAM and none left it in the
 * last 20 ms. */
static void settle(struct kvt_store *store, uint64_t below)
{
	for (int tries = 0; tries < 500; tries++) {
		struct kvt_store_stats a = { .size = sizeof(a) }, b = { .size = sizeof(b) };

		assert_int_equal(kvt_store_stats(store, &a), 0);
		usleep(20000);
		assert_int_equal(kvt_store_stats(store, &b), 0);
		if (b.tier[KVT_TIER_DRAM].blocks < below &&
		    a.tier[KVT_TIER_DRAM].evictions == b.tier[KVT_TIER_DRAM].evictions)
			return;
	}
	fail_msg("the demoter did not settle");
}

/* A chain's blocks are written in one batch (its end first, each parent
 * counted gone once its child is picked); one pinned while that batch is
 * held in flight stays in DRAM, one removed stays removed, and their
 * parents count them right after: once unpinned, newer blocks push every
 * block of the chain down to SSD, none stuck in DRAM as a parent of a child
 * that is not there, and every block is counted once. */
static void chain_blocks_kept_or_removed_during_their_write(void **state)
{
	char *dir = ssd_test_dir("store_nowait_chain");
	char *buf = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_store *store;
	struct kvt_ns *ns;
	struct kvt_key k, pinned, removed;
	uint32_t n = 0;

	(void)state;
	/* 60 slots: past 30 the demoter writes the chain's end, 15 blocks */
	store = open_store(dir, 4 * DRAM_BYTES, &ns);
	batch_hold_arm_kind(KVT_SSD_IO_WRITE, 0);
	for (; n < 40 && !held(); n++) {
		struct kvt_key p = key_n(n - 1);

		k = key_n(n);
		kvt_test_fill(buf, BLOCK, seed + n);
		assert_int_equal(kvt_put(ns, &k, n ? &p : NULL, buf, BLOCK), 0);
		if (n >= 30)
			usleep(20000);
	}
	assert_non_null(batch_hold_wait());
	/* within the batch: it holds the chain's last 15 or so blocks */
	pinned = key_n(n - 6);
	removed = key_n(n - 9);
	assert_int_equal(kvt_pin(ns, &pinned, 1), 1);
	assert_int_equal(kvt_remove(ns, &removed), 0);
	batch_hold_release();
	kvt_ssd_io_set_test_hook(NULL, NULL);
	settle(store, 31); /* the batch ends */
	assert_true(kvt_lookup(ns, &pinned, 1, NULL) == 1);
	assert_int_equal(kvt_unpin(ns, &pinned, 1), 1);
	/* 120 newer roots through 60 slots: all of the chain goes first */
	for (uint32_t r = 1000; r < 1120; r++)
		put_block(ns, r, buf);
	settle(store, 31);
	for (uint32_t c = 0; c < n; c++) {
		k = key_n(c);
		if (c == n - 9) {
			assert_int_equal(kvt_lookup(ns, &k, 1, NULL), 0);
			continue;
		}
		if (!on_ssd(ns, c))
			fail_msg("chain block %u of %u stayed in DRAM under newer blocks", c, n);
		assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
		check_block(buf, c);
	}
	assert_int_equal(kvt_store_stats(store, &st), 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks + st.tier[KVT_TIER_SSD].blocks,
			 n - 1 + 120);
	assert_int_equal(st.tier[KVT_TIER_SSD].evictions, 0);
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

/* Let the held write batch go and check blocks [0, n): every byte right. */
static void release_and_check_all(struct kvt_ns *ns, uint32_t n, void *buf)
{
	struct kvt_key k;

	batch_hold_release();
	kvt_ssd_io_set_test_hook(NULL, NULL);
	for (uint32_t m = 0; m < n; m++) {
		k = key_n(m);
		assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
		check_block(buf, m);
	}
}

/* With DRAM full and the demoter's write batch held in flight, a put takes
 * the slot of the coldest block that has a clean copy on SSD (read back
 * earlier): it moves down to the copy, nothing is written. Before, the put
 * asked the demoter, which was waiting for its batch, and hung. */
static void allocation_takes_a_clean_slot_while_the_demoter_writes(void **state)
{
	char *dir = ssd_test_dir("store_nowait_clean");
	char *buf = malloc(BLOCK);
	struct kvt_store *store;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_ns *ns;
	struct kvt_key k;
	uint32_t n = 30, clean = 0;

	(void)state;
	store = open_store(dir, DRAM_BYTES, &ns);
	fill_and_settle(store, ns, 0, 30, buf);
	assert_true(on_ssd(ns, clean));

	/* above the high watermark the demoter's write batch parks, with a
	 * slot still free */
	hold_next_write(store, ns, &n, buf);
	if (dram_blocks(store) >= DRAM_SLOTS)
		fail_msg("DRAM full (%u slots) when the batch was held", (unsigned)DRAM_SLOTS);

	/* block 0 comes up into that slot with its SSD copy kept; the other
	 * blocks in DRAM (dirty, unless busy in the batch) are used after it,
	 * so it is the coldest one free */
	k = key_n(clean);
	assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
	check_block(buf, clean);
	for (uint32_t m = 0; m < n; m++) {
		k = key_n(m);
		if (m != clean)
			kvt_lookup(ns, &k, 1, NULL);
	}
	/* fill DRAM: the last puts need the clean block's slot (the
	 * watchdog fails a hang) */
	assert_int_equal(kvt_store_stats(store, &st), 0);
	for (uint64_t b = st.tier[KVT_TIER_DRAM].blocks; b < DRAM_SLOTS + 1; b++)
		put_block(ns, n++, buf);
	assert_true(on_ssd(ns, clean));

	release_and_check_all(ns, n, buf);
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

/* With DRAM full, the coldest blocks dirty and the demoter's write batch
 * held in flight, a read of a block on SSD takes the slot of a block read
 * back earlier and used since (not the coldest): it goes back to its SSD
 * copy, nothing is written. Before, the read waited for the held batch and
 * hung (the watchdog failed it). A put in its place would still wait: the
 * blocks read back stay in DRAM as the policy orders them unless readers
 * need their room. */
static void read_takes_the_slot_of_a_block_read_back_before(void **state)
{
	char *dir = ssd_test_dir("store_nowait_clean_hot");
	char *buf = malloc(BLOCK);
	struct kvt_store *store;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_ns *ns;
	struct kvt_key k;
	uint32_t n = 30, clean = 0, cold = 1;

	(void)state;
	store = open_store(dir, DRAM_BYTES, &ns);
	fill_and_settle(store, ns, 0, 30, buf);
	assert_true(on_ssd(ns, clean));
	assert_true(on_ssd(ns, cold));
	hold_next_write(store, ns, &n, buf);
	if (dram_blocks(store) >= DRAM_SLOTS)
		fail_msg("DRAM full (%u slots) when the batch was held", (unsigned)DRAM_SLOTS);

	/* block 0 comes up with its SSD copy kept, and is the hottest */
	k = key_n(clean);
	assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
	check_block(buf, clean);
	assert_int_equal(kvt_store_stats(store, &st), 0);
	for (uint64_t b = st.tier[KVT_TIER_DRAM].blocks; b < DRAM_SLOTS; b++)
		put_block(ns, n++, buf);

	/* DRAM is full: block 1 comes up into block 0's slot */
	k = key_n(cold);
	assert_int_equal(kvt_get(ns, &k, buf, BLOCK), 0);
	check_block(buf, cold);
	assert_true(on_ssd(ns, clean));

	release_and_check_all(ns, n, buf);
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

/* What an acquire's callback has seen. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int landed;
} seen = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void landed_cb(void *arg, size_t k, int res, size_t reading)
{
	(void)arg;
	(void)k;
	(void)reading;
	pthread_mutex_lock(&seen.mu);
	seen.landed += res == 0;
	pthread_cond_broadcast(&seen.cv);
	pthread_mutex_unlock(&seen.mu);
}

struct acquirer {
	pthread_t t;
	struct kvt_ns *ns;
	struct kvt_key keys[3];
	struct kvt_slot slots[3];
	int res[3];
	int rc;
};

static void *acquirer_main(void *arg)
{
	struct acquirer *a = arg;

	a->rc = kvt_acquire_many(a->ns, a->keys, 3, a->slots, a->res, landed_cb, NULL);
	return NULL;
}

/* An acquire of blocks on SSD with DRAM room for one of them, while the
 * demoter's write batch (which would make room for the others) is held:
 * the block that has room is read and handed over before the acquire waits
 * for the rest. Before, its read waited until every block had a slot. */
static void acquire_reads_what_has_room_while_it_waits(void **state)
{
	char *dir = ssd_test_dir("store_nowait_acquire");
	char *buf = malloc(BLOCK);
	struct kvt_store *store;
	struct acquirer a = { 0 };
	uint32_t n = 30, ids[3], found = 0;

	(void)state;
	store = open_store(dir, DRAM_BYTES, &a.ns);
	fill_and_settle(store, a.ns, 0, 30, buf);
	for (uint32_t m = 0; m < 30 && found < 3; m++)
		if (on_ssd(a.ns, m))
			ids[found++] = m;
	assert_int_equal(found, 3);

	/* the demoter's write batch parks; DRAM is then filled to all but
	 * one slot with dirty blocks (nothing frees a slot while the batch
	 * is held) */
	hold_next_write(store, a.ns, &n, buf);
	for (uint64_t b = dram_blocks(store); b < DRAM_SLOTS - 1; b++)
		put_block(a.ns, n++, buf);
	if (dram_blocks(store) != DRAM_SLOTS - 1)
		fail_msg("DRAM holds %llu blocks, not all but one of its %u slots",
			 (unsigned long long)dram_blocks(store), (unsigned)DRAM_SLOTS);

	/* the block that has a slot lands while the others wait for room
	 * (the watchdog fails a hang) */
	for (int k = 0; k < 3; k++)
		a.keys[k] = key_n(ids[k]);
	seen.landed = 0;
	assert_int_equal(pthread_create(&a.t, NULL, acquirer_main, &a), 0);
	pthread_mutex_lock(&seen.mu);
	while (!seen.landed)
		pthread_cond_wait(&seen.cv, &seen.mu);
	pthread_mutex_unlock(&seen.mu);

	batch_hold_release();
	pthread_join(a.t, NULL);
	kvt_ssd_io_set_test_hook(NULL, NULL);
	assert_int_equal(a.rc, 3);
	assert_int_equal(seen.landed, 3);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(a.res[k], 0);
		check_block(a.slots[k].data, ids[k]);
		kvt_release(a.ns, &a.slots[k]);
	}
	kvt_store_close(store);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(store_calls_do_not_wait_for_the_demoter),
		cmocka_unit_test(ssd_reads_do_not_wait_for_a_write_batch),
		cmocka_unit_test(removed_during_a_write_stays_removed),
		cmocka_unit_test(allocation_takes_a_clean_slot_while_the_demoter_writes),
		cmocka_unit_test(read_takes_the_slot_of_a_block_read_back_before),
		cmocka_unit_test(acquire_reads_what_has_room_while_it_waits),
		cmocka_unit_test(chain_blocks_kept_or_removed_during_their_write),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	if (!force_threads)
		kvt_test_need_io_uring();
	seed = kvt_test_seed();
	batch_hold_watchdog(90);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
