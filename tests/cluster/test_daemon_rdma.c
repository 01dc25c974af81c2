/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's RDMA setup (app/daemon_rdma.c) over the fake verbs provider:
 * the store's DRAM region registered once, REMOTE_READ only; the node's
 * directory record carries the device, port, GID, LID and the region with
 * its rkeys, and reads back the same; a device that does not exist stops the
 * setup with nothing left registered; STATS and /metrics show the region,
 * the queue pairs and the leases lent to peers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/daemon_rdma.h"
#include "cluster/lease.h"
#include "cluster/dir_record.h"
#include "cluster/verbs_fake.h"

static struct kvt_store *open_store(void)
{
	struct kvt_store_opts o;
	struct kvt_store *s;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = 4 << 20;
	o.dram_slab_bytes = 1 << 20;
	o.dram_huge_pages = false;
	assert_int_equal(kvt_store_open(&o, &s), 0);
	return s;
}

static int live_mrs(void)
{
	int n = 0;

	for (int i = 0; i < fake.n_mrs; i++)
		n += fake.mrs[i].live;
	return n;
}

static void the_record_carries_the_device_and_the_region(void **state)
{
	struct kvt_store *s = open_store();
	struct kvt_node_info self = { .id = "gpu-a", .addr = "10.0.0.1:7400",
				      .transports = KVT_NODE_TCP }, back;
	struct kvt_lease_table *leases;
	struct kvt_rdma *rdma;
	uint64_t len;
	void *base;
	char *json;

	(void)state;
	fake_reset(1ull << 30, 256);
	assert_int_equal(kvtd_rdma_open("fake0", &fake_verbs_ops, s, NULL, &self, &rdma, &leases), 0);
	assert_non_null(rdma);
	assert_non_null(leases);
	assert_int_equal(kvt_store_dram_region(s, &base, &len), 0);
	/* registered once, for peers to read and nothing more */
	assert_int_equal(live_mrs(), 1);
	assert_int_equal(fake.mrs[0].addr, (uintptr_t)base);
	assert_int_equal(fake.mrs[0].len, len);
	assert_int_equal(fake.mrs[0].access, KVT_VERBS_REMOTE_READ);

	assert_int_equal(self.transports, KVT_NODE_TCP | KVT_NODE_RDMA);
	assert_string_equal(self.rdma.device, "fake0");
	assert_int_equal(self.rdma.port, 1);
	assert_int_equal(self.rdma.lid, 1);
	assert_int_equal(self.rdma.gid[15], 1);
	assert_int_equal(self.region.base, (uintptr_t)base);
	assert_int_equal(self.region.bytes, len);
	assert_int_equal(self.region.n_mrs, 1);
	assert_int_equal(self.region.mrs[0].off, 0);
	assert_int_equal(self.region.mrs[0].len, len);
	assert_int_equal(self.region.mrs[0].rkey, fake.mrs[0].key);

	/* what the directory publishes, read back as a peer reads it */
	json = kvt_node_record_encode(&self);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"rdma\""));
	assert_int_equal(kvt_node_record_decode(json, strlen(json), &back), 0);
	assert_int_equal(back.transports, KVT_NODE_TCP | KVT_NODE_RDMA);
	assert_string_equal(back.rdma.device, "fake0");
	assert_memory_equal(back.rdma.gid, self.rdma.gid, 16);
	assert_int_equal(back.region.base, self.region.base);
	assert_int_equal(back.region.n_mrs, 1);
	assert_int_equal(back.region.mrs[0].rkey, self.region.mrs[0].rkey);
	free(json);

	kvt_lease_table_close(leases);
	kvt_rdma_close(rdma);
	assert_int_equal(live_mrs(), 0);
	kvt_store_close(s);
}

static void an_absent_device_leaves_nothing_open(void **state)
{
	struct kvt_store *s = open_store();
	struct kvt_node_info self = { .id = "gpu-a", .transports = KVT_NODE_TCP };
	struct kvt_lease_table *leases;
	struct kvt_rdma *rdma;

	(void)state;
	fake_reset(1ull << 30, 256);
	assert_int_equal(kvtd_rdma_open("mlx5_7", &fake_verbs_ops, s, NULL, &self, &rdma, &leases),
			 -ENODEV);
	fake.n_devices = 0;
	assert_int_equal(kvtd_rdma_open("fake0", &fake_verbs_ops, s, NULL, &self, &rdma, &leases),
			 -ENODEV);
	assert_null(rdma);
	assert_null(leases);
	assert_int_equal(live_mrs(), 0);
	assert_int_equal(self.transports, KVT_NODE_TCP); /* the record says TCP only */
	kvt_store_close(s);
}

