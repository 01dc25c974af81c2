/* SPDX-License-Identifier: Apache-2.0 */
/* The shuf16-pack4 codec: the high byte of each bf16 word as a 4-bit code
 * (frame and codes in tiers/codec_pack4.h). One pass per chunk each way:
 * the encoder splits the planes and packs the codes from the same registers,
 * the decoder unpacks the codes, looks them up and merges the planes. */
#include "tiers/codec_pack4.h"
#include "tiers/planes16.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

#define VERSION 1
#define LOG2C_MIN 10
#define LOG2C_MAX 17
#define RAW_BIT (1u << 31)
#define ESC 7        /* the offset that marks an escape */
#define BASE_MAX 121 /* base + 6 stays a 7-bit exponent */

/* Chunks of 16Ki elements (32 KiB of the block): small enough that the
 * window of exponents follows a tensor whose scale changes along the block
 * (K then V, layer after layer), large enough that the 4-byte word per chunk
 * costs nothing. */
#define LOG2C 14

/* One element in 8 is sampled to place a chunk's window. */
#define SAMPLE_STEP 8

/* Escapes a packed chunk of m elements may hold: its payload must be shorter
 * than the m raw bytes it replaces. */
static size_t esc_max_of(size_t m)
{
	return m - (m + 1) / 2 - 1;
}

size_t kvt_pack4_bound(size_t len)
{
	return 4 + 4 * kvt_planes16_chunks(len / 2, LOG2C_MIN) + len;
}

/* The window of 7 exponent values (sign aside) that holds most sampled
 * elements of the chunk; its lowest value. */
static unsigned pick_base(const uint8_t *s, size_t m)
{
	uint32_t cnt[128] = { 0 }, win = 0, best = 0;
	unsigned base = 0;

	for (size_t i = 0; i < m; i += SAMPLE_STEP)
		cnt[s[2 * i + 1] & 0x7f]++;
	for (unsigned e = 0; e < 7; e++)
		win += cnt[e];
	best = win;
	for (unsigned b = 1; b <= BASE_MAX; b++) {
		win += cnt[b + 6] - cnt[b - 1];
		if (win > best)
			best = win, base = b;
	}
	return base;
}

/* One element's code; its high byte goes to esc[*e] when escaped. */
static inline unsigned code_of(uint8_t h, unsigned base)
{
	unsigned o = (uint8_t)((h & 0x7f) - base);

	return (o < ESC ? o : ESC) | (h >> 4 & 8);
}

/* Elements [from, m) one at a time. Returns the escapes so far, or SIZE_MAX
 * past esc_max. */
static size_t pack_tail(const uint8_t *s, size_t from, size_t m, unsigned base, uint8_t *lo,
			uint8_t *codes, uint8_t *esc, size_t e, size_t esc_max)
{
	for (size_t i = from; i < m; i++) {
		unsigned c = code_of(s[2 * i + 1], base);

		lo[i] = s[2 * i];
		if ((c & 7) == ESC) {
			if (e == esc_max)
				return SIZE_MAX;
			esc[e++] = s[2 * i + 1];
		}
		if (i & 1)
			codes[i / 2] |= (uint8_t)(c << 4);
		else
			codes[i / 2] = (uint8_t)c;
	}
	return e;
}

#ifdef HAVE_AVX2_PATH
/* 64 elements a step: split as in tiers/planes16.c, the offsets by one
 * subtraction and an unsigned min (a byte below the base wraps above 7),
 * two codes a byte by one multiply-add. Sets *done to the elements taken. */
