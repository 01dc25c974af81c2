/* SPDX-License-Identifier: Apache-2.0 */
/* The store over its list of tiers, with a storage tier that is none of
 * kvtier's: a fake one kept in memory, added with kvt_store_add_tier to a
 * store opened with no SSD tier. Real DRAM tier, real store; what the fake
 * tier does is only what tiers/tier.h asks of a storage tier. It proves that a new tier needs no
 * change to the store: demotion into it, reads back (completions out of
 * order), holds mirrored from pins and readers, a full tier evicting with
 * every block counted, a corrupt record served as a miss, records it held
 * at open joining the index, a KEYED tier answering for blocks the index
 * lacks (as the peer tier of the cluster does), and the batched
 * kvt_acquire_many / kvt_get_many over all of them. */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "helpers.h"
#include "kvtier/store.h"
#include "tiers/tier.h"

/* 4 layers x 2 kv heads x 128 dims x bf16 x 16 tokens x K,V = 64 KiB */
#define BLOCK (64u << 10)
#define DRAM_BYTES (1u << 20) /* 16 slots */
#define FAKE_MAX 256

static uint64_t seed;

/* ---- the fake storage tier ----------------------------------------------- */

struct fake_rec {
	bool used;
	uint32_t gen;
	uint64_t ns_id;
	struct kvt_key key, parent;
	bool has_parent;
	size_t len;
	uint64_t sum;
	char *bytes;
	int held;
};

struct fake {
	struct kvt_storage_tier base; /* first: the ops get this pointer */
	pthread_mutex_t mu;
	struct fake_rec rec[FAKE_MAX];
	size_t capacity;              /* records it takes */
	size_t used;
	struct kvt_tier_rec recovered[FAKE_MAX];
	size_t n_recovered;
	bool degraded;
	/* what the store did through the ops */
	uint64_t writes, reads, key_reads, tombs, lookups, submits;
	struct kvt_key salt_seen;     /* the namespace a read by key named */
};

static struct fake *fake_of(struct kvt_storage_tier *t)
{
	return (struct fake *)t;
}

static uint64_t fake_loc(const struct fake *f, size_t i)
{
	return (uint64_t)f->rec[i].gen << 32 | i;
}

/* The record loc names, or NULL for a stale one. Lock held. */
static struct fake_rec *fake_at(struct fake *f, uint64_t loc)
{
	size_t i = (uint32_t)loc;

	if (i >= FAKE_MAX || !f->rec[i].used || f->rec[i].gen != (uint32_t)(loc >> 32))
		return NULL;
	return &f->rec[i];
}

static struct fake_rec *fake_find(struct fake *f, uint64_t ns_id, const struct kvt_key *key)
{
	for (size_t i = 0; i < FAKE_MAX; i++)
		if (f->rec[i].used && f->rec[i].ns_id == ns_id &&
		    !memcmp(&f->rec[i].key, key, sizeof(*key)))
			return &f->rec[i];
	return NULL;
}

/* Store a block; returns its slot, or -ENOSPC. Lock held. */
static int fake_put(struct fake *f, uint64_t ns_id, const struct kvt_key *key,
		    const struct kvt_key *parent, const void *bytes, size_t len)
{
	if (f->used == f->capacity)
		return -ENOSPC;
	for (size_t i = 0; i < FAKE_MAX; i++) {
		struct fake_rec *r = &f->rec[i];

		if (r->used)
			continue;
		*r = (struct fake_rec){ .used = true, .gen = r->gen + 1, .ns_id = ns_id, .key = *key,
					.len = len, .sum = XXH3_64bits(bytes, len),
					.bytes = malloc(len) };
		assert_non_null(r->bytes);
		memcpy(r->bytes, bytes, len);
		if (parent) {
			r->parent = *parent;
			r->has_parent = true;
		}
		f->used++;
		return (int)i;
	}
	return -ENOSPC;
}

static void fake_drop(struct fake *f, struct fake_rec *r)
{
	free(r->bytes);
	r->bytes = NULL;
	r->used = false;
	r->held = 0;
	f->used--;
}

