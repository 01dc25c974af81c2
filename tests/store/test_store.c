/* SPDX-License-Identifier: Apache-2.0 */
/* The store's block operations through the public API: round trips, prefix
 * lookup, eviction order, pins, slots, accounting, and bad arguments. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "helpers.h"
#include "kvtier/store.h"

/* A tiny model: 2 layers x 1 kv head x 64 dims x bf16 x 16 tokens x K,V
 * = 8 KiB blocks, so a 1 MiB store holds exactly 128 of them. */
#define BLOCK (2u * 2 * 1 * 64 * 2 * 16)
#define DRAM_BYTES (1u << 20)
#define SLOTS (DRAM_BYTES / BLOCK)

struct fixture {
	struct kvt_store *store;
	struct kvt_ns *ns;
	uint64_t seed;
};

static void small_desc(struct kvt_ns_desc *d, const char *model)
{
	kvt_ns_desc_init(d, sizeof(*d));
	snprintf(d->model_id, sizeof(d->model_id), "%s", model);
	d->layers = 2;
	d->kv_heads = 1;
	d->head_dim = 64;
	d->block_tokens = 16;
}

static int open_store(struct fixture *f, const char *policy, bool checksums)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	int err;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = DRAM_BYTES;
	o.dram_huge_pages = false;
	o.policy = policy;
	o.checksum_on_put = checksums;
	err = kvt_store_open(&o, &f->store);
	if (err)
		return err;
	small_desc(&d, "test/model");
	return kvt_ns_attach(f->store, &d, &f->ns);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->seed = kvt_test_seed();
	assert_int_equal(open_store(f, NULL, false), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_store_close(f->store);
	free(f);
	return 0;
}

/* Key number n: distinct, readable in a failure message. */
static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	k.bytes[15] = 0xAB;
	return k;
}

/* Put a chain of n blocks, keys first..first+n-1, each the parent of the next. */
static void put_chain(struct fixture *f, uint32_t first, uint32_t n)
{
	uint8_t buf[BLOCK];

	for (uint32_t i = 0; i < n; i++) {
		struct kvt_key k = key_n(first + i), p = key_n(first + i - 1);
		kvt_test_fill(buf, BLOCK, f->seed + first + i);
		assert_int_equal(kvt_put(f->ns, &k, i ? &p : NULL, buf, BLOCK), 0);
	}
}

static bool present(struct fixture *f, uint32_t n)
{
	struct kvt_key k = key_n(n);

	return kvt_lookup(f->ns, &k, 1, NULL) == 1;
}

static void block_size_follows_the_layout(void **state)
{
	struct fixture *f = *state;
	struct kvt_ns_desc d;

	assert_int_equal(kvt_ns_block_bytes(f->ns), BLOCK);
	/* Qwen3-8B: 36 layers x 8 kv heads x 128 x bf16 x 2 = 147,456 B/token */
	small_desc(&d, "Qwen/Qwen3-8B");
	d.layers = 36;
	d.kv_heads = 8;
	d.head_dim = 128;
	d.block_tokens = 1;
	assert_int_equal(kvt_ns_desc_block_bytes(&d), 147456);
	/* MLA keeps one latent vector per token: DeepSeek-V3 61 x (512 + 64) x bf16 */
	d.layout = KVT_LAYOUT_MLA;
	d.layers = 61;
	d.kv_heads = 1;
	d.head_dim = 576;
	assert_int_equal(kvt_ns_desc_block_bytes(&d), 61 * 576 * 2);
	d.dtype = KVT_DTYPE_FP8_E4M3;
	assert_int_equal(kvt_ns_desc_block_bytes(&d), 61 * 576);
}

