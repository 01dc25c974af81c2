/* SPDX-License-Identifier: Apache-2.0 */
/* Tails on recency lists with a ghost list, for ghost-lru and class-lru
 * (store/policy_tails.h). */
#include <errno.h>
#include <stdlib.h>

#include "store/policy_tails.h"

/* The ghost list remembers this many times the records tracked. */
#define GHOST_FACTOR 4

int kvt_ptails_open(struct kvt_policy *p, size_t size, unsigned n_fresh, bool ends)
{
	struct kvt_ptails *t = calloc(1, size);
	int err;

	if (!t)
		return -ENOMEM;
	for (int l = 0; l < KVT_PTAILS_LISTS; l++)
		kvt_plist_init(&t->list[l]);
	t->n_fresh = n_fresh;
	t->ends = ends;
	err = kvt_ghost_init(&t->ghost, 1024);
	if (err) {
		free(t);
		return err;
	}
	p->state = t;
	return 0;
}

void kvt_ptails_close(struct kvt_policy *p)
{
	struct kvt_ptails *t = p->state;

	if (t)
		kvt_ghost_fini(&t->ghost);
	free(t);
	p->state = NULL;
}

void kvt_ptails_insert(struct kvt_policy *p, uint32_t i, bool proven)
{
	struct kvt_ptails *t = p->state;
	struct kvt_rec *r = kvt_ptails_rec(p, i);
	uint64_t inner = (r->pval & KVT_PTAILS_INNER) | (r->kids_here ? KVT_PTAILS_INNER : 0);

	r->pval = ++t->tick << KVT_PTAILS_SHIFT | inner | (proven ? KVT_PTAILS_PROVEN : 0);
	r->pprev = r->pnext = KVT_NIL;
	t->n++;
	if ((uint64_t)t->ghost.cap < GHOST_FACTOR * t->n && t->ghost.cap < (1u << 30))
		(void)kvt_ghost_resize(&t->ghost, t->ghost.cap * 2); /* on -ENOMEM: smaller */
	if (r->kids_here == 0)
		kvt_plist_insert_after(p->idx, kvt_ptails_list_for(p, i), KVT_NIL, i);
}

void kvt_ptails_remove(struct kvt_policy *p, uint32_t i, unsigned ghost_tag)
{
	struct kvt_ptails *t = p->state;
	struct kvt_rec *r = kvt_ptails_rec(p, i);

	if (kvt_ptails_on_list(p, i))
		kvt_plist_unlink(p->idx, kvt_ptails_list_for(p, i), i);
	t->n--;
	/* held blocks stay in the tier: only those leaving it are ghosts */
	if (!r->pins && !r->busy)
		kvt_ghost_add(&t->ghost, kvt_ghost_hash(r), ghost_tag);
}

void kvt_ptails_leaf_changed(struct kvt_policy *p, uint32_t i, bool is_leaf)
{
	if (is_leaf && !kvt_ptails_on_list(p, i))
		kvt_plist_place_by_use(p->idx, kvt_ptails_list_for(p, i), i, KVT_PTAILS_SHIFT);
	else if (!is_leaf && kvt_ptails_on_list(p, i))
		kvt_plist_unlink(p->idx, kvt_ptails_list_for(p, i), i);
	if (!is_leaf)
		kvt_ptails_rec(p, i)->pval |= KVT_PTAILS_INNER; /* after the unlink: it names the list */
}
