/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD I/O engine against other callers and a failing ring: stats,
 * set_file and inject return while a batch is held in flight (by the test
 * hook); a ring that fails mid-batch has every op in flight cancelled and
 * reaped before the batch returns, each op keeps its own result and is counted
 * once, and the engine goes on with the thread pool; at queue depth 1 the
 * next op is issued before the caller handles a completion, and by a poll.
 * Run with the argument "threads" for the pool. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "batch_hold.h"
#include "ssd_test.h"
#include "tiers/ssd_io.h"

#define OPS 64
#define OPLEN (64u << 10)

static bool force_threads;
static uint64_t seed;

struct rig {
	char *dir;
	int fd[2];
	struct kvt_ssd_io *io;
	char *data, *back;
};

static void rig_open(struct rig *r, const char *tag, uint32_t queue_depth)
{
	struct kvt_ssd_io_opts o;
	char path[4096];

	r->dir = ssd_test_dir(tag);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/f%d", r->dir, i);
		r->fd[i] = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
		assert_true(r->fd[i] >= 0);
		assert_int_equal(ftruncate(r->fd[i], (off_t)OPS * OPLEN), 0);
	}
	kvt_ssd_io_opts_init(&o, sizeof(o));
	o.queue_depth = queue_depth;
	o.force_threads = force_threads;
	assert_int_equal(kvt_ssd_io_open(&o, &r->io), 0);
	assert_int_equal(kvt_ssd_io_set_file(r->io, 0, r->fd[0]), 0);
	r->data = aligned_alloc(4096, (size_t)OPS * OPLEN);
	r->back = aligned_alloc(4096, (size_t)OPS * OPLEN);
	assert_non_null(r->data);
	assert_non_null(r->back);
	kvt_test_fill(r->data, (size_t)OPS * OPLEN, seed);
}

static void rig_close(struct rig *r)
{
	kvt_ssd_io_set_test_hook(NULL, NULL);
	kvt_ssd_io_close(r->io);
	close(r->fd[0]);
	close(r->fd[1]);
	kvt_test_rmdir(r->dir);
	free(r->dir);
	free(r->data);
	free(r->back);
}

/* ops[0..n) = op i moves block i of buf at offset i * OPLEN of file 0 */
static void fill_ops(struct kvt_ssd_io_op *ops, size_t n, enum kvt_ssd_io_kind kind, char *buf)
{
	for (size_t i = 0; i < n; i++)
		ops[i] = (struct kvt_ssd_io_op){ .kind = kind, .file = 0, .off = i * OPLEN,
						 .buf = buf + i * OPLEN, .len = OPLEN };
}

struct runner {
	pthread_t t;
	struct kvt_ssd_io *io;
	struct kvt_ssd_io_op *ops;
	size_t n;
	int rc;
	atomic_bool done;
};

static void *runner_main(void *arg)
{
	struct runner *r = arg;

	r->rc = kvt_ssd_io_run(r->io, r->ops, r->n);
	atomic_store(&r->done, true);
	return NULL;
}

static void others_do_not_wait_for_a_batch(void **state)
{
	struct rig rig;
	struct kvt_ssd_io_op ops[OPS];
	struct kvt_ssd_io_stats st;
	struct runner run = { 0 };

	(void)state;
	rig_open(&rig, "ssd_io_nowait", 8);
	fill_ops(ops, OPS, KVT_SSD_IO_WRITE, rig.data);
	run.io = rig.io;
	run.ops = ops;
	run.n = OPS;
	batch_hold_arm(0);
	assert_int_equal(pthread_create(&run.t, NULL, runner_main, &run), 0);
	assert_ptr_equal(batch_hold_wait(), rig.io);

	/* the batch is parked in the hook with its first ops issued: none of
	 * these may wait for it (a wait hangs the test until the watchdog) */
	kvt_ssd_io_stats(rig.io, &st);
	assert_int_equal(st.uring, !force_threads);
	assert_int_equal(kvt_ssd_io_set_file(rig.io, 1, rig.fd[1]), 0);
	assert_int_equal(kvt_ssd_io_set_file(rig.io, 1, -1), 0);
	kvt_ssd_io_inject(rig.io, KVT_SSD_IO_READ, 0, 0, -EIO);
	assert_false(atomic_load(&run.done));

	batch_hold_release();
	pthread_join(run.t, NULL);
	assert_int_equal(run.rc, 0);
	for (size_t i = 0; i < OPS; i++)
		assert_int_equal(ops[i].res, 0);
	kvt_ssd_io_set_test_hook(NULL, NULL);

	fill_ops(ops, OPS, KVT_SSD_IO_READ, rig.back);
	assert_int_equal(kvt_ssd_io_run(rig.io, ops, OPS), 0);
	for (size_t i = 0; i < OPS; i++)
		assert_int_equal(ops[i].res, 0);
	assert_memory_equal(rig.back, rig.data, (size_t)OPS * OPLEN);
	kvt_ssd_io_stats(rig.io, &st);
	assert_int_equal(st.ops, 2 * OPS);
	assert_int_equal(st.errors, 0);
	assert_int_equal(st.fallbacks, 0);
	rig_close(&rig);
}

