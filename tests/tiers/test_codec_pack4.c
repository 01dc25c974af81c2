/* SPDX-License-Identifier: Apache-2.0 */
/* The shuf16-pack4 codec (tiers/codec_pack4.h): its frame built here from
 * the format's description, byte for byte, both ways; round trips at sizes
 * around its SIMD step and chunk; escapes (zeros, outliers, both signs) and
 * chunks of noise stored raw; every field of a frame broken, and random
 * corruption. Run twice by ctest: as the CPU allows, and with
 * KVTIER_NO_AVX2=1, so that the plain loops run every case too. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec_test.h"
#include "helpers.h"
#include "tiers/codec.h"

static uint64_t seed;

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static long pack4_round_trip(const void *src, size_t len, uint8_t *dst, enum kvt_codec_id *used)
{
	return codec_round_trip_min1(KVT_CODEC_SHUF16_PACK4, src, len, dst, used);
}

/* A frame as the header file describes it, written here without the codec:
 * one chunk of 2^14 elements plus a short one of 7 (so an odd count, with a
 * spare nibble), and an odd last byte. The high bytes take the exponents 60
 * to 66 of both signs, and an escape every 100th element (exponent 20, and
 * 127 with the sign). The encoder places a chunk's window on one element in
 * 8, its lowest start among those that hold the most: 60 for the first
 * chunk, 58 for the second, whose one sampled element has exponent 64. The
 * encoder must write exactly these bytes, and they must decode: the format
 * is pinned, records on disk keep decoding. */
static void pack4_frame_is_as_described(void **state)
{
	const size_t c = 1u << 14, n = c + 7, len = 2 * n + 1;
	const size_t frame_max = 4 + 8 + n + (c / 2 + c) + (4 + 7) + 1;
	const unsigned base[2] = { 60, 58 };
	uint8_t *src = malloc(len), *want = calloc(1, frame_max), *got = malloc(kvt_codec_bound(len));
	uint8_t *out = malloc(len), *p;
	size_t esc[2] = { 0, 0 };
	enum kvt_codec_id used;
	long stored;

	for (size_t i = 0; i < n; i++) {
		uint8_t e = (uint8_t)(60 + i % 7), sign = (uint8_t)(i % 3 == 0) << 7;

		if (i % 100 == 99)
			e = i % 200 == 199 ? 127 : 20;
		src[2 * i] = (uint8_t)(i * 13);
		src[2 * i + 1] = sign | e;
	}
	src[len - 1] = 0xa5;
	assert_int_equal(src[2 * c + 1] & 0x7f, 64);
	/* header; word k: base, escapes; low plane; per chunk codes, escapes */
	want[0] = 1, want[1] = 14, want[2] = (uint8_t)len, want[3] = (uint8_t)(len >> 8);
	for (size_t i = 0; i < n; i++)
		want[12 + i] = src[2 * i];
	p = want + 12 + n;
	for (size_t k = 0; k < 2; k++) {
		size_t m = k ? 7 : c;
		uint8_t *codes = p, *escapes = p + (m + 1) / 2;

		for (size_t j = 0; j < m; j++) {
			uint8_t h = src[2 * (k * c + j) + 1];
			unsigned o = (unsigned)(h & 0x7f) - base[k], code = (o < 7 ? o : 7) | (h >> 7) << 3;

			if ((code & 7) == 7)
				escapes[esc[k]++] = h;
			codes[j / 2] |= (uint8_t)(code << (4 * (j & 1)));
		}
		put32(want + 4 + 4 * k, base[k] | (uint32_t)esc[k] << 7);
		p = escapes + esc[k];
	}
	*p++ = 0xa5;
	assert_true(esc[0] > 100);
	assert_int_equal(esc[1], 2);
	stored = pack4_round_trip(src, len, got, &used);
	assert_int_equal(used, KVT_CODEC_SHUF16_PACK4);
	assert_int_equal(stored, p - want);
	assert_memory_equal(got, want, (size_t)stored);
	assert_int_equal(kvt_codec_decode(KVT_CODEC_SHUF16_PACK4, want, (size_t)stored, out, len,
					  NULL),
			 0);
	assert_memory_equal(out, src, len);
	free(out);
	free(got);
	free(want);
	free(src);
}

/* Another chunk size than the encoder's: the frame's own is what counts. */
static void pack4_frame_of_small_chunks_decodes(void **state)
{
	const size_t n = 3000, len = 2 * n; /* chunks of 1024, 1024, 952 */
	uint8_t frame[4 + 12 + 3000 + 1500], out[6000], src[6000];
	uint8_t *p = frame + 16 + n;

	memset(frame, 0, sizeof(frame));
	frame[0] = 1, frame[1] = 10, frame[2] = (uint8_t)len, frame[3] = (uint8_t)(len >> 8);
	for (size_t k = 0; k < 3; k++)
		put32(frame + 4 + 4 * k, 40u + (uint32_t)k);
	for (size_t i = 0; i < n; i++) {
		unsigned code = (unsigned)(i % 16 == 7 ? 6 : i % 7) | (i & 8);

		src[2 * i] = frame[16 + i] = (uint8_t)(i * 5);
		src[2 * i + 1] = (uint8_t)((code & 8) << 4 | (40 + i / 1024 + (code & 7)));
		p[i / 2] |= (uint8_t)(code << (4 * (i & 1)));
	}
	assert_int_equal(kvt_codec_decode(KVT_CODEC_SHUF16_PACK4, frame, sizeof(frame), out, len,
					  NULL),
			 0);
	assert_memory_equal(out, src, len);
}

