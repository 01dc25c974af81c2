/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the device tests: which backend a test program runs on. The same
 * sources build twice — against the host backend (tests/cuda, every machine)
 * and with KVT_TEST_CUDA against the CUDA backend (tests/gpu, skipped where no
 * GPU is). */
#ifndef KVT_TESTS_DEV_TEST_H
#define KVT_TESTS_DEV_TEST_H

#include <errno.h>

#include "helpers.h"
#include "kvtier/device.h"

#ifdef KVT_TEST_CUDA
#define KVT_TEST_BACKEND KVT_DEV_CUDA
#else
#define KVT_TEST_BACKEND KVT_DEV_HOST
#endif

/* Open the backend under test, or skip the program when it is the CUDA one
 * and no GPU is usable. */
static inline struct kvt_dev *dev_test_open(void)
{
	struct kvt_dev_opts o;
	struct kvt_dev *dev = NULL;
	int rc;

	kvt_dev_opts_init(&o, sizeof(o));
	o.backend = KVT_TEST_BACKEND;
	rc = kvt_dev_open(&o, &dev);
	if (rc == -ENODEV)
		kvt_test_skip("KVT_TEST_REQUIRE_GPU", "CUDA backend unavailable: %s", kvt_dev_last_error());
	if (rc) {
		fprintf(stderr, "kvt_dev_open: %d %s\n", rc, kvt_dev_last_error());
		exit(1);
	}
	return dev;
}

/* Skip check done before cmocka starts, so a skip is one clean exit 77. */
static inline void dev_test_require(void)
{
	kvt_dev_close(dev_test_open());
}

#endif
