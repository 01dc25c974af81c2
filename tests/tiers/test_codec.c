/* SPDX-License-Identifier: Apache-2.0 */
/* Codec round trips: every codec id on structured bf16 data, zstd's Huffman
 * coding of the exponent bytes beating LZ4 on random mantissas, raw fallback
 * for incompressible data and low ratios, corrupt input rejected, and records
 * written by earlier encoders (bytes kept here) still decoding. shuf16-zstd
 * (its own zstd contexts per thread) at many sizes, on several threads, and
 * against frames corrupted every way its header allows and at random. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
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

/* bf16 values of a smooth signal with small noise: what K/V projections look
 * like more than uniform bytes do. */
static void fill_bf16(uint16_t *v, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i++) {
		float noise = (float)(kvt_test_rand(s) % 1000) / 1000.0f - 0.5f;
		v[i] = to_bf16(sinf((float)(i % 128) * 0.05f) + 0.05f * noise);
	}
}

static void round_trip(enum kvt_codec_id id, const void *src, size_t len, enum kvt_codec_id *used,
		       long *stored)
{
	struct kvt_codec_cfg cfg;
	size_t cap = kvt_codec_bound(len);
	char *dst = malloc(cap), *out = malloc(len + 1), *scratch = malloc(len + 1);

	kvt_codec_cfg_init(&cfg);
	cfg.id = id;
	*stored = kvt_codec_encode(&cfg, src, len, dst, cap, scratch, used);
	assert_true(*stored > 0);
	assert_int_equal(kvt_codec_decode(*used, dst, (size_t)*stored, out, len, scratch), 0);
	assert_memory_equal(out, src, len);
	free(scratch);
	free(out);
	free(dst);
}

static void structured_bf16_compresses_and_round_trips(void **state)
{
	size_t n = 64 * 1024 + 1; /* odd byte count: the trailing byte is kept */
	uint16_t *v = malloc(n * 2);
	uint64_t s = seed;
	enum kvt_codec_id used;
	long lz4, shuf, bit;

	fill_bf16(v, n, &s);
	round_trip(KVT_CODEC_LZ4, v, n * 2 - 1, &used, &lz4);
	round_trip(KVT_CODEC_SHUF16_LZ4, v, n * 2 - 1, &used, &shuf);
	assert_int_equal(used, KVT_CODEC_SHUF16_LZ4);
	/* the shuffle groups the exponent bytes: it must beat plain LZ4 here */
	assert_true(shuf < lz4);
	round_trip(KVT_CODEC_BLOSC_BITSHUF16_LZ4, v, n * 2 - 1, &used, &bit);
	assert_int_equal(used, KVT_CODEC_BLOSC_BITSHUF16_LZ4);
	assert_true(bit < lz4);
	round_trip(KVT_CODEC_BLOSC_SHUF16_ZSTD, v, n * 2 - 1, &used, &bit);
	assert_int_equal(used, KVT_CODEC_BLOSC_SHUF16_ZSTD);
	assert_true(bit < lz4);
	round_trip(KVT_CODEC_SHUF16_ZSTD, v, n * 2 - 1, &used, &bit);
	assert_int_equal(used, KVT_CODEC_SHUF16_ZSTD);
	assert_true(bit < lz4);
	round_trip(KVT_CODEC_SHUF16_PACK4, v, n * 2 - 1, &used, &bit);
	assert_int_equal(used, KVT_CODEC_SHUF16_PACK4);
	assert_true(bit < lz4);
	/* every id round trips, even-length blocks too; plain LZ4 may fall back
	 * to raw here (ratio below 1.1), the shuffled codecs must not */
	for (int id = KVT_CODEC_RAW; id <= KVT_CODEC_LAST; id++) {
		round_trip((enum kvt_codec_id)id, v, n * 2 - 2, &used, &shuf);
		assert_true(used == (enum kvt_codec_id)id ||
			    (id == KVT_CODEC_LZ4 && used == KVT_CODEC_RAW));
	}
	free(v);
}

/* The mantissa bytes are noise that no codec shrinks; the exponent bytes take
 * a few values, which Huffman codes in 2 to 3 bits and LZ4, finding few
 * repeats, hardly shrinks even when bit-shuffled. A block of 256 KiB, the
 * size at which each byte plane is a zstd block of its own. */