/* Sizes around the SIMD step (64 elements), the chunk (2^14 elements), odd
 * byte counts, the store's block sizes; bf16 of a normal packs at 4 bits an
 * exponent byte with next to no escapes: ratio above 1.3, at most 4/3. */
static void pack4_round_trips_at_every_size(void **state)
{
	static const size_t sizes[] = {
		1, 2, 3, 7, 8, 9, 127, 128, 129, 255, 4095, 4096, 4097, (32 << 10) - 2,
		(32 << 10) + 2, (32 << 10) + 129, (256 << 10) - 1, 256 << 10, (256 << 10) + 1,
		(512 << 10) + 3, 1 << 20, (4 << 20) + 2,
	};
	size_t max = (4 << 20) + 2;
	uint16_t *v = malloc(max + 2);
	uint8_t *dst = malloc(kvt_codec_bound(max));
	uint64_t s = seed;
	enum kvt_codec_id used;

	fill_normal_bf16(v, max / 2 + 1, &s);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		long stored = pack4_round_trip(v, sizes[i], dst, &used);

		if (sizes[i] >= 4096) {
			assert_int_equal(used, KVT_CODEC_SHUF16_PACK4);
			assert_true(stored * 13 < (long)sizes[i] * 10);
			assert_true(stored * 4 >= (long)sizes[i] * 3);
		}
	}
	free(dst);
	free(v);
}

/* Zeros, outliers of both signs, and a chunk whose scale jumps halfway: the
 * escapes come back in place, in every position of a SIMD step. */
static void pack4_escapes_come_back_in_place(void **state)
{
	size_t n = 5 * (1 << 14) + 77, len = 2 * n;
	uint16_t *v = malloc(len);
	uint8_t *dst = malloc(kvt_codec_bound(len));
	uint64_t s = seed;
	enum kvt_codec_id used;
	size_t escapes = 0;

	fill_normal_bf16(v, n, &s);
	for (size_t i = 0; i < n; i++) {
		if (i % 97 == 0)
			v[i] = 0; /* exponent 0: below any window */
		else if (i % 101 == 0)
			v[i] = to_bf16(i & 1 ? -3e30f : 7e25f);
		else if (i >= 2 * (1 << 14) + 12000 && i < 3 * (1 << 14))
			v[i] = to_bf16(1e-20f * (float)(i % 13 + 1)); /* the scale jumps */
	}
	for (size_t i = 0; i < 64; i++) /* one SIMD step with every lane escaped */
		v[(1 << 14) + 128 + i] = 0;
	pack4_round_trip(v, len, dst, &used);
	assert_int_equal(used, KVT_CODEC_SHUF16_PACK4);
	for (size_t k = 0; k < 6; k++) {
		uint32_t w = get32(dst + 4 + 4 * k);

		assert_int_equal(w >> 31, 0);
		escapes += w >> 7;
	}
	/* zeros and outliers at least, and the third chunk's other scale */
	assert_true(escapes > n / 97 + n / 101);
	free(dst);
	free(v);
}

/* A chunk of noise (too many escapes) is stored raw between packed ones;
 * a block of noise goes raw as a whole. */
static void pack4_stores_noise_raw(void **state)
{
	size_t c = 1 << 14, len = 3 * 2 * c;
	uint16_t *v = malloc(len);
	uint8_t *dst = malloc(kvt_codec_bound(len));
	uint64_t s = seed;
	enum kvt_codec_id used;
	long stored;

	fill_normal_bf16(v, len / 2, &s);
	kvt_test_fill((char *)v + 2 * c, 2 * c, seed);
	pack4_round_trip(v, len, dst, &used);
	assert_int_equal(used, KVT_CODEC_SHUF16_PACK4);
	assert_int_equal(get32(dst + 4) >> 31, 0);
	assert_int_equal(get32(dst + 8), (uint32_t)c | 1u << 31);
	assert_int_equal(get32(dst + 12) >> 31, 0);
	kvt_test_fill((char *)v, len, seed + 1);
	stored = pack4_round_trip(v, len, dst, &used);
	assert_int_equal(used, KVT_CODEC_RAW);
	assert_int_equal(stored, (long)len);
	free(dst);
	free(v);
}

/* Every field broken in turn, and the lengths wrong: each is -EBADMSG, and
 * the frame itself still decodes after. */
