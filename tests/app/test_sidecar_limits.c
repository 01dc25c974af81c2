/* SPDX-License-Identifier: Apache-2.0 */
/* What one client may hold in the daemon, over raw sockets against a real
 * kvtierd (a fresh one per test, so tickets are numbered from 1): parked
 * WAITs are capped per connection, a passed fd belongs only to the frame it
 * came with, and a client that does not read its replies is throttled (not
 * read from) rather than closed. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "transport/proto.h"

#define MAX_WAITS 256 /* KVT_CONN_MAX_WAITS, as docs/security.md says */

/* The engine layout of kvtd_test_desc: 4 layers, K and V, 8 pages of 256 B. */
#define LAYERS 4
#define PAGES 8
#define PAGE 256u
#define MEM_BYTES ((uint64_t)LAYERS * 2 * PAGES * PAGE)

static struct kvtd_proc d;

static int setup(void **state)
{
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

/* Send all of w's frames in one sendmsg, with passfd (when >= 0) on the
 * first byte. */
static void send_wr(int fd, struct kvt_wr *w, int passfd)
{
	union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } ctl;
	struct iovec iov = { .iov_base = w->buf, .iov_len = w->len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	assert_int_equal(w->err, 0);
	if (passfd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &passfd, sizeof(int));
	}
	assert_int_equal(sendmsg(fd, &msg, MSG_NOSIGNAL), (ssize_t)w->len);
	kvt_wr_free(w);
	kvt_wr_init(w);
}

static void recv_exact(int fd, void *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (size_t got = 0; got < len;) {
		ssize_t n;

		assert_int_equal(poll(&p, 1, 10000), 1);
		n = recv(fd, (uint8_t *)buf + got, len - got, 0);
		if (n <= 0)
			fail_msg("the daemon closed the connection (%zu of %zu bytes)", got, len);
		got += (size_t)n;
	}
}

/* Read one reply: its header, and its payload into payload (cap bytes; the
 * rest is dropped). */
static void read_reply(int fd, struct kvt_frame_hdr *h, void *payload, size_t cap)
{
	uint8_t b[KVT_PROTO_HDR_BYTES], skip[4096];

	recv_exact(fd, b, sizeof(b));
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b), h), 0);
	assert_true(h->op & KVT_OP_REPLY);
	for (size_t left = h->len, off = 0; left;) {
		size_t n = left < sizeof(skip) ? left : sizeof(skip);

		recv_exact(fd, skip, n);
		if (off < cap)
			memcpy((uint8_t *)payload + off, skip, n < cap - off ? n : cap - off);
		off += n;
		left -= n;
	}
}

/* HELLO with no token (the default tenant); returns the namespace handle. */
static uint32_t raw_hello(int fd)
{
	struct kvt_ns_desc desc;
	struct kvt_rep_hello rep;
	struct kvt_frame_hdr h;
	uint8_t payload[256];
	struct kvt_wr w;

	kvtd_test_desc(&desc, NULL);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_hello(&w, 1000, "", &desc), 0);
	send_wr(fd, &w, -1);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_hello(payload, h.len, &rep), 0);
	kvt_wr_free(&w);
	return rep.ns;
}

static void enc_register(struct kvt_wr *w, uint64_t id, uint32_t ns, uint32_t kind)
{
	struct kvt_req_register r = {
		.ns = ns, .kind = kind, .bytes = MEM_BYTES, .layers = LAYERS, .pages = PAGES,
		.layer_stride = 2ull * PAGES * PAGE, .kv_stride = (uint64_t)PAGES * PAGE,
		.page_stride = PAGE,
	};
	static const uint8_t ipc[64] = { 1 };

	if (kind == KVT_MEM_CUDA_IPC) {
		r.ipc = ipc;
		r.ipc_len = sizeof(ipc);
	}
	assert_int_equal(kvt_proto_enc_register(w, id, &r), 0);
}

/* The bytes of page p (every layer, K and V) of a mapping. */
static uint8_t *page_at(uint8_t *map, uint32_t layer, uint32_t kv, uint32_t p)
{
	return map + (uint64_t)layer * 2 * PAGES * PAGE + (uint64_t)kv * PAGES * PAGE +
	       (uint64_t)p * PAGE;
}

