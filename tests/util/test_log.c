/* SPDX-License-Identifier: Apache-2.0 */
/* The one log path: kvt_log reaches the program's handler, kvt_log_to the
 * callback a part was given, both formatted in the same place, a long line
 * cut rather than split or overrun. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/log.h"

struct seen {
	int calls;
	enum kvt_log_level level;
	const void *arg;
	char msg[4096];
};

static void record_cb(void *arg, enum kvt_log_level level, const char *msg)
{
	struct seen *s = arg;

	s->calls++;
	s->level = level;
	s->arg = arg;
	snprintf(s->msg, sizeof(s->msg), "%s", msg);
}

static void log_to_hands_the_line_to_the_given_callback(void **state)
{
	struct seen s = { 0 };

	kvt_log_to(record_cb, &s, KVT_LOG_WARN, "event=peer.down node=%s tries=%d", "b", 3);
	assert_int_equal(s.calls, 1);
	assert_int_equal(s.level, KVT_LOG_WARN);
	assert_ptr_equal(s.arg, &s);
	assert_string_equal(s.msg, "event=peer.down node=b tries=3");
}

static void log_to_without_a_callback_logs_nothing(void **state)
{
	struct seen s = { 0 };

	kvt_log_set_handler(record_cb, &s);
	kvt_log_to(NULL, NULL, KVT_LOG_ERROR, "event=nowhere");
	kvt_log_set_handler(NULL, NULL);
	assert_int_equal(s.calls, 0);
}

static void kvt_log_reaches_the_programs_handler(void **state)
{
	struct seen s = { 0 };

	kvt_log_set_handler(record_cb, &s);
	kvt_log(KVT_LOG_INFO, "event=tier.degraded tier=%s", "ssd");
	kvt_log_set_handler(NULL, NULL);
	assert_int_equal(s.calls, 1);
	assert_int_equal(s.level, KVT_LOG_INFO);
	assert_string_equal(s.msg, "event=tier.degraded tier=ssd");
}

static void a_long_line_is_cut_not_overrun(void **state)
{
	struct seen s = { 0 };
	char big[3000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	kvt_log_to(record_cb, &s, KVT_LOG_DEBUG, "event=big v=%s", big);
	assert_int_equal(s.calls, 1);
	assert_int_equal(strlen(s.msg), 1023);
	assert_memory_equal(s.msg, "event=big v=xxx", 15);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(log_to_hands_the_line_to_the_given_callback),
		cmocka_unit_test(log_to_without_a_callback_logs_nothing),
		cmocka_unit_test(kvt_log_reaches_the_programs_handler),
		cmocka_unit_test(a_long_line_is_cut_not_overrun),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
