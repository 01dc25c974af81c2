/* SPDX-License-Identifier: Apache-2.0 */
/* The library's own log calls: formatted, then handed to the handler the
 * program set (include/kvtier/log.h). */
#ifndef KVT_UTIL_LOG_H
#define KVT_UTIL_LOG_H

#include "kvtier/log.h"

/* Log one event: fmt makes "event=NAME key=value ..." (no newline). */
void kvt_log(enum kvt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KVT_UTIL_LOG_H */