/* A WAIT for the whole ticket with the longest timeout, and its reply. */
static int32_t wait_ticket(int fd, uint64_t ticket)
{
	struct kvt_rep_wait rep;
	struct kvt_frame_hdr h;
	uint8_t payload[64];
	struct kvt_wr w;

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_wait(&w, KVT_OP_WAIT, 77, ticket, KVT_WAIT_ALL,
					    KVT_WAIT_FOREVER), 0);
	send_wr(fd, &w, -1);
	read_reply(fd, &h, payload, sizeof(payload));
	kvt_wr_free(&w);
	assert_int_equal(h.id, 77);
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_wait(payload, h.len, &rep), 0);
	return rep.result;
}

/* A memfd sent with a frame that does not use it (a PING, a REGISTER that
 * fails to decode, a CUDA-IPC REGISTER) is not kept for the next REGISTER:
 * a REGISTER without an fd is refused, and one with its own fd maps that fd,
 * as a SAVE from page 0 and a LOAD into page 1 of its region show. */
static void a_register_maps_only_the_fd_sent_with_it(void **state)
{
	int fd = raw_connect(), stray[3], mine;
	uint8_t *stray_map[3], *map, payload[64];
	struct kvt_frame_hdr h;
	struct kvt_key key;
	struct kvt_wr w;
	uint32_t ns = raw_hello(fd), region, page0 = 0, page1 = 1;
	uint64_t ticket;

	for (int i = 0; i < 3; i++) {
		void *m;

		stray[i] = kvt_client_memfd_create("stray", MEM_BYTES, &m);
		assert_true(stray[i] >= 0);
		stray_map[i] = m;
		memset(stray_map[i], 0xaa, MEM_BYTES);
	}
	kvt_wr_init(&w);
	/* a PING carrying an fd */
	assert_int_equal(kvt_proto_enc_blob(&w, KVT_OP_PING, 1, "x", 1), 0);
	send_wr(fd, &w, stray[0]);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, 0);
	/* a REGISTER whose payload does not decode, carrying an fd */
	enc_register(&w, 2, ns, KVT_MEM_HOST_MEMFD);
	w.buf[KVT_PROTO_HDR_BYTES + 4] = 9; /* an unknown memory kind */
	send_wr(fd, &w, stray[1]);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, -EBADMSG);
	/* a CUDA-IPC REGISTER carrying an fd (refused or failing without a GPU) */
	enc_register(&w, 3, ns, KVT_MEM_CUDA_IPC);
	send_wr(fd, &w, stray[2]);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_true(h.status < 0);
	/* a memfd REGISTER with no fd: none of the strays may stand in */
	enc_register(&w, 4, ns, KVT_MEM_HOST_MEMFD);
	send_wr(fd, &w, -1);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, -EBADF);

	/* and one with its own fd maps that one */
	mine = kvt_client_memfd_create("mine", MEM_BYTES, (void **)&map);
	assert_true(mine >= 0);
	memset(map, 0, MEM_BYTES);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t kv = 0; kv < 2; kv++)
			kvt_test_fill(page_at(map, l, kv, 0), PAGE, 1 + l * 2 + kv);
	enc_register(&w, 5, ns, KVT_MEM_HOST_MEMFD);
	send_wr(fd, &w, mine);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_u32(payload, h.len, &region), 0);

	memset(&key, 0x5c, sizeof(key));
	assert_int_equal(kvt_proto_enc_xfer(&w, KVT_OP_SAVE, 6, ns, region, NULL, &key, &page0, 1), 0);
	send_wr(fd, &w, -1);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_u64(payload, h.len, &ticket), 0);
	assert_int_equal(wait_ticket(fd, ticket), 1);
	assert_int_equal(kvt_proto_enc_xfer(&w, KVT_OP_LOAD, 7, ns, region, NULL, &key, &page1, 1), 0);
	send_wr(fd, &w, -1);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_load(payload, h.len, &ticket, &(uint32_t){ 0 }), 0);
	assert_int_equal(wait_ticket(fd, ticket), 1);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t kv = 0; kv < 2; kv++)
			assert_memory_equal(page_at(map, l, kv, 1), page_at(map, l, kv, 0), PAGE);
	for (int i = 0; i < 3; i++) {
		for (uint64_t b = 0; b < MEM_BYTES; b++)
			assert_int_equal(stray_map[i][b], 0xaa); /* untouched */
		munmap(stray_map[i], MEM_BYTES);
		close(stray[i]);
	}
	kvt_wr_free(&w);
	munmap(map, MEM_BYTES);
	close(mine);
	close(fd);
}

