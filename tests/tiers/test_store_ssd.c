/* SPDX-License-Identifier: Apache-2.0 */
/* The store with an SSD tier, through the public API: DRAM overflow demotes
 * (write-back by the demoter) and gets promote, bytes intact; the index is
 * rebuilt from the segment log on reopen; a full SSD tier evicts, every
 * block counted; graceful restarts lose nothing; removals stay removed; a
 * block read back keeps its SSD copy; a failing SSD (a full ext4 loop
 * device) degrades the tier while the store keeps serving DRAM, and comes
 * back when there is room again; records of a namespace not attached yet and
 * pinned blocks come through segment release. Run with the argument
 * "threads" for the I/O fallback. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtier/store.h"
#include "loopfs.h"
#include "ssd_test.h"

/* 4 layers x 2 kv heads x 128 dims x bf16 x 16 tokens x K,V = 64 KiB */
#define BLOCK (64u << 10)
#define DRAM_BYTES (1u << 20) /* 16 slots */

static bool force_threads;
static uint64_t seed;

struct fixture {
	char *dir;
	struct kvt_store *store;
	struct kvt_ns *ns;
	uint64_t ssd_bytes;
	uint64_t segment_bytes;      /* 0: 1 MiB */
	uint64_t dram_bytes;         /* 0: DRAM_BYTES */
	double high, low;            /* DRAM watermarks; 0: the defaults */
	const char *codec;           /* the store's SSD codec; NULL: raw */
	struct loopfs *loop; /* torn down after the store, even on failure */
};

static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	k.bytes[8] = 0x5d;
	return k;
}

static struct kvt_ns *attach_dtype(struct fixture *f, const char *model, enum kvt_dtype dtype)
{
	struct kvt_ns_desc d;
	struct kvt_ns *ns;

	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "%s", model);
	d.dtype = dtype;
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 128;
	d.block_tokens = 16;
	assert_int_equal(kvt_ns_attach(f->store, &d, &ns), 0);
	assert_int_equal(kvt_ns_block_bytes(ns), BLOCK);
	return ns;
}

static struct kvt_ns *attach(struct fixture *f, const char *model)
{
	return attach_dtype(f, model, KVT_DTYPE_BF16);
}

/* Open the store, namespace "test/ssd-model" attached as f->ns unless
 * with_ns is false. */
static void open_store_ns(struct fixture *f, bool with_ns)
{
	struct kvt_store_opts o;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = f->dram_bytes ? f->dram_bytes : DRAM_BYTES;
	o.dram_huge_pages = false;
	o.ssd_dir = f->dir;
	o.ssd_bytes = f->ssd_bytes;
	o.ssd_segment_bytes = f->segment_bytes ? f->segment_bytes : 1 << 20;
	o.ssd_queue_depth = 8;
	if (f->high)
		o.dram_high_watermark = f->high;
	if (f->low)
		o.dram_low_watermark = f->low;
	o.ssd_force_threads = force_threads;
	o.ssd_codec = f->codec;
	assert_int_equal(kvt_store_open(&o, &f->store), 0);
	f->ns = with_ns ? attach(f, "test/ssd-model") : NULL;
}

static void open_store(struct fixture *f)
{
	open_store_ns(f, true);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dir = ssd_test_dir("store_ssd");
	f->ssd_bytes = 16 << 20;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_store_close(f->store);
	if (f->loop) {
		loopfs_teardown(f->loop);
		free(f->loop);
	}
	kvt_test_rmdir(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

/* Put blocks [from, to) as one prefix chain. */
static void put_chain(struct fixture *f, uint32_t from, uint32_t to, char *buf)
{
	for (uint32_t n = from; n < to; n++) {
		struct kvt_key k = key_n(n), p = key_n(n - 1);
		kvt_test_fill(buf, BLOCK, seed + n);
		assert_int_equal(kvt_put(f->ns, &k, n ? &p : NULL, buf, BLOCK), 0);
	}
}

static void assert_block(struct fixture *f, uint32_t n, char *buf, char *want)
{
	struct kvt_key k = key_n(n);

	assert_int_equal(kvt_get(f->ns, &k, buf, BLOCK), 0);
	kvt_test_fill(want, BLOCK, seed + n);
	assert_memory_equal(buf, want, BLOCK);
}

static void settle(struct fixture *f, uint32_t below);

static void dram_overflow_demotes_and_get_promotes(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_key keys[100];
	uint8_t tiers[100];
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_slot slot;
	int on_ssd = 0;

	open_store(f);
	put_chain(f, 0, 100, buf);
	/* the demoter may still be writing the chain's last batch: the tiers
	 * the lookup sees and the stats below must be of the same moment */
	settle(f, 16);
	for (uint32_t n = 0; n < 100; n++)
		keys[n] = key_n(n);
	/* nothing was dropped: the whole prefix is still there, mostly on SSD
	 * (looked at again while a write the settling missed lands) */
	for (int tries = 0; tries < 100; tries++) {
		assert_int_equal(kvt_lookup(f->ns, keys, 100, tiers), 100);
		on_ssd = 0;
		for (int n = 0; n < 100; n++)
			on_ssd += tiers[n] == KVT_TIER_SSD;
		assert_int_equal(kvt_store_stats(f->store, &st), 0);
		if (st.tier[KVT_TIER_SSD].blocks == (uint64_t)on_ssd)
			break;
		usleep(20000);
	}
	assert_true(on_ssd >= 100 - (int)(DRAM_BYTES / BLOCK));
	assert_int_equal(tiers[0], KVT_TIER_SSD); /* the oldest went first */

	assert_true(st.tier[KVT_TIER_SSD].present);
	assert_false(st.tier[KVT_TIER_SSD].degraded);
	if (force_threads)
		assert_true(st.tier[KVT_TIER_SSD].io_fallback);
	assert_int_equal(st.tier[KVT_TIER_SSD].blocks, (uint64_t)on_ssd);
	assert_true(st.tier[KVT_TIER_SSD].bytes_in >= (uint64_t)on_ssd * BLOCK);
	assert_int_equal(st.blocks, 100);

	/* every block reads back intact; those on SSD come back into DRAM */
	for (uint32_t n = 0; n < 100; n++)
		assert_block(f, n, buf, want);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].bytes_out >= (uint64_t)on_ssd * BLOCK);
	assert_int_equal(st.get_misses, 0);
	assert_int_equal(st.checksum_failures, 0);
	assert_int_equal(st.blocks, 100);

	/* acquire promotes too: the slot is the block, in place */
	assert_int_equal(kvt_lookup(f->ns, keys, 1, tiers), 1);
	if (tiers[0] != KVT_TIER_SSD) /* make sure block 0 is on SSD again */
		put_chain(f, 100, 140, buf);
	assert_int_equal(kvt_acquire(f->ns, &keys[0], &slot), 0);
	kvt_test_fill(want, BLOCK, seed);
	assert_memory_equal(slot.data, want, BLOCK);
	kvt_release(f->ns, &slot);
	free(want);
	free(buf);
}

