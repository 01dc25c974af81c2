/* SPDX-License-Identifier: Apache-2.0 */
/* Block checksums and copies that compute them: see block_sum.h. */
#include "util/block_sum.h"

#include <string.h>

#if defined(KVT_HAVE_XXH_DISPATCH) && (defined(__x86_64__) || defined(__i386__))
#include <xxh_x86dispatch.h> /* XXH3_64bits* become their dispatching forms */
#endif

/* Copied, then hashed while still in L1/L2: small enough to stay there
 * beside the source's lines, large enough that XXH3's per-call cost is
 * noise. */
#define CHUNK (16u << 10)

uint64_t kvt_block_sum(const void *p, size_t len)
{
	return XXH3_64bits(p, len);
}

void kvt_sum_begin(struct kvt_sum *s)
{
	XXH3_64bits_reset(&s->st);
}

void kvt_sum_add(struct kvt_sum *s, const void *p, size_t len)
{
	XXH3_64bits_update(&s->st, p, len);
}

void kvt_sum_copy(struct kvt_sum *s, void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *p = src;

	for (size_t off = 0; off < len; off += CHUNK) {
		size_t n = len - off < CHUNK ? len - off : CHUNK;

		memcpy(d + off, p + off, n);
		XXH3_64bits_update(&s->st, d + off, n);
	}
}

uint64_t kvt_sum_end(struct kvt_sum *s)
{
	return XXH3_64bits_digest(&s->st);
}

uint64_t kvt_copy_sum(void *dst, const void *src, size_t len)
{
	struct kvt_sum s;

	kvt_sum_begin(&s);
	kvt_sum_copy(&s, dst, src, len);
	return kvt_sum_end(&s);
}
