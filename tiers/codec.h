/* SPDX-License-Identifier: Apache-2.0 */
/* Block codecs of the SSD tier: LZ4, optionally after a byte or bit shuffle of
 * 16-bit elements, or zstd after a byte shuffle, with a fallback to raw bytes
 * when compression does not pay. blosc-bitshuf16-lz4 is a c-blosc frame (its
 * SIMD bit shuffle, then LZ4); blosc-shuf16-zstd is a c-blosc frame too (its
 * SIMD byte shuffle, then zstd, whose Huffman coding of the exponent bytes
 * LZ4 cannot match); shuf16-zstd splits the byte planes itself, stores the
 * mantissa plane as is and has zstd, called directly with contexts kept per
 * thread, Huffman-code the exponent plane alone (tiers/codec_zstd.h: the best
 * ratio and the fastest of these on bf16); shuf16-lz4 is the older
 * hand-written byte shuffle, still encoded and decoded so that records
 * written with it read back.
 *
 * Why the shuffle: in bf16/fp16 KV the high byte of each element (sign and
 * exponent) varies little while the low byte (mantissa) is noise. Grouping all
 * high bytes together gives LZ4 long runs to match that interleaved bytes hide.
 *
 * The codec of a record is stored in its header, so a reader needs no
 * configuration to decode it. */
#ifndef KVT_TIERS_CODEC_H
#define KVT_TIERS_CODEC_H

#include <stddef.h>
#include <stdint.h>

/* On-disk codec ids (never renumber). */
enum kvt_codec_id {
	KVT_CODEC_RAW = 0,        /* bytes as given */
	KVT_CODEC_LZ4 = 1,        /* LZ4 block format */
	KVT_CODEC_SHUF16_LZ4 = 2, /* 16-bit byte shuffle, then LZ4 (kept for old records) */
	KVT_CODEC_BLOSC_BITSHUF16_LZ4 = 3, /* c-blosc frame: 16-bit bit shuffle, LZ4 */
	KVT_CODEC_BLOSC_SHUF16_ZSTD = 4,   /* c-blosc frame: 16-bit byte shuffle, zstd */
	KVT_CODEC_SHUF16_ZSTD = 5, /* low byte plane raw, high plane zstd (tiers/codec_zstd.h) */
	KVT_CODEC_SHUF16_PACK4 = 6, /* low plane raw, high plane 4-bit codes (tiers/codec_pack4.h) */
	KVT_CODEC_LAST = KVT_CODEC_SHUF16_PACK4,
};

/* A namespace's choice of codec. */
struct kvt_codec_cfg {
	enum kvt_codec_id id; /* RAW disables compression */
	int lz4_accel;        /* LZ4 acceleration, >= 1 (1 = best ratio) */
	double min_ratio;     /* store raw unless raw/stored >= this (e.g. 1.1) */
};

/* Defaults: RAW, accel 1, min_ratio 1.1. */
void kvt_codec_cfg_init(struct kvt_codec_cfg *cfg);

/* "raw", "lz4", "shuf16-lz4", "blosc-bitshuf16-lz4", "blosc-shuf16-zstd",
 * "shuf16-zstd", "shuf16-pack4", or NULL for an unknown id. */
const char *kvt_codec_name(enum kvt_codec_id id);

/* Parse a codec name as kvt_codec_name prints it. Returns the id or -EINVAL. */
int kvt_codec_parse(const char *name);

/* Bytes of dst that kvt_codec_encode may need for a block of len bytes. */
size_t kvt_codec_bound(size_t len);

/* Bytes of scratch kvt_codec_encode/decode need for a block of len bytes
 * (the shuffled copy), 0 if the codec needs none. */
size_t kvt_codec_scratch_bytes(enum kvt_codec_id id, size_t len);

/* Encode src[0..len) into dst (cap >= kvt_codec_bound(len)) using scratch
 * (>= kvt_codec_scratch_bytes). Returns the stored length and sets *used to
 * the codec applied: cfg's codec, or KVT_CODEC_RAW (dst holds a copy of src)
 * when the ratio is below cfg->min_ratio or the input is not compressible.
 * Returns -EINVAL for bad arguments (len above INT_MAX for LZ4). */
long kvt_codec_encode(const struct kvt_codec_cfg *cfg, const void *src, size_t len,
		      void *dst, size_t cap, void *scratch, enum kvt_codec_id *used);

/* Decode stored bytes src[0..stored) written with codec id into dst, which must
 * receive exactly raw bytes. Returns 0, -EINVAL for an unknown codec, or
 * -EBADMSG when the stored bytes do not decode to exactly raw bytes. */
int kvt_codec_decode(enum kvt_codec_id id, const void *src, size_t stored, void *dst,
		     size_t raw, void *scratch);

/* The byte shuffle itself, exposed for the bench: n16 elements of 2 bytes.
 * shuffle puts every low byte first, then every high byte; unshuffle undoes it.
 * A trailing odd byte is copied as is. */
void kvt_shuffle16(const void *src, void *dst, size_t len);
void kvt_unshuffle16(const void *src, void *dst, size_t len);

#endif /* KVT_TIERS_CODEC_H */
