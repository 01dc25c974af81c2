/* SPDX-License-Identifier: Apache-2.0 */
/* The version in the headers is the project's, and the library reports the
 * same one at run time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier/types.h"

static void library_and_headers_agree(void **state)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", KVT_VERSION_MAJOR, KVT_VERSION_MINOR,
		 KVT_VERSION_PATCH);
	assert_string_equal(KVT_VERSION_STRING, want);
	assert_string_equal(kvt_version(), KVT_VERSION_STRING);
	assert_int_equal(KVT_VERSION_NUMBER,
			 KVT_VERSION_MAJOR * 10000 + KVT_VERSION_MINOR * 100 + KVT_VERSION_PATCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(library_and_headers_agree),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