/* The SSD tier's used_bytes is what its disk holds for its blocks: each raw
 * 64 KiB block is a record of a 4 KiB header page and 16 pages of payload,
 * so small blocks fill the tier well before their bytes alone would. Old
 * code counted the blocks' bytes only (4 KiB blocks: half the disk). */
static void ssd_used_bytes_count_the_record_headers(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint64_t want = 0;

	open_store(f);
	put_chain(f, 0, 60, buf);
	settle(f, 16);
	for (int tries = 0; tries < 100; tries++) {
		assert_int_equal(kvt_store_stats(f->store, &st), 0);
		want = st.tier[KVT_TIER_SSD].blocks * (BLOCK + 4096);
		if (st.tier[KVT_TIER_SSD].used_bytes == want)
			break;
		usleep(20000);
	}
	assert_true(st.tier[KVT_TIER_SSD].blocks >= 60 - DRAM_BYTES / BLOCK);
	assert_int_equal(st.tier[KVT_TIER_SSD].used_bytes, want);
	assert_true(st.tier[KVT_TIER_SSD].used_bytes <= st.tier[KVT_TIER_SSD].capacity_bytes);
	free(buf);
}

static void compressed_namespace_round_trips(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_key keys[60];
	uint8_t tiers[60];
	int on_ssd = 0;

	open_store(f);
	assert_int_equal(kvt_ns_set_ssd_codec(f->ns, "zstd", 0), -EINVAL);
	assert_int_equal(kvt_ns_set_ssd_codec(f->ns, "shuf16-lz4", 1.2), 0);
	for (uint32_t n = 0; n < 60; n++) {
		struct kvt_key p = key_n(n - 1);
		keys[n] = key_n(n);
		/* records of three shuffled codecs side by side in the tier */
		if (n == 30)
			assert_int_equal(kvt_ns_set_ssd_codec(f->ns, "blosc-bitshuf16-lz4", 1.2), 0);
		if (n == 45)
			assert_int_equal(kvt_ns_set_ssd_codec(f->ns, "shuf16-zstd", 1.2), 0);
		/* bf16-like: high bytes repeat, low bytes vary; some blocks noise */
		kvt_test_fill(buf, BLOCK, seed + n);
		if (n % 3)
			for (size_t j = 1; j < BLOCK; j += 2)
				buf[j] = (char)(0x3f + (j / 2) % 3);
		assert_int_equal(kvt_put(f->ns, &keys[n], n ? &p : NULL, buf, BLOCK), 0);
	}
	for (uint32_t n = 0; n < 60; n++) {
		kvt_lookup(f->ns, &keys[n], 1, &tiers[n]);
		on_ssd += tiers[n] == KVT_TIER_SSD;
	}
	assert_true(on_ssd >= 60 - (int)(DRAM_BYTES / BLOCK));
	for (uint32_t n = 0; n < 60; n++) {
		assert_int_equal(kvt_get(f->ns, &keys[n], buf, BLOCK), 0);
		kvt_test_fill(want, BLOCK, seed + n);
		if (n % 3)
			for (size_t j = 1; j < BLOCK; j += 2)
				want[j] = (char)(0x3f + (j / 2) % 3);
		assert_memory_equal(buf, want, BLOCK);
	}
	free(want);
	free(buf);
}

/* Blocks 0..n-1 put alternately into ns[0] and ns[1], bf16-like (their
 * high bytes take three values: every codec for bf16 shrinks them), and the
 * demoter let settle. */
static void put_bf16_like_and_settle(struct fixture *f, struct kvt_ns *ns[2], uint32_t n)
{
	char *buf = malloc(BLOCK);

	for (uint32_t i = 0; i < n; i++) {
		struct kvt_key k = key_n(i);

		kvt_test_fill(buf, BLOCK, seed + i);
		for (size_t j = 1; j < BLOCK; j += 2)
			buf[j] = (char)(0x3f + (j / 2) % 3);
		assert_int_equal(kvt_put(ns[i % 2], &k, NULL, buf, BLOCK), 0);
	}
	settle(f, n);
	free(buf);
}

/* How many of blocks 0..n-1 (alternately in ns[0] and ns[1]) each
 * namespace has on SSD. */
static void count_on_ssd(struct kvt_ns *ns[2], uint32_t n, uint64_t on_ssd[2])
{
	on_ssd[0] = on_ssd[1] = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct kvt_key k = key_n(i);
		uint8_t tier = KVT_TIER_NONE;

		assert_int_equal(kvt_lookup(ns[i % 2], &k, 1, &tier), 1);
		on_ssd[i % 2] += tier == KVT_TIER_SSD;
	}
}

/* The store's codec (kvt_store_opts.ssd_codec, what kvtierd --ssd-codec
 * sets) encodes the SSD records of every namespace attached, and the stats
 * count them; an unknown one is refused at open. */
static void store_codec_encodes_every_namespace(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_opts o;
	struct kvt_store *bad = NULL;
	struct kvt_store_stats st = { .size = sizeof(st) };
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_ns *ns[2];
	uint64_t on_ssd, per_ns[2];

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = DRAM_BYTES;
	o.ssd_codec = "zstd";
	assert_int_equal(kvt_store_open(&o, &bad), -EINVAL);
	f->codec = "shuf16-zstd";
	open_store(f);
	ns[0] = f->ns;
	ns[1] = attach(f, "test/ssd-model-2");
	put_bf16_like_and_settle(f, ns, 60);
	count_on_ssd(ns, 60, per_ns);
	on_ssd = per_ns[0] + per_ns[1];
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(on_ssd >= 60 - DRAM_BYTES / BLOCK);
	assert_true(st.ssd_compressed_writes >= on_ssd);
	assert_int_equal(st.ssd_write_raw_bytes, st.ssd_compressed_writes * BLOCK);
	if (st.ssd_write_stored_bytes * 5 > st.ssd_write_raw_bytes * 4)
		fail_msg("%llu bytes stored as %llu: not 1.25x smaller",
			 (unsigned long long)st.ssd_write_raw_bytes,
			 (unsigned long long)st.ssd_write_stored_bytes);
	for (uint32_t n = 0; n < 60; n++) {
		struct kvt_key k = key_n(n);

		assert_int_equal(kvt_get(ns[n % 2], &k, buf, BLOCK), 0);
		kvt_test_fill(want, BLOCK, seed + n);
		for (size_t j = 1; j < BLOCK; j += 2)
			want[j] = (char)(0x3f + (j / 2) % 3);
		assert_memory_equal(buf, want, BLOCK);
	}
	free(want);
	free(buf);
}

