/* SPDX-License-Identifier: Apache-2.0 */
/* The "ghost-lru" policy through the store's catalog, and its ghost list:
 * fresh blocks first while over their share, LRU order below it, blocks the
 * ghost list remembers coming back proven, tails before parents, held blocks
 * never victims and never ghosts, and every record coming out exactly once
 * after random operations (seed printed). "ghost-ends": request ends before
 * older tails but for the newest, a block that gained a child no longer an
 * end, and the same random operations. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy_helpers.h"
#include "store/ghost.h"

/* Publish block id in DRAM under parent (0 = none). */
static uint32_t add(struct kvt_catalog *cat, uint32_t id, uint32_t parent)
{
	return cat_add(cat, id, parent, 1);
}

static void open_cat(struct kvt_catalog *cat)
{
	open_policy(cat, "ghost-lru");
}

/* Drop block id, as a delete would, whatever the policy says. */
static void cat_drop_id(struct kvt_catalog *cat, uint32_t id)
{
	struct kvt_key k = cat_key(id);
	uint32_t i = kvt_index_find(cat->idx, 0, &k);

	assert_true(i != KVT_NIL);
	kvt_catalog_drop(cat, i);
}

static void fresh_blocks_go_first_over_their_share(void **state)
{
	struct kvt_catalog cat;
	uint32_t a, b;

	/* 1 and 2 used again (proven), then 3..6 fresh: 4 of 6 fresh is over
	 * the starting share (half), so fresh blocks go, oldest first, though
	 * 1 and 2 were used before them */
	open_cat(&cat);
	a = add(&cat, 1, 0);
	b = add(&cat, 2, 0);
	kvt_catalog_touch(&cat, a);
	kvt_catalog_touch(&cat, b);
	for (uint32_t id = 3; id <= 6; id++)
		add(&cat, id, 0);
	assert_int_equal(cat_evict(&cat), 3);
	assert_int_equal(cat_evict(&cat), 4);
	/* 2 fresh of 4: at the share, LRU order: 1 and 2 are the oldest */
	assert_int_equal(cat_evict(&cat), 1);
	kvt_catalog_fini(&cat);
}

static void ghost_list_brings_evicted_blocks_back_proven(void **state)
{
	struct kvt_catalog cat;

	/* 1 (fresh) is the oldest and goes first; 100..139 are proven */
	open_cat(&cat);
	add(&cat, 1, 0);
	for (uint32_t id = 100; id < 140; id++)
		kvt_catalog_touch(&cat, add(&cat, id, 0));
	assert_int_equal(cat_evict(&cat), 1);
	/* stored again, 1 is remembered and comes back proven: when fresh
	 * blocks are over their share, they go first, 2 before 1 though 1 is
	 * older (had it come back fresh, it would have gone first) */
	add(&cat, 1, 0);
	for (uint32_t id = 2; id <= 50; id++)
		add(&cat, id, 0);
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 3);
	kvt_catalog_fini(&cat);
}

static void tails_go_before_their_parents(void **state)
{
	struct kvt_catalog cat;

	/* a chain 1-2-3 (fresh) and a proven lone 4: the chain leaves from its
	 * end, never a parent before its child */
	open_cat(&cat);
	add(&cat, 1, 0);
	add(&cat, 2, 1);
	add(&cat, 3, 2);
	kvt_catalog_touch(&cat, add(&cat, 4, 0));
	assert_int_equal(cat_evict(&cat), 3);
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_evict(&cat), 4);
	assert_int_equal(cat_victim_id(&cat), 0);
	kvt_catalog_fini(&cat);
}

static void held_blocks_are_never_victims_nor_ghosts(void **state)
{
	struct kvt_key two = cat_key(2);
	struct kvt_catalog cat;
	uint32_t a;

	open_cat(&cat);
	a = add(&cat, 1, 0);
	add(&cat, 2, 0);
	kvt_catalog_pin(&cat, a, 1);
	assert_int_equal(cat_victim_id(&cat), 2);
	kvt_catalog_busy(&cat, kvt_catalog_victim(&cat, KVT_TIER_DRAM), 1);
	assert_int_equal(cat_victim_id(&cat), 0); /* both held */
	kvt_catalog_busy(&cat, kvt_index_find(cat.idx, 0, &two), -1);
	kvt_catalog_pin(&cat, a, -1);
	/* 1 came back from its pin fresh (a hold is no eviction), and is the
	 * least recently placed: with 3 proven, it goes first */
	kvt_catalog_touch(&cat, add(&cat, 3, 0));
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_evict(&cat), 3);
	kvt_catalog_fini(&cat);
}