static void zstd_beats_bit_shuffle_on_random_mantissas(void **state)
{
	size_t n = 128 * 1024;
	uint16_t *v = malloc(n * 2);
	uint64_t s = seed;
	enum kvt_codec_id used;
	long bit, zstd, own;

	fill_normal_bf16(v, n, &s);
	round_trip(KVT_CODEC_BLOSC_BITSHUF16_LZ4, v, n * 2, &used, &bit);
	assert_int_equal(used, KVT_CODEC_BLOSC_BITSHUF16_LZ4);
	round_trip(KVT_CODEC_BLOSC_SHUF16_ZSTD, v, n * 2, &used, &zstd);
	assert_int_equal(used, KVT_CODEC_BLOSC_SHUF16_ZSTD);
	round_trip(KVT_CODEC_SHUF16_ZSTD, v, n * 2, &used, &own);
	assert_int_equal(used, KVT_CODEC_SHUF16_ZSTD);
	/* the high bytes carry about 2.6 bits each, so Huffman's bound is near
	 * 1.5 and zstd must reach 1.3; LZ4 after the bit shuffle stays near 1.25 */
	print_message("bit shuffle + LZ4 %.3f, byte shuffle + zstd %.3f, shuf16-zstd %.3f\n",
		      (double)(n * 2) / bit, (double)(n * 2) / zstd, (double)(n * 2) / own);
	assert_true(zstd * 13 < (long)(n * 2) * 10);
	assert_true(zstd < bit);
	/* Huffman alone on the high plane, the low plane raw: no worse than
	 * c-blosc's zstd over both planes */
	assert_true(own * 13 < (long)(n * 2) * 10);
	assert_true(own <= zstd);
	free(v);
}

/* 96 bytes, 48 bf16 words: low byte i * 7, high byte 0x3f then 0x40; stored
 * as written by the hand-written 16-bit shuffle + LZ4 encoder of before
 * c-blosc. Records on disk hold exactly these bytes and must keep decoding. */
static const uint8_t old_shuf16_lz4[] = {
	0xff, 0x22, 0x00, 0x07, 0x0e, 0x15, 0x1c, 0x23, 0x2a, 0x31, 0x38, 0x3f,
	0x46, 0x4d, 0x54, 0x5b, 0x62, 0x69, 0x70, 0x77, 0x7e, 0x85, 0x8c, 0x93,
	0x9a, 0xa1, 0xa8, 0xaf, 0xb6, 0xbd, 0xc4, 0xcb, 0xd2, 0xd9, 0xe0, 0xe7,
	0xee, 0xf5, 0xfc, 0x03, 0x0a, 0x11, 0x18, 0x1f, 0x26, 0x2d, 0x34, 0x3b,
	0x42, 0x49, 0x3f, 0x01, 0x00, 0x04, 0x1e, 0x40, 0x01, 0x00, 0x50, 0x40,
	0x40, 0x40, 0x40, 0x40,
};

static void old_shuf16_lz4_record_decodes(void **state)
{
	uint8_t want[96], out[96], scratch[96];

	for (int i = 0; i < 48; i++) {
		want[2 * i] = (uint8_t)(i * 7);
		want[2 * i + 1] = i < 24 ? 0x3f : 0x40;
	}
	assert_int_equal(kvt_codec_decode(KVT_CODEC_SHUF16_LZ4, old_shuf16_lz4,
					  sizeof(old_shuf16_lz4), out, sizeof(out), scratch),
			 0);
	assert_memory_equal(out, want, sizeof(want));
}

/* 512 bytes, 256 bf16 words: low byte i * 7, high byte 0x3f then 0x40,
 * as the c-blosc encoders of this version wrote them (bit shuffle + LZ4 at
 * blosc level 5; byte shuffle + zstd level 1 in 256 KiB blocks). The frame
 * records how it was written, so a later change of level or block size
 * must still read these. */