__attribute__((target("avx2"))) static size_t pack_avx2(const uint8_t *s, size_t m,
							 unsigned base, uint8_t *lo,
							 uint8_t *codes, uint8_t *esc,
							 size_t esc_max, size_t *done)
{
	const __m256i ff = _mm256_set1_epi16(0xff), x7f = _mm256_set1_epi8(0x7f);
	const __m256i b = _mm256_set1_epi8((char)base), esc7 = _mm256_set1_epi8(ESC);
	const __m256i sign = _mm256_set1_epi8(8), pair = _mm256_set1_epi16(0x1001);
	size_t i = 0, e = 0;

	for (; i + 64 <= m; i += 64) {
		const __m256i *v = (const __m256i *)(const void *)(s + 2 * i);
		__m256i a0 = _mm256_loadu_si256(v), a1 = _mm256_loadu_si256(v + 1);
		__m256i a2 = _mm256_loadu_si256(v + 2), a3 = _mm256_loadu_si256(v + 3);
		__m256i l0 = _mm256_packus_epi16(_mm256_and_si256(a0, ff), _mm256_and_si256(a1, ff));
		__m256i l1 = _mm256_packus_epi16(_mm256_and_si256(a2, ff), _mm256_and_si256(a3, ff));
		__m256i h0 = _mm256_packus_epi16(_mm256_srli_epi16(a0, 8), _mm256_srli_epi16(a1, 8));
		__m256i h1 = _mm256_packus_epi16(_mm256_srli_epi16(a2, 8), _mm256_srli_epi16(a3, 8));
		__m256i o0, o1, c0, c1;
		uint64_t mask;

		h0 = _mm256_permute4x64_epi64(h0, 0xd8);
		h1 = _mm256_permute4x64_epi64(h1, 0xd8);
		_mm256_storeu_si256((__m256i *)(void *)(lo + i), _mm256_permute4x64_epi64(l0, 0xd8));
		_mm256_storeu_si256((__m256i *)(void *)(lo + i + 32),
				    _mm256_permute4x64_epi64(l1, 0xd8));
		o0 = _mm256_min_epu8(_mm256_sub_epi8(_mm256_and_si256(h0, x7f), b), esc7);
		o1 = _mm256_min_epu8(_mm256_sub_epi8(_mm256_and_si256(h1, x7f), b), esc7);
		mask = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(o0, esc7)) |
		       (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(o1, esc7)) << 32;
		if (mask) {
			uint8_t hb[64];

			if (e + (size_t)__builtin_popcountll(mask) > esc_max)
				return SIZE_MAX;
			_mm256_storeu_si256((__m256i *)(void *)hb, h0);
			_mm256_storeu_si256((__m256i *)(void *)(hb + 32), h1);
			for (; mask; mask &= mask - 1)
				esc[e++] = hb[__builtin_ctzll(mask)];
		}
		/* the sign: bit 7 of each byte to bit 3 (a 16-bit shift keeps
		 * bit 3 of each byte within it) */
		c0 = _mm256_or_si256(o0, _mm256_and_si256(_mm256_srli_epi16(h0, 4), sign));
		c1 = _mm256_or_si256(o1, _mm256_and_si256(_mm256_srli_epi16(h1, 4), sign));
		c0 = _mm256_packus_epi16(_mm256_maddubs_epi16(c0, pair),
					 _mm256_maddubs_epi16(c1, pair));
		_mm256_storeu_si256((__m256i *)(void *)(codes + i / 2),
				    _mm256_permute4x64_epi64(c0, 0xd8));
	}
	*done = i;
	return e;
}
#endif

/* A chunk of m elements of s: its low bytes into lo, its code bytes and
 * escapes into p. Returns the payload's length, or 0 when packing would not
 * be shorter than the raw plane (p then holds nothing useful). */
static size_t pack_chunk(const uint8_t *s, size_t m, unsigned base, uint8_t *lo, uint8_t *p,
			 size_t *escapes)
{
	size_t ncode = (m + 1) / 2, esc_max = esc_max_of(m), done = 0, e = 0;
	uint8_t *esc = p + ncode;

#ifdef HAVE_AVX2_PATH
	if (kvt_planes16_avx2())
		e = pack_avx2(s, m, base, lo, p, esc, esc_max, &done);
#endif
	if (e != SIZE_MAX)
		e = pack_tail(s, done, m, base, lo, p, esc, e, esc_max);
	if (e == SIZE_MAX)
		return 0;
	*escapes = e;
	return ncode + e;
}

