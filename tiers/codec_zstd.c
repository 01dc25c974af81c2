/* SPDX-License-Identifier: Apache-2.0 */
/* The shuf16-zstd codec: byte planes split (tiers/planes16.h), the high
 * plane coded by zstd with contexts kept per thread. Frame layout in
 * tiers/codec_zstd.h. */
#include "tiers/codec_zstd.h"
#include "tiers/planes16.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ZSTD_c_literalCompressionMode is in zstd's "experimental" section, a
 * parameter libzstd has taken under the same number since 1.5.0; a library
 * that refuses it gets no context, and blocks are then stored raw. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>


#define VERSION 1
#define LOG2C_MIN 10
#define LOG2C_MAX 17

/* Chunks of 128 KiB of the high plane (256 KiB of the block): zstd's largest
 * block, so each chunk is one zstd frame of one block with its own Huffman
 * table, and the chunk stays in L2 between the split and zstd. */
#define LOG2C 17

/* One thread's zstd state: its owner is the thread (pthread key), its one
 * cleanup path the key's destructor at thread exit. The contexts are made on
 * first use and kept, so a block costs no allocation or page fault in zstd
 * (c-blosc 1.x makes a context per call). plane holds one chunk of the high
 * plane, small enough to stay in cache between split and zstd. About 0.75 MiB
 * for a thread that both encodes and decodes (with libzstd 1.5.4: 520 KiB of
 * compression context, 94 KiB of decompression context, the 128 KiB plane). */
struct zstd16_ctx {
	ZSTD_CCtx *c;
	ZSTD_DCtx *d;
	uint8_t *plane; /* 2^LOG2C_MAX bytes */
};

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static int ctx_key_err;

static void ctx_free(void *p)
{
	struct zstd16_ctx *z = p;

	if (!z)
		return;
	ZSTD_freeCCtx(z->c);
	ZSTD_freeDCtx(z->d);
	free(z->plane);
	free(z);
}

static void ctx_key_make(void)
{
	ctx_key_err = pthread_key_create(&ctx_key, ctx_free);
}

static struct zstd16_ctx *ctx_get(void)
{
	struct zstd16_ctx *z;

	if (pthread_once(&ctx_once, ctx_key_make) || ctx_key_err)
		return NULL;
	z = pthread_getspecific(ctx_key);
	if (z)
		return z;
	z = calloc(1, sizeof(*z));
	if (!z)
		return NULL;
	z->plane = aligned_alloc(64, (size_t)1 << LOG2C_MAX);
	if (!z->plane || pthread_setspecific(ctx_key, z)) {
		ctx_free(z);
		return NULL;
	}
	return z;
}

/* The compression context, set up once. The level is zstd's fastest, whose
 * match finder steps so far it finds next to nothing: the exponent bytes hold
 * short repeats that level 1 codes as matches, for a lower ratio than coding
 * every byte with Huffman (1.47 against 1.50 on the bench's K/V) at a quarter
 * of the speed. Literals are then forced to Huffman coding, which zstd turns
 * off by default at negative levels. No checksum: the tier checksums the
 * record. */
static ZSTD_CCtx *cctx_get(struct zstd16_ctx *z)
{
	if (z->c)
		return z->c;
	z->c = ZSTD_createCCtx();
	if (!z->c)
		return NULL;
	if (ZSTD_isError(ZSTD_CCtx_setParameter(z->c, ZSTD_c_compressionLevel, ZSTD_minCLevel())) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(z->c, ZSTD_c_literalCompressionMode,
						ZSTD_ps_enable))) {
		ZSTD_freeCCtx(z->c);
		z->c = NULL;
	}
	return z->c;
}

static ZSTD_DCtx *dctx_get(struct zstd16_ctx *z)
{
	if (!z->d)
		z->d = ZSTD_createDCtx();
	return z->d;
}

