/* SPDX-License-Identifier: Apache-2.0 */
/* SSD admission rules through the store's catalog: no rule (or another
 * tier) admits everything; "reused" refuses blocks used once and admits
 * them when they come back while remembered; "useful" always admits its
 * sampled blocks and refuses a class the tier does not read back, admits
 * one it does; refuses ends and admits inner blocks until it has measured
 * them, admits blocks used twice, refuses the blocks under one it refused,
 * and refuses a class read back less than the room it takes is
 * worth (blocks that left the tier coming back). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "catalog_helpers.h"
#include "helpers.h"
#include "store/ghost.h"

static uint32_t add(struct kvt_catalog *cat, uint32_t id)
{
	return cat_add(cat, id, 0, 1);
}

/* cat: an LRU catalog of slots records, rule deciding what enters the SSD. */
static void open_lru(struct kvt_catalog *cat, uint32_t slots, const char *rule)
{
	assert_int_equal(kvt_catalog_init(cat, kvt_policy_find("lru"), slots), 0);
	assert_int_equal(kvt_catalog_set_admission(cat, kvt_admission_find(rule), KVT_TIER_SSD), 0);
}

/* Whether the "useful" rule samples block id (one in 16 by key hash). */
static bool sampled(struct kvt_catalog *cat, uint32_t i)
{
	return kvt_ghost_hash(kvt_index_rec(cat->idx, i)) >> 60 == 0;
}

static void no_rule_admits_everything(void **state)
{
	struct kvt_catalog cat;
	uint32_t i;

	assert_int_equal(kvt_catalog_init(&cat, kvt_policy_find("lru"), 16), 0);
	i = add(&cat, 1);
	assert_true(kvt_catalog_admit(&cat, i, KVT_TIER_SSD));
	assert_int_equal(kvt_catalog_set_admission(&cat, kvt_admission_find("reused"),
						   KVT_TIER_SSD), 0);
	/* the rule covers SSD only */
	assert_true(kvt_catalog_admit(&cat, i, KVT_TIER_DRAM));
	assert_int_equal(cat.admission.admitted + cat.admission.refused, 0);
	assert_null(kvt_admission_find("no-such-rule"));
	assert_non_null(kvt_admission_find("always"));
	kvt_catalog_fini(&cat);
}

static void reused_refuses_single_use_until_it_returns(void **state)
{
	struct kvt_catalog cat;
	uint32_t a, b;

	open_lru(&cat, 16, "reused");
	a = add(&cat, 1);
	b = add(&cat, 2);
	kvt_catalog_touch(&cat, b);
	assert_false(kvt_catalog_admit(&cat, a, KVT_TIER_SSD)); /* used once */
	assert_true(kvt_catalog_admit(&cat, b, KVT_TIER_SSD));  /* used twice */
	kvt_catalog_move(&cat, b, KVT_TIER_SSD);
	kvt_catalog_drop(&cat, a);
	/* 1 comes back while the refusal is remembered: the second use */
	a = add(&cat, 1);
	assert_true(kvt_catalog_admit(&cat, a, KVT_TIER_SSD));
	/* a new block 3 with the record number of a dropped one starts over */
	kvt_catalog_drop(&cat, a);
	a = add(&cat, 3);
	assert_false(kvt_catalog_admit(&cat, a, KVT_TIER_SSD));
	assert_int_equal(cat.admission.admitted, 2);
	assert_int_equal(cat.admission.refused, 2);
	kvt_catalog_fini(&cat);
}

/* Write `n` fresh blocks of the class into SSD through the rule: the
 * sampled ones go in (and, when read_back, are read there), the others are
 * counted refused or admitted; all leave the tier. Returns how many of the
 * unsampled were refused. */
static int write_fresh(struct kvt_catalog *cat, uint32_t *next, int n, bool read_back,
		       int *unsampled)
{
	int refused = 0;

	*unsampled = 0;
	for (int k = 0; k < n; k++) {
		uint32_t i = add(cat, (*next)++);
		bool s = sampled(cat, i);

		if (!kvt_catalog_admit(cat, i, KVT_TIER_SSD)) {
			assert_false(s); /* the sampled ones always go in */
			refused++;
			(*unsampled)++;
			kvt_catalog_drop(cat, i);
			continue;
		}
		*unsampled += !s;
		kvt_catalog_move(cat, i, KVT_TIER_SSD);
		if (read_back)
			kvt_catalog_touch(cat, i); /* a hit in SSD */
		kvt_catalog_drop(cat, i);
	}
	return refused;
}

