/* SPDX-License-Identifier: Apache-2.0 */
/* Parsing and printing byte counts (see size.h). */
#include "util/size.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int kvt_parse_size(const char *s, uint64_t whole, uint64_t *out)
{
	char *end;
	double v;

	if (!s || !*s || !out)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	/* v != v: NaN; infinities fail the range check below */
	if (errno || end == s || v < 0 || v != v)
		return -EINVAL;
	while (isspace((unsigned char)*end))
		end++;
	switch (toupper((unsigned char)*end)) {
	case 0: break;
	case 'K': v *= 1024.0; end++; break;
	case 'M': v *= 1048576.0; end++; break;
	case 'G': v *= 1073741824.0; end++; break;
	case 'T': v *= 1099511627776.0; end++; break;
	case '%':
		if (v > 100 || end[1])
			return -EINVAL;
		*out = (uint64_t)(v / 100.0 * (double)whole);
		return 0;
	default:
		return -EINVAL;
	}
	if (toupper((unsigned char)*end) == 'I')
		end++;
	if (toupper((unsigned char)*end) == 'B')
		end++;
	/* 2^64 is the first double that does not fit */
	if (*end || v >= 18446744073709551616.0)
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
}

const char *kvt_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (v == (double)(uint64_t)v)
		snprintf(buf, len, "%llu %s", (unsigned long long)v, unit[u]);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}
