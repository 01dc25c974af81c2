/* SPDX-License-Identifier: Apache-2.0 */
/* bench-smoke: `kvtier-bench copy --json` on the host backend with tiny sizes
 * prints one JSON object of the documented shape — backend, and cases of
 * {path, block_bytes, gbps, reference_gbps, ratio} covering every path — with
 * positive figures and ratio = gbps / reference_gbps. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

static const char *bench;

static void copy_json_has_the_documented_shape(void **state)
{
	static const char *want[] = {
		"h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable",
		"gather_direct", "gather_staged", "gather_per_layer", "gather_direct_vs_per_layer",
		"scatter_direct", "scatter_staged", "scatter_per_layer",
		"scatter_direct_vs_per_layer",
	};
	/* 4 layers x K,V x 16 tokens x 8 heads x 128 x bf16 */
	const json_int_t block = 4 * 2 * 16 * 8 * 128 * 2;
	char cmd[1024];
	json_error_t err;
	json_t *root, *cases, *c;
	size_t i, seen[sizeof(want) / sizeof(want[0])] = { 0 };
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s copy --json --backend host --min-size 64K "
		 "--max-size 256K --layers 4 --blocks 3 --reps 2", bench);
	p = popen(cmd, "r");
	assert_non_null(p);
	root = json_loadf(p, 0, &err);
	assert_int_equal(pclose(p), 0);
	if (!root)
		fail_msg("not JSON: %s (line %d)", err.text, err.line);
	assert_string_equal(json_string_value(json_object_get(root, "backend")), "host");
	cases = json_object_get(root, "cases");
	assert_true(json_is_array(cases));
	/* 2 sizes x 4 plain paths, 2 x 4 gather/scatter paths */
	assert_int_equal(json_array_size(cases), 2 * 4 + 8);
	json_array_foreach(cases, i, c) {
		const char *path = json_string_value(json_object_get(c, "path"));
		json_t *bb = json_object_get(c, "block_bytes");
		double gbps = json_real_value(json_object_get(c, "gbps"));
		double ref = json_real_value(json_object_get(c, "reference_gbps"));
		double ratio = json_real_value(json_object_get(c, "ratio"));
		size_t k;

		assert_non_null(path);
		assert_true(json_is_integer(bb));
		assert_true(json_is_real(json_object_get(c, "gbps")));
		assert_true(json_is_real(json_object_get(c, "reference_gbps")));
		assert_true(json_is_real(json_object_get(c, "ratio")));
		assert_int_equal(json_object_size(c), 5);
		assert_true(gbps > 0 && ref > 0);
		assert_true(fabs(ratio - gbps / ref) <= 1e-6 * ratio);
		for (k = 0; k < sizeof(want) / sizeof(want[0]); k++)
			if (!strcmp(path, want[k]))
				break;
		assert_true(k < sizeof(want) / sizeof(want[0]));
		seen[k]++;
		if (!strncmp(path, "gather", 6) || !strncmp(path, "scatter", 7))
			assert_int_equal(json_integer_value(bb), block);
		else
			assert_true(json_integer_value(bb) == 64 * 1024 ||
				    json_integer_value(bb) == 256 * 1024);
	}
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
		assert_int_equal(seen[k], k < 4 ? 2 : 1);
	json_decref(root);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(copy_json_has_the_documented_shape),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s PATH-TO-kvtier-bench\n", argv[0]);
		return 2;
	}
	bench = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
