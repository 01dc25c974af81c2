/* SPDX-License-Identifier: Apache-2.0 */
/* The library's log: one handler for the process, stderr by default. */
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_rwlock_t handler_lock = PTHREAD_RWLOCK_INITIALIZER;
static kvt_log_cb handler;
static void *handler_arg;

void kvt_log_set_handler(kvt_log_cb cb, void *arg)
{
	pthread_rwlock_wrlock(&handler_lock);
	handler = cb;
	handler_arg = arg;
	pthread_rwlock_unlock(&handler_lock);
}

static void log_stderr(enum kvt_log_level level, const char *msg)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	if (level > KVT_LOG_INFO)
		return;
	/* one call per line: stdio locks the stream, lines never interleave */
	fprintf(stderr, "kvtier %s: %s\n", names[level], msg);
}

/* The program's handler, or stderr: kvt_log's destination. */
static void handler_cb(void *unused, enum kvt_log_level level, const char *msg)
{
	pthread_rwlock_rdlock(&handler_lock);
	if (handler)
		handler(handler_arg, level, msg);
	else
		log_stderr(level, msg);
	pthread_rwlock_unlock(&handler_lock);
}

void kvt_vlog_to(kvt_log_cb cb, void *arg, enum kvt_log_level level, const char *fmt, va_list ap)
{
	char msg[1024]; /* a longer line is cut, never split */

	if (!cb)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	cb(arg, level, msg);
}

void kvt_log_to(kvt_log_cb cb, void *arg, enum kvt_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kvt_vlog_to(cb, arg, level, fmt, ap);
	va_end(ap);
}

void kvt_log(enum kvt_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kvt_vlog_to(handler_cb, NULL, level, fmt, ap);
	va_end(ap);
}
