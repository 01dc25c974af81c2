/* SPDX-License-Identifier: Apache-2.0 */
/* The "lfu" and "cost" policies through the store's catalog: victim order by
 * use count then recency, GreedyDual-Size priorities and their aging, tails
 * before parents for "cost", and removal of held records. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "catalog_helpers.h"
#include "helpers.h"

/* Publish block id (size 100) in DRAM under parent (0 = none). */
static uint32_t add(struct kvt_catalog *cat, uint8_t id, uint8_t parent)
{
	return cat_add(cat, id, parent, 100);
}

static void lfu_evicts_least_used_then_least_recent(void **state)
{
	struct kvt_catalog cat;
	uint32_t a, c;

	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("lfu"), 16), 0);
	a = add(&cat, 1, 0);
	add(&cat, 2, 0);
	c = add(&cat, 3, 0);
	kvt_catalog_touch(&cat, a);
	kvt_catalog_touch(&cat, a);
	kvt_catalog_touch(&cat, c);
	add(&cat, 4, 0);
	add(&cat, 5, 0);
	/* counts: 1:3, 2:1, 3:2, 4:1, 5:1; among the 1s, 2 is the oldest */
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 4);
	assert_int_equal(cat_evict(&cat), 5);
	assert_int_equal(cat_evict(&cat), 3);
	/* a pinned record is no victim */
	kvt_catalog_pin(&cat, a, 1);
	assert_int_equal(cat_victim_id(&cat), 0);
	kvt_catalog_pin(&cat, a, -1);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_victim_id(&cat), 0);
	kvt_catalog_fini(&cat);
}

/* cost = the key's fifth byte (after the id) */
static double cost_of(const struct kvt_rec *r, void *arg)
{
	return r->key.bytes[4];
}

static uint32_t add_cost(struct kvt_catalog *cat, uint8_t id, uint8_t cost)
{
	struct kvt_key k = cat_key(id);

	k.bytes[4] = cost;
	return cat_add_key(cat, k, 0, 1);
}

static void cost_keeps_the_expensive_until_it_ages(void **state)
{
	struct kvt_catalog cat;

	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("cost"), 16), 0);
	cat.policy[KVT_TIER_DRAM].cost_cb = cost_of;
	add_cost(&cat, 1, 5);
	add_cost(&cat, 2, 1);
	add_cost(&cat, 3, 3);
	assert_int_equal(cat_evict(&cat), 2); /* H = 1; the clock rises to 1 */
	assert_int_equal(cat_evict(&cat), 3); /* H = 3; clock 3 */
	/* cheap blocks arriving now get H = clock + 1: 4, then 5 (ties with 1,
	 * which is older, so 1 goes first), then 6 > 5 */
	add_cost(&cat, 4, 1);
	assert_int_equal(cat_evict(&cat), 4);
	add_cost(&cat, 5, 1);
	assert_int_equal(cat_evict(&cat), 1);
	assert_int_equal(cat_evict(&cat), 5);
	assert_int_equal(cat_victim_id(&cat), 0);
	kvt_catalog_fini(&cat);
}

static void cost_evicts_tails_before_parents(void **state)
{
	struct kvt_catalog cat;

	/* default cost depth + 1: a chain 1-2-3 and a lone 4; only tails 3 and 4
	 * compete, and 4 (depth 0) is cheaper */
	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("cost"), 16), 0);
	add(&cat, 1, 0);
	add(&cat, 2, 1);
	add(&cat, 3, 2);
	add(&cat, 4, 0);
	assert_int_equal(cat_evict(&cat), 4);
	/* then the chain from its end, though its root is the cheapest */
	assert_int_equal(cat_evict(&cat), 3);
	assert_int_equal(cat_evict(&cat), 2);
	assert_int_equal(cat_evict(&cat), 1);
	kvt_catalog_fini(&cat);
}

static void many_records_come_out_in_order(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_catalog cat;
	uint32_t recs[2000];
	uint64_t uses[2000] = { 0 }, last = 0;

	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("lfu"), 2048), 0);
	for (uint32_t n = 0; n < 2000; n++) {
		struct kvt_key k;

		memset(&k, 0, sizeof(k));
		memcpy(k.bytes, &n, sizeof(n));
		assert_int_equal(kvt_index_insert(cat.idx, 0, &k, &recs[n]), 0);
		kvt_index_rec(cat.idx, recs[n])->size = 1;
		kvt_catalog_publish(&cat, recs[n], KVT_TIER_DRAM, NULL);
		uses[n] = 1;
	}
	for (int t = 0; t < 20000; t++) {
		uint32_t n = (uint32_t)(kvt_test_rand(&seed) % 2000);

		kvt_catalog_touch(&cat, recs[n]);
		uses[n]++;
	}
	/* victims come out with non-decreasing use counts */
	for (int k = 0; k < 2000; k++) {
		uint32_t v = kvt_catalog_victim(&cat, KVT_TIER_DRAM), n;

		assert_true(v != KVT_NIL);
		memcpy(&n, kvt_index_rec(cat.idx, v)->key.bytes, sizeof(n));
		assert_true(uses[n] >= last);
		last = uses[n];
		kvt_catalog_drop(&cat, v);
	}
	assert_int_equal(kvt_catalog_victim(&cat, KVT_TIER_DRAM), KVT_NIL);
	kvt_catalog_fini(&cat);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lfu_evicts_least_used_then_least_recent),
		cmocka_unit_test(cost_keeps_the_expensive_until_it_ages),
		cmocka_unit_test(cost_evicts_tails_before_parents),
		cmocka_unit_test(many_records_come_out_in_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