static int fake_submit(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	struct fake *f = fake_of(t);

	pthread_mutex_lock(&f->mu);
	f->submits++;
	/* the work is done here; wait() reports it, last record first */
	for (size_t k = 0; k < b->n; k++) {
		struct kvt_tier_io *io = &b->io[k];
		struct fake_rec *r;
		int i;

		io->res = 0;
		if (b->write && io->tomb) {
			f->tombs++;
			if ((r = fake_find(f, io->ns_id, &io->key)))
				fake_drop(f, r);
		} else if (b->write) {
			io->res = f->degraded ? -EROFS :
				  (i = fake_put(f, io->ns_id, &io->key,
						io->has_parent ? &io->parent : NULL, io->buf, io->len));
			if (io->res >= 0) {
				io->loc = fake_loc(f, (size_t)io->res);
				io->res = 0;
				f->writes++;
			}
		} else {
			r = io->by_key ? fake_find(f, io->ns_id, &io->key) : fake_at(f, io->loc);
			if (!r || r->ns_id != io->ns_id || memcmp(&r->key, &io->key, sizeof(r->key)) ||
			    r->len != io->len) {
				io->res = -ENOENT;
				continue;
			}
			memcpy(io->buf, r->bytes, io->len);
			io->res = XXH3_64bits(io->buf, io->len) == r->sum ? 0 : -EBADMSG;
			f->reads++;
			f->key_reads += io->by_key;
			if (io->by_key && io->ns_salt)
				f->salt_seen = *io->ns_salt;
		}
	}
	pthread_mutex_unlock(&f->mu);
	return 0;
}

static void fake_wait(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	(void)t;
	for (size_t k = b->n; k-- > 0;)
		if (b->done_cb)
			b->done_cb(b, k);
}

static void fake_free(struct kvt_storage_tier *t, uint64_t loc)
{
	struct fake *f = fake_of(t);
	struct fake_rec *r;

	pthread_mutex_lock(&f->mu);
	if ((r = fake_at(f, loc)))
		fake_drop(f, r);
	pthread_mutex_unlock(&f->mu);
}

static int fake_hold(struct kvt_storage_tier *t, uint64_t loc, int delta)
{
	struct fake *f = fake_of(t);
	struct fake_rec *r;
	int rc = -ENOENT;

	pthread_mutex_lock(&f->mu);
	if ((r = fake_at(f, loc)) && r->held + delta >= 0) {
		r->held += delta;
		rc = 0;
	}
	pthread_mutex_unlock(&f->mu);
	return rc;
}

static size_t fake_take_recovered(struct kvt_storage_tier *t, struct kvt_tier_rec *out,
				  size_t max)
{
	struct fake *f = fake_of(t);
	size_t n = f->n_recovered < max ? f->n_recovered : max;

	memcpy(out, f->recovered, n * sizeof(*out));
	f->n_recovered = 0;
	return n;
}

static bool fake_degraded(struct kvt_storage_tier *t)
{
	struct fake *f = fake_of(t);
	bool d;

	pthread_mutex_lock(&f->mu);
	d = f->degraded;
	pthread_mutex_unlock(&f->mu);
	return d;
}

static int fake_register_region(struct kvt_storage_tier *t, void *base, uint64_t len)
{
	(void)t;
	(void)base;
	(void)len;
	return 0;
}

static void fake_stats(struct kvt_storage_tier *t, struct kvt_store_stats *st)
{
	struct fake *f = fake_of(t);

	st->tier[t->kind].capacity_bytes = (uint64_t)f->capacity * BLOCK;
	st->tier[t->kind].degraded = fake_degraded(t);
}

static int fake_lookup(struct kvt_storage_tier *t, uint64_t ns_id, const struct kvt_key *keys,
		       size_t n)
{
	struct fake *f = fake_of(t);
	int hit = 0;

	pthread_mutex_lock(&f->mu);
	f->lookups++;
	while ((size_t)hit < n && fake_find(f, ns_id, &keys[hit]))
		hit++;
	pthread_mutex_unlock(&f->mu);
	return hit;
}

static void fake_close(struct kvt_storage_tier *t)
{
	(void)t; /* the test owns it, and checks it after the store closed */
}

static const struct kvt_storage_tier_ops fake_ops = {
	.name = "fake",
	.submit = fake_submit,
	.wait = fake_wait,
	.free = fake_free,
	.hold = fake_hold,
	.take_recovered = fake_take_recovered,
	.degraded = fake_degraded,
	.register_region = fake_register_region,
	.stats = fake_stats,
	.lookup = fake_lookup,
	.close = fake_close,
};

static struct fake *fake_new(enum kvt_tier kind, unsigned caps, size_t capacity)
{
	struct fake *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->base = (struct kvt_storage_tier){ .ops = &fake_ops, .kind = kind, .caps = caps };
	f->capacity = capacity;
	pthread_mutex_init(&f->mu, NULL);
	return f;
}

