/* Shared by the SSD tier tests: a data directory where O_DIRECT works. */
#ifndef KVT_TESTS_SSD_TEST_H
#define KVT_TESTS_SSD_TEST_H

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

#endif
