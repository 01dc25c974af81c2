/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the tests of the policies that learn from blocks coming back
 * (test_policy_ghost, test_policy_class): a catalog under a policy by name,
 * blocks with a reuse class, the request ends both "-ends" forms are tested
 * on, and the random run after which every record must come out exactly
 * once. Include after <cmocka.h>. */
#ifndef KVT_TESTS_POLICY_HELPERS_H
#define KVT_TESTS_POLICY_HELPERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "catalog_helpers.h"
#include "helpers.h"
#include "store/policy.h"

static inline void open_policy(struct kvt_catalog *cat, const char *name)
{
	assert_non_null(kvt_policy_find(name));
	assert_int_equal(kvt_catalog_init(cat, kvt_policy_find(name), 64), 0);
}

/* Publish block id in DRAM under parent (0 = none) with reuse class cls. */
static inline uint32_t add_class(struct kvt_catalog *cat, uint32_t id, uint32_t parent,
				 unsigned cls)
{
	struct kvt_key k = cat_key(id), p = cat_key(parent);
	uint32_t i;

	assert_int_equal(kvt_index_insert(cat->idx, 0, &k, &i), 0);
	kvt_index_rec(cat->idx, i)->size = 1;
	kvt_index_rec(cat->idx, i)->reuse_class = (uint8_t)cls;
	kvt_catalog_publish(cat, i, KVT_TIER_DRAM, parent ? &p : NULL);
	return i;
}

/* A chain of blocks first..last of class 0, each under the one before;
 * first under parent (0 = none). */
static inline void add_chain(struct kvt_catalog *cat, uint32_t parent, uint32_t first,
			     uint32_t last)
{
	for (uint32_t id = first; id <= last; id++, parent = id - 1)
		add_class(cat, id, parent, 0);
}

/* Under policy `name`: 1-2-3 stored, 3 evicted, so 2 is a tail that had a
 * child; 50 a request of one block (an end); then 100..139 a request whose
 * end is 139. All fresh, of class 0. */
static inline void ends_scene(struct kvt_catalog *cat, const char *name)
{
	open_policy(cat, name);
	add_chain(cat, 0, 1, 3);
	assert_int_equal(cat_evict(cat), 3); /* the only tail */
	add_class(cat, 50, 0, 0);
	add_chain(cat, 0, 100, 139);
}

/* Of every_record_comes_out_once: the reuse class of block x (0..N-1),
 * and whether blocks of a class are ever used again. */
struct churn {
	const char *policy;
	int steps;
	unsigned (*class_of)(uint32_t x); /* NULL: class 0 */
	bool (*used_again)(unsigned cls); /* NULL: all are */
};

/* Under policy c->policy, c->steps random operations on chains of up to 8
 * blocks (ids 8c+1 ... 8c+8): stores, uses, pins, evictions and returns;
 * every victim is a live, unpinned tail. Then a drain: every live record
 * comes out once, tails first, and nothing after. Seed printed. */
static inline void every_record_comes_out_once_under(const struct churn *c)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_catalog cat;
	enum { N = 3000 };
	uint32_t *recs = calloc(N, sizeof(*recs));
	bool *live = calloc(N, sizeof(*live)), *out = calloc(N, sizeof(*out));
	int *pinned = calloc(N, sizeof(*pinned)), n_live = 0;

	assert_true(recs && live && out && pinned);
	print_message("policy %s\n", c->policy);
	open_policy(&cat, c->policy);
	for (int step = 0; step < c->steps; step++) {
		uint32_t x = (uint32_t)(kvt_test_rand(&seed) % N), op = kvt_test_rand(&seed) % 10;
		unsigned cls = c->class_of ? c->class_of(x) : 0;

		if (!live[x] && op < 5) {
			uint32_t parent = x % 8 && live[x - 1] ? x : 0; /* id x+1's parent is id x */

			recs[x] = add_class(&cat, x + 1, parent, cls);
			live[x] = true;
			n_live++;
		} else if (live[x] && op < 7 && (!c->used_again || c->used_again(cls))) {
			kvt_catalog_touch(&cat, recs[x]);
		} else if (live[x] && op == 7) {
			pinned[x] = !pinned[x];
			kvt_catalog_pin(&cat, recs[x], pinned[x] ? 1 : -1);
		} else if (n_live > 200) {
			uint32_t v = kvt_catalog_victim(&cat, KVT_TIER_DRAM), id;
			const struct kvt_rec *r;

			assert_true(v != KVT_NIL);
			r = kvt_index_rec(cat.idx, v);
			assert_int_equal(r->pins, 0);
			assert_int_equal(r->kids_here, 0); /* a tail */
			id = cat_id(&cat, v) - 1;
			assert_true(live[id]);
			kvt_catalog_drop(&cat, v);
			live[id] = false;
			n_live--;
		}
	}
	for (uint32_t x = 0; x < N; x++)
		if (live[x] && pinned[x])
			kvt_catalog_pin(&cat, recs[x], -1);
	for (int k = 0; k < n_live; k++) {
		uint32_t v = kvt_catalog_victim(&cat, KVT_TIER_DRAM), id;

		assert_true(v != KVT_NIL);
		assert_int_equal(kvt_index_rec(cat.idx, v)->kids_here, 0);
		id = cat_id(&cat, v) - 1;
		assert_true(live[id] && !out[id]);
		out[id] = true;
		kvt_catalog_drop(&cat, v);
	}
	assert_int_equal(kvt_catalog_victim(&cat, KVT_TIER_DRAM), KVT_NIL);
	kvt_catalog_fini(&cat);
	free(recs);
	free(live);
	free(out);
	free(pinned);
}

#endif
