/* SPDX-License-Identifier: Apache-2.0 */
/* SSD admission in the store, with a real SSD tier: under "reused", a block
 * put once and never read again leaves DRAM without an SSD write (dropped,
 * counted as refused, with its bytes), a block read after its put is
 * written and survives a reopen, and a refused block saved again is written
 * the next time; every put succeeds however many demotions are refused,
 * from one thread or four, and the counters add up at every moment. "always" writes every block,
 * and an unknown rule is refused at open. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier/store.h"
#include "ssd_test.h"

/* 4 layers x 2 kv heads x 128 dims x bf16 x 16 tokens x K,V = 64 KiB */
#define BLOCK (64u << 10)
#define DRAM_BYTES (1u << 20) /* 16 slots */
#define DRAM_SLOTS (DRAM_BYTES / BLOCK)

static uint64_t seed;

struct fixture {
	char *dir;
	struct kvt_store *store;
	struct kvt_ns *ns;
	char *buf, *want;
};

static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	k.bytes[8] = 0xad;
	return k;
}

/* Open the store with admission rule `rule` (NULL: the default). */
static int open_store(struct fixture *f, const char *rule)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	int err;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = DRAM_BYTES;
	o.dram_huge_pages = false;
	o.ssd_dir = f->dir;
	o.ssd_bytes = 64 << 20; /* never full here: every block written stays */
	o.ssd_segment_bytes = 1 << 20;
	o.ssd_queue_depth = 8;
	o.ssd_admission = rule;
	err = kvt_store_open(&o, &f->store);
	if (err)
		return err;
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "test/admission");
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 128;
	d.block_tokens = 16;
	assert_int_equal(kvt_ns_attach(f->store, &d, &f->ns), 0);
	assert_int_equal(kvt_ns_block_bytes(f->ns), BLOCK);
	return 0;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dir = ssd_test_dir("store_admission");
	f->buf = malloc(BLOCK);
	f->want = malloc(BLOCK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_store_close(f->store);
	kvt_test_rmdir(f->dir);
	free(f->dir);
	free(f->buf);
	free(f->want);
	free(f);
	return 0;
}

/* Put block n with no parent: under tail-lru every block is a chain's
 * tail, so blocks leave DRAM oldest first. */
static void put_n(struct fixture *f, uint32_t n)
{
	struct kvt_key k = key_n(n);

	kvt_test_fill(f->buf, BLOCK, seed + n);
	assert_int_equal(kvt_put(f->ns, &k, NULL, f->buf, BLOCK), 0);
}

static void get_n(struct fixture *f, uint32_t n)
{
	struct kvt_key k = key_n(n);

	assert_int_equal(kvt_get(f->ns, &k, f->buf, BLOCK), 0);
	kvt_test_fill(f->want, BLOCK, seed + n);
	assert_memory_equal(f->buf, f->want, BLOCK);
}

/* The tier of block n, KVT_TIER_NONE when absent (a lookup: a use). */
static uint8_t tier_of(struct fixture *f, uint32_t n)
{
	struct kvt_key k = key_n(n);
	uint8_t t = KVT_TIER_NONE;

	return kvt_lookup(f->ns, &k, 1, &t) == 1 ? t : KVT_TIER_NONE;
}

/* What holds at every moment, the demoter running or not: each block put
 * is in DRAM, on SSD, or was refused (the SSD tier evicts nothing here),
 * every block that left DRAM was written or refused, and SSD holds what
 * was written. */
static void assert_adds_up(const struct kvt_store_stats *st, uint64_t puts)
{
	const struct kvt_tier_stats *dram = &st->tier[KVT_TIER_DRAM], *ssd = &st->tier[KVT_TIER_SSD];

	assert_int_equal(st->puts, puts);
	assert_int_equal(dram->blocks + ssd->blocks + st->ssd_admission_refused, puts);
	assert_int_equal(dram->evictions, ssd->blocks + st->ssd_admission_refused);
	assert_int_equal(st->ssd_admission_refused_bytes, st->ssd_admission_refused * BLOCK);
	assert_int_equal(ssd->bytes_in, ssd->blocks * BLOCK);
	assert_int_equal(ssd->evictions, 0);
	assert_int_equal(st->dram_dropped, 0);
}

/* Stats once the demoter is still: the same figures twice, 50 ms apart,
 * with DRAM below the high watermark (no pass due). */
static void settled(struct fixture *f, struct kvt_store_stats *st)
{
	struct kvt_store_stats a = { .size = sizeof(a) };

	for (int i = 0; i < 400; i++) {
		assert_int_equal(kvt_store_stats(f->store, &a), 0);
		kvt_test_sleep_ms(50);
		assert_int_equal(kvt_store_stats(f->store, st), 0);
		if (a.tier[KVT_TIER_DRAM].evictions == st->tier[KVT_TIER_DRAM].evictions &&
		    a.tier[KVT_TIER_SSD].blocks == st->tier[KVT_TIER_SSD].blocks &&
		    st->tier[KVT_TIER_DRAM].used_bytes <= DRAM_BYTES * 9 / 10)
			return;
	}
	fail_msg("the demoter did not settle in 20 s");
}

