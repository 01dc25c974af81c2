/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier around its I/O engine: frees that empty a segment, stats and
 * dropped lists return while a write batch is held in flight (by the engine's
 * test hook); reads, holds, frees and stats return while a write batch is
 * held making a new segment file (the tier's create hook); the next
 * segment's file is made before the active one fills; a ring failing in a
 * write batch costs no record and does not degrade the tier; an allocation
 * failure (-ENOMEM as an op's result) fails its batch without degrading, a
 * device error still degrades; a write batch prepares the next chunk's
 * records as its writes complete; reads completed together are offered to
 * the tier's helper thread. Run with the argument "threads" for the pread/pwrite pool. */
#include <errno.h>
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
#include "tiers/ssd.h"

#define BLOCK (128u << 10)
#define CAPACITY (16u << 20)
#define SEGMENT (1u << 20)
#define MAX_RECS 64

static bool force_threads;
static uint64_t seed;

static struct kvt_key key_of(uint64_t i)
{
	struct kvt_key k;

	memset(&k, 0x22, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	return k;
}

static struct kvt_ssd *open_tier_qd(const char *dir, uint32_t qd)
{
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;

	kvt_ssd_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.capacity_bytes = CAPACITY;
	o.segment_bytes = SEGMENT;
	o.queue_depth = qd;
	o.force_threads = force_threads;
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &ssd), 0);
	return ssd;
}

static struct kvt_ssd *open_tier(const char *dir)
{
	return open_tier_qd(dir, 8);
}

/* Record i holds BLOCK bytes of seed + i. */
struct recs {
	char *data[MAX_RECS];
	struct kvt_ssd_write w[MAX_RECS];
};

static void recs_prepare(struct recs *r, uint64_t i)
{
	r->data[i] = malloc(BLOCK);
	assert_non_null(r->data[i]);
	kvt_test_fill(r->data[i], BLOCK, seed + i);
	r->w[i] = (struct kvt_ssd_write){ .ns_id = 5, .key = key_of(i), .data = r->data[i],
					  .len = BLOCK };
}

static void recs_free(struct recs *r)
{
	for (int i = 0; i < MAX_RECS; i++)
		free(r->data[i]);
}

static int read_rec(struct kvt_ssd *ssd, const struct recs *r, uint64_t i)
{
	char *buf = malloc(BLOCK);
	struct kvt_ssd_read rd = { .loc = r->w[i].loc, .ns_id = 5, .key = key_of(i), .buf = buf,
				   .len = BLOCK };

	assert_non_null(buf);
	kvt_ssd_read(ssd, &rd, 1);
	if (!rd.res)
		assert_memory_equal(buf, r->data[i], BLOCK);
	free(buf);
	return rd.res;
}

struct writer {
	pthread_t t;
	struct kvt_ssd *ssd;
	struct kvt_ssd_write *w;
	size_t n;
	atomic_bool done;
};

static void *writer_main(void *arg)
{
	struct writer *wr = arg;

	kvt_ssd_write(wr->ssd, wr->w, wr->n);
	atomic_store(&wr->done, true);
	return NULL;
}

static void free_and_stats_do_not_wait_for_a_write(void **state)
{
	char *dir = ssd_test_dir("ssd_tier_nowait");
	struct kvt_ssd *ssd = open_tier(dir);
	struct recs *r = calloc(1, sizeof(*r));
	struct kvt_ssd_stats st;
	struct kvt_ssd_rec_info dropped[4];
	struct writer wr = { 0 };
	uint64_t n = 0, first_seg_recs;

	(void)state;
	/* fill the first segment: the record that opens a second seals it */
	do {
		assert_true(n < MAX_RECS - 1);
		recs_prepare(r, n);
		assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 1);
		n++;
		kvt_ssd_stats(ssd, &st);
	} while (st.segments < 2);
	first_seg_recs = n - 1;
	assert_true(first_seg_recs > 0);

	/* a write batch parked in flight, in the second segment */
	recs_prepare(r, n);
	wr.ssd = ssd;
	wr.w = &r->w[n];
	wr.n = 1;
	batch_hold_arm(0);
	assert_int_equal(pthread_create(&wr.t, NULL, writer_main, &wr), 0);
	assert_non_null(batch_hold_wait());

	/* none of these may wait for the batch (the watchdog fails a hang):
	 * freeing the first segment's records releases its file */
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.segments, 2);
	assert_int_equal(st.segments_released, 0);
	for (uint64_t i = 0; i < first_seg_recs; i++)
		kvt_ssd_free(ssd, r->w[i].loc);
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.segments, 1);
	assert_int_equal(st.segments_released, 1);
	assert_int_equal(kvt_ssd_take_dropped(ssd, dropped, 4), 0);
	assert_false(kvt_ssd_degraded(ssd));
	assert_false(atomic_load(&wr.done));

	batch_hold_release();
	pthread_join(wr.t, NULL);
	kvt_ssd_io_set_test_hook(NULL, NULL);
	assert_int_equal(r->w[n].res, 0);
	for (uint64_t i = 0; i <= n; i++)
		assert_int_equal(read_rec(ssd, r, i), i < first_seg_recs ? -ENOENT : 0);
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	recs_free(r);
	free(r);
}