static void fake_destroy(struct fake *f)
{
	for (size_t i = 0; i < FAKE_MAX; i++)
		free(f->rec[i].bytes);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

/* ---- the store around it ------------------------------------------------- */

struct fixture {
	struct kvt_store *store;
	struct kvt_ns *ns;
	uint64_t ns_id;
	struct fake *fake;  /* DEMOTE, as KVT_TIER_SSD */
	struct fake *peer;  /* KEYED, as KVT_TIER_REMOTE; NULL if not added */
	char *buf, *want;
};

static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	k.bytes[8] = 0x7f;
	return k;
}

/* The store with its DRAM tier and the fake tiers, namespace attached. */
static void open_store(struct fixture *f, size_t fake_capacity, bool peer)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	uint64_t id;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = DRAM_BYTES;
	o.dram_huge_pages = false;
	assert_int_equal(kvt_store_open(&o, &f->store), 0);
	if (!f->fake)
		f->fake = fake_new(KVT_TIER_SSD, KVT_TIER_CAP_DEMOTE, fake_capacity);
	assert_int_equal(kvt_store_add_tier(f->store, &f->fake->base), 0);
	if (peer) {
		if (!f->peer)
			f->peer = fake_new(KVT_TIER_REMOTE, KVT_TIER_CAP_KEYED, FAKE_MAX);
		assert_int_equal(kvt_store_add_tier(f->store, &f->peer->base), 0);
		/* one tier of a kind (the fake's close, called on failure, keeps it) */
		assert_int_equal(kvt_store_add_tier(f->store, &f->peer->base), -EEXIST);
	}
	assert_int_equal(kvt_store_add_tier(f->store, NULL), -EINVAL);
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "test/fake-tier");
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 128;
	d.block_tokens = 16;
	assert_int_equal(kvt_ns_attach(f->store, &d, &f->ns), 0);
	assert_int_equal(kvt_ns_block_bytes(f->ns), BLOCK);
	/* the namespace's name in storage records: its salt's first 8 bytes */
	memcpy(&id, kvt_ns_salt(f->ns)->bytes, sizeof(id));
	f->ns_id = le64toh(id);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->buf = malloc(BLOCK);
	f->want = malloc(BLOCK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_store_close(f->store);
	if (f->fake)
		fake_destroy(f->fake);
	if (f->peer)
		fake_destroy(f->peer);
	free(f->buf);
	free(f->want);
	free(f);
	return 0;
}

static void put_chain(struct fixture *f, uint32_t from, uint32_t to)
{
	for (uint32_t n = from; n < to; n++) {
		struct kvt_key k = key_n(n), p = key_n(n - 1);

		kvt_test_fill(f->buf, BLOCK, seed + n);
		assert_int_equal(kvt_put(f->ns, &k, n ? &p : NULL, f->buf, BLOCK), 0);
	}
}

/* Count keys n in [from, to) found in tier `tier`. */
static int count_in(struct fixture *f, uint32_t from, uint32_t to, enum kvt_tier tier)
{
	int c = 0;

	for (uint32_t n = from; n < to; n++) {
		struct kvt_key k = key_n(n);
		uint8_t t = KVT_TIER_NONE;

		kvt_lookup(f->ns, &k, 1, &t);
		c += t == tier;
	}
	return c;
}

/* Wait (bounded) until no block of [0, n) is in DRAM beyond `max` of
 * them: the demoter writes back after the last put returns. */
static void settle(struct fixture *f, uint32_t n)
{
	int prev = -1;

	for (int i = 0; i < 200; i++) {
		int now = count_in(f, 0, n, KVT_TIER_DRAM);

		if (now == prev)
			return;
		prev = now;
		usleep(10000);
	}
}

static void check(struct fixture *f, uint32_t n, const void *bytes)
{
	kvt_test_fill(f->want, BLOCK, seed + n);
	assert_memory_equal(bytes, f->want, BLOCK);
}

/* ---- tests -------------------------------------------------------------- */

