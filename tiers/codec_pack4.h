/* SPDX-License-Identifier: Apache-2.0 */
/* The shuf16-pack4 block codec (KVT_CODEC_SHUF16_PACK4): bf16 words split
 * into byte planes; the low plane (mantissa, noise) stored as is, each high
 * byte (sign and the top 7 exponent bits) replaced by a 4-bit code. In a KV
 * tensor almost every element of a chunk has one of 7 neighbouring exponent
 * values: the code is the sign and the offset from the chunk's lowest one,
 * offset 7 marks an escape (the byte follows in a list). 1.5 bytes an
 * element at most, ratio 1.33 at best: less than zstd's Huffman coding of
 * the same plane (shuf16-zstd), but the packing is a few SIMD instructions
 * per 32 elements, so it encodes and decodes near memcpy's speed.
 * Internal to tiers/codec.c, which dispatches on the codec id.
 *
 * Frame (all integers little-endian), for a block of len bytes, n = len / 2
 * elements, chunks of c = 2^log2c elements (the last one shorter, m):
 *
 *   u8  version, 1
 *   u8  log2c, 10 to 17
 *   u16 len mod 65536       what the decoder is told must agree
 *   u32 word[ceil(n / c)]   bit 31: the chunk's high bytes are stored raw
 *                           (m bytes); else bits 0-6: base, at most 121;
 *                           bits 7-30: escapes e; the chunk is ceil(m / 2)
 *                           code bytes then e escaped bytes, fewer than m
 *   u8  low plane[n]        byte 2i of the block at i
 *   ... chunk payloads, in order
 *   u8  last byte of the block when len is odd
 *
 * Code byte j holds element 2j's code in its low nibble, element 2j + 1's in
 * its high nibble (0 past the chunk's end). A code's bit 3 is the sign, bits
 * 0-2 the offset o: the high byte is sign << 7 | (base + o) for o < 7, the
 * next escaped byte for o = 7. The chunk size is the frame's, so it may
 * change without a new id. */
#ifndef KVT_TIERS_CODEC_PACK4_H
#define KVT_TIERS_CODEC_PACK4_H

#include <stddef.h>

/* Bytes the frame of a block of len bytes takes at most (every chunk raw). */
size_t kvt_pack4_bound(size_t len);

/* Encode src[0..len) into dst (cap >= kvt_pack4_bound(len)). Returns the
 * frame's length or -EINVAL for bad arguments. */
long kvt_pack4_encode(const void *src, size_t len, void *dst, size_t cap);

/* Decode the frame src[0..stored) into dst[0..raw). Returns 0 or -EBADMSG
 * when the frame does not describe exactly raw bytes. */
int kvt_pack4_decode(const void *src, size_t stored, void *dst, size_t raw);

#endif /* KVT_TIERS_CODEC_PACK4_H */
