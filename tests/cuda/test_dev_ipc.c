/* SPDX-License-Identifier: Apache-2.0 */
/* Device memory crosses processes: the exporter's handle travels over a real
 * Unix socket to a child process (fork + exec of this program, so the child
 * starts with no inherited device state) — on the host backend with the
 * memfd as SCM_RIGHTS, on CUDA as an IPC memory handle. The child imports it
 * at an offset, reads the parent's bytes, gathers from it as engine memory and
 * writes into it; the parent then sees the child's bytes in its own memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/cuda/dev_test.h"

#define LEN (256 * 1024)
#define OFFSET 8192

static int send_handle(int sock, const struct kvt_dev_ipc_handle *h)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { (void *)h, sizeof(*h) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);

	if (h->fd < 0) { /* CUDA: the handle's bytes say it all */
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		return sendmsg(sock, &msg, 0) == (ssize_t)sizeof(*h) ? 0 : -1;
	}
	memset(cbuf, 0, sizeof(cbuf));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &h->fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == (ssize_t)sizeof(*h) ? 0 : -1;
}

static int recv_handle(int sock, struct kvt_dev_ipc_handle *h)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { h, sizeof(*h) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;

	if (recvmsg(sock, &msg, 0) != (ssize_t)sizeof(*h))
		return -1;
	if (h->fd < 0)
		return 0;
	c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&h->fd, CMSG_DATA(c), sizeof(int)); /* this process's number for it */
	return 0;
}

/* The child: exit 0 when every check passed, else the number of the check. */
static int child(int sock)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_ipc_handle h;
	struct kvt_dev_stream *st;
	struct kvt_dev_mem *m;
	struct kvt_dev_layout_desc d;
	struct kvt_dev_layout *lay;
	uint8_t *want = malloc(LEN), *got = malloc(LEN), *p, *blk;
	void *base, *blocks[1];
	uint32_t page = 3;
	char ok = 1;

	if (!want || !got || recv_handle(sock, &h))
		return 2;
	if (kvt_dev_mem_import(dev, &h, &m))
		return 3;
	if (h.fd >= 0)
		close(h.fd); /* the import holds its own reference */
	p = kvt_dev_mem_ptr(m);
	if (kvt_dev_mem_len(m) != LEN - OFFSET)
		return 4;
	if (kvt_dev_stream_create(dev, false, &st) ||
	    kvt_dev_copy_async(st, got, p, LEN - OFFSET) || kvt_dev_stream_sync(st))
		return 11;
	kvt_test_fill(want, LEN, 7);
	if (memcmp(got, want + OFFSET, LEN - OFFSET))
		return 5;

	/* the imported memory is usable as engine memory: MLA, 64 B pages */
	kvt_dev_layout_desc_init(&d, sizeof(d));
	d.kind = KVT_LAYOUT_MLA;
	d.layers = 1;
	d.kv_heads = 1;
	d.head_dim = 16;
	d.elem_bytes = 4;
	d.page_tokens = 1;
	d.num_pages = 8;
	base = p;
	d.k_base = &base;
	if (kvt_dev_layout_create(dev, &d, &lay) ||
	    kvt_dev_host_alloc(dev, 64, KVT_DEV_HOST_MAPPED, (void **)&blk))
		return 6;
	blocks[0] = blk;
	if (kvt_dev_gather(lay, st, &page, 1, blocks, NULL) || kvt_dev_stream_sync(st))
		return 7;
	if (memcmp(blk, want + OFFSET + 3 * 64, 64))
		return 8;

	/* write for the parent to see */
	memset(want, 0xA5, LEN);
	if (kvt_dev_copy_async(st, p + 4096, want, 4096) || kvt_dev_stream_sync(st))
		return 9;
	if (write(sock, &ok, 1) != 1)
		return 10;
	kvt_dev_host_free(dev, blk);
	kvt_dev_layout_destroy(lay);
	kvt_dev_stream_destroy(st);
	kvt_dev_mem_free(m);
	kvt_dev_close(dev);
	free(want);
	free(got);
	return 0;
}

