/* SPDX-License-Identifier: Apache-2.0 */
/* The directory's stored records and its URL parser: round trips, and
 * strictness (a record that is not exactly right is refused whole). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/dir_record.h"
#include "cluster/redis_conn.h"

static void rdma_node(struct kvt_node_info *n)
{
	memset(n, 0, sizeof(*n));
	strcpy(n->id, "node-a.1_x");
	strcpy(n->addr, "10.77.0.1:7400");
	n->epoch = 42;
	n->transports = KVT_NODE_TCP | KVT_NODE_RDMA;
	strcpy(n->rdma.device, "mlx5_0");
	n->rdma.port = 1;
	n->rdma.lid = 7;
	for (int i = 0; i < 16; i++)
		n->rdma.gid[i] = (uint8_t)(0xf0 + i);
	n->region.base = 0x7f0000000000ull;
	n->region.bytes = 3ull << 30;
	n->region.n_mrs = 2;
	n->region.mrs[0] = (struct kvt_node_mr){ .off = 0, .len = 2ull << 30, .rkey = 0x1234 };
	n->region.mrs[1] = (struct kvt_node_mr){ .off = 1ull << 30, .len = 2ull << 30, .rkey = 0xabcdef01 };
}

static void node_record_round_trips(void **state)
{
	struct kvt_node_info a, b;
	char *js;

	rdma_node(&a);
	js = kvt_node_record_encode(&a);
	assert_non_null(js);
	assert_int_equal(kvt_node_record_decode(js, strlen(js), &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	free(js);

	memset(&a, 0, sizeof(a)); /* TCP only: no rdma or region fields */
	strcpy(a.id, "b");
	strcpy(a.addr, "[::1]:9");
	a.epoch = 1;
	a.transports = KVT_NODE_TCP;
	js = kvt_node_record_encode(&a);
	assert_non_null(js);
	assert_null(strstr(js, "rdma"));
	assert_int_equal(kvt_node_record_decode(js, strlen(js), &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	free(js);
}

static void node_record_rejects_what_is_not_exact(void **state)
{
	static const char *bad[] = {
		"",
		"null",
		"[]",
		"{\"v\":1}",
		/* another version */
		"{\"v\":2,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\"]}",
		/* invalid id characters */
		"{\"v\":1,\"id\":\"a b\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\"]}",
		"{\"v\":1,\"id\":\"a{x}\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\"]}",
		/* negative or mistyped numbers */
		"{\"v\":1,\"id\":\"a\",\"epoch\":-1,\"addr\":\"h:1\",\"transports\":[\"tcp\"]}",
		"{\"v\":1,\"id\":\"a\",\"epoch\":\"1\",\"addr\":\"h:1\",\"transports\":[\"tcp\"]}",
		/* no tcp, unknown transport, a transport twice */
		"{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[]}",
		"{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\",\"udp\"]}",
		"{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\",\"tcp\"]}",
		/* rdma without its data, and with a region too short for its MR */
		"{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\",\"rdma\"]}",
		"{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\",\"rdma\"],"
		"\"rdma\":{\"device\":\"d\",\"port\":1,\"gid\":\"00000000000000000000000000000000\",\"lid\":0},"
		"\"region\":{\"base\":0,\"bytes\":10,\"mrs\":[{\"off\":4,\"len\":7,\"rkey\":1}]}}",
		/* a gid that is not 32 hex digits */
		"{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\",\"rdma\"],"
		"\"rdma\":{\"device\":\"d\",\"port\":1,\"gid\":\"0000\",\"lid\":0},"
		"\"region\":{\"base\":0,\"bytes\":10,\"mrs\":[{\"off\":0,\"len\":10,\"rkey\":1}]}}",
		/* duplicate keys */
		"{\"v\":1,\"id\":\"a\",\"id\":\"b\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\"]}",
		/* an address with a space */
		"{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h :1\",\"transports\":[\"tcp\"]}",
	};
	struct kvt_node_info n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = kvt_node_record_decode(bad[i], strlen(bad[i]), &n);

		if (rc != -EBADMSG)
			fail_msg("accepted record %zu: %s", i, bad[i]);
	}
	/* the good form of the last ones, and an unknown field, pass */
	const char *good = "{\"v\":1,\"id\":\"a\",\"epoch\":1,\"addr\":\"h:1\",\"transports\":[\"tcp\"],"
			   "\"future\":{\"x\":1}}";
	assert_int_equal(kvt_node_record_decode(good, strlen(good), &n), 0);
	assert_string_equal(n.id, "a");
}