/* ssd_codec "auto" (kvtierd --ssd-codec auto) packs the SSD records of a
 * bf16 namespace (shuf16-pack4) and leaves an fp16 one's raw, though the
 * same bytes would pack. */
static void store_codec_auto_packs_bf16_only(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_ns *ns[2];
	uint64_t on_ssd[2];

	f->codec = KVT_SSD_CODEC_AUTO;
	open_store(f);
	ns[0] = f->ns;
	ns[1] = attach_dtype(f, "test/ssd-model-fp16", KVT_DTYPE_FP16);
	put_bf16_like_and_settle(f, ns, 60);
	count_on_ssd(ns, 60, on_ssd);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	print_message("on SSD: %llu bf16, %llu fp16 blocks; %llu written encoded\n",
		      (unsigned long long)on_ssd[0], (unsigned long long)on_ssd[1],
		      (unsigned long long)st.ssd_compressed_writes);
	assert_true(on_ssd[0] >= 1 && on_ssd[1] >= 1);
	/* every bf16 block that went down went encoded, no fp16 one did */
	assert_true(st.ssd_compressed_writes >= on_ssd[0]);
	assert_true(st.ssd_compressed_writes <= 30);
	assert_true(st.ssd_write_raw_bytes >= (st.ssd_compressed_writes + on_ssd[1]) * BLOCK);
	assert_true(st.ssd_write_stored_bytes < st.ssd_write_raw_bytes);
	assert_true(st.ssd_write_stored_bytes >=
		    st.ssd_write_raw_bytes - st.ssd_compressed_writes * (BLOCK / 4));
}

static void reopen_rebuilds_the_index_from_the_log(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_key keys[80];
	uint8_t before[80], after[80];
	struct kvt_store_stats st = { .size = sizeof(st) };
	int on_ssd = 0;

	open_store(f);
	put_chain(f, 0, 80, buf);
	for (uint32_t n = 0; n < 80; n++)
		keys[n] = key_n(n);
	assert_int_equal(kvt_lookup(f->ns, keys, 80, before), 80);
	/* reading promotes blocks into DRAM: they must stay durable all the same */
	for (uint32_t n = 0; n < 80; n++)
		assert_block(f, n, buf, want);
	kvt_store_close(f->store);

	open_store(f);
	for (uint32_t n = 0; n < 80; n++) {
		kvt_lookup(f->ns, &keys[n], 1, &after[n]);
		if (before[n] != KVT_TIER_SSD)
			continue; /* DRAM is volatile: only blocks written to SSD survive */
		assert_int_equal(after[n], KVT_TIER_SSD);
		assert_block(f, n, buf, want);
		on_ssd++;
	}
	assert_true(on_ssd >= 80 - (int)(DRAM_BYTES / BLOCK));
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.checksum_failures, 0);
	free(want);
	free(buf);
}

static void put_root(struct kvt_ns *ns, uint32_t n, char *buf)
{
	struct kvt_key k = key_n(n);

	kvt_test_fill(buf, BLOCK, seed + n);
	assert_int_equal(kvt_put(ns, &k, NULL, buf, BLOCK), 0);
}

/* Blocks of ns in [from, to) that the index finds. */
static uint64_t count_in(struct kvt_ns *ns, uint32_t from, uint32_t to)
{
	uint64_t present = 0;

	for (uint32_t n = from; n < to; n++) {
		struct kvt_key k = key_n(n);
		present += (uint64_t)kvt_lookup(ns, &k, 1, NULL);
	}
	return present;
}

/* Blocks lost for room so far (SSD evictions plus DRAM drops), and *found
 * the blocks count() finds, taken while the demoter is still: it goes on
 * writing back after the last put returns, so a count between two equal
 * snapshots of the counters is the one that adds up. */
static uint64_t settled_loss(struct fixture *f, uint64_t (*count)(struct fixture *),
			     uint64_t *found, struct kvt_store_stats *st)
{
	struct kvt_store_stats a = { .size = sizeof(a) };

	for (int i = 0; i < 500; i++) {
		assert_int_equal(kvt_store_stats(f->store, &a), 0);
		*found = count(f);
		assert_int_equal(kvt_store_stats(f->store, st), 0);
		if (a.tier[KVT_TIER_SSD].evictions == st->tier[KVT_TIER_SSD].evictions &&
		    a.tier[KVT_TIER_DRAM].evictions == st->tier[KVT_TIER_DRAM].evictions &&
		    a.dram_dropped == st->dram_dropped)
			break;
		usleep(10000);
	}
	return st->tier[KVT_TIER_SSD].evictions + st->dram_dropped;
}

static uint64_t count_300(struct fixture *f)
{
	return count_in(f->ns, 0, 300);
}

static void full_ssd_tier_evicts(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint64_t lost, present;

	f->ssd_bytes = 4 << 20; /* about 60 blocks */
	open_store(f);
	put_chain(f, 0, 300, buf);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].evictions > 0);
	assert_true(st.tier[KVT_TIER_SSD].used_bytes <= st.tier[KVT_TIER_SSD].capacity_bytes);
	assert_false(st.tier[KVT_TIER_SSD].degraded);
	/* every block is accounted for: found, or counted as evicted; DRAM
	 * drops nothing while the SSD tier works */
	lost = settled_loss(f, count_300, &present, &st);
	assert_int_equal(st.dram_dropped, 0);
	assert_int_equal(present + lost, 300);
	assert_int_equal(st.blocks, present);
	/* nothing was read back, so no spare copy existed to drop */
	assert_int_equal(st.ssd_copies_dropped, 0);
	/* reading promotes, which demotes and evicts again: whatever is still
	 * there when asked for is intact, and the count still adds up */
	for (uint32_t n = 0; n < 300; n++) {
		struct kvt_key k = key_n(n);
		int rc = kvt_get(f->ns, &k, buf, BLOCK);
		if (rc == -ENOENT)
			continue;
		assert_int_equal(rc, 0);
		kvt_test_fill(want, BLOCK, seed + n);
		assert_memory_equal(buf, want, BLOCK);
	}
	lost = settled_loss(f, count_300, &present, &st);
	assert_int_equal(st.checksum_failures, 0);
	assert_int_equal(st.dram_dropped, 0);
	assert_int_equal(present + lost, 300);
	free(want);
	free(buf);
}

