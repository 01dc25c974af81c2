/* SPDX-License-Identifier: Apache-2.0 */
/* A real kvtierd restarted each way its DRAM tier survives (docs/restart.md):
 * handed over to `kvtierd --take-over` under a saving and loading engine;
 * killed with -9 and restarted with systemd's fd store holding the region
 * (played by bench/fdstore.c, the notify socket and LISTEN_FDS protocol);
 * stopped cleanly with no successor (the blocks only DRAM holds go to SSD
 * first). And the edges: a region of another geometry is refused and the
 * tier starts empty; the hand-over socket is mode 0600 and answers no
 * other uid; a successor that dies before it serves hands the region
 * back to the old daemon. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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

#include "bench/fdstore.h"
#include "daemon_proc.h"
#include "helpers.h"

#define BLOCKS 64
#define BLOCK_TOKENS 16

static uint64_t seed;

struct engine {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[BLOCKS];
};

static int engine_open(struct engine *e, const char *socket)
{
	struct kvt_client_opts o;
	struct kvt_ns_desc desc;
	uint32_t tokens[BLOCKS * BLOCK_TOKENS];
	uint64_t s = seed | 1;

	memset(e, 0, sizeof(*e));
	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = socket;
	o.token = "";
	if (kvt_client_connect(&o, &e->c))
		return -1;
	kvtd_test_desc_128k(&desc, "test/warm-restart");
	if (kvt_client_hello(e->c, &desc, &e->ns) ||
	    engine_mem_open(&e->m, e->c, &e->ns, &desc, BLOCKS)) {
		kvt_client_close(e->c);
		return -1;
	}
	for (int i = 0; i < BLOCKS * BLOCK_TOKENS; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&e->ns, NULL, tokens, BLOCKS * BLOCK_TOKENS,
						e->keys, BLOCKS), BLOCKS);
	return 0;
}

static void engine_close(struct engine *e)
{
	engine_mem_close(&e->m);
	kvt_client_close(e->c);
}

static void save_range(struct engine *e, uint32_t from, uint32_t n)
{
	uint32_t pages[BLOCKS];
	uint64_t ticket;

	for (uint32_t i = 0; i < n; i++) {
		pages[i] = from + i;
		engine_page_fill(&e->m, from + i, seed + from + i);
	}
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region, NULL, e->keys + from,
					 pages, n, &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), n);
}

/* Load block i: 1 (right bytes), 0 (a miss or a failed request); a wrong
 * byte fails the test. */
static int load_one(struct engine *e, uint32_t i)
{
	uint32_t page = i;
	uint64_t ticket;

	engine_page_fill(&e->m, page, 0);
	if (kvt_client_load(e->c, &e->ns, (uint32_t)e->m.region, &e->keys[i], &page, 1, &ticket))
		return 0;
	if (kvt_client_wait(e->c, ticket, 60000) != 1)
		return 0;
	if (engine_page_check(&e->m, page, seed + i))
		fail_msg("block %u: wrong bytes", i);
	return 1;
}

/* How many of the blocks are in DRAM (LOOKUP's tiers). */
static int in_dram(struct engine *e)
{
	uint8_t tiers[BLOCKS];
	int n = 0, found = kvt_client_lookup(e->c, &e->ns, e->keys, BLOCKS, tiers);

	for (int i = 0; i < found; i++)
		n += tiers[i] == KVT_TIER_DRAM;
	return n;
}

/* A number of STATS' "restart" object (a.b for a nested one). */
static long long restart_stat(struct kvt_client *c, const char *key, const char *sub)
{
	char *text = NULL;
	json_t *root, *v;
	long long n;

	assert_int_equal(kvt_client_stats(c, &text), 0);
	root = json_loads(text, 0, NULL);
	assert_non_null(root);
	v = json_object_get(json_object_get(root, "restart"), key);
	if (sub)
		v = json_object_get(v, sub);
	if (!v)
		fail_msg("no restart.%s%s%s in STATS", key, sub ? "." : "", sub ? sub : "");
	n = json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
	json_decref(root);
	free(text);
	return n;
}

static const char *const extra[] = { "--dram", "32M", "--ssd", "64M", NULL };

/* The running daemon hands over to `kvtierd --take-over` while an engine
 * saves and loads: the engine sees at most one failed request (its
 * connection closed), reconnects to the same path, and finds every block in
 * DRAM, byte for byte. */
