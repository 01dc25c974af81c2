/* SPDX-License-Identifier: Apache-2.0 */
/* LOADs from a real kvtierd's SSD tier while what they read overlaps: a LOAD
 * of many windows (the next window's reads in flight while this one's
 * blocks are copied) delivers every byte, and none past a miss; two LOADs
 * of the same keys at once both deliver them; a SAVE, a removal and a LOAD
 * of the same keys racing deliver only right bytes; and a daemon killed
 * with reads in flight comes back with every block. Blocks on SSD are read
 * straight into engine memory, and stay on SSD. The DRAM tier holds 64
 * blocks, fewer than the LOADs ask for at once, so windows also wait for
 * room and go on where they had none. A LOAD into pages the engine garbles
 * (one page named for every key, or written while the LOAD runs) drops no
 * block. No timing is asserted. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "stats_checked.h"

#define BLOCKS 256
#define BLOCK_TOKENS 16
/* a wait that does not end is a failure, not a slow machine */
#define WAIT_MS 120000

static uint64_t seed;
static const char *const extra[] = { "--dram", "8M", "--ssd", "256M", NULL };

/* Engine memory of 2 x BLOCKS pages (the saved blocks in [0, BLOCKS), loads
 * land in [BLOCKS, 2 BLOCKS)) and the keys of one chain of BLOCKS blocks. */
static void engine_open(struct kvtd_chain *e, const struct kvtd_proc *d)
{
	assert_int_equal(kvtd_chain_open(e, d, "test/ssd-load", 2 * BLOCKS, BLOCKS, seed), 0);
}

/* Save blocks [from, to) of the chain from pages of the same numbers. */
static void save_range(struct kvtd_chain *e, uint32_t from, uint32_t to)
{
	uint32_t pages[BLOCKS];
	uint64_t ticket;

	for (uint32_t i = from; i < to; i++) {
		pages[i - from] = i;
		engine_page_fill(&e->m, i, seed + i);
	}
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region,
					 from ? &e->keys[from - 1] : NULL, &e->keys[from], pages,
					 to - from, &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, WAIT_MS), (int)(to - from));
}

/* How many of the chain's blocks are on SSD. */
static int on_ssd(struct kvtd_chain *e)
{
	uint8_t tiers[BLOCKS];
	int n = 0;

	assert_int_equal(kvt_client_lookup(e->c, &e->ns, e->keys, BLOCKS, tiers), BLOCKS);
	for (int i = 0; i < BLOCKS; i++)
		n += tiers[i] == KVT_TIER_SSD;
	return n;
}

/* LOAD keys[0, n) into pages [BLOCKS, BLOCKS + n) (wiped first). Returns
 * the LOAD's result. */
static int load(struct kvtd_chain *e, const struct kvt_key *keys, uint32_t n)
{
	uint32_t pages[BLOCKS];
	uint64_t ticket;

	for (uint32_t j = 0; j < n; j++) {
		pages[j] = BLOCKS + j;
		engine_page_fill(&e->m, BLOCKS + j, 0);
	}
	assert_int_equal(kvt_client_load(e->c, &e->ns, (uint32_t)e->m.region, keys, pages, n,
					 &ticket), 0);
	return kvt_client_wait(e->c, ticket, WAIT_MS);
}

/* Load page BLOCKS + j holds chain block i. */
static bool loaded_right(struct kvtd_chain *e, uint32_t j, uint32_t i)
{
	return engine_page_check(&e->m, BLOCKS + j, seed + i) == 0;
}

static void start_with_chain(struct kvtd_proc *d, struct kvtd_chain *e)
{
	assert_int_equal(kvtd_start(d, NULL, extra), 0);
	engine_open(e, d);
	/* in requests of 64: the demoter writes the chain down as it goes */
	for (uint32_t i = 0; i < BLOCKS; i += 64)
		save_range(e, i, i + 64);
	assert_true(on_ssd(e) >= BLOCKS / 2);
}

/* One LOAD of the whole chain, 8 windows, most blocks from SSD: every
 * block lands in its page, byte for byte, and every layer is posted. A
 * LOAD with a key no one stored in its fourth window stops there: its
 * result is the prefix before it, and no page after it is written, though
 * the windows after it were being read. */
