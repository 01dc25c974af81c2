/* SPDX-License-Identifier: Apache-2.0 */
/* The DRAM tier across a restart of its process (kvt_store_opts.dram_warm):
 * a store hands its region's memfd to the next store, which finds every
 * committed block with its namespace; a header a kill cut short, bytes that
 * changed, and a region of another version or geometry are refused, never
 * served, nor bytes that change after the restart before their first use;
 * more namespaces than 256; blocks committed with the sum their copy
 * computed; the region's mode and seals; a clean stop writing DRAM-only
 * blocks down to the SSD tier under the admission rule. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "kvtier/store.h"
#include "store/store_impl.h"
#include "tiers/dram.h"
#include "tiers/warm_region.h"
#include "util/block_sum.h"

/* 8 KiB blocks, a 4 MiB DRAM tier of 1 MiB slabs. */
#define BLOCK (2u * 2 * 1 * 64 * 2 * 16)
#define DRAM_BYTES (4u << 20)
#define N_BLOCKS 96u

static void small_desc(struct kvt_ns_desc *d, const char *model)
{
	kvt_ns_desc_init(d, sizeof(*d));
	snprintf(d->model_id, sizeof(d->model_id), "%s", model);
	d->layers = 2;
	d->kv_heads = 1;
	d->head_dim = 64;
	d->block_tokens = 16;
	memcpy(d->tenant_salt, "tenant-a", 8);
	d->tenant_salt_len = 8;
}

static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	k.bytes[15] = 0x5a;
	return k;
}

static int open_warm(struct kvt_store **out, uint64_t dram, const char *ssd_dir, int fd,
		     const char *admission)
{
	struct kvt_store_opts o;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = dram;
	o.dram_slab_bytes = 1u << 20;
	o.dram_huge_pages = false;
	o.dram_warm = true;
	o.dram_fd = fd;
	o.ssd_dir = ssd_dir;
	o.ssd_bytes = ssd_dir ? 32u << 20 : 0;
	o.ssd_admission = admission;
	return kvt_store_open(&o, out);
}

/* n chained blocks (each the parent of the next) of seed's bytes. */
static void put_chain(struct kvt_ns *ns, uint32_t n, uint64_t seed)
{
	uint8_t buf[BLOCK];

	for (uint32_t i = 0; i < n; i++) {
		struct kvt_key k = key_n(i), p = key_n(i - 1);

		kvt_test_fill(buf, sizeof(buf), seed + i);
		assert_int_equal(kvt_put(ns, &k, i ? &p : NULL, buf, sizeof(buf)), 0);
	}
}

/* Whether block i reads back as seed's bytes: 0, or the get's error. */
static int check_block(struct kvt_ns *ns, uint32_t i, uint64_t seed)
{
	uint8_t buf[BLOCK], want[BLOCK];
	struct kvt_key k = key_n(i);
	int err = kvt_get(ns, &k, buf, sizeof(buf));

	if (err)
		return err;
	kvt_test_fill(want, sizeof(want), seed + i);
	return memcmp(buf, want, sizeof(buf)) ? -EBADMSG : 0;
}

static void warm_stats(struct kvt_store *s, struct kvt_store_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	assert_int_equal(kvt_store_stats(s, st), 0);
}

/* Fill a warm store, and close it with a dup of its region kept. */
static int filled_region(uint64_t seed, struct kvt_store **keep_open)
{
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	int fd;

	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, -1, NULL), 0);
	small_desc(&d, "test/warm");
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	put_chain(ns, N_BLOCKS, seed);
	fd = dup(kvt_store_dram_fd(s));
	assert_true(fd >= 0);
	if (keep_open)
		*keep_open = s;
	else
		kvt_store_close(s);
	return fd;
}