static const uint8_t old_blosc_bitshuf16_lz4[] = {
	0x02, 0x01, 0x24, 0x02, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
	0xad, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x6e, 0x00, 0x00, 0x00,
	0x1f, 0xaa, 0x01, 0x00, 0x0c, 0x1f, 0x66, 0x01, 0x00, 0x0c, 0x1f, 0x1e,
	0x01, 0x00, 0x0c, 0x2f, 0x54, 0xab, 0x02, 0x00, 0x0b, 0xcf, 0x98, 0x33,
	0x67, 0xcc, 0x98, 0x33, 0x67, 0xcc, 0x98, 0x33, 0x67, 0xcc, 0x0c, 0x00,
	0x01, 0xfc, 0x01, 0xe0, 0xc3, 0x87, 0x0f, 0x1f, 0x3c, 0x78, 0xf0, 0xe0,
	0xc3, 0x87, 0x0f, 0x1f, 0x3c, 0x78, 0xf0, 0x10, 0x00, 0xfd, 0x01, 0x00,
	0xfc, 0x07, 0xf0, 0x1f, 0xc0, 0x7f, 0x00, 0xff, 0x03, 0xf8, 0x0f, 0xe0,
	0x3f, 0x80, 0xff, 0x10, 0x00, 0xf0, 0x10, 0x00, 0xf8, 0xff, 0x1f, 0x00,
	0x80, 0xff, 0xff, 0x03, 0x00, 0xf0, 0xff, 0x3f, 0x00, 0x00, 0xff, 0xff,
	0x07, 0x00, 0xe0, 0xff, 0x7f, 0x00, 0x00, 0xfc, 0xff, 0x0f, 0x00, 0xc0,
	0xff, 0xff, 0x23, 0x00, 0x00, 0x00, 0x1b, 0xff, 0x01, 0x00, 0x1b, 0x00,
	0x01, 0x00, 0x0b, 0x1f, 0x00, 0x1b, 0xff, 0x1f, 0x00, 0x0f, 0x20, 0x00,
	0x6e, 0x0c, 0x02, 0x00, 0x0f, 0x90, 0x00, 0x0d, 0x07, 0x02, 0x00, 0x50,
	0x00, 0x00, 0x00, 0x00, 0x00,
};

static const uint8_t old_blosc_shuf16_zstd[] = {
	0x02, 0x01, 0x91, 0x02, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
	0x2f, 0x01, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x17, 0x01, 0x00, 0x00,
	0x28, 0xb5, 0x2f, 0xfd, 0x60, 0x00, 0x01, 0x6d, 0x08, 0x00, 0x24, 0x10,
	0x00, 0x07, 0x0e, 0x15, 0x1c, 0x23, 0x2a, 0x31, 0x38, 0x3f, 0x46, 0x4d,
	0x54, 0x5b, 0x62, 0x69, 0x70, 0x77, 0x7e, 0x85, 0x8c, 0x93, 0x9a, 0xa1,
	0xa8, 0xaf, 0xb6, 0xbd, 0xc4, 0xcb, 0xd2, 0xd9, 0xe0, 0xe7, 0xee, 0xf5,
	0xfc, 0x03, 0x0a, 0x11, 0x18, 0x1f, 0x26, 0x2d, 0x34, 0x3b, 0x42, 0x49,
	0x50, 0x57, 0x5e, 0x65, 0x6c, 0x73, 0x7a, 0x81, 0x88, 0x8f, 0x96, 0x9d,
	0xa4, 0xab, 0xb2, 0xb9, 0xc0, 0xc7, 0xce, 0xd5, 0xdc, 0xe3, 0xea, 0xf1,
	0xf8, 0xff, 0x06, 0x0d, 0x14, 0x1b, 0x22, 0x29, 0x30, 0x37, 0x3e, 0x45,
	0x4c, 0x53, 0x5a, 0x61, 0x68, 0x6f, 0x76, 0x7d, 0x84, 0x8b, 0x92, 0x99,
	0xa0, 0xa7, 0xae, 0xb5, 0xbc, 0xc3, 0xca, 0xd1, 0xd8, 0xdf, 0xe6, 0xed,
	0xf4, 0xfb, 0x02, 0x09, 0x10, 0x17, 0x1e, 0x25, 0x2c, 0x33, 0x3a, 0x41,
	0x48, 0x4f, 0x56, 0x5d, 0x64, 0x6b, 0x72, 0x79, 0x80, 0x87, 0x8e, 0x95,
	0x9c, 0xa3, 0xaa, 0xb1, 0xb8, 0xbf, 0xc6, 0xcd, 0xd4, 0xdb, 0xe2, 0xe9,
	0xf0, 0xf7, 0xfe, 0x05, 0x0c, 0x13, 0x1a, 0x21, 0x28, 0x2f, 0x36, 0x3d,
	0x44, 0x4b, 0x52, 0x59, 0x60, 0x67, 0x6e, 0x75, 0x7c, 0x83, 0x8a, 0x91,
	0x98, 0x9f, 0xa6, 0xad, 0xb4, 0xbb, 0xc2, 0xc9, 0xd0, 0xd7, 0xde, 0xe5,
	0xec, 0xf3, 0xfa, 0x01, 0x08, 0x0f, 0x16, 0x1d, 0x24, 0x2b, 0x32, 0x39,
	0x40, 0x47, 0x4e, 0x55, 0x5c, 0x63, 0x6a, 0x71, 0x78, 0x7f, 0x86, 0x8d,
	0x94, 0x9b, 0xa2, 0xa9, 0xb0, 0xb7, 0xbe, 0xc5, 0xcc, 0xd3, 0xda, 0xe1,
	0xe8, 0xef, 0xf6, 0xfd, 0x04, 0x0b, 0x12, 0x19, 0x20, 0x27, 0x2e, 0x35,
	0x3c, 0x43, 0x4a, 0x51, 0x58, 0x5f, 0x66, 0x6d, 0x74, 0x7b, 0x82, 0x89,
	0x90, 0x97, 0x9e, 0xa5, 0xac, 0xb3, 0xba, 0xc1, 0xc8, 0xcf, 0xd6, 0xdd,
	0xe4, 0xeb, 0xf2, 0xf9, 0x3f, 0x40, 0x02, 0x00, 0x1c, 0xa4, 0x42, 0x00,
	0x4f, 0xc1, 0x14,
};

