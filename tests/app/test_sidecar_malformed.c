/* SPDX-License-Identifier: Apache-2.0 */
/* Malformed input against a real kvtierd, over raw sockets: broken framing
 * gets an error reply and a closed connection, a bad payload an error reply
 * on a connection that goes on, and through all of it the daemon keeps
 * serving a well-behaved client byte for byte. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "transport/proto.h"

static struct kvtd_proc d;
static uint64_t seed;

static int setup(void **state)
{
	seed = kvt_test_seed();
	return kvtd_start(&d, NULL, NULL) ? -1 : 0;
}

static int teardown(void **state)
{
	int status = kvtd_stop(&d, SIGTERM);

	kvtd_cleanup(&d);
	return status == 0 ? 0 : -1;
}

static int raw_connect(void)
{
	int fd = kvtd_connect_raw(&d);

	assert_true(fd >= 0);
	return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void send_frame(int fd, uint32_t magic, uint16_t version, uint16_t op, uint32_t len,
		       uint64_t id, const void *payload, size_t payload_len)
{
	struct kvt_frame_hdr h = { magic, version, op, len, 0, id };
	uint8_t b[KVT_PROTO_HDR_BYTES];

	kvt_proto_hdr_encode(&h, b);
	raw_send(fd, b, sizeof(b));
	if (payload_len)
		raw_send(fd, payload, payload_len);
}

/* Read one reply within 5 s: returns its status (payload skipped), or 1 on
 * EOF. */
static int read_reply(int fd, uint64_t want_id)
{
	uint8_t b[KVT_PROTO_HDR_BYTES], skip[4096];
	struct kvt_frame_hdr h;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t n;

		assert_int_equal(poll(&p, 1, 5000), 1);
		n = recv(fd, b + got, sizeof(b) - got, 0);
		if (n == 0 && got == 0)
			return 1;
		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b), &h), 0);
	assert_true(h.op & KVT_OP_REPLY);
	assert_int_equal(h.id, want_id);
	for (size_t left = h.len; left;) {
		ssize_t n = recv(fd, skip, left < sizeof(skip) ? left : sizeof(skip), 0);
		assert_true(n > 0);
		left -= (size_t)n;
	}
	return h.status;
}

static bool at_eof(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&p, 1, 5000) == 1 && recv(fd, &c, 1, 0) == 0;
}

static void framing_errors_get_a_reply_then_a_hangup(void **state)
{
	struct { uint32_t magic; uint16_t version; uint32_t len; int want; } cases[] = {
		{ 0xdeadbeef, KVT_PROTO_VERSION, 0, -EPROTO },
		{ KVT_PROTO_MAGIC, 99, 0, -EPROTONOSUPPORT },
		{ KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_PROTO_MAX_PAYLOAD + 1, -EMSGSIZE },
		{ KVT_PROTO_MAGIC, KVT_PROTO_VERSION, UINT32_MAX, -EMSGSIZE },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = raw_connect();

		send_frame(fd, cases[i].magic, cases[i].version, KVT_OP_PING, cases[i].len, 40 + i,
			   NULL, 0);
		assert_int_equal(read_reply(fd, 40 + i), cases[i].want);
		assert_true(at_eof(fd));
		close(fd);
	}
}

static void payload_errors_get_a_reply_and_the_connection_goes_on(void **state)
{
	int fd = raw_connect();
	uint8_t lying[8 + 16] = { 0 };

	/* unknown op */
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, 77, 3, 1, "abc", 3);
	assert_int_equal(read_reply(fd, 1), -EOPNOTSUPP);
	/* a reply op sent as a request */
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_PING | KVT_OP_REPLY, 0, 2, NULL, 0);
	assert_int_equal(read_reply(fd, 2), -EOPNOTSUPP);
	/* a HELLO too short to hold its fields */
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_HELLO, 4, 3, "\1\0\1\0", 4);
	assert_int_equal(read_reply(fd, 3), -EBADMSG);
	/* a LOOKUP whose count claims more keys than it carries */
	lying[4] = 0xff;
	lying[5] = 0xff;
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_LOOKUP, sizeof(lying), 4, lying,
		   sizeof(lying));
	assert_int_equal(read_reply(fd, 4), -EBADMSG);
	/* a well-formed LOOKUP before HELLO */
	lying[4] = 1;
	lying[5] = 0;
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_LOOKUP, sizeof(lying), 5, lying,
		   sizeof(lying));
	assert_int_equal(read_reply(fd, 5), -EPERM);
	/* STATS with a payload longer than a token, and with a token no
	 * tenant has */
	{
		char big[KVT_PROTO_MAX_TOKEN + 1];

		memset(big, 'x', sizeof(big));
		send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_STATS, sizeof(big), 6,
			   big, sizeof(big));
		assert_int_equal(read_reply(fd, 6), -EBADMSG);
	}
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_STATS, 1, 6, "x", 1);
	assert_int_equal(read_reply(fd, 6), -EACCES);
	/* and the connection still works */
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_PING, 2, 7, "ok", 2);
	assert_int_equal(read_reply(fd, 7), 0);
	close(fd);
}

static void truncated_frames_and_vanishing_peers(void **state)
{
	uint8_t big[1000];
	int fd;

	/* half a header, then gone */
	fd = raw_connect();
	raw_send(fd, "KVT1\1", 5);
	close(fd);
	/* a header promising 1000 bytes, 10 sent, then gone */
	fd = raw_connect();
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_PING, 1000, 1, "0123456789", 10);
	close(fd);
	/* a peer that half-closes after a whole frame still gets its reply */
	fd = raw_connect();
	memset(big, 'z', sizeof(big));
	send_frame(fd, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_PING, 1000, 9, big, 1000);
	shutdown(fd, SHUT_WR);
	assert_int_equal(read_reply(fd, 9), 0);
	close(fd);
}

