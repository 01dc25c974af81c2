/* SSD admission rules through the store's catalog: no rule (or another
 * tier) admits everything; "reused" refuses blocks used once and admits
 * them when they come back while remembered; "useful" always admits its
 * sampled blocks and refuses a class the tier does not read back, admits
 * one it does. */
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
#include "store/ghost.h"

static uint32_t add(struct kvt_catalog *cat, uint32_t id)
{
	return cat_add(cat, id, 0, 1);
}

/* Whether the "useful" rule samples block id (one in 16 by key hash). */
static bool sampled(struct kvt_catalog *cat, uint32_t i)
{
	return kvt_ghost_hash(kvt_index_rec(cat->idx, i)) >> 60 == 0;
}

static void no_rule_admits_everything(void **state)
{
	struct kvt_catalog cat;
	uint32_t i;

	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("lru"), 16), 0);
	i = add(&cat, 1);
	assert_true(kvt_catalog_admit(&cat, i, KVT_TIER_SSD));
	assert_int_equal(kvt_catalog_set_admission(&cat, kvt_admission_find("reused"),
						   KVT_TIER_SSD), 0);
	/* the rule covers SSD only */
	assert_true(kvt_catalog_admit(&cat, i, KVT_TIER_DRAM));
	assert_int_equal(cat.admission.admitted + cat.admission.refused, 0);
	assert_null(kvt_admission_find("no-such-rule"));
	assert_non_null(kvt_admission_find("always"));
	kvt_catalog_fini(&cat);
}

static void reused_refuses_single_use_until_it_returns(void **state)
{
	struct kvt_catalog cat;
	uint32_t a, b;

	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("lru"), 16), 0);
	assert_int_equal(kvt_catalog_set_admission(&cat, kvt_admission_find("reused"),
						   KVT_TIER_SSD), 0);
	a = add(&cat, 1);
	b = add(&cat, 2);
	kvt_catalog_touch(&cat, b);
	assert_false(kvt_catalog_admit(&cat, a, KVT_TIER_SSD)); /* used once */
	assert_true(kvt_catalog_admit(&cat, b, KVT_TIER_SSD));  /* used twice */
	kvt_catalog_move(&cat, b, KVT_TIER_SSD);
	kvt_catalog_drop(&cat, a);
	/* 1 comes back while the refusal is remembered: the second use */
	a = add(&cat, 1);
	assert_true(kvt_catalog_admit(&cat, a, KVT_TIER_SSD));
	/* a new block 3 with the record number of a dropped one starts over */
	kvt_catalog_drop(&cat, a);
	a = add(&cat, 3);
	assert_false(kvt_catalog_admit(&cat, a, KVT_TIER_SSD));
	assert_int_equal(cat.admission.admitted, 2);
	assert_int_equal(cat.admission.refused, 2);
	kvt_catalog_fini(&cat);
}

/* Write `n` fresh blocks of the class into SSD through the rule: the
 * sampled ones go in (and, when read_back, are read there), the others are
 * counted refused or admitted; all leave the tier. Returns how many of the
 * unsampled were refused. */
static int write_fresh(struct kvt_catalog *cat, uint32_t *next, int n, bool read_back,
		       int *unsampled)
{
	int refused = 0;

	*unsampled = 0;
	for (int k = 0; k < n; k++) {
		uint32_t i = add(cat, (*next)++);
		bool s = sampled(cat, i);

		if (!kvt_catalog_admit(cat, i, KVT_TIER_SSD)) {
			assert_false(s); /* the sampled ones always go in */
			refused++;
			(*unsampled)++;
			kvt_catalog_drop(cat, i);
			continue;
		}
		*unsampled += !s;
		kvt_catalog_move(cat, i, KVT_TIER_SSD);
		if (read_back)
			kvt_catalog_touch(cat, i); /* a hit in SSD */
		kvt_catalog_drop(cat, i);
	}
	return refused;
}

static void useful_follows_what_the_tier_reads_back(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1;
	int unsampled, refused;

	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("lru"), 1024), 0);
	assert_int_equal(kvt_catalog_set_admission(&cat, kvt_admission_find("useful"),
						   KVT_TIER_SSD), 0);
	/* fresh blocks never read back from SSD: once enough sampled ones left
	 * unread, the class is refused */
	write_fresh(&cat, &next, 2000, false, &unsampled);
	refused = write_fresh(&cat, &next, 2000, false, &unsampled);
	assert_int_equal(refused, unsampled);
	/* now every sampled one is read back: the class is admitted again */
	write_fresh(&cat, &next, 4000, true, &unsampled);
	refused = write_fresh(&cat, &next, 2000, true, &unsampled);
	assert_int_equal(refused, 0);
	kvt_catalog_fini(&cat);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(no_rule_admits_everything),
		cmocka_unit_test(reused_refuses_single_use_until_it_returns),
		cmocka_unit_test(useful_follows_what_the_tier_reads_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