static void old_blosc_records_decode(void **state)
{
	uint8_t want[512], out[512];

	for (int i = 0; i < 256; i++) {
		want[2 * i] = (uint8_t)(i * 7);
		want[2 * i + 1] = i < 128 ? 0x3f : 0x40;
	}
	assert_int_equal(kvt_codec_decode(KVT_CODEC_BLOSC_BITSHUF16_LZ4, old_blosc_bitshuf16_lz4,
					  sizeof(old_blosc_bitshuf16_lz4), out, sizeof(out), NULL),
			 0);
	assert_memory_equal(out, want, sizeof(want));
	memset(out, 0, sizeof(out));
	assert_int_equal(kvt_codec_decode(KVT_CODEC_BLOSC_SHUF16_ZSTD, old_blosc_shuf16_zstd,
					  sizeof(old_blosc_shuf16_zstd), out, sizeof(out), NULL),
			 0);
	assert_memory_equal(out, want, sizeof(want));
}

static void corrupt_blosc_frame_is_rejected(void **state)
{
	size_t n = 32 * 1024, len = n * 2;
	uint16_t *v = malloc(len);
	char *dst = malloc(kvt_codec_bound(len)), *out = malloc(len);
	struct kvt_codec_cfg cfg;
	enum kvt_codec_id used;
	uint64_t s = seed;
	long stored;

	fill_bf16(v, n, &s);
	for (int id = KVT_CODEC_BLOSC_BITSHUF16_LZ4; id <= KVT_CODEC_BLOSC_SHUF16_ZSTD; id++) {
		kvt_codec_cfg_init(&cfg);
		cfg.id = (enum kvt_codec_id)id;
		stored = kvt_codec_encode(&cfg, v, len, dst, kvt_codec_bound(len), NULL, &used);
		assert_int_equal(used, id);
		assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored, out, len, NULL), 0);
		assert_memory_equal(out, v, len);
		assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored - 1, out, len, NULL),
				 -EBADMSG);
		assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored, out, len - 2, NULL),
				 -EBADMSG);
		assert_int_equal(kvt_codec_decode(used, dst, 8, out, len, NULL), -EBADMSG);
		/* a frame that claims more stored bytes than the record holds */
		dst[12] ^= 0x40;
		assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored, out, len, NULL),
				 -EBADMSG);
	}
	free(out);
	free(dst);
	free(v);
}

static void incompressible_data_is_stored_raw(void **state)
{
	size_t len = 256 * 1024;
	char *src = malloc(len);
	enum kvt_codec_id used;
	long stored;

	kvt_test_fill(src, len, seed);
	round_trip(KVT_CODEC_LZ4, src, len, &used, &stored);
	assert_int_equal(used, KVT_CODEC_RAW);
	assert_int_equal(stored, (long)len);
	round_trip(KVT_CODEC_SHUF16_LZ4, src, len, &used, &stored);
	assert_int_equal(used, KVT_CODEC_RAW);
	round_trip(KVT_CODEC_BLOSC_BITSHUF16_LZ4, src, len, &used, &stored);
	assert_int_equal(used, KVT_CODEC_RAW);
	assert_int_equal(stored, (long)len);
	round_trip(KVT_CODEC_BLOSC_SHUF16_ZSTD, src, len, &used, &stored);
	assert_int_equal(used, KVT_CODEC_RAW);
	assert_int_equal(stored, (long)len);
	round_trip(KVT_CODEC_SHUF16_ZSTD, src, len, &used, &stored);
	assert_int_equal(used, KVT_CODEC_RAW);
	assert_int_equal(stored, (long)len);
	round_trip(KVT_CODEC_SHUF16_PACK4, src, len, &used, &stored);
	assert_int_equal(used, KVT_CODEC_RAW);
	assert_int_equal(stored, (long)len);
	free(src);
}

