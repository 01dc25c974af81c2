/* SPDX-License-Identifier: Apache-2.0 */
/* Hand-over from a running kvtierd to its successor: see daemon_handover.h. */
#include "app/daemon_handover.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "app/daemon_log.h"
#include "util/clock.h"
#include "util/unix_sock.h"

#define MAGIC "KVTH1\0\0"   /* 8 bytes with its NUL */
#define ASK "KVTH1 take-over"
#define SERVING "KVTH1 serving"
#define MAX_FDS 3

struct kvtd_handover {
	int listen_fd;
	int conn;           /* the successor that asked; -1 until then */
	int stop_pipe[2];
	char path[108];
	bool inherited;
	bool bound;         /* this process bound path: its file is ours to unlink */
	pthread_t thread;
	bool started;
	kvtd_handover_cb cb;
	void *arg;
};

static int set_addr(struct sockaddr_un *sa, const char *path)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	memcpy(sa->sun_path, path, strlen(path));
	return 0;
}

/* Whether the peer of conn runs as this daemon's uid: only a successor
 * started by the same account may have the region. */
static bool peer_is_ours(int conn, uid_t *uid, pid_t *pid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &len))
		return false;
	*uid = cr.uid;
	*pid = cr.pid;
	return cr.uid == geteuid();
}

/* Read the fixed message want (len bytes, its NUL too) from conn within
 * timeout_ms. Returns 0, -ETIMEDOUT, -ENODATA (closed before a byte: a
 * probe), or -EPIPE (closed, or other bytes). */
static int read_msg(int conn, const char *want, size_t len, unsigned timeout_ms)
{
	uint64_t deadline = kvt_now_ns() + (uint64_t)timeout_ms * 1000000;
	char buf[64];
	size_t got = 0;

	if (len > sizeof(buf))
		return -EPIPE;
	while (got < len) {
		struct pollfd p = { .fd = conn, .events = POLLIN };
		uint64_t now = kvt_now_ns();
		ssize_t n;
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r ? -errno : -ETIMEDOUT;
		n = recv(conn, buf + got, len - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 && !got ? -ENODATA : -EPIPE;
		got += (size_t)n;
	}
	return memcmp(buf, want, len) ? -EPIPE : 0;
}


static void *handover_main(void *arg)
{
	struct kvtd_handover *h = arg;
	struct pollfd p[2] = { { .fd = h->listen_fd, .events = POLLIN },
			       { .fd = h->stop_pipe[0], .events = POLLIN } };

	for (;;) {
		uid_t uid = 0;
		pid_t pid = 0;
		int conn, err;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return NULL;
		if (p[1].revents)
			return NULL;
		if (!(p[0].revents & POLLIN))
			continue;
		conn = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0)
			continue;
		if (!peer_is_ours(conn, &uid, &pid)) {
			kvtd_log(KVT_LOG_WARN, "event=handover.refused uid=%u pid=%d reason=\"not the "
				 "daemon's uid: the region goes only to its successor\"", (unsigned)uid,
				 (int)pid);
			close(conn);
			continue;
		}
		/* the successor's request: a few bytes, within 2 s */
		err = read_msg(conn, ASK, sizeof(ASK), 2000);
		if (err) {
			/* one that closes before a byte is a daemon making sure
			 * this socket is live (kvt_unix_sock_stale): not worth a warning */
			kvtd_log(err == -ENODATA ? KVT_LOG_DEBUG : KVT_LOG_WARN, "event=handover.%s "
				 "uid=%u pid=%d reason=\"no take-over request\"", err == -ENODATA ?
				 "probed" : "refused", (unsigned)uid, (int)pid);
			close(conn);
			continue;
		}
		kvtd_log(KVT_LOG_INFO, "event=handover.asked pid=%d", (int)pid);
		h->conn = conn;
		h->cb(h->arg);
		return NULL; /* one successor */
	}
}

int kvtd_handover_listen(const char *path, int inherited, kvtd_handover_cb cb, void *arg,
			 struct kvtd_handover **out)
{
	struct kvtd_handover *h = calloc(1, sizeof(*h));
	struct sockaddr_un sa;
	int err;