/* A gate the create hook stops at until the test opens it. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool entered, open;
} create_gate = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void create_gate_cb(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&create_gate.mu);
	create_gate.entered = true;
	pthread_cond_broadcast(&create_gate.cv);
	while (!create_gate.open)
		pthread_cond_wait(&create_gate.cv, &create_gate.mu);
	pthread_mutex_unlock(&create_gate.mu);
}

/* A writer that tells the gate when its write has returned. */
static bool gate_writer_done;

static void *gate_writer_main(void *arg)
{
	struct writer *wr = arg;

	kvt_ssd_write(wr->ssd, wr->w, wr->n);
	pthread_mutex_lock(&create_gate.mu);
	gate_writer_done = true;
	pthread_cond_broadcast(&create_gate.cv);
	pthread_mutex_unlock(&create_gate.mu);
	return NULL;
}

static void reads_holds_frees_do_not_wait_for_a_new_segment(void **state)
{
	char *dir = ssd_test_dir("ssd_tier_create");
	struct kvt_ssd *ssd = open_tier(dir);
	struct recs *r = calloc(1, sizeof(*r));
	struct kvt_ssd_stats st;
	struct kvt_ssd_rec_info dropped[4];
	struct writer wr = { 0 };
	uint64_t n = 0, per_seg;
	bool entered = false;

	(void)state;
	/* a full first segment and a second holding one record */
	do {
		assert_true(n < MAX_RECS - 1);
		recs_prepare(r, n);
		assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 1);
		n++;
		kvt_ssd_stats(ssd, &st);
	} while (st.segments < 2);
	per_seg = n - 1;

	/* a write batch stopped while it makes a segment file: the next one,
	 * made ahead once the second is half full */
	create_gate.entered = create_gate.open = false;
	kvt_ssd_set_create_hook(create_gate_cb, NULL);
	wr.ssd = ssd;
	wr.n = 1;
	while (!entered) {
		assert_true(n < 2 * per_seg);
		recs_prepare(r, n);
		wr.w = &r->w[n];
		gate_writer_done = false;
		assert_int_equal(pthread_create(&wr.t, NULL, gate_writer_main, &wr), 0);
		pthread_mutex_lock(&create_gate.mu);
		while (!create_gate.entered && !gate_writer_done)
			pthread_cond_wait(&create_gate.cv, &create_gate.mu);
		entered = create_gate.entered;
		pthread_mutex_unlock(&create_gate.mu);
		if (!entered) {
			pthread_join(wr.t, NULL);
			assert_int_equal(r->w[n].res, 0);
			n++;
		}
	}

	/* none of these may wait for it (the watchdog fails a hang) */
	assert_int_equal(read_rec(ssd, r, 0), 0);
	assert_int_equal(read_rec(ssd, r, per_seg), 0);
	assert_int_equal(kvt_ssd_hold(ssd, r->w[1].loc, +1), 0);
	assert_int_equal(kvt_ssd_hold(ssd, r->w[1].loc, -1), 0);
	kvt_ssd_free(ssd, r->w[2].loc);
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.segments, 2);
	assert_int_equal(st.segments_spare, 0);
	assert_int_equal(kvt_ssd_take_dropped(ssd, dropped, 4), 0);
	assert_false(kvt_ssd_degraded(ssd));
	pthread_mutex_lock(&create_gate.mu);
	assert_false(gate_writer_done);
	create_gate.open = true;
	pthread_cond_broadcast(&create_gate.cv);
	pthread_mutex_unlock(&create_gate.mu);
	pthread_join(wr.t, NULL);
	kvt_ssd_set_create_hook(NULL, NULL);
	assert_int_equal(r->w[n].res, 0);
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.segments, 2);
	assert_int_equal(st.segments_spare, 1);
	for (uint64_t i = 0; i <= n; i++)
		assert_int_equal(read_rec(ssd, r, i), i == 2 ? -ENOENT : 0);
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	recs_free(r);
	free(r);
}

