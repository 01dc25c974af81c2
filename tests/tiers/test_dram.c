/* SPDX-License-Identifier: Apache-2.0 */
/* The DRAM tier's slab allocator: exact slot counts, aligned disjoint slots
 * inside the region, and no space lost after churn across size classes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "tiers/dram.h"

#define SLAB (1u << 20)
#define REGION (16u * SLAB)

static struct kvt_mem_tier *open_dram(void)
{
	struct kvt_dram_opts o = { .size = sizeof(o), .bytes = REGION, .slab_bytes = SLAB };
	struct kvt_mem_tier *t;

	assert_int_equal(kvt_dram_open(&o, &t), 0);
	return t;
}

/* Fill the tier with `bytes` slots; returns how many fit. */
static size_t fill(struct kvt_mem_tier *t, uint64_t bytes, uint64_t *locs, size_t max)
{
	size_t n = 0;

	while (n < max && t->ops->alloc(t, bytes, &locs[n]) == 0)
		n++;
	return n;
}

static void slots_are_aligned_disjoint_and_counted_exactly(void **state)
{
	struct kvt_mem_tier *t = open_dram();
	uint64_t len, locs[REGION / 4096];
	uint8_t *region = t->ops->region(t, &len);
	/* 12 KiB blocks take 12 KiB slots: 85 per 1 MiB slab */
	size_t n = fill(t, 10000, locs, REGION / 4096);

	assert_int_equal(len, REGION);
	assert_int_equal(n, 16 * (SLAB / 12288));
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = t->ops->slot_ptr(t, locs[i]);
		assert_true(p >= region && p + 10000 <= region + len);
		assert_int_equal((uintptr_t)p % 4096, 0);
		memset(p, (int)(i & 0xff), 10000); /* disjoint: no slot overwrites another */
	}
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = t->ops->slot_ptr(t, locs[i]);
		assert_int_equal(p[0], i & 0xff);
		assert_int_equal(p[9999], i & 0xff);
	}
	assert_int_equal(t->ops->alloc(t, 4096, &locs[0]), -ENOSPC); /* no free slab left */
	assert_int_equal(t->ops->alloc(t, SLAB + 1, &locs[0]), -EINVAL);
	assert_int_equal(t->ops->alloc(t, 0, &locs[0]), -EINVAL);
	t->ops->close(t);
}

static void churn_across_sizes_loses_no_space(void **state)
{
	static const uint64_t sizes[] = { 4096, 64 << 10, 200 << 10, SLAB };
	struct kvt_mem_tier *t = open_dram();
	uint64_t s = kvt_test_seed(), *locs = malloc(4096 * sizeof(*locs));
	size_t n = 0;

	for (int op = 0; op < 50000; op++) {
		if (n && (kvt_test_rand(&s) % 2 || n == 4096)) {
			size_t i = kvt_test_rand(&s) % n;
			t->ops->free(t, locs[i]);
			locs[i] = locs[--n];
		} else if (t->ops->alloc(t, sizes[kvt_test_rand(&s) % 4], &locs[n]) == 0) {
			n++;
		}
	}
	while (n)
		t->ops->free(t, locs[--n]);
	/* every slab went back to the pool: whole-slab blocks fill the region */
	assert_int_equal(fill(t, SLAB, locs, 4096), 16);
	t->ops->close(t);
	free(locs);
}

static void occupancy_counts_slot_rounding_and_slab_tails(void **state)
{
	struct kvt_mem_tier *t = open_dram();
	uint64_t a, b;

	assert_int_equal(t->ops->occupied(t), 0);
	/* a 600 KiB block: one slot per 1 MiB slab, the tail unusable */
	assert_int_equal(t->ops->alloc(t, 600 << 10, &a), 0);
	assert_int_equal(t->ops->occupied(t), SLAB);
	/* 5000 bytes round up to a 8 KiB slot; the slab is in use, 127 slots free */
	assert_int_equal(t->ops->alloc(t, 5000, &b), 0);
	assert_int_equal(t->ops->occupied(t), SLAB + 8192);
	t->ops->free(t, a);
	t->ops->free(t, b);
	assert_int_equal(t->ops->occupied(t), 0);
	t->ops->close(t);
}

