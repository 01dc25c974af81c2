/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics endpoint from a cmocka test: the daemon_proc helpers, with a
 * failed GET or a missing series failing the test. Include after cmocka.h. */
#ifndef KVT_TESTS_SIDECAR_METRICS_CHECKED_H
#define KVT_TESTS_SIDECAR_METRICS_CHECKED_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon_proc.h"

/* The reply to req on the endpoint at port (the caller frees it). */
static inline char *kvtd_http_checked(int port, const char *req)
{
	char *text = kvtd_http(port, req);

	assert_non_null(text);
	return text;
}

/* The value of series in an exposition text. */
static inline double kvtd_metric_checked(const char *text, const char *series)
{
	double v = kvtd_metric(text, series);

	if (isnan(v))
		fail_msg("metric %s missing", series);
	return v;
}

/* Every family of an exposition text has one HELP and one TYPE line: a
 * scraper refuses the whole text at a second one ("second HELP line"). */
static inline void kvtd_metrics_families_once(const char *text)
{
	for (const char *p = text; (p = strstr(p, "# HELP ")) != NULL; p++) {
		size_t n = strcspn(p + 7, " \n");
		char pat[160];

		assert_true(n < sizeof(pat) - 9);
		snprintf(pat, sizeof(pat), "# HELP %.*s ", (int)n, p + 7);
		if (strstr(p + 1, pat))
			fail_msg("metric family %.*s has two HELP lines", (int)n, p + 7);
		snprintf(pat, sizeof(pat), "# TYPE %.*s ", (int)n, p + 7);
		const char *t = strstr(text, pat);
		if (t && strstr(t + 1, pat))
			fail_msg("metric family %.*s has two TYPE lines", (int)n, p + 7);
	}
}

#endif
