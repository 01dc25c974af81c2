/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of admission rules, "always", and what rules share. */
#include "store/admission.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

extern const struct kvt_admission_ops kvt_admission_reused_ops;
extern const struct kvt_admission_ops kvt_admission_useful_ops;

static bool always_admit(struct kvt_admission *a, uint32_t i)
{
	(void)a;
	(void)i;
	return true;
}

static const struct kvt_admission_ops always_ops = {
	.name = "always",
	.admit = always_admit,
};

static const struct kvt_admission_ops *const rules[] = {
	&always_ops,
	&kvt_admission_reused_ops,
	&kvt_admission_useful_ops,
};

const struct kvt_admission_ops *kvt_admission_at(size_t i)
{
	return i < sizeof(rules) / sizeof(rules[0]) ? rules[i] : NULL;
}

const struct kvt_admission_ops *kvt_admission_find(const char *name)
{
	for (size_t i = 0; name && i < sizeof(rules) / sizeof(rules[0]); i++)
		if (!strcmp(name, rules[i]->name))
			return rules[i];
	return NULL;
}

static char names[64];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void build_names(void)
{
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
		if (i)
			strncat(names, ", ", sizeof(names) - strlen(names) - 1);
		strncat(names, rules[i]->name, sizeof(names) - strlen(names) - 1);
	}
}

const char *kvt_admission_names(void)
{
	pthread_once(&names_once, build_names);
	return names;
}

int kvt_admission_init(struct kvt_admission *a, const struct kvt_admission_ops *ops,
		       struct kvt_index *idx, uint8_t tier)
{
	memset(a, 0, sizeof(*a));
	a->ops = ops;
	a->idx = idx;
	a->tier = tier;
	if (ops->init) {
		int err = ops->init(a);

		if (err) {
			a->ops = NULL;
			return err;
		}
	}
	return 0;
}

void kvt_admission_fini(struct kvt_admission *a)
{
	if (a->ops && a->ops->fini)
		a->ops->fini(a);
	a->ops = NULL;
}

#define GHOST_FACTOR 4

int kvt_reuse_init(struct kvt_reuse *u)
{
	memset(u, 0, sizeof(*u));
	return kvt_ghost_init(&u->refused, 1024);
}

void kvt_reuse_fini(struct kvt_reuse *u)
{
	kvt_ghost_fini(&u->refused);
	free(u->bits);
	memset(u, 0, sizeof(*u));
}

uint8_t *kvt_reuse_bits(struct kvt_reuse *u, uint32_t i)
{
	if (i >= u->n) {
		size_t n = u->n ? u->n : 1024;
		uint8_t *v;

		while (n <= i)
			n *= 2;
		v = realloc(u->bits, n);
		if (!v)
			return NULL;
		memset(v + u->n, 0, n - u->n);
		u->bits = v;
		u->n = n;
	}
	return &u->bits[i];
}

void kvt_reuse_stored(struct kvt_reuse *u, const struct kvt_admission *a, uint32_t i)
{
	uint8_t *b = kvt_reuse_bits(u, i);
	unsigned tag;
	uint64_t age;

	if (b)
		*b = kvt_ghost_take(&u->refused, kvt_ghost_hash(kvt_index_rec(a->idx, i)), &tag,
				    &age) ? KVT_REUSED : 0;
}

void kvt_reuse_used(struct kvt_reuse *u, uint32_t i)
{
	uint8_t *b = kvt_reuse_bits(u, i);

	if (b)
		*b |= KVT_REUSED;
}

void kvt_reuse_refuse(struct kvt_reuse *u, const struct kvt_admission *a, uint32_t i)
{
	if ((uint64_t)u->refused.cap < GHOST_FACTOR * kvt_index_count(a->idx))
		(void)kvt_ghost_resize(&u->refused, u->refused.cap * 2); /* -ENOMEM: smaller */
	kvt_ghost_add(&u->refused, kvt_ghost_hash(kvt_index_rec(a->idx, i)), 0);
}
