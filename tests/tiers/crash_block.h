/* SPDX-License-Identifier: Apache-2.0 */
/* The blocks of the crash test: key, length, bytes and codec are functions
 * of the block's number, so the checker can rebuild what the writer wrote. */
#ifndef KVT_TESTS_SSD_CRASH_BLOCK_H
#define KVT_TESTS_SSD_CRASH_BLOCK_H

#include <stdint.h>
#include <string.h>

#include "helpers.h"
#include "tiers/ssd.h"

#define CRASH_NS 0x5eed
#define CRASH_MAX_LEN (192u << 10)

static inline struct kvt_key crash_key(uint64_t i)
{
	struct kvt_key k;

	memset(&k, 0xc3, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	return k;
}

static inline size_t crash_len(uint64_t i)
{
	uint64_t s = i * 0x9e3779b97f4a7c15ULL + 1;

	/* from 1 byte to 192 KiB; a quarter of them whole pages */
	size_t len = 1 + kvt_test_rand(&s) % CRASH_MAX_LEN;
	return i % 4 == 0 ? (len + 4095) / 4096 * 4096 : len;
}

/* raw, LZ4, the byte shuffle + LZ4, shuf16-zstd and shuf16-pack4, each also
 * on the whole-page blocks (every fourth: i = 4k takes ids[k % 5]) */
static inline enum kvt_codec_id crash_codec(uint64_t i)
{
	static const enum kvt_codec_id ids[] = { KVT_CODEC_RAW, KVT_CODEC_LZ4,
						 KVT_CODEC_SHUF16_LZ4, KVT_CODEC_SHUF16_ZSTD,
						 KVT_CODEC_SHUF16_PACK4 };

	return ids[(i + i / 4 * 2) % 5];
}

static inline void crash_fill(uint64_t i, void *buf)
{
	size_t len = crash_len(i);

	kvt_test_fill(buf, len, i + 1);
	/* compressible blocks: a run of one byte value in their first half */
	if (crash_codec(i) != KVT_CODEC_RAW)
		memset(buf, (int)(i & 0xff), len / 2);
}

#endif