static void useful_follows_what_the_tier_reads_back(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1;
	int unsampled, refused;

	open_lru(&cat, 1024, "useful");
	/* fresh blocks never read back from SSD: once enough sampled ones left
	 * unread, the class is refused */
	write_fresh(&cat, &next, 2000, false, &unsampled);
	refused = write_fresh(&cat, &next, 2000, false, &unsampled);
	assert_int_equal(refused, unsampled);
	/* now every sampled one is read back: the class is admitted again */
	write_fresh(&cat, &next, 4000, true, &unsampled);
	refused = write_fresh(&cat, &next, 2000, true, &unsampled);
	assert_int_equal(refused, 0);
	kvt_catalog_fini(&cat);
}

/* The first id from *next whose block "useful" does not sample, *next past
 * it. */
static uint32_t unsampled_id(struct kvt_catalog *cat, uint32_t *next)
{
	for (;;) {
		uint32_t id = (*next)++, i = add(cat, id);
		bool s = sampled(cat, i);

		kvt_catalog_drop(cat, i);
		if (!s)
			return id;
	}
}

static void useful_refuses_ends_and_admits_inner_blocks_until_measured(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1, end, inner, kid, e, i;

	open_lru(&cat, 64, "useful");
	end = unsampled_id(&cat, &next);
	inner = unsampled_id(&cat, &next);
	e = add(&cat, end);
	i = add(&cat, inner);
	kid = cat_add(&cat, next++, inner, 1); /* stored under inner */
	assert_false(kvt_catalog_admit(&cat, e, KVT_TIER_SSD));
	assert_true(kvt_catalog_admit(&cat, i, KVT_TIER_SSD));
	/* the child leaving first does not make inner an end */
	kvt_catalog_drop(&cat, kid);
	assert_true(kvt_catalog_admit(&cat, i, KVT_TIER_SSD));
	/* an end used twice has shown it returns */
	kvt_catalog_touch(&cat, e);
	assert_true(kvt_catalog_admit(&cat, e, KVT_TIER_SSD));
	kvt_catalog_fini(&cat);
}

/* A block used once with a block stored under it, through the rule into
 * SSD: when admitted, moved there, read there when `read`, and dropped;
 * when `back`, stored again (and dropped) once it left. Returns whether it
 * was admitted; *was_sampled says whether the rule sampled it. */
static bool inner_block(struct kvt_catalog *cat, uint32_t *next, bool read, bool back,
			bool *was_sampled)
{
	uint32_t id = (*next)++, i = add(cat, id), kid = cat_add(cat, (*next)++, id, 1);
	bool in;

	kvt_catalog_drop(cat, kid);
	*was_sampled = sampled(cat, i);
	in = kvt_catalog_admit(cat, i, KVT_TIER_SSD);
	if (in) {
		kvt_catalog_move(cat, i, KVT_TIER_SSD);
		if (read)
			kvt_catalog_touch(cat, i);
	}
	kvt_catalog_drop(cat, i);
	if (in && back)
		kvt_catalog_drop(cat, add(cat, id));
	return in;
}

/* n inner blocks, one in read_every read back from SSD (0: none); blocks
 * that left come back when back. Returns how many unsampled were refused,
 * of *unsampled. */
static int write_inner(struct kvt_catalog *cat, uint32_t *next, int n, int read_every,
		       bool back, int *unsampled)
{
	int refused = 0;

	*unsampled = 0;
	for (int k = 0; k < n; k++) {
		bool s;

		if (!inner_block(cat, next, read_every && k % read_every == 0, back, &s)) {
			assert_false(s);
			refused++;
		}
		*unsampled += !s;
	}
	return refused;
}