static void load_of_many_windows_delivers_every_byte_and_none_past_a_miss(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	struct kvt_key keys[BLOCKS];
	const uint32_t hole = 100;

	(void)state;
	start_with_chain(&d, &e);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(load(&e, e.keys, BLOCKS), BLOCKS);
		for (uint32_t i = 0; i < BLOCKS; i++)
			if (!loaded_right(&e, i, i))
				fail_msg("round %d: block %u loaded wrong bytes", round, i);
	}

	memcpy(keys, e.keys, sizeof(keys));
	memset(&keys[hole], 0x5a, sizeof(keys[hole]));
	assert_int_equal(load(&e, keys, BLOCKS), (int)hole);
	for (uint32_t i = 0; i < hole; i++)
		assert_true(loaded_right(&e, i, i));
	for (uint32_t j = hole; j < BLOCKS; j++)
		if (engine_page_check(&e.m, BLOCKS + j, 0))
			fail_msg("page %u past the miss at %u was written", BLOCKS + j, hole);

	/* every layer of a LOAD that spans windows is posted */
	{
		uint32_t pages[BLOCKS];
		uint64_t ticket;

		for (uint32_t j = 0; j < BLOCKS; j++)
			pages[j] = BLOCKS + j;
		assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, pages,
						 BLOCKS, &ticket), 0);
		for (uint32_t l = 0; l < e.m.layers; l++)
			assert_int_equal(kvt_client_wait_layer(e.c, ticket, l, WAIT_MS), 0);
		assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), BLOCKS);
	}
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* Blocks on SSD go straight into engine memory: a LOAD delivers them byte
 * for byte and leaves them on SSD, where a LOAD through DRAM slots brought
 * each up into DRAM. A block loaded again is reused: that LOAD brings it
 * up into DRAM. */
static void load_reads_ssd_blocks_straight_into_engine_memory(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	uint8_t before[BLOCKS], after[BLOCKS];

	(void)state;
	start_with_chain(&d, &e);
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, BLOCKS, before), BLOCKS);
	assert_int_equal(load(&e, e.keys, BLOCKS), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		if (!loaded_right(&e, i, i))
			fail_msg("block %u loaded wrong bytes", i);
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, BLOCKS, after), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		if (before[i] == KVT_TIER_SSD && after[i] != KVT_TIER_SSD)
			fail_msg("block %u was brought up from SSD (tier %u)", i, after[i]);

	/* the first 16 again: those on SSD come up into DRAM (16 fit in it) */
	assert_int_equal(load(&e, e.keys, 16), 16);
	for (uint32_t i = 0; i < 16; i++)
		if (!loaded_right(&e, i, i))
			fail_msg("block %u loaded wrong bytes the second time", i);
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, BLOCKS, after), BLOCKS);
	for (uint32_t i = 0; i < 16; i++)
		if (before[i] == KVT_TIER_SSD && after[i] != KVT_TIER_DRAM)
			fail_msg("block %u loaded twice stayed on tier %u", i, after[i]);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* Nothing was blamed on the SSD tier: no checksum failure, not degraded,
 * and every block of the chain loads byte for byte into pages of its own. */
