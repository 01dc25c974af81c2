/* SPDX-License-Identifier: Apache-2.0 */
/* A drive of an SSD tier over three directories fails under a running
 * kvtierd, for real: the middle directory is an ext4 file system on a
 * device-mapper target over a loop device, and mid-run the target's table
 * is swapped for dm-error, so every I/O to it fails as a dead drive's does.
 * Where device-mapper is not there (no /dev/mapper/control, no dmsetup: a
 * container), the same file system on a plain loop device is shut down
 * instead (FS_IOC_SHUTDOWN: every later I/O there fails with EIO). Either
 * way: no wrong byte is loaded, the blocks lost are only the failed
 * device's, the device is taken out (STATS, /metrics, /readyz, the log),
 * the others keep serving and take the new blocks. Needs root, losetup,
 * mkfs.ext4 and mount; skips with the reason otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "metrics_checked.h"
#include "ssd_devices.h"

#ifndef FS_IOC_SHUTDOWN
#define FS_IOC_SHUTDOWN _IOR('X', 125, uint32_t)
#endif
#define SHUTDOWN_NOLOGFLUSH 2u

#define DEVS 3
#define IMG_MIB 96

static uint64_t seed;
static const struct kvtd_stat_path settled[] = {
	{ "tiers", "ssd", "blocks" }, { "tiers", "dram", "blocks" },
};

/* The failing drive: an image on a loop device, device-mapper over it when
 * there is device-mapper, ext4 on top, mounted. */
struct drive {
	char *base;
	char img[1024], mnt[1024], loop[64], dm[64], dev[128], dir[1100];
	bool mounted;
};

static int sh(const char *cmd)
{
	return system(cmd) == 0 ? 0 : -1;
}

static bool have_dm(void)
{
	return access("/dev/mapper/control", R_OK | W_OK) == 0 &&
	       sh("dmsetup version >/dev/null 2>&1") == 0;
}

static void drive_teardown(struct drive *dr)
{
	char cmd[2048];

	if (dr->mounted) {
		for (int i = 0; i < 100 && umount(dr->mnt) && errno == EBUSY; i++)
			usleep(50000);
		umount2(dr->mnt, MNT_DETACH);
	}
	if (dr->dm[0]) {
		snprintf(cmd, sizeof(cmd), "dmsetup remove --retry -f %s >/dev/null 2>&1", dr->dm);
		sh(cmd);
	}
	if (dr->loop[0]) {
		snprintf(cmd, sizeof(cmd), "losetup -d %s", dr->loop);
		sh(cmd);
	}
	kvt_test_rmdir(dr->base);
	free(dr->base);
}

static void drive_skip(struct drive *dr, const char *why)
{
	drive_teardown(dr);
	kvt_test_skip(NULL, "%s", why);
}

static void drive_setup(struct drive *dr)
{
	char cmd[4096];
	FILE *p;

	memset(dr, 0, sizeof(*dr));
	if (geteuid())
		kvt_test_skip(NULL, "needs root (loop device, mount)");
	dr->base = kvt_test_mkdtemp("ssd_fail");
	assert_non_null(dr->base);
	snprintf(dr->img, sizeof(dr->img), "%s/drive.img", dr->base);
	snprintf(dr->mnt, sizeof(dr->mnt), "%s/mnt", dr->base);
	snprintf(cmd, sizeof(cmd), "truncate -s %uM %s && mkdir %s", IMG_MIB, dr->img, dr->mnt);
	if (sh(cmd))
		drive_skip(dr, "cannot make the drive's image");
	snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", dr->img);
	p = popen(cmd, "r");
	if (!p || !fgets(dr->loop, sizeof(dr->loop), p)) {
		if (p)
			pclose(p);
		dr->loop[0] = 0;
		drive_skip(dr, "no loop device (losetup)");
	}
	pclose(p);
	dr->loop[strcspn(dr->loop, "\n")] = 0;
	snprintf(dr->dev, sizeof(dr->dev), "%s", dr->loop);
	if (have_dm()) {
		snprintf(dr->dm, sizeof(dr->dm), "kvtier-test-%d", (int)getpid());
		snprintf(cmd, sizeof(cmd), "dmsetup create %s --table \"0 %u linear %s 0\"", dr->dm,
			 IMG_MIB * 2048, dr->loop);
		if (sh(cmd)) {
			dr->dm[0] = 0;
			drive_skip(dr, "dmsetup create failed");
		}
		snprintf(dr->dev, sizeof(dr->dev), "/dev/mapper/%s", dr->dm);
	}
	snprintf(cmd, sizeof(cmd), "mkfs.ext4 -q -F %s >/dev/null 2>&1", dr->dev);
	if (sh(cmd))
		drive_skip(dr, "mkfs.ext4 failed");
	if (mount(dr->dev, dr->mnt, "ext4", 0, NULL))
		drive_skip(dr, "cannot mount ext4 on a loop device");
	dr->mounted = true;
	snprintf(dr->dir, sizeof(dr->dir), "%s/ssd", dr->mnt);
	assert_int_equal(mkdir(dr->dir, 0700), 0);
	printf("failing drive: ext4 on %s (%s)\n", dr->dev,
	       dr->dm[0] ? "device-mapper, to be swapped to dm-error" :
			   "a loop device, to be shut down: no device-mapper here");
}