static void handover_under_engine(void **state)
{
	struct kvtd_proc a = { 0 }, b = { 0 };
	const char *takeover[] = { "--dram", "32M", "--ssd", "64M", "--take-over", NULL, NULL };
	char hsock[300];
	struct engine e;
	int failed = 0, loaded = 0, status = -1;

	(void)state;
	assert_int_equal(kvtd_start(&a, NULL, extra), 0);
	assert_int_equal(engine_open(&e, a.socket), 0);
	save_range(&e, 0, BLOCKS / 2);
	snprintf(hsock, sizeof(hsock), "%s.takeover", a.socket);
	takeover[5] = hsock;
	b.sockdir = strdup(a.sockdir); /* the successor serves the same socket path */
	assert_int_equal(kvtd_start(&b, a.dir, takeover), 0);
	/* the engine goes on until the old daemon has gone, and a while after */
	for (int round = 0, after = 0; after < 20 && round < 5000; round++) {
		uint32_t i = (uint32_t)round % (BLOCKS / 2);

		if (status < 0 && waitpid(a.pid, &status, WNOHANG) == a.pid)
			a.pid = 0;
		if (status >= 0)
			after++;
		if (load_one(&e, i)) {
			loaded++;
			continue;
		}
		failed++;
		engine_close(&e);
		for (int t = 0; t < 500 && engine_open(&e, b.socket); t++)
			kvt_test_sleep_ms(10);
		assert_non_null(e.c);
	}
	printf("# %d loads, %d failed across the hand-over\n", loaded, failed);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(failed <= 1);
	assert_true(kvtd_log_has(&a, "event=handover.sent"));
	assert_true(kvtd_log_has(&b, "event=takeover.received"));
	/* all of them in DRAM, and the engine saves the rest as usual */
	assert_int_equal(in_dram(&e), BLOCKS / 2);
	assert_int_equal(restart_stat(e.c, "warm_blocks", NULL), BLOCKS / 2);
	assert_int_equal(restart_stat(e.c, "adopted", NULL), 1);
	save_range(&e, BLOCKS / 2, BLOCKS / 2);
	for (uint32_t i = 0; i < BLOCKS; i++)
		assert_int_equal(load_one(&e, i), 1);
	assert_int_equal(restart_stat(e.c, "dropped", "checksum"), 0);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&b, SIGTERM), 0);
	kvtd_cleanup(&b); /* a's directories are b's */
	free(a.dir);
	free(a.sockdir);
}

/* argv of a daemon with its data in dir and its socket in sockdir, under
 * the fd store. */
static void fdstore_argv(const char **argv, const char *dir, const char *sockdir,
			 const char *dram, char *sock, char *data)
{
	int n = 0;

	sprintf(sock, "%s/kvtierd.sock", sockdir);
	sprintf(data, "%s/data", dir);
	argv[n++] = kvtd_binary();
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--data-dir";
	argv[n++] = data;
	argv[n++] = "--dram";
	argv[n++] = dram;
	argv[n++] = "--ssd";
	argv[n++] = "64M";
	argv[n++] = "--metrics";
	argv[n++] = "off";
	argv[n] = NULL;
}

/* Under systemd's fd store: kill -9, and the next start finds every block
 * in DRAM; a clean restart too; a restart with another DRAM size refuses
 * the region (loudly) and starts empty, and serves. */
