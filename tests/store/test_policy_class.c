/* SPDX-License-Identifier: Apache-2.0 */
/* The "class-lru" policy through the store's catalog: a reuse class whose
 * fresh blocks never come back is learnt (from uses, and from blocks the
 * ghost list remembers coming back) and its fresh blocks go first, while
 * those of a class that comes back keep their LRU place; with class 0 (no
 * hint) it evicts exactly as tail-lru does (random operations side by
 * side, seed printed); every record comes out once after random operations
 * of random classes, for class-lru and class-ends; class-ends sends request
 * ends first. And through the store: kvt_put_class and kvt_reserve_class
 * carry the class to the policy, and refuse one over KVT_REUSE_CLASS_MAX. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier/store.h"
#include "policy_helpers.h"
#include "store/ghost.h"

enum { WARM = 3, COLD = 9 };

/* Evict everything, tails first. */
static void drain(struct kvt_catalog *cat)
{
	while (kvt_catalog_victim(cat, KVT_TIER_DRAM) != KVT_NIL)
		cat_evict(cat);
}

/* The scene the tests look at, in an empty tier: 1, a fresh WARM block, the
 * oldest; 2..21, WARM blocks used again; then 30, a fresh COLD block, the
 * newest. */
static void scene(struct kvt_catalog *cat)
{
	add_class(cat, 1, 0, WARM);
	for (uint32_t id = 2; id <= 21; id++)
		kvt_catalog_touch(cat, add_class(cat, id, 0, WARM));
	add_class(cat, 30, 0, COLD);
}

static void a_class_that_never_comes_back_goes_first(void **state)
{
	struct kvt_catalog cat;

	/* nothing learnt yet: LRU order over the tails, the old fresh 1 first
	 * and the new fresh 30 last */
	open_policy(&cat, "class-lru");
	scene(&cat);
	assert_int_equal(cat_evict(&cat), 1);
	for (uint32_t id = 2; id <= 21; id++)
		assert_int_equal(cat_evict(&cat), id);
	assert_int_equal(cat_evict(&cat), 30);
	kvt_catalog_fini(&cat);

	/* 100 WARM blocks all used again, 100 COLD ones never: COLD is learnt
	 * cold, and its fresh block 30 goes first, before the older fresh WARM
	 * block 1, which keeps its LRU place */
	open_policy(&cat, "class-lru");
	for (uint32_t id = 1000; id < 1100; id++) {
		kvt_catalog_touch(&cat, add_class(&cat, id, 0, WARM));
		add_class(&cat, id + 1000, 0, COLD);
	}
	drain(&cat);
	scene(&cat);
	assert_int_equal(cat_evict(&cat), 30);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_evict(&cat), 2);
	kvt_catalog_fini(&cat);
}

static void a_class_is_learnt_from_blocks_coming_back_after_eviction(void **state)
{
	struct kvt_catalog cat;

	/* 100 WARM and 100 COLD blocks stored, all evicted fresh; the WARM ones
	 * are stored again while the ghost list remembers them: they came back,
	 * the COLD ones did not */
	open_policy(&cat, "class-lru");
	for (uint32_t id = 1000; id < 1100; id++) {
		add_class(&cat, id, 0, WARM);
		add_class(&cat, id + 1000, 0, COLD);
	}
	drain(&cat);
	for (uint32_t id = 1000; id < 1100; id++)
		add_class(&cat, id, 0, WARM);
	drain(&cat);
	scene(&cat);
	assert_int_equal(cat_evict(&cat), 30);
	assert_int_equal(cat_evict(&cat), 1);
	kvt_catalog_fini(&cat);
}

static void a_tail_goes_before_its_parent_whatever_its_class(void **state)
{
	struct kvt_catalog cat;

	/* COLD learnt; a chain 1-2 of WARM with a COLD tail 3: the tail goes
	 * first, then the chain from its end */
	open_policy(&cat, "class-lru");
	for (uint32_t id = 1000; id < 1100; id++) {
		kvt_catalog_touch(&cat, add_class(&cat, id, 0, WARM));
		add_class(&cat, id + 1000, 0, COLD);
	}
	drain(&cat);
	add_class(&cat, 1, 0, COLD);
	add_class(&cat, 2, 1, COLD);
	kvt_catalog_touch(&cat, add_class(&cat, 3, 0, WARM));
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_evict(&cat), 3);
	assert_int_equal(cat_victim_id(&cat), 0);
	kvt_catalog_fini(&cat);
}

