/* SPDX-License-Identifier: Apache-2.0 */
/* The block index: see index.h for the shape and why. */
#include "store/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define CHUNK_SHIFT 16
#define CHUNK_RECS (1u << CHUNK_SHIFT)
#define MIN_TABLE 1024u

/* A hash-table slot: 32 bits of the key's hash (the home position and a tag
 * that spares most record fetches) and the record number, KVT_NIL if empty. */
struct slot {
	uint32_t hash;
	uint32_t rec;
};

struct kvt_index {
	struct kvt_rec **chunks; /* records, CHUNK_RECS each; never moved */
	uint32_t n_chunks;
	uint32_t high;           /* records ever handed out (free list aside) */
	uint32_t free_head;      /* free records, linked through next_sibling */
	size_t count;            /* records in use */
	struct slot *table;
	size_t mask;             /* table size - 1 (a power of two) */
	uint32_t *ns_records;    /* records in use per namespace number */
	uint32_t ns_cap;         /* entries of ns_records */
};

static inline uint32_t key_hash(uint16_t ns, const struct kvt_key *key)
{
	return (uint32_t)XXH3_64bits_withSeed(key->bytes, KVT_KEY_BYTES, ns);
}

uint32_t kvt_index_hash(uint16_t ns, const struct kvt_key *key)
{
	return key_hash(ns, key);
}

struct kvt_rec *kvt_index_rec(const struct kvt_index *idx, uint32_t i)
{
	return &idx->chunks[i >> CHUNK_SHIFT][i & (CHUNK_RECS - 1)];
}

static size_t table_size_for(size_t records)
{
	size_t n = MIN_TABLE;

	while (n * 3 / 4 < records) /* keep the load factor at most 3/4 */
		n <<= 1;
	return n;
}

static struct slot *table_alloc(size_t n)
{
	struct slot *t = malloc(n * sizeof(*t));

	if (t)
		for (size_t i = 0; i < n; i++)
			t[i] = (struct slot){ 0, KVT_NIL };
	return t;
}

int kvt_index_create(size_t expected, struct kvt_index **out)
{
	struct kvt_index *idx = calloc(1, sizeof(*idx));

	if (!idx)
		return -ENOMEM;
	idx->free_head = KVT_NIL;
	idx->mask = table_size_for(expected) - 1;
	idx->table = table_alloc(idx->mask + 1);
	if (!idx->table) {
		free(idx);
		return -ENOMEM;
	}
	*out = idx;
	return 0;
}

void kvt_index_destroy(struct kvt_index *idx)
{
	if (!idx)
		return;
	for (uint32_t c = 0; c < idx->n_chunks; c++)
		free(idx->chunks[c]);
	free(idx->chunks);
	free(idx->table);
	free(idx->ns_records);
	free(idx);
}

static size_t slot_of(const struct kvt_index *idx, uint16_t ns, const struct kvt_key *key,
		      uint32_t h)
{
	for (size_t i = h & idx->mask;; i = (i + 1) & idx->mask) {
		const struct slot *s = &idx->table[i];

		if (s->rec == KVT_NIL)
			return i;
		if (s->hash == h) {
			const struct kvt_rec *r = kvt_index_rec(idx, s->rec);
			if (r->ns == ns && !memcmp(r->key.bytes, key->bytes, KVT_KEY_BYTES))
				return i;
		}
	}
}

uint32_t kvt_index_find(const struct kvt_index *idx, uint16_t ns, const struct kvt_key *key)
{
	return idx->table[slot_of(idx, ns, key, key_hash(ns, key))].rec;
}

uint32_t kvt_index_find_hashed(const struct kvt_index *idx, uint16_t ns,
			       const struct kvt_key *key, uint32_t hash)
{
	return idx->table[slot_of(idx, ns, key, hash)].rec;
}

void kvt_index_prefetch_slot(const struct kvt_index *idx, uint32_t hash)
{
	__builtin_prefetch(&idx->table[hash & idx->mask]);
}

void kvt_index_prefetch_rec(const struct kvt_index *idx, uint32_t hash)
{
	uint32_t r = idx->table[hash & idx->mask].rec;

	if (r != KVT_NIL)
		__builtin_prefetch(kvt_index_rec(idx, r));
}

static int grow_table(struct kvt_index *idx)
{
	size_t n = (idx->mask + 1) * 2;
	struct slot *t = table_alloc(n);

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i <= idx->mask; i++) {
		struct slot s = idx->table[i];
		size_t j;

		if (s.rec == KVT_NIL)
			continue;
		for (j = s.hash & (n - 1); t[j].rec != KVT_NIL; j = (j + 1) & (n - 1))
			;
		t[j] = s;
	}
	free(idx->table);
	idx->table = t;
	idx->mask = n - 1;
	return 0;
}

static int alloc_rec(struct kvt_index *idx, uint32_t *out)
{
	uint32_t i;

	if (idx->free_head != KVT_NIL) {
		i = idx->free_head;
		idx->free_head = kvt_index_rec(idx, i)->next_sibling;
	} else {
		if (idx->high == KVT_NIL) /* 2^32 - 1 records: KVT_NIL stays unused */
			return -ENOMEM;
		if ((idx->high >> CHUNK_SHIFT) == idx->n_chunks) {
			struct kvt_rec **chunks =
				realloc(idx->chunks, (idx->n_chunks + 1) * sizeof(*chunks));
			if (!chunks)
				return -ENOMEM;
			idx->chunks = chunks;
			chunks[idx->n_chunks] = malloc(CHUNK_RECS * sizeof(struct kvt_rec));
			if (!chunks[idx->n_chunks])
				return -ENOMEM;
			idx->n_chunks++;
		}
		i = idx->high++;
	}
	*out = i;
	return 0;
}

