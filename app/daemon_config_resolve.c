/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's configuration met with the machine: the sizes resolved against
 * the memory and the disk there are, the directories made (see
 * kvtd_config_resolve). */
#include "app/daemon_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "app/daemon_memory.h"
#include "app/daemon_options.h"
#include "util/size.h"

/* The smallest SSD tier: one segment of the smallest size (4 MiB). */
#define KVTD_SSD_MIN (4ull << 20)

/* Bytes the SSD tier's segment files under data_dir take on disk now. */
static uint64_t ssd_tier_bytes(const char *data_dir)
{
	char path[4200];
	struct dirent *e;
	uint64_t sum = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/ssd", data_dir);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		struct stat st;

		if (strncmp(e->d_name, "seg-", 4) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		sum += (uint64_t)st.st_blocks * 512;
	}
	if (d)
		closedir(d);
	return sum;
}

/* mkdir -p */
static int make_dirs(const char *path, mode_t mode)
{
	char buf[4096];

	if (!kvtd_fits(path, sizeof(buf)))
		return -ENAMETOOLONG;
	kvtd_set_str(buf, sizeof(buf), path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) && errno != EEXIST)
		return -errno;
	return 0;
}

/* statvfs of path, or of its nearest existing folder when it is not there
 * yet (nothing is made: --print-config). */
static int statvfs_near(const char *path, struct statvfs *vfs)
{
	char buf[4096];
	char *slash;

	if (!kvtd_fits(path, sizeof(buf)))
		return -ENAMETOOLONG;
	kvtd_set_str(buf, sizeof(buf), path);
	while (statvfs(buf[0] ? buf : ".", vfs)) {
		if (errno != ENOENT || !buf[0])
			return -errno;
		slash = strrchr(buf, '/');
		if (slash == buf)
			slash[1] = 0; /* the root */
		else if (slash)
			*slash = 0;
		else
			buf[0] = 0; /* relative: the working directory */
	}
	return 0;
}

