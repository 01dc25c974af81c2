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

/* Bytes the SSD tier's segment files in dir take on disk now. */
static uint64_t ssd_tier_bytes(const char *dir)
{
	struct dirent *e;
	uint64_t sum = 0;
	DIR *d;

	d = opendir(dir);
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

/* What the SSD tier may take in dir (its segments in seg_dir), as spec asks
 * (opt names the option for messages): into *bytes, and into short_why
 * why it is less than asked (else ""). With fs_make, the directory is made
 * first (DATA_DIR); without, a directory that is not there is left out (a
 * drive not mounted: *bytes 0, a warning) where missing_ok, and the file
 * system of its nearest folder is measured otherwise (--print-config).
 * Returns 0, -EINVAL (a size no disk there holds) or the -errno of dir. */
static int ssd_size(const char *opt, const char *spec, const char *dir, const char *seg_dir,
		    bool fs_make, bool missing_ok, bool make, uint64_t *bytes, char *short_why,
		    size_t short_len)
{
	uint64_t free_bytes, held, room, total, asked;
	bool percent = strchr(spec, '%') != NULL;
	char a[32], b[32], c[32], d[32];
	struct statvfs vfs;
	int err;

	*bytes = 0;
	short_why[0] = 0;
	if (!strcmp(spec, "0"))
		return 0;
	err = make && fs_make ? make_dirs(dir, 0750) : 0;
	if (!err)
		err = make || missing_ok ? (statvfs(dir, &vfs) ? -errno : 0) :
		      statvfs_near(dir, &vfs);
	if (err && missing_ok) {
		snprintf(short_why, short_len, "%s %s: %s: left out", opt, dir, strerror(-err));
		fprintf(stderr, "kvtierd: warning: %s; the other directories serve\n", short_why);
		return 0;
	}
	if (err) {
		fprintf(stderr, "kvtierd: data dir %s: %s\n", dir, strerror(-err));
		return err;
	}
	free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	/* what the tier's segments hold is theirs again on a restart */
	held = ssd_tier_bytes(seg_dir);
	room = free_bytes + held;
	kvt_parse_size(spec, free_bytes, bytes);
	if (percent && *bytes > (64ull << 30))
		*bytes = 64ull << 30;
	asked = *bytes;
	/* a size no disk of this size could hold is a mistake; one that
	 * does not fit today's free space is a disk others filled */
	if (!percent && (asked < KVTD_SSD_MIN || asked > total)) {
		fprintf(stderr, "kvtierd: %s %s: the SSD tier takes %s to %s (the size "
			"of the file system of %s; %s of it free, plus the %s its segments "
			"hold), or 0 for none\n", opt, spec, kvt_fmt_bytes(KVTD_SSD_MIN, a, sizeof(a)),
			kvt_fmt_bytes(total, b, sizeof(b)), dir, kvt_fmt_bytes(free_bytes, c, sizeof(c)),
			kvt_fmt_bytes(held, d, sizeof(d)));
		return -EINVAL;
	}
	if (asked > room || asked < KVTD_SSD_MIN) {
		/* whole MiB of what fits; none under the smallest tier */
		*bytes = room < asked ? room & ~((1ull << 20) - 1) : asked;
		if (*bytes < KVTD_SSD_MIN)
			*bytes = 0;
		snprintf(short_why, short_len,
			 "%s %s asks %s; the file system of %s has %s free and the tier's "
			 "segments hold %s", opt, spec, kvt_fmt_bytes(asked, a, sizeof(a)), dir,
			 kvt_fmt_bytes(free_bytes, b, sizeof(b)), kvt_fmt_bytes(held, c, sizeof(c)));
		fprintf(stderr, "kvtierd: warning: %s: the SSD tier starts %s%s\n", short_why,
			*bytes ? "at " : "off", *bytes ? kvt_fmt_bytes(*bytes, d, sizeof(d)) : "");
	}
	return 0;
}

/* The SSD tier's size: under DATA_DIR/ssd, or the sum of --ssd-dir's. */
static int resolve_ssd(struct kvtd_config *cfg, bool make)
{
	char seg_dir[4200], why[sizeof(cfg->ssd_short)];
	int err;

	cfg->ssd_bytes = 0;
	cfg->ssd_short[0] = 0;
	if (!cfg->n_ssd_dirs) {
		snprintf(seg_dir, sizeof(seg_dir), "%s/ssd", cfg->data_dir);
		return ssd_size("--ssd", cfg->ssd_spec, cfg->data_dir, seg_dir, true, false, make,
				&cfg->ssd_bytes, cfg->ssd_short, sizeof(cfg->ssd_short));
	}
	/* DATA_DIR still holds what is not the tier's (the cluster secret) */
	err = make ? make_dirs(cfg->data_dir, 0750) : 0;
	if (err) {
		fprintf(stderr, "kvtierd: data dir %s: %s\n", cfg->data_dir, strerror(-err));
		return err;
	}
	for (size_t k = 0; k < cfg->n_ssd_dirs; k++) {
		struct kvtd_ssd_dir *d = &cfg->ssd_dirs[k];

		err = ssd_size("--ssd-dir", d->spec[0] ? d->spec : cfg->ssd_spec, d->path, d->path,
			       false, true, make, &d->bytes, why, sizeof(why));
		if (err)
			return err;
		if (why[0] && !cfg->ssd_short[0])
			kvtd_set_str(cfg->ssd_short, sizeof(cfg->ssd_short), why);
		cfg->ssd_bytes += d->bytes;
	}
	return 0;
}

/* kvtd_config_resolve; with !make, the same checks making nothing. */
static int resolve(struct kvtd_config *cfg, bool make)
{
	char dir[sizeof(cfg->socket_path)], avail[32], limit[32];
	struct kvtd_memory mem;
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
	err = resolve_ssd(cfg, make);
	if (err)
		return err;
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
