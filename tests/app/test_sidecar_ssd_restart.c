/* SPDX-License-Identifier: Apache-2.0 */
/* A real kvtierd restarted over its SSD tier's directory: blocks on SSD
 * survive a lost or emptied meta file (the salt is in every segment), many
 * graceful restarts with the same blocks lose none and evict none, a removed
 * block stays removed, and files named like segments that are not (a
 * directory, an id that would wrap) neither stop the daemon nor degrade
 * its tier. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
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
#include "stats_checked.h"

#define BLOCKS 128
#define BLOCK_TOKENS 16

static uint64_t seed;
static const char *const extra[] = { "--dram", "8M", "--ssd", "256M", NULL };

/* 128 KiB blocks (kvtd_test_desc_128k), one chain of BLOCKS */
static void engine_open(struct kvtd_chain *e, const struct kvtd_proc *d)
{
	assert_int_equal(kvtd_chain_open(e, d, "test/ssd-restart", BLOCKS, BLOCKS, seed), 0);
}

/* A number from the daemon's stats: tiers.ssd.key. */
static long long ssd_stat(struct kvt_client *c, const char *key)
{
	char *text = NULL;
	json_t *root, *v;
	long long n;

	assert_int_equal(kvt_client_stats(c, &text), 0);
	root = json_loads(text, 0, NULL);
	assert_non_null(root);
	v = json_object_get(json_object_get(json_object_get(root, "tiers"), "ssd"), key);
	assert_non_null(v);
	n = json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
	json_decref(root);
	free(text);
	return n;
}

/* A number of what the SSD tier's last open found: tiers.ssd.recovery.key. */
static long long recovery_stat(struct kvt_client *c, const char *key)
{
	char *text = NULL;
	json_t *root, *v;
	long long n;

	assert_int_equal(kvt_client_stats(c, &text), 0);
	root = json_loads(text, 0, NULL);
	assert_non_null(root);
	v = json_object_get(json_object_get(json_object_get(json_object_get(root, "tiers"), "ssd"),
					    "recovery"), key);
	assert_non_null(v);
	n = json_integer_value(v);
	json_decref(root);
	free(text);
	return n;
}

/* Save every block; return which ones went down to SSD. */
static int save_all(struct kvtd_chain *e, bool *on_ssd)
{
	uint32_t pages[BLOCKS];
	uint8_t tiers[BLOCKS];
	uint64_t ticket;
	int n = 0;

	for (uint32_t i = 0; i < BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&e->m, i, seed + i);
	}
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region, NULL, e->keys, pages,
					 BLOCKS, &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), BLOCKS);
	assert_int_equal(kvt_client_lookup(e->c, &e->ns, e->keys, BLOCKS, tiers), BLOCKS);
	for (int i = 0; i < BLOCKS; i++) {
		on_ssd[i] = tiers[i] == KVT_TIER_SSD;
		n += on_ssd[i];
	}
	return n;
}

/* Block i is there and loads back byte for byte. */
static void assert_loads(struct kvtd_chain *e, uint32_t i)
{
	uint32_t page = i;
	uint64_t ticket;
	int r;

	engine_page_fill(&e->m, page, 0);
	assert_int_equal(kvt_client_load(e->c, &e->ns, (uint32_t)e->m.region, &e->keys[i], &page, 1,
					 &ticket), 0);
	r = kvt_client_wait(e->c, ticket, 60000);
	if (r != 1)
		fail_msg("block %u: load gave %d", i, r);
	assert_int_equal(engine_page_check(&e->m, page, seed + i), 0);
}

static void assert_present(struct kvtd_chain *e, uint32_t i)
{
	if (kvt_client_lookup(e->c, &e->ns, &e->keys[i], 1, NULL) != 1)
		fail_msg("block %u is gone", i);
}

static void meta_path(const struct kvtd_proc *d, char *buf, size_t len)
{
	snprintf(buf, len, "%s/data/ssd/kvtier-ssd.meta", d->dir);
}