/* The demoter writes back from above the high watermark down to the low
 * one, not further: DRAM keeps the newest blocks. 60 slots of 68 KiB (the
 * block and its header page), 70 blocks: demotion starts past 90% and stops
 * at 75% less what is in flight, so 43 to 55 stay in DRAM. Before, once a
 * pass's first batch was back it went on while batches moved anything, and
 * emptied DRAM. */
static void demotion_stops_at_the_low_watermark(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK);
	uint32_t in_dram = 0, on_ssd = 0;

	f->dram_bytes = 4 << 20;
	open_store(f);
	for (uint32_t n = 0; n < 70; n++)
		put_root(f->ns, n, buf);
	/* the demoter works on after the puts, and may start late on a busy
	 * machine: count until DRAM is under the high watermark and no block
	 * moved in the last 10 ms */
	for (int i = 0; i < 500; i++) {
		struct kvt_store_stats a = { .size = sizeof(a) }, b = { .size = sizeof(b) };

		assert_int_equal(kvt_store_stats(f->store, &a), 0);
		usleep(10000);
		in_dram = on_ssd = 0;
		for (uint32_t n = 0; n < 70; n++) {
			struct kvt_key k = key_n(n);
			uint8_t tier = 0;

			assert_int_equal(kvt_lookup(f->ns, &k, 1, &tier), 1);
			in_dram += tier == KVT_TIER_DRAM;
			on_ssd += tier == KVT_TIER_SSD;
		}
		assert_int_equal(kvt_store_stats(f->store, &b), 0);
		if (in_dram <= 55 &&
		    a.tier[KVT_TIER_DRAM].evictions == b.tier[KVT_TIER_DRAM].evictions)
			break;
	}
	assert_int_equal(in_dram + on_ssd, 70);
	free(buf);
	if (in_dram < 43 || in_dram > 55)
		fail_msg("%u blocks in DRAM after demotion, not 43 to 55", in_dram);
}

/* Wait until the demoter is quiet: fewer than `below` blocks in DRAM and
 * none left it in the last 20 ms. */
static void settle(struct fixture *f, uint32_t below)
{
	for (int i = 0; i < 500; i++) {
		struct kvt_store_stats a = { .size = sizeof(a) }, b = { .size = sizeof(b) };

		assert_int_equal(kvt_store_stats(f->store, &a), 0);
		usleep(20000);
		assert_int_equal(kvt_store_stats(f->store, &b), 0);
		if (b.tier[KVT_TIER_DRAM].blocks < below &&
		    a.tier[KVT_TIER_DRAM].evictions == b.tier[KVT_TIER_DRAM].evictions)
			return;
	}
	fail_msg("the demoter did not settle");
}

/* settle(), then wait until every block the demoter put in a batch has
 * landed on SSD: a batch still being written counts its blocks in
 * demote_batch_blocks while they are in DRAM still. With nothing reading,
 * every block is written once, so the two meet; a block counted twice
 * would keep them apart (the caller's assertion then says so). */
static void settle_batches(struct fixture *f, uint32_t below)
{
	settle(f, below);
	for (int i = 0; i < 500; i++) {
		struct kvt_store_stats st = { .size = sizeof(st) };

		assert_int_equal(kvt_store_stats(f->store, &st), 0);
		if (st.demote_batch_blocks == st.tier[KVT_TIER_SSD].blocks)
			return;
		usleep(20000);
	}
}

static uint8_t tier_of(struct fixture *f, uint32_t n)
{
	struct kvt_key k = key_n(n);
	uint8_t tier = KVT_TIER_NONE;

	assert_int_equal(kvt_lookup(f->ns, &k, 1, &tier), 1);
	return tier;
}

/* Under tail-lru a chain leaves DRAM from its end, and its blocks are older
 * than the roots saved after it: the demoter writes the chain's end, then
 * its parent, and so on, before any root, in one batch. Before, a block's
 * parent became a candidate only once the block had left DRAM: the
 * demoter's batch took the chain's end and then the (hotter) roots. */
static void demotion_takes_a_chain_from_its_end_before_hotter_tails(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	char *buf = malloc(BLOCK);
	uint32_t first_down = 40;

	f->dram_bytes = 4 << 20; /* 64 slots: demotes past 57, down to 48 */
	open_store(f);
	put_chain(f, 0, 40, buf);
	for (uint32_t n = 1000; n < 1020; n++)
		put_root(f->ns, n, buf);
	settle_batches(f, 58);
	for (uint32_t n = 1000; n < 1020; n++)
		if (tier_of(f, n) != KVT_TIER_DRAM)
			fail_msg("root %u went down before the chain's older blocks", n);
	while (first_down && tier_of(f, first_down - 1) == KVT_TIER_SSD)
		first_down--;
	for (uint32_t n = 0; n < first_down; n++)
		if (tier_of(f, n) != KVT_TIER_DRAM)
			fail_msg("chain block %u went down before its child %u", n, first_down);
	if (first_down > 34)
		fail_msg("only %u of the chain's blocks went down", 40 - first_down);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks + st.tier[KVT_TIER_SSD].blocks, 60);
	assert_int_equal(st.demote_batch_blocks, 40 - first_down);
	free(buf);
}

/* One long chain saved through a small DRAM tier (what an engine saves):
 * the demoter's batches carry many of its blocks each, not the one or two
 * tails DRAM holds at a time; every block is counted once. */
static void demotion_batches_carry_many_blocks_of_a_chain(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);

	f->dram_bytes = 4 << 20; /* 64 slots: demotes past 57, down to 16 */
	f->low = 0.25;
	open_store(f);
	put_chain(f, 0, 160, buf);
	settle_batches(f, 58);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks + st.tier[KVT_TIER_SSD].blocks, 160);
	assert_int_equal(st.tier[KVT_TIER_SSD].evictions, 0);
	assert_int_equal(st.demote_batch_blocks, st.tier[KVT_TIER_SSD].blocks);
	assert_true(st.demote_batches > 0);
	print_message("%llu blocks demoted in %llu batches\n",
		      (unsigned long long)st.demote_batch_blocks,
		      (unsigned long long)st.demote_batches);
	if (st.demote_batch_blocks < 5 * st.demote_batches)
		fail_msg("%llu blocks demoted in %llu batches: fewer than 5 a batch",
			 (unsigned long long)st.demote_batch_blocks,
			 (unsigned long long)st.demote_batches);
	for (uint32_t n = 0; n < 160; n += 7)
		assert_block(f, n, buf, want);
	free(buf);
	free(want);
}

/* A full SSD tier whose coldest blocks lie spread over its segments still
 * takes writes: a segment goes only once at most 25% of it is live, so the
 * demoter evicts for each block the tier refuses and writes it again, for
 * as long as that takes. Half of the SSD's blocks are used again, so the
 * coldest are every other block of each segment, and a 60-record segment
 * reaches 25% live only after about 75 evictions. Demotion is on demand
 * only (both watermarks at 1): each put past the SSD's capacity needs that
 * room at once. */
