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
 * unit, or FDNAME= of the fd store) is taken, or the only one passed when
 * none is so named; the one named "dram" (the DRAM tier's region, kept in
 * the fd store across a restart or a crash) goes to *dram_fd (-1: none);
 * any other passed fd is closed. The LISTEN_* variables are removed from the
 * environment in every case, so that no child sees them.
 *
 * Returns the fd (close-on-exec, non-blocking) with its path in path (""
 * for an unnamed or abstract socket), 0 when nothing was passed to us,
 * -EINVAL for malformed variables or several fds and none named "sidecar",
 * -ENOTSOCK when the fd is not a listening Unix stream socket, or -EBADF.
 * A message on stderr says which. */
int kvtd_sd_listen_fd(char *path, size_t path_len, int *dram_fd);

/* Send a notification such as "READY=1" or "STOPPING=1" to the service
 * manager, when $NOTIFY_SOCKET names one (a path, or @name in the abstract
 * namespace). Returns 0 (also when there is none) or -errno. Allocates
 * nothing, so a signal-handling thread may call it. */
int kvtd_sd_notify(const char *state);

/* kvtd_sd_notify with fds attached (SCM_RIGHTS, at most 4): with
 * "FDSTORE=1\nFDNAME=NAME" systemd keeps them in the service's fd store
 * (FileDescriptorStoreMax=) and passes them back through LISTEN_FDS at the
 * next start, also after a crash; "FDSTOREREMOVE=1\nFDNAME=NAME" drops
 * those of that name. */
int kvtd_sd_notify_fds(const char *state, const int *fds, size_t n_fds);

#endif /* KVT_APP_DAEMON_SYSTEMD_H */