/* A SAVE and, in the same write, more WAITs for its ticket than a connection
 * may park: the loop handles the whole write before it learns that the job
 * finished, so exactly MAX_WAITS park (answered 0 when it finishes) and the
 * rest are answered -EBUSY. */
static void parked_waits_are_capped_per_connection(void **state)
{
	enum { N_WAITS = MAX_WAITS + 40 };
	int fd = raw_connect(), busy = 0, done = 0, mem;
	uint32_t ns = raw_hello(fd), region, pages[PAGES];
	struct kvt_key keys[PAGES];
	struct kvt_frame_hdr h;
	uint8_t payload[64];
	uint64_t ticket = 0;
	struct kvt_wr w;
	void *map;

	mem = kvt_client_memfd_create("engine", MEM_BYTES, &map);
	assert_true(mem >= 0);
	kvt_wr_init(&w);
	enc_register(&w, 1, ns, KVT_MEM_HOST_MEMFD);
	send_wr(fd, &w, mem);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_u32(payload, h.len, &region), 0);

	for (uint32_t i = 0; i < PAGES; i++) {
		memset(&keys[i], (int)i + 1, sizeof(keys[i]));
		pages[i] = i;
	}
	assert_int_equal(kvt_proto_enc_xfer(&w, KVT_OP_SAVE, 2, ns, region, NULL, keys, pages,
					    PAGES), 0);
	/* the first SAVE of a fresh daemon is ticket 1 */
	for (int i = 0; i < N_WAITS; i++)
		assert_int_equal(kvt_proto_enc_wait(&w, KVT_OP_WAIT, 100 + (uint64_t)i, 1,
						    KVT_WAIT_ALL, KVT_WAIT_FOREVER), 0);
	send_wr(fd, &w, -1);
	for (int i = 0; i < N_WAITS + 1; i++) {
		read_reply(fd, &h, payload, sizeof(payload));
		if ((h.op & ~KVT_OP_REPLY) == KVT_OP_SAVE) {
			assert_int_equal(h.status, 0);
			assert_int_equal(kvt_proto_rep_u64(payload, h.len, &ticket), 0);
			continue;
		}
		assert_int_equal(h.op & ~KVT_OP_REPLY, KVT_OP_WAIT);
		if (h.status == -EBUSY) {
			busy++;
		} else {
			struct kvt_rep_wait rep;

			assert_int_equal(h.status, 0);
			assert_int_equal(kvt_proto_rep_wait(payload, h.len, &rep), 0);
			assert_int_equal(rep.result, PAGES);
			done++;
		}
	}
	assert_int_equal(ticket, 1);
	assert_int_equal(done, MAX_WAITS);
	assert_int_equal(busy, N_WAITS - MAX_WAITS);
	/* the connection goes on */
	assert_int_equal(kvt_proto_enc_blob(&w, KVT_OP_PING, 9, "ok", 2), 0);
	send_wr(fd, &w, -1);
	read_reply(fd, &h, payload, sizeof(payload));
	assert_int_equal(h.status, 0);
	kvt_wr_free(&w);
	munmap(map, MEM_BYTES);
	close(mem);
	close(fd);
}

/* A client that sends PINGs and reads none of the echoes: once its replies
 * pile up the daemon stops reading it (the client's sends would block), and
 * when it reads, every echo is there and the connection goes on. */