/* The next segment's file is made ahead of need, while the active segment
 * is half full: the write that fills the active segment and goes on into
 * the next makes no file (making it there left the device idle, its queue
 * waiting behind the preallocation, superblock and syncs). A spare never
 * used is deleted at close. */
static int creates;

static void count_create_cb(void *arg)
{
	(void)arg;
	creates++;
}

static void the_next_segment_is_made_before_the_active_one_fills(void **state)
{
	char *dir = ssd_test_dir("ssd_tier_spare");
	struct kvt_ssd *ssd = open_tier(dir);
	struct recs *r = calloc(1, sizeof(*r));
	struct kvt_ssd_stats st;
	uint64_t n = 0, moves = 0, segs = 0;

	(void)state;
	kvt_ssd_set_create_hook(count_create_cb, NULL);
	for (; n < 3 * 7 + 2; n++) { /* 7 records of 128 KiB a 1 MiB segment */
		int before = creates;

		recs_prepare(r, n);
		assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 1);
		kvt_ssd_stats(ssd, &st);
		if (n && st.segments > segs) {
			/* a record went into a new segment: it was made before */
			assert_int_equal(creates, before);
			moves++;
		}
		if (st.segments == segs && creates > before)
			assert_int_equal(st.segments_spare, 1);
		segs = st.segments;
	}
	kvt_ssd_set_create_hook(NULL, NULL);
	assert_int_equal(moves, 3);
	assert_int_equal(st.segments, 4);
	assert_int_equal(st.segments_spare, 0);
	assert_int_equal(st.segments_created, (uint64_t)creates);
	/* half full again: the fifth is made, and close deletes it unused */
	for (; n < 3 * 7 + 5; n++) {
		recs_prepare(r, n);
		assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 1);
	}
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.segments_spare, 1);
	assert_int_equal(ssd_test_count(dir, "seg-", ".kvt"), 5);
	kvt_ssd_close(ssd);
	assert_int_equal(ssd_test_count(dir, "seg-", ".kvt"), 4);
	ssd = open_tier(dir);
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.recovered, n);
	assert_int_equal(st.segments, 4);
	assert_int_equal(st.recovery_scanned, 0);
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	recs_free(r);
	free(r);
}

static void ring_failure_in_a_write_keeps_the_tier(void **state)
{
	char *dir = ssd_test_dir("ssd_tier_ring");
	struct kvt_ssd *ssd = open_tier(dir);
	struct recs *r = calloc(1, sizeof(*r));
	struct kvt_ssd_stats st;

	(void)state;
	kvt_ssd_stats(ssd, &st);
	if (!st.io.uring) {
		if (!force_threads && kvt_test_io_uring_required())
			fail_msg("KVT_TEST_REQUIRE_IO_URING=1, and the tier's I/O is on the thread pool");
		kvt_ssd_close(ssd);
		kvt_test_rmdir(dir);
		free(dir);
		free(r);
		print_message("SKIP: io_uring is not in use here (%s): the thread pool has no "
			      "ring to break\n",
			      st.io.uring_error ? strerror(-st.io.uring_error) : "forced");
		skip();
	}
	for (uint64_t i = 0; i < 6; i++)
		recs_prepare(r, i);
	/* the first batch to reach the hook breaks its ring, without parking */
	batch_hold_arm(-EFAULT);
	batch_hold_release();
	assert_int_equal(kvt_ssd_write(ssd, r->w, 6), 6);
	kvt_ssd_io_set_test_hook(NULL, NULL);
	kvt_ssd_stats(ssd, &st);
	assert_false(st.degraded);
	assert_int_equal(st.write_errors, 0);
	assert_int_equal(st.blocks, 6);
	assert_false(st.io.uring);
	assert_int_equal(st.io.fallbacks, 1);
	for (uint64_t i = 0; i < 6; i++)
		assert_int_equal(read_rec(ssd, r, i), 0);
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	recs_free(r);
	free(r);
}

