/* SPDX-License-Identifier: Apache-2.0 */
/* Writing blocks (include/kvtier/store.h): put, and the zero-copy
 * reserve, commit and abort. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/store.h"
#include "store/store_blocks.h"
#include "store/tiering.h"
#include "util/block_sum.h"

static int reserve_locked(struct kvt_ns *ns, const struct kvt_key *key, unsigned cls,
			  uint32_t *out)
{
	struct kvt_store *s = ns->store;
	uint32_t i;
	int err;

	err = kvt_index_insert(s->cat.idx, ns->id, key, &i);
	if (err == -EEXIST) {
		if (rec(s, i)->state == KVT_REC_DYING)
			return -EBUSY; /* removed, its last reader not done: not stored */
		if (rec(s, i)->state == KVT_REC_LIVE)
			kvt_catalog_touch(&s->cat, i); /* re-saved: it is in use */
		return -EEXIST;
	}
	if (err)
		return err;
	rec(s, i)->size = (uint32_t)ns->block_bytes;
	rec(s, i)->reuse_class = (uint8_t)cls;
	/* the lock may be let go meanwhile: the pending record keeps the key */
	err = kvt_tiering_alloc(s, ns->block_bytes, &rec(s, i)->loc);
	if (err) {
		kvt_catalog_drop(&s->cat, i);
		return err;
	}
	rec(s, i)->tier = (uint8_t)s->mem->kind;
	*out = i;
	return 0;
}

static void publish_locked(struct kvt_ns *ns, uint32_t i, const struct kvt_key *parent)
{
	struct kvt_store *s = ns->store;

	kvt_catalog_publish(&s->cat, i, s->mem->kind, parent);
	s->counters.puts++;
	s->counters.tier[s->mem->kind].bytes_in += ns->block_bytes;
	kvt_tiering_kick(s);
}

int kvt_put(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
	    const void *data, size_t len)
{
	return kvt_put_class(ns, key, parent, data, len, 0);
}

int kvt_put_class(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
		  const void *data, size_t len, unsigned reuse_class)
{
	struct kvt_store *s;
	uint64_t sum = 0;
	uint32_t i;
	void *dst;
	int err;

	if (!ns || !key || !data || len != ns->block_bytes || reuse_class > KVT_REUSE_CLASS_MAX)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = reserve_locked(ns, key, reuse_class, &i);
	dst = err ? NULL : s->mem->ops->slot_ptr(s->mem, rec(s, i)->loc);
	pthread_mutex_unlock(&s->lock);
	if (err)
		return err;

	/* a warm tier keeps every block's checksum in its slot's header: it
	 * is computed as the bytes are copied, not in a second pass */
	if (kvt_ns_sums_blocks(ns))
		sum = kvt_copy_sum(dst, data, len);
	else
		memcpy(dst, data, len);

	pthread_mutex_lock(&s->lock);
	rec(s, i)->checksum = sum;
	publish_locked(ns, i, parent);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* ---- zero-copy slots ---------------------------------------------------- */

int kvt_reserve(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
		struct kvt_slot *slot)
{
	return kvt_reserve_class(ns, key, parent, 0, slot);
}

int kvt_reserve_class(struct kvt_ns *ns, const struct kvt_key *key,
		      const struct kvt_key *parent, unsigned reuse_class, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint32_t i;
	int err;

	if (!ns || !key || !slot || reuse_class > KVT_REUSE_CLASS_MAX)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = reserve_locked(ns, key, reuse_class, &i);
	if (!err) {
		/* the parent is resolved at commit: it may come or go meanwhile */
		slot_lend(slot, i, parent);
		slot->data = s->mem->ops->slot_ptr(s->mem, rec(s, i)->loc);
		slot->len = ns->block_bytes;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

/* The pending record a slot names, or KVT_NIL; lock held. */
static uint32_t pending_of(struct kvt_ns *ns, const struct kvt_slot *slot)
{
	struct kvt_store *s = ns->store;
	uint64_t handle = slot_get(slot).handle;
	uint32_t i = (uint32_t)handle;
	struct kvt_rec *r;

	if (handle >= UINT32_MAX || !kvt_index_valid(s->cat.idx, i))
		return KVT_NIL;
	r = rec(s, i);
	if (r->state != KVT_REC_PENDING || r->ns != ns->id || r->tier != s->mem->kind ||
	    s->mem->ops->slot_ptr(s->mem, r->loc) != slot->data)
		return KVT_NIL;
	return i;
}

bool kvt_ns_sums_blocks(const struct kvt_ns *ns)
{
	return ns && (ns->store->opts.checksum_on_put || ns->store->warm);
}

/* kvt_commit with the block's sum: computed here when !have_sum. */
static int commit_sum(struct kvt_ns *ns, struct kvt_slot *slot, bool have_sum, uint64_t sum)
{
	struct kvt_store *s;
	uint32_t i;
	int err = -EINVAL;

	if (!ns || !slot)
		return -EINVAL;
	s = ns->store;
	if (!kvt_ns_sums_blocks(ns))
		sum = 0;
	/* hashed before the lock is taken: the slot is the caller's until then */
	else if (!have_sum && slot->data && slot->len == ns->block_bytes)
		sum = kvt_block_sum(slot->data, slot->len);
	pthread_mutex_lock(&s->lock);
	i = pending_of(ns, slot);
	if (i != KVT_NIL) {
		struct slot_priv p = slot_get(slot);

		rec(s, i)->checksum = sum;
		publish_locked(ns, i, p.has_parent ? &p.parent : NULL);
		slot->data = NULL;
		err = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

int kvt_commit(struct kvt_ns *ns, struct kvt_slot *slot)
{
	return commit_sum(ns, slot, false, 0);
}

int kvt_commit_summed(struct kvt_ns *ns, struct kvt_slot *slot, uint64_t xxh3)
{
	return commit_sum(ns, slot, true, xxh3);
}

void kvt_abort(struct kvt_ns *ns, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint32_t i;

	if (!ns || !slot)
		return;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	i = pending_of(ns, slot);
	if (i != KVT_NIL) {
		kvt_tiering_discard(s, i);
		slot->data = NULL;
	}
	pthread_mutex_unlock(&s->lock);
}