static void ratio_below_minimum_is_stored_raw(void **state)
{
	size_t len = 128 * 1024;
	char *src = malloc(len), *dst = malloc(kvt_codec_bound(len));
	struct kvt_codec_cfg cfg;
	enum kvt_codec_id used;
	long n;

	/* half zeros, half noise: about 2:1 */
	memset(src, 0, len / 2);
	kvt_test_fill(src + len / 2, len / 2, seed);
	kvt_codec_cfg_init(&cfg);
	cfg.id = KVT_CODEC_LZ4;
	cfg.min_ratio = 1.5;
	n = kvt_codec_encode(&cfg, src, len, dst, kvt_codec_bound(len), NULL, &used);
	assert_int_equal(used, KVT_CODEC_LZ4);
	assert_true(n < (long)len);
	cfg.min_ratio = 4.0;
	n = kvt_codec_encode(&cfg, src, len, dst, kvt_codec_bound(len), NULL, &used);
	assert_int_equal(used, KVT_CODEC_RAW);
	assert_int_equal(n, (long)len);
	assert_memory_equal(dst, src, len);
	free(dst);
	free(src);
}

static void corrupt_stream_is_rejected(void **state)
{
	size_t len = 64 * 1024;
	char *src = calloc(1, len), *dst = malloc(kvt_codec_bound(len)), *out = malloc(len);
	struct kvt_codec_cfg cfg;
	enum kvt_codec_id used;
	long n;

	kvt_codec_cfg_init(&cfg);
	cfg.id = KVT_CODEC_LZ4;
	n = kvt_codec_encode(&cfg, src, len, dst, kvt_codec_bound(len), NULL, &used);
	assert_int_equal(used, KVT_CODEC_LZ4);
	/* truncated: does not decode to exactly len bytes */
	assert_int_equal(kvt_codec_decode(used, dst, (size_t)n - 1, out, len, NULL), -EBADMSG);
	/* wrong raw length */
	assert_int_equal(kvt_codec_decode(used, dst, (size_t)n, out, len - 1, NULL), -EBADMSG);
	assert_int_equal(kvt_codec_decode(KVT_CODEC_RAW, dst, 10, out, 11, NULL), -EBADMSG);
	assert_int_equal(kvt_codec_decode((enum kvt_codec_id)9, dst, 10, out, 10, NULL), -EINVAL);
	free(out);
	free(dst);
	free(src);
}

static void shuffle_inverts(void **state)
{
	char a[1001], b[1001], c[1001];

	kvt_test_fill(a, sizeof(a), seed);
	kvt_shuffle16(a, b, sizeof(a));
	kvt_unshuffle16(b, c, sizeof(a));
	assert_memory_equal(a, c, sizeof(a));
	assert_int_equal(b[0], a[0]);
	assert_int_equal(b[500], a[1]);
	assert_int_equal(kvt_codec_parse("shuf16-lz4"), KVT_CODEC_SHUF16_LZ4);
	assert_int_equal(kvt_codec_parse("blosc-bitshuf16-lz4"), KVT_CODEC_BLOSC_BITSHUF16_LZ4);
	assert_string_equal(kvt_codec_name(KVT_CODEC_BLOSC_BITSHUF16_LZ4), "blosc-bitshuf16-lz4");
	assert_int_equal(kvt_codec_parse("blosc-shuf16-zstd"), KVT_CODEC_BLOSC_SHUF16_ZSTD);
	assert_string_equal(kvt_codec_name(KVT_CODEC_BLOSC_SHUF16_ZSTD), "blosc-shuf16-zstd");
	assert_int_equal(kvt_codec_parse("shuf16-zstd"), KVT_CODEC_SHUF16_ZSTD);
	assert_string_equal(kvt_codec_name(KVT_CODEC_SHUF16_ZSTD), "shuf16-zstd");
	assert_int_equal(kvt_codec_parse("shuf16-pack4"), KVT_CODEC_SHUF16_PACK4);
	assert_string_equal(kvt_codec_name(KVT_CODEC_SHUF16_PACK4), "shuf16-pack4");
	assert_null(kvt_codec_name((enum kvt_codec_id)(KVT_CODEC_LAST + 1)));
	assert_int_equal(kvt_codec_parse("zstd"), -EINVAL);
}

/* ---- shuf16-zstd ----------------------------------------------------- */

/* 513 bytes: the 256 words of old_blosc_records_decode, then one odd byte
 * 0x5a; as written by the first shuf16-zstd encoder (version 1, chunks of
 * 2^17 high bytes; one zstd frame). Records on disk hold exactly these bytes
 * and must keep decoding. */
