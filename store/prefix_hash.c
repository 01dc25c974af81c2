/* SPDX-License-Identifier: Apache-2.0 */
/* Prefix keys: key[i] = SHA-256(salt || key[i-1] || tokens of block i)[0..16).
 * Chaining through the previous key makes a key name its whole prefix, so
 * equal keys mean equal prefixes (up to a 2^-128 collision). */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>

#include "kvtier/store.h"

/* OpenSSL 3 looks an algorithm up on every implicit use; fetch it once. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void fetch_sha256(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* Tokens are hashed as little-endian uint32 whatever the host order. */
static int hash_tokens_le(EVP_MD_CTX *ctx, const uint32_t *tokens, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return EVP_DigestUpdate(ctx, tokens, n * sizeof(*tokens));
#else
	for (size_t i = 0; i < n; i++) {
		uint32_t le = __builtin_bswap32(tokens[i]);
		if (!EVP_DigestUpdate(ctx, &le, sizeof(le)))
			return 0;
	}
	return 1;
#endif
}

int kvt_prefix_keys(const void *salt, size_t salt_len, const struct kvt_key *parent,
		    const uint32_t *tokens, size_t n_tokens, uint32_t block_tokens,
		    struct kvt_key *keys, size_t max_keys)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	const struct kvt_key *prev = parent;
	EVP_MD_CTX *ctx;
	size_t blocks, i;
	int ok = 1;

	if ((salt_len && !salt) || (n_tokens && !tokens) || block_tokens == 0 ||
	    (max_keys && !keys))
		return -EINVAL;
	blocks = n_tokens / block_tokens;
	if (blocks > max_keys)
		blocks = max_keys;
	if (blocks > INT32_MAX)
		return -EINVAL;
	if (blocks == 0)
		return 0;

	pthread_once(&sha256_once, fetch_sha256);
	if (!sha256_md)
		return -ENOSYS;
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	for (i = 0; ok && i < blocks; i++) {
		ok = EVP_DigestInit_ex2(ctx, sha256_md, NULL) &&
		     (!salt_len || EVP_DigestUpdate(ctx, salt, salt_len)) &&
		     (!prev || EVP_DigestUpdate(ctx, prev->bytes, KVT_KEY_BYTES)) &&
		     hash_tokens_le(ctx, tokens + i * block_tokens, block_tokens) &&
		     EVP_DigestFinal_ex(ctx, digest, NULL);
		memcpy(keys[i].bytes, digest, KVT_KEY_BYTES);
		prev = &keys[i];
	}
	EVP_MD_CTX_free(ctx);
	return ok ? (int)blocks : -EIO;
}