static void bad_registrations_are_refused(void **state)
{
	struct kvt_client *c = kvtd_connect(&d, NULL);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct kvt_client_region r = { .size = sizeof(r) };
	uint64_t page = 4 * 2 * 16 * 2, bytes = 4 * 2 * 8 * page;
	void *map;
	int fd;

	kvtd_test_desc(&desc, NULL);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	/* an unsealed memfd could be truncated under the daemon */
	fd = memfd_create("unsealed", MFD_CLOEXEC);
	assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
	r.memfd = fd;
	r.bytes = bytes;
	r.layers = 4;
	r.pages = 8;
	r.page_stride = page;
	r.kv_stride = page * 8;
	r.layer_stride = page * 16;
	assert_int_equal(kvt_client_register(c, &ns, &r), -EPERM);
	close(fd);

	fd = kvt_client_memfd_create("sealed", bytes, &map);
	assert_true(fd >= 0);
	r.memfd = fd;
	/* a layout reaching past the region */
	r.pages = 9;
	assert_int_equal(kvt_client_register(c, &ns, &r), -EINVAL);
	/* the wrong number of layers for the namespace */
	r.pages = 8;
	r.layers = 3;
	assert_int_equal(kvt_client_register(c, &ns, &r), -EINVAL);
	/* a region claiming more bytes than the file has */
	r.layers = 4;
	r.bytes = bytes * 2;
	assert_int_equal(kvt_client_register(c, &ns, &r), -EINVAL);
	r.bytes = bytes;
	assert_true(kvt_client_register(c, &ns, &r) > 0);
	/* GPU memory by CUDA IPC handle: refused clearly where no GPU is driven */
	{
		uint8_t ipc[64] = { 1, 2, 3 };

		r.memfd = -1;
		assert_int_equal(kvt_client_register(c, &ns, &r), -EINVAL); /* no handle */
		r.cuda_ipc = ipc;
		r.cuda_ipc_len = sizeof(ipc);
		char *st = NULL;
		bool gpu;

		assert_int_equal(kvt_client_stats(c, &st), 0);
		gpu = strstr(st, "\"gpu\":true") != NULL;
		free(st);
		if (!gpu)
			assert_int_equal(kvt_client_register(c, &ns, &r), -EOPNOTSUPP);
		else /* a daemon with a GPU tries, and a made-up handle cannot open */
			assert_true(kvt_client_register(c, &ns, &r) < 0);
		r.cuda_ipc = NULL;
		r.cuda_ipc_len = 0;
	}
	munmap(map, bytes);
	close(fd);
	kvt_client_close(c);
}

static void too_many_fds_close_only_that_connection(void **state)
{
	int fd = raw_connect(), fds[16];
	union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(fds))]; } ctl;
	struct iovec iov = { .iov_base = "x", .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	for (int i = 0; i < 16; i++)
		fds[i] = memfd_create("junk", MFD_CLOEXEC);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	assert_int_equal(sendmsg(fd, &msg, MSG_NOSIGNAL), 1);
	assert_true(at_eof(fd));
	close(fd);
	for (int i = 0; i < 16; i++)
		close(fds[i]);
}

/* Random garbage from many connections at once, then a full save/load cycle. */
static void garbage_storm_then_a_good_client(void **state)
{
	uint64_t s = seed | 1;
	int fds[8];
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[4];
	uint32_t tokens[16], pages[4] = { 0, 1, 2, 3 }, back[4] = { 7, 6, 5, 4 };
	uint64_t ticket;
	int status;

	for (int i = 0; i < 8; i++)
		fds[i] = raw_connect();
	for (int round = 0; round < 200; round++) {
		uint8_t junk[512];
		int i = round % 8;

		kvt_test_fill(junk, sizeof(junk), kvt_test_rand(&s));
		if (round % 3 == 0) { /* sometimes a valid header over garbage */
			struct kvt_frame_hdr h = { KVT_PROTO_MAGIC, KVT_PROTO_VERSION,
						   (uint16_t)(1 + round % 12), 64, 0, (uint64_t)round };
			kvt_proto_hdr_encode(&h, junk);
		}
		if (send(fds[i], junk, sizeof(junk), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			close(fds[i]);
			fds[i] = raw_connect();
		}
	}
	for (int i = 0; i < 8; i++)
		close(fds[i]);
	assert_int_equal(waitpid(d.pid, &status, WNOHANG), 0); /* still running */

	c = kvtd_connect(&d, NULL);
	kvtd_test_desc(&desc, NULL);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, 8), 0);
	for (int i = 0; i < 16; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, 16, keys, 4), 4);
	for (int i = 0; i < 4; i++)
		engine_page_fill(&m, (uint32_t)i, seed + 100 + (uint64_t)i);
	assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages, 4, &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), 4);
	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, keys, back, 4, &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(engine_page_check(&m, back[i], seed + 100 + (uint64_t)i), 0);
	engine_mem_close(&m);
	kvt_client_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(framing_errors_get_a_reply_then_a_hangup),
		cmocka_unit_test(payload_errors_get_a_reply_and_the_connection_goes_on),
		cmocka_unit_test(truncated_frames_and_vanishing_peers),
		cmocka_unit_test(bad_registrations_are_refused),
		cmocka_unit_test(too_many_fds_close_only_that_connection),
		cmocka_unit_test(garbage_storm_then_a_good_client),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
