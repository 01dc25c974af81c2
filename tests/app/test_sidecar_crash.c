/* SPDX-License-Identifier: Apache-2.0 */
/* Processes dying around a real kvtierd: an engine killed mid-SAVE and
 * mid-LOAD (the daemon finishes or cancels its work, frees what it held and
 * keeps serving), the daemon stopped by SIGTERM with a LOAD in flight (the
 * LOAD completes and is answered), the daemon stopped by SIGTERM while its
 * copy worker is stuck (it exits within the drain timeout anyway), and the
 * daemon killed and restarted (the blocks it had on SSD are still there,
 * byte for byte). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "helpers.h"

#define BLOCKS 48

static uint64_t seed;

/* 2 MiB blocks, so a SAVE or LOAD of BLOCKS of them takes a while. */
static void big_desc(struct kvt_ns_desc *d)
{
	kvtd_test_desc(d, "test/big");
	d->layers = 32;
	d->kv_heads = 8;
	d->head_dim = 128;
	d->block_tokens = 16;
}

static void seq_keys(const struct kvt_client_ns *ns, uint64_t tag, struct kvt_key *keys, int n)
{
	uint32_t tokens[BLOCKS * 16];
	uint64_t s = (seed ^ tag) | 1;

	for (int i = 0; i < n * 16; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(ns, NULL, tokens, (size_t)n * 16, keys, (size_t)n), n);
}

/* A JSON number from the daemon's stats: section.key. */
static long long stat_of(struct kvt_client *c, const char *section, const char *sub,
			 const char *key)
{
	char *text = NULL;
	json_t *root, *o;
	long long v;

	assert_int_equal(kvt_client_stats(c, &text), 0);
	root = json_loads(text, 0, NULL);
	assert_non_null(root);
	o = json_object_get(root, section);
	if (sub)
		o = json_object_get(o, sub);
	v = o && json_object_get(o, key) ? json_integer_value(json_object_get(o, key)) : -1;
	json_decref(root);
	free(text);
	return v;
}

/* Wait (up to 10 s) until the daemon holds only `conns` connections and no
 * jobs. */
static void wait_quiet(struct kvt_client *c, long long conns)
{
	for (int i = 0; i < 500; i++) {
		if (stat_of(c, "server", NULL, "connections_open") == conns &&
		    stat_of(c, "server", NULL, "jobs_in_flight") == 0)
			return;
		usleep(20000);
	}
	fail_msg("the daemon did not clean up after a dead client");
}

/* The child: an engine that starts a SAVE (or a LOAD of blocks it saved) and
 * is killed by its parent as soon as the request is out. */
static void child_engine(const struct kvtd_proc *d, bool load, int ready_fd)
{
	struct kvt_client *c = kvtd_connect(d, NULL);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS];
	uint64_t ticket;

	big_desc(&desc);
	if (!c || kvt_client_hello(c, &desc, &ns) || engine_mem_open(&m, c, &ns, &desc, BLOCKS))
		_exit(2);
	seq_keys(&ns, load ? 2 : 1, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&m, i, seed + i);
	}
	if (load) {
		if (kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages, BLOCKS, &ticket) ||
		    kvt_client_wait(c, ticket, -1) != BLOCKS)
			_exit(3);
		if (kvt_client_load(c, &ns, (uint32_t)m.region, keys, pages, BLOCKS, &ticket))
			_exit(4);
	} else if (kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages, BLOCKS, &ticket)) {
		_exit(5);
	}
	if (write(ready_fd, "r", 1) != 1)
		_exit(6);
	pause();
	_exit(0);
}

static void engine_killed_mid_transfer(bool load)
{
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--dram", "256M", NULL };
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct kvt_key keys[BLOCKS];
	int p[2], status;
	char r;
	pid_t pid;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		child_engine(&d, load, p[1]);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &r, 1), 1);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	close(p[0]);

	/* the daemon lives on, and lets go of everything the engine had */
	c = kvtd_connect(&d, NULL);
	assert_non_null(c);
	assert_int_equal(kvt_client_ping(c, "alive", 5), 0);
	/* HELLO first: a connection that has not said it is closed after 5 s */
	big_desc(&desc);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	wait_quiet(c, 1);
	seq_keys(&ns, load ? 2 : 1, keys, BLOCKS);
	/* whatever was committed before the kill is a whole block; removing
	 * them all must empty the tier: no slot stays reserved or acquired */
	kvt_client_remove(c, &ns, keys, BLOCKS);
	assert_int_equal(stat_of(c, "tiers", "dram", "used_bytes"), 0);
	assert_int_equal(kvt_client_lookup(c, &ns, keys, BLOCKS, NULL), 0);
	kvt_client_close(c);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

static void engine_killed_mid_save(void **state)
{
	engine_killed_mid_transfer(false);
}

static void engine_killed_mid_load(void **state)
{
	engine_killed_mid_transfer(true);
}