static void enomem_fails_the_batch_without_degrading(void **state)
{
	char *dir = ssd_test_dir("ssd_tier_enomem");
	struct kvt_ssd *ssd = open_tier(dir);
	struct recs *r = calloc(1, sizeof(*r));
	struct kvt_ssd_stats st;
	uint64_t n = 0;

	(void)state;
	for (; n < 3; n++) {
		recs_prepare(r, n);
		assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 1);
	}
	/* an op's -ENOMEM, in the write, the sync, then the read */
	recs_prepare(r, n);
	kvt_ssd_inject(ssd, KVT_SSD_IO_WRITE, 0, 1, -ENOMEM);
	assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 0);
	assert_int_equal(r->w[n].res, -ENOMEM);
	assert_false(kvt_ssd_degraded(ssd));
	kvt_ssd_inject(ssd, KVT_SSD_IO_SYNC, 0, 1, -ENOMEM);
	assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 0);
	assert_int_equal(r->w[n].res, -ENOMEM);
	assert_false(kvt_ssd_degraded(ssd));
	kvt_ssd_inject(ssd, KVT_SSD_IO_READ, 0, 1, -ENOMEM);
	assert_int_equal(read_rec(ssd, r, 0), -ENOMEM);
	assert_false(kvt_ssd_degraded(ssd));
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.write_errors, 2);
	assert_int_equal(st.sync_errors, 1);
	assert_int_equal(st.read_errors, 1);
	assert_int_equal(st.io.injected, 3);

	/* the tier still writes and reads */
	assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 1);
	n++;
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(read_rec(ssd, r, i), 0);

	/* a device error still degrades */
	recs_prepare(r, n);
	kvt_ssd_inject(ssd, KVT_SSD_IO_WRITE, 0, 1, -EIO);
	assert_int_equal(kvt_ssd_write(ssd, &r->w[n], 1), 0);
	assert_int_equal(r->w[n].res, -EIO);
	assert_true(kvt_ssd_degraded(ssd));
	kvt_ssd_stats(ssd, &st);
	assert_int_equal(st.degraded_error, -EIO);
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	recs_free(r);
	free(r);
}

/* A write batch prepares (checksums, encodes) the next chunk's records as
 * the writes of the chunk in flight complete, one ahead and then one per
 * completion, not the whole next chunk at once: at queue depth 1 a thread
 * busy with a chunk of checksums holds a core the kernel needs to complete
 * the write in flight. Seen from outside: a record with room has its
 * padding zeroed when it is prepared, and each time a chunk's run first
 * waits for its writes, the records prepared exceed the operations
 * completed by at most one chunk (16 records at queue depth 1) and one. */
#define PACE_RECS 64
#define PACE_LEN (4096u + 100)
#define PACE_STRIDE (3 * 4096u) /* header page, block, padding */

static struct {
	char *region;
	uint64_t ops0;
	int waits;
	long max_ahead;
} pace;

static void pace_hook_cb(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, void *arg)
{
	struct kvt_ssd_io_stats st;
	long prepared = 0;

	(void)arg;
	if (kind != KVT_SSD_IO_WRITE)
		return;
	for (int i = 0; i < PACE_RECS; i++)
		prepared += pace.region[(size_t)i * PACE_STRIDE + 4096 + PACE_LEN] == 0;
	kvt_ssd_io_stats(io, &st);
	if (prepared - (long)(st.ops - pace.ops0) > pace.max_ahead)
		pace.max_ahead = prepared - (long)(st.ops - pace.ops0);
	pace.waits++;
}

static void a_batch_prepares_the_next_chunk_as_its_writes_complete(void **state)
{
	char *dir = ssd_test_dir("ssd_tier_pace");
	struct kvt_ssd_write w[PACE_RECS];
	struct kvt_ssd_stats st;
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;

	(void)state;
	kvt_ssd_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.capacity_bytes = CAPACITY;
	o.segment_bytes = SEGMENT;
	o.queue_depth = 1; /* chunks of 16 records */
	o.force_threads = force_threads;
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &ssd), 0);
	pace.region = aligned_alloc(4096, PACE_RECS * PACE_STRIDE);
	assert_non_null(pace.region);
	memset(pace.region, 0xaa, PACE_RECS * PACE_STRIDE);
	for (int i = 0; i < PACE_RECS; i++) {
		char *data = pace.region + (size_t)i * PACE_STRIDE + 4096;

		kvt_test_fill(data, PACE_LEN, seed + (uint64_t)i);
		w[i] = (struct kvt_ssd_write){ .ns_id = 5, .key = key_of((uint64_t)i),
					       .data = data, .len = PACE_LEN, .room = true };
	}
	kvt_ssd_stats(ssd, &st);
	pace.ops0 = st.io.ops;
	pace.waits = 0;
	pace.max_ahead = 0;
	kvt_ssd_io_set_test_hook(pace_hook_cb, NULL);
	assert_int_equal(kvt_ssd_write(ssd, w, PACE_RECS), PACE_RECS);
	kvt_ssd_io_set_test_hook(NULL, NULL);
	print_message("chunk runs waited on: %d, most records prepared ahead of completed "
		      "operations: %ld\n", pace.waits, pace.max_ahead);
	assert_true(pace.waits >= 2);
	assert_true(pace.max_ahead <= 16 + 1);
	for (int i = 0; i < PACE_RECS; i++) {
		char buf[PACE_LEN];
		struct kvt_ssd_read rd = { .loc = w[i].loc, .ns_id = 5, .key = key_of((uint64_t)i),
					   .buf = buf, .len = PACE_LEN };

		assert_int_equal(kvt_ssd_read(ssd, &rd, 1), 1);
		assert_int_equal(rd.res, 0);
		assert_memory_equal(buf, w[i].data, PACE_LEN);
	}
	kvt_ssd_close(ssd);
	free(pace.region);
	kvt_test_rmdir(dir);
	free(dir);
}

