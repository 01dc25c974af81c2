/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the SSD tier tests: a data directory where O_DIRECT works. */
#ifndef KVT_TESTS_SSD_TEST_H
#define KVT_TESTS_SSD_TEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

/* A fresh directory under $KVT_TEST_TMPDIR; skips the test (exit 77) when
 * that file system refuses O_DIRECT (tmpfs, some overlays). */
static inline char *ssd_test_dir(const char *tag)
{
	char *dir = kvt_test_mkdtemp(tag), probe[4096];
	int fd;

	if (!dir) {
		fprintf(stderr, "cannot create a test directory\n");
		exit(1);
	}
	snprintf(probe, sizeof(probe), "%s/probe", dir);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd < 0 && errno == EINVAL) {
		kvt_test_rmdir(dir);
		kvt_test_skip(NULL, "the file system of $KVT_TEST_TMPDIR refuses O_DIRECT");
	}
	if (fd >= 0)
		close(fd);
	unlink(probe);
	return dir;
}

/* Delete the segment summaries (seg-*.sum) of a tier's directory, as a crash
 * before they were written would leave it: the next open scans. Returns how
 * many there were. */
static inline int ssd_test_drop_summaries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];
	int n = 0;

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (strncmp(e->d_name, "seg-", 4) || len < 4 || strcmp(e->d_name + len - 4, ".sum"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n += unlink(path) == 0;
	}
	if (d)
		closedir(d);
	return n;
}

/* Count the files of dir whose names start with prefix and end with suffix. */
static inline int ssd_test_count(const char *dir, const char *prefix, const char *suffix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name), sl = strlen(suffix);
		n += !strncmp(e->d_name, prefix, strlen(prefix)) && len >= sl &&
		     !strcmp(e->d_name + len - sl, suffix);
	}
	if (d)
		closedir(d);
	return n;
}

#endif
