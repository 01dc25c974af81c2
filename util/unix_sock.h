/* SPDX-License-Identifier: Apache-2.0 */
/* Unix socket files a daemon binds: whether one found at its path is stale. */
#ifndef KVT_UTIL_UNIX_SOCK_H
#define KVT_UTIL_UNIX_SOCK_H

#include <stdbool.h>
#include <sys/un.h>

/* Whether the file at sa->sun_path is a socket no one listens on (a
 * connect is refused): left by a process that died, safe to replace.
 * Anything else there (a live daemon, one too busy to accept, a regular
 * file, a symlink, nothing) is not. */
bool kvt_unix_sock_stale(const struct sockaddr_un *sa);

#endif