int kvt_index_insert(struct kvt_index *idx, uint16_t ns, const struct kvt_key *key,
		     uint32_t *out)
{
	uint32_t h = key_hash(ns, key), i;
	size_t pos = slot_of(idx, ns, key, h);
	struct kvt_rec *r;
	int err;

	if (idx->table[pos].rec != KVT_NIL) {
		*out = idx->table[pos].rec;
		return -EEXIST;
	}
	if ((idx->count + 1) > (idx->mask + 1) * 3 / 4) {
		err = grow_table(idx);
		if (err)
			return err;
		pos = slot_of(idx, ns, key, h);
	}
	if (ns >= idx->ns_cap) {
		uint32_t cap = idx->ns_cap ? idx->ns_cap : 16;
		uint32_t *p;

		while (cap <= ns)
			cap *= 2;
		p = realloc(idx->ns_records, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		memset(p + idx->ns_cap, 0, (cap - idx->ns_cap) * sizeof(*p));
		idx->ns_records = p;
		idx->ns_cap = cap;
	}
	err = alloc_rec(idx, &i);
	if (err)
		return err;
	r = kvt_index_rec(idx, i);
	memset(r, 0, sizeof(*r));
	r->key = *key;
	r->ns = ns;
	r->state = KVT_REC_PENDING;
	r->pprev = r->pnext = KVT_NIL;
	r->parent = r->first_child = r->next_sibling = r->prev_sibling = KVT_NIL;
	idx->table[pos] = (struct slot){ h, i };
	idx->count++;
	idx->ns_records[ns]++;
	*out = i;
	return 0;
}

void kvt_index_link(struct kvt_index *idx, uint32_t parent, uint32_t child)
{
	struct kvt_rec *p = kvt_index_rec(idx, parent), *c = kvt_index_rec(idx, child);

	c->parent = parent;
	c->next_sibling = p->first_child;
	c->prev_sibling = KVT_NIL;
	if (p->first_child != KVT_NIL)
		kvt_index_rec(idx, p->first_child)->prev_sibling = child;
	p->first_child = child;
}

void kvt_index_unlink(struct kvt_index *idx, uint32_t i)
{
	struct kvt_rec *r = kvt_index_rec(idx, i);
	uint32_t *link;

	if (r->parent == KVT_NIL)
		return;
	link = r->prev_sibling == KVT_NIL ? &kvt_index_rec(idx, r->parent)->first_child
					   : &kvt_index_rec(idx, r->prev_sibling)->next_sibling;
	*link = r->next_sibling;
	if (r->next_sibling != KVT_NIL)
		kvt_index_rec(idx, r->next_sibling)->prev_sibling = r->prev_sibling;
	r->parent = KVT_NIL;
	r->next_sibling = r->prev_sibling = KVT_NIL;
}

/* Backward-shift deletion: pull later entries of the probe run into the hole
 * so lookups never need tombstones. */
static void table_delete(struct kvt_index *idx, size_t hole)
{
	size_t j = hole;

	for (;;) {
		size_t home;

		j = (j + 1) & idx->mask;
		if (idx->table[j].rec == KVT_NIL)
			break;
		home = idx->table[j].hash & idx->mask;
		/* move entry j into the hole unless its home lies in (hole, j] */
		if ((j > hole && (home <= hole || home > j)) ||
		    (j < hole && (home <= hole && home > j))) {
			idx->table[hole] = idx->table[j];
			hole = j;
		}
	}
	idx->table[hole] = (struct slot){ 0, KVT_NIL };
}

void kvt_index_orphan_children(struct kvt_index *idx, uint32_t i)
{
	struct kvt_rec *r = kvt_index_rec(idx, i);

	for (uint32_t c = r->first_child; c != KVT_NIL;) {
		struct kvt_rec *child = kvt_index_rec(idx, c);
		uint32_t next = child->next_sibling;

		child->parent = KVT_NIL;
		child->next_sibling = child->prev_sibling = KVT_NIL;
		c = next;
	}
	r->first_child = KVT_NIL;
}

void kvt_index_erase(struct kvt_index *idx, uint32_t i)
{
	struct kvt_rec *r = kvt_index_rec(idx, i);

	kvt_index_unlink(idx, i);
	kvt_index_orphan_children(idx, i);
	table_delete(idx, slot_of(idx, r->ns, &r->key, key_hash(r->ns, &r->key)));
	r->state = KVT_REC_FREE;
	r->next_sibling = idx->free_head;
	idx->free_head = i;
	idx->count--;
	idx->ns_records[r->ns]--;
}

bool kvt_index_valid(const struct kvt_index *idx, uint32_t i)
{
	return i < idx->high;
}

uint32_t kvt_index_high(const struct kvt_index *idx)
{
	return idx->high;
}

size_t kvt_index_count(const struct kvt_index *idx)
{
	return idx->count;
}

uint32_t kvt_index_ns_count(const struct kvt_index *idx, uint16_t ns)
{
	return ns < idx->ns_cap ? idx->ns_records[ns] : 0;
}

size_t kvt_index_memory(const struct kvt_index *idx)
{
	return sizeof(*idx) + (size_t)idx->n_chunks * (CHUNK_RECS * sizeof(struct kvt_rec) +
						       sizeof(struct kvt_rec *)) +
	       (idx->mask + 1) * sizeof(struct slot) + idx->ns_cap * sizeof(uint32_t);
}