static void ring_failure_reaps_and_falls_back(void **state)
{
	struct rig rig;
	struct kvt_ssd_io_op ops[OPS + 1];
	struct kvt_ssd_io_stats st;

	(void)state;
	rig_open(&rig, "ssd_io_ring", 8);
	kvt_ssd_io_stats(rig.io, &st);
	if (!st.uring) {
		if (!force_threads && kvt_test_io_uring_required())
			fail_msg("KVT_TEST_REQUIRE_IO_URING=1, and the engine is on the thread pool");
		rig_close(&rig);
		print_message("SKIP: io_uring is not in use here (%s): the thread pool has no "
			      "ring to break\n", st.uring_error ? strerror(-st.uring_error) : "forced");
		skip();
	}
	/* op 5 fails on its own; the ring fails after the first submission,
	 * with up to queue_depth writes in flight */
	fill_ops(ops, OPS, KVT_SSD_IO_WRITE, rig.data);
	ops[OPS] = (struct kvt_ssd_io_op){ .kind = KVT_SSD_IO_SYNC, .file = 0 };
	kvt_ssd_io_inject(rig.io, KVT_SSD_IO_WRITE, 5, 1, -EIO);
	kvt_ssd_io_inject_ring(rig.io, -EFAULT);
	assert_int_equal(kvt_ssd_io_run(rig.io, ops, OPS + 1), 0);
	for (size_t i = 0; i <= OPS; i++)
		assert_int_equal(ops[i].res, i == 5 ? -EIO : 0);

	kvt_ssd_io_stats(rig.io, &st);
	assert_false(st.uring);
	assert_int_equal(st.uring_error, -EFAULT);
	assert_int_equal(st.fallbacks, 1);
	assert_int_equal(st.ops, OPS + 1);           /* each op counted once */
	assert_int_equal(st.errors, 1);
	assert_int_equal(st.injected, 1);
	assert_int_equal(st.bytes_written, (uint64_t)(OPS - 1) * OPLEN);
	assert_int_equal(st.syncs, 1);

	/* the next batch runs on the pool and sees nothing of the old ring */
	fill_ops(ops, OPS, KVT_SSD_IO_READ, rig.back);
	assert_int_equal(kvt_ssd_io_run(rig.io, ops, OPS), 0);
	for (size_t i = 0; i < OPS; i++)
		assert_int_equal(ops[i].res, 0);
	memset(rig.data + 5 * OPLEN, 0, OPLEN); /* never written: still a hole */
	assert_memory_equal(rig.back, rig.data, (size_t)OPS * OPLEN);
	kvt_ssd_io_stats(rig.io, &st);
	assert_int_equal(st.ops, 2 * OPS + 1);
	assert_int_equal(st.errors, 1);
	assert_int_equal(st.fallbacks, 1);
	rig_close(&rig);
}

/* At queue depth 1, the next op is on its way before the caller handles a
 * completion (verifying or acking it), and kvt_ssd_io_poll issues it
 * without waiting: the device does not idle while the caller computes. */
static bool uring_or_skip(struct rig *r, const char *what)
{
	struct kvt_ssd_io_stats st;

	kvt_ssd_io_stats(r->io, &st);
	if (st.uring)
		return true;
	if (!force_threads && kvt_test_io_uring_required())
		fail_msg("KVT_TEST_REQUIRE_IO_URING=1, and the engine is on the thread pool");
	rig_close(r);
	print_message("SKIP: io_uring is not in use here (%s): on the thread pool %s\n",
		      st.uring_error ? strerror(-st.uring_error) : "forced", what);
	return false;
}

static void the_next_op_is_issued_before_a_completion_is_handled(void **state)
{
	struct rig rig;
	struct kvt_ssd_io_op ops[3];
	struct kvt_ssd_io_run *run;
	size_t done[3], k;

	(void)state;
	rig_open(&rig, "ssd_io_refill", 1);
	if (!uring_or_skip(&rig, "every op is queued at once (the workers are the window)")) {
		skip();
		return;
	}
	fill_ops(ops, 3, KVT_SSD_IO_WRITE, rig.data);
	assert_int_equal(kvt_ssd_io_start(rig.io, ops, 3, 3, &run), 0);
	k = kvt_ssd_io_reap(run, done, 3);
	assert_int_equal(k, 1);
	assert_int_equal(done[0], 0);
	/* issued: its start time is set (it is 0 until then) */
	assert_true(ops[1].lat_ns != 0);
	assert_true(ops[2].lat_ns == 0);
	while (kvt_ssd_io_reap(run, done, 3))
		;
	kvt_ssd_io_end(run);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(ops[i].res, 0);
	rig_close(&rig);
}

static void poll_issues_the_next_op_without_waiting(void **state)
{
	struct rig rig;
	struct kvt_ssd_io_op ops[3];
	struct kvt_ssd_io_run *run;
	size_t done[3], k = 0;
	uint64_t polls = 0;

	(void)state;
	rig_open(&rig, "ssd_io_poll", 1);
	if (!uring_or_skip(&rig, "workers issue ops on their own")) {
		skip();
		return;
	}
	fill_ops(ops, 3, KVT_SSD_IO_WRITE, rig.data);
	assert_int_equal(kvt_ssd_io_start(rig.io, ops, 3, 3, &run), 0);
	assert_true(ops[1].lat_ns == 0);
	/* the first write completes some time; each poll returns at once */
	while (ops[1].lat_ns == 0) {
		kvt_ssd_io_poll(run);
		polls++;
		if (ops[1].lat_ns == 0)
			usleep(100);
	}
	assert_true(polls >= 1);
	/* what poll took is reported by the next reap, in order */
	while (k < 3)
		k += kvt_ssd_io_reap(run, done + k, 3 - k);
	assert_int_equal(done[0], 0);
	assert_int_equal(done[1], 1);
	assert_int_equal(done[2], 2);
	kvt_ssd_io_end(run);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(ops[i].res, 0);
	rig_close(&rig);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(others_do_not_wait_for_a_batch),
		cmocka_unit_test(ring_failure_reaps_and_falls_back),
		cmocka_unit_test(the_next_op_is_issued_before_a_completion_is_handled),
		cmocka_unit_test(poll_issues_the_next_op_without_waiting),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	if (!force_threads)
		kvt_test_need_io_uring();
	seed = kvt_test_seed();
	batch_hold_watchdog(90);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