static void lost_meta_file_loses_no_block(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	bool on_ssd[BLOCKS];
	char meta[600];
	int n;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	engine_open(&e, &d);
	n = save_all(&e, on_ssd);
	assert_true(n >= BLOCKS / 3);
	kvtd_chain_close(&e);
	meta_path(&d, meta, sizeof(meta));
	for (int round = 0; round < 2; round++) {
		assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
		if (round == 0)
			assert_int_equal(unlink(meta), 0);
		else
			assert_int_equal(truncate(meta, 0), 0);
		assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
		engine_open(&e, &d);
		for (uint32_t i = 0; i < BLOCKS; i++)
			if (on_ssd[i])
				assert_present(&e, i);
		assert_int_equal(ssd_stat(e.c, "evictions"), 0);
		assert_true(recovery_stat(e.c, "recovered") >= n);
		assert_int_equal(recovery_stat(e.c, "quarantined"), 0);
		kvtd_chain_close(&e);
		assert_true(kvtd_log_has(&d, "event=ssd.meta_rebuilt"));
	}
	engine_open(&e, &d);
	for (uint32_t i = 0; i < BLOCKS; i++)
		if (on_ssd[i])
			assert_loads(&e, i);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* Save n fresh blocks (keys from tag) from engine pages 0..n-1 as their own
 * chain; remove them again unless keep is set. */
static void save_fresh(struct kvtd_chain *e, uint64_t tag, uint32_t n, struct kvt_key *keys,
		       bool keep)
{
	uint32_t tokens[BLOCKS * BLOCK_TOKENS], pages[BLOCKS];
	uint64_t s = (seed ^ tag) | 1, ticket;

	assert_true(n <= BLOCKS);
	for (uint32_t i = 0; i < n * BLOCK_TOKENS; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&e->ns, NULL, tokens, n * BLOCK_TOKENS, keys, n),
			 (int)n);
	for (uint32_t i = 0; i < n; i++)
		pages[i] = i;
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region, NULL, keys, pages, n,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), (int)n);
	if (!keep)
		assert_int_equal(kvt_client_remove(e->c, &e->ns, keys, n), (int)n);
}

#define ROUNDS 16
#define FRESH 16

/* The issue this guards: every restart sealed the segment being filled, so
 * a tier holding little counted as full after a few restarts and evicted
 * durable blocks. The same blocks through 16 graceful restarts, each round
 * adding a few that stay (pushed down to SSD by more that are removed again)
 * and reading some back: none lost, none evicted, the SSD tier far from
 * full. */
