/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd under systemd's protocol, with the test as the service manager:
 * it creates the listening socket and a NOTIFY_SOCKET datagram socket
 * itself, and starts kvtierd with the socket as fd 3 and LISTEN_FDS,
 * LISTEN_FDNAMES and LISTEN_PID set in the child before exec (what systemd
 * and systemd-socket-activate do). kvtierd must serve that socket (and not
 * bind its own), report READY=1 once it serves and STOPPING=1 on SIGTERM,
 * leave the socket file in place, and serve a client that connected while it
 * was down once it is started again on the same socket. Fds meant for another
 * pid are ignored; a passed fd that is not a listening socket is refused. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"

#define PAGES 16
#define BLOCKS 4

/* A socket of the test's, bound at path (or, for "@name", in the abstract
 * namespace). */
static int bound_socket(int type, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(len < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = 0;
	assert_int_equal(bind(fd, (struct sockaddr *)&sa,
			      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
					  (path[0] != '@'))), 0);
	return fd;
}

/* What the test holds as the service manager: a temp dir, the listening
 * socket dir/activated.sock, and the notification socket dir/notify.sock. */
struct manager {
	char *dir;
	int listener, notify;
	char notify_path[512];
};

static void manager_open(struct manager *m)
{
	char path[512];

	m->dir = kvt_test_sockdir("kvtierd-sd"); /* sockets: short paths */
	assert_non_null(m->dir);
	snprintf(path, sizeof(path), "%s/activated.sock", m->dir);
	snprintf(m->notify_path, sizeof(m->notify_path), "%s/notify.sock", m->dir);
	m->listener = bound_socket(SOCK_STREAM, path);
	assert_int_equal(listen(m->listener, 16), 0);
	m->notify = bound_socket(SOCK_DGRAM, m->notify_path);
}

static void manager_close(struct manager *m)
{
	close(m->notify);
	close(m->listener);
	kvt_test_rmdir(m->dir);
	free(m->dir);
}

/* Start kvtierd with `passed` as fd 3 and LISTEN_PID = listen_pid, or the
 * child's own pid when listen_pid is 0. */
static pid_t start(const char *dir, int passed, pid_t listen_pid, const char *notify)
{
	char log[512], own[512], data[512];
	pid_t pid;

	snprintf(log, sizeof(log), "%s/kvtierd.log", dir);
	snprintf(own, sizeof(own), "%s/own.sock", dir);
	snprintf(data, sizeof(data), "%s/data", dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char num[32];
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int copy = fcntl(passed, F_DUPFD, 10);

		if (fd < 0 || copy < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || dup2(copy, 3) != 3)
			_exit(126);
		close(copy);
		snprintf(num, sizeof(num), "%d", listen_pid ? (int)listen_pid : (int)getpid());
		setenv("LISTEN_PID", num, 1);
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_FDNAMES", "sidecar", 1);
		setenv("NOTIFY_SOCKET", notify, 1);
		execl(kvtd_binary(), kvtd_binary(), "--socket", own, "--data-dir", data,
		      "--dram", "64M", "--ssd", "0", "--metrics", "off", "--log-level", "debug",
		      (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The next notification on fd, within timeout_ms; "" on timeout. */
static const char *next_notification(int fd, int timeout_ms)
{
	static char buf[256];
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	buf[0] = 0;
	if (poll(&p, 1, timeout_ms) != 1)
		return buf;
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	return buf;
}

/* The next notification that is not about the fd store (FDSTORE=,
 * FDSTOREREMOVE=: the daemon keeps its DRAM tier and socket there; their
 * fds are closed here, as a manager without a store would). */
static const char *notification(int fd, int timeout_ms)
{
	for (;;) {
		const char *msg = next_notification(fd, timeout_ms);

		if (strncmp(msg, "FDSTORE", 7))
			return msg;
	}
}

/* kvtierd's exit status, or a failure when it has not exited within 30 s. */
static int wait_exit(pid_t pid)
{
	int status = 0;

	for (int i = 0; i < 3000; i++) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (r < 0 && errno != EINTR)
			fail_msg("waitpid: %s", strerror(errno));
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	fail_msg("kvtierd did not exit within 30 s");
	return -1;
}

static void print_log(const char *dir)
{
	char path[512], line[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/kvtierd.log", dir);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stderr);
	if (f)
		fclose(f);
}

static bool exists(const char *dir, const char *name, mode_t type)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == type;
}

static struct kvt_client *connect_to(const char *dir, const char *name)
{
	struct kvt_client_opts o;
	struct kvt_client *c = NULL;
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = path;
	o.token = "";
	assert_int_equal(kvt_client_connect(&o, &c), 0);
	return c;
}

/* Save BLOCKS pages, load them into others, compare every byte. */
static void save_load_every_byte(struct kvt_client *c)
{
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem mem;
	struct kvt_key keys[BLOCKS];
	uint32_t tokens[BLOCKS * 4], src[BLOCKS], dst[BLOCKS];
	uint64_t seed = kvt_test_seed(), s = seed, ticket;

	kvtd_test_desc(&desc, NULL);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&mem, c, &ns, &desc, PAGES), 0);
	for (uint32_t i = 0; i < BLOCKS * desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, BLOCKS * desc.block_tokens,
						keys, BLOCKS), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		src[i] = i;
		dst[i] = PAGES - 1 - i;
		engine_page_fill(&mem, src[i], seed + i);
		memset(engine_page(&mem, dst[i], 0, 0), 0, mem.page_bytes);
	}
	assert_int_equal(kvt_client_save(c, &ns, (uint32_t)mem.region, NULL, keys, src, BLOCKS,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), BLOCKS);
	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)mem.region, keys, dst, BLOCKS,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		if (engine_page_check(&mem, dst[i], seed + i))
			fail_msg("block %u came back with wrong bytes", i);
	engine_mem_close(&mem);
}

