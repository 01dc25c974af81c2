/* SPDX-License-Identifier: Apache-2.0 */
/* Block checksums: the dispatching hash and the copies that hash on the way
 * give XXH3_64bits' own sums (a block summed by one is verified by the
 * other, and by what an older build wrote), and copy every byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "util/block_sum.h"

/* Lengths around the copy's chunk (16 KiB) and XXH3's own sizes. */
static const size_t lens[] = { 0, 1, 16, 129, 240, 241, 4095, 16383, 16384, 16385,
			       65536 + 7, (1u << 20) + 3 };

static void sums_are_xxh3(void **state)
{
	uint64_t seed = kvt_test_seed();
	size_t max = (1u << 20) + 3;
	uint8_t *src = malloc(max), *dst = malloc(max + 1);

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	kvt_test_fill(src, max, seed);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		size_t n = lens[i];
		uint64_t want = XXH3_64bits(src, n);

		memset(dst, 0xa5, max + 1);
		assert_int_equal(kvt_block_sum(src, n), want);
		assert_int_equal(kvt_copy_sum(dst, src, n), want);
		assert_memory_equal(dst, src, n);
		assert_int_equal(dst[n], 0xa5); /* not a byte further */
	}
	free(src);
	free(dst);
}

/* A block gathered in pieces (an engine's layers) sums as the whole. */
static void pieces_sum_as_the_whole(void **state)
{
	uint64_t seed = kvt_test_seed();
	size_t len = 3u * 32768 + 100;
	uint8_t *src = malloc(len), *dst = malloc(len);
	struct kvt_sum s;

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	kvt_test_fill(src, len, seed);
	kvt_sum_begin(&s);
	for (size_t off = 0, piece = 1; off < len; off += piece, piece = piece * 3 + 1) {
		size_t n = len - off < piece ? len - off : piece;

		kvt_sum_copy(&s, dst + off, src + off, n);
	}
	assert_int_equal(kvt_sum_end(&s), XXH3_64bits(src, len));
	assert_memory_equal(dst, src, len);
	free(src);
	free(dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sums_are_xxh3),
		cmocka_unit_test(pieces_sum_as_the_whole),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