static void graceful_restarts_lose_nothing(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	bool on_ssd[BLOCKS];
	static struct kvt_key fresh[ROUNDS][FRESH], filler[BLOCKS];

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	engine_open(&e, &d);
	assert_true(save_all(&e, on_ssd) >= BLOCKS / 3);
	kvtd_chain_close(&e);
	for (int round = 0; round < ROUNDS; round++) {
		assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
		assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
		engine_open(&e, &d);
		for (uint32_t i = 0; i < BLOCKS; i++)
			if (on_ssd[i])
				assert_present(&e, i);
		for (int r = 0; r < round; r++)
			if (kvt_client_lookup(e.c, &e.ns, fresh[r], FRESH, NULL) != FRESH)
				fail_msg("restart %d: blocks saved in round %d are gone", round, r);
		for (uint32_t i = (uint32_t)round % 8; i < BLOCKS; i += 8)
			if (on_ssd[i])
				assert_loads(&e, i);
		save_fresh(&e, 100 + (uint64_t)round, FRESH, fresh[round], true);
		save_fresh(&e, 1000 + (uint64_t)round, BLOCKS, filler, false);
		if (ssd_stat(e.c, "evictions"))
			fail_msg("restart %d: the SSD tier evicted %lld blocks", round,
				 ssd_stat(e.c, "evictions"));
		assert_false(ssd_stat(e.c, "degraded"));
		assert_true(ssd_stat(e.c, "used_bytes") < 128ll << 20);
		kvtd_chain_close(&e);
	}
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* STATS (and so `kvtier stats`) right after a restart counts the blocks the
 * SSD tier recovered, before any engine said HELLO for their namespace;
 * the first HELLO indexes them. */
static void stats_after_a_restart_count_the_recovered_blocks(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvt_client *c;
	struct kvtd_chain e;
	bool on_ssd[BLOCKS];
	long long on_disk;
	int n;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	engine_open(&e, &d);
	n = save_all(&e, on_ssd);
	assert_true(n >= BLOCKS / 3);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
	c = kvtd_connect(&d, NULL);
	assert_non_null(c);
	/* a clean stop wrote DRAM's blocks down too: at least those seen there */
	on_disk = recovery_stat(c, "recovered");
	assert_true(on_disk >= n);
	if (ssd_stat(c, "blocks") != on_disk)
		fail_msg("tiers.ssd.blocks %lld right after a restart, %lld recovered",
			 ssd_stat(c, "blocks"), on_disk);
	assert_true(ssd_stat(c, "used_bytes") >= on_disk * (128 << 10));
	{
		json_t *root = kvtd_stats(c);

		assert_int_equal(kvtd_stat(root, "store", NULL, "recovered_unattached"), on_disk);
		json_decref(root);
	}
	engine_open(&e, &d);
	{
		json_t *root = kvtd_stats(c);

		assert_int_equal(kvtd_stat(root, "store", NULL, "recovered_unattached"), 0);
		assert_int_equal(kvtd_stat(root, "store", NULL, "blocks"), on_disk);
		json_decref(root);
	}
	assert_int_equal(ssd_stat(c, "blocks"), on_disk);
	kvtd_chain_close(&e);
	kvt_client_close(c);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* A REMOVE is logged in the SSD tier: the block does not come back. */
static void removed_block_stays_removed(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	bool on_ssd[BLOCKS];
	int removed = 0;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	engine_open(&e, &d);
	assert_true(save_all(&e, on_ssd) >= BLOCKS / 3);
	for (uint32_t i = 0; i < BLOCKS; i += 3)
		if (on_ssd[i])
			removed += kvt_client_remove(e.c, &e.ns, &e.keys[i], 1);
	assert_true(removed > 0);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
	engine_open(&e, &d);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		int found;

		if (!on_ssd[i])
			continue;
		found = kvt_client_lookup(e.c, &e.ns, &e.keys[i], 1, NULL);
		if (i % 3 == 0 && found)
			fail_msg("removed block %u came back after a restart", i);
		if (i % 3 && !found)
			fail_msg("block %u is gone", i);
	}
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* A directory and a file with the largest id under segment names: the
 * daemon starts, serves, and its SSD tier works; both are left alone. */
static void files_named_like_segments_do_not_stop_the_daemon(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvtd_chain e;
	bool on_ssd[BLOCKS];
	char p[700];
	struct stat st;
	int fd;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	snprintf(p, sizeof(p), "%s/data/ssd/seg-0000000000000003.kvt", d.dir);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/data/ssd/seg-ffffffffffffffff.kvt", d.dir);
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
	engine_open(&e, &d);
	assert_true(save_all(&e, on_ssd) >= BLOCKS / 3);
	assert_false(ssd_stat(e.c, "degraded"));
	assert_int_equal(recovery_stat(e.c, "foreign"), 2);
	kvtd_chain_close(&e);
	assert_true(kvtd_log_has(&d, "event=ssd.foreign_file"));
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	snprintf(p, sizeof(p), "%s/data/ssd/seg-0000000000000003.kvt", d.dir);
	assert_int_equal(stat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	snprintf(p, sizeof(p), "%s/data/ssd/seg-ffffffffffffffff.kvt", d.dir);
	assert_int_equal(stat(p, &st), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lost_meta_file_loses_no_block),
		cmocka_unit_test(graceful_restarts_lose_nothing),
		cmocka_unit_test(stats_after_a_restart_count_the_recovered_blocks),
		cmocka_unit_test(removed_block_stays_removed),
		cmocka_unit_test(files_named_like_segments_do_not_stop_the_daemon),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