static const uint8_t old_shuf16_zstd[] = {
	0x01, 0x11, 0x00, 0x00, 0x3d, 0x00, 0x00, 0x00, 0x00, 0x07, 0x0e, 0x15,
	0x1c, 0x23, 0x2a, 0x31, 0x38, 0x3f, 0x46, 0x4d, 0x54, 0x5b, 0x62, 0x69,
	0x70, 0x77, 0x7e, 0x85, 0x8c, 0x93, 0x9a, 0xa1, 0xa8, 0xaf, 0xb6, 0xbd,
	0xc4, 0xcb, 0xd2, 0xd9, 0xe0, 0xe7, 0xee, 0xf5, 0xfc, 0x03, 0x0a, 0x11,
	0x18, 0x1f, 0x26, 0x2d, 0x34, 0x3b, 0x42, 0x49, 0x50, 0x57, 0x5e, 0x65,
	0x6c, 0x73, 0x7a, 0x81, 0x88, 0x8f, 0x96, 0x9d, 0xa4, 0xab, 0xb2, 0xb9,
	0xc0, 0xc7, 0xce, 0xd5, 0xdc, 0xe3, 0xea, 0xf1, 0xf8, 0xff, 0x06, 0x0d,
	0x14, 0x1b, 0x22, 0x29, 0x30, 0x37, 0x3e, 0x45, 0x4c, 0x53, 0x5a, 0x61,
	0x68, 0x6f, 0x76, 0x7d, 0x84, 0x8b, 0x92, 0x99, 0xa0, 0xa7, 0xae, 0xb5,
	0xbc, 0xc3, 0xca, 0xd1, 0xd8, 0xdf, 0xe6, 0xed, 0xf4, 0xfb, 0x02, 0x09,
	0x10, 0x17, 0x1e, 0x25, 0x2c, 0x33, 0x3a, 0x41, 0x48, 0x4f, 0x56, 0x5d,
	0x64, 0x6b, 0x72, 0x79, 0x80, 0x87, 0x8e, 0x95, 0x9c, 0xa3, 0xaa, 0xb1,
	0xb8, 0xbf, 0xc6, 0xcd, 0xd4, 0xdb, 0xe2, 0xe9, 0xf0, 0xf7, 0xfe, 0x05,
	0x0c, 0x13, 0x1a, 0x21, 0x28, 0x2f, 0x36, 0x3d, 0x44, 0x4b, 0x52, 0x59,
	0x60, 0x67, 0x6e, 0x75, 0x7c, 0x83, 0x8a, 0x91, 0x98, 0x9f, 0xa6, 0xad,
	0xb4, 0xbb, 0xc2, 0xc9, 0xd0, 0xd7, 0xde, 0xe5, 0xec, 0xf3, 0xfa, 0x01,
	0x08, 0x0f, 0x16, 0x1d, 0x24, 0x2b, 0x32, 0x39, 0x40, 0x47, 0x4e, 0x55,
	0x5c, 0x63, 0x6a, 0x71, 0x78, 0x7f, 0x86, 0x8d, 0x94, 0x9b, 0xa2, 0xa9,
	0xb0, 0xb7, 0xbe, 0xc5, 0xcc, 0xd3, 0xda, 0xe1, 0xe8, 0xef, 0xf6, 0xfd,
	0x04, 0x0b, 0x12, 0x19, 0x20, 0x27, 0x2e, 0x35, 0x3c, 0x43, 0x4a, 0x51,
	0x58, 0x5f, 0x66, 0x6d, 0x74, 0x7b, 0x82, 0x89, 0x90, 0x97, 0x9e, 0xa5,
	0xac, 0xb3, 0xba, 0xc1, 0xc8, 0xcf, 0xd6, 0xdd, 0xe4, 0xeb, 0xf2, 0xf9,
	0x28, 0xb5, 0x2f, 0xfd, 0x60, 0x00, 0x00, 0x9d, 0x01, 0x00, 0x06, 0xd0,
	0x0b, 0x04, 0xe0, 0x0f, 0x79, 0x17, 0x09, 0x00, 0x09, 0x00, 0x09, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xff, 0xff, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
	0x00, 0x5a,
};

static void old_shuf16_zstd_record_decodes(void **state)
{
	uint8_t want[513], out[513];

	for (int i = 0; i < 256; i++) {
		want[2 * i] = (uint8_t)(i * 7);
		want[2 * i + 1] = i < 128 ? 0x3f : 0x40;
	}
	want[512] = 0x5a;
	assert_int_equal(kvt_codec_decode(KVT_CODEC_SHUF16_ZSTD, old_shuf16_zstd,
					  sizeof(old_shuf16_zstd), out, sizeof(out), NULL),
			 0);
	assert_memory_equal(out, want, sizeof(want));
}

