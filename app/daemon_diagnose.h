/* SPDX-License-Identifier: Apache-2.0 */
/* Why kvtierd could not start, in words that name what failed and where: a
 * data dir it may not write, a data dir another process holds. The library returns an errno; these turn it into the path,
 * the holder and what to do, for the one line the operator reads first. */
#ifndef KVT_APP_DAEMON_DIAGNOSE_H
#define KVT_APP_DAEMON_DIAGNOSE_H

#include <stddef.h>
#include <sys/types.h>

/* The pid of the process holding a lock (flock or POSIX) on the file at
 * path, read from /proc/locks; 0 when none is found or it cannot be told. */
pid_t kvtd_lock_holder(const char *path);

/* Explain err from opening the store whose SSD tier lives in ssd_dir (NULL
 * when there is none): writes key=value pairs (path=..., reason="...",
 * holder_pid=...) to why. */
void kvtd_explain_store_error(int err, const char *ssd_dir, char *why, size_t len);

#endif /* KVT_APP_DAEMON_DIAGNOSE_H */
