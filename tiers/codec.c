/* SPDX-License-Identifier: Apache-2.0 */
/* LZ4, the 16-bit byte shuffle, c-blosc's shuffled LZ4 and zstd, and the two
 * codecs of byte planes (tiers/codec_zstd.h, tiers/codec_pack4.h). */
#include "tiers/codec.h"
#include "tiers/codec_pack4.h"
#include "tiers/codec_zstd.h"
#include "tiers/planes16.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include <blosc.h>
#include <lz4.h>

/* blosc's level: with LZ4 it sets the internal block size and acceleration.
 * Overridable at build time for measurements; the on-disk frame records what
 * was used, so any level decodes. */
#ifndef KVT_CODEC_BLOSC_CLEVEL
#define KVT_CODEC_BLOSC_CLEVEL 5
#endif

void kvt_codec_cfg_init(struct kvt_codec_cfg *cfg)
{
	cfg->id = KVT_CODEC_RAW;
	cfg->lz4_accel = 1;
	cfg->min_ratio = 1.1;
}

const char *kvt_codec_name(enum kvt_codec_id id)
{
	switch (id) {
	case KVT_CODEC_RAW: return "raw";
	case KVT_CODEC_LZ4: return "lz4";
	case KVT_CODEC_SHUF16_LZ4: return "shuf16-lz4";
	case KVT_CODEC_BLOSC_BITSHUF16_LZ4: return "blosc-bitshuf16-lz4";
	case KVT_CODEC_BLOSC_SHUF16_ZSTD: return "blosc-shuf16-zstd";
	case KVT_CODEC_SHUF16_ZSTD: return "shuf16-zstd";
	case KVT_CODEC_SHUF16_PACK4: return "shuf16-pack4";
	}
	return NULL;
}

int kvt_codec_parse(const char *name)
{
	for (int id = KVT_CODEC_RAW; id <= KVT_CODEC_LAST; id++)
		if (name && !strcmp(name, kvt_codec_name((enum kvt_codec_id)id)))
			return id;
	return -EINVAL;
}

size_t kvt_codec_bound(size_t len)
{
	/* LZ4_COMPRESSBOUND, computed in size_t so large blocks do not overflow */
	return len + len / 255 + 16;
}

size_t kvt_codec_scratch_bytes(enum kvt_codec_id id, size_t len)
{
	return id == KVT_CODEC_SHUF16_LZ4 ? len : 0;
}

void kvt_shuffle16(const void *src, void *dst, size_t len)
{
	kvt_planes16_split(src, dst, (uint8_t *)dst + len / 2, len / 2);
	if (len & 1)
		((uint8_t *)dst)[len - 1] = ((const uint8_t *)src)[len - 1];
}

void kvt_unshuffle16(const void *src, void *dst, size_t len)
{
	kvt_planes16_merge(src, (const uint8_t *)src + len / 2, dst, len / 2);
	if (len & 1)
		((uint8_t *)dst)[len - 1] = ((const uint8_t *)src)[len - 1];
}

/* How each c-blosc codec calls blosc. The frame records the filter, the
 * compressor and the block size, so a reader needs none of this and these
 * may change without a new id.
 *
 * bit shuffle + LZ4: blosc picks its internal block size from the level and
 * compresses each half of a shuffled block (the low then the high bits of
 * every element) as its own LZ4 stream, storing a half raw when LZ4 cannot
 * shrink it.
 *
 * byte shuffle + zstd: blosc does not split a block for zstd, so a block of
 * 256 KiB shuffles into two planes of 128 KiB, which is zstd's own block
 * size: the mantissa plane becomes a block zstd stores raw, the exponent
 * plane one with its own Huffman table (blosc's own choice, 128 KiB, puts
 * both planes in one zstd block: 1.36 against 1.46 on the bench's K/V; a
 * record under 256 KiB does the same). Level 1 (blosc's 1 is zstd's 1). */
struct blosc_variant {
	int clevel, shuffle;
	const char *compressor;
	size_t blocksize; /* 0: blosc's choice */
};

static const struct blosc_variant blosc_bitshuf16_lz4 = {
	KVT_CODEC_BLOSC_CLEVEL, BLOSC_BITSHUFFLE, BLOSC_LZ4_COMPNAME, 0
};
static const struct blosc_variant blosc_shuf16_zstd = {
	1, BLOSC_SHUFFLE, BLOSC_ZSTD_COMPNAME, 256 << 10
};

/* One thread and an explicit context (the _ctx calls): blosc's global calls
 * take a process-wide lock, and the tier already encodes on several threads.
 * Returns the frame's length, 0 when it does not fit or blosc fails (a
 * compressor this libblosc was built without: the block is then stored raw),
 * -EINVAL for a block too large. */
