/* SPDX-License-Identifier: Apache-2.0 */
/* Where kvtierd takes its page faults: an engine's registered memory is
 * mapped whole into the daemon before the first copy that uses it (not one
 * fault per 4 KiB page inside the copies), and the DRAM tier is faulted in
 * ahead of the slots handed out, after the socket answers, not whole. What
 * is mapped is read from the daemon's /proc/PID/smaps. */
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

/* Until the log says the background prefault got somewhere. */
static void wait_prefault_step(const struct kvtd_proc *d)
{
	for (int i = 0; i < WAIT_MS / 10 && !kvtd_log_has(d, "event=dram.prefault"); i++)
		usleep(10000);
	assert_true(kvtd_log_has(d, "event=dram.prefault"));
}

static void the_dram_tier_is_faulted_in_as_it_fills_after_the_socket_answers(void **state)
{
	const uint64_t dram = 1024 * MiB, lead = 64 * MiB, slab = 64 * MiB;
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--dram", "1G", "--ssd", "0", "--metrics", "off", "--no-gpu",
				"--log-level", "debug", NULL };
	uint32_t pages[64];
	struct kvtd_chain e;
	uint64_t ticket;

	/* kvtd_start returns once the socket accepts: by then at most the
	 * lead ahead of an empty tier is mapped */
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	assert_true(mapped_bytes(d.pid, "memfd:kvtier-dram") <= lead + slab);
	wait_prefault_step(&d);
	/* 64 blocks of 128 KiB: 8 MiB stored, in the first slab */
	assert_int_equal(kvtd_chain_open(&e, &d, "test/faults", 64, 64, 9), 0);
	for (uint32_t i = 0; i < 64; i++) {
		pages[i] = i;
		engine_page_fill(&e.m, i, 100 + i);
	}
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)e.m.region, NULL, e.keys, pages,
					 64, &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), 64);
	/* what the tier holds is mapped; the rest of its capacity is not */
	assert_true(mapped_bytes(d.pid, "memfd:kvtier-dram") >= 8 * MiB);
	assert_true(mapped_bytes(d.pid, "memfd:kvtier-dram") <= slab + lead + slab);
	assert_true(mapped_bytes(d.pid, "memfd:kvtier-dram") < dram / 2);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_registered_region_is_mapped_in_before_its_first_copy),
		cmocka_unit_test(the_dram_tier_is_faulted_in_as_it_fills_after_the_socket_answers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
