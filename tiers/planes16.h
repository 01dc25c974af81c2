/* SPDX-License-Identifier: Apache-2.0 */
/* 16-bit words split into byte planes and merged back: element i's low byte
 * at lo[i], its high byte at hi[i]. In bf16/fp16 KV the high byte (sign and
 * exponent) varies little while the low byte (mantissa) is noise, so the
 * codecs treat the two planes apart. SSE2 (x86-64's baseline), AVX2 where
 * the CPU has it (checked once), else plain loops. */
#ifndef KVT_TIERS_PLANES16_H
#define KVT_TIERS_PLANES16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* n elements of s (2n bytes) into lo[0..n) and hi[0..n). */
void kvt_planes16_split(const uint8_t *s, uint8_t *lo, uint8_t *hi, size_t n);

/* The inverse: lo[i] and hi[i] into element i of d. */
void kvt_planes16_merge(const uint8_t *lo, const uint8_t *hi, uint8_t *d, size_t n);

/* Whether this CPU runs the AVX2 paths (here and in the codecs built on it). */
bool kvt_planes16_avx2(void);

/* The frames of the codecs built on the planes (tiers/codec_zstd.h,
 * tiers/codec_pack4.h) share these: little-endian words, and the chunks of
 * 2^log2c elements that n elements make (the last one shorter). */
static inline void kvt_planes16_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t kvt_planes16_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline size_t kvt_planes16_chunks(size_t n, unsigned log2c)
{
	return (n >> log2c) + ((n & (((size_t)1 << log2c) - 1)) != 0);
}

#endif /* KVT_TIERS_PLANES16_H */