static void a_client_that_does_not_read_is_throttled_not_closed(void **state)
{
	static uint8_t blob[KVT_PROTO_MAX_PING];
	const size_t limit = 64u << 20; /* far past what a throttled daemon takes */
	int fd = raw_connect();
	uint8_t *echo = malloc(sizeof(blob));
	struct kvt_frame_hdr h;
	size_t sent = 0, frames = 0, off = 0;
	struct kvt_wr w;

	kvt_test_fill(blob, sizeof(blob), 42);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_blob(&w, KVT_OP_PING, 1, blob, sizeof(blob)), 0);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t n;

		if (poll(&p, 1, 1000) == 0)
			break; /* the daemon has stopped reading */
		n = send(fd, w.buf + off, w.len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n < 0)
			fail_msg("send: %s after %zu frames", strerror(errno), frames);
		sent += (size_t)n;
		off += (size_t)n;
		if (off == w.len) {
			frames++;
			off = 0;
		}
		if (sent > limit)
			fail_msg("the daemon read %zu bytes without its replies being read", sent);
	}
	for (size_t i = 0; i < frames; i++) {
		read_reply(fd, &h, echo, sizeof(blob));
		assert_int_equal(h.status, 0);
		assert_int_equal(h.len, sizeof(blob));
		assert_memory_equal(echo, blob, sizeof(blob));
	}
	if (off) {
		/* the frame cut short: with the replies read, the rest goes in */
		while (off < w.len) {
			ssize_t n = send(fd, w.buf + off, w.len - off, MSG_NOSIGNAL);

			assert_true(n > 0);
			off += (size_t)n;
		}
		read_reply(fd, &h, echo, sizeof(blob));
		assert_int_equal(h.status, 0);
		assert_memory_equal(echo, blob, sizeof(blob));
	}
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_blob(&w, KVT_OP_PING, 2, "ok", 2), 0);
	send_wr(fd, &w, -1);
	read_reply(fd, &h, echo, sizeof(blob));
	assert_int_equal(h.status, 0);
	kvt_wr_free(&w);
	free(echo);
	close(fd);
}

/* A PING on a fresh connection: 0 when answered, 1 when the daemon closed
 * the connection instead. */
static int ping_new_conn(int *out)
{
	struct kvt_frame_hdr h;
	uint8_t b[KVT_PROTO_HDR_BYTES + 8];
	struct pollfd p;
	struct kvt_wr w;
	size_t got = 0;
	int fd = raw_connect();

	kvt_wr_init(&w);
	if (kvt_proto_enc_blob(&w, KVT_OP_PING, 5, "hi", 2) ||
	    send(fd, w.buf, w.len, MSG_NOSIGNAL) != (ssize_t)w.len) {
		kvt_wr_free(&w);
		close(fd);
		return 1;
	}
	kvt_wr_free(&w);
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	while (got < KVT_PROTO_HDR_BYTES + 2) {
		ssize_t n;

		if (poll(&p, 1, 10000) != 1)
			return -1;
		n = recv(fd, b + got, sizeof(b) - got, 0);
		if (n <= 0) {
			close(fd);
			return 1;
		}
		got += (size_t)n;
	}
	if (kvt_proto_hdr_decode(b, got, &h) || h.status != 0)
		return -1;
	*out = fd;
	return 0;
}

/* With an open-file limit of 96 the daemon takes only the clients whose fds
 * (the socket and up to 4 passed ones each) fit beside a margin and the fds
 * it may lend to REGISTER_PARTS (an eighth of the limit): (96 - 64 - 12) / 5
 * = 4. The 5th is closed at once, the 4 go on, and a client gets in again
 * once one leaves.
 * A forked child lowers its own hard limit, which kvtierd inherits. */
static void clients_fit_the_open_file_limit(void **state)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { 96, 96 };
		int fds[4], extra, rc = 0;

		if (setrlimit(RLIMIT_NOFILE, &rl) || kvtd_start(&d, NULL, NULL))
			_exit(10);
		for (int i = 0; i < 4; i++)
			if (ping_new_conn(&fds[i]) != 0)
				rc = 11;
		if (!rc && ping_new_conn(&extra) != 1)
			rc = 12; /* the 5th was served */
		if (!rc) {
			close(fds[0]);
			/* the daemon sees the close on its own time: retry until it has */
			int r = 1;
			for (int tries = 0; tries < 500 && r == 1; tries++) {
				r = ping_new_conn(&fds[0]);
				if (r == 1)
					usleep(10000);
			}
			rc = r == 0 ? 0 : 13;
		}
		for (int i = 0; i < 4; i++)
			close(fds[i]);
		if (kvtd_stop(&d, SIGTERM) != 0 && !rc)
			rc = 14;
		kvtd_cleanup(&d);
		_exit(rc);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status))
		fail_msg("child failed with %d (11: a client within the limit refused, 12: one "
			 "past it served, 13: no room after a close, 14: unclean stop)",
			 WEXITSTATUS(status));
}