static void region_mode_and_seals(void **state)
{
	struct kvt_store *s;
	struct stat st;
	int fd, seals;

	(void)state;
	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, -1, NULL), 0);
	fd = kvt_store_dram_fd(s);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	/* nobody but the daemon's uid opens it through /proc/PID/fd */
	assert_int_equal(st.st_mode & 0777, 0600);
	seals = fcntl(fd, F_GET_SEALS);
	assert_int_equal(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	/* no holder can pull its pages from under a mapping, nor unseal it */
	assert_int_equal(ftruncate(fd, 4096), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
	/* close-on-exec: only what the daemon hands on explicitly leaves it */
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	kvt_store_close(s);
}

static void blocks_survive_handover(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	struct kvt_key keys[N_BLOCKS];
	uint8_t tiers[N_BLOCKS];
	int fd = filled_region(seed, NULL);

	(void)state;
	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, fd, NULL), 0);
	warm_stats(s, &st);
	assert_true(st.warm.on && st.warm.adopted && !st.warm.refused);
	assert_int_equal(st.warm.generation, 2);
	assert_int_equal(st.warm.blocks, N_BLOCKS);
	assert_int_equal(st.warm.bytes, (uint64_t)N_BLOCKS * BLOCK);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, N_BLOCKS);
	assert_int_equal(st.namespaces, 1); /* attached again from the region */
	/* the same descriptor (model and tenant) gets the same namespace */
	small_desc(&d, "test/warm");
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	warm_stats(s, &st);
	assert_int_equal(st.namespaces, 1);
	for (uint32_t i = 0; i < N_BLOCKS; i++)
		keys[i] = key_n(i);
	assert_int_equal(kvt_lookup(ns, keys, N_BLOCKS, tiers), N_BLOCKS);
	assert_int_equal(tiers[N_BLOCKS - 1], KVT_TIER_DRAM);
	for (uint32_t i = 0; i < N_BLOCKS; i++)
		assert_int_equal(check_block(ns, i, seed), 0);
	warm_stats(s, &st);
	assert_int_equal(st.warm.verified, N_BLOCKS);
	assert_int_equal(st.warm.dropped_checksum, 0);
	/* new blocks and removals go on as usual, and survive a second time */
	{
		uint8_t buf[BLOCK];
		struct kvt_key k = key_n(1000), gone = key_n(5);

		kvt_test_fill(buf, sizeof(buf), seed + 1000);
		assert_int_equal(kvt_put(ns, &k, NULL, buf, sizeof(buf)), 0);
		assert_int_equal(kvt_remove(ns, &gone), 0);
	}
	fd = dup(kvt_store_dram_fd(s));
	kvt_store_close(s);
	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, fd, NULL), 0);
	warm_stats(s, &st);
	assert_int_equal(st.warm.generation, 3);
	assert_int_equal(st.warm.blocks, N_BLOCKS);
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	assert_int_equal(check_block(ns, 1000, seed), 0);
	assert_int_equal(check_block(ns, 5, seed), -ENOENT);
	assert_int_equal(check_block(ns, 6, seed), 0);
	kvt_store_close(s);
}

/* Another tenant's descriptor of the same model is another namespace: it
 * finds none of these blocks. */
static void tenants_stay_apart(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	int fd = filled_region(seed, NULL);

	(void)state;
	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, fd, NULL), 0);
	small_desc(&d, "test/warm");
	memcpy(d.tenant_salt, "tenant-b", 8);
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	assert_int_equal(check_block(ns, 0, seed), -ENOENT);
	kvt_store_close(s);
}

/* The header of slot k (in slot order) of a warm store that says committed. */
static struct kvt_warm_slot *committed_hdr(struct kvt_store *s, uint32_t k)
{
	struct kvt_warm_region *wr = kvt_dram_warm(s->mem);

	for (uint32_t si = 0; si < wr->g.n_slabs; si++)
		for (uint32_t idx = 0; idx < wr->g.slots_per_slab; idx++) {
			struct kvt_warm_slot *h = kvt_warm_slot_hdr(wr, si, idx);

			if (h->state == KVT_WARM_COMMITTED && k-- == 0)
				return h;
		}
	return NULL;
}

/* A kill in the middle of a commit leaves its header WRITING; a block whose
 * bytes changed after its commit (a stray write, a slot half rewritten)
 * fails its checksum at first use; a header whose fields changed fails its
 * own. None is served; every other block is. */
