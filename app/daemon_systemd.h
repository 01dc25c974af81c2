/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd under systemd, without libsystemd: the listening socket a socket
 * unit passes (sd_listen_fds(3) semantics) and the service notifications of
 * Type=notify (sd_notify(3) semantics). Outside systemd both are no-ops. */
#ifndef KVT_APP_DAEMON_SYSTEMD_H
#define KVT_APP_DAEMON_SYSTEMD_H

#include <stddef.h>

/* The sidecar's listening socket, when systemd passed this process one:
 * LISTEN_PID is our pid and LISTEN_FDS counts the fds from 3 on. The fd
 * named "sidecar" in LISTEN_FDNAMES (FileDescriptorName= of the socket
 * unit) is taken, or the only one passed when none is so named; any other
 * passed fd is closed. The LISTEN_* variables are removed from the
 * environment in every case, so that no child sees them.
 *
 * Returns the fd (close-on-exec, non-blocking) with its path in path (""
 * for an unnamed or abstract socket), 0 when nothing was passed to us,
 * -EINVAL for malformed variables or several fds and none named "sidecar",
 * -ENOTSOCK when the fd is not a listening Unix stream socket, or -EBADF.
 * A message on stderr says which. */
int kvtd_sd_listen_fd(char *path, size_t path_len);

/* Send a notification such as "READY=1" or "STOPPING=1" to the service
 * manager, when $NOTIFY_SOCKET names one (a path, or @name in the abstract
 * namespace). Returns 0 (also when there is none) or -errno. Allocates
 * nothing, so a signal-handling thread may call it. */
int kvtd_sd_notify(const char *state);

#endif /* KVT_APP_DAEMON_SYSTEMD_H */
