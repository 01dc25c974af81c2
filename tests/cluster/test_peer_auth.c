/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster-secret handshake, both ways, over a real socket pair: the
 * right secret on both sides connects; a reader without it is refused; an
 * owner without it is refused by the reader (it must not feed blocks);
 * another node at the expected address is refused; garbage is refused; and
 * the secret file must be private and long enough. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "cluster/peer_auth.h"
#include "transport/sockio.h"

struct side {
	int fd;
	struct kvt_peer_secret secret;
	const char *id;
	int rc;
	char peer[KVT_PEER_ID_MAX + 1];
};

static void *server_side(void *arg)
{
	struct side *s = arg;

	s->rc = kvt_peer_auth_server(s->fd, &s->secret, s->id, KVT_PEER_F_RDMA,
				     kvt_deadline_ms(5000), s->peer);
	if (s->rc)
		shutdown(s->fd, SHUT_RDWR); /* as the server does: the reader sees the end */
	return NULL;
}

/* Run the handshake; returns the client's result, the server's in *srv_rc. */
static int handshake(const char *srv_secret, const char *cli_secret, const char *expect,
		     int *srv_rc, char *srv_saw)
{
	struct side s = { .id = "owner" };
	struct kvt_peer_secret cs;
	char server_id[KVT_PEER_ID_MAX + 1] = "";
	uint32_t flags = 0;
	pthread_t th;
	int sv[2], rc;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(kvt_sock_nonblock(sv[0]), 0);
	assert_int_equal(kvt_sock_nonblock(sv[1]), 0);
	assert_int_equal(kvt_peer_secret_set(&s.secret, srv_secret, strlen(srv_secret)), 0);
	assert_int_equal(kvt_peer_secret_set(&cs, cli_secret, strlen(cli_secret)), 0);
	s.fd = sv[0];
	assert_int_equal(pthread_create(&th, NULL, server_side, &s), 0);
	rc = kvt_peer_auth_client(sv[1], &cs, "reader", expect, kvt_deadline_ms(5000), server_id,
				  &flags);
	if (rc)
		shutdown(sv[1], SHUT_RDWR);
	pthread_join(th, NULL);
	if (rc == 0) {
		assert_string_equal(server_id, "owner");
		assert_int_equal(flags, KVT_PEER_F_RDMA);
	}
	*srv_rc = s.rc;
	if (srv_saw)
		strcpy(srv_saw, s.peer);
	close(sv[0]);
	close(sv[1]);
	return rc;
}

#define SECRET "correct horse battery staple"

static void same_secret_connects(void **state)
{
	char saw[KVT_PEER_ID_MAX + 1];
	int srv;

	assert_int_equal(handshake(SECRET, SECRET, "owner", &srv, saw), 0);
	assert_int_equal(srv, 0);
	assert_string_equal(saw, "reader");
	assert_int_equal(handshake(SECRET, SECRET, NULL, &srv, NULL), 0);
}

static void reader_without_the_secret_gets_nothing(void **state)
{
	int srv;

	assert_int_equal(handshake(SECRET, "a wrong secret, long enough", "owner", &srv, NULL),
			 -EACCES);
	assert_int_equal(srv, -EACCES);
}

static void owner_without_the_secret_is_not_trusted(void **state)
{
	struct kvt_peer_secret s;
	uint8_t nonce_s[KVT_PEER_NONCE_BYTES] = { 1 }, nonce_c[KVT_PEER_NONCE_BYTES] = { 2 };
	uint8_t m1[KVT_PEER_MAC_BYTES], m2[KVT_PEER_MAC_BYTES];
	int srv;

	/* the owner cannot check the reader's proof, so it refuses, and the
	 * reader is told so; the two proofs of one exchange differ, so an owner
	 * cannot send the reader's back as its own */
	assert_int_equal(handshake("a wrong secret, long enough", SECRET, "owner", &srv, NULL),
			 -EACCES);
	assert_int_equal(kvt_peer_secret_set(&s, SECRET, strlen(SECRET)), 0);
	kvt_peer_auth_mac(&s, false, nonce_s, nonce_c, "reader", "owner", m1);
	kvt_peer_auth_mac(&s, true, nonce_s, nonce_c, "reader", "owner", m2);
	assert_memory_not_equal(m1, m2, sizeof(m1));
	/* ids are part of the proof */
	kvt_peer_auth_mac(&s, false, nonce_s, nonce_c, "reade", "rowner", m2);
	assert_memory_not_equal(m1, m2, sizeof(m1));
}

static void another_node_at_the_address_is_refused(void **state)
{
	int srv;

	assert_int_equal(handshake(SECRET, SECRET, "someone-else", &srv, NULL), -ESTALE);
	assert_int_not_equal(srv, 0);
}

static void garbage_is_refused_in_time(void **state)
{
	struct kvt_peer_secret s;
	char peer[KVT_PEER_ID_MAX + 1];
	uint64_t t0;
	int sv[2];

	assert_int_equal(kvt_peer_secret_set(&s, SECRET, strlen(SECRET)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(kvt_sock_nonblock(sv[0]), 0);
	/* an HTTP client on the peer port */
	assert_int_equal(write(sv[1], "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 27);
	assert_int_equal(kvt_peer_auth_server(sv[0], &s, "owner", 0, kvt_deadline_ms(2000), peer),
			 -EPROTO);
	/* a peer that says nothing is dropped at the deadline */
	t0 = kvt_now_ns();
	close(sv[1]);
	close(sv[0]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(kvt_sock_nonblock(sv[0]), 0);
	assert_int_equal(kvt_peer_auth_server(sv[0], &s, "owner", 0, kvt_deadline_ms(200), peer),
			 -ETIMEDOUT);
	assert_true(kvt_now_ns() - t0 < 3000000000ull);
	close(sv[0]);
	close(sv[1]);
}

static void secret_files(void **state)
{
	char *dir = kvt_test_mkdtemp("peer_auth");
	char path[512];
	struct kvt_peer_secret s;
	FILE *f;

	assert_non_null(dir);
	snprintf(path, sizeof(path), "%s/secret", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(SECRET "\n", f);
	fclose(f);
	chmod(path, 0644);
	assert_int_equal(kvt_peer_secret_load(path, &s), -EPERM);
	chmod(path, 0600);
	assert_int_equal(kvt_peer_secret_load(path, &s), 0);
	assert_int_equal(s.len, strlen(SECRET)); /* the newline is not part of it */
	assert_memory_equal(s.bytes, SECRET, s.len);
	f = fopen(path, "w");
	fputs("short\n", f);
	fclose(f);
	assert_int_equal(kvt_peer_secret_load(path, &s), -EINVAL);
	assert_int_equal(kvt_peer_secret_load("/nonexistent/secret", &s), -ENOENT);
	kvt_test_rmdir(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_secret_connects),
		cmocka_unit_test(reader_without_the_secret_gets_nothing),
		cmocka_unit_test(owner_without_the_secret_is_not_trusted),
		cmocka_unit_test(another_node_at_the_address_is_refused),
		cmocka_unit_test(garbage_is_refused_in_time),
		cmocka_unit_test(secret_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