static void torn_and_corrupt_slots_dropped(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	struct kvt_warm_slot *h;
	struct kvt_key torn_key, bad_key, hdr_key;
	uint32_t served = 0, dropped = 0;
	void *base;
	uint64_t len;
	int fd = filled_region(seed, &s);

	(void)state;
	h = committed_hdr(s, 3);
	torn_key = h->key;
	h->state = KVT_WARM_WRITING;
	h = committed_hdr(s, 10);
	hdr_key = h->key;
	h->len ^= 1; /* no longer matches its sum */
	/* the bytes of the block in slot 20: found through the region */
	h = committed_hdr(s, 20);
	bad_key = h->key;
	assert_int_equal(kvt_store_dram_region(s, &base, &len), 0);
	{
		uint32_t n;
		struct kvt_slot slot;

		memcpy(&n, bad_key.bytes, sizeof(n));
		small_desc(&d, "test/warm");
		assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
		assert_int_equal(kvt_acquire(ns, &bad_key, &slot), 0);
		((uint8_t *)slot.data)[BLOCK / 2] ^= 0xff; /* half rewritten */
		kvt_release(ns, &slot);
	}
	kvt_store_close(s);

	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, fd, NULL), 0);
	warm_stats(s, &st);
	assert_int_equal(st.warm.dropped_torn, 1);
	assert_int_equal(st.warm.dropped_header, 1);
	assert_int_equal(st.warm.blocks, N_BLOCKS - 2);
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	for (uint32_t i = 0; i < N_BLOCKS; i++) {
		struct kvt_key k = key_n(i);
		int err = check_block(ns, i, seed);

		if (!memcmp(&k, &torn_key, sizeof(k)) || !memcmp(&k, &hdr_key, sizeof(k))) {
			assert_int_equal(err, -ENOENT);
			dropped++;
		} else if (!memcmp(&k, &bad_key, sizeof(k))) {
			assert_int_equal(err, -EIO); /* dropped, never served */
			assert_int_equal(check_block(ns, i, seed), -ENOENT);
			dropped++;
		} else {
			assert_int_equal(err, 0);
			served++;
		}
	}
	assert_int_equal(dropped, 3);
	assert_int_equal(served, N_BLOCKS - 3);
	warm_stats(s, &st);
	assert_int_equal(st.warm.dropped_checksum, 1);
	assert_int_equal(st.warm.verified, N_BLOCKS - 3);
	kvt_store_close(s);
}

/* The location of the block in slot k (in slot order) that says committed. */
static uint64_t committed_loc(struct kvt_store *s, uint32_t k)
{
	struct kvt_warm_region *wr = kvt_dram_warm(s->mem);

	for (uint32_t si = 0; si < wr->g.n_slabs; si++)
		for (uint32_t idx = 0; idx < wr->g.slots_per_slab; idx++)
			if (kvt_warm_slot_hdr(wr, si, idx)->state == KVT_WARM_COMMITTED && k-- == 0)
				return (uint64_t)si << 32 | idx;
	fail_msg("no committed slot %u", k);
	return 0;
}

/* Bytes that change after the restart, before the block's first use (a
 * stray write into the adopted region), are caught by the lazy check: the
 * block is not served and counts as dropped. */
static void payload_corrupted_after_restart_dropped(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	struct kvt_key bad_key;
	uint32_t bad = UINT32_MAX;
	uint64_t loc;
	uint8_t *bytes;
	int fd = filled_region(seed, NULL);

	(void)state;
	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, fd, NULL), 0);
	loc = committed_loc(s, 17);
	bad_key = kvt_dram_slot_hdr(s->mem, loc)->key;
	bytes = s->mem->ops->slot_ptr(s->mem, loc);
	bytes[BLOCK - 1] ^= 0x01; /* one bit, the last byte */
	small_desc(&d, "test/warm");
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	for (uint32_t i = 0; i < N_BLOCKS; i++) {
		struct kvt_key k = key_n(i);

		if (!memcmp(&k, &bad_key, sizeof(k)))
			bad = i;
		else
			assert_int_equal(check_block(ns, i, seed), 0);
	}
	assert_true(bad < N_BLOCKS);
	assert_int_equal(check_block(ns, bad, seed), -EIO); /* never served */
	assert_int_equal(check_block(ns, bad, seed), -ENOENT);
	warm_stats(s, &st);
	assert_int_equal(st.warm.dropped_checksum, 1);
	assert_int_equal(st.warm.verified, N_BLOCKS - 1);
	assert_int_equal(st.checksum_failures, 1);
	kvt_store_close(s);
}

/* More namespaces than the region's table once held (256) each keep their
 * blocks across a restart: none is dropped for want of a table entry. */
