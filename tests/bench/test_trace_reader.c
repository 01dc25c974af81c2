/* SPDX-License-Identifier: Apache-2.0 */
/* The streaming trace reader: fields parsed, blank lines ignored, and each
 * kind of malformed line reported with its line number, then skipped or
 * rejected as asked. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trace_util.h"

static void fields_are_parsed(void **state)
{
	char *path = trace_file("reader-ok",
				"{\"timestamp\": 5, \"input_length\": 1000, \"output_length\": 7, "
				"\"hash_ids\": [3, 1, 4]}\n"
				"\n   \n"
				"{\"hash_ids\": [], \"output_length\": 0, \"input_length\": 0, "
				"\"timestamp\": 5.5, \"extra\": \"ignored\"}\n");
	struct kvt_trace_reader_opts o;
	struct kvt_trace_reader *r;
	struct kvt_trace_req req;

	kvt_trace_reader_opts_init(&o, sizeof(o));
	assert_int_equal(kvt_trace_reader_open(path, &o, &r), 0);
	assert_int_equal(kvt_trace_reader_next(r, &req), 1);
	assert_int_equal(req.line, 1);
	assert_true(req.timestamp_ms == 5.0);
	assert_int_equal(req.input_length, 1000);
	assert_int_equal(req.output_length, 7);
	assert_int_equal(req.n_ids, 3);
	assert_int_equal(req.hash_ids[0], 3);
	assert_int_equal(req.hash_ids[2], 4);
	assert_int_equal(kvt_trace_reader_next(r, &req), 1);
	assert_int_equal(req.line, 4);
	assert_int_equal(req.n_ids, 0);
	assert_int_equal(kvt_trace_reader_next(r, &req), 0);
	assert_int_equal(kvt_trace_reader_lines(r), 4);
	assert_int_equal(kvt_trace_reader_bad_lines(r), 0);
	/* a rewind reads the same again */
	assert_int_equal(kvt_trace_reader_rewind(r), 0);
	assert_int_equal(kvt_trace_reader_next(r, &req), 1);
	assert_int_equal(req.line, 1);
	kvt_trace_reader_close(r);
	trace_file_remove(path);
}

#define GOOD(ts) "{\"timestamp\": " #ts ", \"input_length\": 10, \"output_length\": 1, " \
		 "\"hash_ids\": [1]}\n"

static const char bad_trace[] =
	GOOD(0)                                                                    /* 1 */
	"{\"timestamp\": 1, \"input_length\": 10,\n"                              /* 2 bad JSON */
	"{\"timestamp\": 2, \"output_length\": 1, \"hash_ids\": [1]}\n"           /* 3 missing */
	"{\"timestamp\": 3, \"input_length\": -5, \"output_length\": 1, \"hash_ids\": [1]}\n"
	"{\"timestamp\": 4, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}\n"
	"[1, 2, 3]\n"                                                             /* 6 not object */
	"{\"timestamp\": 7, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": 7}\n"
	GOOD(8)                                                                   /* 8 */
	"{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
	"{\"timestamp\": \"9\", \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
	"{\"timestamp\": 9, \"input_length\": 1.5, \"output_length\": 1, \"hash_ids\": [1]}\n"
	GOOD(12);                                                                 /* 12 */