static void every_block_still_loads(struct kvtd_chain *e, const char *after)
{
	json_t *st = kvtd_stats(e->c);
	int got;

	if (kvtd_stat(st, "store", NULL, "checksum_failures") ||
	    json_is_true(json_object_get(json_object_get(json_object_get(st, "tiers"), "ssd"),
					 "degraded")))
		fail_msg("after %s: %lld checksum failures, SSD tier degraded: %d", after,
			 kvtd_stat(st, "store", NULL, "checksum_failures"),
			 json_is_true(json_object_get(json_object_get(json_object_get(st, "tiers"),
								      "ssd"), "degraded")));
	json_decref(st);
	got = load(e, e->keys, BLOCKS);
	if (got != BLOCKS)
		fail_msg("after %s: %d of %d blocks load", after, got, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		if (!loaded_right(e, i, i))
			fail_msg("after %s: block %u loaded wrong bytes", after, i);
}

struct scribbler {
	struct engine_mem *m;
	int stop;               /* atomic */
};

/* The engine writing the pages a LOAD lands in, all the while. */
static void *scribble_main(void *arg)
{
	struct scribbler *s = arg;
	uint8_t v = 0;

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
		for (uint32_t j = 0; j < BLOCKS; j++)
			memset(engine_page(s->m, BLOCKS + j, 0, 0), ++v, 64);
	return NULL;
}

/* What the engine does to its own pages is not the SSD tier's fault. A
 * LOAD that names one page for every key (the reads straight into it
 * overwrite each other before each is checked), and a LOAD while an engine
 * thread writes the pages it lands in: each block whose bytes do not check
 * out in engine memory is read again through DRAM, where it does, and is
 * never dropped (before: 31 of 32 and 190 of 192 good records deleted as
 * checksum failures). */
static void a_load_into_pages_the_engine_garbles_drops_no_block(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	struct scribbler sc = { .m = &e.m };
	uint32_t pages[BLOCKS];
	uint64_t ticket;
	pthread_t th;

	(void)state;
	start_with_chain(&d, &e);
	for (uint32_t j = 0; j < BLOCKS; j++)
		pages[j] = BLOCKS;
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, pages, BLOCKS,
					 &ticket), 0);
	assert_true(kvt_client_wait(e.c, ticket, WAIT_MS) >= 0);
	every_block_still_loads(&e, "a LOAD into one page");

	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
	start_with_chain(&d, &e);
	for (uint32_t j = 0; j < BLOCKS; j++)
		pages[j] = BLOCKS + j;
	assert_int_equal(pthread_create(&th, NULL, scribble_main, &sc), 0);
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, pages, BLOCKS,
					 &ticket), 0);
	assert_true(kvt_client_wait(e.c, ticket, WAIT_MS) >= 0);
	__atomic_store_n(&sc.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	every_block_still_loads(&e, "a LOAD into pages being written");
	assert_true(kvtd_log_has(&d, "event=load.engine_memory"));
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* Engine memory in explicit huge pages: blocks on SSD go straight into it
 * (each one request to the device), byte for byte, and stay on SSD. */
static void load_into_engine_memory_in_huge_pages(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	struct engine_mem hm;
	struct kvt_ns_desc desc;
	uint8_t before[BLOCKS], after[BLOCKS];
	uint32_t pages[BLOCKS];
	uint64_t ticket;

	(void)state;
	start_with_chain(&d, &e);
	/* after the daemon started, so that its DRAM tier does not take them:
	 * BLOCKS pages of 4 layers' K and V of 16 KiB, 32 MiB */
	if (kvt_test_huge_reserve(16) < 0) {
		kvtd_chain_close(&e);
		kvtd_stop(&d, SIGTERM);
		kvtd_cleanup(&d);
		skip();
	}
	kvtd_test_desc_128k(&desc, "test/ssd-load");
	assert_int_equal(engine_mem_open_huge(&hm, e.c, &e.ns, &desc, BLOCKS), 0);
	assert_int_equal(hm.bytes % KVT_CLIENT_HUGE_PAGE_BYTES, 0);
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, BLOCKS, before), BLOCKS);
	for (uint32_t j = 0; j < BLOCKS; j++)
		pages[j] = j;
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)hm.region, e.keys, pages, BLOCKS,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), BLOCKS);
	for (uint32_t j = 0; j < BLOCKS; j++)
		if (engine_page_check(&hm, j, seed + j))
			fail_msg("block %u loaded wrong bytes into huge pages", j);
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, BLOCKS, after), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		if (before[i] == KVT_TIER_SSD && after[i] != KVT_TIER_SSD)
			fail_msg("block %u was not read straight into huge pages", i);
	engine_mem_close(&hm);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* Engine memory in huge pages with a hole punched in all of it, and no
 * huge page free: the reads straight into it fail (EFAULT), which is the
 * engine's memory, not the device. The LOAD fails; no record is dropped
 * and the tier is not degraded (before: 16 records deleted, the SSD tier
 * degraded), and every block loads into pages that work. */
