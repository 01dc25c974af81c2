/* SPDX-License-Identifier: Apache-2.0 */
/* Socket I/O with deadlines, for the peer transport and the cluster
 * directory: every call that could wait takes an absolute deadline on the
 * monotonic clock and returns -ETIMEDOUT once it passes, so no peer and no
 * server can hold a caller longer than the caller chose.
 *
 * Sockets handled here are non-blocking; waiting is poll(). */
#ifndef KVT_TRANSPORT_SOCKIO_H
#define KVT_TRANSPORT_SOCKIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "util/clock.h"

/* now + ms, as a deadline on kvt_now_ns's clock. */
static inline uint64_t kvt_deadline_ms(unsigned ms)
{
	return kvt_now_ns() + (uint64_t)ms * 1000000ull;
}

/* A parsed "HOST:PORT" (IPv4 dotted quad or name; "[v6]:PORT" for IPv6). */
struct kvt_sockaddr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/* Resolve "HOST:PORT" (numeric port 0..65535; HOST may be empty or "*" for
 * the wildcard address when `passive`). Returns 0, -EINVAL for a malformed
 * string, -EHOSTUNREACH when the name does not resolve. Name resolution can
 * block: call it where that is allowed (start-up, the directory's thread). */
int kvt_sockaddr_parse(const char *hostport, bool passive, struct kvt_sockaddr *out);

/* "a.b.c.d:port" of an address, into buf. Returns buf. */
const char *kvt_sockaddr_str(const struct kvt_sockaddr *a, char *buf, size_t len);

/* Make fd non-blocking and close-on-exec. Returns 0 or -errno. */
int kvt_sock_nonblock(int fd);

/* A TCP (or Unix, for AF_UNIX addresses) connection to a, non-blocking,
 * TCP_NODELAY, connected before the deadline. Returns the fd, -ETIMEDOUT, or
 * the connect error (-ECONNREFUSED, -EHOSTUNREACH, ...). */
int kvt_sock_connect(const struct kvt_sockaddr *a, uint64_t deadline_ns);

/* A listening TCP socket on a (SO_REUSEADDR), non-blocking. Returns the fd or
 * -errno. */
int kvt_sock_listen(const struct kvt_sockaddr *a, int backlog);

/* The port a socket is bound to, or -errno. */
int kvt_sock_port(int fd);

/* Wait until fd is ready for `events` (POLLIN/POLLOUT) or the deadline.
 * Returns 0, -ETIMEDOUT, or -errno of poll. An error or hang-up on the
 * socket counts as ready (the next read or write reports it). */
int kvt_sock_wait(int fd, short events, uint64_t deadline_ns);

/* Write all of iov[0..n) before the deadline (the array is consumed: its
 * entries are advanced). flags go to sendmsg (MSG_NOSIGNAL is always added).
 * Returns 0, -ETIMEDOUT, or the send error (-EPIPE, -ECONNRESET, ...). */
int kvt_sock_sendv(int fd, struct iovec *iov, int n, int flags, uint64_t deadline_ns);

/* kvt_sock_sendv that fails (-ETIMEDOUT) only when no byte could be sent
 * for idle_ms: a large transfer to a slow but live peer goes on, a dead one
 * is noticed within idle_ms. */
int kvt_sock_sendv_idle(int fd, struct iovec *iov, int n, int flags, unsigned idle_ms);

/* kvt_sock_sendv of one buffer. */
int kvt_sock_send(int fd, const void *buf, size_t len, uint64_t deadline_ns);

/* Read exactly len bytes before the deadline. Returns 0, -ETIMEDOUT,
 * -ECONNRESET when the peer closed first, or the recv error. */
int kvt_sock_recv(int fd, void *buf, size_t len, uint64_t deadline_ns);

/* Turn on TCP keepalive probing so a peer that vanished without a FIN is
 * noticed after about idle_s + 3 x intvl_s seconds on an idle connection. */
void kvt_sock_keepalive(int fd, int idle_s, int intvl_s);

#endif /* KVT_TRANSPORT_SOCKIO_H */
