/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's structured log lines (see daemon_log.h). */
#include "app/daemon_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "util/log.h"

static enum kvt_log_level max_level = KVT_LOG_INFO;
static const char *const names[] = { "error", "warn", "info", "debug" };

void kvtd_log_set_level(enum kvt_log_level level)
{
	max_level = level;
}

void kvtd_log_cb(void *arg, enum kvt_log_level level, const char *msg)
{
	struct timespec ts;
	struct tm tm;
	char when[32];

	if (level > max_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	/* one fprintf per line: stdio locks the stream, so lines never interleave */
	fprintf(stderr, "ts=%s.%03ldZ level=%s %s\n", when, ts.tv_nsec / 1000000,
		names[level <= KVT_LOG_DEBUG ? level : KVT_LOG_DEBUG], msg);
}

void kvtd_log(enum kvt_log_level level, const char *fmt, ...)
{
	va_list ap;

	if (level > max_level)
		return;
	va_start(ap, fmt);
	kvt_vlog_to(kvtd_log_cb, NULL, level, fmt, ap);
	va_end(ap);
}
