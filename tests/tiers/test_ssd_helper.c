/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's helper thread (tiers/ssd_helper.h): offered a set of jobs,
 * it takes its share while the caller takes the rest, each job run once; a
 * helper busy with another caller's set leaves a new set to its caller; one
 * job, or no helper, runs on the caller alone; stop joins the thread (the
 * sanitizer build sees any leak). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "tiers/ssd_helper.h"

#define JOBS 64

struct jobs {
	int runs[JOBS];
	unsigned who[JOBS];
	int helper_started; /* a job ran on the helper */
	int release;        /* gates jobs that wait */
	bool wait_for_helper, wait_for_release;
};

/* Waits until *flag is set, at most 10 s; whether it was. */
static bool wait_flag(int *flag)
{
	for (int i = 0; i < 10000; i++) {
		if (__atomic_load_n(flag, __ATOMIC_ACQUIRE))
			return true;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	return false;
}

static void job(void *arg, size_t k, unsigned who)
{
	struct jobs *j = arg;

	__atomic_fetch_add(&j->runs[k], 1, __ATOMIC_RELAXED);
	j->who[k] = who;
	if (who == 1)
		__atomic_store_n(&j->helper_started, 1, __ATOMIC_RELEASE);
	/* the caller's first job holds it until the helper has taken one */
	if (who == 0 && j->wait_for_helper)
		wait_flag(&j->helper_started);
	if (j->wait_for_release)
		wait_flag(&j->release);
}

static void the_helper_takes_its_share(void **state)
{
	struct kvt_ssd_helper *h;
	struct jobs j = { .wait_for_helper = true };
	size_t ran, by_helper = 0;

	(void)state;
	assert_int_equal(kvt_ssd_helper_start(&h), 0);
	for (int round = 0; round < 3; round++) {
		j = (struct jobs){ .wait_for_helper = true };
		ran = kvt_ssd_helper_run(h, JOBS, job, &j);
		by_helper = 0;
		for (int k = 0; k < JOBS; k++) {
			assert_int_equal(j.runs[k], 1);
			by_helper += j.who[k] == 1;
		}
		assert_true(ran >= 1);
		assert_int_equal(ran, by_helper);
	}
	kvt_ssd_helper_stop(h);
}

struct other_run {
	struct kvt_ssd_helper *h;
	struct jobs j;
	size_t ran;
};

static void *other_caller(void *arg)
{
	struct other_run *o = arg;

	o->ran = kvt_ssd_helper_run(o->h, JOBS, job, &o->j);
	return NULL;
}

static void a_busy_helper_leaves_a_new_set_to_its_caller(void **state)
{
	struct other_run o = { .j = { .wait_for_helper = true, .wait_for_release = true } };
	struct jobs mine = { 0 };
	pthread_t t;

	(void)state;
	assert_int_equal(kvt_ssd_helper_start(&o.h), 0);
	assert_int_equal(pthread_create(&t, NULL, other_caller, &o), 0);
	/* the other set is under way on both threads, held there */
	assert_true(wait_flag(&o.j.helper_started));
	assert_int_equal(kvt_ssd_helper_run(o.h, JOBS, job, &mine), 0);
	for (int k = 0; k < JOBS; k++) {
		assert_int_equal(mine.runs[k], 1);
		assert_int_equal(mine.who[k], 0);
	}
	__atomic_store_n(&o.j.release, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (int k = 0; k < JOBS; k++)
		assert_int_equal(o.j.runs[k], 1);
	assert_true(o.ran >= 1);
	kvt_ssd_helper_stop(o.h);
}

static void one_job_or_no_helper_runs_on_the_caller(void **state)
{
	struct kvt_ssd_helper *h;
	struct jobs j = { 0 };

	(void)state;
	assert_int_equal(kvt_ssd_helper_start(&h), 0);
	assert_int_equal(kvt_ssd_helper_run(h, 1, job, &j), 0);
	assert_int_equal(j.runs[0], 1);
	assert_int_equal(j.who[0], 0);
	assert_int_equal(kvt_ssd_helper_run(h, 0, job, &j), 0);
	kvt_ssd_helper_stop(h);
	j = (struct jobs){ 0 };
	assert_int_equal(kvt_ssd_helper_run(NULL, JOBS, job, &j), 0);
	for (int k = 0; k < JOBS; k++)
		assert_int_equal(j.runs[k], 1);
	kvt_ssd_helper_stop(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_helper_takes_its_share),
		cmocka_unit_test(a_busy_helper_leaves_a_new_set_to_its_caller),
		cmocka_unit_test(one_job_or_no_helper_runs_on_the_caller),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