static void put_get_round_trips_random_blocks(void **state)
{
	struct fixture *f = *state;
	uint8_t in[BLOCK], out[BLOCK];

	for (uint32_t i = 0; i < 3 * SLOTS; i++) {
		struct kvt_key k = key_n(i);
		kvt_test_fill(in, BLOCK, f->seed ^ i);
		assert_int_equal(kvt_put(f->ns, &k, NULL, in, BLOCK), 0);
		memset(out, 0, BLOCK);
		assert_int_equal(kvt_get(f->ns, &k, out, BLOCK), 0);
		assert_memory_equal(in, out, BLOCK);
	}
	/* the newest SLOTS blocks are still there, byte for byte */
	for (uint32_t i = 2 * SLOTS; i < 3 * SLOTS; i++) {
		struct kvt_key k = key_n(i);
		kvt_test_fill(in, BLOCK, f->seed ^ i);
		assert_int_equal(kvt_get(f->ns, &k, out, BLOCK), 0);
		assert_memory_equal(in, out, BLOCK);
	}
}

static void put_of_a_stored_key_is_eexist_and_keeps_the_bytes(void **state)
{
	struct fixture *f = *state;
	uint8_t a[BLOCK], b[BLOCK], out[BLOCK];
	struct kvt_key k = key_n(7);

	kvt_test_fill(a, BLOCK, 1);
	kvt_test_fill(b, BLOCK, 2);
	assert_int_equal(kvt_put(f->ns, &k, NULL, a, BLOCK), 0);
	assert_int_equal(kvt_put(f->ns, &k, NULL, b, BLOCK), -EEXIST);
	assert_int_equal(kvt_get(f->ns, &k, out, BLOCK), 0);
	assert_memory_equal(a, out, BLOCK);
}