static void activated_socket_is_served_and_outlives_restarts(void **state)
{
	struct manager m;
	struct kvt_client *c, *waiting;
	char abstract[64];
	const char *msg;
	int notify2;
	pid_t pid;

	(void)state;
	manager_open(&m);
	pid = start(m.dir, m.listener, 0, m.notify_path);
	msg = notification(m.notify, 30000);
	if (!strstr(msg, "READY=1")) {
		print_log(m.dir);
		fail_msg("no READY=1 from kvtierd (got \"%s\")", msg);
	}
	assert_false(exists(m.dir, "own.sock", S_IFSOCK)); /* --socket was not bound */
	c = connect_to(m.dir, "activated.sock");
	save_load_every_byte(c);
	kvt_client_close(c);

	kill(pid, SIGTERM);
	assert_non_null(strstr(notification(m.notify, 30000), "STOPPING=1"));
	assert_int_equal(wait_exit(pid), 0);
	assert_true(exists(m.dir, "activated.sock", S_IFSOCK)); /* the manager's, left in place */

	/* while no daemon runs the socket still takes connections; the next
	 * daemon on the same socket serves them (and notifies an abstract socket) */
	waiting = connect_to(m.dir, "activated.sock");
	snprintf(abstract, sizeof(abstract), "@kvtier-test-notify-%d", (int)getpid());
	notify2 = bound_socket(SOCK_DGRAM, abstract);
	pid = start(m.dir, m.listener, 0, abstract);
	msg = notification(notify2, 30000);
	if (!strstr(msg, "READY=1")) {
		print_log(m.dir);
		fail_msg("no READY=1 on %s (got \"%s\")", abstract, msg);
	}
	assert_int_equal(kvt_client_ping(waiting, "queued", 6), 0);
	kvt_client_close(waiting);
	kill(pid, SIGTERM);
	assert_non_null(strstr(notification(notify2, 30000), "STOPPING=1"));
	assert_int_equal(wait_exit(pid), 0);
	close(notify2);
	manager_close(&m);
}

static void fds_for_another_process_are_ignored(void **state)
{
	struct manager m;
	struct kvt_client *c;
	pid_t pid;

	(void)state;
	manager_open(&m);
	/* LISTEN_PID names the test, as if a parent had not cleared it */
	pid = start(m.dir, m.listener, getpid(), m.notify_path);
	assert_non_null(strstr(notification(m.notify, 30000), "READY=1"));
	assert_true(exists(m.dir, "own.sock", S_IFSOCK));
	c = connect_to(m.dir, "own.sock");
	assert_int_equal(kvt_client_ping(c, "own", 3), 0);
	kvt_client_close(c);
	kill(pid, SIGTERM);
	assert_int_equal(wait_exit(pid), 0);
	assert_false(exists(m.dir, "own.sock", S_IFSOCK)); /* its own socket it removes */
	manager_close(&m);
}

static void a_passed_fd_that_is_not_a_listening_socket_is_refused(void **state)
{
	struct manager m;
	char log[512], text[8192];
	int unlistened;
	FILE *f;
	size_t n;
	pid_t pid;

	(void)state;
	manager_open(&m);
	unlistened = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(unlistened >= 0);
	pid = start(m.dir, unlistened, 0, m.notify_path);
	assert_int_equal(wait_exit(pid), 1);
	assert_string_equal(notification(m.notify, 0), ""); /* never READY */
	assert_false(exists(m.dir, "own.sock", S_IFSOCK));
	snprintf(log, sizeof(log), "%s/kvtierd.log", m.dir);
	f = fopen(log, "r");
	assert_non_null(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	if (!strstr(text, "not a listening Unix stream socket"))
		fail_msg("kvtierd's message does not say why: %s", text);
	close(unlistened);
	manager_close(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(activated_socket_is_served_and_outlives_restarts),
		cmocka_unit_test(fds_for_another_process_are_ignored),
		cmocka_unit_test(a_passed_fd_that_is_not_a_listening_socket_is_refused),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