static void overflow_goes_to_the_fake_tier_and_comes_back(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_key keys[100];
	uint8_t tiers[100];
	int on_fake;

	open_store(f, 200, false);
	put_chain(f, 0, 100);
	for (uint32_t n = 0; n < 100; n++)
		keys[n] = key_n(n);
	settle(f, 100);
	/* nothing dropped: the whole prefix is there, most of it in the fake */
	assert_int_equal(kvt_lookup(f->ns, keys, 100, tiers), 100);
	on_fake = count_in(f, 0, 100, KVT_TIER_SSD);
	assert_true(on_fake >= 100 - (int)(DRAM_BYTES / BLOCK));
	assert_int_equal(f->fake->writes, (uint64_t)on_fake);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].present);
	assert_int_equal(st.tier[KVT_TIER_SSD].capacity_bytes, 200ull * BLOCK);
	assert_int_equal(st.tier[KVT_TIER_SSD].blocks, (uint64_t)on_fake);
	assert_int_equal(st.dram_dropped, 0);

	/* every block reads back intact, those in the fake through its ops */
	for (uint32_t n = 0; n < 100; n++) {
		assert_int_equal(kvt_get(f->ns, &keys[n], f->buf, BLOCK), 0);
		check(f, n, f->buf);
	}
	assert_true(f->fake->reads >= (uint64_t)on_fake);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.get_misses, 0);
	assert_int_equal(st.blocks, 100);
}

/* Holds live in the catalog (pins and readers); the tier holding the
 * record is told of the first and the last, and of nothing else. */
static void pins_and_readers_hold_the_fake_record(void **state)
{
	struct fixture *f = *state;
	struct kvt_key k0 = key_n(0);
	struct fake_rec *r;
	uint8_t tier;

	open_store(f, 200, false);
	put_chain(f, 0, 60);
	settle(f, 60);
	assert_int_equal(kvt_lookup(f->ns, &k0, 1, &tier), 1);
	assert_int_equal(tier, KVT_TIER_SSD);
	r = fake_find(f->fake, f->ns_id, &k0);
	assert_non_null(r);
	assert_int_equal(r->held, 0);
	assert_int_equal(kvt_pin(f->ns, &k0, 1), 1);
	assert_int_equal(r->held, 1);
	assert_int_equal(kvt_pin(f->ns, &k0, 1), 1); /* pins nest in the catalog */
	assert_int_equal(r->held, 1);
	assert_int_equal(kvt_unpin(f->ns, &k0, 1), 1);
	assert_int_equal(r->held, 1);
	assert_int_equal(kvt_unpin(f->ns, &k0, 1), 1);
	assert_int_equal(r->held, 0);
	/* pinned in the fake tier, a block is read up all the same; its hold
	 * leaves the fake record with it, and the record stays as a copy */
	assert_int_equal(kvt_pin(f->ns, &k0, 1), 1);
	assert_int_equal(kvt_get(f->ns, &k0, f->buf, BLOCK), 0);
	check(f, 0, f->buf);
	assert_int_equal(kvt_lookup(f->ns, &k0, 1, &tier), 1);
	assert_int_equal(tier, KVT_TIER_DRAM);
	assert_int_equal(r->held, 0);
	assert_true(r->used);
	assert_int_equal(kvt_unpin(f->ns, &k0, 1), 1);
}

static void full_fake_tier_evicts_and_counts_every_block(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint64_t present = 0;

	open_store(f, 20, false);
	for (uint32_t n = 0; n < 100; n++) {
		struct kvt_key k = key_n(n);

		kvt_test_fill(f->buf, BLOCK, seed + n);
		assert_int_equal(kvt_put(f->ns, &k, NULL, f->buf, BLOCK), 0);
	}
	settle(f, 100);
	assert_true(f->fake->used <= 20);
	for (uint32_t n = 0; n < 100; n++) {
		struct kvt_key k = key_n(n);

		present += (uint64_t)kvt_lookup(f->ns, &k, 1, NULL);
	}
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].evictions > 0);
	assert_int_equal(present + st.tier[KVT_TIER_SSD].evictions + st.dram_dropped, 100);
	assert_int_equal(st.dram_dropped, 0);
}

static void corrupt_record_is_a_miss_never_data(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_key k3 = key_n(3);
	struct fake_rec *r;

	open_store(f, 200, false);
	put_chain(f, 0, 60);
	settle(f, 60);
	r = fake_find(f->fake, f->ns_id, &k3);
	assert_non_null(r);
	r->bytes[777] ^= 0x5a;
	assert_int_equal(kvt_get(f->ns, &k3, f->buf, BLOCK), -EIO);
	assert_int_equal(kvt_lookup(f->ns, &k3, 1, NULL), 0);
	assert_int_equal(kvt_store_stats(f->store, &st), 0);
	assert_int_equal(st.checksum_failures, 1);
	assert_int_equal(st.tier[KVT_TIER_SSD].errors, 1);
}

