/* SPDX-License-Identifier: Apache-2.0 */
/* Many small blocks through a SIGKILL: a child process writes 256-byte
 * blocks to the SSD tier, 64 a batch, and reports each batch once durable;
 * it is killed with SIGKILL once 20,000 are acknowledged (mid-batch, as a
 * rule). The tier reopened here finds every acknowledged block, and every
 * record it reports reads back as exactly its block. (The reported probe
 * used 200,000 blocks through the daemon; 20,000 keep this test to seconds
 * under ASan, with the same per-record paths: scan, index, read.) */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ssd_test.h"
#include "tiers/ssd.h"

#define BLOCK 256u
#define BATCH 64u
#define TARGET 20000u
#define MAX_BLOCKS (1u << 16)

static uint64_t seed;

static struct kvt_key key_of(uint32_t i)
{
	struct kvt_key k;

	memset(&k, 0x51, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	return k;
}

static void opts_of(struct kvt_ssd_opts *o, const char *dir)
{
	kvt_ssd_opts_init(o, sizeof(*o));
	o->dir = dir;
	o->capacity_bytes = 512ull << 20; /* 8 KiB a record: room for 65,536 */
	o->segment_bytes = 4ull << 20;
	o->queue_depth = 32;
}

/* The child: write blocks until killed, telling the parent on fd how many
 * are durable after each batch. */
static void writer(const char *dir, int fd)
{
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;
	struct kvt_ssd_write w[BATCH];
	static char bufs[BATCH][BLOCK];

	opts_of(&o, dir);
	if (kvt_ssd_open(&o, NULL, NULL, &ssd))
		_exit(2);
	for (uint32_t next = 0; next + BATCH <= MAX_BLOCKS; next += BATCH) {
		for (uint32_t b = 0; b < BATCH; b++) {
			kvt_test_fill(bufs[b], BLOCK, seed + next + b);
			w[b] = (struct kvt_ssd_write){ .ns_id = 8, .key = key_of(next + b),
						       .data = bufs[b], .len = BLOCK };
		}
		if (kvt_ssd_write(ssd, w, BATCH) != (int)BATCH)
			_exit(3);
		uint32_t acked = next + BATCH;
		if (write(fd, &acked, sizeof(acked)) != sizeof(acked))
			_exit(4);
	}
	pause();
	_exit(0);
}

struct found {
	uint8_t *seen;
	uint64_t *loc;
	uint64_t n, bad;
};

static int found_cb(const struct kvt_ssd_rec_info *rec, void *arg)
{
	struct found *f = arg;
	uint32_t i;

	memcpy(&i, rec->key.bytes, sizeof(i));
	if (rec->ns_id != 8 || i >= MAX_BLOCKS || rec->raw_len != BLOCK || f->seen[i]) {
		f->bad++;
		return 1;
	}
	f->seen[i] = 1;
	f->loc[i] = rec->loc;
	f->n++;
	return 0;
}

static void small_blocks_survive_a_kill_mid_batch(void **state)
{
	char *dir = ssd_test_dir("ssd_small");
	struct found f = { calloc(MAX_BLOCKS, 1), calloc(MAX_BLOCKS, sizeof(uint64_t)), 0, 0 };
	struct kvt_ssd_opts o;
	struct kvt_ssd_stats st;
	struct kvt_ssd *ssd;
	char want[BLOCK], got[BLOCK];
	uint32_t acked = 0, a;
	int pipefd[2], status;
	pid_t pid;

	assert_int_equal(pipe(pipefd), 0);
	pid = fork(); /* before this process has any thread */
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pipefd[0]);
		writer(dir, pipefd[1]);
	}
	close(pipefd[1]);
	while (acked < TARGET && read(pipefd[0], &a, sizeof(a)) == sizeof(a))
		acked = a;
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	while (read(pipefd[0], &a, sizeof(a)) == sizeof(a))
		acked = a > acked ? a : acked; /* acknowledged before the kill landed */
	close(pipefd[0]);
	if (!WIFSIGNALED(status))
		fail_msg("the writer ended on its own (status %d) after %u blocks", status, acked);
	assert_true(acked >= TARGET);

	opts_of(&o, dir);
	assert_int_equal(kvt_ssd_open(&o, found_cb, &f, &ssd), 0);
	kvt_ssd_stats(ssd, &st);
	fprintf(stderr, "%u blocks acknowledged, %" PRIu64 " recovered (%" PRIu64 " torn), "
		"reopened in %.0f ms\n", acked, f.n, st.recovery_torn, (double)st.open_ns / 1e6);
	assert_int_equal(f.bad, 0);
	assert_int_equal(st.recovery_corrupt, 0);
	for (uint32_t i = 0; i < acked; i++)
		if (!f.seen[i])
			fail_msg("block %u was acknowledged and is not recovered", i);
	for (uint32_t i = 0; i < MAX_BLOCKS; i++) {
		struct kvt_ssd_read r = { .ns_id = 8, .key = key_of(i), .buf = got, .len = BLOCK };

		if (!f.seen[i] || (i % 7 && i < acked))
			continue; /* every 7th acknowledged block, and all beyond */
		r.loc = f.loc[i];
		assert_true(kvt_ssd_read(ssd, &r, 1) >= 0);
		assert_int_equal(r.res, 0);
		kvt_test_fill(want, BLOCK, seed + i);
		assert_memory_equal(got, want, BLOCK);
	}
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	free(f.seen);
	free(f.loc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(small_blocks_survive_a_kill_mid_batch),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
