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

uint8_t *kvt_rec_byte(struct kvt_rec_bytes *b, uint32_t i)
{
	if (i >= b->n) {
		size_t n = b->n ? b->n : 1024;
		uint8_t *v;

		while (n <= i)
			n *= 2;
		v = realloc(b->v, n);
		if (!v)
			return NULL;
		memset(v + b->n, 0, n - b->n);
		b->v = v;
		b->n = n;
	}
	return &b->v[i];
}

void kvt_rec_bytes_free(struct kvt_rec_bytes *b)
{
	free(b->v);
	b->v = NULL;
	b->n = 0;
}