static void hint_values_are_strict(void **state)
{
	char buf[KVT_HINT_VALUE_MAX];
	uint64_t e;
	uint8_t t;
	int n;

	n = kvt_hint_value_encode(INT64_MAX, KVT_TIER_SSD, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(kvt_hint_value_decode(buf, (size_t)n, &e, &t), 0);
	assert_true(e == INT64_MAX);
	assert_int_equal(kvt_hint_value_encode((uint64_t)INT64_MAX + 1, KVT_TIER_SSD, buf, sizeof(buf)),
			 -EINVAL);
	assert_int_equal(t, KVT_TIER_SSD);
	n = kvt_hint_value_encode(7, KVT_TIER_DRAM, buf, sizeof(buf));
	assert_string_equal(buf, "7:dram");
	assert_int_equal(kvt_hint_value_decode(buf, (size_t)n, &e, &t), 0);
	assert_true(e == 7 && t == KVT_TIER_DRAM);
	assert_int_equal(kvt_hint_value_encode(0, KVT_TIER_DRAM, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(kvt_hint_value_encode(1, KVT_TIER_HBM, buf, sizeof(buf)), -EINVAL);

	static const char *bad[] = { "", ":dram", "0:dram", "07:dram", "1:", "1:DRAM", "1:dram ",
				     "1:ssdx", "x:ssd", "-1:ssd", "1;ssd", "9223372036854775808:ssd",
				     "18446744073709551616:ssd",
				     "1:dram:2" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (kvt_hint_value_decode(bad[i], strlen(bad[i]), &e, &t) != -EBADMSG)
			fail_msg("accepted hint value '%s'", bad[i]);
}

static void hint_lists_are_strict(void **state)
{
	struct kvt_hint_holder h[KVT_HINT_MAX_HOLDERS];
	const char *ok = "a=1:dram,node-b.2=77:ssd";

	assert_int_equal(kvt_hint_list_decode(ok, strlen(ok), h, KVT_HINT_MAX_HOLDERS), 2);
	assert_int_equal(h[0].node_len, 1);
	assert_memory_equal(h[0].node, "a", 1);
	assert_true(h[0].epoch == 1 && h[0].tier == KVT_TIER_DRAM);
	assert_int_equal(h[1].node_len, 8);
	assert_memory_equal(h[1].node, "node-b.2", 8);
	assert_true(h[1].epoch == 77 && h[1].tier == KVT_TIER_SSD);
	assert_int_equal(kvt_hint_list_decode(ok, strlen(ok), h, 1), -EBADMSG); /* too many */

	static const char *bad[] = { "", ",", "a=1:dram,", ",a=1:dram", "a=1:dram,,b=2:ssd",
				     "=1:dram", "a b=1:dram", "a=1:dram;b=2:ssd", "a=0:dram",
				     "a:1:dram", "a==1:dram", "a=1:dram,b" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (kvt_hint_list_decode(bad[i], strlen(bad[i]), h, KVT_HINT_MAX_HOLDERS) != -EBADMSG)
			fail_msg("accepted hint list '%s'", bad[i]);
}

static void keys_are_hex(void **state)
{
	struct kvt_key k;
	char hex[33];

	for (int i = 0; i < 16; i++)
		k.bytes[i] = (uint8_t)(i * 17 + (i == 3 ? '{' : 0));
	kvt_key_hex(&k, hex);
	assert_int_equal(strlen(hex), 32);
	assert_null(strchr(hex, '{'));
	assert_string_equal(hex, "001122ae445566778899aabbccddeeff");
}

static void node_ids(void **state)
{
	char long_id[KVT_NODE_ID_MAX + 2];

	assert_true(kvt_node_id_valid("a"));
	assert_true(kvt_node_id_valid("Node-7.rack_2"));
	assert_false(kvt_node_id_valid(""));
	assert_false(kvt_node_id_valid("a:b"));
	assert_false(kvt_node_id_valid("a/b"));
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[KVT_NODE_ID_MAX] = '\0';
	assert_true(kvt_node_id_valid(long_id));
	long_id[KVT_NODE_ID_MAX] = 'x';
	long_id[KVT_NODE_ID_MAX + 1] = '\0';
	assert_false(kvt_node_id_valid(long_id));
}

static void redis_urls(void **state)
{
	struct kvt_redis_url u;

	assert_int_equal(kvt_redis_url_parse("redis://10.0.0.1:6380", &u), 0);
	assert_string_equal(u.hostport, "10.0.0.1:6380");
	assert_int_equal(u.db, 0);
	assert_int_equal(kvt_redis_url_parse("redis://cache.local", &u), 0);
	assert_string_equal(u.hostport, "cache.local:6379");
	assert_int_equal(kvt_redis_url_parse("redis://:pw@h:1/3", &u), 0);
	assert_string_equal(u.hostport, "h:1");
	assert_string_equal(u.password, "pw");
	assert_int_equal(u.db, 3);
	assert_int_equal(kvt_redis_url_parse("redis://[::1]", &u), 0);
	assert_string_equal(u.hostport, "[::1]:6379");
	assert_int_equal(kvt_redis_url_parse("unix:///run/redis.sock?db=2", &u), 0);
	assert_string_equal(u.hostport, "/run/redis.sock");
	assert_int_equal(u.db, 2);
	/* Sentinels: each HOST[:PORT] (26379 by default), then the master's name */
	assert_int_equal(kvt_redis_url_parse("sentinel://10.0.0.1:26380,s2,[::1]:5/kv-dir_1", &u), 0);
	assert_int_equal(u.n_sentinels, 3);
	assert_string_equal(u.sentinels[0], "10.0.0.1:26380");
	assert_string_equal(u.sentinels[1], "s2:26379");
	assert_string_equal(u.sentinels[2], "[::1]:5");
	assert_string_equal(u.master, "kv-dir_1");
	assert_string_equal(u.hostport, "");
	assert_int_equal(kvt_redis_url_parse("redis://h:1", &u), 0);
	assert_int_equal(u.n_sentinels, 0);
	static const char *bad[] = { "", "http://h", "redis://", "redis://h/x", "redis://h/-1",
				     "unix://rel/path", "unix:///p?db=", "unix:///p?x=1",
				     "redis://user@h", "sentinel://", "sentinel://h:1",
				     "sentinel://h:1/", "sentinel:///m", "sentinel://h:1,/m",
				     "sentinel://h:0/m", "sentinel://h:1/m/x", "sentinel://h:1/m n",
				     "sentinel://a,b,c,d,e,f,g,h,i/m" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (kvt_redis_url_parse(bad[i], &u) != -EINVAL)
			fail_msg("accepted url '%s'", bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(node_record_round_trips),
		cmocka_unit_test(node_record_rejects_what_is_not_exact),
		cmocka_unit_test(hint_values_are_strict),
		cmocka_unit_test(hint_lists_are_strict),
		cmocka_unit_test(keys_are_hex),
		cmocka_unit_test(node_ids),
		cmocka_unit_test(redis_urls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
