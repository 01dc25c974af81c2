/* SPDX-License-Identifier: Apache-2.0 */
/* Crash safety: a real writer process (ssd_crash_writer) appends blocks and
 * acknowledges each durable one on a pipe; it is killed with SIGKILL at a
 * random moment; the tier is then reopened here. Every acknowledged block must
 * be recovered and read back byte-identical, and every record recovery
 * reports at all must read back as exactly the block it names (never corrupt
 * bytes). Many iterations, each on the directory the last one left.
 *   usage: test_ssd_crash WRITER [threads]    KVT_CRASH_ITERS=N (default 40) */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crash_block.h"
#include "ssd_test.h"

#define MAX_BLOCKS (1u << 20)

struct check {
	uint8_t *acked;     /* acked[i]: block i was acknowledged durable */
	uint8_t *found;     /* found[i]: recovery reported block i */
	uint64_t *loc;
	uint64_t bad;       /* recovered records that are not their block */
};

static int recover_cb(const struct kvt_ssd_rec_info *rec, void *arg)
{
	struct check *c = arg;
	uint64_t i;

	memcpy(&i, rec->key.bytes, sizeof(i));
	if (rec->ns_id != CRASH_NS || i >= MAX_BLOCKS || rec->raw_len != crash_len(i)) {
		c->bad++;
		return 1;
	}
	c->found[i] = 1;
	c->loc[i] = rec->loc;
	return 0;
}

/* Run the writer from block `first`; kill it after delay_us. Returns the
 * highest acked block + 1 (or first if none). */
static uint64_t run_writer(const char *writer, const char *dir, uint64_t first, uint64_t seed,
			   unsigned delay_us, bool threads, struct check *c)
{
	int pipefd[2];
	pid_t pid;
	char a_first[32], a_seed[32], line[64];
	uint64_t top = first;
	FILE *in;

	if (pipe(pipefd))
		exit(1);
	snprintf(a_first, sizeof(a_first), "%" PRIu64, first);
	snprintf(a_seed, sizeof(a_seed), "%" PRIu64, seed);
	pid = fork();
	if (pid < 0)
		exit(1);
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		close(pipefd[1]);
		execl(writer, writer, dir, a_first, a_seed, threads ? "threads" : NULL, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	usleep(delay_us);
	kill(pid, SIGKILL);
	in = fdopen(pipefd[0], "r");
	while (fgets(line, sizeof(line), in)) {
		uint64_t i;
		if (sscanf(line, "ack %" SCNu64, &i) == 1 && i < MAX_BLOCKS) {
			c->acked[i] = 1;
			if (i + 1 > top)
				top = i + 1;
		}
	}
	fclose(in);
	int status;
	waitpid(pid, &status, 0);
	if (!WIFSIGNALED(status)) {
		fprintf(stderr, "writer exited on its own (status %d)\n", status);
		exit(1);
	}
	return top;
}

int main(int argc, char **argv)
{
	if (!(argc > 2 && !strcmp(argv[2], "threads")))
		kvt_test_need_io_uring(); /* before anything is made */
	const char *env = getenv("KVT_CRASH_ITERS");
	int iters = env ? atoi(env) : 40;
	bool threads = argc > 2 && !strcmp(argv[2], "threads");
	uint64_t seed = kvt_test_seed(), s = seed, next = 0;
	struct check c = { calloc(MAX_BLOCKS, 1), calloc(MAX_BLOCKS, 1),
			   calloc(MAX_BLOCKS, sizeof(uint64_t)), 0 };
	char *dir = ssd_test_dir("ssd_crash");
	char *buf = aligned_alloc(4096, CRASH_MAX_LEN + 4096);
	char *want = malloc(CRASH_MAX_LEN);
	uint64_t total_acked = 0, total_checked = 0, total_skipped = 0, total_summaries = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: test_ssd_crash WRITER [threads]\n");
		return 1;
	}
	for (int it = 0; it < iters; it++) {
		struct kvt_ssd_opts opts;
		struct kvt_ssd_stats st;
		struct kvt_ssd *ssd;
		unsigned delay = 10000 + (unsigned)(kvt_test_rand(&s) % 240000);
		uint64_t first = next;

		next = run_writer(argv[1], dir, first, kvt_test_rand(&s), delay, threads, &c);
		/* a killed writer may have written unacked blocks past its last ack:
		 * skip a gap so no block number is ever reused */
		next += 64;

		memset(c.found, 0, MAX_BLOCKS);
		kvt_ssd_opts_init(&opts, sizeof(opts));
		opts.dir = dir;
		opts.capacity_bytes = 64ULL << 20;
		opts.segment_bytes = 1ULL << 20;
		int rc = kvt_ssd_open(&opts, recover_cb, &c, &ssd);
		if (rc) {
			fprintf(stderr, "iteration %d: reopen failed: %s\n", it, strerror(-rc));
			return 1;
		}
		kvt_ssd_stats(ssd, &st);
		total_skipped += st.recovery_torn;
		total_summaries += st.recovery_summaries;
		/* only the writes in flight at the kill can be damaged */
		if (st.recovery_corrupt) {
			fprintf(stderr, "iteration %d: %" PRIu64 " corrupt records: damage outside "
				"the last batch\n", it, st.recovery_corrupt);
			return 1;
		}
		for (uint64_t i = 0; i < next && i < MAX_BLOCKS; i++) {
			if (c.acked[i] && !c.found[i]) {
				fprintf(stderr, "iteration %d: acked block %" PRIu64 " lost\n", it, i);
				return 1;
			}
			if (!c.found[i])
				continue;
			struct kvt_ssd_read r = { .loc = c.loc[i], .ns_id = CRASH_NS,
						  .key = crash_key(i), .buf = buf, .len = crash_len(i) };
			kvt_ssd_read(ssd, &r, 1);
			crash_fill(i, want);
			if (r.res || memcmp(buf, want, r.len)) {
				fprintf(stderr, "iteration %d: block %" PRIu64 " (acked %d) reads "
					"back %s\n", it, i, c.acked[i],
					r.res ? strerror(-r.res) : "different bytes");
				return 1;
			}
			total_checked++;
			total_acked += c.acked[i];
		}
		if (c.bad) {
			fprintf(stderr, "iteration %d: %" PRIu64 " foreign records recovered\n", it, c.bad);
			return 1;
		}
		fprintf(stderr, "iteration %d: writer killed after %u us, blocks %" PRIu64
			"..%" PRIu64 ", %" PRIu64 " recovered, %" PRIu64 " torn skipped\n",
			it, delay, first, next - 64, st.recovered, st.recovery_torn);
		kvt_ssd_close(ssd);
		/* keep the directory small: start over when it holds half its capacity */
		if (st.used_bytes > opts.capacity_bytes / 2) {
			kvt_test_rmdir(dir);
			free(dir);
			dir = ssd_test_dir("ssd_crash");
			memset(c.acked, 0, MAX_BLOCKS);
		}
	}
	printf("%d iterations: %" PRIu64 " block reads verified (%" PRIu64 " of acked blocks), "
	       "%" PRIu64 " torn records skipped, %" PRIu64 " segments read from summaries\n",
	       iters, total_checked, total_acked, total_skipped, total_summaries);
	kvt_test_rmdir(dir);
	free(dir);
	free(want);
	free(buf);
	free(c.acked);
	free(c.found);
	free(c.loc);
	return 0;
}