static long zstd16_round_trip(const void *src, size_t len, char *dst, enum kvt_codec_id *used)
{
	return codec_round_trip_min1(KVT_CODEC_SHUF16_ZSTD, src, len, dst, used);
}

/* Sizes around the SIMD widths (16 and 32 elements), the chunk (2^17
 * elements), odd byte counts, and blocks of the sizes the store uses. */
static void shuf16_zstd_round_trips_at_every_size(void **state)
{
	static const size_t sizes[] = {
		1, 2, 3, 31, 32, 33, 63, 64, 65, 4095, 4096, 4097, (128 << 10) - 1,
		(256 << 10) - 2, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (256 << 10) + 64,
		(512 << 10) + 3, 1 << 20, (4 << 20) + 2,
	};
	size_t max = (4 << 20) + 2;
	uint16_t *v = malloc(max + 2);
	char *dst = malloc(kvt_codec_bound(max));
	uint64_t s = seed;
	enum kvt_codec_id used;

	fill_normal_bf16(v, max / 2 + 1, &s);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		long stored = zstd16_round_trip(v, sizes[i], dst, &used);

		/* tiny blocks do not repay the frame's header and go raw */
		if (sizes[i] >= 4096) {
			assert_int_equal(used, KVT_CODEC_SHUF16_ZSTD);
			assert_true(stored * 13 < (long)sizes[i] * 10);
		}
	}
	free(dst);
	free(v);
}

/* A chunk that zstd cannot shrink is stored raw inside the frame while the
 * chunks around it are coded: 256 KiB of noise between two of bf16. */
static void shuf16_zstd_stores_a_noise_chunk_raw(void **state)
{
	size_t len = 3 * (256 << 10);
	uint16_t *v = malloc(len);
	char *dst = malloc(kvt_codec_bound(len));
	const uint8_t *w = (const uint8_t *)dst + 4;
	uint64_t s = seed;
	enum kvt_codec_id used;

	fill_normal_bf16(v, len / 2, &s);
	kvt_test_fill((char *)v + (256 << 10), 256 << 10, seed);
	zstd16_round_trip(v, len, dst, &used);
	assert_int_equal(used, KVT_CODEC_SHUF16_ZSTD);
	/* three chunk words: coded, raw (bit 31, length 2^17), coded */
	assert_int_equal(w[3] & 0x80, 0);
	assert_int_equal(w[7], 0x80);
	assert_int_equal(w[4] | w[5] << 8 | w[6] << 16, 1 << 17);
	assert_int_equal(w[11] & 0x80, 0);
	free(dst);
	free(v);
}