	if (!h)
		return -ENOMEM;
	h->conn = -1;
	h->listen_fd = -1;
	h->cb = cb;
	h->arg = arg;
	h->stop_pipe[0] = h->stop_pipe[1] = -1;
	snprintf(h->path, sizeof(h->path), "%s", path);
	err = set_addr(&sa, path);
	if (err)
		goto fail;
	if (inherited >= 0) {
		h->listen_fd = inherited;
		h->inherited = true;
	} else {
		mode_t old;

		h->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (h->listen_fd < 0) {
			err = -errno;
			goto fail;
		}
		old = umask(0177); /* mode 0600 from the start: no window */
		err = bind(h->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0;
		/* only a file left by a daemon that died is replaced: a live
		 * daemon's must stay, or no successor could reach it again */
		if (err == -EADDRINUSE && kvt_unix_sock_stale(&sa) && !unlink(path))
			err = bind(h->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0;
		umask(old);
		h->bound = !err;
		if (err || listen(h->listen_fd, 4)) {
			err = err ? err : -errno;
			goto fail;
		}
	}
	if (pipe2(h->stop_pipe, O_CLOEXEC)) {
		err = -errno;
		goto fail;
	}
	err = -pthread_create(&h->thread, NULL, handover_main, h);
	if (err)
		goto fail;
	h->started = true;
	*out = h;
	return 0;
fail:
	kvtd_handover_close(h, false);
	return err;
}

int kvtd_handover_send(struct kvtd_handover *h, int sidecar_fd, int dram_fd)
{
	char buf[64], names[48] = "";
	char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	int fds[MAX_FDS], n = 0;
	struct iovec iov;
	struct msghdr m = { 0 };
	struct cmsghdr *c;
	size_t len;

	if (!h || h->conn < 0)
		return -ENOTCONN;
	if (sidecar_fd >= 0) {
		fds[n++] = sidecar_fd;
		strcat(names, "sidecar:");
	}
	if (dram_fd >= 0) {
		fds[n++] = dram_fd;
		strcat(names, "dram:");
	}
	fds[n++] = h->listen_fd;
	strcat(names, "handover");
	memcpy(buf, MAGIC, 8);
	len = 8 + strlen(names) + 1;
	memcpy(buf + 8, names, strlen(names) + 1);
	iov = (struct iovec){ .iov_base = buf, .iov_len = len };
	memset(cbuf, 0, sizeof(cbuf));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cbuf;
	m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
	if (sendmsg(h->conn, &m, MSG_NOSIGNAL) != (ssize_t)len)
		return -errno;
	return 0;
}

int kvtd_handover_wait_confirm(struct kvtd_handover *h, unsigned timeout_ms)
{
	int err;

	if (!h || h->conn < 0)
		return -EPIPE;
	err = read_msg(h->conn, SERVING, sizeof(SERVING), timeout_ms);
	return err == -ENODATA ? -EPIPE : err;
}

void kvtd_handover_close(struct kvtd_handover *h, bool handed)
{
	if (!h)
		return;
	if (h->started) {
		if (write(h->stop_pipe[1], "x", 1) < 0)
			kvtd_log(KVT_LOG_WARN, "event=handover.stop_failed err=\"%s\"",
				 strerror(errno));
		pthread_join(h->thread, NULL);
	}
	if (h->conn >= 0)
		close(h->conn);
	if (h->listen_fd >= 0) {
		close(h->listen_fd);
		/* never a file this process did not bind or inherit: after a
		 * failed bind the path is another daemon's */
		if (!handed && (h->bound || h->inherited))
			unlink(h->path);
	}
	if (h->stop_pipe[0] >= 0)
		close(h->stop_pipe[0]);
	if (h->stop_pipe[1] >= 0)
		close(h->stop_pipe[1]);
	free(h);
}

/* The fd named `name` in the list "a:b:c" of fds[0..n), -1 if none. */
static int fd_named(const char *names, const int *fds, int n, const char *name)
{
	const char *p = names;

	for (int i = 0; i < n && p; i++) {
		size_t len = strcspn(p, ":");

		if (len == strlen(name) && !strncmp(p, name, len))
			return fds[i];
		p = strchr(p, ':');
		if (p)
			p++;
	}
	return -1;
}

int kvtd_handover_receive(const char *path, unsigned timeout_ms, struct kvtd_handed *out)
{
	char buf[64], cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) - 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct sockaddr_un sa;
	struct pollfd p;
	struct cmsghdr *c;
	int fds[MAX_FDS], n_fds = 0, fd, err;
	ssize_t got;

	*out = (struct kvtd_handed){ -1, -1, -1, -1 };
	err = set_addr(&sa, path);
	if (err)
		return err;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(fd, ASK, sizeof(ASK), MSG_NOSIGNAL) != (ssize_t)sizeof(ASK)) {
		err = -errno;
		goto out;
	}
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	err = poll(&p, 1, (int)timeout_ms);
	if (err <= 0) {
		err = err ? -errno : -ETIMEDOUT;
		goto out;
	}
	got = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	if (got <= 0) {
		err = got ? -errno : -EPERM; /* closed without fds: refused */
		goto out;
	}
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			n_fds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n_fds);
		}
	buf[got] = 0;
	if (got < 9 || memcmp(buf, MAGIC, 8) || (m.msg_flags & MSG_CTRUNC)) {
		for (int i = 0; i < n_fds; i++)
			close(fds[i]);
		err = -EPROTO;
		goto out;
	}
	out->sidecar = fd_named(buf + 8, fds, n_fds, "sidecar");
	out->dram = fd_named(buf + 8, fds, n_fds, "dram");
	out->handover = fd_named(buf + 8, fds, n_fds, "handover");
	out->conn = fd;
	return 0;
