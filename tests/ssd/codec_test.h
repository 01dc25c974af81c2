/* What the codec tests share: bf16 tensors, and a round trip. Included
 * after cmocka.h. */
#ifndef KVT_TESTS_CODEC_TEST_H
#define KVT_TESTS_CODEC_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "tiers/codec.h"

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

/* Encode with codec id and min_ratio 1 (a frame kept unless it grows),
 * decode, compare; the stored length, and the codec applied in *used. */
static inline long codec_round_trip_min1(enum kvt_codec_id id, const void *src, size_t len,
					 void *dst, enum kvt_codec_id *used)
{
	struct kvt_codec_cfg cfg;
	char *out = malloc(len + 1);
	long stored;

	kvt_codec_cfg_init(&cfg);
	cfg.id = id;
	cfg.min_ratio = 1.0;
	stored = kvt_codec_encode(&cfg, src, len, dst, kvt_codec_bound(len), NULL, used);
	assert_true(stored > 0);
	assert_true((size_t)stored <= kvt_codec_bound(len));
	assert_int_equal(kvt_codec_decode(*used, dst, (size_t)stored, out, len, NULL), 0);
	assert_memory_equal(out, src, len);
	free(out);
	return stored;
}

#endif /* KVT_TESTS_CODEC_TEST_H */
