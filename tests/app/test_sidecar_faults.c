/* SPDX-License-Identifier: Apache-2.0 */
/* Where kvtierd takes its page faults: an engine's registered memory is
 * mapped into the daemon as jobs name its pages, each before the copy that
 * uses it (not one fault per 4 KiB page inside the copies, and never the
 * whole memfd, whose size the engine picks), and the DRAM tier is faulted in
 * ahead of the slots handed out, after the socket answers, not whole. What
 * is mapped is read from the daemon's /proc/PID/smaps. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* The daemon's RssShmem (kB) from /proc/PID/status. */
static uint64_t rss_shmem(pid_t pid)
{
	char path[64], line[256];
	unsigned long kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssShmem: %lu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb << 10;
}

/* A job maps in the pages it copies before copying them, and only those:
 * a SAVE of page 0 and a LOAD into page 1 map in the chunks (64 KiB) that
 * hold their pieces, not the 32 MiB region. */
static void a_registered_region_is_mapped_in_as_jobs_name_its_pages(void **state)
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
	/* the save read 8 pieces of 16 KiB: mapped, in 8 chunks of 64 KiB */
	assert_true(mapped_bytes(d.pid, "memfd:test-engine") >= 8 * 16 * 1024);
	assert_true(mapped_bytes(d.pid, "memfd:test-engine") <= 8 * 64 * 1024);
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, &back, 1,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), 1);
	assert_int_equal(engine_page_check(&e.m, back, 11), 0);
	assert_true(mapped_bytes(d.pid, "memfd:test-engine") <= 8 * 64 * 1024);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* The engine picks its memory's size: an untouched 1 GiB memfd (ftruncate
 * alone) registered, one block saved and loaded back, costs the daemon the
 * pages of that block, not the memfd (before: the first SAVE faulted in
 * all of it, 4.1 GiB of shared memory for a 4 GiB memfd, and a daemon in a
 * 1 GiB memory cgroup was killed). */
static void a_large_untouched_region_costs_the_daemon_only_the_pages_jobs_name(void **state)
{
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--dram", "64M", "--ssd", "0", "--metrics", "off", "--no-gpu",
				NULL };
	struct kvtd_chain e;
	uint32_t page = 4099, back = 8000;
	uint64_t ticket, shm0, grown;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	/* 8192 pages of 16 KiB, 4 layers, K and V: 1 GiB */
	assert_int_equal(kvtd_chain_open(&e, &d, "test/faults", 8192, 1, 7), 0);
	assert_int_equal(e.m.bytes, 1024 * MiB);
	shm0 = rss_shmem(d.pid);
	engine_page_fill(&e.m, page, 13);
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)e.m.region, NULL, e.keys, &page,
					 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), 1);
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, &back, 1,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), 1);
	assert_int_equal(engine_page_check(&e.m, back, 13), 0);
	/* 16 pieces of 16 KiB in 16 chunks of 64 KiB; the DRAM tier (64 MiB)
	 * may fault in as it likes */
	if (mapped_bytes(d.pid, "memfd:test-engine") > 16 * 64 * 1024)
		fail_msg("%llu bytes of the engine's 1 GiB memfd mapped in for two blocks",
			 (unsigned long long)mapped_bytes(d.pid, "memfd:test-engine"));
	grown = rss_shmem(d.pid) - shm0;
	if (grown > 96 * MiB)
		fail_msg("the daemon's shared memory grew by %llu MiB", (unsigned long long)(grown >> 20));
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* Take every huge page no one has reserved: a shared hugetlb mapping
 * reserves its pages at mmap, so none is left for a fault elsewhere.
 * Returns the memfd (the caller closes it, *map, *len) or -errno. */
static int take_free_huge_pages(void **map, size_t *len)
{
	long left = kvt_test_meminfo("HugePages_Free:") - kvt_test_meminfo("HugePages_Rsvd:");
	int fd;

	*map = NULL;
	*len = 0;
	if (left <= 0)
		return memfd_create("test-hog", MFD_CLOEXEC);
	*len = (size_t)left * KVT_CLIENT_HUGE_PAGE_BYTES;
	fd = kvt_client_memfd_create_huge("test-hog", *len, map);
	return fd;
}

