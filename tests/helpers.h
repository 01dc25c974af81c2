/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the tests: skip codes, seeded randomness, temp dirs. */
#ifndef KVT_TESTS_HELPERS_H
#define KVT_TESTS_HELPERS_H

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

/* Write text and a newline to path, mode 0600 (a secret file). */
void kvt_test_write_secret(const char *path, const char *text);

#endif
