/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of eviction policies, by name. */
#include "store/policy.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

extern const struct kvt_policy_ops kvt_policy_lru_ops;
extern const struct kvt_policy_ops kvt_policy_tail_lru_ops;
extern const struct kvt_policy_ops kvt_policy_lfu_ops;
extern const struct kvt_policy_ops kvt_policy_cost_ops;
extern const struct kvt_policy_ops kvt_policy_ghost_lru_ops;
extern const struct kvt_policy_ops kvt_policy_ghost_ends_ops;
extern const struct kvt_policy_ops kvt_policy_class_lru_ops;
extern const struct kvt_policy_ops kvt_policy_class_ends_ops;

static const struct kvt_policy_ops *const policies[] = {
	&kvt_policy_tail_lru_ops,
	&kvt_policy_lru_ops,
	&kvt_policy_lfu_ops,
	&kvt_policy_cost_ops,
	&kvt_policy_ghost_lru_ops,
	&kvt_policy_ghost_ends_ops,
	&kvt_policy_class_lru_ops,
	&kvt_policy_class_ends_ops,
};

const struct kvt_policy_ops *kvt_policy_find(const char *name)
{
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (name && !strcmp(name, policies[i]->name))
			return policies[i];
	return NULL;
}

const struct kvt_policy_ops *kvt_policy_at(size_t i)
{
	return i < sizeof(policies) / sizeof(policies[0]) ? policies[i] : NULL;
}

static char policy_names[128];
static pthread_once_t policy_names_once = PTHREAD_ONCE_INIT;

static void build_policy_names(void)
{
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++) {
		if (i)
			strncat(policy_names, ", ", sizeof(policy_names) - strlen(policy_names) - 1);
		strncat(policy_names, policies[i]->name,
			sizeof(policy_names) - strlen(policy_names) - 1);
	}
}

const char *kvt_policy_names(void)
{
	pthread_once(&policy_names_once, build_policy_names);
	return policy_names;
}

int kvt_policy_init(struct kvt_policy *p, const struct kvt_policy_ops *ops,
		    struct kvt_index *idx)
{
	memset(p, 0, sizeof(*p));
	p->ops = ops;
	p->idx = idx;
	return ops->init ? ops->init(p) : 0;
}

void kvt_policy_fini(struct kvt_policy *p)
{
	if (p->ops && p->ops->fini)
		p->ops->fini(p);
	p->ops = NULL;
}
