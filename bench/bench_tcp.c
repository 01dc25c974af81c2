/* SPDX-License-Identifier: Apache-2.0 */
/* TCP over loopback, the reference for the network paths of kvtier-bench
 * recompute: a listening socket on 127.0.0.1, a connected pair, a sender
 * thread, `bytes` per repetition received here. A signal that interrupts a
 * send, a receive or the connection is retried, never taken for the
 * link's failure. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "util/clock.h"

/* After connect() was interrupted: wait until it is done; 0 or -1 (errno). */
static int wait_connected(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int err = 0;

	while (poll(&p, 1, -1) < 0)
		if (errno != EINTR)
			return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		errno = err ? err : errno;
		return -1;
	}
	return 0;
}

struct tcp_sender {
	int fd;
	uint64_t bytes;
	int reps;
	int err;
};

static void *tcp_send(void *arg)
{
	struct tcp_sender *s = arg;
	enum { CHUNK = 1 << 20 };
	char *buf = malloc(CHUNK);

	if (!buf) {
		s->err = -ENOMEM;
		return NULL;
	}
	memset(buf, 0x3c, CHUNK);
	for (int r = 0; r < s->reps && !s->err; r++)
		for (uint64_t sent = 0; sent < s->bytes;) {
			size_t len = s->bytes - sent < CHUNK ? s->bytes - sent : CHUNK;
			ssize_t w = send(s->fd, buf, len, MSG_NOSIGNAL);

			if (w < 0 && errno == EINTR)
				continue; /* a signal, not the link: go on */
			if (w <= 0) {
				s->err = w < 0 ? -errno : -EPIPE;
				shutdown(s->fd, SHUT_RDWR); /* the receiver sees EOF, not a hang */
				break;
			}
			sent += (uint64_t)w;
		}
	free(buf);
	return NULL;
}

double kvt_bench_tcp_loopback(uint64_t bytes, int reps)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t alen = sizeof(addr);
	struct tcp_sender s = { .fd = -1, .bytes = bytes, .reps = reps };
	pthread_t th;
	double t[64], bw;
	int n = reps < 64 ? reps : 64, lfd, cfd = -1, err = 0;
	char *buf = NULL;
	enum { CHUNK = 1 << 20 };

	s.reps = n;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&addr, &alen)) {
		err = -errno;
		goto out;
	}
	s.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* an interrupted connect goes on by itself: wait for it as for any */
	if (s.fd < 0 || (connect(s.fd, (struct sockaddr *)&addr, sizeof(addr)) &&
			 (errno != EINTR || wait_connected(s.fd)))) {
		err = -errno;
		goto out;
	}
	do
		cfd = accept(lfd, NULL, NULL);
	while (cfd < 0 && errno == EINTR);
	buf = malloc(CHUNK);
	if (cfd >= 0) {
		/* a stalled sender ends the measurement instead of the bench */
		struct timeval tv = { .tv_sec = 30 };
		setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	if (cfd < 0 || !buf) {
		err = cfd < 0 ? -errno : -ENOMEM;
		goto out;
	}
	err = -pthread_create(&th, NULL, tcp_send, &s);
	if (err)
		goto out;
	for (int r = 0; r < n && !err; r++) {
		uint64_t t0 = kvt_now_ns(), got = 0;

		while (got < bytes) {
			/* never into the next repetition's bytes */
			ssize_t k = recv(cfd, buf, bytes - got < CHUNK ? bytes - got : CHUNK, 0);

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				err = k < 0 ? -errno : -ECONNRESET;
				break;
			}
			got += (uint64_t)k;
		}
		t[r] = (double)bytes * 1e9 / (double)(kvt_now_ns() - t0);
	}
	if (err)
		shutdown(cfd, SHUT_RDWR);
	pthread_join(th, NULL);
	if (!err)
		err = s.err;
out:
	bw = err ? err : kvt_bench_median(t, (size_t)n);
	free(buf);
	if (cfd >= 0)
		close(cfd);
	if (s.fd >= 0)
		close(s.fd);
	close(lfd);
	return bw;
}