static void malformed_lines_are_skipped_with_their_numbers(void **state)
{
	static const struct {
		int line;
		const char *says;
	} want[] = {
		{ 2, "bad JSON" },
		{ 3, "missing field \"input_length\"" },
		{ 4, "\"input_length\" is negative (-5)" },
		{ 5, "hash_ids[1] is not a non-negative integer" },
		{ 6, "not a JSON object" },
		{ 7, "\"hash_ids\" is not an array" },
		{ 9, "timestamp 1 before the previous request's 8" },
		{ 10, "\"timestamp\" is not a number" },
		{ 11, "\"input_length\" is not an integer" },
	};
	char *path = trace_file("reader-bad", bad_trace), *msgs = NULL, *line;
	size_t msgs_len = 0;
	FILE *errs = open_memstream(&msgs, &msgs_len);
	struct kvt_trace_reader_opts o;
	struct kvt_trace_reader *r;
	struct kvt_trace_req req;
	uint64_t good[3];
	int n = 0, err;

	kvt_trace_reader_opts_init(&o, sizeof(o));
	o.skip_bad = true;
	o.errors = errs;
	o.label = "t.jsonl";
	assert_int_equal(kvt_trace_reader_open(path, &o, &r), 0);
	while ((err = kvt_trace_reader_next(r, &req)) == 1) {
		assert_true(n < 3);
		good[n++] = req.line;
	}
	assert_int_equal(err, 0);
	assert_int_equal(n, 3);
	assert_int_equal(good[0], 1);
	assert_int_equal(good[1], 8);
	assert_int_equal(good[2], 12);
	assert_int_equal(kvt_trace_reader_bad_lines(r), 9);
	kvt_trace_reader_close(r);
	fclose(errs);

	line = msgs;
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		char prefix[64], *nl = strchr(line, '\n');

		assert_non_null(nl);
		*nl = 0;
		snprintf(prefix, sizeof(prefix), "t.jsonl:%d: ", want[k].line);
		assert_true(!strncmp(line, prefix, strlen(prefix)));
		if (!strstr(line, want[k].says))
			fail_msg("line %d: \"%s\" does not say \"%s\"", want[k].line, line,
				 want[k].says);
		assert_non_null(strstr(line, "(skipped)"));
		line = nl + 1;
	}
	assert_string_equal(line, "");
	free(msgs);
	trace_file_remove(path);
}

static void malformed_line_is_rejected_by_default(void **state)
{
	char *path = trace_file("reader-reject", bad_trace);
	struct kvt_trace_reader_opts o;
	struct kvt_trace_reader *r;
	struct kvt_trace_req req;

	kvt_trace_reader_opts_init(&o, sizeof(o));
	o.errors = NULL;
	assert_int_equal(kvt_trace_reader_open(path, &o, &r), 0);
	assert_int_equal(kvt_trace_reader_next(r, &req), 1);
	assert_int_equal(kvt_trace_reader_next(r, &req), -EBADMSG);
	assert_non_null(strstr(kvt_trace_reader_error(r), ":2: bad JSON"));
	kvt_trace_reader_close(r);
	trace_file_remove(path);
}

/* A long trace, line by line through one reader, every id accounted for. */
static void long_trace_streams(void **state)
{
	char *dirpath = trace_file("reader-long", "");
	FILE *f = fopen(dirpath, "w");
	struct kvt_trace_reader_opts o;
	struct kvt_trace_reader *r;
	struct kvt_trace_req req;
	uint64_t n = 0, sum = 0, want = 0;
	int err;

	assert_non_null(f);
	for (int i = 0; i < 50000; i++) {
		fprintf(f, "{\"timestamp\": %d, \"input_length\": 2048, \"output_length\": 1, "
			   "\"hash_ids\": [%d, %d, %d, %d]}\n", i, i, i + 1, i + 2, i + 3);
		want += 4ull * (uint64_t)i + 6;
	}
	assert_int_equal(fclose(f), 0);
	kvt_trace_reader_opts_init(&o, sizeof(o));
	o.progress = true; /* not a terminal under ctest: must stay silent */
	assert_int_equal(kvt_trace_reader_open(dirpath, &o, &r), 0);
	while ((err = kvt_trace_reader_next(r, &req)) == 1) {
		n++;
		for (size_t j = 0; j < req.n_ids; j++)
			sum += req.hash_ids[j];
	}
	assert_int_equal(err, 0);
	assert_int_equal(n, 50000);
	assert_int_equal(sum, want);
	kvt_trace_reader_close(r);
	trace_file_remove(dirpath);
}