static void many_namespaces_survive(void **state)
{
	enum { N_NS = 300 };
	uint64_t seed = kvt_test_seed();
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	char model[32];
	uint32_t back = 0;
	int fd;

	(void)state;
	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, -1, NULL), 0);
	for (int m = 0; m < N_NS; m++) {
		uint8_t buf[BLOCK];
		struct kvt_key k = key_n(0);

		snprintf(model, sizeof(model), "test/warm-%d", m);
		small_desc(&d, model);
		assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
		kvt_test_fill(buf, sizeof(buf), seed + (uint64_t)m);
		assert_int_equal(kvt_put(ns, &k, NULL, buf, sizeof(buf)), 0);
	}
	fd = dup(kvt_store_dram_fd(s));
	kvt_store_close(s);

	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, fd, NULL), 0);
	warm_stats(s, &st);
	printf("# %d namespaces: %llu blocks back, %llu dropped for their namespace\n", N_NS,
	       (unsigned long long)st.warm.blocks, (unsigned long long)st.warm.dropped_namespace);
	assert_int_equal(st.warm.dropped_namespace, 0);
	assert_int_equal(st.warm.blocks, N_NS);
	assert_int_equal(st.namespaces, N_NS);
	for (int m = 0; m < N_NS; m++) {
		snprintf(model, sizeof(model), "test/warm-%d", m);
		small_desc(&d, model);
		assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
		back += check_block(ns, 0, seed + (uint64_t)m) == 0;
	}
	assert_int_equal(back, N_NS);
	kvt_store_close(s);
}

/* A block filled in place with its sum computed on the way
 * (kvt_commit_summed) survives like any other; one committed with a sum
 * that is not its bytes' is dropped at its first use, never served. */
static void summed_commits_verify(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	uint8_t buf[BLOCK];
	int fd;

	(void)state;
	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, -1, NULL), 0);
	small_desc(&d, "test/warm");
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	assert_true(kvt_ns_sums_blocks(ns));
	for (uint32_t i = 0; i < 8; i++) {
		struct kvt_key k = key_n(i), p = key_n(i - 1);
		struct kvt_slot slot;
		uint64_t sum;

		kvt_test_fill(buf, sizeof(buf), seed + i);
		assert_int_equal(kvt_reserve(ns, &k, i ? &p : NULL, &slot), 0);
		sum = kvt_copy_sum(slot.data, buf, sizeof(buf));
		assert_int_equal(kvt_commit_summed(ns, &slot, i == 5 ? sum ^ 1 : sum), 0);
	}
	fd = dup(kvt_store_dram_fd(s));
	kvt_store_close(s);

	assert_int_equal(open_warm(&s, DRAM_BYTES, NULL, fd, NULL), 0);
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(check_block(ns, i, seed), i == 5 ? -EIO : 0);
	warm_stats(s, &st);
	assert_int_equal(st.warm.blocks, 8);
	assert_int_equal(st.warm.verified, 7);
	assert_int_equal(st.warm.dropped_checksum, 1);
	kvt_store_close(s);
}

static void open_refused(int fd, uint64_t dram, const char *why)
{
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;

	printf("# region handed in: %s\n", why);
	assert_int_equal(open_warm(&s, dram, NULL, fd, NULL), 0);
	warm_stats(s, &st);
	assert_true(st.warm.on && !st.warm.adopted && st.warm.refused);
	assert_int_equal(st.warm.blocks, 0);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 0);
	/* the fd handed in was the store's: closed when refused (its number
	 * may have gone to the new region) */
	assert_true(kvt_store_dram_fd(s) >= 0);
	assert_true(fcntl(fd, F_GETFD) == -1 || fd == kvt_store_dram_fd(s));
	small_desc(&d, "test/warm");
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	assert_int_equal(check_block(ns, 0, 0), -ENOENT);
	put_chain(ns, 4, 7); /* and it works, empty */
	assert_int_equal(check_block(ns, 3, 7), 0);
	kvt_store_close(s);
}

static void other_version_or_geometry_refused(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct stat sb;
	uint32_t *version;
	uint8_t *map;
	char path[] = "/tmp/warm-notmemfd-XXXXXX";
	int fd, pipefd[2];

	(void)state;
	/* another DRAM size: another geometry */
	open_refused(filled_region(seed, NULL), DRAM_BYTES * 2, "another geometry");
	/* another version of the format */
	fd = filled_region(seed, NULL);
	assert_int_equal(fstat(fd, &sb), 0);
	map = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(map != MAP_FAILED);
	version = (uint32_t *)(map + 8);
	assert_int_equal(*version, KVT_WARM_VERSION);
	*version = KVT_WARM_VERSION + 1;
	munmap(map, (size_t)sb.st_size);
	open_refused(fd, DRAM_BYTES, "another version");
	/* not a region at all: a regular file, a pipe */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	open_refused(fd, DRAM_BYTES, "a plain file");
	assert_int_equal(pipe(pipefd), 0);
	close(pipefd[1]);
	open_refused(pipefd[0], DRAM_BYTES, "a pipe");
}

