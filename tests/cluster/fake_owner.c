/* SPDX-License-Identifier: Apache-2.0 */
/* A misbehaving owner for the peer transport's tests: see fake_owner.h. */
#include "fake_owner.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "cluster/peer_io.h"
#include "transport/sockio.h"

void kvt_fake_owner_start(struct kvt_fake_owner *o, void *(*fn)(void *), void *arg)
{
	struct kvt_sockaddr sa;

	assert_int_equal(kvt_sockaddr_parse("127.0.0.1:0", true, &sa), 0);
	o->lfd = kvt_sock_listen(&sa, 4);
	assert_true(o->lfd >= 0);
	o->port = kvt_sock_port(o->lfd);
	snprintf(o->addr, sizeof(o->addr), "127.0.0.1:%d", o->port);
	assert_int_equal(pipe(o->stop_pipe), 0);
	assert_int_equal(pthread_create(&o->th, NULL, fn, arg), 0);
}

int kvt_fake_owner_get(struct kvt_fake_owner *o, const struct kvt_peer_secret *s, const char *id,
		       uint8_t *buf, struct kvt_frame_hdr *h, struct kvt_peer_keys_req *q)
{
	char peer[KVT_PEER_ID_MAX + 1];
	int fd = -1;

	for (int tries = 0; tries < 500 && fd < 0; tries++) {
		fd = accept4(o->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			usleep(10000);
	}
	if (fd >= 0 && (kvt_peer_auth_server(fd, s, id, 0, kvt_deadline_ms(5000), peer) ||
			kvt_peer_recv_frame(fd, h, buf, KVT_PROTO_MAX_PAYLOAD, kvt_deadline_ms(5000)) ||
			kvt_peer_dec_keys_req(KVT_PEER_GET, buf, h->len, q))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

void kvt_fake_owner_send_block(int fd, struct kvt_wr *w, uint64_t id, uint32_t index,
			       const struct kvt_key *key, const void *data, const void *good,
			       size_t len)
{
	struct kvt_peer_block b = { .index = index, .key = *key, .data_len = len };
	uint8_t trailer[KVT_PEER_TRAILER_BYTES];

	kvt_put_u64(trailer, XXH3_64bits(good, len));
	kvt_peer_enc_block(w, id, 0, &b);
	kvt_peer_send_wr(fd, w, kvt_deadline_ms(5000));
	kvt_sock_send(fd, data, len, kvt_deadline_ms(5000));
	kvt_sock_send(fd, trailer, sizeof(trailer), kvt_deadline_ms(5000));
}

size_t kvt_fake_owner_trickle(struct kvt_fake_owner *o, int fd, const void *data, size_t len,
			      unsigned every_ms)
{
	size_t sent = 0;

	while (sent < len) {
		struct pollfd p[2] = { { .fd = o->stop_pipe[0], .events = POLLIN },
				       { .fd = fd, .events = POLLIN } };

		/* the stop, or the reader hanging up (nothing else comes) */
		if (poll(p, 2, (int)every_ms) != 0)
			break;
		if (send(fd, (const char *)data + sent, 1, MSG_NOSIGNAL) != 1)
			break;
		sent++;
	}
	return sent;
}

struct trickle_conn {
	struct kvt_fake_trickler *t;
	int fd;
};

static void *trickle_conn_main(void *arg)
{
	struct trickle_conn *tc = arg;
	struct kvt_fake_trickler *t = tc->t;
	char peer[KVT_PEER_ID_MAX + 1];
	uint8_t *buf = malloc(KVT_PROTO_MAX_PAYLOAD), *data = NULL;
	struct kvt_peer_keys_req q;
	struct kvt_frame_hdr h;
	struct kvt_wr w;

	kvt_wr_init(&w);
	if (!buf || kvt_peer_auth_server(tc->fd, t->secret, t->id, 0, kvt_deadline_ms(5000), peer) ||
	    kvt_peer_recv_frame(tc->fd, &h, buf, KVT_PROTO_MAX_PAYLOAD, kvt_deadline_ms(5000)) ||
	    kvt_peer_dec_keys_req(KVT_PEER_GET, buf, h.len, &q) || q.n == 0)
		goto out;
	__atomic_add_fetch(&t->gets, 1, __ATOMIC_RELAXED);
	data = calloc(1, q.block_bytes);
	if (data) {
		struct kvt_peer_block b = { .index = 0, .key = q.keys[0], .data_len = q.block_bytes };

		kvt_peer_enc_block(&w, h.id, 0, &b);
		if (!kvt_peer_send_wr(tc->fd, &w, kvt_deadline_ms(5000)))
			kvt_fake_owner_trickle(&t->fo, tc->fd, data, q.block_bytes, t->every_ms);
	}
out:
	kvt_wr_free(&w);
	free(data);
	free(buf);
	free(tc);
	return NULL;
}

void *kvt_fake_trickler_main(void *arg)
{
	struct kvt_fake_trickler *t = arg;
	unsigned n = 0;

	for (;;) {
		struct pollfd p[2] = { { .fd = t->fo.stop_pipe[0], .events = POLLIN },
				       { .fd = t->fo.lfd, .events = POLLIN } };
		struct trickle_conn *tc;
		int fd;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		fd = accept4(t->fo.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		tc = malloc(sizeof(*tc));
		if (n == KVT_FAKE_TRICKLE_CONNS || !tc) {
			free(tc);
			close(fd);
			continue;
		}
		*tc = (struct trickle_conn){ .t = t, .fd = fd };
		t->conn_fd[n] = fd;
		if (pthread_create(&t->conn_th[n], NULL, trickle_conn_main, tc)) {
			free(tc);
			close(fd);
			continue;
		}
		n++;
		__atomic_store_n(&t->conns, n, __ATOMIC_RELAXED);
	}
	/* the stop: every connection's trickle ends at it */
	for (unsigned i = 0; i < n; i++) {
		pthread_join(t->conn_th[i], NULL);
		close(t->conn_fd[i]);
	}
	return NULL;
}

void kvt_fake_owner_idle(struct kvt_fake_owner *o)
{
	char c;

	while (read(o->stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
}

void kvt_fake_owner_stop(struct kvt_fake_owner *o)
{
	close(o->stop_pipe[1]);
	pthread_join(o->th, NULL);
	close(o->stop_pipe[0]);
	close(o->lfd);
}
