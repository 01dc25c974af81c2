/* The registry of eviction policies, by name. */
#include "store/policy.h"

#include <errno.h>
#include <string.h>

extern const struct kvt_policy_ops kvt_policy_lru_ops;
extern const struct kvt_policy_ops kvt_policy_tail_lru_ops;
extern const struct kvt_policy_ops kvt_policy_lfu_ops;
extern const struct kvt_policy_ops kvt_policy_cost_ops;

static const struct kvt_policy_ops *const policies[] = {
	&kvt_policy_tail_lru_ops,
	&kvt_policy_lru_ops,
	&kvt_policy_lfu_ops,
	&kvt_policy_cost_ops,
};

const struct kvt_policy_ops *kvt_policy_find(const char *name)
{
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (name && !strcmp(name, policies[i]->name))
			return policies[i];
	return NULL;
}

const char *kvt_policy_names(void)
{
	static char names[128];
	static int done;

	/* built once; the table is constant, so a racing second build writes the same */
	if (!done) {
		names[0] = 0;
		for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++) {
			if (i)
				strncat(names, ", ", sizeof(names) - strlen(names) - 1);
			strncat(names, policies[i]->name, sizeof(names) - strlen(names) - 1);
		}
		done = 1;
	}
	return names;
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