static void useful_refuses_the_blocks_under_one_it_refused(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1, p, pi, c, ci;
	int unsampled;

	open_lru(&cat, 1024, "useful");
	/* inner blocks are never read back: refused */
	write_inner(&cat, &next, 2000, 0, false, &unsampled);
	p = unsampled_id(&cat, &next);
	pi = add(&cat, p);
	c = next++;
	ci = cat_add(&cat, c, p, 1);
	cat_add(&cat, next++, c, 1); /* c is inner */
	kvt_catalog_touch(&cat, ci);  /* and used twice: admitted */
	assert_true(kvt_catalog_admit(&cat, ci, KVT_TIER_SSD));
	assert_false(kvt_catalog_admit(&cat, pi, KVT_TIER_SSD));
	kvt_catalog_drop(&cat, pi);
	/* its prefix is gone: no request can reach it */
	assert_false(kvt_catalog_admit(&cat, ci, KVT_TIER_SSD));
	/* stored again, it starts over */
	kvt_catalog_drop(&cat, ci);
	ci = add(&cat, c);
	kvt_catalog_touch(&cat, ci);
	assert_true(kvt_catalog_admit(&cat, ci, KVT_TIER_SSD));
	kvt_catalog_fini(&cat);
}

static void useful_keeps_room_for_blocks_likelier_to_come_back(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1;
	int unsampled, refused;

	open_lru(&cat, 1024, "useful");
	/* read back 1 time in 4, and nothing that leaves comes back: room is
	 * worth nothing more, the class is admitted */
	write_inner(&cat, &next, 2000, 4, false, &unsampled);
	refused = write_inner(&cat, &next, 2000, 4, false, &unsampled);
	assert_int_equal(refused, 0);
	/* every block that leaves comes back soon: a larger tier would have
	 * hit each, so blocks read back 1 time in 4 are not worth the room */
	write_inner(&cat, &next, 8000, 4, true, &unsampled);
	refused = write_inner(&cat, &next, 2000, 4, true, &unsampled);
	assert_int_equal(refused, unsampled);
	kvt_catalog_fini(&cat);
}

/* An inner block of reuse class cls (a block stored under it, gone again)
 * through the rule into SSD: when admitted, moved there, read there when
 * `read`, and dropped unless `stays`. Returns whether it was admitted;
 * *was_sampled says whether the rule sampled it. */
static bool class_block(struct kvt_catalog *cat, uint32_t *next, unsigned cls, bool read,
			bool stays, bool *was_sampled)
{
	uint32_t id = (*next)++, i = add(cat, id), kid = cat_add(cat, (*next)++, id, 1);
	bool in;

	kvt_index_rec(cat->idx, i)->reuse_class = (uint8_t)cls;
	kvt_catalog_drop(cat, kid);
	*was_sampled = sampled(cat, i);
	in = kvt_catalog_admit(cat, i, KVT_TIER_SSD);
	if (in) {
		kvt_catalog_move(cat, i, KVT_TIER_SSD);
		if (read)
			kvt_catalog_touch(cat, i);
	}
	if (!in || !stays)
		kvt_catalog_drop(cat, i);
	return in;
}

/* n rounds of one block of class 3, read back from SSD, and one of class
 * 9, never read; they stay in SSD when `stay`. Counts, per class, the
 * unsampled blocks and those of them refused. */
static void warm_and_cold(struct kvt_catalog *cat, uint32_t *next, int n, bool stay,
			  int unsampled[2], int refused[2])
{
	static const unsigned cls[2] = { 3, 9 };

	memset(unsampled, 0, 2 * sizeof(int));
	memset(refused, 0, 2 * sizeof(int));
	for (int k = 0; k < n; k++)
		for (int w = 0; w < 2; w++) {
			bool s, in = class_block(cat, next, cls[w], w == 0, stay, &s);

			if (!in)
				assert_false(s);
			unsampled[w] += !s;
			refused[w] += !in;
		}
}

static void useful_tells_a_cold_reuse_class_from_a_warm_one(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1;
	int unsampled[2], refused[2];

	open_lru(&cat, 1024, "useful");
	/* half the inner blocks are read back: blocks without a class would
	 * all be admitted; the class of those never read is refused, the
	 * other admitted */
	warm_and_cold(&cat, &next, 2000, false, unsampled, refused);
	warm_and_cold(&cat, &next, 2000, false, unsampled, refused);
	assert_int_equal(refused[0], 0);
	assert_int_equal(refused[1], unsampled[1]);
	kvt_catalog_fini(&cat);
}