size_t kvt_zstd16_bound(size_t len)
{
	return 4 + 4 * kvt_planes16_chunks(len / 2, LOG2C_MIN) + len;
}

long kvt_zstd16_encode(const void *src, size_t len, void *dst, size_t cap)
{
	const uint8_t *s = src;
	uint8_t *out = dst, *lo, *p;
	size_t n = len / 2, nc, c;
	struct zstd16_ctx *z;
	unsigned log2c;

	if (!src || !dst || cap < kvt_zstd16_bound(len) || len > (size_t)LONG_MAX / 2)
		return -EINVAL;
	z = ctx_get();
	if (!z || !cctx_get(z))
		return 0;
	log2c = LOG2C;
	c = (size_t)1 << log2c;
	nc = kvt_planes16_chunks(n, log2c);
	out[0] = VERSION, out[1] = (uint8_t)log2c, out[2] = 0, out[3] = 0;
	lo = out + 4 + 4 * nc;
	p = lo + n;
	for (size_t k = 0; k < nc; k++) {
		size_t m = n - k * c < c ? n - k * c : c;
		size_t r;

		kvt_planes16_split(s + 2 * k * c, lo + k * c, z->plane, m);
		/* a frame not shorter than its chunk does not fit: stored raw */
		r = ZSTD_compress2(z->c, p, m - 1, z->plane, m);
		if (ZSTD_isError(r)) {
			memcpy(p, z->plane, m);
			kvt_planes16_put_le32(out + 4 + 4 * k, (uint32_t)m | 1u << 31);
			p += m;
		} else {
			kvt_planes16_put_le32(out + 4 + 4 * k, (uint32_t)r);
			p += r;
		}
	}
	if (len & 1)
		*p++ = s[len - 1];
	return (long)(p - out);
}

int kvt_zstd16_decode(const void *src, size_t stored, void *dst, size_t raw)
{
	const uint8_t *in = src, *lo, *p;
	uint8_t *d = dst;
	size_t n = raw / 2, nc, c, head, total = 0;
	struct zstd16_ctx *z;
	unsigned log2c;

	/* the header and every chunk's length must add up to exactly stored
	 * before any byte is decoded */
	if (stored < 4 || in[0] != VERSION || in[1] < LOG2C_MIN || in[1] > LOG2C_MAX || in[2] ||
	    in[3])
		return -EBADMSG;
	log2c = in[1];
	c = (size_t)1 << log2c;
	nc = kvt_planes16_chunks(n, log2c);
	if (nc > (stored - 4) / 4)
		return -EBADMSG;
	head = 4 + 4 * nc;
	for (size_t k = 0; k < nc; k++) {
		uint32_t w = kvt_planes16_get_le32(in + 4 + 4 * k), len = w & ~(1u << 31);
		size_t m = n - k * c < c ? n - k * c : c;

		if ((w >> 31) ? len != m : (len == 0 || len >= m))
			return -EBADMSG;
		total += len;
	}
	if (stored - head < n || stored - head - n != total + (raw & 1))
		return -EBADMSG;
	z = ctx_get();
	if (!z || !dctx_get(z))
		return -ENOMEM;
	lo = in + head;
	p = lo + n;
	for (size_t k = 0; k < nc; k++) {
		uint32_t w = kvt_planes16_get_le32(in + 4 + 4 * k), len = w & ~(1u << 31);
		size_t m = n - k * c < c ? n - k * c : c;

		if (w >> 31) {
			kvt_planes16_merge(lo + k * c, p, d + 2 * k * c, m);
		} else {
			size_t r = ZSTD_decompressDCtx(z->d, z->plane, m, p, len);

			if (ZSTD_isError(r) || r != m)
				return -EBADMSG;
			kvt_planes16_merge(lo + k * c, z->plane, d + 2 * k * c, m);
		}
		p += len;
	}
	if (raw & 1)
		d[raw - 1] = *p;
	return 0;
}
