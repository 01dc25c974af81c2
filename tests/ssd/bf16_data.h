/* bf16 test tensors for the codec tests. */
#ifndef KVT_TESTS_BF16_DATA_H
#define KVT_TESTS_BF16_DATA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "helpers.h"

static inline uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* bf16 of standard normal values (Box-Muller): an exponent byte of few likely
 * values beside a mantissa byte of noise, as in K/V tensors. */
static inline void fill_normal_bf16(uint16_t *v, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i++) {
		double u1 = ((double)(kvt_test_rand(s) >> 11) + 1.0) / 9007199254740993.0;
		double u2 = (double)(kvt_test_rand(s) >> 11) / 9007199254740992.0;

		v[i] = to_bf16((float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)));
	}
}

#endif /* KVT_TESTS_BF16_DATA_H */
