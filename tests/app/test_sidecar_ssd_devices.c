/* SPDX-License-Identifier: Apache-2.0 */
/* A real kvtierd whose SSD tier spans three directories (--ssd-dir): the
 * blocks a SAVE pushes to SSD spread over all three, STATS, /metrics and
 * /readyz show each device, the blocks survive a restart with every
 * directory (each device recovers its own), and a restart with one
 * directory gone starts with the others, names the missing one, and loses
 * only that device's blocks, which come back once it is there again; a
 * second daemon over the same directories does not start. No wrong byte is
 * ever loaded. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "metrics_checked.h"
#include "ssd_devices.h"

#define DEVS 3

static uint64_t seed;
static const struct kvtd_stat_path settled[] = {
	{ "tiers", "ssd", "blocks" }, { "tiers", "dram", "blocks" },
};

struct fix {
	struct kvtd_proc d;
	char *dir[DEVS];
	char arg[DEVS][4200];
	const char *extra[2 * DEVS + 8];
};

static void fix_init(struct fix *f)
{
	size_t n = 0;

	memset(f, 0, sizeof(*f));
	for (int k = 0; k < DEVS; k++) {
		char tag[32];

		snprintf(tag, sizeof(tag), "ssddev%d", k);
		f->dir[k] = kvt_test_mkdtemp(tag);
		assert_non_null(f->dir[k]);
		snprintf(f->arg[k], sizeof(f->arg[k]), "%s:64M", f->dir[k]);
		f->extra[n++] = "--ssd-dir";
		f->extra[n++] = f->arg[k];
	}
	f->extra[n++] = "--dram";
	f->extra[n++] = "8M";
	f->extra[n++] = "--metrics";
	f->extra[n++] = "127.0.0.1:0";
	f->extra[n] = NULL;
}

static void fix_cleanup(struct fix *f)
{
	kvtd_cleanup(&f->d);
	for (int k = 0; k < DEVS; k++) {
		kvt_test_rmdir(f->dir[k]);
		free(f->dir[k]);
	}
}

static void chain_open(struct kvtd_chain *e, const struct fix *f)
{
	assert_int_equal(kvtd_chain_open(e, &f->d, "test/ssd-devices", DEV_BLOCKS, DEV_BLOCKS, seed),
			 0);
}

/* The metrics port of the daemon's start number `start` (1: the first;
 * each restart appends its summary to the same log): -1 if none in 2 s. */
static int metrics_port(const struct fix *f, int start)
{
	char line[512];

	for (int i = 0; i < 200; i++) {
		FILE *fp = fopen(f->d.log, "r");
		int port = -1, seen = 0;

		while (fp && fgets(line, sizeof(line), fp))
			if (sscanf(line, " metrics http://127.0.0.1:%d/metrics", &port) == 1 &&
			    ++seen == start)
				break;
		if (fp)
			fclose(fp);
		if (seen == start)
			return port;
		usleep(10000);
	}
	return -1;
}

/* The answer to GET path from the metrics listener of start number start. */
static char *http_get(const struct fix *f, int start, const char *path)
{
	int port = metrics_port(f, start);
	char req[128];

	assert_true(port > 0);
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	return kvtd_http_checked(port, req);
}

static void blocks_spread_and_survive_a_restart(void **state)
{
	struct fix f;
	struct kvtd_chain e;
	long long blocks[DEVS], sum = 0, on_ssd;
	char *m, series[256], nossd[4400];
	struct stat sb;
	json_t *root;

	(void)state;
	fix_init(&f);
	assert_int_equal(kvtd_start(&f.d, NULL, f.extra), 0);
	chain_open(&e, &f);
	dev_save_all(&e, seed);
	root = kvtd_settled_stats(e.c, settled, 2); /* the demoter is done */
	on_ssd = kvtd_stat(root, "tiers", "ssd", "blocks");
	json_decref(root);
	assert_true(on_ssd >= DEV_BLOCKS / 3);
	m = http_get(&f, 1, "/metrics");
	kvtd_metrics_families_once(m);
	for (int k = 0; k < DEVS; k++) {
		blocks[k] = dev_stat(e.c, (size_t)k, "blocks");
		sum += blocks[k];
		printf("device %d: %lld blocks\n", k, blocks[k]);
		/* a third each, give or take the batches' ends */
		assert_true(blocks[k] >= on_ssd / DEVS - 8);
		assert_true(dev_state_is(e.c, (size_t)k, "ok"));
		snprintf(series, sizeof(series), "kvtier_ssd_device_capacity_bytes{device=\"%d\"}", k);
		assert_true(kvtd_metric(m, series) == 64.0 * 1024 * 1024);
		snprintf(series, sizeof(series), "kvtier_ssd_device_state{device=\"%d\",state=\"ok\"}", k);
		assert_true(kvtd_metric(m, series) == 1);
	}
	assert_true(kvtd_metric(m, "kvtier_ssd_devices") == DEVS);
	/* what needs no credentials names no directory */
	assert_null(strstr(m, f.dir[0]));
	free(m);
	m = http_get(&f, 1, "/stats");
	assert_null(strstr(m, f.dir[0]));
	free(m);
	assert_true(sum >= on_ssd - 2 && sum <= on_ssd + 2);
	/* STATS over the socket names each device's directory */
	root = kvtd_stats(e.c);
	for (int k = 0; k < DEVS; k++)
		assert_string_equal(json_string_value(json_object_get(json_array_get(
			json_object_get(json_object_get(json_object_get(root, "tiers"), "ssd"),
					"devices"), (size_t)k), "path")), f.dir[k]);
	json_decref(root);
	assert_int_equal(dev_load_present(&e, seed), DEV_BLOCKS);
	kvtd_chain_close(&e);
	/* --ssd-dir replaces DATA_DIR/ssd */
	snprintf(nossd, sizeof(nossd), "%s/data/ssd", f.d.dir);
	assert_int_not_equal(stat(nossd, &sb), 0);

	assert_int_equal(kvtd_stop(&f.d, SIGTERM), 0);
	assert_int_equal(kvtd_start(&f.d, f.d.dir, f.extra), 0);
	chain_open(&e, &f);
	sum = 0;
	for (int k = 0; k < DEVS; k++) {
		long long rec = dev_stat(e.c, (size_t)k, "recovered");

		assert_true(rec >= blocks[k]);
		sum += rec;
	}
	/* the stop wrote the rest down (a block freed on one device and written
	 * to another meanwhile is found on both: the store keeps one) */
	assert_true(sum >= DEV_BLOCKS);
	assert_int_equal(dev_load_present(&e, seed), DEV_BLOCKS);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&f.d, SIGTERM), 0);
	fix_cleanup(&f);
}

