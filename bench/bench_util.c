/* SPDX-License-Identifier: Apache-2.0 */
#include "bench/bench.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/size.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double kvt_bench_quantile(double *v, size_t n, double q)
{
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	if (q <= 0)
		return v[0];
	if (q >= 1)
		return v[n - 1];
	/* nearest rank; for the median of an even count, the mean of the two */
	if (q == 0.5 && n % 2 == 0)
		return (v[n / 2 - 1] + v[n / 2]) / 2;
	i = (size_t)(q * (double)n);
	return v[i < n ? i : n - 1];
}

int kvt_bench_parse_size(const char *s, uint64_t *out)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;

	return kvt_parse_size(s, ram, out);
}

/* mmap len bytes, madvise them with advice (none when < 0), touch every page. */
static void *alloc_touched(size_t len, int advice)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (advice >= 0)
		madvise(p, len, advice);
	memset(p, 0x5a, len); /* touch every page so the bench times copies, not faults */
	return p;
}

void *kvt_bench_alloc(size_t len)
{
	return alloc_touched(len, -1);
}

void *kvt_bench_alloc_pages(size_t len, bool thp)
{
	/* as the DRAM tier asks for its region (tiers/dram.c map_region) */
	return alloc_touched(len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

void kvt_bench_free(void *buf, size_t len)
{
	if (buf)
		munmap(buf, len);
}

double kvt_bench_rand_normal(uint64_t *rng)
{
	double u1, u2;

	*rng ^= *rng >> 12, *rng ^= *rng << 25, *rng ^= *rng >> 27;
	u1 = ((double)((*rng * 0x2545F4914F6CDD1DULL) >> 11) + 1.0) / 9007199254740993.0;
	*rng ^= *rng >> 12, *rng ^= *rng << 25, *rng ^= *rng >> 27;
	u2 = (double)((*rng * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint16_t kvt_bench_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

void kvt_bench_fill_bf16_normal(uint16_t *v, size_t n, uint64_t *rng)
{
	for (size_t i = 0; i < n; i++)
		v[i] = kvt_bench_bf16((float)kvt_bench_rand_normal(rng));
}

int kvt_bench_find_kvtierd(const char *opt, char *out, size_t len)
{
	char self[PATH_MAX - 64], *slash;
	ssize_t n;

	if (opt || (opt = getenv("KVTIERD"))) {
		snprintf(out, len, "%s", opt);
		return access(out, X_OK) ? -ENOENT : 0;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -ENOENT;
	self[n] = 0;
	slash = strrchr(self, '/');
	if (!slash)
		return -ENOENT;
	*slash = 0;
	snprintf(out, len, "%s/kvtierd", self);
	if (!access(out, X_OK))
		return 0;
	snprintf(out, len, "%s/../app/kvtierd", self);
	return access(out, X_OK) ? -ENOENT : 0;
}
