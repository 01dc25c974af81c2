/* SPDX-License-Identifier: Apache-2.0 */
/* The RDMA transport's logic over the fake verbs provider: the region
 * registered in overlapping pieces at max_mr_size (REMOTE_READ only for the
 * owner), queue pairs made lazily and pooled, READs posted in chains and
 * completions polled in batches, bytes byte-exact; and every failure a NIC
 * reports (retry exceeded, remote access error, flush, silence) or a lease
 * that lapsed or bytes that do not match the owner's checksum end as a
 * status, never as data. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "helpers.h"
#include "cluster/peer_rdma.h"
#include "transport/sockio.h"
#include "verbs_fake.h"

#define MiB (1ull << 20)
#define KiB (1ull << 10)
#define BLOCK (64 * KiB)

struct world {
	struct kvt_rdma *owner, *reader;
	uint8_t *obuf, *rbuf;
	uint64_t olen, rlen;
	uint64_t next_conn;
	int exchanges, releases;
};

static struct world W;

static int exchange(void *arg, const char *peer, const struct kvt_peer_ep *local,
		    struct kvt_peer_ep *remote, void **conn)
{
	struct world *w = arg;
	uint64_t id = ++w->next_conn;
	int err;

	assert_string_equal(peer, "owner");
	err = kvt_rdma_accept(w->owner, id, local, remote);
	if (err)
		return err;
	w->exchanges++;
	*conn = (void *)(uintptr_t)id;
	return 0;
}

static void release(void *arg, void *conn)
{
	struct world *w = arg;

	w->releases++;
	kvt_rdma_conn_closed(w->owner, (uint64_t)(uintptr_t)conn);
}

static struct kvt_rdma *open_side(uint32_t max_wr, uint32_t qps)
{
	struct kvt_rdma_opts o;
	struct kvt_rdma *r = NULL;

	kvt_rdma_opts_init(&o, sizeof(o));
	o.verbs = &fake_verbs_ops;
	o.mr_overlap = 256 * KiB;
	o.max_wr = max_wr;
	o.qps_per_peer = qps;
	o.exchange_cb = exchange;
	o.release_cb = release;
	o.exchange_arg = &W;
	assert_int_equal(kvt_rdma_open(&o, &r), 0);
	return r;
}

/* Owner: 3 MiB of blocks registered REMOTE_READ; reader: 3 MiB LOCAL_WRITE. */
static void world_open(uint32_t max_wr, uint32_t qps)
{
	memset(&W, 0, sizeof(W));
	fake_reset(1 * MiB, 1024);
	W.olen = W.rlen = 3 * MiB;
	W.obuf = aligned_alloc(4096, W.olen);
	W.rbuf = aligned_alloc(4096, W.rlen);
	kvt_test_fill(W.obuf, W.olen, 42);
	memset(W.rbuf, 0, W.rlen);
	W.owner = open_side(max_wr, qps);
	W.reader = open_side(max_wr, qps);
	assert_int_equal(kvt_rdma_register(W.owner, W.obuf, W.olen, KVT_VERBS_REMOTE_READ), 0);
	assert_int_equal(kvt_rdma_register(W.reader, W.rbuf, W.rlen, KVT_VERBS_LOCAL_WRITE), 0);
}

static void world_close(void)
{
	kvt_rdma_close(W.reader);
	kvt_rdma_close(W.owner);
	free(W.obuf);
	free(W.rbuf);
}

/* Items: block i of the owner's region into block i of the reader's. */
static void make_items(struct kvt_rdma_item *it, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const uint8_t *src = W.obuf + i * BLOCK;

		it[i] = (struct kvt_rdma_item){ .dst = W.rbuf + i * BLOCK, .remote = (uintptr_t)src,
						.len = BLOCK, .xxh3 = XXH3_64bits(src, BLOCK),
						.valid_until_ns = kvt_deadline_ms(10000) };
		assert_int_equal(kvt_rdma_key(W.owner, src, BLOCK, KVT_VERBS_REMOTE_READ, &it[i].rkey), 0);
	}
}

