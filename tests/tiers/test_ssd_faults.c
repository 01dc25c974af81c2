/* SPDX-License-Identifier: Apache-2.0 */
/* Faults: an I/O error (injected at the I/O engine) or a full disk (a small
 * ext4 image on a loop device) degrades the tier: logged, counted, visible in
 * stats, later writes refused; every record already durable stays readable
 * and survives a reopen. Run with the argument "threads" for the fallback. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cmocka.h>

#include "loopfs.h"
#include "ssd_test.h"
#include "tiers/ssd.h"

#define BLOCK (128u << 10)

static bool force_threads;
static uint64_t seed;

static struct kvt_key key_of(uint64_t i)
{
	struct kvt_key k;

	memset(&k, 0x11, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	return k;
}

struct held {
	uint64_t loc[256];
	int n;
};

static struct kvt_ssd *open_tier(const char *dir, uint64_t capacity, uint64_t segment)
{
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;

	kvt_ssd_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.capacity_bytes = capacity;
	o.segment_bytes = segment;
	o.queue_depth = 8;
	o.force_threads = force_threads;
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &ssd), 0);
	return ssd;
}

static int write_block(struct kvt_ssd *ssd, uint64_t i, char *buf, uint64_t *loc)
{
	struct kvt_ssd_write w = { .ns_id = 3, .key = key_of(i), .data = buf, .len = BLOCK };

	kvt_test_fill(buf, BLOCK, seed + i);
	kvt_ssd_write(ssd, &w, 1);
	*loc = w.loc;
	return w.res;
}

static void assert_readable(struct kvt_ssd *ssd, const struct held *h, char *buf)
{
	char *want = malloc(BLOCK);

	for (int i = 0; i < h->n; i++) {
		struct kvt_ssd_read r = { .loc = h->loc[i], .ns_id = 3, .key = key_of((uint64_t)i),
					  .buf = buf, .len = BLOCK };
		kvt_ssd_read(ssd, &r, 1);
		assert_int_equal(r.res, 0);
		kvt_test_fill(want, BLOCK, seed + (uint64_t)i);
		assert_memory_equal(buf, want, BLOCK);
	}
	free(want);
}

struct recovered {
	uint64_t loc[256];
	int n;
};

static int recover_cb(const struct kvt_ssd_rec_info *rec, void *arg)
{
	struct recovered *r = arg;
	uint64_t i;

	memcpy(&i, rec->key.bytes, sizeof(i));
	if (i < 256) {
		r->loc[i] = rec->loc;
		r->n++;
	}
	return 0;
}

/* Reopen dir and check that the durable blocks are all there. */
static void assert_survive_reopen(const char *dir, uint64_t capacity, uint64_t segment,
				  const struct held *h, char *buf)
{
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;
	struct recovered *rec = calloc(1, sizeof(*rec));
	struct held again = { .n = h->n };

	kvt_ssd_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.capacity_bytes = capacity;
	o.segment_bytes = segment;
	o.force_threads = force_threads;
	assert_int_equal(kvt_ssd_open(&o, recover_cb, rec, &ssd), 0);
	assert_true(rec->n >= h->n);
	memcpy(again.loc, rec->loc, sizeof(again.loc));
	assert_readable(ssd, &again, buf);
	assert_false(kvt_ssd_degraded(ssd));
	kvt_ssd_close(ssd);
	free(rec);
}

