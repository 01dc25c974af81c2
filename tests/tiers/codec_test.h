/* SPDX-License-Identifier: Apache-2.0 */
/* What the codec tests share: bf16 tensors, and a round trip. Included
 * after cmocka.h. */
#ifndef KVT_TESTS_CODEC_TEST_H
#define KVT_TESTS_CODEC_TEST_H

#include <errno.h>
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

/* A frame of codec id for raw bytes, stored bytes long (frame readable for
 * one more), decoded with lengths that do not match it: truncated, a byte
 * too many, an element less or more, an odd byte less or more, shorter than
 * any header. Each must be -EBADMSG. */
static inline void codec_rejects_wrong_lengths(enum kvt_codec_id id, const void *frame,
					       size_t stored, size_t raw)
{
	char *out = malloc(raw + 2);
	const size_t lens[][2] = {
		{ stored - 1, raw }, { stored + 1, raw }, { stored, raw - 1 }, { stored, raw + 1 },
		{ stored, raw - 2 }, { stored, raw + 2 }, { 3, raw }, { 0, raw }, { 8, raw },
	};

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		if (kvt_codec_decode(id, frame, lens[i][0], out, lens[i][1], NULL) != -EBADMSG)
			fail_msg("%s: a frame of %zu bytes for %zu decoded as %zu for %zu",
				 kvt_codec_name(id), stored, raw, lens[i][0], lens[i][1]);
	free(out);
}

/* Each edit {offset, value} alone on a copy of the frame: each must make
 * it -EBADMSG (a header field no reader may take). */
static inline void codec_rejects_edits(enum kvt_codec_id id, const void *frame, size_t stored,
				       size_t raw, const size_t edits[][2], size_t n_edits)
{
	uint8_t *bad = malloc(stored), *out = malloc(raw);

	for (size_t e = 0; e < n_edits; e++) {
		memcpy(bad, frame, stored);
		bad[edits[e][0]] = (uint8_t)edits[e][1];
		if (kvt_codec_decode(id, bad, stored, out, raw, NULL) != -EBADMSG)
			fail_msg("%s: byte %zu set to %zu decoded", kvt_codec_name(id), edits[e][0],
				 edits[e][1]);
	}
	free(out);
	free(bad);
}

/* frame, stored bytes long, must not decode to raw bytes: -EBADMSG. */
static inline void codec_assert_rejected(enum kvt_codec_id id, const void *frame, size_t stored,
					 size_t raw)
{
	char *out = malloc(raw + 2);

	assert_int_equal(kvt_codec_decode(id, frame, stored, out, raw, NULL), -EBADMSG);
	free(out);
}

/* 2000 times, 1 to 4 bytes of a copy of the frame flipped: on odd rounds
 * anywhere, on even ones within [hot[k][0], hot[k][1]) for a k taken at
 * random (the header and what a decoder trusts first). Each decode gives 0
 * or -EBADMSG and never writes outside its output (the sanitizer build
 * checks that); a flipped payload byte may decode to other bytes of the
 * right length, which the tier's checksum over the stored bytes catches. */
static inline void codec_survives_random_flips(enum kvt_codec_id id, const void *frame,
					       size_t stored, size_t raw, const size_t hot[][2],
					       size_t n_hot, uint64_t *s)
{
	uint8_t *bad = malloc(stored), *out = malloc(raw);

	for (int i = 0; i < 2000; i++) {
		int r;

		memcpy(bad, frame, stored);
		for (int f = 0; f < 1 + i % 4; f++) {
			const size_t *h = hot[kvt_test_rand(s) % n_hot];
			size_t at = i % 2 ? kvt_test_rand(s) % stored
					  : h[0] + kvt_test_rand(s) % (h[1] - h[0]);

			bad[at] ^= (uint8_t)(1 + kvt_test_rand(s) % 255);
		}
		r = kvt_codec_decode(id, bad, stored, out, raw, NULL);
		if (r != 0 && r != -EBADMSG)
			fail_msg("%s: a corrupt frame decoded to %d", kvt_codec_name(id), r);
	}
	free(out);
	free(bad);
}

#endif /* KVT_TESTS_CODEC_TEST_H */
