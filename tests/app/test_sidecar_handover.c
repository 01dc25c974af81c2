/* SPDX-License-Identifier: Apache-2.0 */
/* A real kvtierd at the edges of a stop and a hand-over (docs/reliability.md,
 * "Stops and hand-overs"): a second daemon started on a running one's
 * socket leaves the running one's hand-over socket alone; a successor that
 * cannot adopt the region declines it and the old daemon keeps serving; a
 * clean stop's write-down keeps what the SSD tier holds and says what it
 * dropped; a drain that times out still writes DRAM down and names the
 * jobs that were stuck. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"

#define PAGES 32u

static uint64_t seed;

/* An engine with n blocks of one chain (128 KiB each), saved and loaded
 * through PAGES pages of engine memory: block i through page i % PAGES. */
struct engine {
	struct kvtd_chain ch;
	uint32_t n;
};

static int engine_open(struct engine *e, const struct kvtd_proc *d, uint32_t n)
{
	e->n = n;
	return kvtd_chain_open(&e->ch, d, "test/handover", PAGES, n, seed);
}

static void engine_close(struct engine *e)
{
	kvtd_chain_close(&e->ch);
}

static void save_all(struct engine *e)
{
	for (uint32_t from = 0; from < e->n; from += PAGES) {
		uint32_t pages[PAGES], n = e->n - from < PAGES ? e->n - from : PAGES;
		uint64_t ticket;

		for (uint32_t k = 0; k < n; k++) {
			pages[k] = k;
			engine_page_fill(&e->ch.m, k, seed + from + k);
		}
		assert_int_equal(kvt_client_save(e->ch.c, &e->ch.ns, (uint32_t)e->ch.m.region, NULL,
						 e->ch.keys + from, pages, n, &ticket), 0);
		assert_int_equal(kvt_client_wait(e->ch.c, ticket, 60000), n);
	}
}

/* Load block i: 1 (right bytes), 0 (a miss); a wrong byte fails the test. */
static int load_one(struct engine *e, uint32_t i)
{
	uint32_t page = i % PAGES;
	uint64_t ticket;

	engine_page_fill(&e->ch.m, page, 0);
	if (kvt_client_load(e->ch.c, &e->ch.ns, (uint32_t)e->ch.m.region, &e->ch.keys[i], &page,
			    1, &ticket))
		return 0;
	if (kvt_client_wait(e->ch.c, ticket, 60000) != 1)
		return 0;
	if (engine_page_check(&e->ch.m, page, seed + i))
		fail_msg("block %u: wrong bytes", i);
	return 1;
}

static uint32_t load_all(struct engine *e)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < e->n; i++)
		n += (uint32_t)load_one(e, i);
	return n;
}

/* The exit status of a child within ms, or -1 (then it is killed). */
static int wait_exit_within(pid_t pid, unsigned ms)
{
	int status;

	for (unsigned t = 0; t < ms / 10; t++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		kvt_test_sleep_ms(10);
	}
	kill(pid, SIGKILL);
	kvtd_wait_exit(pid);
	return -1;
}

/* Start kvtierd on socket with its data in dir/data (log dir/kvtierd.log)
 * and `extra`, without waiting for it. Returns the pid. */