static const char *self;

static void child_process_maps_reads_and_writes_exported_memory(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_stream *st;
	struct kvt_dev_mem *m;
	struct kvt_dev_ipc_handle h;
	uint8_t *fill = malloc(LEN), *back = malloc(LEN);
	int sv[2], status;
	char ok = 0;
	pid_t pid;

	assert_true(fill && back);
	assert_int_equal(kvt_dev_mem_alloc(dev, LEN, &m), 0);
	assert_int_equal(kvt_dev_stream_create(dev, false, &st), 0);
	kvt_test_fill(fill, LEN, 7);
	assert_int_equal(kvt_dev_copy_async(st, kvt_dev_mem_ptr(m), fill, LEN), 0);
	assert_int_equal(kvt_dev_stream_sync(st), 0);
	assert_int_equal(kvt_dev_mem_export(m, &h), 0);
	assert_int_equal(h.backend, KVT_TEST_BACKEND);
	if (KVT_TEST_BACKEND == KVT_DEV_HOST)
		assert_true(h.fd >= 0);
	else
		assert_int_equal(h.fd, -1);
	assert_int_equal(h.len, LEN);
	/* name a part of the allocation, as an engine names its KV pool */
	h.offset = OFFSET;
	h.len = LEN - OFFSET;

	/* fork with no stream thread running; the child execs at once */
	kvt_dev_stream_destroy(st);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char fd[16];

		close(sv[0]);
		snprintf(fd, sizeof(fd), "%d", sv[1]);
		execl(self, self, "--child", fd, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	assert_int_equal(send_handle(sv[0], &h), 0);
	assert_int_equal(read(sv[0], &ok, 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(sv[0]);

	assert_int_equal(kvt_dev_stream_create(dev, false, &st), 0);
	assert_int_equal(kvt_dev_copy_async(st, back, kvt_dev_mem_ptr(m), LEN), 0);
	assert_int_equal(kvt_dev_stream_sync(st), 0);
	memset(fill + OFFSET + 4096, 0xA5, 4096);
	assert_memory_equal(back, fill, LEN);

	free(fill);
	free(back);
	kvt_dev_stream_destroy(st);
	kvt_dev_mem_free(m);
	kvt_dev_close(dev);
}

#ifndef KVT_TEST_CUDA
static void import_checks_the_handle_against_the_memfd(void **state)
{
	struct kvt_dev *dev = dev_test_open();
	struct kvt_dev_mem *m, *imp = NULL;
	struct kvt_dev_ipc_handle h;

	assert_int_equal(kvt_dev_mem_alloc(dev, 4096, &m), 0);
	assert_int_equal(kvt_dev_mem_export(m, &h), 0);
	h.len = 8192;
	assert_int_equal(kvt_dev_mem_import(dev, &h, &imp), -EINVAL);
	assert_null(imp);
	h.len = 4096;
	h.offset = 1;
	assert_int_equal(kvt_dev_mem_import(dev, &h, &imp), -EINVAL);
	h.offset = 0;
	assert_int_equal(kvt_dev_mem_import(dev, &h, &imp), 0);
	/* the same pages, through a second mapping */
	memset(kvt_dev_mem_ptr(m), 0x3C, 4096);
	assert_int_equal(((uint8_t *)kvt_dev_mem_ptr(imp))[4095], 0x3C);
	kvt_dev_mem_free(imp);
	kvt_dev_mem_free(m);
	kvt_dev_close(dev);
}

#endif

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(child_process_maps_reads_and_writes_exported_memory),
#ifndef KVT_TEST_CUDA
		cmocka_unit_test(import_checks_the_handle_against_the_memfd),
#endif
	};

	if (argc == 3 && !strcmp(argv[1], "--child"))
		return child(atoi(argv[2]));
	dev_test_require();
	self = "/proc/self/exe";
	return cmocka_run_group_tests(tests, NULL, NULL);
}
