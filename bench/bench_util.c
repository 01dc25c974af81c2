#include "bench/bench.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

uint64_t kvt_bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

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
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -EINVAL;
	while (isspace((unsigned char)*end))
		end++;
	switch (toupper((unsigned char)*end)) {
	case 0:
		break;
	case 'K': v *= 1024.0; end++; break;
	case 'M': v *= 1024.0 * 1024; end++; break;
	case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
	case 'T': v *= 1024.0 * 1024 * 1024 * 1024; end++; break;
	case '%': {
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		if (v > 100 || pages <= 0 || psz <= 0)
			return -EINVAL;
		v = v / 100.0 * (double)pages * (double)psz;
		end++;
		break;
	}
	default:
		return -EINVAL;
	}
	if (toupper((unsigned char)*end) == 'I')
		end++;
	if (toupper((unsigned char)*end) == 'B')
		end++;
	if (*end)
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
}

const char *kvt_bench_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (v == (double)(uint64_t)v)
		snprintf(buf, len, "%llu %s", (unsigned long long)v, unit[u]);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

void *kvt_bench_alloc(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0x5a, len); /* touch every page so the bench times copies, not faults */
	return p;
}

void kvt_bench_free(void *buf, size_t len)
{
	if (buf)
		munmap(buf, len);
}