/* Even blocks are read once after their put (used twice), odd ones never. */
static void reused_writes_only_blocks_used_twice(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	const uint32_t blocks = 200;
	uint64_t on_ssd;
	uint32_t hot_found = 0;

	assert_int_equal(open_store(f, "reused"), 0);
	for (uint32_t n = 0; n < blocks; n++) {
		put_n(f, n);
		if (n % 2 == 0)
			get_n(f, n);
		if (n % 16 == 0) {
			assert_int_equal(kvt_store_stats(f->store, &st), 0);
			assert_adds_up(&st, n + 1);
		}
	}
	settled(f, &st);
	assert_adds_up(&st, blocks);
	on_ssd = st.tier[KVT_TIER_SSD].blocks;
	/* what left DRAM: the hot ones written, the cold ones refused */
	assert_true(on_ssd >= blocks / 2 - DRAM_SLOTS && on_ssd <= blocks / 2);
	assert_true(st.ssd_admission_refused >= blocks / 2 - DRAM_SLOTS &&
		    st.ssd_admission_refused <= blocks / 2);

	/* block by block: no cold one on SSD, no hot one lost */
	for (uint32_t n = 1; n < blocks; n += 2) {
		uint8_t t = tier_of(f, n);

		if (t != KVT_TIER_DRAM && t != KVT_TIER_NONE)
			fail_msg("block %u, put once, is in tier %u", n, t);
	}
	for (uint32_t n = 0; n < blocks; n += 2) {
		uint8_t t = tier_of(f, n);

		if (t == KVT_TIER_NONE)
			fail_msg("block %u, read after its put, is gone", n);
		hot_found += t == KVT_TIER_SSD;
	}
	assert_int_equal(hot_found, on_ssd);

	/* what was written is durable; nothing refused comes back */
	kvt_store_close(f->store);
	f->store = NULL;
	assert_int_equal(open_store(f, "reused"), 0);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.ssd.recovered >= on_ssd);
	for (uint32_t n = 1; n < blocks; n += 2)
		assert_int_equal(tier_of(f, n), KVT_TIER_NONE);
	for (uint32_t n = 0; n < blocks; n += 2)
		if (tier_of(f, n) == KVT_TIER_SSD)
			get_n(f, n);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.checksum_failures, 0);
	assert_int_equal(st.get_misses, 0);
}

/* Every demotion refused: puts never fail nor wait for ever, DRAM keeps the
 * newest blocks, SSD gets no byte. */
static void refusing_every_demotion_keeps_puts_going(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	const uint32_t blocks = 400;

	assert_int_equal(open_store(f, "reused"), 0);
	for (uint32_t n = 0; n < blocks; n++)
		put_n(f, n);
	settled(f, &st);
	assert_adds_up(&st, blocks);
	assert_int_equal(st.tier[KVT_TIER_SSD].blocks, 0);
	assert_int_equal(st.tier[KVT_TIER_SSD].bytes_in, 0);
	assert_true(st.ssd_admission_refused >= blocks - DRAM_SLOTS);
	get_n(f, blocks - 1);
	assert_int_equal(tier_of(f, 0), KVT_TIER_NONE);
}

struct putter {
	struct fixture *f;
	uint32_t base, n;
	uint64_t stored; /* puts that stored a block */
	int failed;      /* the first error, 0 if none */
};

/* Put n blocks from base, every third twice, the others once. The second
 * put of a block is a use whether it finds the block (-EEXIST) or stores
 * it again, refused meanwhile by other threads' pressure (the rule then
 * remembers the refusal): either way the block is written when it leaves
 * DRAM next. */
static void *putter_main(void *arg)
{
	struct putter *p = arg;
	char *buf = malloc(BLOCK);

	for (uint32_t k = 0; k < p->n && !p->failed; k++) {
		struct kvt_key key = key_n(p->base + k);

		kvt_test_fill(buf, BLOCK, seed + p->base + k);
		for (int again = 0; again <= (k % 3 == 0) && !p->failed; again++) {
			int rc = kvt_put(p->f->ns, &key, NULL, buf, BLOCK);

			if (rc == 0)
				p->stored++;
			else if (!again || rc != -EEXIST)
				p->failed = rc;
		}
	}
	free(buf);
	return NULL;
}

/* Four threads saving into a full DRAM tier while most demotions are
 * refused: no put fails and none waits for ever, and the counters add up. */