struct waiter {
	struct kvt_client *c;
	uint64_t ticket;
	int result;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->result = kvt_client_wait(w->c, w->ticket, -1);
	return NULL;
}

static void sigterm_lets_the_load_in_flight_finish(void **state)
{
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--dram", "256M", "--workers", "1", NULL };
	struct kvt_client *c, *watch;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS], back[BLOCKS];
	struct waiter w = { 0 };
	pthread_t t;
	uint64_t ticket;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	c = kvtd_connect(&d, NULL);
	watch = kvtd_connect(&d, NULL);
	big_desc(&desc);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	/* it only asks STATS, for longer than a connection may go without HELLO */
	assert_int_equal(kvt_client_hello(watch, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, 2 * BLOCKS), 0);
	seq_keys(&ns, 3, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		pages[i] = i;
		back[i] = 2 * BLOCKS - 1 - i;
		engine_page_fill(&m, i, seed * 3 + i);
	}
	assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages, BLOCKS,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), BLOCKS);
	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, keys, back, BLOCKS, &w.ticket), 0);
	w.c = c;
	assert_int_equal(pthread_create(&t, NULL, wait_thread, &w), 0);
	/* stop the daemon once the WAIT is parked (or already answered) */
	for (int i = 0; i < 500 && stat_of(watch, "server", NULL, "waits_parked") < 1 &&
			stat_of(watch, "server", NULL, "jobs_in_flight") > 0; i++)
		usleep(1000);
	kill(d.pid, SIGTERM);
	pthread_join(t, NULL);
	assert_int_equal(w.result, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		assert_int_equal(engine_page_check(&m, back[i], seed * 3 + i), 0);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	engine_mem_close(&m);
	kvt_client_close(watch);
	kvt_client_close(c);
	kvtd_cleanup(&d);
}

#define MAX_FROZEN 64

/* Stop every thread of pid but the one taking signals (it waits in
 * rt_sigtimedwait) and, unless `main_too`, the main one, as a copy (or a
 * close) stuck on a device would: ptrace stops one thread, not its process.
 * Returns how many, their ids in tids. */
static int freeze_threads(pid_t pid, bool main_too, pid_t *tids)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	while ((e = readdir(dir)) && n < MAX_FROZEN) {
		pid_t tid = (pid_t)atoi(e->d_name);
		char sys[128] = "";
		FILE *f;
		int status;

		if (tid <= 0 || (tid == pid && !main_too))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
		f = fopen(path, "r");
		if (f) {
			if (!fgets(sys, sizeof(sys), f))
				sys[0] = 0;
			fclose(f);
		}
		if (atol(sys) == SYS_rt_sigtimedwait)
			continue;
		if (ptrace(PTRACE_SEIZE, tid, 0, 0) || ptrace(PTRACE_INTERRUPT, tid, 0, 0))
			fail_msg("cannot stop thread %d: %s", (int)tid, strerror(errno));
		assert_int_equal(waitpid(tid, &status, __WALL), tid);
		assert_true(WIFSTOPPED(status));
		tids[n++] = tid;
	}
	closedir(dir);
	return n;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait up to `limit` seconds for pid to exit, reaping the stopped threads
 * (their tracer must, before the process's own status is reported). Returns
 * the exit status, or -1 (then pid is killed). */
static int wait_exit(pid_t pid, const pid_t *tids, int n, double limit)
{
	double end = now_s() + limit;
	int status;

	while (now_s() < end) {
		for (int i = 0; i < n; i++)
			if (tids[i] != pid)
				waitpid(tids[i], &status, __WALL | WNOHANG);
		if (waitpid(pid, &status, __WALL | WNOHANG) == pid &&
		    (WIFEXITED(status) || WIFSIGNALED(status)))
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		usleep(5000);
	}
	kill(pid, SIGKILL);
	for (int i = 0; i < n; i++)
		if (tids[i] != pid)
			waitpid(tids[i], &status, __WALL);
	while (waitpid(pid, &status, __WALL) == pid && !WIFEXITED(status) && !WIFSIGNALED(status))
		;
	return -1;
}

/* A copy that never ends (its thread stopped, as on a GPU or disk that does
 * not answer) does not keep the daemon alive: SIGTERM ends it within the
 * drain timeout, with status 1 and the reason logged. With the event loop
 * stopped too (main_too), the watchdog of the signal thread ends it. */
static void sigterm_ends_a_stuck_daemon(bool main_too)
{
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--workers", "1", "--drain-timeout", "2", "--no-prefault",
				"--no-gpu", NULL };
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key key;
	uint32_t page = 0;
	pid_t tids[MAX_FROZEN];
	uint64_t ticket;
	double t0, took;
	int n, status;
	char *log;
	FILE *f;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	c = kvtd_connect(&d, NULL);
	assert_non_null(c);
	kvtd_test_desc(&desc, NULL);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, 4), 0);
	seq_keys(&ns, 7, &key, 1);

	n = freeze_threads(d.pid, main_too, tids);
	assert_true(n >= 1 + main_too); /* the copy worker at least */
	/* the loop answers with a ticket; the job waits for the stopped worker */
	if (!main_too)
		assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, &key, &page, 1,
						 &ticket), 0);
	t0 = now_s();
	kill(d.pid, SIGTERM);
	status = wait_exit(d.pid, tids, n, 12);
	took = now_s() - t0;
	d.pid = 0;
	if (status < 0)
		fail_msg("kvtierd still ran 12 s after SIGTERM with a drain timeout of 2 s");
	assert_int_equal(status, 1);
	/* 2 s, plus what a loaded test machine adds to a process exit (ASan's
	 * included); the default drain timeout (30 s) or a hang would take 12 s */
	if (took > 6.0)
		fail_msg("kvtierd took %.2f s to exit with a drain timeout of 2 s", took);
	f = fopen(d.log, "r");
	assert_non_null(f);
	log = calloc(1, 1 << 20);
	assert_true(fread(log, 1, (1 << 20) - 1, f) > 0);
	fclose(f);
	assert_non_null(strstr(log, main_too ? "event=exit.forced reason=drain_timeout stage=watchdog"
					     : "event=exit.forced reason=drain_timeout stage=drain"));
	free(log);
	kvt_client_close(c);
	engine_mem_close(&m);
	kvtd_cleanup(&d);
}