/* Reads the device completes together are offered to the tier's helper
 * thread, to be checked (XXH3) on two threads: 16 records of 128 KiB read
 * in one batch, the engine's hook holding the batch before its first wait
 * until the reads have landed (io_uring; the pool runs no hook), so that one
 * reap returns them all. Whether the helper wakes in time to take some is
 * the scheduler's business (test_ssd_helper shows it takes its share when
 * it runs). Every record still reads back whole. */
static void sleep_on_reads_cb(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, void *arg)
{
	(void)io;
	(void)arg;
	if (kind == KVT_SSD_IO_READ)
		usleep(1000 * 1000);
}

static void reads_completed_together_are_offered_to_the_helper(void **state)
{
	char *dir = ssd_test_dir("ssd_tier_helper");
	struct kvt_ssd *ssd = open_tier_qd(dir, 16); /* all 16 in flight at once */
	struct kvt_ssd_read rd[16];
	struct kvt_ssd_stats st;
	struct recs r = { 0 };
	char *bufs[16];

	(void)state;
	for (int i = 0; i < 16; i++)
		recs_prepare(&r, (uint64_t)i);
	assert_int_equal(kvt_ssd_write(ssd, r.w, 16), 16);
	for (int i = 0; i < 16; i++) {
		bufs[i] = aligned_alloc(4096, BLOCK);
		memset(bufs[i], 0, BLOCK);
		rd[i] = (struct kvt_ssd_read){ .loc = r.w[i].loc, .ns_id = 5,
					       .key = key_of((uint64_t)i), .buf = bufs[i],
					       .len = BLOCK };
	}
	kvt_ssd_io_set_test_hook(sleep_on_reads_cb, NULL);
	assert_int_equal(kvt_ssd_read(ssd, rd, 16), 16);
	kvt_ssd_io_set_test_hook(NULL, NULL);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(rd[i].res, 0);
		assert_memory_equal(bufs[i], r.data[i], BLOCK);
		free(bufs[i]);
	}
	kvt_ssd_stats(ssd, &st);
	print_message("%s: %llu sets offered to the helper, %llu of 16 reads checked by it\n",
		      st.io.uring ? "io_uring" : "pool", (unsigned long long)st.read_sets_shared,
		      (unsigned long long)st.reads_helped);
	assert_int_equal(st.checksum_failures, 0);
	assert_true(st.reads_helped <= 16);
	if (st.io.uring)
		assert_int_equal(st.read_sets_shared, 1);
	kvt_ssd_close(ssd);
	recs_free(&r);
	kvt_test_rmdir(dir);
	free(dir);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(free_and_stats_do_not_wait_for_a_write),
		cmocka_unit_test(reads_holds_frees_do_not_wait_for_a_new_segment),
		cmocka_unit_test(the_next_segment_is_made_before_the_active_one_fills),
		cmocka_unit_test(ring_failure_in_a_write_keeps_the_tier),
		cmocka_unit_test(enomem_fails_the_batch_without_degrading),
		cmocka_unit_test(a_batch_prepares_the_next_chunk_as_its_writes_complete),
		cmocka_unit_test(reads_completed_together_are_offered_to_the_helper),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	if (!force_threads)
		kvt_test_need_io_uring();
	seed = kvt_test_seed();
	batch_hold_watchdog(90);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