static pid_t spawn(const char *socket, const char *dir, const char *const *extra)
{
	const char *argv[32];
	char data[PATH_MAX], log[PATH_MAX];
	int n = 0;
	pid_t pid;

	snprintf(data, sizeof(data), "%s/data", dir);
	snprintf(log, sizeof(log), "%s/kvtierd.log", dir);
	argv[n++] = kvtd_binary();
	argv[n++] = "--socket";
	argv[n++] = socket;
	argv[n++] = "--data-dir";
	argv[n++] = data;
	argv[n++] = "--metrics";
	argv[n++] = "off";
	argv[n++] = "--log-level";
	argv[n++] = "debug";
	for (int i = 0; extra && extra[i] && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* The number after `key=` on the first line of d's log holding `what`;
 * -1 if none. */
static long long log_number(const struct kvtd_proc *d, const char *what, const char *key)
{
	char line[2048], k[64];
	FILE *f = fopen(d->log, "r");
	long long v = -1;

	snprintf(k, sizeof(k), " %s=", key);
	while (f && v < 0 && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, what) ? strstr(line, k) : NULL;

		if (p)
			v = strtoll(p + strlen(k), NULL, 10);
	}
	if (f)
		fclose(f);
	return v;
}

/* A second kvtierd on a running one's socket, with a data directory of its
 * own, exits (the socket is live) and leaves the running daemon's
 * hand-over socket in place: a take-over of the running daemon still
 * works. Before, the second daemon unlinked it, and every later
 * --take-over failed with ENOENT. */
static void second_start_keeps_the_handover_socket(void **state)
{
	const char *extra[] = { "--dram", "32M", "--ssd", "16M", NULL };
	const char *takeover[] = { "--dram", "32M", "--ssd", "16M", "--take-over", NULL, NULL };
	struct kvtd_proc a = { 0 }, b = { 0 };
	char hsock[300], *other = kvt_test_mkdtemp("handover-second");
	struct engine e;
	struct stat st;
	pid_t second;

	(void)state;
	assert_int_equal(kvtd_start(&a, NULL, extra), 0);
	snprintf(hsock, sizeof(hsock), "%s.takeover", a.socket);
	assert_int_equal(stat(hsock, &st), 0);
	assert_int_equal(engine_open(&e, &a, 16), 0);
	save_all(&e);
	engine_close(&e);

	second = spawn(a.socket, other, extra);
	assert_true(second > 0);
	assert_int_not_equal(wait_exit_within(second, 30000), 0);
	assert_int_equal(stat(hsock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));

	/* the running daemon is still reachable for a successor */
	takeover[5] = hsock;
	b.sockdir = strdup(a.sockdir);
	assert_int_equal(kvtd_start(&b, a.dir, takeover), 0);
	assert_int_equal(wait_exit_within(a.pid, 30000), 0);
	a.pid = 0;
	assert_true(kvtd_log_has(&b, "event=takeover.received"));
	assert_int_equal(engine_open(&e, &b, 16), 0);
	assert_int_equal(load_all(&e), 16);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&b, SIGTERM), 0);
	kvtd_cleanup(&b); /* a's directories are b's */
	free(a.dir);
	free(a.sockdir);
	kvt_test_rmdir(other);
	free(other);
}

/* Connect to d's socket, waiting up to 10 s for a daemon that starts over. */
static int engine_open_retry(struct engine *e, const struct kvtd_proc *d, uint32_t n)
{
	for (int t = 0; t < 1000; t++) {
		if (!engine_open(e, d, n))
			return 0;
		kvt_test_sleep_ms(10);
	}
	return -1;
}

/* A successor with another --dram cannot adopt the region: it declines the
 * hand-over before it confirms, and the old daemon takes the region back
 * and serves every block from it. Before, the successor confirmed and
 * started empty: every block only DRAM held was lost (64 of 64 here; 300
 * of 300 going from 256M to 512M). */
static void successor_that_cannot_adopt_declines(void **state)
{
	const char *extra[] = { "--dram", "32M", "--ssd", "16M", NULL };
	const char *bigger[] = { "--dram", "64M", "--ssd", "16M", "--take-over", NULL, NULL };
	struct kvtd_proc a = { 0 };
	char hsock[300];
	struct engine e;
	pid_t b;

	(void)state;
	assert_int_equal(kvtd_start(&a, NULL, extra), 0);
	assert_int_equal(engine_open(&e, &a, 64), 0);
	save_all(&e);
	engine_close(&e);
	snprintf(hsock, sizeof(hsock), "%s.takeover", a.socket);
	bigger[5] = hsock;
	b = spawn(a.socket, a.dir, bigger);
	assert_true(b > 0);
	assert_true(wait_exit_within(b, 60000) > 0); /* it exits, and not 0 */
	assert_true(kvtd_log_has(&a, "event=takeover.declined"));
	/* the old daemon serves again, the same pid, every block from DRAM */
	assert_int_equal(engine_open_retry(&e, &a, 64), 0);
	assert_int_equal(waitpid(a.pid, NULL, WNOHANG), 0);
	assert_true(kvtd_log_has(&a, "event=handover.taken_back"));
	assert_int_equal(load_all(&e), 64);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&a, SIGTERM), 0);
	kvtd_cleanup(&a);
}

/* A clean stop whose write-down meets a full SSD tier stops at its
 * capacity: every block it says it wrote is there at the next start, and
 * the rest is reported dropped, in the log and the stop summary. Before,
 * it evicted its own writes to go on: it logged 200 written here (1,022
 * with --ssd 64M) and the next start held what the tier holds (496). */
