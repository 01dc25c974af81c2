/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the tests: skip codes, seeded randomness, temp dirs. */
#ifndef KVT_TESTS_HELPERS_H
#define KVT_TESTS_HELPERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Exit code ctest reads as "skipped" (SKIP_RETURN_CODE). */
#define KVT_TEST_SKIP 77

/* Skip the whole test program with a reason, unless the environment variable
 * `require` (KVT_TEST_REQUIRE_GPU, KVT_TEST_REQUIRE_RDMA) is set to 1, in which
 * case the missing hardware is a failure. */
void kvt_test_skip(const char *require, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

/* For the io_uring run of a test that has a thread-pool twin (its
 * `threads` run): exit 77 with the reason when this kernel, or a seccomp
 * filter around the test, refuses io_uring, since the run would only repeat
 * the thread pool's. KVT_TEST_REQUIRE_IO_URING=1 makes that a failure (CI,
 * where io_uring must exist). Returns when a ring can be set up. */
void kvt_test_need_io_uring(void);

/* Whether KVT_TEST_REQUIRE_IO_URING=1: a case of the io_uring run that finds
 * its engine on the thread pool after all fails rather than skips. */
bool kvt_test_io_uring_required(void);

/* Seed for randomised tests: $KVT_TEST_SEED or the clock. Printed, so a
 * failing run can be replayed. */
uint64_t kvt_test_seed(void);

/* xorshift64* step; state must be non-zero. */
static inline uint64_t kvt_test_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Fill buf with bytes derived from seed (reproducible). */
void kvt_test_fill(void *buf, size_t len, uint64_t seed);

/* A fresh directory under $KVT_TEST_TMPDIR (or /tmp) named after `tag`,
 * removed with its files by kvt_test_rmdir. Returns a malloc'd path. */
char *kvt_test_mkdtemp(const char *tag);

/* A fresh directory for Unix sockets, always under /tmp whatever
 * $KVT_TEST_TMPDIR says: a socket's path must fit sun_path (108 bytes) and
 * the build tree may sit at any depth. Malloc'd; remove with kvt_test_rmdir. */
char *kvt_test_sockdir(const char *tag);
void kvt_test_rmdir(const char *path);

void kvt_test_sleep_ms(unsigned ms);

/* Make sure pages explicit 2 MiB huge pages are free, reserving what is
 * missing (root only). Returns how many it added, or -errno with the reason
 * printed. What it added is given back by kvt_test_huge_give_back (a cmocka
 * teardown: call it once their users are unmapped). */
int kvt_test_huge_reserve(unsigned pages);
int kvt_test_huge_give_back(void **state);

/* A figure of /proc/meminfo (field with its colon: "HugePages_Free:"), or
 * -1 when it has none. */
long kvt_test_meminfo(const char *field);

/* Write text and a newline to path, mode 0600 (a secret file). */
void kvt_test_write_secret(const char *path, const char *text);

#endif