static void full_tier_of_spread_cold_blocks_takes_writes(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint64_t present = 0;

	f->ssd_bytes = 8 << 20; /* two segments of 60 records */
	f->segment_bytes = 4 << 20;
	f->high = f->low = 1.0;
	open_store(f);
	/* prefixes of one block each, so that the policy orders them by use
	 * alone: 130 fill the SSD's first segment and most of its second */
	for (uint32_t n = 0; n < 130; n++)
		put_root(f->ns, n, buf);
	for (uint32_t n = 0; n < 110; n += 2) {
		struct kvt_key k = key_n(n);
		uint8_t tier = 0;

		assert_int_equal(kvt_lookup(f->ns, &k, 1, &tier), 1);
		assert_int_equal(tier, KVT_TIER_SSD);
	}
	for (uint32_t n = 1000; n < 1100; n++)
		put_root(f->ns, n, buf);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.dram_dropped, 0);
	assert_true(st.tier[KVT_TIER_SSD].evictions >= 75);
	assert_true(st.tier[KVT_TIER_SSD].used_bytes <= st.tier[KVT_TIER_SSD].capacity_bytes);
	present = count_in(f->ns, 0, 130) + count_in(f->ns, 1000, 1100);
	assert_int_equal(present + st.tier[KVT_TIER_SSD].evictions, 230);
	/* the newest blocks are all there, intact */
	for (uint32_t n = 1100 - 60; n < 1100; n++)
		assert_block(f, n, buf, want);
	free(want);
	free(buf);
}

/* a's blocks 1000..1299 and b's 0..39 found (f->ns is a; b is the other
 * namespace attached, found by name) */
static uint64_t count_a_b(struct fixture *f)
{
	struct kvt_ns *b;

	b = attach(f, "test/model-b");
	return count_in(f->ns, 1000, 1300) + count_in(b, 0, 40);
}

/* Blocks the SSD tier lets go for room are all counted, those of a
 * namespace not attached since the restart too: what the index finds, plus
 * what was counted as evicted, is everything that was on SSD or put since. */
static void every_eviction_is_counted(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_ns *a, *b;
	uint32_t b_on_ssd = 0;
	uint64_t present, present_b, lost;

	f->ssd_bytes = 4 << 20; /* about 60 blocks */
	open_store_ns(f, false);
	b = attach(f, "test/model-b");
	for (uint32_t n = 0; n < 40; n++)
		put_root(b, n, buf);
	kvt_store_close(f->store);

	/* b's blocks wait for b to attach; a fills the tier meanwhile. What
	 * is on SSD is what the reopened tier found (a block the demoter was
	 * still writing when the store closed is durable too) */
	open_store_ns(f, false);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	b_on_ssd = (uint32_t)st.ssd.recovered;
	assert_true(b_on_ssd > 0);
	a = attach(f, "test/model-a");
	for (uint32_t n = 1000; n < 1300; n++)
		put_root(a, n, buf);
	b = attach(f, "test/model-b");
	f->ns = a;
	lost = settled_loss(f, count_a_b, &present, &st);
	f->ns = b;
	present_b = count_in(b, 0, 40);
	assert_int_equal(st.dram_dropped, 0);
	assert_true(present_b < b_on_ssd); /* some of b's went for room */
	assert_int_equal(present + lost, b_on_ssd + 300);
	free(buf);
}

/* The issue this guards: every restart sealed the segment being filled, so
 * after a few restarts a tier holding little counted as full and evicted
 * durable blocks. A fixed working set through many graceful restarts (each
 * reading some blocks back) loses nothing and evicts nothing. */
static void graceful_restarts_keep_every_block(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	const uint32_t blocks = 48; /* 3 MiB in a 16 MiB tier of 1 MiB segments */
	uint32_t filler, on_ssd = 0;

	open_store(f);
	for (uint32_t n = 0; n < blocks; n++)
		put_root(f->ns, n, buf);
	/* push the whole working set down to SSD (DRAM does not survive a
	 * restart), then let go of what pushed it */
	for (filler = 1000; filler < 1200 && on_ssd < blocks;) {
		for (uint32_t k = 0; k < DRAM_BYTES / BLOCK; k++)
			put_root(f->ns, filler++, buf);
		on_ssd = 0;
		for (uint32_t n = 0; n < blocks; n++) {
			struct kvt_key k = key_n(n);
			uint8_t tier = 0;
			kvt_lookup(f->ns, &k, 1, &tier);
			on_ssd += tier == KVT_TIER_SSD;
		}
	}
	assert_int_equal(on_ssd, blocks);
	for (uint32_t n = 1000; n < filler; n++) {
		struct kvt_key k = key_n(n);
		assert_int_equal(kvt_remove(f->ns, &k), 0);
	}
	kvt_store_close(f->store);
	for (int round = 0; round < 24; round++) {
		open_store(f);
		for (uint32_t n = 0; n < blocks; n++) {
			struct kvt_key k = key_n(n);
			if (!kvt_lookup(f->ns, &k, 1, NULL))
				fail_msg("restart %d: block %u is gone", round, n);
		}
		/* read a few back: promoted, and kept durable */
		for (uint32_t n = (uint32_t)round % 8; n < blocks; n += 8)
			assert_block(f, n, buf, want);
		assert_int_equal(kvt_store_stats(f->store, &st), 0);
		assert_int_equal(st.tier[KVT_TIER_SSD].evictions, 0);
		assert_int_equal(st.ssd_copies_dropped, 0);
		assert_int_equal(st.dram_dropped, 0);
		assert_int_equal(st.ssd.torn + st.ssd.corrupt + st.ssd.quarantined, 0);
		assert_true(st.tier[KVT_TIER_SSD].used_bytes < 8u << 20);
		kvt_store_close(f->store);
		f->store = NULL;
	}
	open_store(f);
	for (uint32_t n = 0; n < blocks; n++)
		assert_block(f, n, buf, want);
	free(want);
	free(buf);
}

/* A removed block does not come back when the store reopens, whether it was
 * on SSD, in DRAM with an SSD copy, or in DRAM only; a block removed and put
 * again is the new one. */
