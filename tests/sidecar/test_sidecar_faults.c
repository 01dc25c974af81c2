/* SPDX-License-Identifier: Apache-2.0 */
/* Where kvtierd takes its page faults: an engine's registered memory is
 * mapped whole into the daemon before the first copy that uses it (not one
 * fault per 4 KiB page inside the copies). What is mapped is read from the
 * daemon's /proc/PID/smaps. */
#include <setjmp.h>
#include <stdarg.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"

#define MiB (1ull << 20)
#define WAIT_MS 30000

/* Bytes of the daemon's mappings whose name holds `name` that are mapped
 * in (the sum of their Rss). */
static uint64_t mapped_bytes(pid_t pid, const char *name)
{
	char path[64], line[512];
	unsigned long start, end, kb;
	uint64_t sum = 0;
	bool inside = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		/* a mapping's first line: "start-end perms offset dev inode [name]" */
		if (sscanf(line, "%lx-%lx ", &start, &end) == 2) {
			inside = strstr(line, name) != NULL;
			continue;
		}
		if (inside && sscanf(line, "Rss: %lu kB", &kb) == 1)
			sum += (uint64_t)kb << 10;
	}
	fclose(f);
	return sum;
}

static void a_registered_region_is_mapped_in_before_its_first_copy(void **state)
{
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--dram", "64M", "--ssd", "0", "--metrics", "off", "--no-gpu",
				NULL };
	struct kvtd_chain e;
	uint32_t page = 0, back = 1;
	uint64_t ticket, region;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	/* 256 pages of 16 KiB, 4 layers, K and V: 32 MiB */
	assert_int_equal(kvtd_chain_open(&e, &d, "test/faults", 256, 1, 7), 0);
	region = e.m.bytes;
	assert_true(mapped_bytes(d.pid, "memfd:test-engine") < region);
	engine_page_fill(&e.m, page, 11);
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)e.m.region, NULL, e.keys, &page,
					 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), 1);
	/* the save read 8 pages of 16 KiB; the daemon has all of them mapped */
	assert_true(mapped_bytes(d.pid, "memfd:test-engine") >= region);
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, &back, 1,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), 1);
	assert_int_equal(engine_page_check(&e.m, back, 11), 0);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_registered_region_is_mapped_in_before_its_first_copy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
