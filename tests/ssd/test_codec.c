/* Codec round trips: LZ4 and shuffle+LZ4 on structured bf16 data, raw
 * fallback for incompressible data and low ratios, corrupt input rejected. */
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
	long lz4, shuf;

	fill_bf16(v, n, &s);
	round_trip(KVT_CODEC_LZ4, v, n * 2 - 1, &used, &lz4);
	round_trip(KVT_CODEC_SHUF16_LZ4, v, n * 2 - 1, &used, &shuf);
	assert_int_equal(used, KVT_CODEC_SHUF16_LZ4);
	/* the shuffle groups the exponent bytes: it must beat plain LZ4 here */
	assert_true(shuf < lz4);
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
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
