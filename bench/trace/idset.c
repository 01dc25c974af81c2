/* SPDX-License-Identifier: Apache-2.0 */
/* The set of ids seen; see idset.h. */
#include "bench/trace/idset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BITMAP_IDS (1ull << 30) /* 128 MiB of bitmap at most */

static inline size_t slot_of(uint64_t id, size_t mask)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static int table_grow(struct kvt_idset *s)
{
	size_t n = s->table ? (s->mask + 1) * 2 : 1024;
	uint64_t *t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; s->table && i <= s->mask; i++) {
		size_t j;

		if (!s->table[i])
			continue;
		for (j = slot_of(s->table[i] - 1, n - 1); t[j]; j = (j + 1) & (n - 1))
			;
		t[j] = s->table[i];
	}
	free(s->table);
	s->table = t;
	s->mask = n - 1;
	return 0;
}

static int table_add(struct kvt_idset *s, uint64_t id)
{
	size_t i;

	if (!s->table || (s->count + 1) * 2 > s->mask + 1) {
		int err = table_grow(s);

		if (err)
			return err;
	}
	for (i = slot_of(id, s->mask); s->table[i]; i = (i + 1) & s->mask)
		if (s->table[i] == id + 1)
			return 0;
	s->table[i] = id + 1;
	s->count++;
	return 1;
}

int kvt_idset_add(struct kvt_idset *s, uint64_t id)
{
	size_t w = (size_t)(id >> 6);
	uint64_t bit = 1ull << (id & 63);

	if (id >= BITMAP_IDS)
		return table_add(s, id);
	if (w >= s->n_words) {
		size_t n = s->n_words ? s->n_words : 1024;
		uint64_t *b;

		while (n <= w)
			n *= 2;
		b = realloc(s->bits, n * sizeof(*b));
		if (!b)
			return -ENOMEM;
		memset(b + s->n_words, 0, (n - s->n_words) * sizeof(*b));
		s->bits = b;
		s->n_words = n;
	}
	if (s->bits[w] & bit)
		return 0;
	s->bits[w] |= bit;
	return 1;
}

void kvt_idset_clear(struct kvt_idset *s)
{
	free(s->bits);
	free(s->table);
	memset(s, 0, sizeof(*s));
}
