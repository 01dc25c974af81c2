/* SPDX-License-Identifier: Apache-2.0 */
/* The shuf16-zstd block codec (KVT_CODEC_SHUF16_ZSTD): bf16/fp16 words split
 * into a low-byte and a high-byte plane; the low plane (mantissa, noise) is
 * stored as is, the high plane (sign and exponent) is coded by zstd, called
 * directly with contexts kept per thread and its literals always Huffman
 * coded. Internal to tiers/codec.c, which dispatches on the codec id.
 *
 * Frame (all integers little-endian), for a block of len bytes, n = len / 2
 * elements, chunks of c = 2^log2c high bytes (the last one shorter):
 *
 *   u8  version, 1
 *   u8  log2c, 10 to 17
 *   u16 0
 *   u32 word[ceil(n / c)]   bit 31: the chunk is stored raw; bits 0-30: its
 *                           stored length (raw: the chunk's length; else a
 *                           zstd frame, shorter than the chunk)
 *   u8  low plane[n]        byte 2i of the block at i
 *   ... chunk payloads, in order: the high plane (byte 2i + 1 at i)
 *   u8  last byte of the block when len is odd
 *
 * The chunk size is the frame's, so it may change without a new id. */
#ifndef KVT_TIERS_CODEC_ZSTD_H
#define KVT_TIERS_CODEC_ZSTD_H

#include <stddef.h>

/* Bytes the frame of a block of len bytes takes at most (every chunk raw). */
size_t kvt_zstd16_bound(size_t len);

/* Encode src[0..len) into dst (cap >= kvt_zstd16_bound(len)). Returns the
 * frame's length, 0 when this thread's zstd context cannot be had (the caller
 * stores the block raw), or -EINVAL for bad arguments. */
long kvt_zstd16_encode(const void *src, size_t len, void *dst, size_t cap);

/* Decode the frame src[0..stored) into dst[0..raw). Returns 0, -EBADMSG when
 * the frame does not describe exactly raw bytes or a chunk does not decode,
 * -ENOMEM when this thread's zstd context cannot be had. */
int kvt_zstd16_decode(const void *src, size_t stored, void *dst, size_t raw);

#endif /* KVT_TIERS_CODEC_ZSTD_H */
