/* SPDX-License-Identifier: Apache-2.0 */
/* The RDMA transport on a real device (libibverbs provider): a loopback
 * pair of queue pairs on one port, blocks READ from one registered region
 * into another and checked byte for byte, a wrong rkey refused. Skips (77)
 * where there is no RDMA device; KVT_TEST_REQUIRE_RDMA=1 makes that a
 * failure. KVT_TEST_RDMA_DEVICE and KVT_TEST_RDMA_GID pick the device and
 * GID index (RoCE v2 is often 1 or 3). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "helpers.h"
#include "cluster/peer_rdma.h"
#include "transport/sockio.h"

#define BLOCK (256u << 10)
#define BLOCKS 64

static struct kvt_rdma *owner;

static int exchange(void *arg, const char *peer, const struct kvt_peer_ep *local,
		    struct kvt_peer_ep *remote, void **conn)
{
	static uint64_t id;

	*conn = (void *)(uintptr_t)++id;
	return kvt_rdma_accept(owner, id, local, remote);
}

static void release(void *arg, void *conn)
{
	kvt_rdma_conn_closed(owner, (uint64_t)(uintptr_t)conn);
}

static struct kvt_rdma *open_side(bool reader)
{
	struct kvt_rdma_opts o;
	struct kvt_rdma *r = NULL;
	const char *gid = getenv("KVT_TEST_RDMA_GID");
	int err;

	kvt_rdma_opts_init(&o, sizeof(o));
	o.device = getenv("KVT_TEST_RDMA_DEVICE");
	o.gid_index = gid ? atoi(gid) : 0;
	if (reader) {
		o.exchange_cb = exchange;
		o.release_cb = release;
	}
	err = kvt_rdma_open(&o, &r);
	if (err == -ENETDOWN)
		kvt_test_skip("KVT_TEST_REQUIRE_RDMA", "the RDMA port is down");
	if (err) {
		fprintf(stderr, "kvt_rdma_open: %s\n", kvt_strerror(err));
		exit(1);
	}
	return r;
}

int main(void)
{
	const struct kvt_verbs_ops *v = kvt_verbs_ibv();
	char names[8][32];
	struct kvt_rdma *reader;
	struct kvt_rdma_item it[BLOCKS];
	uint8_t *src, *dst;
	int n, fails = 0;

	if (!v)
		kvt_test_skip("KVT_TEST_REQUIRE_RDMA", "built without libibverbs");
	n = v->devices(names, 8);
	if (n <= 0)
		kvt_test_skip("KVT_TEST_REQUIRE_RDMA",
			      "no RDMA device (ibv_get_device_list found none; soft-RoCE would be "
			      "'rdma link add rxe0 type rxe netdev eth0')");
	fprintf(stderr, "RDMA device %s (%d found)\n", names[0], n);
	src = aligned_alloc(4096, (size_t)BLOCK * BLOCKS);
	dst = aligned_alloc(4096, (size_t)BLOCK * BLOCKS);
	kvt_test_fill(src, (size_t)BLOCK * BLOCKS, 7);
	memset(dst, 0, (size_t)BLOCK * BLOCKS);
	owner = open_side(false);
	reader = open_side(true);
	if (kvt_rdma_register(owner, src, (uint64_t)BLOCK * BLOCKS, KVT_VERBS_REMOTE_READ) ||
	    kvt_rdma_register(reader, dst, (uint64_t)BLOCK * BLOCKS, KVT_VERBS_LOCAL_WRITE)) {
		fprintf(stderr, "registration failed\n");
		return 1;
	}
	for (int i = 0; i < BLOCKS; i++) {
		uint8_t *s = src + (size_t)i * BLOCK;

		it[i] = (struct kvt_rdma_item){ .dst = dst + (size_t)i * BLOCK, .remote = (uintptr_t)s,
						.len = BLOCK, .xxh3 = XXH3_64bits(s, BLOCK),
						.valid_until_ns = kvt_deadline_ms(10000) };
		kvt_rdma_key(owner, s, BLOCK, KVT_VERBS_REMOTE_READ, &it[i].rkey);
	}
	n = kvt_rdma_read(reader, "self", it, BLOCKS, 5000);
	if (n != BLOCKS || memcmp(src, dst, (size_t)BLOCK * BLOCKS) != 0) {
		fprintf(stderr, "FAIL: %d of %d blocks read (first status %d)\n", n, BLOCKS, it[0].status);
		fails++;
	}
	it[0].rkey ^= 0x1234567;
	n = kvt_rdma_read(reader, "self", it, 1, 5000);
	if (n != 0 || it[0].status != -EACCES) {
		fprintf(stderr, "FAIL: a wrong rkey gave %d, status %d\n", n, it[0].status);
		fails++;
	}
	kvt_rdma_close(reader);
	kvt_rdma_close(owner);
	free(src);
	free(dst);
	if (!fails)
		fprintf(stderr, "PASS\n");
	return fails ? 1 : 0;
}
