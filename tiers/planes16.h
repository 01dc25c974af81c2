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

#endif /* KVT_TIERS_PLANES16_H */