/* What a tier held when it opened joins the index as the namespace
 * attaches, and reads back through it. */
static void records_found_at_open_join_the_index(void **state)
{
	struct fixture *f = *state;
	uint64_t id;
	struct kvt_ns_desc d;
	struct kvt_ns *probe;
	struct kvt_store_opts o;
	struct kvt_store *s;

	/* the namespace's storage id, from a throwaway store */
	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = DRAM_BYTES;
	o.dram_huge_pages = false;
	assert_int_equal(kvt_store_open(&o, &s), 0);
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "test/fake-tier");
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 128;
	d.block_tokens = 16;
	assert_int_equal(kvt_ns_attach(s, &d, &probe), 0);
	memcpy(&id, kvt_ns_salt(probe)->bytes, sizeof(id));
	id = le64toh(id);
	kvt_store_close(s);

	f->fake = fake_new(KVT_TIER_SSD, KVT_TIER_CAP_DEMOTE, 200);
	for (uint32_t n = 0; n < 10; n++) {
		struct kvt_key k = key_n(n), p = key_n(n - 1);
		int i;

		kvt_test_fill(f->buf, BLOCK, seed + n);
		i = fake_put(f->fake, id, &k, n ? &p : NULL, f->buf, BLOCK);
		assert_true(i >= 0);
		f->fake->recovered[f->fake->n_recovered++] = (struct kvt_tier_rec){
			.ns_id = id, .key = k, .parent = p, .has_parent = n > 0, .len = BLOCK,
			.loc = fake_loc(f->fake, (size_t)i) };
	}
	open_store(f, 200, false);
	{
		struct kvt_key keys[10];
		uint8_t tiers[10];

		for (uint32_t n = 0; n < 10; n++)
			keys[n] = key_n(n);
		/* a prefix: their parents were linked as they joined */
		assert_int_equal(kvt_lookup(f->ns, keys, 10, tiers), 10);
		for (uint32_t n = 0; n < 10; n++)
			assert_int_equal(tiers[n], KVT_TIER_SSD);
	}
	for (uint32_t n = 0; n < 10; n++) {
		struct kvt_key k = key_n(n);

		assert_int_equal(kvt_get(f->ns, &k, f->buf, BLOCK), 0);
		check(f, n, f->buf);
	}
}

/* A KEYED tier answers for blocks the index lacks: a lookup carries the
 * prefix on through it, and an acquire reads them by key into DRAM, where
 * they join the index. */
static void keyed_tier_serves_blocks_the_index_lacks(void **state)
{
	struct fixture *f = *state;
	struct kvt_key keys[8];
	struct kvt_slot slots[8];
	uint8_t tiers[8];
	int res[8];

	open_store(f, 200, true);
	put_chain(f, 0, 3);
	/* 3..7 are another node's */
	for (uint32_t n = 3; n < 8; n++) {
		struct kvt_key k = key_n(n), p = key_n(n - 1);

		kvt_test_fill(f->buf, BLOCK, seed + n);
		assert_true(fake_put(f->peer, f->ns_id, &k, &p, f->buf, BLOCK) >= 0);
	}
	for (uint32_t n = 0; n < 8; n++)
		keys[n] = key_n(n);
	assert_int_equal(kvt_lookup(f->ns, keys, 8, tiers), 8);
	for (uint32_t n = 0; n < 8; n++)
		assert_int_equal(tiers[n], n < 3 ? KVT_TIER_DRAM : KVT_TIER_REMOTE);

	/* kvt_acquire_local does not ask the KEYED tier */
	f->peer->lookups = 0;
	assert_int_equal(kvt_acquire_local(f->ns, &keys[3], &slots[3]), -ENOENT);
	assert_int_equal(f->peer->lookups + f->peer->key_reads, 0);
	assert_int_equal(kvt_acquire_local(f->ns, &keys[2], &slots[2]), 0);
	check(f, 2, slots[2].data);
	kvt_release(f->ns, &slots[2]);

	assert_int_equal(kvt_acquire_many(f->ns, keys, 8, slots, res, NULL, NULL), 8);
	for (uint32_t n = 0; n < 8; n++) {
		assert_int_equal(res[n], 0);
		check(f, n, slots[n].data);
		kvt_release(f->ns, &slots[n]);
	}
	assert_int_equal(f->peer->key_reads, 5);
	/* a read by key names the namespace whole (a remote tier asks by it) */
	assert_memory_equal(&f->peer->salt_seen, kvt_ns_salt(f->ns), sizeof(struct kvt_key));
	/* they are the store's now: found locally, in DRAM, a prefix */
	f->peer->lookups = 0;
	assert_int_equal(kvt_lookup(f->ns, keys, 8, tiers), 8);
	for (uint32_t n = 0; n < 8; n++)
		assert_int_equal(tiers[n], KVT_TIER_DRAM);
	assert_int_equal(f->peer->lookups, 0);
	/* a key nobody has is a miss */
	{
		struct kvt_key none = key_n(999);

		assert_int_equal(kvt_acquire(f->ns, &none, &slots[0]), -ENOENT);
	}
}

