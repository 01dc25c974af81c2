/* SPDX-License-Identifier: Apache-2.0 */
#include "helpers.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <ftw.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

void kvt_test_skip(const char *require, const char *fmt, ...)
{
	va_list ap;
	const char *req = require ? getenv(require) : NULL;
	int fail = req && strcmp(req, "1") == 0;

	fprintf(stderr, fail ? "FAIL (%s=1): " : "SKIP: ", require);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(fail ? 1 : KVT_TEST_SKIP);
}

void kvt_test_need_io_uring(void)
{
	struct io_uring ring;
	int err = io_uring_queue_init(4, &ring, 0);

	if (!err) {
		io_uring_queue_exit(&ring);
		return;
	}
	kvt_test_skip("KVT_TEST_REQUIRE_IO_URING",
		      "no io_uring here (io_uring_setup: %s); the thread-pool run of this "
		      "test covers the fallback", strerror(-err));
}

bool kvt_test_io_uring_required(void)
{
	const char *req = getenv("KVT_TEST_REQUIRE_IO_URING");

	return req && strcmp(req, "1") == 0;
}

uint64_t kvt_test_seed(void)
{
	const char *env = getenv("KVT_TEST_SEED");
	uint64_t seed;

	if (env && *env) {
		seed = strtoull(env, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
	}
	if (seed == 0)
		seed = 1;
	fprintf(stderr, "seed: KVT_TEST_SEED=%llu\n", (unsigned long long)seed);
	return seed;
}

void kvt_test_fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed ? seed : 1, v;
	uint8_t *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		v = kvt_test_rand(&s);
		memcpy(p + i, &v, 8);
	}
	v = kvt_test_rand(&s);
	memcpy(p + i, &v, len - i);
}

char *kvt_test_mkdtemp(const char *tag)
{
	const char *base = getenv("KVT_TEST_TMPDIR");
	char *path;

	if (!base || !*base)
		base = "/tmp";
	if (asprintf(&path, "%s/%s.XXXXXX", base, tag) < 0)
		return NULL;
	if (!mkdtemp(path)) {
		fprintf(stderr, "mkdtemp %s: %s\n", path, strerror(errno));
		free(path);
		return NULL;
	}
	return path;
}

char *kvt_test_sockdir(const char *tag)
{
	char *path;

	if (asprintf(&path, "/tmp/%.16s.XXXXXX", tag) < 0)
		return NULL;
	if (!mkdtemp(path)) {
		fprintf(stderr, "mkdtemp %s: %s\n", path, strerror(errno));
		free(path);
		return NULL;
	}
	return path;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

void kvt_test_rmdir(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void kvt_test_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

void kvt_test_write_secret(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return; /* the daemon under test then says it cannot read it */
	fprintf(f, "%s\n", text);
	fclose(f);
	chmod(path, 0600);
}

static long huge_read(const char *path, const char *field)
{
	char line[256];
	long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!field ? sscanf(line, "%ld", &v) == 1 :
			     !strncmp(line, field, strlen(field)) &&
				     sscanf(line + strlen(field), "%ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

static int huge_set(long total)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "w");
	int err;

	if (!f)
		return -errno;
	err = fprintf(f, "%ld\n", total) < 0 ? -EIO : 0;
	if (fclose(f) && !err)
		err = -errno;
	return err;
}

/* Huge pages kvt_test_huge_reserve added and nobody gave back yet. */
static long huge_added;

int kvt_test_huge_reserve(unsigned pages)
{
	long free_now = huge_read("/proc/meminfo", "HugePages_Free:");
	long total = huge_read("/proc/sys/vm/nr_hugepages", NULL);
	long need = (long)pages - free_now;
	int err;

	if (free_now < 0 || total < 0) {
		fprintf(stderr, "no huge pages here: /proc/meminfo has no HugePages_Free\n");
		return -ENOENT;
	}
	if (need <= 0)
		return 0;
	err = huge_set(total + need);
	if (!err && huge_read("/proc/sys/vm/nr_hugepages", NULL) < total + need)
		err = -ENOMEM;
	if (err) {
		huge_set(total);
		fprintf(stderr, "cannot reserve %ld huge pages of 2 MiB: %s\n", need, strerror(-err));
		return err;
	}
	huge_added += need;
	return (int)need;
}

long kvt_test_meminfo(const char *field)
{
	return huge_read("/proc/meminfo", field);
}

int kvt_test_huge_give_back(void **state)
{
	long total = huge_read("/proc/sys/vm/nr_hugepages", NULL);

	(void)state;
	if (huge_added > 0 && total >= huge_added)
		huge_set(total - huge_added);
	huge_added = 0;
	return 0;
}