static void write_down_stops_at_capacity(void **state)
{
	const char *small[] = { "--dram", "64M", "--ssd", "16M", "--no-warm-restart", NULL };
	struct kvtd_proc d = { 0 };
	struct engine e;
	long long written, left;
	uint32_t n;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, small), 0);
	assert_int_equal(engine_open(&e, &d, 200), 0); /* 25 MiB: more than 16M holds */
	save_all(&e);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	written = log_number(&d, "event=stop.write_down", "blocks");
	left = log_number(&d, "event=stop.write_down", "left");
	assert_true(written > 0);
	assert_int_equal(written + left, 200);
	assert_int_equal(kvtd_start(&d, d.dir, small), 0);
	assert_int_equal(engine_open(&e, &d, 200), 0);
	n = load_all(&e);
	printf("# the write-down wrote %lld, left %lld; the next start loads %u\n", written, left, n);
	assert_int_equal(n, written);
	engine_close(&e);
	/* what it kept and dropped, in its log line and the stop summary */
	assert_int_equal(log_number(&d, "event=stop.write_down", "kept"), written);
	assert_int_equal(log_number(&d, "event=stop.write_down", "dropped"), left);
	assert_true(kvtd_log_has(&d, "not written (the SSD tier is full)"));
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* The system call thread tid of pid is in (-1 if none can be read). */
static long thread_syscall(pid_t pid, pid_t tid)
{
	char path[64], sys[128] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(sys, sizeof(sys), f) || !strncmp(sys, "running", 7))
		sys[0] = 0;
	fclose(f);
	return sys[0] ? atol(sys) : -1;
}

/* Stop the copy worker of pid (kvtierd --workers 1 --no-prefault, metrics
 * off, before any LOAD), as a copy stuck on a device would: ptrace stops
 * one thread, not its process. The worker is the last thread kvtierd makes
 * before it serves; it is stopped once idle (waiting on its queue, a
 * futex). Returns its id. */
static pid_t freeze_worker(pid_t pid)
{
	char path[64];
	struct dirent *e;
	pid_t worker = 0;
	int status;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	while ((e = readdir(dir)))
		if (atoi(e->d_name) > worker)
			worker = (pid_t)atoi(e->d_name);
	closedir(dir);
	assert_true(worker > 0 && worker != pid);
	for (int t = 0; t < 500 && thread_syscall(pid, worker) != SYS_futex; t++)
		kvt_test_sleep_ms(2);
	assert_int_equal(thread_syscall(pid, worker), SYS_futex);
	if (ptrace(PTRACE_SEIZE, worker, 0, 0) || ptrace(PTRACE_INTERRUPT, worker, 0, 0))
		fail_msg("cannot stop thread %d: %s", (int)worker, strerror(errno));
	assert_int_equal(waitpid(worker, &status, __WALL), worker);
	assert_true(WIFSTOPPED(status));
	return worker;
}

/* The exit status of pid within 20 s, reaping its thread `traced` (its
 * tracer must, before the process's own status is reported); -1 if it
 * still runs (then it is killed). */
static int wait_exit_traced(pid_t pid, pid_t traced)
{
	int status;

	for (int t = 0; t < 2000; t++) {
		waitpid(traced, &status, __WALL | WNOHANG);
		if (waitpid(pid, &status, __WALL | WNOHANG) == pid &&
		    (WIFEXITED(status) || WIFSIGNALED(status)))
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		kvt_test_sleep_ms(10);
	}
	kill(pid, SIGKILL);
	waitpid(traced, &status, __WALL);
	while (waitpid(pid, &status, __WALL) == pid && !WIFEXITED(status) && !WIFSIGNALED(status))
		;
	return -1;
}

/* Save e's blocks, stop the copy worker and hand it one more SAVE, which
 * cannot finish: the drain of any stop times out on it. Returns the
 * worker's id. */
static pid_t stick_a_job(struct engine *e, const struct kvtd_proc *d)
{
	uint32_t page = 0;
	uint64_t ticket;
	pid_t worker;

	save_all(e);
	worker = freeze_worker(d->pid);
	engine_page_fill(&e->ch.m, 0, 7);
	assert_int_equal(kvt_client_save(e->ch.c, &e->ch.ns, (uint32_t)e->ch.m.region, NULL,
					 &e->ch.keys[e->n], &page, 1, &ticket), 0);
	(void)ticket; /* it never completes: the drain names it (state=queued) */
	return worker;
}

