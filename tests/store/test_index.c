/* SPDX-License-Identifier: Apache-2.0 */
/* The block index against a plain reference model: random inserts, finds and
 * erases over a key space small enough to collide often, through table growth
 * and backward-shift deletion; and the parent/child links. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "store/index.h"

#define KEYS 50000

static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes + 4, &n, sizeof(n));
	return k;
}

static void matches_a_reference_model_under_churn(void **state)
{
	uint32_t *ref = malloc(KEYS * sizeof(*ref)); /* record of key n, or KVT_NIL */
	uint64_t s = kvt_test_seed();
	struct kvt_index *idx;
	size_t live = 0;

	assert_int_equal(kvt_index_create(0, &idx), 0);
	for (uint32_t n = 0; n < KEYS; n++)
		ref[n] = KVT_NIL;
	for (int op = 0; op < 600000; op++) {
		uint32_t n = (uint32_t)(kvt_test_rand(&s) % KEYS), r;
		struct kvt_key k = key_n(n);
		uint16_t ns = (uint16_t)(1 + n % 3);

		switch (kvt_test_rand(&s) % 4) {
		case 0:
		case 1:
			if (ref[n] == KVT_NIL) {
				assert_int_equal(kvt_index_insert(idx, ns, &k, &r), 0);
				ref[n] = r;
				live++;
			} else {
				assert_int_equal(kvt_index_insert(idx, ns, &k, &r), -EEXIST);
				assert_int_equal(r, ref[n]);
			}
			break;
		case 2:
			assert_int_equal(kvt_index_find(idx, ns, &k), ref[n]);
			/* the same key in another namespace is another block */
			assert_int_equal(kvt_index_find(idx, (uint16_t)(ns + 3), &k), KVT_NIL);
			break;
		case 3:
			if (ref[n] != KVT_NIL) {
				kvt_index_erase(idx, ref[n]);
				ref[n] = KVT_NIL;
				live--;
			}
			break;
		}
	}
	assert_int_equal(kvt_index_count(idx), live);
	for (uint32_t n = 0; n < KEYS; n++) {
		struct kvt_key k = key_n(n);
		uint32_t r = kvt_index_find(idx, (uint16_t)(1 + n % 3), &k);
		assert_int_equal(r, ref[n]);
		if (r != KVT_NIL)
			assert_memory_equal(kvt_index_rec(idx, r)->key.bytes, k.bytes, KVT_KEY_BYTES);
	}
	kvt_index_destroy(idx);
	free(ref);
}

static void erase_orphans_children_and_unlinks_from_the_parent(void **state)
{
	struct kvt_index *idx;
	uint32_t root, a, b, grand;
	struct kvt_key k0 = key_n(0), k1 = key_n(1), k2 = key_n(2), k3 = key_n(3);

	assert_int_equal(kvt_index_create(16, &idx), 0);
	assert_int_equal(kvt_index_insert(idx, 1, &k0, &root), 0);
	assert_int_equal(kvt_index_insert(idx, 1, &k1, &a), 0);
	assert_int_equal(kvt_index_insert(idx, 1, &k2, &b), 0);
	assert_int_equal(kvt_index_insert(idx, 1, &k3, &grand), 0);
	kvt_index_link(idx, root, a);
	kvt_index_link(idx, root, b);
	kvt_index_link(idx, a, grand);

	kvt_index_unlink(idx, b); /* a middle-or-first sibling leaves the list */
	assert_int_equal(kvt_index_rec(idx, b)->parent, KVT_NIL);
	assert_int_equal(kvt_index_rec(idx, root)->first_child, a);
	assert_int_equal(kvt_index_rec(idx, a)->next_sibling, KVT_NIL);

	kvt_index_erase(idx, a); /* its child is orphaned, its parent childless */
	assert_int_equal(kvt_index_rec(idx, grand)->parent, KVT_NIL);
	assert_int_equal(kvt_index_rec(idx, root)->first_child, KVT_NIL);
	assert_int_equal(kvt_index_find(idx, 1, &k1), KVT_NIL);
	assert_int_equal(kvt_index_find(idx, 1, &k3), grand);
	assert_int_equal(kvt_index_count(idx), 3);
	assert_true(kvt_index_memory(idx) > 0);
	kvt_index_destroy(idx);
	kvt_index_destroy(NULL);
}

static void a_middle_sibling_unlinks_and_the_list_stays_whole(void **state)
{
	struct kvt_index *idx;
	uint32_t parent, kid[5], seen = 0;
	struct kvt_key k = key_n(100);

	assert_int_equal(kvt_index_create(16, &idx), 0);
	assert_int_equal(kvt_index_insert(idx, 1, &k, &parent), 0);
	for (int i = 0; i < 5; i++) {
		k = key_n(200 + (uint32_t)i);
		assert_int_equal(kvt_index_insert(idx, 1, &k, &kid[i]), 0);
		kvt_index_link(idx, parent, kid[i]);
	}
	kvt_index_unlink(idx, kid[2]); /* middle */
	kvt_index_unlink(idx, kid[0]); /* last of the list (linked first) */
	kvt_index_unlink(idx, kid[4]); /* head of the list */
	for (uint32_t c = kvt_index_rec(idx, parent)->first_child; c != KVT_NIL;
	     c = kvt_index_rec(idx, c)->next_sibling) {
		assert_true(c == kid[1] || c == kid[3]);
		assert_int_equal(kvt_index_rec(idx, c)->parent, parent);
		seen++;
	}
	assert_int_equal(seen, 2);
	kvt_index_erase(idx, kid[3]);
	assert_int_equal(kvt_index_rec(idx, parent)->first_child, kid[1]);
	assert_int_equal(kvt_index_rec(idx, kid[1])->prev_sibling, KVT_NIL);
	assert_int_equal(kvt_index_rec(idx, kid[1])->next_sibling, KVT_NIL);
	kvt_index_destroy(idx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(matches_a_reference_model_under_churn),
		cmocka_unit_test(erase_orphans_children_and_unlinks_from_the_parent),
		cmocka_unit_test(a_middle_sibling_unlinks_and_the_list_stays_whole),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
