/* SPDX-License-Identifier: Apache-2.0 */
/* The one clock kvtier measures intervals with. */
#ifndef KVT_UTIL_CLOCK_H
#define KVT_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds: for intervals and deadlines, never for
 * wall-clock time (a clock step must not stretch a timeout). */
static inline uint64_t kvt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* KVT_UTIL_CLOCK_H */
