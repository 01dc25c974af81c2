/* SPDX-License-Identifier: Apache-2.0 */
/* Unix socket files a daemon binds (util/unix_sock.h). */
#include "util/unix_sock.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

bool kvt_unix_sock_stale(const struct sockaddr_un *sa)
{
	struct stat st;
	bool stale;
	int probe;

	if (lstat(sa->sun_path, &st) || !S_ISSOCK(st.st_mode))
		return false;
	probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (probe < 0)
		return false;
	stale = connect(probe, (const struct sockaddr *)sa, sizeof(*sa)) && errno == ECONNREFUSED;
	close(probe);
	return stale;
}