static void concurrent_puts_with_refusals(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct putter p[4];
	pthread_t t[4];
	uint64_t stored = 0;

	assert_int_equal(open_store(f, "reused"), 0);
	for (int i = 0; i < 4; i++) {
		p[i] = (struct putter){ .f = f, .base = 100000 * (uint32_t)(i + 1), .n = 150 };
		assert_int_equal(pthread_create(&t[i], NULL, putter_main, &p[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	for (int i = 0; i < 4; i++) {
		if (p[i].failed)
			fail_msg("thread %d: %s", i, kvt_strerror(p[i].failed));
		stored += p[i].stored;
	}
	settled(f, &st);
	assert_adds_up(&st, stored);
	assert_true(st.ssd_admission_refused >= 400 - DRAM_SLOTS);
	assert_true(st.tier[KVT_TIER_SSD].blocks >= 200 - DRAM_SLOTS);
}

/* A refused block saved again while the rule remembers refusing it has
 * been used twice: the next time it leaves DRAM it is written. */
static void refused_block_saved_again_is_written(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	const uint32_t x = 7;

	assert_int_equal(open_store(f, "reused"), 0);
	put_n(f, x);
	for (uint32_t n = 1000; n < 1000 + 3 * DRAM_SLOTS; n++)
		put_n(f, n);
	settled(f, &st);
	assert_int_equal(tier_of(f, x), KVT_TIER_NONE);
	assert_int_equal(st.tier[KVT_TIER_SSD].blocks, 0);

	put_n(f, x);
	for (uint32_t n = 2000; n < 2000 + 3 * DRAM_SLOTS; n++)
		put_n(f, n);
	settled(f, &st);
	assert_adds_up(&st, 2 + 6 * DRAM_SLOTS);
	assert_int_equal(st.tier[KVT_TIER_SSD].blocks, 1);
	assert_int_equal(tier_of(f, x), KVT_TIER_SSD);
	get_n(f, x);
}

/* "always" (and no rule given) writes every block; an unknown rule is not
 * a store. */
static void always_writes_every_block(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	const uint32_t blocks = 60;
	const char *rules[] = { "always", NULL };

	assert_int_equal(open_store(f, "no-such-rule"), -EINVAL);
	assert_int_equal(open_store(f, ""), -EINVAL);
	for (size_t r = 0; r < 2; r++) {
		if (r) { /* a fresh tier: nothing recovered */
			kvt_test_rmdir(f->dir);
			free(f->dir);
			f->dir = ssd_test_dir("store_admission");
		}
		assert_int_equal(open_store(f, rules[r]), 0);
		for (uint32_t n = 0; n < blocks; n++)
			put_n(f, n);
		settled(f, &st);
		assert_adds_up(&st, blocks);
		assert_int_equal(st.ssd_admission_refused, 0);
		assert_true(st.tier[KVT_TIER_SSD].blocks >= blocks - DRAM_SLOTS);
		kvt_store_close(f->store);
		f->store = NULL;
	}
}

/* "useful" before it has measured anything (no sampled block has left SSD
 * yet) writes the blocks another block was saved under, and refuses the
 * ends (but for its samples): pairs of a block and one under it. */
static void useful_writes_parents_and_refuses_ends_until_measured(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	const uint32_t pairs = 30;
	uint32_t parents_out = 0;

	assert_int_equal(open_store(f, "useful"), 0);
	for (uint32_t n = 0; n < 2 * pairs; n += 2) {
		struct kvt_key p = key_n(n), k = key_n(n + 1);

		put_n(f, n);
		kvt_test_fill(f->buf, BLOCK, seed + n + 1);
		assert_int_equal(kvt_put(f->ns, &k, &p, f->buf, BLOCK), 0);
	}
	settled(f, &st);
	assert_adds_up(&st, 2 * pairs);
	assert_true(st.ssd_admission_refused > 0);
	for (uint32_t n = 0; n < 2 * pairs; n += 2) {
		uint8_t t = tier_of(f, n);

		if (t != KVT_TIER_DRAM) {
			assert_int_equal(t, KVT_TIER_SSD);
			parents_out++;
		}
	}
	assert_true(parents_out > 0);
	assert_true(st.tier[KVT_TIER_SSD].blocks >= parents_out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(reused_writes_only_blocks_used_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(refusing_every_demotion_keeps_puts_going, setup,
						teardown),
		cmocka_unit_test_setup_teardown(concurrent_puts_with_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(refused_block_saved_again_is_written, setup, teardown),
		cmocka_unit_test_setup_teardown(always_writes_every_block, setup, teardown),
		cmocka_unit_test_setup_teardown(useful_writes_parents_and_refuses_ends_until_measured,
						setup, teardown),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests_name("store_ssd_admission", tests, NULL, NULL);
}