/* SIGTERM with a job stuck: the drain times out, the daemon names the job
 * and still writes DRAM down before it exits 1; the next start has every
 * block. Before, it exited 1 at once, naming nothing: every block only
 * DRAM held was lost. */
static void a_stuck_drain_still_writes_down(void **state)
{
	const char *stuck[] = { "--dram", "32M", "--ssd", "16M", "--workers", "1",
				"--drain-timeout", "2", "--no-prefault", "--no-gpu", NULL };
	struct kvtd_proc d = { 0 };
	struct engine e;
	pid_t worker;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, stuck), 0);
	assert_int_equal(kvtd_chain_open(&e.ch, &d, "test/handover", PAGES, 17, seed), 0);
	e.n = 16; /* the 17th key is the stuck SAVE's */
	worker = stick_a_job(&e, &d);
	kill(d.pid, SIGTERM);
	assert_int_equal(wait_exit_traced(d.pid, worker), 1);
	d.pid = 0;
	engine_close(&e);
	assert_int_equal(kvtd_start(&d, d.dir, stuck), 0);
	assert_int_equal(engine_open(&e, &d, 16), 0);
	assert_int_equal(load_all(&e), 16);
	engine_close(&e);
	assert_true(kvtd_log_has(&d, "event=server.stuck_job state=queued op=SAVE"));
	assert_true(kvtd_log_has(&d, "event=stop.write_down blocks=16"));
	assert_true(kvtd_log_has(&d, "event=exit.forced reason=drain_timeout stage=drain"));
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* A hand-over whose drain times out on a stuck job still hands the socket
 * and the region over (the old daemon exits 1, naming the job), and the
 * successor serves every block. Before, the old daemon exited at once: the
 * successor got nothing and exited 1 too, and the DRAM tier was lost. */
static void a_stuck_drain_still_hands_over(void **state)
{
	const char *stuck[] = { "--dram", "32M", "--ssd", "16M", "--workers", "1",
				"--drain-timeout", "2", "--no-prefault", "--no-gpu", NULL };
	const char *takeover[] = { "--dram", "32M", "--ssd", "16M", "--no-gpu", "--take-over",
				   NULL, NULL };
	struct kvtd_proc a = { 0 }, b = { 0 };
	char hsock[300];
	struct engine e;
	pid_t worker, succ;

	(void)state;
	assert_int_equal(kvtd_start(&a, NULL, stuck), 0);
	assert_int_equal(kvtd_chain_open(&e.ch, &a, "test/handover", PAGES, 17, seed), 0);
	e.n = 16;
	worker = stick_a_job(&e, &a);
	snprintf(hsock, sizeof(hsock), "%s.takeover", a.socket);
	takeover[6] = hsock;
	succ = spawn(a.socket, a.dir, takeover);
	assert_true(succ > 0);
	assert_int_equal(wait_exit_traced(a.pid, worker), 1);
	a.pid = 0;
	engine_close(&e);
	/* the successor serves the socket, with every block */
	b.pid = succ;
	b.dir = a.dir;
	b.sockdir = a.sockdir;
	snprintf(b.socket, sizeof(b.socket), "%s", a.socket);
	snprintf(b.log, sizeof(b.log), "%s", a.log);
	assert_int_equal(engine_open_retry(&e, &b, 16), 0);
	assert_int_equal(load_all(&e), 16);
	engine_close(&e);
	assert_true(kvtd_log_has(&b, "event=takeover.received"));
	assert_true(kvtd_log_has(&a, "event=server.stuck_job state=queued op=SAVE"));
	assert_true(kvtd_log_has(&a, "event=handover.sent region=yes reason=drain_timeout"));
	assert_int_equal(kvtd_stop(&b, SIGTERM), 0);
	kvtd_cleanup(&b); /* a's directories */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(second_start_keeps_the_handover_socket),
		cmocka_unit_test(successor_that_cannot_adopt_declines),
		cmocka_unit_test(write_down_stops_at_capacity),
		cmocka_unit_test(a_stuck_drain_still_writes_down),
		cmocka_unit_test(a_stuck_drain_still_hands_over),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