/* kvtd_config_resolve; with !make, the same checks making nothing. */
static int resolve(struct kvtd_config *cfg, bool make)
{
	char dir[sizeof(cfg->socket_path)], avail[32], limit[32];
	struct kvtd_memory mem;
	struct statvfs vfs;
	char *slash;
	int err;

	/* checked when it was read: a size, or a percentage of nothing */
	if (kvt_parse_size(cfg->mrc_budget_spec, 0, &cfg->mrc_budget))
		cfg->mrc_budget = 0;
	kvtd_memory_measure(&mem);
	kvt_fmt_bytes(mem.available, avail, sizeof(avail));
	if (kvt_parse_size(cfg->dram_spec, mem.available, &cfg->dram_bytes) ||
	    cfg->dram_bytes < (1u << 20) || cfg->dram_bytes > mem.available) {
		fprintf(stderr, "kvtierd: --dram %s: the DRAM tier takes 1 MiB to %s, the memory "
			"this process may use (", cfg->dram_spec, avail);
		if (mem.cgroup_room < mem.host_available)
			fprintf(stderr, "the room left under the %s limit of cgroup %s",
				kvt_fmt_bytes(mem.cgroup_limit, limit, sizeof(limit)), mem.cgroup_dir);
		else
			fprintf(stderr, "the host's available memory");
		fprintf(stderr, ")\n");
		return -EINVAL;
	}
	cfg->ssd_bytes = 0;
	cfg->ssd_short[0] = 0;
	if (strcmp(cfg->ssd_spec, "0")) {
		uint64_t free_bytes, held, room, total, asked;
		bool percent = strchr(cfg->ssd_spec, '%') != NULL;
		char a[32], b[32], c[32];

		err = make ? make_dirs(cfg->data_dir, 0750) : 0;
		if (!err)
			err = make ? (statvfs(cfg->data_dir, &vfs) ? -errno : 0) :
			      statvfs_near(cfg->data_dir, &vfs);
		if (err) {
			fprintf(stderr, "kvtierd: data dir %s: %s\n", cfg->data_dir, strerror(-err));
			return err;
		}
		free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
		/* what the tier's segments hold is theirs again on a restart */
		held = ssd_tier_bytes(cfg->data_dir);
		room = free_bytes + held;
		kvt_parse_size(cfg->ssd_spec, free_bytes, &cfg->ssd_bytes);
		if (percent && cfg->ssd_bytes > (64ull << 30))
			cfg->ssd_bytes = 64ull << 30;
		asked = cfg->ssd_bytes;
		/* a size no disk of this size could hold is a mistake; one that
		 * does not fit today's free space is a disk others filled */
		if (!percent && (asked < KVTD_SSD_MIN || asked > total)) {
			fprintf(stderr, "kvtierd: --ssd %s: the SSD tier takes %s to %s (the size "
				"of the file system of %s; %s of it free, plus the %s its segments "
				"hold), or 0 for none\n", cfg->ssd_spec,
				kvt_fmt_bytes(KVTD_SSD_MIN, a, sizeof(a)),
				kvt_fmt_bytes(total, b, sizeof(b)), cfg->data_dir,
				kvt_fmt_bytes(free_bytes, c, sizeof(c)), kvt_fmt_bytes(held, avail,
											sizeof(avail)));
			return -EINVAL;
		}
		if (asked > room || asked < KVTD_SSD_MIN) {
			/* whole MiB of what fits; none under the smallest tier */
			cfg->ssd_bytes = room < asked ? room & ~((1ull << 20) - 1) : asked;
			if (cfg->ssd_bytes < KVTD_SSD_MIN)
				cfg->ssd_bytes = 0;
			snprintf(cfg->ssd_short, sizeof(cfg->ssd_short),
				 "--ssd %s asks %s; the file system of %s has %s free and the tier's "
				 "segments hold %s", cfg->ssd_spec, kvt_fmt_bytes(asked, a, sizeof(a)),
				 cfg->data_dir, kvt_fmt_bytes(free_bytes, b, sizeof(b)),
				 kvt_fmt_bytes(held, c, sizeof(c)));
			fprintf(stderr, "kvtierd: warning: %s: the SSD tier starts %s%s\n",
				cfg->ssd_short, cfg->ssd_bytes ? "at " : "off",
				cfg->ssd_bytes ? kvt_fmt_bytes(cfg->ssd_bytes, avail, sizeof(avail)) : "");
		}
	}
	if (cfg->cluster[0] && !cfg->cluster_secret_file[0])
		snprintf(cfg->cluster_secret_file, sizeof(cfg->cluster_secret_file),
			 "%.4070s/cluster.secret", cfg->data_dir);
	if (!cfg->handover_socket[0] &&
	    snprintf(cfg->handover_socket, sizeof(cfg->handover_socket), "%s.takeover",
		     cfg->socket_path) >= (int)sizeof(cfg->handover_socket)) {
		fprintf(stderr, "kvtierd: %s.takeover: too long for a socket path; set "
			"--handover-socket\n", cfg->socket_path);
		return -EINVAL;
	}
	kvtd_set_str(dir, sizeof(dir), cfg->socket_path);
	slash = strrchr(dir, '/');
	if (make && slash && slash != dir) {
		*slash = 0;
		err = make_dirs(dir, 0750);
		if (err) {
			fprintf(stderr, "kvtierd: socket dir %s: %s\n", dir, strerror(-err));
			return err;
		}
	}
	return 0;
}

int kvtd_config_resolve(struct kvtd_config *cfg)
{
	return resolve(cfg, true);
}

int kvtd_config_check(const struct kvtd_config *cfg)
{
	struct kvtd_config *copy = malloc(sizeof(*copy));
	int err;

	if (!copy)
		return -ENOMEM;
	*copy = *cfg;
	err = resolve(copy, false);
	free(copy);
	return err;
}