static void fdstore_survives_kill9(void **state)
{
	char *dir = kvt_test_mkdtemp("warm-fdstore");
	char *sockdir = kvt_test_sockdir("warm-fdstore"); /* short: Unix socket paths */
	char sock[300], data[PATH_MAX], log[PATH_MAX];
	const char *argv[16];
	struct kvt_fdstore m;
	struct engine e;
	struct stat st;

	(void)state;
	snprintf(log, sizeof(log), "%s/kvtierd.log", dir);
	fdstore_argv(argv, dir, sockdir, "32M", sock, data);
	assert_int_equal(kvt_fdstore_open(&m, sockdir), 0);
	assert_true(kvt_fdstore_start(&m, argv, log) > 0);
	assert_int_equal(kvt_fdstore_wait_ready(&m, 30000), 0);
	/* the region and the socket are in the store; the region mode 0600 */
	assert_true(kvt_fdstore_fd(&m, "dram") >= 0);
	assert_true(kvt_fdstore_fd(&m, "sidecar") >= 0);
	assert_int_equal(fstat(kvt_fdstore_fd(&m, "dram"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(engine_open(&e, sock), 0);
	save_range(&e, 0, BLOCKS);
	engine_close(&e);

	/* a clean restart first: the daemon bound its socket itself, and its
	 * file stays for the next start, which serves the stored socket; the
	 * blocks are written down to SSD and still warm */
	assert_true(WIFEXITED(kvt_fdstore_stop(&m, SIGTERM)));
	assert_true(kvt_fdstore_start(&m, argv, log) > 0);
	assert_int_equal(kvt_fdstore_wait_ready(&m, 30000), 0);
	assert_int_equal(engine_open(&e, sock), 0);
	assert_int_equal(restart_stat(e.c, "generation", NULL), 2);
	assert_int_equal(in_dram(&e), BLOCKS);
	engine_close(&e);

	/* kill -9: nothing runs at the stop; the store keeps the region */
	assert_int_equal(kvt_fdstore_stop(&m, SIGKILL) & 0x7f, SIGKILL);
	assert_true(kvt_fdstore_start(&m, argv, log) > 0);
	assert_int_equal(kvt_fdstore_wait_ready(&m, 30000), 0);
	assert_int_equal(m.n, 2); /* the same two fds, once each */
	assert_int_equal(engine_open(&e, sock), 0);
	assert_int_equal(restart_stat(e.c, "generation", NULL), 3);
	assert_int_equal(restart_stat(e.c, "warm_blocks", NULL), BLOCKS);
	assert_int_equal(in_dram(&e), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		assert_int_equal(load_one(&e, i), 1);
	assert_int_equal(restart_stat(e.c, "verified", NULL), BLOCKS);
	engine_close(&e);

	/* another DRAM size: another geometry, refused; SSD still has them */
	assert_true(WIFEXITED(kvt_fdstore_stop(&m, SIGTERM)));
	fdstore_argv(argv, dir, sockdir, "48M", sock, data);
	assert_true(kvt_fdstore_start(&m, argv, log) > 0);
	assert_int_equal(kvt_fdstore_wait_ready(&m, 30000), 0);
	assert_int_equal(engine_open(&e, sock), 0);
	assert_int_equal(restart_stat(e.c, "refused", NULL), 1);
	assert_int_equal(restart_stat(e.c, "warm_blocks", NULL), 0);
	assert_int_equal(in_dram(&e), 0);
	for (uint32_t i = 0; i < BLOCKS; i++)
		assert_int_equal(load_one(&e, i), 1); /* from SSD, written down at the stop */
	engine_close(&e);
	assert_true(WIFEXITED(kvt_fdstore_stop(&m, SIGTERM)));
	{
		struct kvtd_proc d = { .dir = dir };

		snprintf(d.log, sizeof(d.log), "%s", log);
		assert_true(kvtd_log_has(&d, "event=dram.warm.refused"));
	}
	kvt_fdstore_close(&m);
	kvt_test_rmdir(dir);
	kvt_test_rmdir(sockdir);
	free(dir);
	free(sockdir);
}

/* A clean stop without a successor or fd store writes what only DRAM holds
 * to SSD first: the next daemon has every block (before, a graceful
 * restart dropped every block still only in DRAM). */
static void clean_stop_writes_down(void **state)
{
	const char *cold[] = { "--dram", "32M", "--ssd", "64M", "--no-warm-restart", NULL };
	struct kvtd_proc d = { 0 };
	struct engine e;
	int n = 0;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, cold), 0);
	assert_int_equal(engine_open(&e, d.socket), 0);
	save_range(&e, 0, BLOCKS);
	assert_int_equal(in_dram(&e), BLOCKS); /* none demoted: only DRAM has them */
	engine_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	assert_true(kvtd_log_has(&d, "event=stop.write_down blocks=64"));
	assert_int_equal(kvtd_start(&d, d.dir, cold), 0);
	assert_int_equal(engine_open(&e, d.socket), 0);
	for (uint32_t i = 0; i < BLOCKS; i++)
		n += load_one(&e, i);
	printf("# %d of %d blocks after a clean restart\n", n, BLOCKS);
	assert_int_equal(n, BLOCKS);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* Ask for a take-over as uid (in a child): whether fds came. */
static int ask_as(const char *hsock, uid_t uid)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char buf[64];
		int fd;

		if (uid != geteuid() && setuid(uid))
			_exit(3);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", hsock);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			_exit(errno == EACCES ? 4 : 5);
		/* refused at accept: the send may already find it closed */
		if (send(fd, "KVTH1 take-over", 16, MSG_NOSIGNAL) != 16)
			_exit(1);
		_exit(recv(fd, buf, sizeof(buf), 0) > 0 ? 0 : 1);
	}
	return kvtd_wait_exit(pid);
}

/* The hand-over socket is mode 0600; a process of another uid that gets
 * through (root may chmod, a file ACL may allow) is refused by its
 * credentials: no fd leaves, and the daemon goes on serving. */
static void handover_refuses_other_uid(void **state)
{
	struct kvtd_proc d = { 0 };
	char hsock[300];
	struct stat st;
	struct engine e;
	int r;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	snprintf(hsock, sizeof(hsock), "%s.takeover", d.socket);
	assert_int_equal(stat(hsock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	if (geteuid() != 0) {
		printf("# not root: the uid check is covered by the socket's mode only\n");
	} else {
		assert_int_equal(chmod(hsock, 0666), 0); /* let nobody reach the check */
		assert_int_equal(chmod(d.sockdir, 0711), 0);
		r = ask_as(hsock, 65534);
		if (r == 4) {
			/* a parent folder nobody may traverse (a checkout under a
			 * private home): the socket's path already keeps it out */
			printf("# uid 65534 cannot reach %s: the credential check is not "
			       "exercised here\n", hsock);
		} else {
			assert_int_equal(r, 1); /* closed without a byte */
			assert_true(kvtd_log_has(&d, "event=handover.refused uid=65534"));
		}
	}
	/* a request that is not one is refused too */
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		char buf[8];

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", hsock);
		assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		assert_int_equal(send(fd, "GET / HTTP/1.0\r\n", 16, 0), 16);
		assert_int_equal(recv(fd, buf, sizeof(buf), 0), 0);
		close(fd);
	}
	assert_int_equal(engine_open(&e, d.socket), 0);
	save_range(&e, 0, 4);
	assert_int_equal(load_one(&e, 3), 1);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* A successor that dies after it received the socket and the region, but
 * before it served them (a crash at start-up, a bad configuration): the old
 * daemon takes both back (it starts over on them, the same pid) and the
 * engine finds every block in DRAM. Without that, the region died with the
 * old daemon. */
static void successor_dying_hands_back(void **state)
{
	struct kvtd_proc a = { 0 };
	char hsock[300];
	struct engine e;
	pid_t child;

	(void)state;
	assert_int_equal(kvtd_start(&a, NULL, extra), 0);
	assert_int_equal(engine_open(&e, a.socket), 0);
	save_range(&e, 0, BLOCKS / 2);
	engine_close(&e);
	snprintf(hsock, sizeof(hsock), "%s.takeover", a.socket);
	child = fork();
	if (child == 0) {
		/* the successor: ask, take the fds, and die before serving */
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char buf[64], cbuf[CMSG_SPACE(3 * sizeof(int))];
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", hsock);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    send(fd, "KVTH1 take-over", 16, MSG_NOSIGNAL) != 16)
			_exit(2);
		_exit(recvmsg(fd, &m, 0) > 0 && CMSG_FIRSTHDR(&m) ? 0 : 1);
	}
	assert_int_equal(kvtd_wait_exit(child), 0); /* it had the fds, and died */
	/* the old daemon serves again, on the same socket, the same pid */
	for (int t = 0; t < 1000 && engine_open(&e, a.socket); t++)
		kvt_test_sleep_ms(10);
	assert_non_null(e.c);
	assert_int_equal(waitpid(a.pid, NULL, WNOHANG), 0);
	assert_true(kvtd_log_has(&a, "event=handover.taken_back"));
	assert_int_equal(restart_stat(e.c, "adopted", NULL), 1);
	assert_int_equal(in_dram(&e), BLOCKS / 2);
	for (uint32_t i = 0; i < BLOCKS / 2; i++)
		assert_int_equal(load_one(&e, i), 1);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&a, SIGTERM), 0);
	kvtd_cleanup(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(handover_under_engine),
		cmocka_unit_test(fdstore_survives_kill9),
		cmocka_unit_test(clean_stop_writes_down),
		cmocka_unit_test(handover_refuses_other_uid),
		cmocka_unit_test(successor_dying_hands_back),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
