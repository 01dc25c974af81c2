/* SPDX-License-Identifier: Apache-2.0 */
/* The fault guard: a SIGBUS inside the guarded range (here a page of a
 * file mapped past its end, which is SIGBUS on every kernel, with no huge
 * pages needed) ends the guarded call with -EFAULT and the process goes on,
 * again and again, on several threads; a SIGBUS outside it still ends the
 * process with SIGBUS. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/fault_guard.h"

/* Two pages mapped of a one-page memfd: the second one is SIGBUS. */
struct past_end {
	int fd;
	uint8_t *map;
	size_t pg;
};

static void past_end_open(struct past_end *p)
{
	p->pg = (size_t)sysconf(_SC_PAGESIZE);
	p->fd = memfd_create("test-guard", MFD_CLOEXEC);
	assert_true(p->fd >= 0);
	assert_int_equal(ftruncate(p->fd, (off_t)p->pg), 0);
	p->map = mmap(NULL, 2 * p->pg, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
	assert_true(p->map != MAP_FAILED);
}

static void past_end_close(struct past_end *p)
{
	munmap(p->map, 2 * p->pg);
	close(p->fd);
}

struct copy {
	uint8_t *dst;
	const uint8_t *src;
	size_t len;
	int done;
};

static void copy_fn(void *arg)
{
	struct copy *c = arg;

	memcpy(c->dst, c->src, c->len);
	c->done = 1;
}

static void a_sigbus_in_the_range_is_efault_and_the_process_goes_on(void **state)
{
	struct past_end p;
	uint8_t buf[2 * 4096 * 4];
	struct copy good, bad;

	(void)state;
	/* the test runner sets a SIGBUS handler of its own for each test */
	assert_int_equal(kvt_fault_guard_install(), 0);
	past_end_open(&p);
	assert_true(2 * p.pg <= sizeof(buf));
	memset(p.map, 7, p.pg);
	good = (struct copy){ buf, p.map, p.pg, 0 };
	assert_int_equal(kvt_fault_guard_run(p.map, 2 * p.pg, copy_fn, &good), 0);
	assert_int_equal(good.done, 1);
	assert_int_equal(buf[p.pg - 1], 7);
	for (int i = 0; i < 100; i++) {
		bad = (struct copy){ buf, p.map, 2 * p.pg, 0 };
		assert_int_equal(kvt_fault_guard_run(p.map, 2 * p.pg, copy_fn, &bad), -EFAULT);
		assert_int_equal(bad.done, 0);
		/* a write there too */
		bad = (struct copy){ p.map + p.pg, buf, 16, 0 };
		assert_int_equal(kvt_fault_guard_run(p.map, 2 * p.pg, copy_fn, &bad), -EFAULT);
	}
	good.done = 0;
	assert_int_equal(kvt_fault_guard_run(p.map, 2 * p.pg, copy_fn, &good), 0);
	assert_int_equal(good.done, 1);
	past_end_close(&p);
}

static void *thread_main(void *arg)
{
	struct past_end *p = arg;
	uint8_t buf[2 * 4096];
	long failed = 0;

	for (int i = 0; i < 200; i++) {
		struct copy bad = { buf, p->map + p->pg - 64, 128, 0 };

		failed += kvt_fault_guard_run(p->map, 2 * p->pg, copy_fn, &bad) == -EFAULT;
	}
	return (void *)failed;
}

static void guards_on_several_threads_at_once(void **state)
{
	struct past_end p;
	pthread_t th[4];

	(void)state;
	/* the test runner sets a SIGBUS handler of its own for each test */
	assert_int_equal(kvt_fault_guard_install(), 0);
	past_end_open(&p);
	for (int t = 0; t < 4; t++)
		assert_int_equal(pthread_create(&th[t], NULL, thread_main, &p), 0);
	for (int t = 0; t < 4; t++) {
		void *failed;

		pthread_join(th[t], &failed);
		assert_int_equal((long)failed, 200);
	}
	past_end_close(&p);
}

static void a_sigbus_outside_the_range_still_ends_the_process(void **state)
{
	struct past_end p;
	int status;
	pid_t pid;

	(void)state;
	/* the test runner sets a SIGBUS handler of its own for each test */
	assert_int_equal(kvt_fault_guard_install(), 0);
	past_end_open(&p);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint8_t buf[64];
		struct copy bad = { buf, p.map + p.pg, sizeof(buf), 0 };

		signal(SIGBUS, SIG_DFL); /* not the test runner's */
		if (kvt_fault_guard_install())
			_exit(2);

		/* the guard holds the first page only */
		kvt_fault_guard_run(p.map, p.pg, copy_fn, &bad);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGBUS);
	past_end_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_sigbus_in_the_range_is_efault_and_the_process_goes_on),
		cmocka_unit_test(guards_on_several_threads_at_once),
		cmocka_unit_test(a_sigbus_outside_the_range_still_ends_the_process),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