struct seen {
	size_t calls;
	int res[48];
	size_t order[48];
	size_t reading[48];
};

static void seen_cb(void *arg, size_t k, int res, size_t reading)
{
	struct seen *s = arg;

	s->res[k] = res;
	s->reading[s->calls] = reading;
	s->order[s->calls++] = k;
}

/* A batch larger than DRAM: as many blocks as DRAM can hold are lent, the
 * rest get -ENOSPC, each key reported once; a missing key does not stop
 * the others. kvt_get_many copies every block out, however many. */
static void acquire_many_and_get_many(void **state)
{
	struct fixture *f = *state;
	struct kvt_key keys[48];
	struct kvt_slot slots[48];
	void *bufs[48];
	int res[48], ok = 0, nospc = 0;
	struct seen s = { 0 };

	open_store(f, 200, false);
	put_chain(f, 0, 48);
	settle(f, 48);
	for (uint32_t n = 0; n < 48; n++)
		keys[n] = key_n(n == 20 ? 9999 : n); /* 20: absent */
	assert_int_equal(kvt_acquire_many(f->ns, keys, 0, slots, res, NULL, NULL), 0);
	assert_int_equal(kvt_acquire_many(f->ns, keys, 4, NULL, res, NULL, NULL), -EINVAL);
	ok = kvt_acquire_many(f->ns, keys, 48, slots, res, seen_cb, &s);
	assert_int_equal(s.calls, 48);
	/* blocks still being read are among those not reported yet, and none
	 * is left being read when the last is reported */
	assert_true(s.reading[0] > 0);
	for (size_t c = 0; c < 48; c++)
		assert_true(s.reading[c] <= 47 - c);
	assert_int_equal(s.reading[47], 0);
	for (uint32_t n = 0; n < 48; n++) {
		assert_int_equal(s.res[n], res[n]);
		if (n == 20) {
			assert_int_equal(res[n], -ENOENT);
		} else if (res[n] == 0) {
			check(f, n, slots[n].data);
		} else {
			assert_int_equal(res[n], -ENOSPC);
			nospc++;
		}
	}
	assert_true(ok >= (int)(DRAM_BYTES / BLOCK) * 3 / 4 && ok <= (int)(DRAM_BYTES / BLOCK));
	assert_int_equal(ok + nospc + 1, 48);
	for (uint32_t n = 0; n < 48; n++)
		if (res[n] == 0)
			kvt_release(f->ns, &slots[n]);

	for (uint32_t n = 0; n < 48; n++)
		bufs[n] = malloc(BLOCK);
	assert_int_equal(kvt_get_many(f->ns, keys, 48, bufs, BLOCK, res), 47);
	for (uint32_t n = 0; n < 48; n++) {
		if (n == 20) {
			assert_int_equal(res[n], -ENOENT);
			continue;
		}
		assert_int_equal(res[n], 0);
		check(f, n, bufs[n]);
	}
	for (uint32_t n = 0; n < 48; n++)
		free(bufs[n]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(overflow_goes_to_the_fake_tier_and_comes_back, setup,
						teardown),
		cmocka_unit_test_setup_teardown(pins_and_readers_hold_the_fake_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(full_fake_tier_evicts_and_counts_every_block, setup,
						teardown),
		cmocka_unit_test_setup_teardown(corrupt_record_is_a_miss_never_data, setup, teardown),
		cmocka_unit_test_setup_teardown(records_found_at_open_join_the_index, setup, teardown),
		cmocka_unit_test_setup_teardown(keyed_tier_serves_blocks_the_index_lacks, setup,
						teardown),
		cmocka_unit_test_setup_teardown(acquire_many_and_get_many, setup, teardown),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