static void write_error_degrades_and_keeps_durable_records(void **state)
{
	char *dir = ssd_test_dir("ssd_eio"), *buf = aligned_alloc(4096, BLOCK);
	struct kvt_ssd *ssd = open_tier(dir, 16 << 20, 1 << 20);
	struct held h = { 0 };
	struct kvt_ssd_stats st;
	uint64_t loc;

	for (; h.n < 5; h.n++)
		assert_int_equal(write_block(ssd, (uint64_t)h.n, buf, &h.loc[h.n]), 0);
	kvt_ssd_inject(ssd, KVT_SSD_IO_WRITE, 0, 1, -EIO);
	assert_int_equal(write_block(ssd, 100, buf, &loc), -EIO);
	assert_true(kvt_ssd_degraded(ssd));
	assert_int_equal(write_block(ssd, 101, buf, &loc), -EROFS);
	kvt_ssd_stats(ssd, &st);
	assert_true(st.degraded);
	assert_int_equal(st.degraded_error, -EIO);
	assert_int_equal(st.write_errors, 1);
	assert_int_equal(st.io.injected, 1);
	assert_int_equal(st.blocks, 5);
	assert_readable(ssd, &h, buf);
	kvt_ssd_close(ssd);
	assert_survive_reopen(dir, 16 << 20, 1 << 20, &h, buf);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

static void sync_error_fails_the_batch(void **state)
{
	char *dir = ssd_test_dir("ssd_syncerr"), *buf = aligned_alloc(4096, BLOCK);
	struct kvt_ssd *ssd = open_tier(dir, 16 << 20, 1 << 20);
	struct held h = { 0 };
	struct kvt_ssd_stats st;
	uint64_t loc;

	for (; h.n < 3; h.n++)
		assert_int_equal(write_block(ssd, (uint64_t)h.n, buf, &h.loc[h.n]), 0);
	/* a failed fdatasync means nothing of the batch may count as durable */
	kvt_ssd_inject(ssd, KVT_SSD_IO_SYNC, 0, 1, -EIO);
	assert_int_equal(write_block(ssd, 100, buf, &loc), -EIO);
	kvt_ssd_stats(ssd, &st);
	assert_true(st.degraded);
	assert_int_equal(st.sync_errors, 1);
	assert_int_equal(st.blocks, 3);
	assert_readable(ssd, &h, buf);
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

static void read_error_is_a_miss_and_degrades(void **state)
{
	char *dir = ssd_test_dir("ssd_readerr"), *buf = aligned_alloc(4096, BLOCK);
	struct kvt_ssd *ssd = open_tier(dir, 16 << 20, 1 << 20);
	struct held h = { 0 };
	struct kvt_ssd_stats st;

	for (; h.n < 3; h.n++)
		assert_int_equal(write_block(ssd, (uint64_t)h.n, buf, &h.loc[h.n]), 0);
	kvt_ssd_inject(ssd, KVT_SSD_IO_READ, 0, 1, -EIO);
	struct kvt_ssd_read r = { .loc = h.loc[1], .ns_id = 3, .key = key_of(1), .buf = buf,
				  .len = BLOCK };
	assert_int_equal(kvt_ssd_read(ssd, &r, 1), 0);
	assert_int_equal(r.res, -EIO);
	kvt_ssd_stats(ssd, &st);
	assert_true(st.degraded);
	assert_int_equal(st.read_errors, 1);
	/* the fault is gone: the same record reads back intact */
	assert_readable(ssd, &h, buf);
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	free(buf);
}

/* The loop device of the test running, unmounted by its teardown even when
 * an assertion ends the test early. */
static struct loopfs *loop_in_use;

static int loop_teardown(void **state)
{
	if (loop_in_use) {
		loopfs_teardown(loop_in_use);
		loop_in_use = NULL;
	}
	return 0;
}

static void full_disk_degrades_and_keeps_durable_records(void **state)
{
	static struct loopfs l;
	char dir[1100], *buf = aligned_alloc(4096, BLOCK);
	struct held h = { 0 };
	struct kvt_ssd_stats st;
	struct kvt_ssd *ssd;
	uint64_t loc;
	int rc;

	loopfs_setup(&l, 24);
	loop_in_use = &l;
	snprintf(dir, sizeof(dir), "%s/kv", l.mnt);
	/* the tier may use 64 MiB but the file system holds about 20 */
	ssd = open_tier(dir, 64 << 20, 2 << 20);
	while ((rc = write_block(ssd, (uint64_t)h.n, buf, &h.loc[h.n])) == 0) {
		h.n++;
		assert_true(h.n < 256);
	}
	assert_int_equal(rc, -EIO);
	assert_true(h.n > 10);
	kvt_ssd_stats(ssd, &st);
	assert_true(st.degraded);
	assert_int_equal(st.degraded_error, -ENOSPC);
	assert_int_equal(st.blocks, (uint64_t)h.n);
	assert_int_equal(write_block(ssd, 200, buf, &loc), -EROFS);
	assert_readable(ssd, &h, buf);
	kvt_ssd_close(ssd);
	assert_survive_reopen(dir, 64 << 20, 2 << 20, &h, buf);
	free(buf);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(write_error_degrades_and_keeps_durable_records),
		cmocka_unit_test(sync_error_fails_the_batch),
		cmocka_unit_test(read_error_is_a_miss_and_degrades),
		cmocka_unit_test_teardown(full_disk_degrades_and_keeps_durable_records, loop_teardown),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	if (!force_threads)
		kvt_test_need_io_uring();
	seed = kvt_test_seed();
	return cmocka_run_group_tests_name(force_threads ? "ssd_faults (thread pool)" :
				   "ssd_faults (io_uring)", tests, NULL, NULL);
}