static void sigterm_ends_the_daemon_when_a_copy_is_stuck(void **state)
{
	sigterm_ends_a_stuck_daemon(false);
}

static void sigterm_ends_the_daemon_when_its_loop_is_stuck(void **state)
{
	sigterm_ends_a_stuck_daemon(true);
}

static void blocks_on_ssd_survive_a_daemon_crash(void **state)
{
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--dram", "16M", "--ssd", "256M", NULL };
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[BLOCKS];
	uint8_t tiers[BLOCKS];
	uint32_t pages[BLOCKS];
	uint64_t ticket;
	bool was_on_ssd[BLOCKS];
	int on_ssd = 0;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	c = kvtd_connect(&d, NULL);
	assert_true(stat_of(c, "tiers", "ssd", "capacity_bytes") > 0);
	big_desc(&desc);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, BLOCKS), 0);
	seq_keys(&ns, 4, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&m, i, seed * 5 + i);
	}
	/* 48 blocks of 2 MiB through a 16 MiB DRAM tier: most go down to SSD */
	for (uint32_t i = 0; i < BLOCKS; i += 4) {
		assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, i ? &keys[i - 1] : NULL,
						 keys + i, pages + i, 4, &ticket), 0);
		assert_true(kvt_client_wait(c, ticket, -1) >= 0);
	}
	kvt_client_lookup(c, &ns, keys, BLOCKS, tiers);
	for (int i = 0; i < BLOCKS; i++) {
		was_on_ssd[i] = tiers[i] == KVT_TIER_SSD;
		on_ssd += was_on_ssd[i];
	}
	assert_true(on_ssd > 0);
	kvt_client_close(c);
	assert_int_equal(kvtd_stop(&d, SIGKILL), 128 + SIGKILL);

	assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
	c = kvtd_connect(&d, NULL);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	engine_mem_close(&m);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, BLOCKS), 0);
	/* every block that was on SSD is still there (asked one by one: a prefix
	 * lookup stops at a block that was only in DRAM and died with it)... */
	for (int i = 0; i < BLOCKS; i++) {
		uint8_t tier = 0;

		if (was_on_ssd[i] && (kvt_client_lookup(c, &ns, &keys[i], 1, &tier) != 1 ||
				      tier != KVT_TIER_SSD))
			fail_msg("block %d was on SSD before the crash and is gone after it", i);
	}
	/* ...and comes back byte for byte, more of them than the DRAM tier
	 * holds: promotions make room by demoting the ones read before */
	for (int i = 0; i < BLOCKS; i++) {
		uint64_t t;
		uint32_t page = (uint32_t)i;

		if (!was_on_ssd[i])
			continue;
		engine_page_fill(&m, page, 0);
		assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, &keys[i], &page, 1, &t), 0);
		assert_int_equal(kvt_client_wait(c, t, -1), 1);
		assert_int_equal(engine_page_check(&m, page, seed * 5 + (uint64_t)i), 0);
	}
	kvt_client_close(c);
	engine_mem_close(&m);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(engine_killed_mid_save),
		cmocka_unit_test(engine_killed_mid_load),
		cmocka_unit_test(sigterm_lets_the_load_in_flight_finish),
		cmocka_unit_test(sigterm_ends_the_daemon_when_a_copy_is_stuck),
		cmocka_unit_test(sigterm_ends_the_daemon_when_its_loop_is_stuck),
		cmocka_unit_test(blocks_on_ssd_survive_a_daemon_crash),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
