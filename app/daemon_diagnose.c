/* SPDX-License-Identifier: Apache-2.0 */
#include "app/daemon_diagnose.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "kvtier/types.h"

/* The SSD tier's lock: the meta file it flocks (tiers/ssd_open.c). */
#define SSD_META_NAME "kvtier-ssd.meta"

pid_t kvtd_lock_holder(const char *path)
{
	char line[256];
	struct stat st;
	pid_t found = 0;
	FILE *f;

	if (stat(path, &st) || !(f = fopen("/proc/locks", "r")))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long long ino;
		int pid;
		char *p = strstr(line, "ADVISORY");

		if (!p)
			p = strstr(line, "MANDATORY");
		/* "1: FLOCK  ADVISORY  WRITE 812 08:02:1312 0 EOF"; a "->" line
		 * is a waiter, not the holder */
		if (!p || strstr(line, "->") ||
		    sscanf(p, "%*s %*s %d %x:%x:%llu", &pid, &maj, &min, &ino) != 4)
			continue;
		if (ino != (unsigned long long)st.st_ino)
			continue;
		if (maj == major(st.st_dev) && min == minor(st.st_dev)) {
			found = pid;
			break;
		}
		if (!found)
			found = pid; /* same inode, device numbered otherwise (overlays) */
	}
	fclose(f);
	return found;
}

/* The deepest part of path that exists (path itself when it does). */
static void existing_part(const char *path, char *out, size_t len)
{
	char *slash;

	snprintf(out, len, "%s", path);
	while (access(out, F_OK) && (slash = strrchr(out, '/')) && slash != out)
		*slash = 0;
}

void kvtd_explain_store_error(int err, const char *ssd_dir, char *why, size_t len)
{
	char path[PATH_MAX];

	if (!ssd_dir) {
		snprintf(why, len, "reason=\"%s\"", kvt_strerror(err));
		return;
	}
	switch (err) {
	case -EACCES:
	case -EPERM:
	case -EROFS:
		existing_part(ssd_dir, path, sizeof(path));
		snprintf(why, len, "path=%s uid=%d reason=\"kvtierd may not write %s (%s): give "
			 "its user the directory (chown), or choose another with --data-dir\"",
			 path, (int)geteuid(), path, kvt_strerror(err));
		return;
	case -EBUSY: {
		pid_t pid;

		snprintf(path, sizeof(path), "%s/%s", ssd_dir, SSD_META_NAME);
		pid = kvtd_lock_holder(path);
		if (pid)
			snprintf(why, len, "path=%s holder_pid=%d reason=\"the data dir is locked by "
				 "another process (pid %d, most likely another kvtierd): one daemon "
				 "per data dir; stop it, or give this one another --data-dir\"",
				 ssd_dir, (int)pid, (int)pid);
		else
			snprintf(why, len, "path=%s reason=\"the data dir is locked by another "
				 "process (most likely another kvtierd): one daemon per data dir; "
				 "stop it, or give this one another --data-dir\"", ssd_dir);
		return;
	}
	case -ENOSPC:
		snprintf(why, len, "path=%s reason=\"no space left on the data dir's file system\"",
			 ssd_dir);
		return;
	default: /* not one of the data dir's: DRAM, most likely */
		snprintf(why, len, "reason=\"%s\"", kvt_strerror(err));
	}
}