static void useful_judges_hinted_blocks_that_stay_in_the_tier(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1;
	int unsampled[2], refused[2];

	open_lru(&cat, 1024, "useful");
	/* an SSD that lets nothing go: what a sampled block did is known once
	 * half as many blocks as the tier holds were admitted after it, and
	 * the class never read is refused then */
	warm_and_cold(&cat, &next, 4000, true, unsampled, refused);
	warm_and_cold(&cat, &next, 1000, true, unsampled, refused);
	assert_int_equal(refused[0], 0);
	assert_int_equal(refused[1], unsampled[1]);
	kvt_catalog_fini(&cat);
}

static void useful_counts_a_block_asked_again_once(void **state)
{
	struct kvt_catalog cat;
	uint32_t next = 1, x, first;
	int refused = 0, unsampled = 0;

	open_lru(&cat, 1024, "useful");
	/* the store may ask about a block again while it stays in DRAM (its
	 * write failed, or the demoter picks a block an allocation let
	 * through): it is still one block on its way to the tier */
	x = cat_add(&cat, next++, 0, 1);
	cat_add(&cat, next++, cat_id(&cat, x), 1); /* x is inner */
	for (int k = 0; k < 20000; k++)
		assert_true(kvt_catalog_admit(&cat, x, KVT_TIER_SSD));
	kvt_catalog_move(&cat, x, KVT_TIER_SSD);
	kvt_catalog_drop(&cat, x);
	/* inner blocks read back 1 time in 4, each stored again 3,000 blocks
	 * after it left: with a tier of one block, that is long forgotten, and
	 * room is worth nothing more; a list of the blocks that left sized for
	 * 20,000 blocks in the tier would remember them all and refuse */
	first = next;
	for (int k = 0; k < 8000; k++) {
		bool s, in = inner_block(&cat, &next, k % 4 == 0, false, &s);

		if (k >= 3000)
			kvt_catalog_drop(&cat, cat_add(&cat, first + 2 * (k - 3000), 0, 1));
		if (k >= 6000) {
			refused += !in;
			unsampled += !s;
		}
	}
	assert_true(unsampled > 0);
	assert_int_equal(refused, 0);
	kvt_catalog_fini(&cat);
}

/* A small DRAM + SSD cascade through the catalog, as the trace replay
 * runs one: requests walk chains of blocks (a shared document prefix, then
 * blocks of their own), a block found is used, one missing is stored under
 * the one before, and DRAM's victims go to SSD when the rule admits them.
 * Every answer of the rule is folded into *hash (FNV-1a over id and
 * answer). Blocks get reuse class cls(request) (0: none). */
struct mini {
	struct kvt_catalog cat;
	uint32_t dram, ssd;      /* capacities in blocks */
	uint64_t hash;
	uint32_t admitted, refused, ssd_hits;
};

static void mini_fold(struct mini *m, uint32_t id, bool ok)
{
	uint8_t b[5];

	memcpy(b, &id, sizeof(id));
	b[4] = ok;
	for (size_t k = 0; k < sizeof(b); k++)
		m->hash = (m->hash ^ b[k]) * 0x100000001b3ULL;
}

static void mini_room(struct mini *m)
{
	while (m->cat.blocks[KVT_TIER_DRAM] > m->dram) {
		uint32_t v = kvt_catalog_victim(&m->cat, KVT_TIER_DRAM);
		bool ok;

		assert_true(v != KVT_NIL);
		ok = kvt_catalog_admit(&m->cat, v, KVT_TIER_SSD);
		mini_fold(m, cat_id(&m->cat, v), ok);
		m->admitted += ok;
		m->refused += !ok;
		if (!ok) {
			kvt_catalog_drop(&m->cat, v);
			continue;
		}
		kvt_catalog_move(&m->cat, v, KVT_TIER_SSD);
		while (m->cat.blocks[KVT_TIER_SSD] > m->ssd) {
			uint32_t w = kvt_catalog_victim(&m->cat, KVT_TIER_SSD);

			assert_true(w != KVT_NIL);
			kvt_catalog_drop(&m->cat, w);
		}
	}
}