long kvt_pack4_encode(const void *src, size_t len, void *dst, size_t cap)
{
	const uint8_t *s = src;
	uint8_t *out = dst, *lo, *p;
	size_t n = len / 2, nc, c = (size_t)1 << LOG2C;

	if (!src || !dst || cap < kvt_pack4_bound(len) || len > (size_t)LONG_MAX / 2)
		return -EINVAL;
	nc = kvt_planes16_chunks(n, LOG2C);
	out[0] = VERSION, out[1] = LOG2C, out[2] = (uint8_t)len, out[3] = (uint8_t)(len >> 8);
	lo = out + 4 + 4 * nc;
	p = lo + n;
	for (size_t k = 0; k < nc; k++) {
		size_t m = n - k * c < c ? n - k * c : c, e = 0, r = 0;
		const uint8_t *sk = s + 2 * k * c;
		unsigned base = pick_base(sk, m);

		if (m >= 4)
			r = pack_chunk(sk, m, base, lo + k * c, p, &e);
		if (r) {
			kvt_planes16_put_le32(out + 4 + 4 * k, (uint32_t)base | (uint32_t)e << 7);
		} else {
			kvt_planes16_split(sk, lo + k * c, p, m);
			kvt_planes16_put_le32(out + 4 + 4 * k, (uint32_t)m | RAW_BIT);
			r = m;
		}
		p += r;
	}
	if (len & 1)
		*p++ = s[len - 1];
	return (long)(p - out);
}

/* The high byte of each of the 16 codes; escapes map to 0 and are patched. */
static void table_of(unsigned base, uint8_t tab[16])
{
	for (unsigned code = 0; code < 16; code++)
		tab[code] = (code & 7) == ESC ? 0 : (uint8_t)((code & 8) << 4 | (base + (code & 7)));
}

/* Elements [from, m) one at a time; esc[*k..e) the escapes left. Returns 0
 * or -EBADMSG when the escapes run out. */
static int unpack_tail(const uint8_t *lo, const uint8_t *codes, const uint8_t *esc, size_t e,
		       size_t *k, const uint8_t tab[16], size_t from, size_t m, uint8_t *d)
{
	for (size_t i = from; i < m; i++) {
		unsigned c = codes[i / 2] >> (4 * (i & 1)) & 15;

		d[2 * i] = lo[i];
		if ((c & 7) != ESC) {
			d[2 * i + 1] = tab[c];
		} else {
			if (*k == e)
				return -EBADMSG;
			d[2 * i + 1] = esc[(*k)++];
		}
	}
	return 0;
}

#ifdef HAVE_AVX2_PATH
/* 64 elements a step: nibbles unpacked in lane order (elements 0-15 and
 * 32-47, then 16-31 and 48-63), looked up with one shuffle, merged with the
 * low bytes of the same order and put back in element order by the 128-bit
 * permutes. Escapes are patched into d after each step. */
__attribute__((target("avx2"))) static int unpack_avx2(const uint8_t *lo, const uint8_t *codes,
						       const uint8_t *esc, size_t e, size_t *k,
						       const uint8_t tab16[16], size_t m,
						       uint8_t *d, size_t *done)
{
	const __m256i tab = _mm256_broadcastsi128_si256(
		_mm_loadu_si128((const __m128i *)(const void *)tab16));
	const __m256i x0f = _mm256_set1_epi8(0x0f), esc7 = _mm256_set1_epi8(ESC);
	size_t i = 0;

	for (; i + 64 <= m; i += 64) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(codes + i / 2));
		__m256i ln = _mm256_and_si256(x, x0f);
		__m256i hn = _mm256_and_si256(_mm256_srli_epi16(x, 4), x0f);
		__m256i c0 = _mm256_unpacklo_epi8(ln, hn), c1 = _mm256_unpackhi_epi8(ln, hn);
		__m256i h0 = _mm256_shuffle_epi8(tab, c0), h1 = _mm256_shuffle_epi8(tab, c1);
		__m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(lo + i));
		__m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(lo + i + 32));
		__m256i la = _mm256_permute2x128_si256(l0, l1, 0x20);
		__m256i lb = _mm256_permute2x128_si256(l0, l1, 0x31);
		__m256i oa = _mm256_unpacklo_epi8(la, h0), ob = _mm256_unpackhi_epi8(la, h0);
		__m256i oc = _mm256_unpacklo_epi8(lb, h1), od = _mm256_unpackhi_epi8(lb, h1);
		__m256i *out = (__m256i *)(void *)(d + 2 * i);
		uint32_t m0, m1;

		_mm256_storeu_si256(out, _mm256_permute2x128_si256(oa, ob, 0x20));
		_mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(oc, od, 0x20));
		_mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(oa, ob, 0x31));
		_mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(oc, od, 0x31));
		m0 = (uint32_t)_mm256_movemask_epi8(
			_mm256_cmpeq_epi8(_mm256_and_si256(c0, esc7), esc7));
		m1 = (uint32_t)_mm256_movemask_epi8(
			_mm256_cmpeq_epi8(_mm256_and_si256(c1, esc7), esc7));
		if (m0 | m1) {
			uint64_t mask = (m0 & 0xffff) | (uint64_t)(m1 & 0xffff) << 16 |
					(uint64_t)(m0 >> 16) << 32 | (uint64_t)(m1 >> 16) << 48;

			if (*k + (size_t)__builtin_popcountll(mask) > e)
				return -EBADMSG;
			for (; mask; mask &= mask - 1)
				d[2 * (i + (size_t)__builtin_ctzll(mask)) + 1] = esc[(*k)++];
		}
	}
	*done = i;
	return 0;
}
#endif

