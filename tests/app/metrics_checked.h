/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics endpoint from a cmocka test: the daemon_proc helpers, with a
 * failed GET or a missing series failing the test. Include after cmocka.h. */
#ifndef KVT_TESTS_SIDECAR_METRICS_CHECKED_H
#define KVT_TESTS_SIDECAR_METRICS_CHECKED_H

#include <math.h>

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

#endif
