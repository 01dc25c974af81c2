/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier — where the library's log lines go.
 *
 * The library reports what an operator should know (a tier degraded, a file
 * moved aside, what recovery found) as one line per event: "event=NAME
 * key=value ...", values with spaces in double quotes, no newline. By default
 * lines up to KVT_LOG_INFO go to stderr as "kvtier LEVEL: LINE"; a program
 * with its own log (kvtierd) sets a handler instead. */
#ifndef KVTIER_LOG_H
#define KVTIER_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

enum kvt_log_level {
	KVT_LOG_ERROR = 0,
	KVT_LOG_WARN = 1,
	KVT_LOG_INFO = 2,
	KVT_LOG_DEBUG = 3,
};

/* Receives one log line (msg, without a newline, valid during the call).
 * Called from any thread of the library, possibly from several at once. */
typedef void (*kvt_log_cb)(void *arg, enum kvt_log_level level, const char *msg);

/* Send the library's log lines to cb(arg, ...), or back to the default
 * (stderr, up to KVT_LOG_INFO) with cb NULL. Thread-safe. */
void kvt_log_set_handler(kvt_log_cb cb, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_LOG_H */
