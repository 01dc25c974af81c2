/* SPDX-License-Identifier: Apache-2.0 */
/* Many threads at once on one small store: put, get, acquire, lookup and
 * remove over a shared key space, with evictions all the while. A block's
 * bytes derive from its key, so any thread can check any block it reads:
 * nothing may come back corrupted, and the accounting must add up after. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvtier/store.h"

#define THREADS 8
#define OPS 20000
#define KEYS 600
#define BLOCK (64u << 10)
#define DRAM (16u << 20) /* 256 slots for 600 keys: constant eviction */

static struct kvt_ns *ns;
static uint64_t base_seed;

struct worker {
	pthread_t tid;
	uint64_t seed;
	long bad, hits;
};

static struct kvt_key key_n(uint32_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	return k;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	uint8_t *buf = malloc(BLOCK), *want = malloc(BLOCK);
	uint64_t s = w->seed;

	for (int op = 0; op < OPS; op++) {
		uint32_t n = (uint32_t)(kvt_test_rand(&s) % KEYS);
		struct kvt_key k = key_n(n), p = key_n(n - 1);
		struct kvt_slot slot;
		int err;

		kvt_test_fill(want, BLOCK, base_seed + n);
		switch (kvt_test_rand(&s) % 6) {
		case 0:
		case 1:
			err = kvt_put(ns, &k, n ? &p : NULL, want, BLOCK);
			w->bad += err && err != -EEXIST && err != -EBUSY; /* EBUSY: removed, still read */
			break;
		case 2:
			err = kvt_get(ns, &k, buf, BLOCK);
			if (!err) {
				w->hits++;
				w->bad += memcmp(buf, want, BLOCK) != 0;
			} else {
				w->bad += err != -ENOENT;
			}
			break;
		case 3:
			err = kvt_acquire(ns, &k, &slot);
			if (!err) {
				w->hits++;
				w->bad += memcmp(slot.data, want, BLOCK) != 0;
				kvt_release(ns, &slot);
			} else {
				w->bad += err != -ENOENT;
			}
			break;
		case 4: {
			struct kvt_key keys[8];
			for (uint32_t i = 0; i < 8; i++)
				keys[i] = key_n((n + i) % KEYS);
			err = kvt_lookup(ns, keys, 8, NULL);
			w->bad += err < 0 || err > 8;
			break;
		}
		case 5:
			err = kvt_remove(ns, &k);
			w->bad += err && err != -ENOENT;
			break;
		}
	}
	free(buf);
	free(want);
	return NULL;
}

int main(void)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_store *store;
	struct worker w[THREADS];
	struct kvt_store_stats st = { .size = sizeof(st) };
	uint64_t live = 0;
	long bad = 0, hits = 0;
	int err;

	base_seed = kvt_test_seed();
	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = DRAM;
	o.dram_huge_pages = false;
	if ((err = kvt_store_open(&o, &store))) {
		fprintf(stderr, "open: %s\n", kvt_strerror(err));
		return 1;
	}
	kvt_ns_desc_init(&d, sizeof(d));
	strcpy(d.model_id, "threads");
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 128;
	d.block_tokens = 16; /* K,V x 4 layers x 2 heads x 128 x bf16 x 16 = 64 KiB */
	if ((err = kvt_ns_attach(store, &d, &ns)) || kvt_ns_block_bytes(ns) != BLOCK) {
		fprintf(stderr, "attach: %s\n", kvt_strerror(err));
		return 1;
	}
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .seed = base_seed * (t + 1) + 1 };
		pthread_create(&w[t].tid, NULL, work, &w[t]);
	}
	for (int t = 0; t < THREADS; t++) {
		pthread_join(w[t].tid, NULL);
		bad += w[t].bad;
		hits += w[t].hits;
	}
	for (uint32_t n = 0; n < KEYS; n++) {
		struct kvt_key k = key_n(n);
		live += kvt_lookup(ns, &k, 1, NULL) == 1;
	}
	kvt_store_stats(store, &st);
	printf("ops %d, reads that hit %ld, corrupt or unexpected errors %ld, live %llu, "
	       "evictions %llu\n",
	       THREADS * OPS, hits, bad, (unsigned long long)live,
	       (unsigned long long)st.tier[KVT_TIER_DRAM].evictions);
	kvt_store_close(store);
	if (bad || hits == 0 || st.tier[KVT_TIER_DRAM].blocks != live ||
	    st.tier[KVT_TIER_DRAM].used_bytes != live * BLOCK ||
	    st.tier[KVT_TIER_DRAM].evictions == 0) {
		fprintf(stderr, "FAIL: accounting blocks=%llu used=%llu live=%llu\n",
			(unsigned long long)st.tier[KVT_TIER_DRAM].blocks,
			(unsigned long long)st.tier[KVT_TIER_DRAM].used_bytes,
			(unsigned long long)live);
		return 1;
	}
	return 0;
}