/* A packed chunk of m elements with e escapes into d. */
static int unpack_chunk(const uint8_t *lo, const uint8_t *p, size_t m, unsigned base, size_t e,
			uint8_t *d)
{
	size_t ncode = (m + 1) / 2, k = 0, done = 0;
	uint8_t tab[16];
	int rc = 0;

	/* past the chunk's last element, a code byte's high nibble is 0 */
	if ((m & 1) && (p[ncode - 1] >> 4))
		return -EBADMSG;
	table_of(base, tab);
#ifdef HAVE_AVX2_PATH
	if (kvt_planes16_avx2())
		rc = unpack_avx2(lo, p, p + ncode, e, &k, tab, m, d, &done);
#endif
	if (!rc)
		rc = unpack_tail(lo, p, p + ncode, e, &k, tab, done, m, d);
	return rc ? rc : k == e ? 0 : -EBADMSG;
}

int kvt_pack4_decode(const void *src, size_t stored, void *dst, size_t raw)
{
	const uint8_t *in = src, *lo, *p;
	uint8_t *d = dst;
	size_t n = raw / 2, nc, c, head, total = 0;

	/* the header and every chunk's length must add up to exactly stored
	 * before any byte is decoded */
	if (stored < 4 || in[0] != VERSION || in[1] < LOG2C_MIN || in[1] > LOG2C_MAX ||
	    (in[2] | (size_t)in[3] << 8) != (raw & 0xffff))
		return -EBADMSG;
	c = (size_t)1 << in[1];
	nc = kvt_planes16_chunks(n, in[1]);
	if (nc > (stored - 4) / 4)
		return -EBADMSG;
	head = 4 + 4 * nc;
	for (size_t k = 0; k < nc; k++) {
		uint32_t w = kvt_planes16_get_le32(in + 4 + 4 * k);
		size_t m = n - k * c < c ? n - k * c : c, e = (w & ~RAW_BIT) >> 7;

		if (w & RAW_BIT) {
			if ((w & ~RAW_BIT) != m)
				return -EBADMSG;
			total += m;
		} else {
			if ((w & 0x7f) > BASE_MAX || m < 4 || e > esc_max_of(m))
				return -EBADMSG;
			total += (m + 1) / 2 + e;
		}
	}
	if (stored - head < n || stored - head - n != total + (raw & 1))
		return -EBADMSG;
	lo = in + head;
	p = lo + n;
	for (size_t k = 0; k < nc; k++) {
		uint32_t w = kvt_planes16_get_le32(in + 4 + 4 * k);
		size_t m = n - k * c < c ? n - k * c : c, e = (w & ~RAW_BIT) >> 7;

		if (w & RAW_BIT) {
			kvt_planes16_merge(lo + k * c, p, d + 2 * k * c, m);
			p += m;
		} else {
			if (unpack_chunk(lo + k * c, p, m, w & 0x7f, e, d + 2 * k * c))
				return -EBADMSG;
			p += (m + 1) / 2 + e;
		}
	}
	if (raw & 1)
		d[raw - 1] = *p;
	return 0;
}