/* The drive dies: every I/O to it fails from now on. */
static void drive_fail(struct drive *dr)
{
	char cmd[2048];
	uint32_t how = SHUTDOWN_NOLOGFLUSH;
	int fd;

	if (dr->dm[0]) {
		snprintf(cmd, sizeof(cmd), "dmsetup suspend --noflush %s && dmsetup load %s --table "
			 "\"0 %u error\" && dmsetup resume %s", dr->dm, dr->dm, IMG_MIB * 2048, dr->dm);
		assert_int_equal(sh(cmd), 0);
		return;
	}
	fd = open(dr->mnt, O_RDONLY | O_DIRECTORY);
	assert_true(fd >= 0);
	if (ioctl(fd, FS_IOC_SHUTDOWN, &how))
		fail_msg("FS_IOC_SHUTDOWN: %s", strerror(errno));
	close(fd);
}

/* The drive, the two plain directories and the daemon over all three;
 * torn down also when a check fails (no daemon or loop device left). */
struct fix {
	struct drive dr;
	struct kvtd_proc d;
	char *dirs[DEVS];
	char arg[DEVS][1200];
	const char *extra[2 * DEVS + 8];
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	size_t n = 0;

	assert_non_null(f);
	drive_setup(&f->dr);
	for (int k = 0; k < DEVS; k++) {
		f->dirs[k] = k == 1 ? strdup(f->dr.dir) : kvt_test_mkdtemp("ssdfail");
		assert_non_null(f->dirs[k]);
		snprintf(f->arg[k], sizeof(f->arg[k]), "%s:64M", f->dirs[k]);
		f->extra[n++] = "--ssd-dir";
		f->extra[n++] = f->arg[k];
	}
	f->extra[n++] = "--dram";
	f->extra[n++] = "8M";
	f->extra[n++] = "--metrics";
	f->extra[n++] = "127.0.0.1:0";
	f->extra[n] = NULL;
	*state = f;
	return kvtd_start(&f->d, NULL, f->extra);
}

static int teardown(void **state)
{
	struct fix *f = *state;

	if (f->d.pid > 0)
		kvtd_stop(&f->d, SIGKILL);
	kvtd_cleanup(&f->d);
	for (int k = 0; k < DEVS; k++) {
		if (k != 1 && f->dirs[k])
			kvt_test_rmdir(f->dirs[k]);
		free(f->dirs[k]);
	}
	drive_teardown(&f->dr);
	free(f);
	return 0;
}

static void a_failed_drive_costs_only_its_blocks(void **state)
{
	struct fix *f = *state;
	struct kvtd_proc *d = &f->d;
	struct kvtd_chain e;
	long long blocks[DEVS], writes[DEVS];
	int loaded;
	char *m;

	assert_int_equal(kvtd_chain_open(&e, d, "test/ssd-fail", DEV_BLOCKS, DEV_BLOCKS, seed), 0);
	dev_save_all(&e, seed);
	json_decref(kvtd_settled_stats(e.c, settled, 2)); /* the demoter is done */
	for (int k = 0; k < DEVS; k++) {
		blocks[k] = dev_stat(e.c, (size_t)k, "blocks");
		printf("device %d: %lld blocks\n", k, blocks[k]);
		assert_true(blocks[k] > 8); /* past the errors that take a device out */
	}

	drive_fail(&f->dr);
	/* every block loads whole or is a miss; the misses are the failed
	 * drive's (a block also in DRAM still loads) */
	loaded = dev_load_present(&e, seed);
	printf("loaded %d of %d after the drive failed\n", loaded, DEV_BLOCKS);
	assert_true(loaded >= DEV_BLOCKS - blocks[1]);
	assert_true(loaded < DEV_BLOCKS);
	assert_true(dev_state_is(e.c, 1, "out"));
	assert_true(kvtd_log_has(d, "event=ssd.device_out device=1"));
	for (int k = 0; k < DEVS; k += 2) {
		assert_true(dev_state_is(e.c, (size_t)k, "ok"));
		assert_int_equal(dev_stat(e.c, (size_t)k, "errors"), 0);
		assert_int_equal(dev_stat(e.c, (size_t)k, "blocks_lost"), 0);
		writes[k] = dev_stat(e.c, (size_t)k, "writes");
	}
	/* what is left loads again whole, and nothing of device 1 is found */
	assert_int_equal(dev_load_present(&e, seed), loaded);
	m = kvtd_http_checked(kvtd_metrics_port(d), "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
	if (strncmp(m, "HTTP/1.1 200 ", 13) || !strstr(m, "ssd device 1") || !strstr(m, "taken out"))
		fail_msg("readyz with a device out:\n%s", m);
	free(m);
	m = kvtd_http_checked(kvtd_metrics_port(d), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(kvtd_metric(m, "kvtier_ssd_devices_out") == 1);
	free(m);
	kvtd_chain_close(&e);

	/* new blocks go to the devices that work */
	assert_int_equal(kvtd_chain_open(&e, d, "test/ssd-fail-2", DEV_BLOCKS, DEV_BLOCKS,
					 seed + 1), 0);
	dev_save_all(&e, seed + 1);
	json_decref(kvtd_settled_stats(e.c, settled, 2));
	assert_true(dev_stat(e.c, 0, "writes") > writes[0]);
	assert_true(dev_stat(e.c, 2, "writes") > writes[2]);
	assert_int_equal(dev_load_present(&e, seed + 1), DEV_BLOCKS);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(d, SIGTERM), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(a_failed_drive_costs_only_its_blocks, setup,
						teardown),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