static void region_is_registered_in_pieces_at_max_mr_size(void **state)
{
	struct kvt_node_mr mrs[8];
	uint32_t key;
	int owner_pieces = 0;

	world_open(64, 2);
	for (int i = 0; i < fake.n_mrs; i++) {
		assert_true(fake.mrs[i].len <= 1 * MiB);
		if (fake.mrs[i].addr >= (uintptr_t)W.obuf && fake.mrs[i].addr < (uintptr_t)W.obuf + W.olen) {
			/* what peers may read is only readable */
			assert_int_equal(fake.mrs[i].access, KVT_VERBS_REMOTE_READ);
			owner_pieces++;
		}
	}
	/* 3 MiB in 1 MiB pieces overlapping by 256 KiB: steps of 768 KiB */
	assert_int_equal(owner_pieces, 4);
	assert_int_equal(kvt_rdma_mrs(W.owner, W.obuf, mrs, 8), 4);
	assert_int_equal(mrs[1].off, 768 * KiB);
	assert_int_equal(mrs[3].off + mrs[3].len, W.olen);
	/* any block up to the overlap lies whole in one piece, wherever it is */
	for (uint64_t off = 0; off + 256 * KiB <= W.olen; off += 4 * KiB)
		assert_int_equal(kvt_rdma_key(W.owner, W.obuf + off, 256 * KiB,
					      KVT_VERBS_REMOTE_READ, &key), 0);
	/* the owner's pieces are not READ destinations, nor the reverse */
	assert_int_equal(kvt_rdma_key(W.owner, W.obuf, BLOCK, KVT_VERBS_LOCAL_WRITE, &key), -ENOENT);
	assert_int_equal(kvt_rdma_key(W.reader, W.rbuf, BLOCK, KVT_VERBS_REMOTE_READ, &key), -ENOENT);
	/* pieces no larger than the overlap cannot cover a larger region */
	{
		struct kvt_rdma_opts o;
		struct kvt_rdma *r;

		kvt_rdma_opts_init(&o, sizeof(o));
		o.verbs = &fake_verbs_ops;
		o.mr_overlap = 1 * MiB;
		assert_int_equal(kvt_rdma_open(&o, &r), 0);
		assert_int_equal(kvt_rdma_register(r, W.obuf, W.olen, KVT_VERBS_REMOTE_READ), -EINVAL);
		kvt_rdma_close(r);
	}
	world_close();
}

static void queue_pairs_are_made_lazily_and_pooled(void **state)
{
	struct kvt_rdma_item it[8];
	struct kvt_rdma_stats st;

	world_open(64, 2);
	assert_int_equal(fake.qps_created, 0);
	make_items(it, 8);
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 8, 5000), 8);
	/* two for the reader, two for the owner, which allow remote READs */
	assert_int_equal(fake.qps_created, 4);
	assert_int_equal(fake.qps_remote_read, 2);
	assert_int_equal(W.exchanges, 2);
	memset(W.rbuf, 0, 8 * BLOCK);
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 8, 5000), 8);
	assert_int_equal(fake.qps_created, 4); /* reused */
	assert_memory_equal(W.rbuf, W.obuf, 8 * BLOCK);
	kvt_rdma_stats(W.reader, &st);
	assert_int_equal(st.qps_created, 2);
	assert_int_equal(st.reads, 16);
	world_close();
	/* closing the reader released both exchanges: the owner's queue pairs went too */
	assert_int_equal(W.releases, 2);
	assert_int_equal(fake.qps_destroyed, 4);
}

static void reads_are_posted_in_chains_and_polled_in_batches(void **state)
{
	struct kvt_rdma_item it[40];
	struct kvt_rdma_stats st;

	world_open(8, 2);
	fake.per_poll = 4;
	make_items(it, 40);
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 40, 5000), 40);
	assert_memory_equal(W.rbuf, W.obuf, 40 * BLOCK);
	for (int i = 0; i < 40; i++)
		assert_int_equal(it[i].status, 0);
	/* at most max_wr in flight per queue pair, posted as chains of them */
	assert_int_equal(fake.longest_chain, 8);
	assert_true(fake.post_calls >= 40 / 8);
	assert_true(fake.post_calls < 40);
	assert_int_equal(fake.posted, 40);
	assert_int_equal(fake.largest_poll, 4);
	/* each work request names a block slot, its rkey and length */
	for (size_t i = 0; i < fake.n_log; i++) {
		const struct kvt_verbs_read *w = &fake.log[i];

		assert_int_equal(w->len, BLOCK);
		assert_true(w->remote == it[w->wr_id].remote);
		assert_int_equal(w->rkey, it[w->wr_id].rkey);
		assert_ptr_equal(w->local, it[w->wr_id].dst);
	}
	kvt_rdma_stats(W.reader, &st);
	assert_int_equal(st.completions, 40);
	assert_true(st.polls < 40);
	world_close();
}