static void lookup_returns_the_longest_prefix_and_stops_at_a_gap(void **state)
{
	struct fixture *f = *state;
	struct kvt_key keys[6];
	uint8_t tiers[6];

	put_chain(f, 100, 6);
	for (int i = 0; i < 6; i++)
		keys[i] = key_n(100 + (uint32_t)i);
	assert_int_equal(kvt_lookup(f->ns, keys, 6, tiers), 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(tiers[i], KVT_TIER_DRAM);

	assert_int_equal(kvt_remove(f->ns, &keys[3]), 0);
	memset(tiers, 0xff, sizeof(tiers));
	assert_int_equal(kvt_lookup(f->ns, keys, 6, tiers), 3);
	assert_int_equal(tiers[2], KVT_TIER_DRAM);
	for (int i = 3; i < 6; i++) /* blocks 4 and 5 exist, but behind the gap */
		assert_int_equal(tiers[i], KVT_TIER_NONE);
	assert_true(present(f, 104));

	/* a missing first block matches nothing */
	assert_int_equal(kvt_remove(f->ns, &keys[0]), 0);
	assert_int_equal(kvt_lookup(f->ns, keys, 6, tiers), 0);
	assert_int_equal(kvt_lookup(f->ns, keys, 0, NULL), 0);
}

/* Presence is checked only after the evictions under test: a lookup is a
 * use, so checking earlier would change the order being tested. */
static void tails_are_evicted_before_their_parents(void **state)
{
	struct fixture *f = *state;

	/* chain A (older) and chain B fill the store exactly */
	put_chain(f, 1000, SLOTS / 2);
	put_chain(f, 2000, SLOTS / 2);
	/* two more blocks: the victims are A's last two blocks, not A's root
	 * (the least recently used block) */
	put_chain(f, 5000, 1);
	put_chain(f, 6000, 1);
	assert_false(present(f, 1000 + SLOTS / 2 - 1));
	assert_false(present(f, 1000 + SLOTS / 2 - 2));
	for (uint32_t i = 0; i < SLOTS / 2 - 2; i++)
		assert_true(present(f, 1000 + i));
	for (uint32_t i = 0; i < SLOTS / 2; i++)
		assert_true(present(f, 2000 + i));
	assert_true(present(f, 5000));
	assert_true(present(f, 6000));
}

static void a_used_prefix_outlives_an_unused_one(void **state)
{
	struct fixture *f = *state;
	struct kvt_key keys[4];
	const uint32_t half = SLOTS / 2;

	put_chain(f, 1000, half);
	put_chain(f, 2000, half);
	/* a new request reuses A's first 4 blocks; A's other blocks are now the
	 * least recent, then B, then A's used prefix */
	for (int i = 0; i < 4; i++)
		keys[i] = key_n(1000 + (uint32_t)i);
	assert_int_equal(kvt_lookup(f->ns, keys, 4, NULL), 4);
	put_chain(f, 3000, half); /* evicts A's unused 60, then B's last 4 */
	for (uint32_t i = 4; i < half; i++)
		assert_false(present(f, 1000 + i));
	for (uint32_t i = half - 4; i < half; i++)
		assert_false(present(f, 2000 + i));
	for (uint32_t i = 0; i < half - 4; i++)
		assert_true(present(f, 2000 + i));
	for (uint32_t i = 0; i < 4; i++)
		assert_true(present(f, 1000 + i));
	for (uint32_t i = 0; i < half; i++)
		assert_true(present(f, 3000 + i));
}

static void plain_lru_evicts_the_least_recent_block(void **state)
{
	struct fixture f = { .seed = 42 };

	assert_int_equal(open_store(&f, "lru", false), 0);
	put_chain(&f, 1000, SLOTS);
	put_chain(&f, 9000, 1);
	/* lru ignores the chain: the root, used first, leaves first */
	assert_false(present(&f, 1000));
	assert_true(present(&f, 1001));
	kvt_store_close(f.store);
}

static void pinned_blocks_are_never_evicted(void **state)
{
	struct fixture *f = *state;
	struct kvt_key keys[SLOTS], extra = key_n(9000);
	uint8_t buf[BLOCK] = { 0 };

	put_chain(f, 1000, SLOTS);
	for (uint32_t i = 0; i < SLOTS; i++)
		keys[i] = key_n(1000 + i);
	/* pin all but the tail: the tail is the only victim left */
	assert_int_equal(kvt_pin(f->ns, keys, SLOTS - 1), SLOTS - 1);
	assert_int_equal(kvt_put(f->ns, &extra, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_pin(f->ns, &extra, 1), 1);
	{
		struct kvt_key k = key_n(9001);
		assert_int_equal(kvt_put(f->ns, &k, NULL, buf, BLOCK), -ENOSPC);
	}
	assert_false(present(f, 1000 + SLOTS - 1));
	for (uint32_t i = 0; i < SLOTS - 1; i++)
		assert_true(present(f, 1000 + i));
	/* unpinned, they become evictable again (pins nest: one unpin each) */
	assert_int_equal(kvt_unpin(f->ns, keys, SLOTS - 1), SLOTS - 1);
	assert_int_equal(kvt_unpin(f->ns, keys, 1), 0);
	put_chain(f, 9100, 1);
	assert_true(present(f, 9100));
	assert_true(present(f, 9000));
}

static void reserved_slots_are_invisible_until_committed(void **state)
{
	struct fixture *f = *state;
	struct kvt_key parent = key_n(1), k = key_n(2), k2 = key_n(3);
	struct kvt_slot slot, again, other;
	uint8_t buf[BLOCK], out[BLOCK];
	struct kvt_key both[2] = { parent, k };

	put_chain(f, 1, 1);
	assert_int_equal(kvt_reserve(f->ns, &k, &parent, &slot), 0);
	assert_int_equal(slot.len, BLOCK);
	assert_int_equal(kvt_reserve(f->ns, &k, &parent, &again), -EEXIST);
	assert_int_equal(kvt_lookup(f->ns, both, 2, NULL), 1);
	assert_int_equal(kvt_get(f->ns, &k, out, BLOCK), -ENOENT);

	kvt_test_fill(buf, BLOCK, 77);
	memcpy(slot.data, buf, BLOCK);
	assert_int_equal(kvt_commit(f->ns, &slot), 0);
	assert_int_equal(kvt_commit(f->ns, &slot), -EINVAL); /* once only */
	assert_int_equal(kvt_lookup(f->ns, both, 2, NULL), 2);
	assert_int_equal(kvt_get(f->ns, &k, out, BLOCK), 0);
	assert_memory_equal(buf, out, BLOCK);

	/* an aborted reservation leaves nothing behind, its slot reusable */
	assert_int_equal(kvt_reserve(f->ns, &k2, &k, &other), 0);
	kvt_abort(f->ns, &other);
	assert_false(present(f, 3));
	assert_int_equal(kvt_reserve(f->ns, &k2, &k, &other), 0);
	kvt_abort(f->ns, &other);
}

static void acquired_blocks_survive_remove_until_released(void **state)
{
	struct fixture *f = *state;
	struct kvt_key k = key_n(10);
	uint8_t buf[BLOCK];
	struct kvt_slot slot;
	struct kvt_store_stats st = { .size = sizeof(st) };

	void *base;
	uint64_t len;

	kvt_test_fill(buf, BLOCK, 10);
	assert_int_equal(kvt_put(f->ns, &k, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_acquire(f->ns, &k, &slot), 0);
	assert_memory_equal(slot.data, buf, BLOCK);
	/* slots lie inside the one region a device or NIC registers */
	assert_int_equal(kvt_store_dram_region(f->store, &base, &len), 0);
	assert_int_equal(len, DRAM_BYTES);
	assert_true((uint8_t *)slot.data >= (uint8_t *)base &&
		    (uint8_t *)slot.data + BLOCK <= (uint8_t *)base + len);
	assert_int_equal(kvt_remove(f->ns, &k), 0);
	assert_false(present(f, 10));
	/* the bytes stay valid and accounted until the reader lets go */
	assert_memory_equal(slot.data, buf, BLOCK);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 1);
	/* saving the key again now would be lost at release: say so */
	assert_int_equal(kvt_put(f->ns, &k, NULL, buf, BLOCK), -EBUSY);
	kvt_release(f->ns, &slot);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].used_bytes, 0);
	assert_int_equal(kvt_remove(f->ns, &k), -ENOENT);
}