static void put32(char *p, uint32_t v)
{
	memcpy(p, &(uint8_t[4]){ (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
				 (uint8_t)(v >> 24) },
	       4);
}

/* Every field of the frame's header broken in turn, and the stored and raw
 * lengths wrong: each is -EBADMSG, and the block itself still decodes. */
static void corrupt_shuf16_zstd_frame_is_rejected(void **state)
{
	size_t len = 2 * (256 << 10) + 1, stored;
	uint16_t *v = malloc(len + 1);
	char *dst = malloc(kvt_codec_bound(len)), *bad = malloc(kvt_codec_bound(len));
	char *out = malloc(len + 2);
	enum kvt_codec_id used;
	uint64_t s = seed;
	uint32_t w0;

	fill_normal_bf16(v, len / 2 + 1, &s);
	stored = (size_t)zstd16_round_trip(v, len, dst, &used);
	assert_int_equal(used, KVT_CODEC_SHUF16_ZSTD);
	memcpy(&w0, dst + 4, 4);
#define RESET() memcpy(bad, dst, stored)
	codec_rejects_wrong_lengths(KVT_CODEC_SHUF16_ZSTD, dst, stored, len);
	/* an unknown version; chunk sizes below the minimum, above the
	 * maximum, and another (the words no longer add up); reserved bytes */
	codec_rejects_edits(KVT_CODEC_SHUF16_ZSTD, dst, stored, len,
			    (const size_t[][2]){ { 0, 2 }, { 1, 9 }, { 1, 18 }, { 1, 16 }, { 2, 1 },
						 { 3, 1 } },
			    6);
	RESET();
	put32(bad + 4, w0 + 1);   /* a chunk longer than written */
	codec_assert_rejected(KVT_CODEC_SHUF16_ZSTD, bad, stored, len);
	put32(bad + 4, 0);        /* an empty coded chunk */
	codec_assert_rejected(KVT_CODEC_SHUF16_ZSTD, bad, stored, len);
	put32(bad + 4, w0 | 1u << 31); /* a coded chunk said to be raw */
	codec_assert_rejected(KVT_CODEC_SHUF16_ZSTD, bad, stored, len);
	put32(bad + 4, (1u << 17) | 1u << 31); /* raw, of the chunk's length: sizes then do not add up */
	codec_assert_rejected(KVT_CODEC_SHUF16_ZSTD, bad, stored, len);
	put32(bad + 4, 0x7fffffff); /* a length past the end */
	codec_assert_rejected(KVT_CODEC_SHUF16_ZSTD, bad, stored, len);
	RESET();
	/* the zstd frame of chunk 0 (after the header, 3 words, the low plane)
	 * with its magic broken: zstd refuses it */
	bad[4 + 12 + len / 2] ^= 0xff;
	codec_assert_rejected(KVT_CODEC_SHUF16_ZSTD, bad, stored, len);
	RESET();
	assert_int_equal(kvt_codec_decode(KVT_CODEC_SHUF16_ZSTD, bad, stored, out, len, NULL), 0);
	assert_memory_equal(out, v, len);
#undef RESET
	free(out);
	free(bad);
	free(dst);
	free(v);
}

/* Random byte flips, half of them in the header and the zstd frame's head. */
static void shuf16_zstd_survives_random_corruption(void **state)
{
	size_t len = 256 << 10;
	const size_t hot[][2] = { { 0, 8 }, { 8 + len / 2, 8 + len / 2 + 64 } };
	uint16_t *v = malloc(len);
	char *dst = malloc(kvt_codec_bound(len));
	enum kvt_codec_id used;
	uint64_t s = seed;
	size_t stored;

	fill_normal_bf16(v, len / 2, &s);
	stored = (size_t)zstd16_round_trip(v, len, dst, &used);
	codec_survives_random_flips(KVT_CODEC_SHUF16_ZSTD, dst, stored, len, hot, 2, &s);
	free(dst);
	free(v);
}

/* Each thread keeps its own zstd contexts: blocks encoded and decoded on
 * four threads at once all round trip, and a thread's contexts go with it
 * (the leak checker of the sanitizer build sees any that stay). */
static void *zstd16_worker(void *arg)
{
	uint64_t s = *(uint64_t *)arg;
	size_t len = (256 << 10) + 6;
	uint16_t *v = malloc(len);
	char *dst = malloc(kvt_codec_bound(len)), *out = malloc(len);
	struct kvt_codec_cfg cfg;
	enum kvt_codec_id used;
	long bad = 0;

	kvt_codec_cfg_init(&cfg);
	cfg.id = KVT_CODEC_SHUF16_ZSTD;
	for (int i = 0; i < 20; i++) {
		long n;

		fill_normal_bf16(v, len / 2, &s);
		n = kvt_codec_encode(&cfg, v, len, dst, kvt_codec_bound(len), NULL, &used);
		if (n <= 0 || used != KVT_CODEC_SHUF16_ZSTD ||
		    kvt_codec_decode(used, dst, (size_t)n, out, len, NULL) || memcmp(out, v, len))
			bad++;
	}
	free(out);
	free(dst);
	free(v);
	return (void *)bad;
}

static void shuf16_zstd_round_trips_on_threads(void **state)
{
	pthread_t t[4];
	uint64_t seeds[4];

	for (int i = 0; i < 4; i++) {
		seeds[i] = seed + (uint64_t)i;
		assert_int_equal(pthread_create(&t[i], NULL, zstd16_worker, &seeds[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		void *bad;

		assert_int_equal(pthread_join(t[i], &bad), 0);
		assert_null(bad);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(structured_bf16_compresses_and_round_trips),
		cmocka_unit_test(incompressible_data_is_stored_raw),
		cmocka_unit_test(ratio_below_minimum_is_stored_raw),
		cmocka_unit_test(corrupt_stream_is_rejected),
		cmocka_unit_test(shuffle_inverts),
		cmocka_unit_test(old_shuf16_lz4_record_decodes),
		cmocka_unit_test(corrupt_blosc_frame_is_rejected),
		cmocka_unit_test(zstd_beats_bit_shuffle_on_random_mantissas),
		cmocka_unit_test(old_blosc_records_decode),
		cmocka_unit_test(old_shuf16_zstd_record_decodes),
		cmocka_unit_test(shuf16_zstd_round_trips_at_every_size),
		cmocka_unit_test(shuf16_zstd_stores_a_noise_chunk_raw),
		cmocka_unit_test(corrupt_shuf16_zstd_frame_is_rejected),
		cmocka_unit_test(shuf16_zstd_survives_random_corruption),
		cmocka_unit_test(shuf16_zstd_round_trips_on_threads),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
