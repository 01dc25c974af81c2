/* SPDX-License-Identifier: Apache-2.0 */
/* The library's own log calls: formatted, then handed to the handler the
 * program set (include/kvtier/log.h). */
#ifndef KVT_UTIL_LOG_H
#define KVT_UTIL_LOG_H

#include <stdarg.h>

#include "kvtier/log.h"

/* Log one event: fmt makes "event=NAME key=value ..." (no newline). */
void kvt_log(enum kvt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Log one event to cb(arg, ...) rather than to the program's handler: for
 * the parts whose options carry their own log callback (the server, the
 * cluster directory, the peer transports, the peer tier), so a test can tell
 * two of them apart in one process. Nothing when cb is NULL. Formatted as
 * kvt_log formats, in one place: no caller keeps a buffer of its own. */
void kvt_log_to(kvt_log_cb cb, void *arg, enum kvt_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void kvt_vlog_to(kvt_log_cb cb, void *arg, enum kvt_log_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#endif /* KVT_UTIL_LOG_H */