static void class_0_evicts_as_tail_lru_does(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_catalog a, b;
	enum { N = 2000 };
	uint32_t *ra = calloc(N, sizeof(*ra)), *rb = calloc(N, sizeof(*rb));
	bool *live = calloc(N, sizeof(*live));
	int pinned[N] = { 0 }, n_live = 0;

	assert_true(ra && rb && live);
	open_policy(&a, "tail-lru");
	open_policy(&b, "class-lru");
	/* chains of up to 8 blocks, random uses, pins, evictions and returns,
	 * the same in both: every victim the same */
	for (int step = 0; step < 40000; step++) {
		uint32_t x = (uint32_t)(kvt_test_rand(&seed) % N), op = kvt_test_rand(&seed) % 10;

		if (!live[x] && op < 5) {
			uint32_t parent = x % 8 && live[x - 1] ? x : 0;

			ra[x] = add_class(&a, x + 1, parent, 0);
			rb[x] = add_class(&b, x + 1, parent, 0);
			live[x] = true;
			n_live++;
		} else if (live[x] && op < 7) {
			kvt_catalog_touch(&a, ra[x]);
			kvt_catalog_touch(&b, rb[x]);
		} else if (live[x] && op == 7) {
			pinned[x] = !pinned[x];
			kvt_catalog_pin(&a, ra[x], pinned[x] ? 1 : -1);
			kvt_catalog_pin(&b, rb[x], pinned[x] ? 1 : -1);
		} else if (n_live > 150) {
			uint32_t id = cat_victim_id(&a);

			if (id != cat_victim_id(&b))
				fail_msg("step %d: tail-lru evicts %u, class-lru %u", step, id,
					 cat_victim_id(&b));
			cat_evict(&a);
			cat_evict(&b);
			live[id - 1] = false;
			n_live--;
		}
	}
	kvt_catalog_fini(&a);
	kvt_catalog_fini(&b);
	free(ra);
	free(rb);
	free(live);
}

/* Classes by chain; those of classes 0, 3, 6, ... never used again. */
static unsigned class_by_chain(uint32_t x)
{
	return (x / 8) % (KVT_REUSE_CLASS_MAX + 1);
}

static bool reused_unless_multiple_of_3(unsigned cls)
{
	return cls % 3;
}

static void every_record_comes_out_once(void **state)
{
	struct churn c = {
		.policy = *state,
		.steps = 60000,
		.class_of = class_by_chain,
		.used_again = reused_unless_multiple_of_3,
	};

	every_record_comes_out_once_under(&c);
}

static void class_ends_sends_request_ends_first_but_the_newest(void **state)
{
	struct kvt_catalog cat;

	/* 50 goes before the older 2, and 139, the newest end, stays while
	 * other tails can go */
	ends_scene(&cat, "class-ends");
	assert_int_equal(cat_evict(&cat), 50);
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_evict(&cat), 139);
	kvt_catalog_fini(&cat);
}

static void ghost_list_keeps_five_bit_tags(void **state)
{
	struct kvt_ghost g;
	unsigned tag;
	uint64_t age;

	assert_int_equal(kvt_ghost_init(&g, 64), 0);
	for (uint64_t h = 1; h <= 32; h++)
		kvt_ghost_add(&g, h << 40 | 0x1f, (unsigned)h - 1);
	for (uint64_t h = 1; h <= 32; h++) {
		assert_true(kvt_ghost_take(&g, h << 40, &tag, &age));
		assert_int_equal(tag, h - 1);
	}
	assert_int_equal(g.count[0] + g.count[1], 0);
	/* a hash whose key bits are all zero is remembered too */
	kvt_ghost_add(&g, 0, 7);
	assert_true(kvt_ghost_take(&g, 3, &tag, &age));
	assert_int_equal(tag, 7);
	kvt_ghost_fini(&g);
}

/* A store of 1 MiB of DRAM holding 128 blocks of 8 KiB, policy class-lru. */
#define BLOCK (2u * 2 * 1 * 64 * 2 * 16)
#define SLOTS 128

struct st {
	struct kvt_store *s;
	struct kvt_ns *ns;
	void *buf;
};

static void st_open(struct st *t)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = SLOTS * BLOCK;
	o.dram_huge_pages = false;
	o.policy = "class-lru";
	assert_int_equal(kvt_store_open(&o, &t->s), 0);
	kvt_ns_desc_init(&d, sizeof(d));
	strcpy(d.model_id, "test/class");
	d.layers = 2;
	d.kv_heads = 1;
	d.head_dim = 64;
	d.block_tokens = 16;
	assert_int_equal(kvt_ns_attach(t->s, &d, &t->ns), 0);
	assert_int_equal(kvt_ns_block_bytes(t->ns), BLOCK);
	t->buf = calloc(1, BLOCK);
	assert_non_null(t->buf);
}

static void st_close(struct st *t)
{
	free(t->buf);
	kvt_store_close(t->s);
}

/* Store block id under parent (0 = none) with class cls, by kvt_put_class
 * or (odd ids) kvt_reserve_class and kvt_commit. */