static void acquired_blocks_are_not_evicted(void **state)
{
	struct fixture *f = *state;
	struct kvt_key k = key_n(1000);
	struct kvt_slot slot;

	put_chain(f, 1000, 1);
	assert_int_equal(kvt_acquire(f->ns, &k, &slot), 0);
	put_chain(f, 2000, SLOTS - 1);
	put_chain(f, 3000, 4); /* full: evictions take others, never the held one */
	assert_true(present(f, 1000));
	kvt_release(f->ns, &slot);
}

static void capacity_is_exact_after_churn(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint64_t s = f->seed, live = 0;
	uint8_t buf[BLOCK] = { 0 };

	for (int op = 0; op < 20000; op++) {
		struct kvt_key k = key_n((uint32_t)(kvt_test_rand(&s) % 400));
		if (kvt_test_rand(&s) % 3 == 0)
			kvt_remove(f->ns, &k);
		else
			kvt_put(f->ns, &k, NULL, buf, BLOCK);
	}
	for (uint32_t n = 0; n < 400; n++)
		live += present(f, n);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, live);
	assert_int_equal(st.tier[KVT_TIER_DRAM].used_bytes, live * BLOCK);
	assert_int_equal(st.tier[KVT_TIER_DRAM].capacity_bytes, DRAM_BYTES);
	assert_true(live <= SLOTS);
	/* and the store can still fill up to the last slot: nothing leaked */
	for (uint32_t n = 0; n < 400; n++) {
		struct kvt_key k = key_n(n);
		kvt_remove(f->ns, &k);
	}
	put_chain(f, 10000, SLOTS);
	for (uint32_t i = 0; i < SLOTS; i++)
		assert_true(present(f, 10000 + i));
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].used_bytes, (uint64_t)SLOTS * BLOCK);
	assert_int_equal(st.tier[KVT_TIER_DRAM].evictions > 0, 1);
}

