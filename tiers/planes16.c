/* SPDX-License-Identifier: Apache-2.0 */
/* Byte planes of 16-bit words (tiers/planes16.h). */
#include "tiers/planes16.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

static bool avx2;
static pthread_once_t avx2_once = PTHREAD_ONCE_INIT;

/* KVTIER_NO_AVX2 set (to anything but "0") keeps to SSE2 and plain loops:
 * how the tests run those paths on a CPU that has AVX2. */
static void avx2_check(void)
{
#ifdef HAVE_AVX2_PATH
	const char *off = getenv("KVTIER_NO_AVX2");

	avx2 = __builtin_cpu_supports("avx2") && !(off && *off && strcmp(off, "0"));
#endif
}

bool kvt_planes16_avx2(void)
{
	pthread_once(&avx2_once, avx2_check);
	return avx2;
}

static void split_sse2(const uint8_t *s, uint8_t *lo, uint8_t *hi, size_t n)
{
	size_t i = 0;

#ifdef __SSE2__
	const __m128i m = _mm_set1_epi16(0xff);

	for (; i + 16 <= n; i += 16) {
		__m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i));
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i + 16));

		_mm_storeu_si128((__m128i *)(void *)(lo + i),
				 _mm_packus_epi16(_mm_and_si128(a, m), _mm_and_si128(b, m)));
		_mm_storeu_si128((__m128i *)(void *)(hi + i),
				 _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
	}
#endif
	for (; i < n; i++) {
		lo[i] = s[2 * i];
		hi[i] = s[2 * i + 1];
	}
}

static void merge_sse2(const uint8_t *lo, const uint8_t *hi, uint8_t *d, size_t n)
{
	size_t i = 0;

#ifdef __SSE2__
	for (; i + 16 <= n; i += 16) {
		__m128i l = _mm_loadu_si128((const __m128i *)(const void *)(lo + i));
		__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(hi + i));

		_mm_storeu_si128((__m128i *)(void *)(d + 2 * i), _mm_unpacklo_epi8(l, h));
		_mm_storeu_si128((__m128i *)(void *)(d + 2 * i + 16), _mm_unpackhi_epi8(l, h));
	}
#endif
	for (; i < n; i++) {
		d[2 * i] = lo[i];
		d[2 * i + 1] = hi[i];
	}
}

#ifdef HAVE_AVX2_PATH
/* The 256-bit packs and unpacks work within 128-bit lanes, hence the qword
 * permutes. */
__attribute__((target("avx2"))) static void split_avx2(const uint8_t *s, uint8_t *lo,
						       uint8_t *hi, size_t n)
{
	const __m256i m = _mm256_set1_epi16(0xff);
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(s + 2 * i));
		__m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + 2 * i + 32));
		__m256i l = _mm256_packus_epi16(_mm256_and_si256(a, m), _mm256_and_si256(b, m));
		__m256i h = _mm256_packus_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));

		_mm256_storeu_si256((__m256i *)(void *)(lo + i), _mm256_permute4x64_epi64(l, 0xd8));
		_mm256_storeu_si256((__m256i *)(void *)(hi + i), _mm256_permute4x64_epi64(h, 0xd8));
	}
	split_sse2(s + 2 * i, lo + i, hi + i, n - i);
}

__attribute__((target("avx2"))) static void merge_avx2(const uint8_t *lo, const uint8_t *hi,
						       uint8_t *d, size_t n)
{
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(lo + i));
		__m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(hi + i));

		l = _mm256_permute4x64_epi64(l, 0xd8);
		h = _mm256_permute4x64_epi64(h, 0xd8);
		_mm256_storeu_si256((__m256i *)(void *)(d + 2 * i), _mm256_unpacklo_epi8(l, h));
		_mm256_storeu_si256((__m256i *)(void *)(d + 2 * i + 32), _mm256_unpackhi_epi8(l, h));
	}
	merge_sse2(lo + i, hi + i, d + 2 * i, n - i);
}
#endif

void kvt_planes16_split(const uint8_t *s, uint8_t *lo, uint8_t *hi, size_t n)
{
#ifdef HAVE_AVX2_PATH
	if (kvt_planes16_avx2()) {
		split_avx2(s, lo, hi, n);
		return;
	}
#endif
	split_sse2(s, lo, hi, n);
}

void kvt_planes16_merge(const uint8_t *lo, const uint8_t *hi, uint8_t *d, size_t n)
{
#ifdef HAVE_AVX2_PATH
	if (kvt_planes16_avx2()) {
		merge_avx2(lo, hi, d, n);
		return;
	}
#endif
	merge_sse2(lo, hi, d, n);
}
