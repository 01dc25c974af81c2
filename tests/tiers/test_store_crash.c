/* SPDX-License-Identifier: Apache-2.0 */
/* Crash safety of the store with an SSD tier: a writer process puts blocks
 * through a 1 MiB DRAM tier, so the demoter keeps moving them to SSD, and is
 * killed with SIGKILL at a random moment after it reports that demotion is
 * under way (a fixed delay from its start proved nothing on a loaded machine,
 * where a sanitized writer could still be starting); the store is reopened here. Every
 * block the rebuilt index holds must read back as exactly its bytes, and the
 * blocks found must grow over the iterations (they are really recovered).
 *   usage: test_store_crash WRITER    KVT_CRASH_ITERS=N (default 12) */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ssd_test.h"
#include "store_crash_block.h"

/* Wait up to 120 s for the writer's progress byte on fd: 0, or -1 when it
 * exited or never made progress. */
static int wait_for_progress(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, 120000) != 1)
		return -1;
	return read(fd, &c, 1) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const char *env = getenv("KVT_CRASH_ITERS");
	int iters = env ? atoi(env) : 12;
	uint64_t s = kvt_test_seed();
	char *dir = ssd_test_dir("store_crash");
	char *buf = malloc(SC_BLOCK), *want = malloc(SC_BLOCK);
	uint32_t next = 0, found_max = 0;
	uint64_t found_total = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: test_store_crash WRITER\n");
		return 1;
	}
	for (int it = 0; it < iters; it++) {
		unsigned delay = 50000 + (unsigned)(kvt_test_rand(&s) % 250000);
		char a_first[32];
		struct kvt_store *store;
		struct kvt_ns *ns;
		struct kvt_store_stats st = { .size = sizeof(st) };
		uint32_t found = 0;
		int status, rc, pipefd[2];
		pid_t pid;

		snprintf(a_first, sizeof(a_first), "%u", next);
		if (pipe(pipefd))
			return 1;
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			dup2(pipefd[1], STDOUT_FILENO);
			close(pipefd[0]);
			close(pipefd[1]);
			execl(argv[1], argv[1], dir, a_first, (char *)NULL);
			_exit(127);
		}
		close(pipefd[1]);
		rc = wait_for_progress(pipefd[0]);
		close(pipefd[0]);
		if (rc) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fprintf(stderr, "iteration %d: the writer made no progress\n", it);
			return 1;
		}
		usleep(delay);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		if (!WIFSIGNALED(status)) {
			fprintf(stderr, "writer exited on its own (status %d)\n", status);
			return 1;
		}
		rc = sc_open(dir, &store, &ns);
		if (rc) {
			fprintf(stderr, "iteration %d: reopen: %s\n", it, kvt_strerror(rc));
			return 1;
		}
		/* the writer put at most a few thousand blocks in its time */
		for (uint32_t n = 0; n < next + 20000; n++) {
			struct kvt_key k = sc_key(n);
			uint8_t tier;

			if (kvt_lookup(ns, &k, 1, &tier) != 1)
				continue;
			rc = kvt_get(ns, &k, buf, SC_BLOCK);
			sc_fill(n, want);
			if (rc || memcmp(buf, want, SC_BLOCK)) {
				fprintf(stderr, "iteration %d: block %u (%s) reads back %s\n", it, n,
					kvt_tier_name(tier), rc ? kvt_strerror(rc) : "different bytes");
				return 1;
			}
			found++;
			found_total++;
			if (n + 1 > found_max)
				found_max = n + 1;
		}
		kvt_store_stats(store, &st);
		if (st.checksum_failures) {
			fprintf(stderr, "iteration %d: %llu checksum failures\n", it,
				(unsigned long long)st.checksum_failures);
			return 1;
		}
		fprintf(stderr, "iteration %d: killed %u us after progress, %u blocks recovered intact\n", it,
			delay, found);
		kvt_store_close(store);
		/* new blocks continue past everything seen, so none is rewritten */
		next = found_max + 20000;
		if (found_max > 200000) {
			kvt_test_rmdir(dir);
			free(dir);
			dir = ssd_test_dir("store_crash");
			found_max = next = 0;
		}
	}
	if (!found_total) {
		fprintf(stderr, "no block was ever recovered: the test proved nothing\n");
		free(want);
		free(buf);
		return 1;
	}
	printf("%d iterations, %llu recovered blocks read back intact\n", iters,
	       (unsigned long long)found_total);
	kvt_test_rmdir(dir);
	free(dir);
	free(want);
	free(buf);
	return 0;
}