static void request_ends_go_first_but_the_newest(void **state)
{
	struct kvt_catalog cat;

	/* 50 goes before 2, older; 139, the end of the request just stored,
	 * stays while other tails can go */
	ends_scene(&cat, "ghost-ends");
	assert_int_equal(cat_evict(&cat), 50);
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_evict(&cat), 139);
	assert_int_equal(cat_evict(&cat), 138);
	kvt_catalog_fini(&cat);

	/* ghost-lru: LRU over the tails, 2 first */
	ends_scene(&cat, "ghost-lru");
	assert_int_equal(cat_evict(&cat), 2);
	kvt_catalog_fini(&cat);
}

static void a_block_that_gained_a_child_is_no_end(void **state)
{
	struct kvt_catalog cat;
	uint32_t two;

	/* 2 ends a request and is used again (proven), then a longer request
	 * continues it with 3, which is evicted: 2 is a tail again, old, but no
	 * longer an end. Fresh blocks are over their share, so the fresh tail
	 * 60 goes before it; were 2 still an end, it would go first */
	open_policy(&cat, "ghost-ends");
	add(&cat, 1, 0);
	two = add(&cat, 2, 1);
	kvt_catalog_touch(&cat, two);
	add(&cat, 3, 2);
	cat_drop_id(&cat, 3);
	add_chain(&cat, 0, 10, 50);
	add_chain(&cat, 0, 60, 61);
	cat_drop_id(&cat, 61);
	assert_int_equal(cat_evict(&cat), 60);
	assert_int_equal(cat_evict(&cat), 2);
	kvt_catalog_fini(&cat);
}

static void every_record_comes_out_once(void **state)
{
	struct churn c = { .policy = *state ? *state : "ghost-lru", .steps = 40000 };

	every_record_comes_out_once_under(&c);
}

static void ghost_list_forgets_the_oldest(void **state)
{
	struct kvt_ghost g;
	unsigned tag;
	uint64_t age;

	assert_int_equal(kvt_ghost_init(&g, 100), 0);
	assert_int_equal(g.cap, 128);
	for (uint64_t h = 1; h <= 200; h++)
		kvt_ghost_add(&g, h << 40, (unsigned)(h & 1));
	assert_int_equal(g.count[0] + g.count[1], 128);
	/* 1..72 forgotten, 73..200 remembered, with their tag and age */
	assert_false(kvt_ghost_take(&g, 72ull << 40, &tag, &age));
	assert_true(kvt_ghost_take(&g, 73ull << 40, &tag, &age));
	assert_int_equal(tag, 1);
	assert_int_equal(age, 127);
	assert_true(kvt_ghost_take(&g, 200ull << 40, &tag, &age));
	assert_int_equal(tag, 0);
	assert_int_equal(age, 0);
	assert_false(kvt_ghost_take(&g, 200ull << 40, &tag, &age)); /* taken once */
	assert_int_equal(g.count[0] + g.count[1], 126);
	/* added again, a hash is new again */
	kvt_ghost_add(&g, 150ull << 40, 1);
	kvt_ghost_add(&g, 201ull << 40, 0);
	assert_true(kvt_ghost_take(&g, 150ull << 40, &tag, &age));
	assert_int_equal(age, 1);
	/* growing keeps the newest */
	assert_int_equal(kvt_ghost_resize(&g, 1000), 0);
	assert_true(kvt_ghost_take(&g, 201ull << 40, &tag, &age));
	assert_true(kvt_ghost_take(&g, 100ull << 40, &tag, &age));
	kvt_ghost_fini(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fresh_blocks_go_first_over_their_share),
		cmocka_unit_test(ghost_list_brings_evicted_blocks_back_proven),
		cmocka_unit_test(tails_go_before_their_parents),
		cmocka_unit_test(held_blocks_are_never_victims_nor_ghosts),
		cmocka_unit_test(every_record_comes_out_once),
		cmocka_unit_test(request_ends_go_first_but_the_newest),
		cmocka_unit_test(a_block_that_gained_a_child_is_no_end),
		cmocka_unit_test_prestate(every_record_comes_out_once, (void *)"ghost-ends"),
		cmocka_unit_test(ghost_list_forgets_the_oldest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
