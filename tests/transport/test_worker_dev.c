/* SPDX-License-Identifier: Apache-2.0 */
/* A copy worker's device slots (transport/worker_dev.h): after the CUDA
 * backend's streams are dropped for an error, each backend finds its own
 * slot again. The old choice took the first slot that matched or was free:
 * with CUDA in slot 0, the host backend's next job took the freed slot 0
 * (a second set of host streams, the first leaked) and every later CUDA job
 * found no slot (-ENODEV) for good. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "transport/worker_dev.h"

/* Two backends; their addresses are all the slots look at. */
static char cuda_backend, host_backend;
#define CUDA ((struct kvt_dev *)&cuda_backend)
#define HOST ((struct kvt_dev *)&host_backend)

static struct worker_dev *take(struct worker_dev *devs, struct kvt_dev *dev)
{
	struct worker_dev *wd = worker_dev_slot(devs, 2, dev);

	if (wd)
		wd->dev = dev;
	return wd;
}

static void each_backend_keeps_its_slot_after_a_drop(void **state)
{
	struct worker_dev devs[2];

	(void)state;
	memset(devs, 0, sizeof(devs));
	assert_ptr_equal(take(devs, CUDA), &devs[0]);
	assert_ptr_equal(take(devs, HOST), &devs[1]);
	memset(&devs[0], 0, sizeof(devs[0])); /* the CUDA error: its streams dropped */
	assert_ptr_equal(take(devs, HOST), &devs[1]);
	assert_ptr_equal(take(devs, CUDA), &devs[0]);
	assert_ptr_equal(take(devs, CUDA), &devs[0]);
	assert_ptr_equal(take(devs, HOST), &devs[1]);
}

static void a_third_backend_finds_no_slot(void **state)
{
	static char third_backend;
	struct worker_dev devs[2];

	(void)state;
	memset(devs, 0, sizeof(devs));
	take(devs, CUDA);
	take(devs, HOST);
	assert_null(worker_dev_slot(devs, 2, (struct kvt_dev *)&third_backend));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(each_backend_keeps_its_slot_after_a_drop),
		cmocka_unit_test(a_third_backend_finds_no_slot),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