/* Raise this process's open-file limit to at least `want` (its hard limit
 * allowing); returns the soft limit now. */
static rlim_t raise_nofile(rlim_t want)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < want) {
		rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	return rl.rlim_cur;
}

/* Connect and say HELLO; 0 on success, -1 when the daemon does not let us. */
static int hello_new_client(void)
{
	struct kvt_client *c = kvtd_connect(&d, NULL);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	int err;

	if (!c)
		return -1;
	kvtd_test_desc(&desc, NULL);
	err = kvt_client_hello(c, &desc, &ns);
	kvt_client_close(c);
	return err ? -1 : 0;
}

/* 1,100 connections that never say HELLO (more than the daemon takes) do
 * not lock engines out: each is closed once its HELLO timeout (here 1 s)
 * passes, and a new engine gets in. */
static void connections_without_hello_are_closed(void **state)
{
	const char *extra[] = { "--hello-timeout", "1", NULL };
	int n = 1100, fds[1100], got = 0;
	struct pollfd p;
	char buf[8];

	if (raise_nofile(n + 100) < (rlim_t)n + 100)
		n = 900; /* still more than a daemon with the same limit takes */
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	for (int i = 0; i < n; i++)
		fds[i] = raw_connect();
	/* a new engine gets in once the idle ones are dropped: within 1 s and
	 * what the machine's load adds */
	for (int tries = 0; tries < 100 && !got; tries++) {
		got = hello_new_client() == 0;
		if (!got)
			usleep(50000);
	}
	if (!got)
		fail_msg("no engine got in past %d idle connections within 5 s", n);
	/* and the idle ones were closed by the daemon, not left waiting */
	p = (struct pollfd){ .fd = fds[n - 1], .events = POLLIN };
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(recv(fds[n - 1], buf, sizeof(buf), 0), 0);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* With --max-conns-per-uid 8 a uid's 9th connection is closed at once while
 * another uid still gets in, and the first gets in again after a close. */
static void connections_are_capped_per_uid(void **state)
{
	const char *extra[] = { "--max-conns-per-uid", "8", "--allow-uid", "4243",
				"--socket-mode", "0666", NULL };
	int fds[8], extra_fd, status, r = 1;
	pid_t pid;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	assert_int_equal(chmod(d.sockdir, 0711), 0); /* uid 4243 reaches the socket */
	for (int i = 0; i < 8; i++)
		assert_int_equal(ping_new_conn(&fds[i]), 0);
	assert_int_equal(ping_new_conn(&extra_fd), 1);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setgid(4243) || setuid(4243))
			_exit(10);
		_exit(hello_new_client() == 0 ? 0 : 11);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status))
		fail_msg("another uid was not let in (child status %d)", WEXITSTATUS(status));
	close(fds[0]);
	for (int tries = 0; tries < 500 && r == 1; tries++) {
		r = ping_new_conn(&fds[0]);
		if (r == 1)
			usleep(10000);
	}
	assert_int_equal(r, 0);
	for (int i = 0; i < 8; i++)
		close(fds[i]);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(a_register_maps_only_the_fd_sent_with_it, setup,
						teardown),
		cmocka_unit_test_setup_teardown(parked_waits_are_capped_per_connection, setup,
						teardown),
		cmocka_unit_test_setup_teardown(a_client_that_does_not_read_is_throttled_not_closed,
						setup, teardown),
		cmocka_unit_test(clients_fit_the_open_file_limit),
		cmocka_unit_test(connections_without_hello_are_closed),
		cmocka_unit_test(connections_are_capped_per_uid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