static void a_missing_directory_costs_only_its_blocks(void **state)
{
	struct fix f;
	struct kvtd_chain e;
	long long rec[DEVS], loaded;
	char moved[4400], *a;

	(void)state;
	fix_init(&f);
	assert_int_equal(kvtd_start(&f.d, NULL, f.extra), 0);
	chain_open(&e, &f);
	dev_save_all(&e, seed);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&f.d, SIGTERM), 0);

	snprintf(moved, sizeof(moved), "%s.away", f.dir[1]);
	assert_int_equal(rename(f.dir[1], moved), 0);
	assert_int_equal(kvtd_start(&f.d, f.d.dir, f.extra), 0);
	assert_true(kvtd_log_has(&f.d, "event=ssd.device_missing device=1"));
	chain_open(&e, &f);
	assert_true(dev_state_is(e.c, 1, "missing"));
	assert_true(dev_state_is(e.c, 0, "ok"));
	rec[0] = dev_stat(e.c, 0, "recovered");
	rec[2] = dev_stat(e.c, 2, "recovered");
	assert_true(rec[0] > 0 && rec[2] > 0);
	/* the rest load whole (a block may have a copy on two devices, so
	 * loaded can be less than rec[0] + rec[2]) */
	loaded = dev_load_present(&e, seed);
	assert_true(loaded > 0 && loaded <= rec[0] + rec[2] && loaded < DEV_BLOCKS);
	/* ready, and saying which device is missing */
	a = http_get(&f, 2, "/readyz");
	if (strncmp(a, "HTTP/1.1 200 ", 13) || !strstr(a, "ssd device 1") || !strstr(a, "missing"))
		fail_msg("readyz with a device missing:\n%s", a);
	free(a);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&f.d, SIGTERM), 0);

	/* back in place: every block again */
	assert_int_equal(rename(moved, f.dir[1]), 0);
	assert_int_equal(kvtd_start(&f.d, f.d.dir, f.extra), 0);
	chain_open(&e, &f);
	assert_true(dev_state_is(e.c, 1, "ok"));
	rec[1] = dev_stat(e.c, 1, "recovered");
	/* what was lost is no more than device 1 holds: only its blocks */
	assert_true(rec[1] > 0 && DEV_BLOCKS - loaded <= rec[1]);
	assert_int_equal(dev_load_present(&e, seed), DEV_BLOCKS);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&f.d, SIGTERM), 0);
	fix_cleanup(&f);
}

/* A second daemon over the same drives is a configuration to fix, not a
 * failed drive: it does not start (nor start without them). */
static void directories_another_daemon_holds_are_refused(void **state)
{
	struct fix f;
	struct kvtd_proc other = { 0 };

	(void)state;
	fix_init(&f);
	assert_int_equal(kvtd_start(&f.d, NULL, f.extra), 0);
	assert_int_not_equal(kvtd_start(&other, NULL, f.extra), 0);
	assert_true(kvtd_log_has(&other, "event=ssd.device_busy device=0"));
	kvtd_cleanup(&other);
	assert_int_equal(kvtd_stop(&f.d, SIGTERM), 0);
	fix_cleanup(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(blocks_spread_and_survive_a_restart),
		cmocka_unit_test(a_missing_directory_costs_only_its_blocks),
		cmocka_unit_test(directories_another_daemon_holds_are_refused),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
