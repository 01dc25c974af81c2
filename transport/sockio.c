/* SPDX-License-Identifier: Apache-2.0 */
/* Socket I/O with deadlines (see sockio.h). */
#include "transport/sockio.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

int kvt_sockaddr_parse(const char *hostport, bool passive, struct kvt_sockaddr *out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	char host[256];
	const char *colon, *h, *port;
	char *end;
	size_t hlen;
	long p;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!hostport || !*hostport)
		return -EINVAL;
	if (hostport[0] == '/') { /* a Unix socket path */
		struct sockaddr_un *un = (struct sockaddr_un *)&out->ss;

		if (strlen(hostport) >= sizeof(un->sun_path))
			return -EINVAL;
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, hostport);
		out->len = sizeof(*un);
		return 0;
	}
	if (hostport[0] == '[') {
		const char *close = strchr(hostport, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		h = hostport + 1;
		hlen = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(hostport, ':');
		if (!colon)
			return -EINVAL;
		h = hostport;
		hlen = (size_t)(colon - hostport);
	}
	port = colon + 1;
	if (hlen >= sizeof(host) || !*port)
		return -EINVAL;
	errno = 0;
	p = strtol(port, &end, 10);
	if (errno || *end || p < 0 || p > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	if (passive && (hlen == 0 || strcmp(host, "*") == 0)) {
		struct sockaddr_in *in = (struct sockaddr_in *)&out->ss;

		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(INADDR_ANY);
		in->sin_port = htons((uint16_t)p);
		out->len = sizeof(*in);
		return 0;
	}
	if (hlen == 0)
		return -EINVAL;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc || !res) {
		if (res)
			freeaddrinfo(res);
		return -EHOSTUNREACH;
	}
	memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
	out->len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

const char *kvt_sockaddr_str(const struct kvt_sockaddr *a, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	switch (a->ss.ss_family) {
	case AF_INET: {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&a->ss;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
		break;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a->ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, ntohs(in6->sin6_port));
		break;
	}
	case AF_UNIX:
		snprintf(buf, len, "%s", ((const struct sockaddr_un *)&a->ss)->sun_path);
		break;
	default:
		snprintf(buf, len, "?");
	}
	return buf;
}

int kvt_sock_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	return 0;
}

static int remaining_ms(uint64_t deadline_ns)
{
	uint64_t now = kvt_now_ns(), ms;

	if (now >= deadline_ns)
		return 0;
	/* rounded up: a wait of 0.3 ms must not become a busy poll(0) */
	ms = (deadline_ns - now + 999999) / 1000000;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

int kvt_sock_wait(int fd, short events, uint64_t deadline_ns)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int ms, rc;

	for (;;) {
		ms = remaining_ms(deadline_ns);
		if (ms == 0)
			return -ETIMEDOUT;
		rc = poll(&pfd, 1, ms);
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

int kvt_sock_connect(const struct kvt_sockaddr *a, uint64_t deadline_ns)
{
	int fd, err = 0, one = 1;
	socklen_t elen = sizeof(err);

	fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (a->ss.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0)
		return fd;
	if (errno != EINPROGRESS && errno != EAGAIN) {
		err = -errno;
		goto fail;
	}
	err = kvt_sock_wait(fd, POLLOUT, deadline_ns);
	if (err)
		goto fail;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		err = errno;
	if (err) {
		err = -err;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return err;
}

int kvt_sock_listen(const struct kvt_sockaddr *a, int backlog)
{
	int fd, one = 1, err;

	fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, backlog) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int kvt_sock_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -EAFNOSUPPORT;
}

/* sendmsg until iov is consumed; the deadline moves to now + idle_ns after
 * each write that made progress, when idle_ns is not 0. */
static int sendv(int fd, struct iovec *iov, int n, int flags, uint64_t deadline_ns,
		 uint64_t idle_ns)
{
	struct msghdr mh = { 0 };
	ssize_t w;
	int err;

	while (n > 0) {
		if (iov->iov_len == 0) {
			iov++;
			n--;
			continue;
		}
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)n;
		w = sendmsg(fd, &mh, flags | MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != ENOBUFS)
				return -errno;
			err = kvt_sock_wait(fd, POLLOUT, deadline_ns);
			if (err)
				return err;
			continue;
		}
		if (idle_ns)
			deadline_ns = kvt_now_ns() + idle_ns;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

int kvt_sock_sendv(int fd, struct iovec *iov, int n, int flags, uint64_t deadline_ns)
{
	return sendv(fd, iov, n, flags, deadline_ns, 0);
}

int kvt_sock_sendv_idle(int fd, struct iovec *iov, int n, int flags, unsigned idle_ms)
{
	uint64_t idle = (uint64_t)idle_ms * 1000000ull;

	return sendv(fd, iov, n, flags, kvt_now_ns() + idle, idle);
}

int kvt_sock_send(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return kvt_sock_sendv(fd, &iov, 1, 0, deadline_ns);
}

int kvt_sock_recv(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
	uint8_t *p = buf;
	ssize_t r;
	int err;

	while (len > 0) {
		r = recv(fd, p, len, 0);
		if (r > 0) {
			p += r;
			len -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		err = kvt_sock_wait(fd, POLLIN, deadline_ns);
		if (err)
			return err;
	}
	return 0;
}

void kvt_sock_keepalive(int fd, int idle_s, int intvl_s)
{
	int one = 1, cnt = 3;

	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl_s, sizeof(intvl_s));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}