static void removed_blocks_stay_removed(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };

	open_store(f);
	put_chain(f, 0, 60, buf);         /* 0..43 or so on SSD */
	assert_block(f, 5, buf, want);    /* 5: in DRAM, its SSD copy kept */
	for (uint32_t n = 0; n < 60; n += 3) {
		struct kvt_key k = key_n(n);
		assert_int_equal(kvt_remove(f->ns, &k), 0);
	}
	{
		struct kvt_key k = key_n(5);
		assert_int_equal(kvt_remove(f->ns, &k), 0);
		kvt_test_fill(buf, BLOCK, seed + 5000);
		assert_int_equal(kvt_put(f->ns, &k, NULL, buf, BLOCK), 0); /* new bytes */
	}
	put_chain(f, 100, 140, buf); /* pushes the new 5 down to SSD */
	kvt_store_close(f->store);

	open_store(f);
	for (uint32_t n = 0; n < 60; n++) {
		struct kvt_key k = key_n(n);
		int found = kvt_lookup(f->ns, &k, 1, NULL);

		if (n % 3 == 0 && found)
			fail_msg("removed block %u came back", n);
	}
	{
		struct kvt_key k = key_n(5);
		assert_int_equal(kvt_get(f->ns, &k, buf, BLOCK), 0);
		kvt_test_fill(want, BLOCK, seed + 5000);
		assert_memory_equal(buf, want, BLOCK);
	}
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.ssd.removed > 0);
	assert_true(st.ssd.tombstones >= 21);
	free(want);
	free(buf);
}

/* A block read back (promoted, then kept hot in DRAM) keeps an SSD copy
 * while the SSD tier evicts colder blocks (and when segment release drops
 * its copy, it is written again): after a restart, which empties DRAM, it
 * is still there. */
static void read_back_blocks_keep_their_ssd_copy(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_key hot = key_n(10);
	uint8_t tier;

	f->ssd_bytes = 4 << 20; /* about 60 blocks */
	open_store(f);
	/* prefixes of one block each, so that every block is a chain tail and
	 * the policy orders them by use alone */
	for (uint32_t n = 0; n < 40; n++)
		put_root(f->ns, n, buf);
	assert_int_equal(kvt_lookup(f->ns, &hot, 1, &tier), 1);
	assert_int_equal(tier, KVT_TIER_SSD);
	assert_block(f, 10, buf, want); /* promoted: in DRAM, its copy kept */
	/* 200 more blocks through the full SSD tier, the hot one used all along */
	for (uint32_t n = 1000; n < 1200; n++) {
		put_root(f->ns, n, buf);
		assert_int_equal(kvt_lookup(f->ns, &hot, 1, &tier), 1);
	}
	assert_int_equal(tier, KVT_TIER_DRAM);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].evictions > 100);
	kvt_store_close(f->store);

	open_store(f);
	assert_int_equal(kvt_lookup(f->ns, &hot, 1, &tier), 1);
	assert_int_equal(tier, KVT_TIER_SSD);
	assert_block(f, 10, buf, want);
	free(want);
	free(buf);
}

static void count_planned(void *arg, size_t found)
{
	*(size_t *)arg = found;
}

/* kvt_read_into reads blocks on SSD straight into the caller's pieces (here
 * each block's two halves in swapped places), verified, and leaves them on
 * SSD; a block in DRAM is left to the caller (-EAGAIN), and so is every key
 * from the first one the store lacks on, whose memory stays untouched. */
static void read_into_lands_ssd_blocks_in_pieces_and_leaves_them_there(void **state)
{
	enum { N = 40, MISS = 30, HALF = BLOCK / 2 };
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	char *mem = aligned_alloc(4096, (size_t)N * BLOCK);
	struct kvt_key keys[N];
	uint8_t tiers[N];
	struct iovec iov[N][2];
	const struct iovec *dst[N];
	unsigned cnt[N];
	int res[N];
	size_t found = 0;
	struct kvt_read_into ri = { .dst = dst, .dst_cnt = cnt, .res = res,
				    .planned_cb = count_planned, .arg = &found };
	int on_ssd = 0, read;

	assert_non_null(mem);
	open_store(f);
	put_chain(f, 0, N, buf);
	settle(f, 16);
	for (uint32_t n = 0; n < N; n++) {
		keys[n] = key_n(n);
		iov[n][0] = (struct iovec){ mem + (size_t)n * BLOCK + HALF, HALF };
		iov[n][1] = (struct iovec){ mem + (size_t)n * BLOCK, HALF };
		dst[n] = iov[n];
		cnt[n] = 2;
	}
	keys[MISS] = key_n(1000); /* never stored */
	assert_int_equal(kvt_lookup(f->ns, keys, MISS, tiers), MISS);
	memset(mem, 0xee, (size_t)N * BLOCK);

	read = kvt_read_into(f->ns, keys, N, &ri);
	assert_int_equal(found, MISS);
	for (uint32_t n = 0; n < MISS; n++) {
		if (tiers[n] != KVT_TIER_SSD) {
			assert_int_equal(res[n], -EAGAIN);
			continue;
		}
		on_ssd++;
		assert_int_equal(res[n], 0);
		kvt_test_fill(want, BLOCK, seed + n);
		assert_memory_equal(mem + (size_t)n * BLOCK + HALF, want, HALF);
		assert_memory_equal(mem + (size_t)n * BLOCK, want + HALF, HALF);
	}
	assert_true(on_ssd >= MISS - (int)(DRAM_BYTES / BLOCK));
	assert_int_equal(read, on_ssd);
	memset(want, 0xee, BLOCK);
	for (uint32_t n = MISS; n < N; n++) {
		assert_int_equal(res[n], -EAGAIN);
		assert_memory_equal(mem + (size_t)n * BLOCK, want, BLOCK);
	}
	/* not promoted: what was on SSD is there still */
	for (uint32_t n = 0; n < MISS; n++) {
		uint8_t t;

		assert_int_equal(kvt_lookup(f->ns, &keys[n], 1, &t), 1);
		if (tiers[n] == KVT_TIER_SSD)
			assert_int_equal(t, KVT_TIER_SSD);
	}
	free(mem);
	free(want);
	free(buf);
}

/* A block stored compressed cannot land in the caller's pieces as it lies
 * on SSD: kvt_read_into leaves it to the caller (-EAGAIN), writing nothing. */
