/* SPDX-License-Identifier: Apache-2.0 */
/* Prefix keys against SHA-256 vectors: a FIPS 180-2 vector fed as tokens and chained keys computed independently with Python's
 * hashlib: sha256(salt + parent + struct.pack('<I', t) for t in tokens)[:16]. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier/store.h"

static void hex_to_key(const char *hex, struct kvt_key *k)
{
	for (int i = 0; i < KVT_KEY_BYTES; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		k->bytes[i] = (uint8_t)v;
	}
}

static void assert_key(const struct kvt_key *got, const char *hex)
{
	struct kvt_key want;

	hex_to_key(hex, &want);
	assert_memory_equal(got->bytes, want.bytes, KVT_KEY_BYTES);
}

static void nist_vector_as_tokens(void **state)
{
	/* FIPS 180-2's 448-bit message is 56 bytes: 14 little-endian uint32
	 * tokens, hashed with no salt and no parent, so the key is the first 16
	 * bytes of its published digest 248d6a61 d20638b8 e5c02693 0c3e6039 ... */
	const char msg[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	uint32_t tokens[14];
	struct kvt_key key;

	for (int i = 0; i < 14; i++)
		tokens[i] = (uint32_t)(uint8_t)msg[4 * i] | (uint32_t)(uint8_t)msg[4 * i + 1] << 8 |
			    (uint32_t)(uint8_t)msg[4 * i + 2] << 16 |
			    (uint32_t)(uint8_t)msg[4 * i + 3] << 24;
	assert_int_equal(kvt_prefix_keys(NULL, 0, NULL, tokens, 14, 14, &key, 1), 1);
	assert_key(&key, "248d6a61d20638b8e5c026930c3e6039");
}

static void chained_keys_match_hashlib(void **state)
{
	uint32_t tokens[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 99, 100 };
	struct kvt_key keys[4];

	/* 10 tokens in blocks of 4: two full blocks, the partial tail gets no key */
	assert_int_equal(kvt_prefix_keys("tenant-a", 8, NULL, tokens, 10, 4, keys, 4), 2);
	assert_key(&keys[0], "545f7df6789dd859b09b2f029e07b0b5");
	assert_key(&keys[1], "6317376d376cb0ce3085f6323ee7b662");
}

static void explicit_parent_is_chained(void **state)
{
	uint32_t tokens[4] = { 7, 8, 9, 10 };
	struct kvt_key parent, key;

	for (int i = 0; i < KVT_KEY_BYTES; i++)
		parent.bytes[i] = (uint8_t)i;
	assert_int_equal(kvt_prefix_keys(NULL, 0, &parent, tokens, 4, 4, &key, 1), 1);
	assert_key(&key, "c6ae33c5010130eb454f7cb832bfe94a");
}

static void tokens_hash_little_endian(void **state)
{
	uint32_t tokens[2] = { 0x01020304, 0xA0B0C0D0 };
	struct kvt_key key;

	assert_int_equal(kvt_prefix_keys(NULL, 0, NULL, tokens, 2, 2, &key, 1), 1);
	assert_key(&key, "0b13735268051b99c1d9b52870a18280");
}

static void continuing_from_a_parent_equals_one_call(void **state)
{
	uint32_t tokens[12];
	struct kvt_key all[3], tail[2];

	for (int i = 0; i < 12; i++)
		tokens[i] = (uint32_t)(i * 7919);
	assert_int_equal(kvt_prefix_keys("s", 1, NULL, tokens, 12, 4, all, 3), 3);
	assert_int_equal(kvt_prefix_keys("s", 1, &all[0], tokens + 4, 8, 4, tail, 2), 2);
	assert_memory_equal(&all[1], &tail[0], sizeof(tail));
}

static void max_keys_bounds_the_output(void **state)
{
	uint32_t tokens[16] = { 0 };
	struct kvt_key keys[2];

	assert_int_equal(kvt_prefix_keys(NULL, 0, NULL, tokens, 16, 4, keys, 2), 2);
	assert_int_equal(kvt_prefix_keys(NULL, 0, NULL, tokens, 3, 4, keys, 2), 0);
	assert_int_equal(kvt_prefix_keys(NULL, 4, NULL, tokens, 16, 4, keys, 2), -EINVAL);
	assert_int_equal(kvt_prefix_keys(NULL, 0, NULL, NULL, 16, 4, keys, 2), -EINVAL);
	assert_int_equal(kvt_prefix_keys(NULL, 0, NULL, tokens, 16, 4, NULL, 2), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(nist_vector_as_tokens),
		cmocka_unit_test(chained_keys_match_hashlib),
		cmocka_unit_test(explicit_parent_is_chained),
		cmocka_unit_test(tokens_hash_little_endian),
		cmocka_unit_test(continuing_from_a_parent_equals_one_call),
		cmocka_unit_test(max_keys_bounds_the_output),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
