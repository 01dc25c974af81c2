/* SPDX-License-Identifier: Apache-2.0 */
/* A block being written down counts as gone from its parent
 * (kvt_catalog_leaving): under tail-lru its parent is the next victim when
 * it is the coldest tail, before hotter tails, as it would be once the child
 * had left; a write that does not take (kvt_catalog_stayed) makes the
 * parent a parent again; a move, a retire or a drop of either end while the
 * write runs leaves every count right; and after random writes, moves,
 * holds and removals (seed printed) every record's kids_here matches its
 * children and every record still comes out of the policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "catalog_helpers.h"
#include "helpers.h"

#define SSD KVT_TIER_SSD
#define DRAM KVT_TIER_DRAM

static void open_cat(struct kvt_catalog *cat)
{
	assert_int_equal(kvt_catalog_init(cat, kvt_policy_find("tail-lru"), 64), 0);
}

static struct kvt_rec *r_of(struct kvt_catalog *cat, uint32_t i)
{
	return kvt_index_rec(cat->idx, i);
}

/* Every live record's kids_here is its live children in its tier that are
 * not being written out of it; a dying one counts none. */
static void check_counts(struct kvt_catalog *cat)
{
	for (uint32_t i = 0; i < kvt_index_high(cat->idx); i++) {
		struct kvt_rec *r = r_of(cat, i);
		uint32_t n = 0;

		if (r->state != KVT_REC_LIVE && r->state != KVT_REC_DYING)
			continue;
		for (uint32_t c = r->first_child; c != KVT_NIL; c = r_of(cat, c)->next_sibling)
			n += r_of(cat, c)->state == KVT_REC_LIVE && r_of(cat, c)->tier == r->tier &&
			     !(r_of(cat, c)->flags & KVT_REC_LEAVING);
		if (r->state == KVT_REC_DYING)
			n = 0;
		if (r->kids_here != n)
			fail_msg("record %u (id %u) counts %u children here, has %u", i,
				 cat_id(cat, i), r->kids_here, n);
	}
}

/* A write of DRAM's victim begins, as the demoter's pick does it. */
static uint32_t write_victim(struct kvt_catalog *cat)
{
	uint32_t v = kvt_catalog_victim(cat, DRAM);

	assert_true(v != KVT_NIL);
	kvt_catalog_busy(cat, v, +1);
	kvt_catalog_leaving(cat, v);
	return v;
}

/* The write of i took: it moves down, as the demoter's finish does. */
static void write_took(struct kvt_catalog *cat, uint32_t i)
{
	kvt_catalog_move(cat, i, SSD);
	kvt_catalog_busy(cat, i, -1);
}

/* The write of i did not take: it stays. */
static void write_failed(struct kvt_catalog *cat, uint32_t i)
{
	kvt_catalog_stayed(cat, i);
	kvt_catalog_busy(cat, i, -1);
}

/* Chain 1..5, then roots 10, 11 (used later: hotter). */
static void chain_and_roots(struct kvt_catalog *cat)
{
	cat_add(cat, 1, 0, 1);
	for (uint32_t id = 2; id <= 5; id++)
		cat_add(cat, id, id - 1, 1);
	cat_add(cat, 10, 0, 1);
	cat_add(cat, 11, 0, 1);
}

static void parent_of_a_block_being_written_is_the_next_victim(void **state)
{
	struct kvt_catalog cat;

	(void)state;
	open_cat(&cat);
	chain_and_roots(&cat);
	/* tail-lru one block at a time: 5, then 4, 3, 2, 1, then the roots */
	for (uint32_t want = 5; want >= 1; want--) {
		assert_int_equal(cat_victim_id(&cat), want);
		write_victim(&cat);
		check_counts(&cat);
	}
	assert_int_equal(cat_victim_id(&cat), 10);
	kvt_catalog_fini(&cat);
}

static void a_write_that_fails_makes_the_parent_a_parent_again(void **state)
{
	struct kvt_catalog cat;
	uint32_t five, four;

	(void)state;
	open_cat(&cat);
	chain_and_roots(&cat);
	five = write_victim(&cat);
	four = write_victim(&cat);
	assert_int_equal(cat_victim_id(&cat), 3);
	/* 4 fails first: 3 has a child again */
	write_failed(&cat, four);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, four)->kids_here, 0);
	/* 4 is a tail while 5 is written, and colder than the roots */
	assert_int_equal(cat_victim_id(&cat), 4);
	/* 5 fails: 4 is a parent again, 5 a tail, the coldest */
	write_failed(&cat, five);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, four)->kids_here, 1);
	assert_int_equal(cat_victim_id(&cat), 5);
	assert_int_equal(cat.blocks[DRAM], 7);
	kvt_catalog_fini(&cat);
}