static void read_into_leaves_compressed_blocks_to_the_caller(void **state)
{
	enum { N = 30 };
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	char *mem = aligned_alloc(4096, BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_key keys[N];
	uint8_t tiers[N];
	struct iovec iov;
	const struct iovec *dst = &iov;
	unsigned cnt = 1;
	int res, tried = 0;
	struct kvt_read_into ri = { .dst = &dst, .dst_cnt = &cnt, .res = &res };

	assert_non_null(mem);
	open_store(f);
	assert_int_equal(kvt_ns_set_ssd_codec(f->ns, "shuf16-lz4", 1.2), 0);
	for (uint32_t n = 0; n < N; n++) {
		struct kvt_key p = key_n(n - 1);

		keys[n] = key_n(n);
		kvt_test_fill(buf, BLOCK, seed + n);
		for (size_t j = 1; j < BLOCK; j += 2) /* bf16-like: it shrinks */
			buf[j] = (char)(0x3f + (j / 2) % 3);
		assert_int_equal(kvt_put(f->ns, &keys[n], n ? &p : NULL, buf, BLOCK), 0);
	}
	settle(f, 16);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].bytes_in > 0);
	assert_int_equal(kvt_lookup(f->ns, keys, N, tiers), N);
	iov = (struct iovec){ mem, BLOCK };
	memset(want, 0xee, BLOCK);
	for (uint32_t n = 0; n < N; n++) {
		if (tiers[n] != KVT_TIER_SSD)
			continue;
		tried++;
		memset(mem, 0xee, BLOCK);
		assert_int_equal(kvt_read_into(f->ns, &keys[n], 1, &ri), 0);
		assert_int_equal(res, -EAGAIN);
		assert_memory_equal(mem, want, BLOCK);
	}
	assert_true(tried > 0);
	free(mem);
	free(want);
	free(buf);
}

/* Blocks of a namespace not attached yet sit in segments that reclaim
 * releases while the attached one fills the SSD: the records it drops must
 * be forgotten, never freed later by a loc a new record now has, nor
 * indexed when their namespace attaches. */
static void unattached_namespace_records_dropped_by_reclaim(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_ns *a, *b;
	int present = 0;

	/* 15 records a 1 MiB segment: one block in six is b's, so that once
	 * a's are removed a segment is at most 25% live (reclaim releases it) */
	f->ssd_bytes = 8 << 20;
	open_store_ns(f, false);
	a = attach(f, "test/model-a");
	b = attach(f, "test/model-b");
	for (uint32_t n = 0; n < 100; n++)
		put_root(n % 6 ? a : b, n, buf);
	kvt_store_close(f->store);

	open_store_ns(f, false);
	a = attach(f, "test/model-a");
	for (uint32_t n = 0; n < 100; n++) {
		struct kvt_key k = key_n(n);
		if (n % 6)
			kvt_remove(a, &k);
	}
	/* enough to have reclaim release some of b's segments, too few to
	 * fill the tier (then b's records would be evicted, not dropped) */
	for (uint32_t n = 1000; n < 1070; n++)
		put_root(a, n, buf);
	/* what a has is intact (reads promote, demoting others) */
	for (uint32_t n = 1000; n < 1070; n++) {
		struct kvt_key k = key_n(n);
		int rc = kvt_get(a, &k, buf, BLOCK);
		if (rc == -ENOENT)
			continue;
		assert_int_equal(rc, 0);
		kvt_test_fill(want, BLOCK, seed + n);
		assert_memory_equal(buf, want, BLOCK);
		present++;
	}
	assert_true(present >= 60);
	/* empty the tier so that reading b's blocks writes nothing */
	for (uint32_t n = 1000; n < 1070; n++) {
		struct kvt_key k = key_n(n);
		kvt_remove(a, &k);
	}

	/* every block b finds indexed reads back */
	b = attach(f, "test/model-b");
	present = 0;
	for (uint32_t n = 0; n < 100; n += 6) {
		struct kvt_key k = key_n(n);
		if (!kvt_lookup(b, &k, 1, NULL))
			continue;
		assert_int_equal(kvt_get(b, &k, buf, BLOCK), 0);
		kvt_test_fill(want, BLOCK, seed + n);
		assert_memory_equal(buf, want, BLOCK);
		present++;
	}
	assert_true(present > 0);
	free(want);
	free(buf);
}

/* A pinned block on SSD is neither evicted nor dropped with its segment,
 * though that segment is the emptiest when the tier needs room. */
static void pinned_block_survives_segment_release(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint8_t tier = KVT_TIER_NONE;
	struct kvt_key k;
	uint32_t pinned = UINT32_MAX;

	f->ssd_bytes = 4 << 20;
	open_store(f);
	for (uint32_t n = 0; n < 32; n++)
		put_root(f->ns, n, buf);
	for (uint32_t n = 0; n < 32 && pinned == UINT32_MAX; n++) {
		k = key_n(n);
		if (kvt_lookup(f->ns, &k, 1, &tier) == 1 && tier == KVT_TIER_SSD)
			pinned = n;
	}
	assert_int_not_equal(pinned, UINT32_MAX);
	k = key_n(pinned);
	assert_int_equal(kvt_pin(f->ns, &k, 1), 1);
	/* its segment keeps only it: the first one reclaim would release */
	for (uint32_t n = 0; n < 32; n++) {
		struct kvt_key o = key_n(n);
		if (n != pinned)
			assert_int_equal(kvt_remove(f->ns, &o), 0);
	}
	for (uint32_t n = 1000; n < 1200; n++)
		put_root(f->ns, n, buf);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].evictions > 0);
	assert_false(st.tier[KVT_TIER_SSD].degraded);

	assert_int_equal(kvt_lookup(f->ns, &k, 1, &tier), 1);
	assert_int_equal(tier, KVT_TIER_SSD);
	assert_int_equal(kvt_get(f->ns, &k, buf, BLOCK), 0);
	kvt_test_fill(want, BLOCK, seed + pinned);
	assert_memory_equal(buf, want, BLOCK);
	assert_int_equal(kvt_unpin(f->ns, &k, 1), 1);
	free(want);
	free(buf);
}

static void failing_ssd_degrades_and_dram_keeps_serving(void **state)
{
	struct fixture *f = *state;
	struct loopfs *l = calloc(1, sizeof(*l));
	char *buf = malloc(BLOCK), *want = malloc(BLOCK), dir[1100];
	struct kvt_store_stats st = { .size = sizeof(st) };
	int present = 0;

	loopfs_setup(l, 8);
	f->loop = l;
	snprintf(dir, sizeof(dir), "%s/kv", l->mnt);
	free(f->dir);
	f->dir = strdup(dir);
	f->ssd_bytes = 64 << 20; /* far more than the 8 MiB file system */
	open_store(f);
	put_chain(f, 0, 300, buf);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].degraded);
	assert_true(st.tier[KVT_TIER_SSD].errors > 0);
	/* DRAM still takes blocks (evicting by the policy) and serves them;
	 * what reached SSD before it failed still reads back */
	assert_block(f, 299, buf, want);
	for (uint32_t n = 0; n < 300; n++) {
		struct kvt_key k = key_n(n);
		int rc = kvt_get(f->ns, &k, buf, BLOCK);
		if (rc == 0) {
			kvt_test_fill(want, BLOCK, seed + n);
			assert_memory_equal(buf, want, BLOCK);
			present++;
		} else {
			assert_int_equal(rc, -ENOENT);
		}
	}
	assert_true(present >= (int)(DRAM_BYTES / BLOCK) - 1);
	free(want);
	free(buf);
}