/* The engine can punch a hole in its memory (its seals forbid shrinking,
 * not FALLOC_FL_PUNCH_HOLE): in huge pages with none free, a read or write
 * of the hole is SIGBUS. A SAVE from the hole and a LOAD into it fail with
 * an error; the daemon answers, and another engine saves and loads as
 * before (before: kvtierd died of SIGBUS, every engine cut off). */
static void a_hole_punched_in_huge_page_engine_memory_fails_the_job_not_the_daemon(void **state)
{
	struct kvtd_proc d = { 0 };
	const char *extra[] = { "--dram", "64M", "--ssd", "0", "--metrics", "off", "--no-gpu",
				NULL };
	struct kvtd_chain e, other;
	struct engine_mem hm;
	struct kvt_ns_desc desc;
	uint32_t page = 0, back = 1;
	uint64_t ticket;
	void *hog_map;
	size_t hog_len;
	int hog;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	/* after the daemon started, so that its DRAM tier does not take it */
	if (kvt_test_huge_reserve(1) < 0) {
		kvtd_stop(&d, SIGTERM);
		kvtd_cleanup(&d);
		skip();
	}
	assert_int_equal(kvtd_chain_open(&e, &d, "test/faults", 8, 2, 5), 0);
	kvtd_test_desc_128k(&desc, "test/faults");
	/* 8 pages of 16 KiB, 4 layers, K and V: one huge page of 2 MiB */
	assert_int_equal(engine_mem_open_huge(&hm, e.c, &e.ns, &desc, 8), 0);
	engine_page_fill(&hm, page, 17);
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)hm.region, NULL, e.keys, &page, 1,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, WAIT_MS), 1);

	assert_int_equal(fallocate(hm.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
				   (off_t)hm.bytes), 0);
	hog = take_free_huge_pages(&hog_map, &hog_len);
	assert_true(hog >= 0);
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)hm.region, &e.keys[0], &e.keys[1],
					 &page, 1, &ticket), 0);
	assert_true(kvt_client_wait(e.c, ticket, WAIT_MS) < 0);
	if (kvt_client_ping(e.c, "alive", 5))
		fail_msg("kvtierd died of the SAVE from the hole: %s",
			 kvtd_log_has(&d, "SIGBUS") ? "SIGBUS" : "see its log");
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)hm.region, e.keys, &back, 1,
					 &ticket), 0);
	assert_true(kvt_client_wait(e.c, ticket, WAIT_MS) < 0);
	assert_true(kvtd_log_has(&d, "event=save.engine_memory"));
	assert_true(kvtd_log_has(&d, "event=load.engine_memory"));
	if (hog_map)
		munmap(hog_map, hog_len);
	close(hog);

	/* the daemon answers the same engine, and another one works */
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, 2, NULL), 1);
	assert_int_equal(kvtd_chain_open(&other, &d, "test/faults-other", 8, 1, 6), 0);
	engine_page_fill(&other.m, page, 19);
	assert_int_equal(kvt_client_save(other.c, &other.ns, (uint32_t)other.m.region, NULL,
					 other.keys, &page, 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(other.c, ticket, WAIT_MS), 1);
	assert_int_equal(kvt_client_load(other.c, &other.ns, (uint32_t)other.m.region, other.keys,
					 &back, 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(other.c, ticket, WAIT_MS), 1);
	assert_int_equal(engine_page_check(&other.m, back, 19), 0);
	kvtd_chain_close(&other);
	engine_mem_close(&hm);
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
		cmocka_unit_test(a_registered_region_is_mapped_in_as_jobs_name_its_pages),
		cmocka_unit_test(a_large_untouched_region_costs_the_daemon_only_the_pages_jobs_name),
		cmocka_unit_test(the_dram_tier_is_faulted_in_as_it_fills_after_the_socket_answers),
		cmocka_unit_test_teardown(
			a_hole_punched_in_huge_page_engine_memory_fails_the_job_not_the_daemon,
			kvt_test_huge_give_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