static void parent_written_first_then_the_child_fails(void **state)
{
	struct kvt_catalog cat;
	uint32_t five, four;

	(void)state;
	open_cat(&cat);
	chain_and_roots(&cat);
	five = write_victim(&cat);
	four = write_victim(&cat);
	/* the parent's write (a later batch could end first) takes */
	write_took(&cat, four);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, four)->kids_here, 0); /* 5 is in DRAM */
	write_failed(&cat, five);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, four)->kids_here, 0);
	/* 3 lost 4 for good and is the coldest tail; 5 a tail too */
	assert_int_equal(cat_victim_id(&cat), 3);
	assert_int_equal(cat.blocks[DRAM] + cat.blocks[SSD], 7);
	kvt_catalog_fini(&cat);
}

static void parent_goes_down_and_up_while_its_child_is_written(void **state)
{
	struct kvt_catalog cat;
	uint32_t five, four;

	(void)state;
	open_cat(&cat);
	chain_and_roots(&cat);
	five = write_victim(&cat);
	four = write_victim(&cat);
	write_took(&cat, four);
	/* 4 is read back up while 5 is still being written: 5 counts as
	 * gone from it until that write ends */
	kvt_catalog_move(&cat, four, DRAM);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, four)->kids_here, 0);
	write_failed(&cat, five);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, four)->kids_here, 1);
	assert_int_equal(cat_victim_id(&cat), 5);
	kvt_catalog_fini(&cat);
}

static void child_and_parent_written_in_one_batch_both_move(void **state)
{
	struct kvt_catalog cat;
	uint32_t five, four;

	(void)state;
	open_cat(&cat);
	chain_and_roots(&cat);
	five = write_victim(&cat);
	four = write_victim(&cat);
	write_took(&cat, five);
	check_counts(&cat);
	write_took(&cat, four);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, four)->kids_here, 1); /* 5, on SSD too */
	assert_int_equal(r_of(&cat, five)->flags & KVT_REC_LEAVING, 0);
	assert_int_equal(cat_victim_id(&cat), 3);
	assert_int_equal(cat.blocks[DRAM], 5);
	assert_int_equal(cat.blocks[SSD], 2);
	kvt_catalog_fini(&cat);
}

static void removals_during_the_write_leave_counts_right(void **state)
{
	struct kvt_catalog cat;
	uint32_t five, four, three;

	(void)state;
	open_cat(&cat);
	chain_and_roots(&cat);
	five = write_victim(&cat);
	four = write_victim(&cat);
	three = write_victim(&cat);
	/* 4 removed while written: retired (a writer holds it), its child
	 * orphaned; then 3 is dropped by the admission rule's way (not held:
	 * let its write end first) */
	kvt_catalog_retire(&cat, four);
	check_counts(&cat);
	write_failed(&cat, three);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, three)->kids_here, 0);
	kvt_catalog_busy(&cat, four, -1);
	kvt_catalog_drop(&cat, four);
	check_counts(&cat);
	/* 5, orphaned while being written, stays: no parent to count it */
	write_failed(&cat, five);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, five)->parent, KVT_NIL);
	kvt_catalog_drop(&cat, three);
	check_counts(&cat);
	assert_int_equal(r_of(&cat, five)->flags & KVT_REC_LEAVING, 0);
	assert_int_equal(cat.blocks[DRAM], 5);
	kvt_catalog_fini(&cat);
}

/* Random operations over chains in two tiers, as the store's demoter,
 * readers and savers do them; counts checked after each. Then every write
 * ends, every hold goes, and every DRAM record comes out as a victim. */
