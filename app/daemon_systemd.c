/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd under systemd: socket activation and readiness notification, the
 * two parts of systemd's service protocol that kvtierd speaks, written from
 * their documented semantics (sd_listen_fds(3), sd_notify(3)) so that
 * building kvtier needs no libsystemd. */
#include "app/daemon_systemd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SD_LISTEN_FDS_START 3

static int parse_int(const char *s, long max, long *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The name of passed fd i in LISTEN_FDNAMES ("a:b:c"), into buf; "" when
 * there are no names. */
static void fd_name(const char *names, long i, char *buf, size_t len)
{
	const char *p = names ? names : "";

	buf[0] = 0;
	for (; i > 0 && p; i--) {
		p = strchr(p, ':');
		if (p)
			p++;
	}
	if (p && *p)
		snprintf(buf, len, "%.*s", (int)strcspn(p, ":"), p);
}

static int check_listener(int fd, char *path, size_t path_len)
{
	struct sockaddr_un sa;
	socklen_t sl;
	int v, domain = 0, type = 0, listening = 0;

	sl = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &sl) == 0)
		domain = v;
	else if (errno == EBADF)
		return -EBADF;
	sl = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &sl) == 0)
		type = v;
	sl = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &sl) == 0)
		listening = v;
	if (domain != AF_UNIX || type != SOCK_STREAM || !listening)
		return -ENOTSOCK;
	path[0] = 0;
	sl = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sun_path[0])
		snprintf(path, path_len, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
	return 0;
}

int kvtd_sd_listen_fd(char *path, size_t path_len, int *dram_fd)
{
	const char *pid_s = getenv("LISTEN_PID"), *n_s = getenv("LISTEN_FDS");
	char names[1024] = "", name[256];
	long pid, n, pick = -1, dram = -1, others = 0;
	int flags, err = 0;

	*dram_fd = -1;
	path[0] = 0;
	if (getenv("LISTEN_FDNAMES"))
		snprintf(names, sizeof(names), "%s", getenv("LISTEN_FDNAMES"));
	if (!pid_s || !n_s) {
		err = 0;
		goto out;
	}
	if (parse_int(pid_s, INT_MAX, &pid) || parse_int(n_s, INT_MAX - SD_LISTEN_FDS_START, &n)) {
		fprintf(stderr, "kvtierd: LISTEN_PID=%s LISTEN_FDS=%s: not numbers\n", pid_s, n_s);
		err = -EINVAL;
		goto out;
	}
	if (pid != (long)getpid() || n == 0) {
		err = 0; /* meant for another process (a parent that exec'd us) */
		goto out;
	}
	for (long i = 0; i < n; i++) {
		fd_name(names, i, name, sizeof(name));
		if (!strcmp(name, "sidecar"))
			pick = i;
		else if (!strcmp(name, "dram"))
			dram = i; /* the DRAM tier's region, from the fd store */
		else
			others++;
	}
	/* the one passed socket that is not the region, named or not */
	if (pick < 0 && others == 1)
		for (long i = 0; i < n; i++)
			if (i != dram)
				pick = i;
	if (pick < 0 && others > 1) {
		fprintf(stderr, "kvtierd: systemd passed %ld sockets and none is named \"sidecar\" "
			"(FileDescriptorName=)\n", others);
		err = -EINVAL;
		goto out;
	}
	/* our copies of the fds we do not use (systemd keeps its own) */
	for (long i = 0; i < n; i++)
		if (i != pick && i != dram)
			close((int)(SD_LISTEN_FDS_START + i));
	if (dram >= 0) {
		*dram_fd = (int)(SD_LISTEN_FDS_START + dram);
		flags = fcntl(*dram_fd, F_GETFD);
		if (flags >= 0)
			fcntl(*dram_fd, F_SETFD, flags | FD_CLOEXEC);
	}
	if (pick < 0)
		goto out; /* only the region: the socket is bound anew */
	err = check_listener((int)(SD_LISTEN_FDS_START + pick), path, path_len);
	if (err) {
		fprintf(stderr, "kvtierd: the socket systemd passed (fd %ld) is %s\n",
			SD_LISTEN_FDS_START + pick,
			err == -EBADF ? "not open" : "not a listening Unix stream socket");
		goto out;
	}
	err = (int)(SD_LISTEN_FDS_START + pick);
	flags = fcntl(err, F_GETFD);
	if (flags < 0 || fcntl(err, F_SETFD, flags | FD_CLOEXEC) ||
	    (flags = fcntl(err, F_GETFL)) < 0 || fcntl(err, F_SETFL, flags | O_NONBLOCK)) {
		int e = errno;

		fprintf(stderr, "kvtierd: fd %d from systemd: %s\n", err, strerror(e));
		err = -e;
	}
out:
	if (err < 0 && *dram_fd >= 0) {
		close(*dram_fd);
		*dram_fd = -1;
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return err;
}

int kvtd_sd_notify(const char *state)
{
	return kvtd_sd_notify_fds(state, NULL, 0);
}

int kvtd_sd_notify_fds(const char *state, const int *fds, size_t n_fds)
{
	const char *where = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char cbuf[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = { .iov_base = (void *)state, .iov_len = strlen(state) };
	struct msghdr m = { .msg_name = &sa, .msg_iov = &iov, .msg_iovlen = 1 };
	size_t len;
	ssize_t sent;
	int fd, err = 0;

	if (!where || !*where)
		return 0;
	len = strlen(where);
	if ((where[0] != '/' && where[0] != '@') || len >= sizeof(sa.sun_path) || n_fds > 4)
		return -EINVAL;
	memcpy(sa.sun_path, where, len);
	if (where[0] == '@')
		sa.sun_path[0] = 0; /* the abstract namespace */
	m.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (where[0] == '/'));
	if (n_fds) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sent = sendmsg(fd, &m, MSG_NOSIGNAL);
	if (sent < 0)
		err = -errno;
	close(fd);
	return err;
}