static json_int_t field(json_t *o, const char *path1, const char *path2)
{
	json_t *v = json_object_get(o, path1);

	if (path2)
		v = json_object_get(v, path2);
	assert_true(json_is_integer(v));
	return json_integer_value(v);
}

/* What STATS and /metrics say of the RDMA side follows a lease lent. */
static void stats_and_metrics_show_the_region_and_the_leases(void **state)
{
	struct kvt_store *s = open_store();
	struct kvt_node_info self = { .id = "gpu-a", .transports = KVT_NODE_TCP };
	struct kvt_lease_table *leases;
	struct kvt_lease_grant grant;
	struct kvt_ns_desc d;
	struct kvt_rdma *rdma;
	struct kvt_key key = { .bytes = { 7, 9 } };
	struct kvt_ns *ns;
	uint64_t lease_id;
	uint32_t granted_ms;
	struct kvt_textbuf page = { 0 };
	size_t bb;
	char *text;
	void *buf;
	json_t *o;

	(void)state;
	fake_reset(1ull << 30, 256);
	assert_int_equal(kvtd_rdma_open("fake0", &fake_verbs_ops, s, NULL, &self, &rdma, &leases), 0);
	kvt_ns_desc_init(&d, sizeof(d));
	strcpy(d.model_id, "test/rdma-stats");
	d.layout = KVT_LAYOUT_PAGED_KV;
	d.dtype = KVT_DTYPE_BF16;
	d.layers = 2;
	d.kv_heads = 2;
	d.head_dim = 64;
	d.block_tokens = 16;
	d.tp_size = 1;
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	bb = kvt_ns_block_bytes(ns);
	buf = calloc(1, bb);
	assert_non_null(buf);
	assert_int_equal(kvt_put(ns, &key, NULL, buf, bb), 0);

	o = kvtd_rdma_json(rdma, leases);
	assert_int_equal(field(o, "registered_regions", NULL), 1);
	assert_int_equal(field(o, "reads", NULL), 0);
	assert_int_equal(field(o, "leases", "granted"), 0);
	assert_int_equal(field(o, "leases", "active"), 0);
	json_decref(o);

	assert_int_equal(kvt_lease_grant(leases, ns, &key, 1, 1000, 42, &granted_ms, &grant,
					 &lease_id), 0);
	o = kvtd_rdma_json(rdma, leases);
	assert_int_equal(field(o, "leases", "granted"), 1);
	assert_int_equal(field(o, "leases", "active"), 1);
	assert_int_equal(field(o, "leases", "blocks_held"), 1);
	json_decref(o);

	kvtd_rdma_prom(&page, rdma, leases);
	assert_false(page.bad);
	text = page.p;
	assert_non_null(strstr(text, "kvtier_rdma_leases_total{op=\"granted\"} 1\n"));
	assert_non_null(strstr(text, "kvtier_rdma_leases{what=\"blocks\"} 1\n"));
	assert_non_null(strstr(text, "kvtier_rdma_reads_total 0\n"));
	assert_non_null(strstr(text, "# TYPE kvtier_rdma_errors_total counter\n"));
	free(text);

	assert_int_equal(kvt_lease_return(leases, lease_id, 42), 1);
	o = kvtd_rdma_json(rdma, leases);
	assert_int_equal(field(o, "leases", "returned"), 1);
	assert_int_equal(field(o, "leases", "active"), 0);
	assert_int_equal(field(o, "leases", "blocks_held"), 0);
	json_decref(o);

	free(buf);
	kvt_lease_table_close(leases);
	kvt_rdma_close(rdma);
	kvt_store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_record_carries_the_device_and_the_region),
		cmocka_unit_test(an_absent_device_leaves_nothing_open),
		cmocka_unit_test(stats_and_metrics_show_the_region_and_the_leases),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