static void a_load_into_unbacked_huge_pages_fails_and_drops_no_block(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	struct engine_mem hm;
	struct kvt_ns_desc desc;
	uint32_t pages[BLOCKS];
	uint64_t ticket;
	long left;
	void *hog_map = NULL;
	size_t hog_len = 0;
	int hog = -1;

	(void)state;
	start_with_chain(&d, &e);
	if (kvt_test_huge_reserve(16) < 0) {
		kvtd_chain_close(&e);
		kvtd_stop(&d, SIGTERM);
		kvtd_cleanup(&d);
		skip();
	}
	kvtd_test_desc_128k(&desc, "test/ssd-load");
	assert_int_equal(engine_mem_open_huge(&hm, e.c, &e.ns, &desc, BLOCKS), 0);
	/* the engine uses its pages, then punches them out: a hole in pages
	 * never touched would keep their reservation */
	memset(hm.map, 1, hm.bytes);
	assert_int_equal(fallocate(hm.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
				   (off_t)hm.bytes), 0);
	/* every huge page no one reserved, reserved here (a shared mapping
	 * reserves at mmap): none left for the hole */
	left = kvt_test_meminfo("HugePages_Free:") - kvt_test_meminfo("HugePages_Rsvd:");
	if (left > 0) {
		hog_len = (size_t)left * KVT_CLIENT_HUGE_PAGE_BYTES;
		hog = kvt_client_memfd_create_huge("test-hog", hog_len, &hog_map);
		assert_true(hog >= 0);
	}
	for (uint32_t j = 0; j < BLOCKS; j++)
		pages[j] = j;
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)hm.region, e.keys, pages, BLOCKS,
					 &ticket), 0);
	assert_true(kvt_client_wait(e.c, ticket, WAIT_MS) < BLOCKS);
	if (hog >= 0) {
		munmap(hog_map, hog_len);
		close(hog);
	}
	engine_mem_close(&hm);
	every_block_still_loads(&e, "a LOAD into unbacked huge pages");
	assert_true(kvtd_log_has(&d, "event=load.engine_memory"));
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* A loader: its own connection, loading the chain again and again; a LOAD
 * may come back short (the DRAM tier had no room for it), and then goes on
 * from there, but what it reports loaded is right. */
struct loader {
	const struct kvtd_proc *d;
	int rounds;
	int wrong, stuck;
};

static void *loader_main(void *arg)
{
	struct loader *l = arg;
	struct kvtd_chain e;

	engine_open(&e, l->d);
	for (int round = 0; round < l->rounds; round++) {
		uint32_t done = 0;
		int idle = 0;

		while (done < BLOCKS && idle < 1000) {
			int r = load(&e, e.keys + done, BLOCKS - done);

			if (r <= 0) {
				/* -ENOSPC: the other LOAD held the room */
				if (r != -ENOSPC)
					l->stuck++;
				idle++;
				continue;
			}
			for (uint32_t j = 0; j < (uint32_t)r; j++)
				l->wrong += !loaded_right(&e, j, done + j);
			done += (uint32_t)r;
			idle = 0;
		}
		l->stuck += done < BLOCKS;
	}
	kvtd_chain_close(&e);
	return NULL;
}

/* Two LOADs of the same keys at once, over and over: the same blocks are
 * read up for one while the other waits for them or takes them from DRAM;
 * neither hangs, both get every block, byte for byte. */
static void two_loads_of_the_same_keys_both_deliver(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	struct loader l[2] = { { .d = &d, .rounds = 4 }, { .d = &d, .rounds = 4 } };
	pthread_t th[2];

	(void)state;
	start_with_chain(&d, &e);
	for (int k = 0; k < 2; k++)
		assert_int_equal(pthread_create(&th[k], NULL, loader_main, &l[k]), 0);
	for (int k = 0; k < 2; k++)
		pthread_join(th[k], NULL);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(l[k].wrong, 0);
		assert_int_equal(l[k].stuck, 0);
	}
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* A saver: removes blocks of the chain's second half and saves them again
 * (the same bytes), over and over; a SAVE may store fewer (a block removed
 * while a LOAD held it is not stored again until the LOAD lets it go, and
 * a LOAD may hold every slot of the DRAM tier for a while). */
struct saver {
	const struct kvtd_proc *d;
	bool stop;                /* atomic */
	int rounds;
	int failed;               /* a remove or save that did not take */
};

