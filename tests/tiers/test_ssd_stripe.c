/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier over several directories (tiers/ssd_stripe.h), through its
 * storage tier ops: a batch's blocks spread evenly over the devices and
 * read back whole; every block comes back after a reopen with all the
 * directories (each device recovers its own); a directory missing at open
 * leaves the others serving, and is named MISSING; a device whose
 * directory goes away is taken out, its blocks and only its blocks
 * dropped; I/O errors past the threshold take a device out the same way;
 * a device whose writes fail is degraded, still read, and resumes after a
 * probe; a tombstone reaches every device. Run with "threads" for the
 * pread/pwrite pool. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ssd_test.h"
#include "tiers/ssd.h"
#include "tiers/ssd_stripe.h"

#define DEVS 3
#define BLOCK (64u << 10)
#define NBLK 30
#define LOC_DEV(loc) ((unsigned)((loc) >> KVT_SSD_LOC_BITS))

static bool force_threads;
static uint64_t seed;

struct fix {
	char *dir[DEVS];
	struct kvt_ssd_dir dirs[DEVS];
	struct kvt_storage_tier *t;
	char *data[NBLK];
	struct kvt_tier_io io[NBLK];
	size_t done_order[NBLK], n_done;
};

static struct kvt_key key_of(uint64_t i)
{
	struct kvt_key k;