static void counts_stay_right_under_random_operations(void **state)
{
	struct kvt_catalog cat;
	uint64_t seed = kvt_test_seed();
	uint32_t writing[64], n_writing = 0, next_id = 1;

	(void)state;
	srand((unsigned)seed);
	open_cat(&cat);
	for (int step = 0; step < 20000; step++) {
		int op = rand() % 8;
		uint32_t hi = kvt_index_high(cat.idx), i = hi ? (uint32_t)rand() % hi : 0;
		struct kvt_rec *r = hi ? r_of(&cat, i) : NULL;

		if (op == 0 || op == 1 || !hi) {
			/* a save: a chain's next block, or a new root */
			uint32_t parent = next_id > 1 && rand() % 8 ? next_id - 1 - (uint32_t)rand() % 3 : 0;
			struct kvt_key pk = cat_key(parent);
			uint32_t p = parent ? kvt_index_find(cat.idx, 0, &pk) : KVT_NIL;

			if (p == KVT_NIL || r_of(&cat, p)->state != KVT_REC_LIVE)
				parent = 0;
			if (cat.blocks[DRAM] < 48)
				cat_add(&cat, next_id, parent, 1);
			next_id++;
		} else if (op == 2 && n_writing < 64 && kvt_catalog_victim(&cat, DRAM) != KVT_NIL) {
			writing[n_writing++] = write_victim(&cat);
		} else if (op == 3 && n_writing) {
			uint32_t k = (uint32_t)rand() % n_writing, w = writing[k];
			struct kvt_rec *wr = r_of(&cat, w);

			writing[k] = writing[--n_writing];
			if (wr->state == KVT_REC_LIVE && wr->busy == 1 && !wr->pins && rand() % 4)
				write_took(&cat, w);
			else
				write_failed(&cat, w);
			if (wr->state == KVT_REC_DYING && !wr->busy)
				kvt_catalog_drop(&cat, w);
		} else if (op == 4 && r->state == KVT_REC_LIVE) {
			/* a pin that comes and goes, or a read */
			if (r->pins && rand() % 2)
				kvt_catalog_pin(&cat, i, -1);
			else if (r->pins < 3)
				kvt_catalog_pin(&cat, i, +1);
		} else if (op == 5 && r->state == KVT_REC_LIVE) {
			/* a removal: retired while held, dropped otherwise */
			if (r->pins || r->busy) {
				while (r->pins)
					kvt_catalog_pin(&cat, i, -1);
				if (r->busy)
					kvt_catalog_retire(&cat, i);
				else
					kvt_catalog_drop(&cat, i);
			} else {
				kvt_catalog_drop(&cat, i);
			}
		} else if (op == 6 && r->state == KVT_REC_LIVE && r->tier == SSD && !r->busy) {
			kvt_catalog_move(&cat, i, DRAM); /* read back up */
		} else if (op == 7 && r->state == KVT_REC_LIVE) {
			kvt_catalog_touch(&cat, i);
		}
		check_counts(&cat);
	}
	while (n_writing) {
		uint32_t w = writing[--n_writing];

		write_failed(&cat, w);
		if (r_of(&cat, w)->state == KVT_REC_DYING && !r_of(&cat, w)->busy)
			kvt_catalog_drop(&cat, w);
	}
	for (uint32_t i = 0; i < kvt_index_high(cat.idx); i++)
		while (r_of(&cat, i)->state == KVT_REC_LIVE && r_of(&cat, i)->pins)
			kvt_catalog_pin(&cat, i, -1);
	check_counts(&cat);
	while (cat.blocks[DRAM]) {
		uint32_t v = kvt_catalog_victim(&cat, DRAM);

		if (v == KVT_NIL)
			fail_msg("seed %llu: %llu DRAM blocks, no victim",
				 (unsigned long long)seed, (unsigned long long)cat.blocks[DRAM]);
		assert_int_equal(r_of(&cat, v)->kids_here, 0);
		kvt_catalog_drop(&cat, v);
		check_counts(&cat);
	}
	kvt_catalog_fini(&cat);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parent_of_a_block_being_written_is_the_next_victim),
		cmocka_unit_test(a_write_that_fails_makes_the_parent_a_parent_again),
		cmocka_unit_test(parent_written_first_then_the_child_fails),
		cmocka_unit_test(parent_goes_down_and_up_while_its_child_is_written),
		cmocka_unit_test(child_and_parent_written_in_one_batch_both_move),
		cmocka_unit_test(removals_during_the_write_leave_counts_right),
		cmocka_unit_test(counts_stay_right_under_random_operations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
