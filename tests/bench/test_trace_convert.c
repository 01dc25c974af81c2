/* SPDX-License-Identifier: Apache-2.0 */
/* The token-id converter: kvtier's prefix keys numbered densely, so equal
 * prefixes get equal ids and a change in a block changes every id after it;
 * partial tails; the accepted input shapes; malformed lines. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "bench/trace/convert.h"
#include "kvtier/store.h"
#include "trace_util.h"

static int convert(const char *in, char **out, bool skip_bad, struct kvt_convert_stats *st)
{
	FILE *fi = fmemopen((void *)in, strlen(in), "r");
	size_t len;
	FILE *fo = open_memstream(out, &len);
	struct kvt_convert_opts o;
	int err;

	assert_non_null(fi);
	assert_non_null(fo);
	kvt_convert_opts_init(&o, sizeof(o));
	o.block_tokens = 4;
	o.skip_bad = skip_bad;
	o.errors = NULL;
	err = kvt_trace_convert(fi, fo, &o, st);
	fclose(fi);
	fclose(fo);
	return err;
}

/* The ids of line k (0-based) of a converted trace. */
static size_t ids_of(const char *text, int k, uint64_t *ids, json_int_t *in_len,
		     double *ts)
{
	const char *p = text;
	json_t *doc, *a;
	size_t n;

	while (k--)
		p = strchr(p, '\n') + 1;
	doc = json_loadb(p, (size_t)(strchr(p, '\n') - p), 0, NULL);
	assert_non_null(doc);
	a = json_object_get(doc, "hash_ids");
	n = json_array_size(a);
	for (size_t i = 0; i < n; i++)
		ids[i] = (uint64_t)json_integer_value(json_array_get(a, i));
	*in_len = json_integer_value(json_object_get(doc, "input_length"));
	*ts = json_number_value(json_object_get(doc, "timestamp"));
	json_decref(doc);
	return n;
}

static void equal_prefixes_get_equal_ids(void **state)
{
	const char *in =
		"[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"                               /* 2 full + tail */
		"{\"tokens\": [1, 2, 3, 4, 5, 6, 7, 8], \"timestamp\": 50, \"output_length\": 3}\n"
		"{\"token_ids\": [1, 2, 3, 4, 5, 6, 7, 0, 9, 10]}\n"             /* 2nd block differs */
		"{\"prompt_token_ids\": [9, 2, 3, 4, 5, 6, 7, 8]}\n"              /* 1st differs */
		"[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n";                          /* longer tail */
	struct kvt_convert_stats st;
	uint64_t a[8], b[8], c[8], d[8], e[8];
	json_int_t len;
	double ts;
	char *out = NULL;

	assert_int_equal(convert(in, &out, false, &st), 0);
	assert_int_equal(st.requests, 5);
	assert_int_equal(ids_of(out, 0, a, &len, &ts), 3);
	assert_int_equal(len, 10);
	assert_true(ts == 0);
	assert_int_equal(a[0], 0); /* dense, in order of first appearance */
	assert_int_equal(a[1], 1);
	assert_int_equal(a[2], 2);
	assert_int_equal(ids_of(out, 1, b, &len, &ts), 2);
	assert_true(ts == 50);
	assert_int_equal(b[0], a[0]);
	assert_int_equal(b[1], a[1]);
	assert_int_equal(ids_of(out, 2, c, &len, &ts), 3);
	assert_int_equal(c[0], a[0]);
	assert_true(c[1] != a[1] && c[2] != a[2]); /* everything after a change is new */
	assert_int_equal(ids_of(out, 3, d, &len, &ts), 2);
	assert_true(d[0] != a[0] && d[1] != a[1]); /* same 2nd block, other prefix */
	assert_int_equal(ids_of(out, 4, e, &len, &ts), 3);
	assert_int_equal(e[0], a[0]);
	assert_int_equal(e[1], a[1]);
	assert_true(e[2] != a[2]); /* a tail of 3 tokens is not one of 2 */
	assert_int_equal(st.blocks, 3 + 2 + 3 + 2 + 3);
	assert_int_equal(st.distinct_blocks, 3 + 0 + 2 + 2 + 1);
	free(out);
}

/* Replaying a converted trace with infinite capacity hits exactly the blocks
 * whose prefix (keys of kvt_prefix_keys) was seen before. */
static void converted_trace_replays(void **state)
{
	const char *in = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
			 "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]\n"
			 "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
	struct kvt_convert_stats st;
	struct kvt_replay_opts o;
	struct kvt_replay_stats rs;
	char *out = NULL, *path;

	assert_int_equal(convert(in, &out, false, &st), 0);
	path = trace_file("convert", out);
	one_tier(&o, "lru", KVT_REPLAY_INFINITE);
	o.block_tokens = 4;
	assert_int_equal(replay_file(path, &o, &rs), 0);
	/* r2 shares the 2 full blocks (its 3rd block is full, not r1's tail);
	 * r3 equals r1: all 3 */
	assert_int_equal(rs.hit_blocks, 2 + 3);
	assert_int_equal(rs.hit_tokens, 8 + 10);
	trace_file_remove(path);
	free(out);
}

static void malformed_lines(void **state)
{
	const char *in = "[1, 2, 3, 4]\n"
			 "[1, -2, 3]\n"
			 "{\"tokens\": \"abc\"}\n"
			 "{\"text\": [1]}\n"
			 "{oops\n"
			 "[5, 6, 7, 8]\n";
	struct kvt_convert_stats st;
	char *out = NULL;

	assert_int_equal(convert(in, &out, false, &st), -EBADMSG);
	assert_int_equal(st.requests, 1);
	free(out);
	out = NULL;
	assert_int_equal(convert(in, &out, true, &st), 0);
	assert_int_equal(st.requests, 2);
	assert_int_equal(st.bad_lines, 4);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(equal_prefixes_get_equal_ids),
		cmocka_unit_test(converted_trace_replays),
		cmocka_unit_test(malformed_lines),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