static void *saver_main(void *arg)
{
	struct saver *s = arg;
	struct kvtd_chain e;

	engine_open(&e, s->d);
	for (uint32_t i = 0; i < BLOCKS; i++)
		engine_page_fill(&e.m, i, seed + i);
	/* 40 rounds write 80 MiB: the SSD tier (256 MiB) never needs to let
	 * a live block go for room */
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE) && s->rounds < 40) {
		uint32_t from = BLOCKS / 2 + (uint32_t)(s->rounds * 8) % (BLOCKS / 2 - 16);
		uint32_t pages[16];
		uint64_t ticket;

		int r = kvt_client_remove(e.c, &e.ns, &e.keys[from], 16);

		for (uint32_t j = 0; j < 16; j++)
			pages[j] = from + j;
		if (r >= 0 && kvt_client_save(e.c, &e.ns, (uint32_t)e.m.region, &e.keys[from - 1],
					       &e.keys[from], pages, 16, &ticket) == 0)
			r = kvt_client_wait(e.c, ticket, WAIT_MS);
		/* -EBUSY: a key removed while a LOAD still held it is not
		 * stored again until that LOAD lets it go; -ENOSPC: the LOAD
		 * held every DRAM slot */
		if (r < 0 && r != -EBUSY && r != -ENOSPC) {
			fprintf(stderr, "saver: round %d: %d\n", s->rounds, r);
			s->failed++;
			break;
		}
		s->rounds++;
	}
	kvtd_chain_close(&e);
	return NULL;
}

/* LOADs of the chain while another connection removes and saves again
 * blocks of its second half: a LOAD stops at a block removed at that
 * moment (its result is the prefix before it) or delivers it; whatever it
 * reports loaded is right, and the first half always comes. */
static void save_and_remove_racing_a_load_of_the_same_keys(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	struct saver s = { .d = &d };
	pthread_t th;

	(void)state;
	start_with_chain(&d, &e);
	assert_int_equal(pthread_create(&th, NULL, saver_main, &s), 0);
	for (int round = 0; round < 12; round++) {
		int r = load(&e, e.keys, BLOCKS);

		if (r < BLOCKS / 2)
			fail_msg("round %d: %d blocks loaded, the first half is never touched", round, r);
		for (uint32_t i = 0; i < (uint32_t)r; i++)
			if (!loaded_right(&e, i, i))
				fail_msg("round %d: block %u loaded wrong bytes", round, i);
	}
	__atomic_store_n(&s.stop, true, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	assert_int_equal(s.failed, 0);
	assert_true(s.rounds > 0);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* The daemon killed (SIGKILL) while a LOAD of the whole chain has its reads
 * in flight: restarted over the same directory, every block that was on
 * SSD is there and loads right. */
static void daemon_killed_with_reads_in_flight_keeps_every_block(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	uint8_t tiers[BLOCKS];
	uint32_t pages[BLOCKS];
	uint64_t ticket;

	(void)state;
	start_with_chain(&d, &e);
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, BLOCKS, tiers), BLOCKS);
	for (uint32_t j = 0; j < BLOCKS; j++)
		pages[j] = BLOCKS + j;
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, pages, BLOCKS,
					 &ticket), 0);
	/* its first block comes in: the LOAD is under way */
	for (int k = 0; engine_page_check(&e.m, BLOCKS, seed) != 0; k++) {
		if (k == WAIT_MS * 10)
			fail_msg("the LOAD delivered nothing");
		usleep(100);
	}
	assert_int_equal(kvtd_stop(&d, SIGKILL), 128 + SIGKILL);
	kvtd_chain_close(&e);

	assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
	engine_open(&e, &d);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		uint8_t t = 0;

		if (tiers[i] != KVT_TIER_SSD)
			continue;
		assert_int_equal(kvt_client_lookup(e.c, &e.ns, &e.keys[i], 1, &t), 1);
		assert_int_equal(load(&e, &e.keys[i], 1), 1);
		if (!loaded_right(&e, 0, i))
			fail_msg("block %u loaded wrong bytes after the restart", i);
	}
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(load_of_many_windows_delivers_every_byte_and_none_past_a_miss),
		cmocka_unit_test(load_reads_ssd_blocks_straight_into_engine_memory),
		cmocka_unit_test_teardown(load_into_engine_memory_in_huge_pages,
					  kvt_test_huge_give_back),
		cmocka_unit_test(two_loads_of_the_same_keys_both_deliver),
		cmocka_unit_test(save_and_remove_racing_a_load_of_the_same_keys),
		cmocka_unit_test(daemon_killed_with_reads_in_flight_keeps_every_block),
		cmocka_unit_test(a_load_into_pages_the_engine_garbles_drops_no_block),
		cmocka_unit_test_teardown(a_load_into_unbacked_huge_pages_fails_and_drops_no_block,
					  kvt_test_huge_give_back),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