static long blosc_encode(const struct blosc_variant *v, const void *src, size_t len, void *dst,
			 size_t cap)
{
	int n;

	if (len > (size_t)BLOSC_MAX_BUFFERSIZE)
		return -EINVAL;
	n = blosc_compress_ctx(v->clevel, v->shuffle, 2, len, src, dst, cap, v->compressor,
			       v->blocksize, 1);
	return n > 0 ? n : 0;
}

static int blosc_decode(const void *src, size_t stored, void *dst, size_t raw)
{
	size_t nbytes = 0, cbytes = 0, blocksize = 0;

	/* the header must describe exactly these bytes before blosc reads on */
	if (stored < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(src, stored, &nbytes) ||
	    nbytes != raw)
		return -EBADMSG;
	blosc_cbuffer_sizes(src, &nbytes, &cbytes, &blocksize);
	if (cbytes != stored)
		return -EBADMSG;
	if (blosc_decompress_ctx(src, dst, raw, 1) != (int)raw)
		return -EBADMSG;
	return 0;
}

long kvt_codec_encode(const struct kvt_codec_cfg *cfg, const void *src, size_t len,
		      void *dst, size_t cap, void *scratch, enum kvt_codec_id *used)
{
	const void *in = src;
	int n;

	if (!cfg || !src || !dst || !used || cap < kvt_codec_bound(len))
		return -EINVAL;
	if (cfg->id == KVT_CODEC_RAW || len == 0)
		goto raw;
	if (cfg->id == KVT_CODEC_BLOSC_BITSHUF16_LZ4 || cfg->id == KVT_CODEC_BLOSC_SHUF16_ZSTD) {
		long b = blosc_encode(cfg->id == KVT_CODEC_BLOSC_BITSHUF16_LZ4 ? &blosc_bitshuf16_lz4
									      : &blosc_shuf16_zstd,
				      src, len, dst, cap);

		if (b < 0)
			return b;
		n = b > INT_MAX ? 0 : (int)b;
		goto check;
	}
	if (cfg->id == KVT_CODEC_SHUF16_ZSTD || cfg->id == KVT_CODEC_SHUF16_PACK4) {
		long b = cfg->id == KVT_CODEC_SHUF16_ZSTD ? kvt_zstd16_encode(src, len, dst, cap)
							  : kvt_pack4_encode(src, len, dst, cap);

		if (b < 0)
			return b;
		if (b == 0 || (double)len / (double)b < cfg->min_ratio)
			goto raw;
		*used = cfg->id;
		return b;
	}
	if (cfg->id != KVT_CODEC_LZ4 && cfg->id != KVT_CODEC_SHUF16_LZ4)
		return -EINVAL;
	if (len > (size_t)LZ4_MAX_INPUT_SIZE)
		return -EINVAL;
	if (cfg->id == KVT_CODEC_SHUF16_LZ4) {
		if (!scratch)
			return -EINVAL;
		kvt_shuffle16(src, scratch, len);
		in = scratch;
	}
	n = LZ4_compress_fast(in, dst, (int)len, (int)(cap > INT_MAX ? INT_MAX : cap),
			      cfg->lz4_accel < 1 ? 1 : cfg->lz4_accel);
check:
	if (n <= 0 || (double)len / (double)n < cfg->min_ratio)
		goto raw;
	*used = cfg->id;
	return n;
raw:
	memcpy(dst, src, len);
	*used = KVT_CODEC_RAW;
	return (long)len;
}

int kvt_codec_decode(enum kvt_codec_id id, const void *src, size_t stored, void *dst,
		     size_t raw, void *scratch)
{
	int n;

	switch (id) {
	case KVT_CODEC_RAW:
		if (stored != raw)
			return -EBADMSG;
		memcpy(dst, src, raw);
		return 0;
	case KVT_CODEC_LZ4:
	case KVT_CODEC_SHUF16_LZ4:
		if (stored > INT_MAX || raw > INT_MAX)
			return -EBADMSG;
		if (id == KVT_CODEC_SHUF16_LZ4 && !scratch)
			return -EINVAL;
		n = LZ4_decompress_safe(src, id == KVT_CODEC_LZ4 ? dst : scratch, (int)stored,
					(int)raw);
		if (n < 0 || (size_t)n != raw)
			return -EBADMSG;
		if (id == KVT_CODEC_SHUF16_LZ4)
			kvt_unshuffle16(scratch, dst, raw);
		return 0;
	case KVT_CODEC_BLOSC_BITSHUF16_LZ4:
	case KVT_CODEC_BLOSC_SHUF16_ZSTD:
		return blosc_decode(src, stored, dst, raw);
	case KVT_CODEC_SHUF16_ZSTD:
		return kvt_zstd16_decode(src, stored, dst, raw);
	case KVT_CODEC_SHUF16_PACK4:
		return kvt_pack4_decode(src, stored, dst, raw);
	}
	return -EINVAL;
}
