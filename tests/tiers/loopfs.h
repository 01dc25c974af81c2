/* SPDX-License-Identifier: Apache-2.0 */
/* A small ext4 file system on a loop device, to fill up for real: the
 * full-disk tests of the SSD tier. Skips the test (exit 77) with a reason
 * when the machine does not allow it (needs root, losetup, mkfs.ext4). */
#ifndef KVT_TESTS_SSD_LOOPFS_H
#define KVT_TESTS_SSD_LOOPFS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "helpers.h"

struct loopfs {
	char *base, img[1024], mnt[1024], dev[64];
};

static inline int loopfs_sh(const char *cmd)
{
	int rc = system(cmd);

	return rc == 0 ? 0 : -1;
}

static inline void loopfs_setup(struct loopfs *l, unsigned mib)
{
	char cmd[16384];
	FILE *p;

	l->base = kvt_test_mkdtemp("ssd_enospc");
	if (!l->base)
		exit(1);
	snprintf(l->img, sizeof(l->img), "%s/fs.img", l->base);
	snprintf(l->mnt, sizeof(l->mnt), "%s/mnt", l->base);
	snprintf(cmd, sizeof(cmd), "truncate -s %uM %s && mkfs.ext4 -q -F %s >/dev/null 2>&1 && mkdir %s",
		 mib, l->img, l->img, l->mnt);
	if (loopfs_sh(cmd))
		goto skip;
	snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", l->img);
	p = popen(cmd, "r");
	if (!p || !fgets(l->dev, sizeof(l->dev), p)) {
		if (p)
			pclose(p);
		goto skip;
	}
	pclose(p);
	l->dev[strcspn(l->dev, "\n")] = 0;
	if (mount(l->dev, l->mnt, "ext4", 0, NULL)) {
		fprintf(stderr, "mount %s: %s\n", l->dev, strerror(errno));
		snprintf(cmd, sizeof(cmd), "losetup -d %s", l->dev);
		loopfs_sh(cmd);
		goto skip;
	}
	return;
skip:
	kvt_test_rmdir(l->base);
	kvt_test_skip(NULL, "cannot set up an ext4 image on a loop device "
		      "(needs root, losetup, mkfs.ext4 and mount)");
}

static inline void loopfs_teardown(struct loopfs *l)
{
	char cmd[16384];

	/* a closed io_uring drops its file references asynchronously: the
	 * mount can stay busy for a moment */
	for (int i = 0; i < 100 && umount(l->mnt) && errno == EBUSY; i++)
		usleep(50000);
	umount2(l->mnt, MNT_DETACH);
	snprintf(cmd, sizeof(cmd), "losetup -d %s", l->dev);
	loopfs_sh(cmd);
	kvt_test_rmdir(l->base);
	free(l->base);
}

#endif