static void size_classes_are_recycled_and_their_end_is_enobufs(void **state)
{
	/* 512 KiB slabs, room to spare: 64 block sizes each hold a slab, so a
	 * 65th size fails for want of a class, not of room (eviction would not
	 * help, hence -ENOBUFS rather than -ENOSPC) */
	const uint64_t slab = 128 * 4096;
	struct kvt_dram_opts o = { .size = sizeof(o), .bytes = 80 * slab, .slab_bytes = slab };
	struct kvt_mem_tier *t;
	uint64_t locs[64], extra;

	assert_int_equal(kvt_dram_open(&o, &t), 0);
	for (int i = 0; i < 64; i++)
		assert_int_equal(t->ops->alloc(t, 4096ull * (uint64_t)(i + 1), &locs[i]), 0);
	assert_int_equal(t->ops->alloc(t, 4096ull * 65, &extra), -ENOBUFS);
	assert_int_equal(t->ops->alloc(t, 4096ull * 7 - 5, &extra), 0); /* a size in use */
	t->ops->free(t, extra);
	/* the 4 KiB class gives back its only slab: its entry serves the new size */
	t->ops->free(t, locs[0]);
	assert_int_equal(t->ops->alloc(t, 4096ull * 65, &extra), 0);
	t->ops->free(t, extra);
	for (int i = 1; i < 64; i++)
		t->ops->free(t, locs[i]);
	assert_int_equal(t->ops->occupied(t), 0);
	t->ops->close(t);
}

static void bad_options_are_refused(void **state)
{
	struct kvt_dram_opts o = { .size = sizeof(o), .bytes = SLAB / 2, .slab_bytes = SLAB };
	struct kvt_mem_tier *t;

	assert_int_equal(kvt_dram_open(&o, &t), -EINVAL); /* below one slab */
	o.bytes = REGION;
	o.slab_bytes = 1000; /* not 4 KiB aligned */
	assert_int_equal(kvt_dram_open(&o, &t), -EINVAL);
	o.size = 0;
	assert_int_equal(kvt_dram_open(&o, &t), -EINVAL);
}

/* Prefaulting maps the whole region, never changes stored bytes (so it may
 * run while blocks are saved), and stops early when asked to. */
static void prefault_maps_the_region_and_keeps_stored_bytes(void **state)
{
	struct kvt_mem_tier *t = open_dram();
	uint64_t len, done = 1, loc;
	uint8_t *region = t->ops->region(t, &len), *p;
	int stop = 1;

	assert_int_equal(t->ops->alloc(t, 8192, &loc), 0);
	p = t->ops->slot_ptr(t, loc);
	memset(p, 0x5a, 8192);
	assert_int_equal(kvt_dram_prefault(region, len, false, &stop, &done), 0);
	assert_int_equal(done, 0);
	stop = 0;
	assert_int_equal(kvt_dram_prefault(region, len, false, &stop, &done), 0);
	assert_int_equal(done, len);
	for (size_t i = 0; i < 8192; i++)
		if (p[i] != 0x5a)
			fail_msg("byte %zu of a stored slot changed", i);
	assert_int_equal(kvt_dram_prefault(region, len, true, NULL, NULL), 0);
	t->ops->close(t);
}

/* The reach a prefault runs ahead of: the end of the highest slab ever
 * taken; a freed slab is taken again before a new one. */
static void reach_is_the_end_of_the_highest_slab_taken(void **state)
{
	struct kvt_mem_tier *t = open_dram();
	uint64_t locs[2 * SLAB / 65536], more;
	size_t n;

	assert_int_equal(kvt_dram_reach(t), 0);
	n = fill(t, 65536, locs, SLAB / 65536); /* one slab's slots */
	assert_int_equal(n, SLAB / 65536);
	assert_int_equal(kvt_dram_reach(t), SLAB);
	assert_int_equal(t->ops->alloc(t, 65536, &more), 0);
	assert_int_equal(kvt_dram_reach(t), 2 * SLAB);
	t->ops->free(t, more); /* its slab goes back to the pool, ... */
	assert_int_equal(t->ops->alloc(t, 65536, &more), 0);
	assert_int_equal(kvt_dram_reach(t), 2 * SLAB); /* ... and is taken again */
	t->ops->close(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(slots_are_aligned_disjoint_and_counted_exactly),
		cmocka_unit_test(churn_across_sizes_loses_no_space),
		cmocka_unit_test(occupancy_counts_slot_rounding_and_slab_tails),
		cmocka_unit_test(size_classes_are_recycled_and_their_end_is_enobufs),
		cmocka_unit_test(bad_options_are_refused),
		cmocka_unit_test(prefault_maps_the_region_and_keeps_stored_bytes),
		cmocka_unit_test(reach_is_the_end_of_the_highest_slab_taken),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