/* One queue pair, so the failing READ's followers are on it. */
static void inject(enum kvt_verbs_wc_status s, int expect)
{
	struct kvt_rdma_item it[6];
	struct kvt_rdma_stats st;
	int destroyed;

	world_open(64, 1);
	make_items(it, 6);
	fake.fail_at = 2;
	fake.fail_status = s;
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 6, 5000), 2);
	assert_int_equal(it[0].status, 0);
	assert_int_equal(it[1].status, 0);
	assert_int_equal(it[2].status, expect);
	for (int i = 3; i < 6; i++)
		assert_int_equal(it[i].status, -ECANCELED); /* flushed behind it */
	assert_memory_equal(W.rbuf, W.obuf, 2 * BLOCK);
	/* the broken queue pair was destroyed, with the owner's end */
	destroyed = fake.qps_destroyed;
	assert_int_equal(destroyed, 2);
	assert_int_equal(W.releases, 1);
	kvt_rdma_stats(W.reader, &st);
	if (s == KVT_WC_RETRY_EXCEEDED)
		assert_int_equal(st.retry_exceeded, 1);
	if (s == KVT_WC_REMOTE_ACCESS)
		assert_int_equal(st.remote_access, 1);
	/* the next read gets a new queue pair and works */
	fake.fail_at = -1;
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 6, 5000), 6);
	assert_int_equal(fake.qps_created, 4);
	world_close();
}

static void retry_exceeded_fails_the_blocks(void **state)
{
	inject(KVT_WC_RETRY_EXCEEDED, -ETIMEDOUT);
}

static void remote_access_error_fails_the_blocks(void **state)
{
	inject(KVT_WC_REMOTE_ACCESS, -EACCES);
}

static void flushed_reads_fail(void **state)
{
	inject(KVT_WC_FLUSHED, -ECANCELED);
}

static void a_wrong_rkey_is_refused_by_the_owner(void **state)
{
	struct kvt_rdma_item it[2];

	world_open(64, 1);
	make_items(it, 2);
	it[1].rkey ^= 0x5a5a; /* a lease the owner never granted */
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 2, 5000), 1);
	assert_int_equal(it[1].status, -EACCES);
	world_close();
}

static void bytes_outside_the_lease_or_checksum_are_not_used(void **state)
{
	struct kvt_rdma_item it[4];
	struct kvt_rdma_stats st;

	world_open(64, 1);
	make_items(it, 4);
	it[1].valid_until_ns = kvt_now_ns() - 1; /* the lease ended first */
	fake.corrupt_at = 2;
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 4, 5000), 2);
	assert_int_equal(it[0].status, 0);
	assert_int_equal(it[1].status, -ESTALE);
	assert_int_equal(it[2].status, -EIO);
	assert_int_equal(it[3].status, 0);
	kvt_rdma_stats(W.reader, &st);
	assert_int_equal(st.lease_expired, 1);
	assert_int_equal(st.checksum_errors, 1);
	/* neither is a queue-pair failure */
	assert_int_equal(fake.qps_destroyed, 0);
	world_close();
}

static void silence_ends_at_the_timeout(void **state)
{
	struct kvt_rdma_item it[10];
	uint64_t t0;

	world_open(64, 2);
	make_items(it, 10);
	fake.stall = true;
	t0 = kvt_now_ns();
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 10, 200), 0);
	assert_true((kvt_now_ns() - t0) / 1000000 < 200 + 2000);
	for (int i = 0; i < 10; i++)
		assert_int_equal(it[i].status, -ETIMEDOUT);
	/* the queue pairs were moved to ERROR, flushed, and destroyed */
	assert_int_equal(fake.set_error_calls, 2);
	assert_int_equal(fake.qps_destroyed, 4);
	world_close();
}

static void unregistered_destinations_are_refused(void **state)
{
	struct kvt_rdma_item it[2];
	uint8_t stray[BLOCK];

	world_open(64, 1);
	make_items(it, 2);
	it[0].dst = stray;
	assert_int_equal(kvt_rdma_read(W.reader, "owner", it, 2, 5000), 1);
	assert_int_equal(it[0].status, -EFAULT);
	assert_int_equal(it[1].status, 0);
	world_close();
}

static void no_device(void **state)
{
	struct kvt_rdma_opts o;
	struct kvt_rdma *r;

	fake_reset(MiB, 64);
	fake.n_devices = 0;
	kvt_rdma_opts_init(&o, sizeof(o));
	o.verbs = &fake_verbs_ops;
	assert_int_equal(kvt_rdma_open(&o, &r), -ENODEV);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(region_is_registered_in_pieces_at_max_mr_size),
		cmocka_unit_test(queue_pairs_are_made_lazily_and_pooled),
		cmocka_unit_test(reads_are_posted_in_chains_and_polled_in_batches),
		cmocka_unit_test(retry_exceeded_fails_the_blocks),
		cmocka_unit_test(remote_access_error_fails_the_blocks),
		cmocka_unit_test(flushed_reads_fail),
		cmocka_unit_test(a_wrong_rkey_is_refused_by_the_owner),
		cmocka_unit_test(bytes_outside_the_lease_or_checksum_are_not_used),
		cmocka_unit_test(silence_ends_at_the_timeout),
		cmocka_unit_test(unregistered_destinations_are_refused),
		cmocka_unit_test(no_device),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