/* A full file system degrades the SSD tier; once there is room again, the
 * demoter's probe (after 1 s, then at growing intervals) brings it back and
 * blocks go down to SSD again. */
static void degraded_tier_resumes_when_the_disk_has_room(void **state)
{
	struct fixture *f = *state;
	struct loopfs *l = calloc(1, sizeof(*l));
	char *buf = malloc(BLOCK), dir[1100], filler[1200], cmd[1400];
	struct kvt_store_stats st = { .size = sizeof(st) };
	int on_ssd = 0;

	loopfs_setup(l, 16);
	f->loop = l;
	snprintf(dir, sizeof(dir), "%s/kv", l->mnt);
	free(f->dir);
	f->dir = strdup(dir);
	/* a filler leaves room for a segment or two */
	snprintf(filler, sizeof(filler), "%s/filler", l->mnt);
	snprintf(cmd, sizeof(cmd), "fallocate -l 11M %s", filler);
	assert_int_equal(system(cmd), 0);
	f->ssd_bytes = 8 << 20;
	open_store(f);
	put_chain(f, 0, 120, buf);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].degraded);
	unlink(filler);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(kvt_store_stats(f->store, &st), 0);
		if (!st.tier[KVT_TIER_SSD].degraded)
			break;
		usleep(100000);
	}
	assert_false(st.tier[KVT_TIER_SSD].degraded);
	assert_true(st.ssd.probes >= 1);
	assert_int_equal(st.ssd.resumed, 1);
	put_chain(f, 200, 260, buf);
	for (uint32_t n = 200; n < 260; n++) {
		struct kvt_key k = key_n(n);
		uint8_t tier = 0;
		kvt_lookup(f->ns, &k, 1, &tier);
		on_ssd += tier == KVT_TIER_SSD;
	}
	assert_true(on_ssd > 0);
	free(buf);
}

/* After a restart every block is on SSD: acquiring more of them than the
 * DRAM tier holds, each kept until the end, fills DRAM and then gets
 * -ENOSPC (never -ENOENT: the blocks are there); each acquired slot is the
 * block; once released, every other block comes back too. */
static void restart_then_acquire_more_than_dram_holds(void **state)
{
	struct fixture *f = *state;
	char *buf = malloc(BLOCK), *want = malloc(BLOCK);
	const uint32_t blocks = 48, slots = DRAM_BYTES / BLOCK;
	struct kvt_slot held[48];
	uint32_t n_held = 0;
	int err = 0;

	open_store(f);
	for (uint32_t n = 0; n < blocks; n++)
		put_root(f->ns, n, buf);
	/* push every block down (DRAM does not survive a restart) */
	for (uint32_t n = 1000; n < 1000 + 2 * slots; n++)
		put_root(f->ns, n, buf);
	kvt_store_close(f->store);

	open_store(f);
	for (uint32_t n = 0; n < blocks; n++) {
		struct kvt_key k = key_n(n);

		err = kvt_acquire(f->ns, &k, &held[n_held]);
		if (err)
			break;
		kvt_test_fill(want, BLOCK, seed + n);
		assert_memory_equal(held[n_held].data, want, BLOCK);
		n_held++;
	}
	if (err != -ENOSPC)
		fail_msg("acquire %u of %u blocks after a restart: %s, want -ENOSPC", n_held + 1,
			 blocks, kvt_strerror(err));
	assert_true(n_held >= slots * 3 / 4 && n_held <= slots);
	for (uint32_t k = 0; k < n_held; k++)
		kvt_release(f->ns, &held[k]);
	for (uint32_t n = 0; n < blocks; n++) {
		struct kvt_key k = key_n(n);

		assert_int_equal(kvt_acquire(f->ns, &k, &held[0]), 0);
		kvt_test_fill(want, BLOCK, seed + n);
		assert_memory_equal(held[0].data, want, BLOCK);
		kvt_release(f->ns, &held[0]);
	}
	free(want);
	free(buf);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(dram_overflow_demotes_and_get_promotes, setup, teardown),
		cmocka_unit_test_setup_teardown(compressed_namespace_round_trips, setup, teardown),
		cmocka_unit_test_setup_teardown(ssd_used_bytes_count_the_record_headers, setup,
						teardown),
		cmocka_unit_test_setup_teardown(store_codec_encodes_every_namespace, setup, teardown),
		cmocka_unit_test_setup_teardown(store_codec_auto_packs_bf16_only, setup, teardown),
		cmocka_unit_test_setup_teardown(reopen_rebuilds_the_index_from_the_log, setup, teardown),
		cmocka_unit_test_setup_teardown(full_ssd_tier_evicts, setup, teardown),
		cmocka_unit_test_setup_teardown(demotion_stops_at_the_low_watermark, setup, teardown),
		cmocka_unit_test_setup_teardown(demotion_takes_a_chain_from_its_end_before_hotter_tails,
						setup, teardown),
		cmocka_unit_test_setup_teardown(demotion_batches_carry_many_blocks_of_a_chain, setup,
						teardown),
		cmocka_unit_test_setup_teardown(full_tier_of_spread_cold_blocks_takes_writes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(every_eviction_is_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(graceful_restarts_keep_every_block, setup, teardown),
		cmocka_unit_test_setup_teardown(removed_blocks_stay_removed, setup, teardown),
		cmocka_unit_test_setup_teardown(read_back_blocks_keep_their_ssd_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(read_into_lands_ssd_blocks_in_pieces_and_leaves_them_there,
						setup, teardown),
		cmocka_unit_test_setup_teardown(read_into_leaves_compressed_blocks_to_the_caller, setup,
						teardown),
		cmocka_unit_test_setup_teardown(unattached_namespace_records_dropped_by_reclaim, setup,
						teardown),
		cmocka_unit_test_setup_teardown(pinned_block_survives_segment_release, setup, teardown),
		cmocka_unit_test_setup_teardown(failing_ssd_degrades_and_dram_keeps_serving, setup,
						teardown),
		cmocka_unit_test_setup_teardown(degraded_tier_resumes_when_the_disk_has_room, setup,
						teardown),
		cmocka_unit_test_setup_teardown(restart_then_acquire_more_than_dram_holds, setup, teardown),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	if (!force_threads)
		kvt_test_need_io_uring();
	seed = kvt_test_seed();
	return cmocka_run_group_tests_name(force_threads ? "store_ssd (thread pool)" :
				   "store_ssd (io_uring)", tests, NULL, NULL);
}