out:
	close(fd);
	return err;
}

void kvtd_handover_confirm(struct kvtd_handed *out)
{
	if (out->conn < 0)
		return;
	if (send(out->conn, SERVING, sizeof(SERVING), MSG_NOSIGNAL) != (ssize_t)sizeof(SERVING))
		kvtd_log(KVT_LOG_WARN, "event=takeover.confirm_failed err=\"%s\"", strerror(errno));
	close(out->conn);
	out->conn = -1;
}

/* The first fd systemd passes (sd_listen_fds(3)). */
#define LISTEN_FDS_START 3
#define MAX_ARGS 256

int kvtd_handover_reexec(char **argv, int sidecar_fd, int dram_fd)
{
	char *args[MAX_ARGS], pid[24], n_fds[8], names[32] = "";
	int from[2], n = 0, k = 0, err;

	/* not a successor of the daemon that is gone: it is this one */
	for (int i = 0; argv[i] && k < MAX_ARGS - 2; i++) {
		if (!strcmp(argv[i], "--take-over")) {
			i += argv[i + 1] != NULL;
			continue;
		}
		if (!strncmp(argv[i], "--take-over=", 12))
			continue;
		args[k++] = argv[i];
	}
	args[k++] = (char *)"--take-over="; /* over a take_over of the config file */
	args[k] = NULL;
	/* above the slots they go to, so that no dup2 below overwrites one */
	if (sidecar_fd >= 0) {
		from[n] = fcntl(sidecar_fd, F_DUPFD_CLOEXEC, LISTEN_FDS_START + 2);
		strcat(names, "sidecar");
		if (from[n++] < 0)
			return -errno;
	}
	if (dram_fd >= 0) {
		from[n] = fcntl(dram_fd, F_DUPFD_CLOEXEC, LISTEN_FDS_START + 2);
		strcat(names, n ? ":dram" : "dram");
		if (from[n++] < 0) {
			err = -errno;
			goto fail;
		}
	}
	/* dup2 leaves the new fd open across exec; every other fd of the
	 * daemon is close-on-exec */
	for (int i = 0; i < n; i++)
		if (dup2(from[i], LISTEN_FDS_START + i) < 0) {
			err = -errno;
			goto fail;
		}
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	snprintf(n_fds, sizeof(n_fds), "%d", n);
	if (setenv("LISTEN_PID", pid, 1) || setenv("LISTEN_FDS", n_fds, 1) ||
	    setenv("LISTEN_FDNAMES", names, 1)) {
		err = -errno;
		goto fail;
	}
	/* the program this process runs, even where an upgrade replaced its file */
	execv("/proc/self/exe", args);
	err = -errno;
fail:
	for (int i = 0; i < n; i++)
		if (from[i] >= 0)
			close(from[i]);
	return err;
}
