/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's log: one line per event on stderr, logfmt-style key=value pairs
 *   ts=2026-11-30T05:10:00.123Z level=info event=conn.open conn=3 pid=812
 * so a person can read it and a collector can parse it. Thread-safe. */
#ifndef KVT_APP_DAEMON_LOG_H
#define KVT_APP_DAEMON_LOG_H

#include "transport/server.h"

/* Lines above `level` are dropped. */
void kvtd_log_set_level(enum kvt_log_level level);

/* Log one event; msg is "event=NAME key=value ..." (a kvt_log_cb; arg unused). */
void kvtd_log_cb(void *arg, enum kvt_log_level level, const char *msg);

void kvtd_log(enum kvt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KVT_APP_DAEMON_LOG_H */
