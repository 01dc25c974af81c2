/* SPDX-License-Identifier: Apache-2.0 */
/* The ghost list; see ghost.h. A ring holds the entries in order of
 * arrival; an open-addressing table (linear probing, backward-shift
 * deletion, half full at most) finds an entry's ring position by hash. */
#include "store/ghost.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

uint64_t kvt_ghost_hash_key(const struct kvt_key *key, uint16_t ns)
{
	return XXH3_64bits_withSeed(key->bytes, KVT_KEY_BYTES, ns);
}

uint64_t kvt_ghost_hash(const struct kvt_rec *r)
{
	return kvt_ghost_hash_key(&r->key, r->ns);
}

static inline uint64_t key_of(uint64_t h)
{
	return h & ~(uint64_t)KVT_GHOST_TAG_MASK;
}

/* The key bits of h, never 0 (0 marks a taken ring slot). */
static inline uint64_t key_nz(uint64_t h)
{
	return key_of(h) ? key_of(h) : KVT_GHOST_TAG_MASK + 1ull;
}

static inline uint32_t tmask(const struct kvt_ghost *g)
{
	return 2 * g->cap - 1;
}

static inline uint32_t home(const struct kvt_ghost *g, uint64_t h)
{
	return (uint32_t)(h >> 32) & tmask(g);
}

static inline uint32_t ring_pos(const struct kvt_ghost *g, uint64_t seq)
{
	return (uint32_t)(seq & (g->cap - 1));
}

/* The table slot naming ring position pos, or of hash h when pos is
 * UINT32_MAX; the empty slot ending the probe when absent. */
static uint32_t find_slot(const struct kvt_ghost *g, uint64_t h, uint32_t pos)
{
	for (uint32_t i = home(g, h);; i = (i + 1) & tmask(g)) {
		uint32_t e = g->table[i];

		if (!e)
			return i;
		if (pos != UINT32_MAX ? e - 1 == pos : key_of(g->ring[e - 1]) == key_of(h))
			return i;
	}
}

static void table_delete(struct kvt_ghost *g, uint32_t hole)
{
	uint32_t j = hole, m = tmask(g);

	for (;;) {
		uint32_t at;

		j = (j + 1) & m;
		if (!g->table[j])
			break;
		at = home(g, g->ring[g->table[j] - 1]);
		/* move entry j into the hole unless its home lies in (hole, j] */
		if ((j > hole && (at <= hole || at > j)) || (j < hole && (at <= hole && at > j))) {
			g->table[hole] = g->table[j];
			hole = j;
		}
	}
	g->table[hole] = 0;
}

int kvt_ghost_init(struct kvt_ghost *g, uint32_t cap)
{
	uint32_t c = 64;

	while (c < cap && c < (1u << 30))
		c <<= 1;
	memset(g, 0, sizeof(*g));
	g->ring = calloc(c, sizeof(*g->ring));
	g->table = calloc(2 * (size_t)c, sizeof(*g->table));
	if (!g->ring || !g->table) {
		kvt_ghost_fini(g);
		return -ENOMEM;
	}
	g->cap = c;
	return 0;
}

void kvt_ghost_fini(struct kvt_ghost *g)
{
	free(g->ring);
	free(g->table);
	memset(g, 0, sizeof(*g));
}

/* Forget the entry at ring position pos, if any. */
static void drop_pos(struct kvt_ghost *g, uint32_t pos)
{
	uint64_t h = g->ring[pos];

	if (!h)
		return;
	table_delete(g, find_slot(g, h, pos));
	g->ring[pos] = 0;
	g->count[h & 1]--;
}

void kvt_ghost_add(struct kvt_ghost *g, uint64_t h, unsigned tag)
{
	uint32_t pos = ring_pos(g, g->added), slot;

	h = key_nz(h) | (tag & KVT_GHOST_TAG_MASK);
	drop_pos(g, pos); /* the oldest entry makes room */
	slot = find_slot(g, h, UINT32_MAX);
	if (g->table[slot]) { /* there already: it moves to the new end */
		drop_pos(g, g->table[slot] - 1);
		slot = find_slot(g, h, UINT32_MAX);
	}
	g->ring[pos] = h;
	g->table[slot] = pos + 1;
	g->count[h & 1]++;
	g->added++;
}

bool kvt_ghost_take(struct kvt_ghost *g, uint64_t h, unsigned *tag, uint64_t *age)
{
	uint32_t slot = find_slot(g, key_nz(h), UINT32_MAX), pos;

	if (!g->table[slot])
		return false;
	pos = g->table[slot] - 1;
	*tag = (unsigned)(g->ring[pos] & KVT_GHOST_TAG_MASK);
	/* positions count up from added - cap, oldest first */
	*age = (uint64_t)((ring_pos(g, g->added) - pos - 1) & (g->cap - 1));
	g->count[*tag & 1]--;
	g->ring[pos] = 0;
	table_delete(g, slot);
	return true;
}

int kvt_ghost_resize(struct kvt_ghost *g, uint32_t cap)
{
	struct kvt_ghost n;
	uint64_t from;
	int err = kvt_ghost_init(&n, cap);

	if (err)
		return err;
	from = g->added > n.cap ? g->added - n.cap : 0;
	if (g->added > g->cap && from < g->added - g->cap)
		from = g->added - g->cap;
	for (uint64_t s = from; s < g->added; s++) {
		uint64_t h = g->ring[ring_pos(g, s)];

		if (h)
			kvt_ghost_add(&n, h, (unsigned)(h & KVT_GHOST_TAG_MASK));
	}
	kvt_ghost_fini(g);
	*g = n;
	return 0;
}
