/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd over a data directory whose file system another writer filled,
 * on a real ext4 image: the daemon still starts and serves, with its SSD
 * tier at what fits (what its segments hold, whose blocks load back) or,
 * with nothing held, with no SSD tier, and says so in its log. Old code
 * exited 2 ("the SSD tier takes 4 MiB to 0 B"): under systemd a restart
 * loop, with DRAM lost too. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "tiers/loopfs.h"
#include "stats_checked.h"

#define BLOCKS 128
#define BLOCK_TOKENS 16

static uint64_t seed;
static struct loopfs fs;

static void engine_open(struct kvtd_chain *e, const struct kvtd_proc *d)
{
	assert_int_equal(kvtd_chain_open(e, d, "test/full-disk", BLOCKS, BLOCKS, seed), 0);
}

/* Save n blocks; returns how many LOOKUP then places on SSD. */
static int save(struct kvtd_chain *e, uint32_t n, uint8_t *tiers)
{
	uint32_t pages[BLOCKS];
	uint64_t ticket;
	int on_ssd = 0;

	for (uint32_t i = 0; i < n; i++) {
		pages[i] = i;
		engine_page_fill(&e->m, i, seed + i);
	}
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region, NULL, e->keys, pages,
					 n, &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), (int)n);
	assert_int_equal(kvt_client_lookup(e->c, &e->ns, e->keys, n, tiers), (int)n);
	for (uint32_t i = 0; i < n; i++)
		on_ssd += tiers[i] == KVT_TIER_SSD;
	return on_ssd;
}

static void assert_loads(struct kvtd_chain *e, uint32_t i)
{
	uint32_t page = i;
	uint64_t ticket;

	engine_page_fill(&e->m, page, 0);
	assert_int_equal(kvt_client_load(e->c, &e->ns, (uint32_t)e->m.region, &e->keys[i], &page, 1,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), 1);
	assert_int_equal(engine_page_check(&e->m, page, seed + i), 0);
}

/* Write a file in dir until the file system has no block left. */
static void fill(const char *dir)
{
	static char buf[1 << 20];
	char path[1200];
	int fd;

	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	memset(buf, 0x5a, sizeof(buf));
	for (size_t chunk = sizeof(buf); chunk >= 4096; chunk /= 4)
		while (write(fd, buf, chunk) == (ssize_t)chunk)
			;
	fsync(fd);
	close(fd);
}

static void a_full_disk_starts_the_daemon_with_what_fits(void **state)
{
	char data[1100], data2[1100];
	const char *args[] = { "--data-dir", data, "--dram", "8M", "--ssd", "40M", NULL };
	struct kvtd_proc d = { 0 };
	uint8_t tiers[BLOCKS];
	struct kvtd_chain e;
	json_t *st;
	long long cap;
	int n;

	(void)state;
	snprintf(data, sizeof(data), "%s/data", fs.mnt);
	snprintf(data2, sizeof(data2), "%s/fresh", fs.mnt);
	assert_int_equal(mkdir(data2, 0750), 0); /* made now: a full disk has no room for it */
	assert_int_equal(kvtd_start(&d, NULL, args), 0);
	engine_open(&e, &d);
	assert_true(save(&e, BLOCKS, tiers) >= BLOCKS / 4);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);

	fill(fs.mnt);
	assert_int_equal(kvtd_start(&d, d.dir, args), 0);
	engine_open(&e, &d);
	st = kvtd_stats(e.c);
	cap = kvtd_stat(st, "tiers", "ssd", "capacity_bytes");
	json_decref(st);
	if (cap < (4 << 20) || cap >= (40 << 20))
		fail_msg("the SSD tier over a full disk has %lld bytes", cap);
	/* what was on SSD is there (the prefix up to the first block that was not) */
	n = kvt_client_lookup(e.c, &e.ns, e.keys, BLOCKS, tiers);
	assert_true(n >= 1);
	for (int i = 0; i < n; i++)
		assert_loads(&e, (uint32_t)i);
	kvtd_chain_close(&e);
	assert_true(kvtd_log_has(&d, "event=ssd.short"));
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);

	/* nothing held and nothing free: DRAM alone serves */
	snprintf(data, sizeof(data), "%s", data2);
	assert_int_equal(kvtd_start(&d, d.dir, args), 0);
	engine_open(&e, &d);
	assert_int_equal(save(&e, 8, tiers), 0);
	st = kvtd_stats(e.c);
	assert_null(json_object_get(json_object_get(st, "tiers"), "ssd"));
	json_decref(st);
	kvtd_chain_close(&e);
	assert_true(kvtd_log_has(&d, "no SSD tier"));
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_full_disk_starts_the_daemon_with_what_fits),
	};
	int rc;

	seed = kvt_test_seed();
	loopfs_setup(&fs, 64);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	loopfs_teardown(&fs);
	return rc;
}