/* The fast scanner and the full JSON parser agree on every line: the same
 * requests, the same malformed lines. */
static void fast_path_agrees_with_the_full_parser(void **state)
{
	static const char *odd[] = {
		"{\"timestamp\": 1.5e3, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1]}",
		"  {  \"hash_ids\" : [ 1 , 2 ] , \"timestamp\":1500.25,\"output_length\":1,"
		"\"input_length\":3 }  ",
		"{\"timestamp\": 1600, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [], "
		"\"extra\": 7}",
		"{\"timestamp\": 1601, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1], "
		"\"note\": \"text\"}",
		"{\"timestamp\": 1602, \"input_length\": 10, \"output_length\": 0, "
		"\"hash_ids\": [9223372036854775807]}",
		"{\"timestamp\": 1603, \"input_length\": 10, \"output_length\": 0, "
		"\"hash_ids\": [9223372036854775808]}",
		"{\"timestamp\": 1604, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [01]}",
		"{\"timestamp\": 1605, \"input_length\": 1.0, \"output_length\": 0, \"hash_ids\": [1]}",
		"{\"timestamp\": 1606, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1,]}",
		"{\"timestamp\": 1607, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1]} x",
		"{\"timestamp\": 1608, \"timestamp\": 1609, \"input_length\": 10, \"output_length\": 0, "
		"\"hash_ids\": [1]}",
		"{\"timestamp\": 0x10, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1]}",
		"{\"timestamp\": 1610, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [-1]}",
		"{\"tim\\u0065stamp\": 1611, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1]}",
		"{\"timestamp\": 1612, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [2, 3]}",
		"{\"timestamp\": 1611, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1]}",
		"{\"timestamp\": 1613, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1e2]}",
		"{\"timestamp\": 1614, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [4]}",
	};
	uint64_t seed = kvt_test_seed();
	char *text = NULL, *path;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct kvt_trace_reader *r[2];
	uint64_t t = 2000;

	assert_non_null(f);
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
		fprintf(f, "%s\n", odd[i]);
	/* then random well-formed lines in random spacing */
	for (int i = 0; i < 2000; i++) {
		int n = (int)(kvt_test_rand(&seed) % 40);
		const char *sp = kvt_test_rand(&seed) & 1 ? " " : "";

		t += kvt_test_rand(&seed) % 3;
		fprintf(f, "{\"timestamp\":%s%llu,%s\"input_length\": %llu, \"output_length\": %llu, "
			   "\"hash_ids\": [", sp, (unsigned long long)t, sp,
			(unsigned long long)(kvt_test_rand(&seed) % 100000),
			(unsigned long long)(kvt_test_rand(&seed) % 1000));
		for (int j = 0; j < n; j++)
			fprintf(f, "%s%s%llu", j ? "," : "", j ? sp : "",
				(unsigned long long)(kvt_test_rand(&seed) >> (kvt_test_rand(&seed) % 64)));
		fprintf(f, "]}\n");
	}
	assert_int_equal(fclose(f), 0);
	path = trace_file("reader-fast", text);
	for (int k = 0; k < 2; k++) {
		struct kvt_trace_reader_opts o;

		kvt_trace_reader_opts_init(&o, sizeof(o));
		o.skip_bad = true;
		o.errors = NULL;
		o.full_parser = k == 1;
		assert_int_equal(kvt_trace_reader_open(path, &o, &r[k]), 0);
	}
	for (;;) {
		struct kvt_trace_req a, b;
		int ea = kvt_trace_reader_next(r[0], &a), eb = kvt_trace_reader_next(r[1], &b);

		assert_int_equal(ea, eb);
		if (ea != 1)
			break;
		assert_int_equal(a.line, b.line);
		assert_true(a.timestamp_ms == b.timestamp_ms);
		assert_int_equal(a.input_length, b.input_length);
		assert_int_equal(a.output_length, b.output_length);
		assert_int_equal(a.n_ids, b.n_ids);
		if (a.n_ids)
			assert_memory_equal(a.hash_ids, b.hash_ids, a.n_ids * sizeof(uint64_t));
	}
	assert_int_equal(kvt_trace_reader_bad_lines(r[0]), kvt_trace_reader_bad_lines(r[1]));
	assert_true(kvt_trace_reader_bad_lines(r[0]) >= 9);
	kvt_trace_reader_close(r[0]);
	kvt_trace_reader_close(r[1]);
	trace_file_remove(path);
	free(text);
}

