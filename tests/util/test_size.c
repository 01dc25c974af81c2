/* SPDX-License-Identifier: Apache-2.0 */
/* The one size parser and printer: what people write is read exactly, and
 * what cannot be a byte count (NaN, infinity, overflow, junk) is refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/size.h"

static uint64_t parse_ok(const char *s, uint64_t whole)
{
	uint64_t v = 12345;

	if (kvt_parse_size(s, whole, &v))
		fail_msg("refused: \"%s\"", s);
	return v;
}

static void sizes_with_suffixes(void **state)
{
	assert_int_equal(parse_ok("0", 0), 0);
	assert_int_equal(parse_ok("4096", 0), 4096);
	assert_int_equal(parse_ok("64K", 0), 64 << 10);
	assert_int_equal(parse_ok("64k", 0), 64 << 10);
	assert_int_equal(parse_ok("64KiB", 0), 64 << 10);
	assert_int_equal(parse_ok("64 KB", 0), 64 << 10);
	assert_int_equal(parse_ok("1.5G", 0), 3ull << 29);
	assert_int_equal(parse_ok("2T", 0), 2ull << 40);
	assert_int_equal(parse_ok("16M", 0), 16 << 20);
	assert_int_equal(parse_ok("25%", 1000), 250);
	assert_int_equal(parse_ok("100%", 1 << 20), 1 << 20);
	assert_int_equal(parse_ok("0%", 1 << 20), 0);
	/* just below 2^64 */
	assert_int_equal(parse_ok("16777215T", 0), 16777215ull << 40);
}

static void what_is_not_a_size_is_refused(void **state)
{
	static const char *const bad[] = {
		"", "K", "-1", "-1K", "12Q", "1KX", "1 K B", "nan", "NaN", "nanK", "inf", "infinity",
		"1e30", "16777216T", "16E", "18446744073709551616", "1e400", "101%", "50%x", "nan%", "%",
		"1.5.5", "0x", "K64",
	};
	uint64_t v = 7;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (kvt_parse_size(bad[i], 100, &v) != -EINVAL)
			fail_msg("accepted: \"%s\" -> %llu", bad[i], (unsigned long long)v);
	assert_int_equal(v, 7); /* never written on failure */
	assert_int_equal(kvt_parse_size(NULL, 0, &v), -EINVAL);
	assert_int_equal(kvt_parse_size("1", 0, NULL), -EINVAL);
}

static void bytes_print_in_binary_units(void **state)
{
	char buf[32];

	assert_string_equal(kvt_fmt_bytes(0, buf, sizeof(buf)), "0 B");
	assert_string_equal(kvt_fmt_bytes(1023, buf, sizeof(buf)), "1023 B");
	assert_string_equal(kvt_fmt_bytes(64 << 10, buf, sizeof(buf)), "64 KiB");
	assert_string_equal(kvt_fmt_bytes(3ull << 29, buf, sizeof(buf)), "1.5 GiB");
	assert_string_equal(kvt_fmt_bytes(4718592, buf, sizeof(buf)), "4.5 MiB");
	assert_string_equal(kvt_fmt_bytes(64ull << 30, buf, sizeof(buf)), "64 GiB");
	assert_string_equal(kvt_fmt_bytes(UINT64_MAX, buf, sizeof(buf)), "16384 PiB");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sizes_with_suffixes),
		cmocka_unit_test(what_is_not_a_size_is_refused),
		cmocka_unit_test(bytes_print_in_binary_units),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