static void st_put(struct st *t, uint32_t id, uint32_t parent, unsigned cls)
{
	struct kvt_key k = cat_key(id), p = cat_key(parent);
	struct kvt_slot slot;

	if (id % 2 == 0) {
		assert_int_equal(kvt_put_class(t->ns, &k, parent ? &p : NULL, t->buf, BLOCK, cls), 0);
		return;
	}
	assert_int_equal(kvt_reserve_class(t->ns, &k, parent ? &p : NULL, cls, &slot), 0);
	assert_int_equal(kvt_commit(t->ns, &slot), 0);
}

static bool st_present(struct st *t, uint32_t id)
{
	struct kvt_key k = cat_key(id);

	return kvt_lookup(t->ns, &k, 1, NULL) == 1;
}

/* Through the store: blocks of class `warm` used again, of `cold` never;
 * then a chain of 128 used blocks fills the tier, and three fresh blocks
 * come: 9001 (warm), 9002 (cold), 9003 (warm). Whether 9002 made room for
 * 9003 (it is cold), or the chain's tail did (LRU order). */
static bool cold_block_went_first(unsigned warm, unsigned cold)
{
	struct kvt_key chain[SLOTS];
	struct st t;
	bool went;

	st_open(&t);
	for (uint32_t id = 1000; id < 1100; id++) {
		struct kvt_key k = cat_key(id);

		st_put(&t, id, 0, warm);
		assert_int_equal(kvt_lookup(t.ns, &k, 1, NULL), 1);
		st_put(&t, id + 1000, 0, cold);
	}
	for (uint32_t j = 0; j < SLOTS; j++) {
		st_put(&t, 5000 + j, j ? 5000 + j - 1 : 0, warm);
		chain[j] = cat_key(5000 + j);
	}
	assert_int_equal(kvt_lookup(t.ns, chain, SLOTS, NULL), SLOTS);
	st_put(&t, 9001, 0, warm);
	st_put(&t, 9002, 0, cold);
	st_put(&t, 9003, 0, warm);
	went = !st_present(&t, 9002);
	assert_true(st_present(&t, 9001));
	assert_true(st_present(&t, 9003));
	assert_int_equal(st_present(&t, 5000 + SLOTS - 3), went);
	st_close(&t);
	return went;
}

static void the_store_passes_the_class_to_its_policy(void **state)
{
	struct st t;
	struct kvt_slot slot;
	struct kvt_key k = cat_key(1);

	assert_true(cold_block_went_first(WARM, COLD));
	/* the same blocks with no class: LRU order */
	assert_false(cold_block_went_first(0, 0));

	st_open(&t);
	assert_int_equal(kvt_put_class(t.ns, &k, NULL, t.buf, BLOCK, KVT_REUSE_CLASS_MAX + 1),
			 -EINVAL);
	assert_int_equal(kvt_reserve_class(t.ns, &k, NULL, KVT_REUSE_CLASS_MAX + 1, &slot),
			 -EINVAL);
	assert_int_equal(kvt_put_class(t.ns, &k, NULL, t.buf, BLOCK, KVT_REUSE_CLASS_MAX), 0);
	assert_int_equal(kvt_put_class(t.ns, &k, NULL, t.buf, BLOCK, 1), -EEXIST);
	st_close(&t);
}

static void the_reference_class_is_the_bit_length(void **state)
{
	assert_int_equal(kvt_reuse_class_of(0), 0);
	assert_int_equal(kvt_reuse_class_of(1), 1);
	assert_int_equal(kvt_reuse_class_of(2), 2);
	assert_int_equal(kvt_reuse_class_of(3), 2);
	assert_int_equal(kvt_reuse_class_of(19), 5);
	assert_int_equal(kvt_reuse_class_of(400), 9);
	assert_int_equal(kvt_reuse_class_of(16383), 14);
	assert_int_equal(kvt_reuse_class_of(16384), KVT_REUSE_CLASS_MAX);
	assert_int_equal(kvt_reuse_class_of(UINT64_MAX), KVT_REUSE_CLASS_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_class_that_never_comes_back_goes_first),
		cmocka_unit_test(a_class_is_learnt_from_blocks_coming_back_after_eviction),
		cmocka_unit_test(a_tail_goes_before_its_parent_whatever_its_class),
		cmocka_unit_test(class_0_evicts_as_tail_lru_does),
		cmocka_unit_test_prestate(every_record_comes_out_once, (void *)"class-lru"),
		cmocka_unit_test_prestate(every_record_comes_out_once, (void *)"class-ends"),
		cmocka_unit_test(class_ends_sends_request_ends_first_but_the_newest),
		cmocka_unit_test(ghost_list_keeps_five_bit_tags),
		cmocka_unit_test(the_store_passes_the_class_to_its_policy),
		cmocka_unit_test(the_reference_class_is_the_bit_length),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