#define AT(ts, id) "{\"timestamp\": " #ts ", \"input_length\": 1, \"output_length\": 0, " \
			"\"hash_ids\": [" #id "]}\n"

/* Within its window the reader restores timestamp order, stable for equal
 * timestamps; past it, a late request is a malformed line. */
static void reorder_window_sorts_and_rejects_the_too_late(void **state)
{
	char *path = trace_file("reader-reorder", AT(0, 1) AT(3, 2) AT(1, 3) AT(2, 4) AT(5, 5)
						       AT(4, 6) AT(4, 7) AT(6, 8) AT(1, 9) AT(7, 10));
	static const uint64_t want_ids[] = { 1, 3, 4, 2, 6, 7, 5, 8, 10 };
	struct kvt_trace_reader_opts o;
	struct kvt_trace_reader *r;
	struct kvt_trace_req req;
	size_t n = 0;
	int err;

	kvt_trace_reader_opts_init(&o, sizeof(o));
	o.reorder_window = 3;
	o.skip_bad = true;
	o.errors = NULL;
	assert_int_equal(kvt_trace_reader_open(path, &o, &r), 0);
	while ((err = kvt_trace_reader_next(r, &req)) == 1) {
		assert_true(n < 9);
		assert_int_equal(req.n_ids, 1);
		assert_int_equal(req.hash_ids[0], want_ids[n]);
		n++;
	}
	assert_int_equal(err, 0);
	assert_int_equal(n, 9);
	/* timestamp 1 on line 9 came after 3 had been returned */
	assert_int_equal(kvt_trace_reader_bad_lines(r), 1);
	assert_non_null(strstr(kvt_trace_reader_error(r), ":9: timestamp 1 before"));
	kvt_trace_reader_close(r);

	/* without a window the same trace stops at line 3 */
	o.reorder_window = 0;
	o.skip_bad = false;
	assert_int_equal(kvt_trace_reader_open(path, &o, &r), 0);
	assert_int_equal(kvt_trace_reader_next(r, &req), 1);
	assert_int_equal(kvt_trace_reader_next(r, &req), 1);
	assert_int_equal(kvt_trace_reader_next(r, &req), -EBADMSG);
	assert_non_null(strstr(kvt_trace_reader_error(r), ":3: timestamp 1 before"));
	kvt_trace_reader_close(r);
	trace_file_remove(path);
}

static void open_errors(void **state)
{
	struct kvt_trace_reader_opts o;
	struct kvt_trace_reader *r;

	kvt_trace_reader_opts_init(&o, sizeof(o));
	assert_int_equal(kvt_trace_reader_open("/nonexistent/trace.jsonl", &o, &r), -ENOENT);
	o.size = 3;
	assert_int_equal(kvt_trace_reader_open("/dev/null", &o, &r), -EINVAL);
	kvt_trace_reader_close(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fields_are_parsed),
		cmocka_unit_test(malformed_lines_are_skipped_with_their_numbers),
		cmocka_unit_test(malformed_line_is_rejected_by_default),
		cmocka_unit_test(long_trace_streams),
		cmocka_unit_test(fast_path_agrees_with_the_full_parser),
		cmocka_unit_test(reorder_window_sorts_and_rejects_the_too_late),
		cmocka_unit_test(open_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