static void corrupt_pack4_frame_is_rejected(void **state)
{
	size_t n = 2 * (1 << 14) + 5, len = 2 * n + 1, stored, ncode0 = 1 << 13;
	uint16_t *v = malloc(len + 1);
	uint8_t *dst = malloc(kvt_codec_bound(len)), *bad = malloc(kvt_codec_bound(len) + 1);
	uint8_t *out = malloc(len + 2), *codes2;
	enum kvt_codec_id used;
	uint64_t s = seed;
	uint32_t w0, w1;

	fill_normal_bf16(v, n + 1, &s);
	v[1] = to_bf16(1.0f); /* in the window: coded */
	v[3] = 0;             /* below it: an escape in chunk 0 */
	for (size_t j = 0; j < 5; j++) /* chunk 2: five of one exponent, packed */
		v[2 * (1 << 14) + j] = to_bf16(1.0f + 0.1f * (float)j);
	stored = (size_t)pack4_round_trip(v, len, dst, &used);
	assert_int_equal(used, KVT_CODEC_SHUF16_PACK4);
	w0 = get32(dst + 4), w1 = get32(dst + 8);
	assert_int_equal(w0 >> 31, 0);
	assert_int_equal(w1 >> 31, 0);
	assert_true(w0 >> 7 >= 1);
	assert_int_equal(get32(dst + 12), get32(dst + 12) & 0x7f); /* packed, no escape */
#define RESET() memcpy(bad, dst, stored)
	codec_rejects_wrong_lengths(KVT_CODEC_SHUF16_PACK4, dst, stored, len);
	/* an unknown version; chunk sizes below the minimum, above the
	 * maximum, and another (the words no longer add up); the length's check */
	codec_rejects_edits(KVT_CODEC_SHUF16_PACK4, dst, stored, len,
			    (const size_t[][2]){ { 0, 2 }, { 1, 9 }, { 1, 18 }, { 1, 15 },
						 { 3, dst[3] ^ 1u } },
			    5);
	RESET();
	put32(bad + 4, w0 + (1u << 7)); /* an escape more than the chunk holds */
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	put32(bad + 4, w0 - (1u << 7)); /* one less */
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	put32(bad + 4, (w0 & ~0x7fu) | 122); /* a base past 121 */
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	put32(bad + 4, (1u << 14) | 1u << 31); /* said raw: the sizes no longer add up */
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	put32(bad + 4, (uint32_t)(1 << 14) << 7); /* more escapes than a packed chunk may hold */
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	RESET();
	/* element 1's code turned into an escape: one escape too many */
	assert_int_not_equal(bad[16 + n] & 0x70, 0x70);
	bad[16 + n] |= 0x70;
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	RESET();
	/* one escape fewer in the codes than the word says */
	for (size_t j = 0; j < ncode0; j++) {
		if ((bad[16 + n + j] & 0x07) == 0x07)
			bad[16 + n + j] &= 0xf8;
		if ((bad[16 + n + j] & 0x70) == 0x70)
			bad[16 + n + j] &= 0x8f;
	}
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	RESET();
	/* chunk 2 holds 5 elements: its last code byte's high nibble is spare */
	codes2 = bad + 16 + n + ncode0 + (w0 >> 7) + ncode0 + (w1 >> 7);
	codes2[2] |= 0x10;
	codec_assert_rejected(KVT_CODEC_SHUF16_PACK4, bad, stored, len);
	RESET();
	assert_int_equal(kvt_codec_decode(KVT_CODEC_SHUF16_PACK4, bad, stored, out, len, NULL), 0);
	assert_memory_equal(out, v, len);
#undef RESET
	free(out);
	free(bad);
	free(dst);
	free(v);
}

/* Random byte flips, half of them in the header and the chunk words; zeros
 * in the block, so that chunks hold escapes. */
static void pack4_survives_random_corruption(void **state)
{
	size_t len = 256 << 10;
	const size_t hot[][2] = { { 0, 36 } };
	uint16_t *v = malloc(len);
	uint8_t *dst = malloc(kvt_codec_bound(len));
	enum kvt_codec_id used;
	uint64_t s = seed;
	size_t stored;

	fill_normal_bf16(v, len / 2, &s);
	for (size_t i = 0; i < len / 2; i += 37)
		v[i] = 0;
	stored = (size_t)pack4_round_trip(v, len, dst, &used);
	codec_survives_random_flips(KVT_CODEC_SHUF16_PACK4, dst, stored, len, hot, 1, &s);
	free(dst);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pack4_frame_is_as_described),
		cmocka_unit_test(pack4_frame_of_small_chunks_decodes),
		cmocka_unit_test(pack4_round_trips_at_every_size),
		cmocka_unit_test(pack4_escapes_come_back_in_place),
		cmocka_unit_test(pack4_stores_noise_raw),
		cmocka_unit_test(corrupt_pack4_frame_is_rejected),
		cmocka_unit_test(pack4_survives_random_corruption),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
