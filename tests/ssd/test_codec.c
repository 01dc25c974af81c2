/* Codec round trips: every codec id on structured bf16 data, raw fallback for
 * incompressible data and low ratios, corrupt input rejected, and a record
 * written by the hand-written shuf16-lz4 encoder still decoding. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "tiers/codec.h"

static uint64_t seed;

static uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

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
	/* every id round trips, even-length blocks too; plain LZ4 may fall back
	 * to raw here (ratio below 1.1), the shuffled codecs must not */
	for (int id = KVT_CODEC_RAW; id <= KVT_CODEC_BLOSC_BITSHUF16_LZ4; id++) {
		round_trip((enum kvt_codec_id)id, v, n * 2 - 2, &used, &shuf);
		assert_true(used == (enum kvt_codec_id)id ||
			    (id == KVT_CODEC_LZ4 && used == KVT_CODEC_RAW));
	}
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
	kvt_codec_cfg_init(&cfg);
	cfg.id = KVT_CODEC_BLOSC_BITSHUF16_LZ4;
	stored = kvt_codec_encode(&cfg, v, len, dst, kvt_codec_bound(len), NULL, &used);
	assert_int_equal(used, KVT_CODEC_BLOSC_BITSHUF16_LZ4);
	assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored, out, len, NULL), 0);
	assert_memory_equal(out, v, len);
	assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored - 1, out, len, NULL), -EBADMSG);
	assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored, out, len - 2, NULL), -EBADMSG);
	assert_int_equal(kvt_codec_decode(used, dst, 8, out, len, NULL), -EBADMSG);
	/* a frame that claims more stored bytes than the record holds */
	dst[12] ^= 0x40;
	assert_int_equal(kvt_codec_decode(used, dst, (size_t)stored, out, len, NULL), -EBADMSG);
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
	assert_int_equal(kvt_codec_parse("zstd"), -EINVAL);
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
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