static uint32_t mini_rand(uint64_t *x)
{
	*x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(*x >> 33);
}

/* n requests from seed; request q's blocks get class cls(q) (NULL: 0). */
static void mini_run(struct mini *m, uint64_t seed, int n, unsigned (*cls)(uint32_t q))
{
	uint32_t fresh = 1u << 24;

	m->hash = 0xcbf29ce484222325ULL;
	for (int q = 0; q < n; q++) {
		uint32_t r = mini_rand(&seed), doc = r % (r % 97 + 1), shared = 2 + doc % 13;
		uint32_t own = 1 + mini_rand(&seed) % 4, parent = 0;
		unsigned c = cls ? cls((uint32_t)q) : 0;

		for (uint32_t j = 0; j < shared + own; j++) {
			uint32_t id = j < shared ? doc * 64 + j + 1 : fresh++;
			struct kvt_key k = cat_key(id), pk = cat_key(parent);
			uint32_t i = kvt_index_find(m->cat.idx, 0, &k);

			if (i != KVT_NIL) {
				m->ssd_hits += kvt_index_rec(m->cat.idx, i)->tier == KVT_TIER_SSD;
				kvt_catalog_touch(&m->cat, i);
			} else {
				assert_int_equal(kvt_index_insert(m->cat.idx, 0, &k, &i), 0);
				kvt_index_rec(m->cat.idx, i)->size = 1;
				kvt_index_rec(m->cat.idx, i)->reuse_class = (uint8_t)c;
				kvt_catalog_publish(&m->cat, i, KVT_TIER_DRAM, parent ? &pk : NULL);
				mini_room(m);
			}
			parent = id;
		}
	}
}

static void mini_open(struct mini *m, uint32_t dram, uint32_t ssd)
{
	memset(m, 0, sizeof(*m));
	m->dram = dram;
	m->ssd = ssd;
	assert_int_equal(kvt_catalog_init(&m->cat, kvt_policy_find("lru"), 1024), 0);
	assert_int_equal(kvt_catalog_set_admission(&m->cat, kvt_admission_find("useful"),
						   KVT_TIER_SSD), 0);
}

/* Blocks without a reuse class are decided as the rule decided them before
 * it knew of classes: the same answers, block for block, on three cascades
 * (the figures are those of the rule of two classes, end and inner). */
static void useful_decides_hintless_blocks_as_before(void **state)
{
	static const struct {
		uint32_t dram, ssd, admitted, refused, ssd_hits;
		uint64_t hash;
	} want[] = {
		{ 32, 160, 42971, 95227, 52725, 0x3e18dffaf1d1506bULL },
		{ 64, 320, 24660, 70023, 94673, 0x104b90a5eca9eb1bULL },
		{ 128, 2048, 3835, 46887, 145494, 0x969f680fbecaf0fcULL },
	};
	struct mini m;

	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		mini_open(&m, want[k].dram, want[k].ssd);
		mini_run(&m, 7 + k, 20000, NULL);
		assert_int_equal(m.admitted, want[k].admitted);
		assert_int_equal(m.refused, want[k].refused);
		assert_int_equal(m.ssd_hits, want[k].ssd_hits);
		assert_int_equal(m.hash, want[k].hash);
		kvt_catalog_fini(&m.cat);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(no_rule_admits_everything),
		cmocka_unit_test(reused_refuses_single_use_until_it_returns),
		cmocka_unit_test(useful_follows_what_the_tier_reads_back),
		cmocka_unit_test(useful_refuses_ends_and_admits_inner_blocks_until_measured),
		cmocka_unit_test(useful_refuses_the_blocks_under_one_it_refused),
		cmocka_unit_test(useful_keeps_room_for_blocks_likelier_to_come_back),
		cmocka_unit_test(useful_counts_a_block_asked_again_once),
		cmocka_unit_test(useful_decides_hintless_blocks_as_before),
		cmocka_unit_test(useful_tells_a_cold_reuse_class_from_a_warm_one),
		cmocka_unit_test(useful_judges_hinted_blocks_that_stay_in_the_tier),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
