/* SPDX-License-Identifier: Apache-2.0 */
/* The namespaces the server hands out, per tenant: each is charged to the
 * tenant that first attached it (a tenant sharing another's salt joins its
 * namespaces free), counted against that tenant's quota, and held by the
 * connections that said HELLO for it. One that no connection holds and that
 * stores no block is detached from the store, so neither one tenant nor
 * time can use up the store's namespaces. Each also keeps the prefill speed
 * its engines report, for LOOKUP's plan. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/server_int.h"

static size_t bucket_of(const struct kvt_ns *ns)
{
	uintptr_t p = (uintptr_t)ns;

	return (size_t)((p >> 4) ^ (p >> 16)) & (KVT_NS_USE_BUCKETS - 1);
}

static struct kvt_ns_use *use_find(struct kvt_server *srv, const struct kvt_ns *ns)
{
	for (struct kvt_ns_use *u = srv->ns_uses[bucket_of(ns)]; u; u = u->hnext)
		if (u->ns == ns)
			return u;
	return NULL;
}

static void use_unlink(struct kvt_server *srv, struct kvt_ns_use *u)
{
	for (struct kvt_ns_use **pu = &srv->ns_uses[bucket_of(u->ns)]; *pu; pu = &(*pu)->hnext) {
		if (*pu == u) {
			*pu = u->hnext;
			break;
		}
	}
	if (u->tprev)
		u->tprev->tnext = u->tnext;
	else
		srv->tenant_uses[u->tenant] = u->tnext;
	if (u->tnext)
		u->tnext->tprev = u->tprev;
	srv->tenant_ns[u->tenant]--;
	free(u);
}

/* Detach u's namespace if nothing holds it and it stores nothing. */
static bool use_reclaim(struct kvt_server *srv, struct kvt_ns_use *u)
{
	if (u->conns || kvt_ns_detach(u->ns))
		return false;
	srv->c.ns_reclaimed++;
	use_unlink(srv, u);
	return true;
}

/* Reclaim what tenant t (every tenant when t is SIZE_MAX) no longer uses. */
static void reclaim(struct kvt_server *srv, size_t t)
{
	for (size_t i = 0; i < srv->opts.n_tenants; i++) {
		if (t != SIZE_MAX && i != t)
			continue;
		for (struct kvt_ns_use *u = srv->tenant_uses[i], *next; u; u = next) {
			next = u->tnext;
			use_reclaim(srv, u);
		}
	}
}

static bool over_quota(const struct kvt_server *srv, size_t t)
{
	return srv->opts.max_ns_per_tenant && srv->tenant_ns[t] >= srv->opts.max_ns_per_tenant;
}

int kvt_tenant_ns_open(struct kvt_server *srv, size_t t, const struct kvt_ns_desc *desc,
		       struct kvt_ns **out)
{
	struct kvt_ns_use *u;
	struct kvt_ns *ns;
	int err = kvt_ns_attach(srv->opts.store, desc, &ns);

	if (err == -ENOSPC) {
		/* the store is full: what no one uses goes first */
		reclaim(srv, SIZE_MAX);
		err = kvt_ns_attach(srv->opts.store, desc, &ns);
	}
	if (err)
		return err;
	if (use_find(srv, ns)) {
		*out = ns;
		return 0;
	}
	if (over_quota(srv, t))
		reclaim(srv, t);
	u = over_quota(srv, t) ? NULL : calloc(1, sizeof(*u));
	if (!u) {
		err = over_quota(srv, t) ? -EDQUOT : -ENOMEM;
		/* not registered, so just attached: no one else holds it */
		kvt_ns_detach(ns);
		return err;
	}
	u->ns = ns;
	u->desc = *desc;
	u->tenant = t;
	u->hnext = srv->ns_uses[bucket_of(ns)];
	srv->ns_uses[bucket_of(ns)] = u;
	u->tnext = srv->tenant_uses[t];
	if (u->tnext)
		u->tnext->tprev = u;
	srv->tenant_uses[t] = u;
	srv->tenant_ns[t]++;
	*out = ns;
	return 0;
}

static bool same_shape(const struct kvt_ns_desc *a, const struct kvt_ns_desc *b)
{
	return a->layout == b->layout && a->dtype == b->dtype && a->layers == b->layers &&
	       a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
	       a->block_tokens == b->block_tokens && a->tp_size == b->tp_size;
}

const struct kvt_ns_desc *kvt_tenant_ns_other_shape(struct kvt_server *srv, size_t t,
						    const struct kvt_ns *ns,
						    const struct kvt_ns_desc *desc)
{
	for (struct kvt_ns_use *u = srv->tenant_uses[t]; u; u = u->tnext)
		if (u->ns != ns && !strcmp(u->desc.model_id, desc->model_id) &&
		    !same_shape(&u->desc, desc))
			return &u->desc;
	return NULL;
}

void kvt_tenant_ns_hold(struct kvt_server *srv, struct kvt_ns *ns)
{
	struct kvt_ns_use *u = use_find(srv, ns);

	if (u)
		u->conns++;
}

void kvt_tenant_ns_put(struct kvt_server *srv, struct kvt_ns *ns, bool held)
{
	struct kvt_ns_use *u = use_find(srv, ns);

	if (!u)
		return;
	if (held && u->conns)
		u->conns--;
	use_reclaim(srv, u);
}

void kvt_tenant_ns_prefill_add(struct kvt_server *srv, struct kvt_ns *ns, uint32_t tokens,
			       uint64_t ns_elapsed)
{
	struct kvt_ns_use *u = use_find(srv, ns);

	if (u)
		kvt_rate_add(&u->prefill, tokens, (double)ns_elapsed / 1e9, kvt_now_ns());
}

double kvt_tenant_ns_prefill(struct kvt_server *srv, struct kvt_ns *ns)
{
	struct kvt_ns_use *u = use_find(srv, ns);

	return u ? kvt_rate_value(&u->prefill) : 0;
}

int kvt_tenant_ns_init(struct kvt_server *srv)
{
	srv->ns_uses = calloc(KVT_NS_USE_BUCKETS, sizeof(*srv->ns_uses));
	srv->tenant_uses = calloc(srv->opts.n_tenants, sizeof(*srv->tenant_uses));
	srv->tenant_ns = calloc(srv->opts.n_tenants, sizeof(*srv->tenant_ns));
	return srv->ns_uses && srv->tenant_uses && srv->tenant_ns ? 0 : -ENOMEM;
}

void kvt_tenant_ns_fini(struct kvt_server *srv)
{
	for (size_t i = 0; srv->tenant_uses && i < srv->opts.n_tenants; i++)
		while (srv->tenant_uses[i])
			use_unlink(srv, srv->tenant_uses[i]);
	free(srv->ns_uses);
	free(srv->tenant_uses);
	free(srv->tenant_ns);
}