/* A clean stop without a successor writes what only DRAM holds down to the
 * SSD tier: a store opened on the directory alone (the region lost) finds
 * every block. Without the write-down it finds none of them. */
static void write_down_keeps_dram_only_blocks(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_write_down wd;
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	char *dir;

	(void)state;
	small_desc(&d, "test/warm");
	for (int with = 0; with < 2; with++) {
		uint32_t found = 0;

		dir = kvt_test_mkdtemp("warm-wd");
		assert_int_equal(open_warm(&s, DRAM_BYTES, dir, -1, NULL), 0);
		assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
		put_chain(ns, 64, seed);
		if (with) {
			assert_int_equal(kvt_store_write_down(s, 10000, &wd), 0);
			assert_int_equal(wd.written, 64);
			assert_int_equal(wd.written_bytes, 64ull * BLOCK);
			assert_int_equal(wd.left, 0);
			/* they stay in DRAM, now with clean copies: a second pass
			 * has nothing to write */
			warm_stats(s, &st);
			assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 64);
			assert_int_equal(st.warm.write_down.written, 64);
			assert_int_equal(kvt_store_write_down(s, 10000, &wd), 0);
			assert_int_equal(wd.written, 0);
		}
		kvt_store_close(s);
		assert_int_equal(open_warm(&s, DRAM_BYTES, dir, -1, NULL), 0);
		assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
		for (uint32_t i = 0; i < 64; i++)
			found += check_block(ns, i, seed) == 0;
		printf("# %s the write-down: %u of 64 blocks after a stop\n",
		       with ? "with" : "without", found);
		assert_int_equal(found, with ? 64 : 0);
		kvt_store_close(s);
		kvt_test_rmdir(dir);
		free(dir);
	}
}

/* The admission rule decides what is written down ("reused": blocks used
 * at least twice); after a hand-over, a block both in the region and on
 * SSD is one record, in DRAM, with its SSD copy. */
static void write_down_under_admission_then_handover(void **state)
{
	uint64_t seed = kvt_test_seed();
	struct kvt_write_down wd;
	struct kvt_store_stats st;
	struct kvt_store *s;
	struct kvt_ns_desc d;
	struct kvt_ns *ns;
	char *dir = kvt_test_mkdtemp("warm-adm");
	int fd;

	(void)state;
	small_desc(&d, "test/warm");
	assert_int_equal(open_warm(&s, DRAM_BYTES, dir, -1, "reused"), 0);
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	put_chain(ns, 32, seed);
	for (uint32_t i = 0; i < 8; i++) /* used again: admitted */
		assert_int_equal(check_block(ns, i, seed), 0);
	assert_int_equal(kvt_store_write_down(s, 10000, &wd), 0);
	assert_int_equal(wd.written, 8);
	assert_int_equal(wd.refused, 24);
	fd = dup(kvt_store_dram_fd(s));
	kvt_store_close(s);

	assert_int_equal(open_warm(&s, DRAM_BYTES, dir, fd, "reused"), 0);
	warm_stats(s, &st);
	assert_int_equal(st.warm.blocks, 32);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 32);
	assert_int_equal(st.tier[KVT_TIER_SSD].blocks, 0);
	assert_int_equal(kvt_ns_attach(s, &d, &ns), 0);
	for (uint32_t i = 0; i < 32; i++)
		assert_int_equal(check_block(ns, i, seed), 0);
	kvt_store_close(s);
	kvt_test_rmdir(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(region_mode_and_seals),
		cmocka_unit_test(blocks_survive_handover),
		cmocka_unit_test(tenants_stay_apart),
		cmocka_unit_test(torn_and_corrupt_slots_dropped),
		cmocka_unit_test(other_version_or_geometry_refused),
		cmocka_unit_test(write_down_keeps_dram_only_blocks),
		cmocka_unit_test(write_down_under_admission_then_handover),
		cmocka_unit_test(payload_corrupted_after_restart_dropped),
		cmocka_unit_test(many_namespaces_survive),
		cmocka_unit_test(summed_commits_verify),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