	memset(&k, 0x5a, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	return k;
}

static void stripe_open(struct fix *f)
{
	struct kvt_ssd_opts o;

	kvt_ssd_opts_init(&o, sizeof(o));
	o.segment_bytes = 1u << 20;
	o.queue_depth = 4;
	o.force_threads = force_threads;
	assert_int_equal(kvt_ssd_stripe_open(&o, f->dirs, DEVS, NULL, &f->t), 0);
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	for (int d = 0; d < DEVS; d++) {
		char tag[32];

		snprintf(tag, sizeof(tag), "stripe%d", d);
		f->dir[d] = ssd_test_dir(tag);
		f->dirs[d] = (struct kvt_ssd_dir){ .path = f->dir[d], .bytes = 16u << 20 };
	}
	for (int i = 0; i < NBLK; i++) {
		f->data[i] = malloc(BLOCK);
		kvt_test_fill(f->data[i], BLOCK, seed + (uint64_t)i);
	}
	stripe_open(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	if (f->t)
		f->t->ops->close(f->t);
	for (int d = 0; d < DEVS; d++) {
		kvt_test_rmdir(f->dir[d]);
		free(f->dir[d]);
	}
	for (int i = 0; i < NBLK; i++)
		free(f->data[i]);
	free(f);
	return 0;
}

static void on_done(struct kvt_tier_batch *b, size_t i)
{
	struct fix *f = b->arg;

	f->done_order[f->n_done++] = i;
}

/* Write blocks [0, n) in batches of 10: every one written, each handed
 * over once. */
static void write_all(struct fix *f, size_t n)
{
	for (size_t at = 0; at < n; at += 10) {
		struct kvt_tier_batch b = { .write = true, .io = f->io + at, .n = 10,
					    .done_cb = on_done, .arg = f };

		for (size_t i = at; i < at + 10; i++)
			f->io[i] = (struct kvt_tier_io){ .ns_id = 7, .key = key_of(i),
							 .buf = f->data[i], .len = BLOCK };
		f->n_done = 0;
		assert_int_equal(kvt_tier_run(f->t, &b), 10);
		assert_int_equal(f->n_done, 10);
	}
}

/* Read block i at loc: its result (0: the bytes are the ones written). */
static int read_one(struct fix *f, size_t i, uint64_t loc)
{
	char *buf = malloc(BLOCK);
	struct kvt_tier_io io = { .ns_id = 7, .key = key_of(i), .buf = buf, .len = BLOCK,
				  .loc = loc };
	struct kvt_tier_batch b = { .io = &io, .n = 1 };

	kvt_tier_run(f->t, &b);
	if (!io.res)
		assert_memory_equal(buf, f->data[i], BLOCK);
	free(buf);
	return io.res;
}

static void devices(struct fix *f, struct kvt_tier_device *dv)
{
	assert_int_equal(f->t->ops->devices(f->t, dv, DEVS), DEVS);
}

static void a_batch_spreads_over_every_device(void **state)
{
	struct fix *f = *state;
	struct kvt_tier_device dv[DEVS];
	size_t per[DEVS] = { 0 };
	char *buf[NBLK];
	struct kvt_tier_io rd[NBLK];
	struct kvt_tier_batch b = { .io = rd, .n = NBLK, .done_cb = on_done, .arg = f };

	write_all(f, NBLK);
	for (size_t i = 0; i < NBLK; i++) {
		assert_true(LOC_DEV(f->io[i].loc) < DEVS);
		per[LOC_DEV(f->io[i].loc)]++;
		/* consecutive blocks on different devices */
		if (i % 10)
			assert_int_not_equal(LOC_DEV(f->io[i].loc), LOC_DEV(f->io[i - 1].loc));
	}
	devices(f, dv);
	for (int d = 0; d < DEVS; d++) {
		printf("device %d: %zu blocks\n", d, per[d]);
		assert_int_equal(per[d], NBLK / DEVS);
		assert_int_equal(dv[d].blocks, NBLK / DEVS);
		assert_int_equal(dv[d].state, KVT_DEVICE_OK);
		assert_int_equal(dv[d].writes, NBLK / DEVS);
		assert_string_equal(dv[d].path, f->dir[d]);
	}
	/* one read batch over all of them, each block handed over once */
	for (size_t i = 0; i < NBLK; i++) {
		buf[i] = malloc(BLOCK);
		rd[i] = (struct kvt_tier_io){ .ns_id = 7, .key = key_of(i), .buf = buf[i],
					      .len = BLOCK, .loc = f->io[i].loc };
	}
	f->n_done = 0;
	assert_int_equal(kvt_tier_run(f->t, &b), NBLK);
	assert_int_equal(f->n_done, NBLK);
	for (size_t i = 0; i < NBLK; i++) {
		assert_memory_equal(buf[i], f->data[i], BLOCK);
		free(buf[i]);
	}
}

/* Recovered records, by block number (their key); their count. */
static size_t take_recovered(struct fix *f, uint64_t *loc_of)
{
	struct kvt_tier_rec r[64];
	size_t n, total = 0;

	for (size_t i = 0; i < NBLK; i++)
		loc_of[i] = KVT_LOC_NONE;
	while ((n = f->t->ops->take_recovered(f->t, r, 64)) > 0) {
		for (size_t k = 0; k < n; k++) {
			uint64_t i;

			memcpy(&i, r[k].key.bytes, sizeof(i));
			assert_true(i < NBLK);
			loc_of[i] = r[k].loc;
		}
		total += n;
	}
	return total;
}

static void blocks_survive_a_reopen_with_every_directory(void **state)
{
	struct fix *f = *state;
	struct kvt_tier_device dv[DEVS];
	uint64_t loc_of[NBLK];

	write_all(f, NBLK);
	f->t->ops->close(f->t);
	stripe_open(f);
	assert_int_equal(take_recovered(f, loc_of), NBLK);
	devices(f, dv);
	for (int d = 0; d < DEVS; d++)
		assert_int_equal(dv[d].recovered, NBLK / DEVS);
	for (size_t i = 0; i < NBLK; i++) {
		assert_int_equal(LOC_DEV(loc_of[i]), LOC_DEV(f->io[i].loc));
		assert_int_equal(read_one(f, i, loc_of[i]), 0);
	}
}

static void a_directory_missing_at_open_leaves_the_others(void **state)
{
	struct fix *f = *state;
	struct kvt_tier_device dv[DEVS];
	uint64_t loc_of[NBLK];
	char moved[4200];
	size_t lost = 0;

	write_all(f, NBLK);
	f->t->ops->close(f->t);
	f->t = NULL;
	snprintf(moved, sizeof(moved), "%s.away", f->dir[1]);
	assert_int_equal(rename(f->dir[1], moved), 0);
	stripe_open(f);
	devices(f, dv);
	assert_int_equal(dv[1].state, KVT_DEVICE_MISSING);
	assert_int_equal(dv[1].error, -ENOENT);
	assert_int_equal(dv[0].state, KVT_DEVICE_OK);
	assert_false(f->t->ops->degraded(f->t));
	take_recovered(f, loc_of);
	for (size_t i = 0; i < NBLK; i++) {
		if (LOC_DEV(f->io[i].loc) == 1) {
			assert_int_equal(loc_of[i], KVT_LOC_NONE);
			lost++;
			continue;
		}
		assert_int_equal(read_one(f, i, loc_of[i]), 0);
	}
	assert_int_equal(lost, NBLK / DEVS);
	/* new blocks go to the devices there are */
	write_all(f, 10);
	for (size_t i = 0; i < 10; i++)
		assert_int_not_equal(LOC_DEV(f->io[i].loc), 1);
	/* back in place, the next open finds its blocks again */
	f->t->ops->close(f->t);
	assert_int_equal(rename(moved, f->dir[1]), 0);
	stripe_open(f);
	devices(f, dv);
	assert_int_equal(dv[1].state, KVT_DEVICE_OK);
	assert_int_equal(dv[1].recovered, NBLK / DEVS);
}

/* Every block of device d dropped, and only those: the dropped list and
 * the reads agree. */
static void only_device_lost(struct fix *f, unsigned out)
{
	struct kvt_tier_device dv[DEVS];
	struct kvt_tier_rec r[64];
	size_t n, dropped = 0;

	while ((n = f->t->ops->take_dropped(f->t, r, 64)) > 0) {
		for (size_t k = 0; k < n; k++)
			assert_int_equal(LOC_DEV(r[k].loc), out);
		dropped += n;
	}
	assert_int_equal(dropped, NBLK / DEVS);
	for (size_t i = 0; i < NBLK; i++) {
		int res = read_one(f, i, f->io[i].loc);

		if (LOC_DEV(f->io[i].loc) == out)
			assert_int_equal(res, -ENOENT);
		else
			assert_int_equal(res, 0);
	}
	devices(f, dv);
	assert_int_equal(dv[out].state, KVT_DEVICE_OUT);
	assert_int_equal(dv[out].dropped, NBLK / DEVS);
	assert_int_equal(dv[out].blocks, 0);
	assert_false(f->t->ops->degraded(f->t));
	/* new blocks go to the others */
	write_all(f, 10);
	for (size_t i = 0; i < 10; i++)
		assert_int_not_equal(LOC_DEV(f->io[i].loc), out);
}

/* A write batch of one block (key NBLK + 1), beside those of f->io. */
static void poke(struct fix *f)
{
	struct kvt_tier_io io = { .ns_id = 7, .key = key_of(NBLK + 1), .buf = f->data[0],
				  .len = BLOCK };
	struct kvt_tier_batch b = { .write = true, .io = &io, .n = 1 };

	assert_int_equal(kvt_tier_run(f->t, &b), 1);
}

static void a_directory_gone_takes_its_device_out(void **state)
{
	struct fix *f = *state;
	char moved[4200];

	write_all(f, NBLK);
	snprintf(moved, sizeof(moved), "%s.away", f->dir[2]);
	assert_int_equal(rename(f->dir[2], moved), 0);
	poke(f); /* seen at the next write batch */
	only_device_lost(f, 2);
	f->t->ops->close(f->t);
	f->t = NULL;
	assert_int_equal(rename(moved, f->dir[2]), 0);
	stripe_open(f);
	/* nothing on it was deleted: its blocks come back at the next open */
	{
		struct kvt_tier_device dv[DEVS];

		devices(f, dv);
		assert_int_equal(dv[2].recovered, NBLK / DEVS);
	}
}

static void io_errors_take_a_device_out(void **state)
{
	struct fix *f = *state;
	struct kvt_ssd *dev0;

	write_all(f, NBLK);
	dev0 = kvt_ssd_stripe_device(f->t, 0);
	assert_non_null(dev0);
	kvt_ssd_inject(dev0, KVT_SSD_IO_READ, 0, 1000, -EIO);
	/* its reads fail until the threshold; then it is out */
	for (size_t i = 0, errs = 0; i < NBLK && errs < KVT_SSD_DEVICE_ERRORS; i++)
		if (LOC_DEV(f->io[i].loc) == 0) {
			assert_int_equal(read_one(f, i, f->io[i].loc), -EIO);
			errs++;
		}
	only_device_lost(f, 0);
}

/* A device whose writes fail (a write error; a read-only remount fails
 * them the same way, with EROFS) is degraded: it takes no new blocks, still
 * serves its own, and takes writes again once a probe succeeds. */
static void a_device_whose_writes_fail_still_serves_reads(void **state)
{
	struct fix *f = *state;
	struct kvt_tier_device dv[DEVS];
	struct kvt_tier_io io[10];
	struct kvt_tier_batch b = { .write = true, .io = io, .n = 10 };
	size_t failed = 0;

	write_all(f, NBLK);
	kvt_ssd_inject(kvt_ssd_stripe_device(f->t, 1), KVT_SSD_IO_WRITE, 0, 1, -EROFS);
	for (size_t i = 0; i < 10; i++)
		io[i] = (struct kvt_tier_io){ .ns_id = 7, .key = key_of(NBLK + 2 + i),
					      .buf = f->data[i], .len = BLOCK };
	kvt_tier_run(f->t, &b);
	for (size_t i = 0; i < 10; i++)
		failed += io[i].res != 0;
	assert_true(failed >= 1 && failed <= 4); /* device 1's share of the batch */
	devices(f, dv);
	assert_int_equal(dv[1].state, KVT_DEVICE_DEGRADED);
	assert_int_equal(dv[1].error, -EROFS);
	assert_false(f->t->ops->degraded(f->t));
	for (size_t i = 0; i < NBLK; i++)
		assert_int_equal(read_one(f, i, f->io[i].loc), 0);
	poke(f);
	write_all(f, 10);
	for (size_t i = 0; i < 10; i++)
		assert_int_not_equal(LOC_DEV(f->io[i].loc), 1);
	/* the first probe comes 1 s on, at a write batch */
	kvt_test_sleep_ms(1100);
	poke(f);
	devices(f, dv);
	assert_int_equal(dv[1].state, KVT_DEVICE_OK);
}

static void a_tombstone_reaches_every_device(void **state)
{
	struct fix *f = *state;
	struct kvt_tier_io tomb = { .ns_id = 7, .key = key_of(4), .tomb = true };
	struct kvt_tier_batch b = { .write = true, .io = &tomb, .n = 1 };
	uint64_t loc_of[NBLK];

	write_all(f, NBLK);
	tomb.seq = f->t->ops->seq_reserve(f->t);
	assert_int_equal(kvt_tier_run(f->t, &b), 1);
	f->t->ops->free(f->t, f->io[4].loc);
	f->t->ops->close(f->t);
	stripe_open(f);
	assert_int_equal(take_recovered(f, loc_of), NBLK - 1);
	assert_int_equal(loc_of[4], KVT_LOC_NONE);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(a_batch_spreads_over_every_device, setup, teardown),
		cmocka_unit_test_setup_teardown(blocks_survive_a_reopen_with_every_directory, setup,
						teardown),
		cmocka_unit_test_setup_teardown(a_directory_missing_at_open_leaves_the_others,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_directory_gone_takes_its_device_out, setup,
						teardown),
		cmocka_unit_test_setup_teardown(io_errors_take_a_device_out, setup, teardown),
		cmocka_unit_test_setup_teardown(a_device_whose_writes_fail_still_serves_reads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(a_tombstone_reaches_every_device, setup, teardown),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	seed = kvt_test_seed();
	if (!force_threads)
		kvt_test_need_io_uring();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
