/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench's TCP loopback reference under a storm of signals: a
 * process with a handler installed without SA_RESTART (as engines and
 * profilers install them) sees send and recv fail with EINTR; the
 * measurement retries them and still gives its figure, where it used to
 * drop the row. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <cmocka.h>

#include "bench/bench.h"

static volatile sig_atomic_t ticks;

static void on_alarm(int sig)
{
	(void)sig;
	ticks++;
}

static void a_signal_storm_does_not_fail_the_measurement(void **state)
{
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART */
	struct itimerval every = { .it_interval = { 0, 200 }, .it_value = { 0, 200 } };
	struct itimerval off = { 0 };
	double bw;

	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
	assert_int_equal(setitimer(ITIMER_REAL, &every, NULL), 0);
	bw = kvt_bench_tcp_loopback(256ull << 20, 4);
	setitimer(ITIMER_REAL, &off, NULL);
	signal(SIGALRM, SIG_DFL);
	if (!(bw > 0))
		fail_msg("TCP loopback failed under signals: %s (%d signals)", strerror((int)-bw),
			 (int)ticks);
	assert_true(ticks > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_signal_storm_does_not_fail_the_measurement),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
