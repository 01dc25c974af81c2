/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for systemd's notify socket and fd store: see fdstore.h. */
#include "fdstore.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

int kvt_fdstore_open(struct kvt_fdstore *m, const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(m, 0, sizeof(*m));
	if (snprintf(m->notify_path, sizeof(m->notify_path), "%s/notify.sock", dir) >=
	    (int)sizeof(m->notify_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, m->notify_path, strlen(m->notify_path));
	m->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (m->notify_fd < 0)
		return -errno;
	unlink(m->notify_path);
	if (bind(m->notify_fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = -errno;

		close(m->notify_fd);
		return err;
	}
	return 0;
}

static bool same_file(int a, int b)
{
	struct stat x, y;

	return !fstat(a, &x) && !fstat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static void store_remove(struct kvt_fdstore *m, const char *name)
{
	int keep = 0;

	for (int i = 0; i < m->n; i++) {
		if (!strcmp(m->names[i], name)) {
			close(m->fds[i]);
			continue;
		}
		m->fds[keep] = m->fds[i];
		memcpy(m->names[keep], m->names[i], sizeof(m->names[i]));
		keep++;
	}
	m->n = keep;
}

static void store_add(struct kvt_fdstore *m, const char *name, int fd)
{
	/* systemd keeps a file once, however often it is sent */
	for (int i = 0; i < m->n; i++)
		if (same_file(m->fds[i], fd)) {
			close(fd);
			return;
		}
	if (m->n == KVT_FDSTORE_MAX) {
		close(fd);
		return;
	}
	m->fds[m->n] = fd;
	snprintf(m->names[m->n], sizeof(m->names[0]), "%s", name);
	m->n++;
}

/* The value of "KEY=" in a notification's lines, into v; false if absent. */
static bool field(const char *msg, const char *key, char *v, size_t len)
{
	size_t kl = strlen(key);

	for (const char *p = msg; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			snprintf(v, len, "%.*s", (int)strcspn(p + kl + 1, "\n"), p + kl + 1);
			return true;
		}
	return false;
}

/* Take one notification. Returns false when none is waiting. */
static bool take_one(struct kvt_fdstore *m)
{
	char buf[512], cbuf[CMSG_SPACE(sizeof(int) * KVT_FDSTORE_MAX)], v[64], name[32] = "stored";
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) - 1 };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	int fds[KVT_FDSTORE_MAX], n_fds = 0;
	ssize_t got = recvmsg(m->notify_fd, &h, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (got < 0)
		return false;
	buf[got] = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			n_fds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n_fds);
		}
	field(buf, "FDNAME", name, sizeof(name));
	if (field(buf, "FDSTOREREMOVE", v, sizeof(v)) && !strcmp(v, "1"))
		store_remove(m, name);
	for (int i = 0; i < n_fds; i++) {
		if (field(buf, "FDSTORE", v, sizeof(v)) && !strcmp(v, "1"))
			store_add(m, name, fds[i]);
		else
			close(fds[i]); /* systemd closes fds sent without FDSTORE=1 */
	}
	if (field(buf, "READY", v, sizeof(v)) && !strcmp(v, "1"))
		m->ready = true;
	if (field(buf, "STOPPING", v, sizeof(v)) && !strcmp(v, "1"))
		m->stopping = true;
	return true;
}

void kvt_fdstore_poll(struct kvt_fdstore *m)
{
	while (take_one(m))
		;
}

pid_t kvt_fdstore_start(struct kvt_fdstore *m, const char *const *argv, const char *log)
{
	char names[KVT_FDSTORE_MAX * 33] = "", n_s[16];
	pid_t pid;

	kvt_fdstore_poll(m);
	for (int i = 0; i < m->n; i++) {
		strcat(names, i ? ":" : "");
		strcat(names, m->names[i]);
	}
	snprintf(n_s, sizeof(n_s), "%d", m->n);
	m->ready = m->stopping = false;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		char pid_s[16];
		int dup_base = 64, fd;

		/* the stored fds to 3, 4, ... (through high numbers, so none is
		 * overwritten on the way), as systemd passes them */
		for (int i = 0; i < m->n; i++)
			dup2(m->fds[i], dup_base + i);
		for (int i = 0; i < m->n; i++) {
			dup2(dup_base + i, 3 + i);
			close(dup_base + i);
		}
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		snprintf(pid_s, sizeof(pid_s), "%d", (int)getpid());
		setenv("NOTIFY_SOCKET", m->notify_path, 1);
		setenv("FDSTORE", "8", 1); /* FileDescriptorStoreMax=, as systemd 254 says it */
		if (m->n) {
			setenv("LISTEN_FDS", n_s, 1);
			setenv("LISTEN_FDNAMES", names, 1);
			setenv("LISTEN_PID", pid_s, 1);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	m->pid = pid;
	return pid;
}

int kvt_fdstore_wait_ready(struct kvt_fdstore *m, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		struct pollfd p = { .fd = m->notify_fd, .events = POLLIN };
		int status;

		kvt_fdstore_poll(m);
		if (m->ready)
			return 0;
		if (m->pid && waitpid(m->pid, &status, WNOHANG) == m->pid) {
			m->pid = 0;
			kvt_fdstore_poll(m);
			return -ECHILD;
		}
		poll(&p, 1, 10);
	}
	return -ETIMEDOUT;
}

int kvt_fdstore_stop(struct kvt_fdstore *m, int sig)
{
	int status = 0;

	if (!m->pid)
		return -1;
	kill(m->pid, sig);
	/* the service may still store fds while it stops */
	while (waitpid(m->pid, &status, WNOHANG) == 0) {
		struct pollfd p = { .fd = m->notify_fd, .events = POLLIN };

		kvt_fdstore_poll(m);
		poll(&p, 1, 10);
	}
	kvt_fdstore_poll(m);
	m->pid = 0;
	return status;
}

int kvt_fdstore_fd(const struct kvt_fdstore *m, const char *name)
{
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->names[i], name))
			return m->fds[i];
	return -1;
}

void kvt_fdstore_close(struct kvt_fdstore *m)
{
	for (int i = 0; i < m->n; i++)
		close(m->fds[i]);
	m->n = 0;
	if (m->notify_fd >= 0)
		close(m->notify_fd);
	unlink(m->notify_path);
	m->notify_fd = -1;
}