static void namespaces_are_separate_and_attach_is_idempotent(void **state)
{
	struct fixture *f = *state;
	struct kvt_ns_desc d;
	struct kvt_ns *same, *other;
	struct kvt_key k = key_n(1);
	uint8_t buf[BLOCK] = { 1 };

	small_desc(&d, "test/model");
	assert_int_equal(kvt_ns_attach(f->store, &d, &same), 0);
	assert_ptr_equal(same, f->ns);
	d.tenant_salt_len = 3;
	memcpy(d.tenant_salt, "bob", 3);
	assert_int_equal(kvt_ns_attach(f->store, &d, &other), 0);
	assert_ptr_not_equal(other, f->ns);
	assert_memory_not_equal(kvt_ns_salt(other), kvt_ns_salt(f->ns), KVT_KEY_BYTES);

	assert_int_equal(kvt_put(f->ns, &k, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_lookup(other, &k, 1, NULL), 0);
	assert_int_equal(kvt_get(other, &k, buf, BLOCK), -ENOENT);
	assert_int_equal(kvt_put(other, &k, NULL, buf, BLOCK), 0);
}

static void namespace_keys_are_salted(void **state)
{
	struct fixture *f = *state;
	struct kvt_ns_desc d;
	struct kvt_ns *other;
	uint32_t tokens[48];
	struct kvt_key a[3], b[3];

	for (int i = 0; i < 48; i++)
		tokens[i] = (uint32_t)i;
	small_desc(&d, "test/model");
	d.tenant_salt_len = 1;
	d.tenant_salt[0] = 'x';
	assert_int_equal(kvt_ns_attach(f->store, &d, &other), 0);
	assert_int_equal(kvt_ns_prefix_keys(f->ns, tokens, 48, a, 3), 3);
	assert_int_equal(kvt_ns_prefix_keys(other, tokens, 48, b, 3), 3);
	for (int i = 0; i < 3; i++)
		assert_memory_not_equal(&a[i], &b[i], KVT_KEY_BYTES);
}

static void checksums_at_put_catch_corruption(void **state)
{
	struct fixture f = { .seed = 9 };
	struct kvt_key k = key_n(5);
	uint8_t buf[BLOCK], out[BLOCK];
	struct kvt_slot slot;
	struct kvt_store_stats st = { .size = sizeof(st) };

	assert_int_equal(open_store(&f, NULL, true), 0);
	kvt_test_fill(buf, BLOCK, 5);
	assert_int_equal(kvt_put(f.ns, &k, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_get(f.ns, &k, out, BLOCK), 0);
	/* rot one byte of the slot in place: the next read must refuse it */
	assert_int_equal(kvt_acquire(f.ns, &k, &slot), 0);
	((uint8_t *)slot.data)[100] ^= 0x40;
	kvt_release(f.ns, &slot);
	assert_int_equal(kvt_get(f.ns, &k, out, BLOCK), -EIO);
	assert_int_equal(kvt_get(f.ns, &k, out, BLOCK), -ENOENT);
	assert_int_equal(kvt_store_stats(f.store, &st), 0);
	assert_int_equal(st.checksum_failures, 1);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 0);
	kvt_store_close(f.store);
}

/* A lent slot carries the sum the store kept since the put (where it sums
 * blocks): the sum of the bytes as stored, not as they are now. */
static void a_lent_slot_has_the_sum_kept_at_put(void **state)
{
	struct fixture f = { .seed = 11 }, plain = { .seed = 12 };
	struct kvt_key k = key_n(6);
	uint8_t buf[BLOCK];
	struct kvt_slot slot;
	uint64_t sum = 0;

	(void)state;
	assert_int_equal(open_store(&f, NULL, true), 0);
	kvt_test_fill(buf, BLOCK, 6);
	assert_int_equal(kvt_put(f.ns, &k, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_acquire(f.ns, &k, &slot), 0);
	assert_int_equal(kvt_slot_sum(f.ns, &slot, &sum), 0);
	assert_true(sum == XXH3_64bits(buf, BLOCK));
	((uint8_t *)slot.data)[7] ^= 1; /* rot after the put: the sum stays */
	assert_int_equal(kvt_slot_sum(f.ns, &slot, &sum), 0);
	assert_true(sum == XXH3_64bits(buf, BLOCK));
	kvt_release(f.ns, &slot);
	assert_int_equal(kvt_slot_sum(f.ns, &slot, &sum), -EINVAL); /* let go */
	assert_int_equal(kvt_slot_sum(NULL, &slot, &sum), -EINVAL);
	kvt_store_close(f.store);

	/* a store that sums nothing has nothing to say */
	assert_int_equal(open_store(&plain, NULL, false), 0);
	assert_int_equal(kvt_put(plain.ns, &k, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_acquire(plain.ns, &k, &slot), 0);
	assert_int_equal(kvt_slot_sum(plain.ns, &slot, &sum), -ENOENT);
	kvt_release(plain.ns, &slot);
	kvt_store_close(plain.store);
}

static void bad_arguments_get_the_right_errno(void **state)
{
	struct fixture *f = *state;
	struct kvt_key k = key_n(1);
	uint8_t buf[BLOCK * 2] = { 0 };
	struct kvt_slot slot = { 0 };
	struct kvt_store_opts o;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;

	assert_int_equal(kvt_put(NULL, &k, NULL, buf, BLOCK), -EINVAL);
	assert_int_equal(kvt_put(f->ns, NULL, NULL, buf, BLOCK), -EINVAL);
	assert_int_equal(kvt_put(f->ns, &k, NULL, NULL, BLOCK), -EINVAL);
	assert_int_equal(kvt_put(f->ns, &k, NULL, buf, 0), -EINVAL);
	assert_int_equal(kvt_put(f->ns, &k, NULL, buf, BLOCK + 1), -EINVAL);
	assert_int_equal(kvt_get(f->ns, &k, buf, BLOCK - 1), -EINVAL);
	assert_int_equal(kvt_get(f->ns, &k, buf, BLOCK), -ENOENT);
	assert_int_equal(kvt_lookup(f->ns, NULL, 3, NULL), -EINVAL);
	assert_int_equal(kvt_remove(f->ns, &k), -ENOENT);
	assert_int_equal(kvt_reserve(f->ns, NULL, NULL, &slot), -EINVAL);
	assert_int_equal(kvt_commit(f->ns, &slot), -EINVAL); /* never reserved */
	memset(slot.priv, 0x5a, sizeof(slot.priv)); /* a forged loan */
	slot.data = buf;
	assert_int_equal(kvt_commit(f->ns, &slot), -EINVAL);
	kvt_abort(f->ns, &slot);   /* harmless */
	kvt_release(f->ns, &slot); /* harmless */
	assert_int_equal(kvt_store_stats(f->store, NULL), -EINVAL);

	kvt_store_opts_init(&o, sizeof(o));
	assert_int_equal(kvt_store_open(&o, &s), -EINVAL); /* no DRAM */
	o.dram_bytes = DRAM_BYTES;
	o.policy = "no-such-policy";
	assert_int_equal(kvt_store_open(&o, &s), -EINVAL);
	assert_int_equal(kvt_store_open(NULL, &s), -EINVAL);

	small_desc(&d, "m");
	d.layers = 0;
	assert_int_equal(kvt_ns_attach(f->store, &d, &ns), -EINVAL);
	small_desc(&d, "m");
	d.dtype = 99;
	assert_int_equal(kvt_ns_attach(f->store, &d, &ns), -EINVAL);
	small_desc(&d, "m");
	d.tp_rank = 1; /* of tp_size 1 */
	assert_int_equal(kvt_ns_attach(f->store, &d, &ns), -EINVAL);
	small_desc(&d, "m");
	d.layers = d.kv_heads = d.head_dim = d.block_tokens = 1u << 30; /* 2^121 bytes */
	assert_int_equal(kvt_ns_desc_block_bytes(&d), 0);
	assert_int_equal(kvt_ns_attach(f->store, &d, &ns), -EINVAL);
	small_desc(&d, "m");
	d.block_tokens = 1u << 20; /* 512 MiB blocks: larger than the whole tier */
	assert_int_equal(kvt_ns_attach(f->store, &d, &ns), -EFBIG);
	assert_string_equal(kvt_strerror(-ENOENT), "No such file or directory");
	kvt_store_close(NULL);
}

/* Namespaces that hold nothing can be detached, so attaching ever new ones
 * (70,000, past the store's 65,535) never runs out; one holding a block, or
 * a reservation, stays. */
static void empty_namespaces_detach_and_their_ids_are_reused(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_key k = key_n(7);
	uint8_t buf[BLOCK] = { 1 };
	struct kvt_slot slot;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	char model[32];

	for (int i = 0; i < 70000; i++) {
		snprintf(model, sizeof(model), "m-%d", i);
		small_desc(&d, model);
		assert_int_equal(kvt_ns_attach(f->store, &d, &ns), 0);
		assert_int_equal(kvt_ns_detach(ns), 0);
	}
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.namespaces, 1); /* the fixture's */

	small_desc(&d, "holds-a-block");
	assert_int_equal(kvt_ns_attach(f->store, &d, &ns), 0);
	assert_int_equal(kvt_put(ns, &k, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_ns_detach(ns), -EBUSY);
	assert_int_equal(kvt_remove(ns, &k), 0);
	assert_int_equal(kvt_reserve(ns, &k, NULL, &slot), 0);
	assert_int_equal(kvt_ns_detach(ns), -EBUSY); /* a reservation is a block */
	kvt_abort(ns, &slot);
	assert_int_equal(kvt_ns_detach(ns), 0);
	assert_int_equal(kvt_ns_detach(NULL), -EINVAL);
	/* the fixture's namespace and its blocks are untouched */
	assert_int_equal(kvt_put(f->ns, &k, NULL, buf, BLOCK), 0);
	assert_int_equal(kvt_get(f->ns, &k, buf, BLOCK), 0);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.namespaces, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(block_size_follows_the_layout, setup, teardown),
		cmocka_unit_test_setup_teardown(put_get_round_trips_random_blocks, setup, teardown),
		cmocka_unit_test_setup_teardown(put_of_a_stored_key_is_eexist_and_keeps_the_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(lookup_returns_the_longest_prefix_and_stops_at_a_gap, setup, teardown),
		cmocka_unit_test_setup_teardown(tails_are_evicted_before_their_parents, setup, teardown),
		cmocka_unit_test_setup_teardown(a_used_prefix_outlives_an_unused_one, setup, teardown),
		cmocka_unit_test(plain_lru_evicts_the_least_recent_block),
		cmocka_unit_test_setup_teardown(pinned_blocks_are_never_evicted, setup, teardown),
		cmocka_unit_test_setup_teardown(reserved_slots_are_invisible_until_committed, setup, teardown),
		cmocka_unit_test_setup_teardown(acquired_blocks_survive_remove_until_released, setup, teardown),
		cmocka_unit_test_setup_teardown(acquired_blocks_are_not_evicted, setup, teardown),
		cmocka_unit_test_setup_teardown(capacity_is_exact_after_churn, setup, teardown),
		cmocka_unit_test_setup_teardown(namespaces_are_separate_and_attach_is_idempotent, setup, teardown),
		cmocka_unit_test_setup_teardown(namespace_keys_are_salted, setup, teardown),
		cmocka_unit_test_setup_teardown(empty_namespaces_detach_and_their_ids_are_reused,
						setup, teardown),
		cmocka_unit_test(checksums_at_put_catch_corruption),
		cmocka_unit_test(a_lent_slot_has_the_sum_kept_at_put),
		cmocka_unit_test_setup_teardown(bad_arguments_get_the_right_errno, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
