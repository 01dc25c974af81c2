/* SPDX-License-Identifier: Apache-2.0 */
/* The sidecar server's operations: each decoded request is handled here,
 * HELLO's token and model checks included; SAVE and LOAD become tickets
 * handed to the copy workers, WAIT and POLL look at (or park on) them. */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/server_int.h"

/* Constant-time comparison of a received token with a configured one. */
static bool token_equal(const char *want, const char *got, size_t got_len)
{
	size_t want_len = strlen(want);
	unsigned diff = want_len != got_len;

	for (size_t i = 0; i < got_len; i++)
		diff |= (unsigned)(uint8_t)got[i] ^ (uint8_t)(i < want_len ? want[i] : 0);
	return diff == 0;
}

static bool model_allowed(const char *patterns, const char *model)
{
	char buf[512], *save, *tok;

	if (!patterns || !*patterns)
		return true;
	snprintf(buf, sizeof(buf), "%s", patterns);
	for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		if (fnmatch(tok, model, 0) == 0)
			return true;
	return false;
}

/* A namespace's shape, for the log: what makes two HELLOs of one model id
 * land in different namespaces. */
static void shape_str(const struct kvt_ns_desc *d, char *buf, size_t len)
{
	const char *dtype = kvt_dtype_name(d->dtype);

	snprintf(buf, len, "layout=%s dtype=%s layers=%u kv_heads=%u head_dim=%u "
		 "block_tokens=%u tp=%u/%u", d->layout == KVT_LAYOUT_MLA ? "mla" :
		 d->layout == KVT_LAYOUT_SPLIT_KV ? "split" : "paged",
		 dtype ? dtype : "?", d->layers, d->kv_heads, d->head_dim, d->block_tokens,
		 d->tp_rank, d->tp_size);
}

static int op_hello(struct kvt_conn *c, const struct kvt_req *req)
{
	struct kvt_server *srv = c->srv;
	const struct kvt_req_hello *h = &req->u.hello;
	const struct kvt_server_tenant *t = NULL;
	struct kvt_ns_desc desc = h->desc;
	const struct kvt_ns_desc *other;
	struct kvt_ns *ns;
	char shape[160];
	uint16_t version;
	int slot = -1, err;

	if (h->min_version > KVT_PROTO_VERSION_MAX || h->max_version < KVT_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	version = h->max_version < KVT_PROTO_VERSION_MAX ? h->max_version : KVT_PROTO_VERSION_MAX;
	for (size_t i = 0; i < srv->opts.n_tenants; i++)
		if (token_equal(srv->tenants[i].token, h->token, h->token_len))
			t = &srv->tenants[i];
	if (!t || (c->tenant && c->tenant != t)) {
		srv->c.hello_refused++;
		kvt_srv_log(srv, KVT_LOG_WARN, "event=hello.refused conn=%llu pid=%d reason=%s",
			    (unsigned long long)c->id, (int)c->pid, t ? "tenant_change" : "token");
		if (!t)
			kvt_conn_hello_failed(c); /* a wrong token: its uid slows down */
		if (++c->hello_fails >= KVT_HELLO_MAX_FAILS)
			c->closing = true;
		return -EACCES;
	}
	if (!model_allowed(t->models, desc.model_id)) {
		srv->c.hello_refused++;
		kvt_srv_log(srv, KVT_LOG_WARN, "event=hello.refused conn=%llu tenant=%s "
			    "reason=namespace model=\"%s\"", (unsigned long long)c->id, t->name,
			    desc.model_id);
		return -EACCES;
	}
	memcpy(desc.tenant_salt, t->salt, t->salt_len);
	desc.tenant_salt_len = t->salt_len;
	err = kvt_tenant_ns_open(srv, (size_t)(t - srv->tenants), &desc, &ns);
	if (err == -EDQUOT) {
		srv->c.hello_refused++;
		kvt_srv_log(srv, KVT_LOG_WARN, "event=hello.refused conn=%llu tenant=%s "
			    "reason=ns_quota max_ns_per_tenant=%u", (unsigned long long)c->id,
			    t->name, srv->opts.max_ns_per_tenant);
	}
	if (err)
		return err;
	for (int i = 0; i < KVT_CONN_MAX_NS; i++) {
		if (c->ns[i] == ns) {
			slot = i;
			break;
		}
		if (!c->ns[i] && slot < 0)
			slot = i;
	}
	if (slot < 0) {
		kvt_tenant_ns_put(srv, ns, false);
		return -EMFILE;
	}
	if (c->ns[slot] != ns)
		kvt_tenant_ns_hold(srv, ns);
	if (c->ns[slot] != ns && srv->opts.hooks.ns_cb && srv->opts.hooks.ns_cb(srv->opts.hooks.arg, ns))
		kvt_tenant_ns_hold(srv, ns); /* the cluster's, for good */
	if (!c->tenant)
		kvt_conn_hello_done(c);
	c->tenant = t;
	c->version = version;
	c->ns[slot] = ns;
	c->ns_block_bytes[slot] = kvt_ns_block_bytes(ns);
	c->ns_desc[slot] = desc;
	c->ns_insight[slot] = kvt_insight_ns(srv->insight, (size_t)(t - srv->tenants), &desc);
	shape_str(&desc, shape, sizeof(shape));
	kvt_srv_log(srv, KVT_LOG_INFO, "event=hello conn=%llu tenant=%s ns=%d model=\"%s\" %s "
		    "block_bytes=%llu", (unsigned long long)c->id, t->name, slot + 1,
		    desc.model_id, shape, (unsigned long long)c->ns_block_bytes[slot]);
	other = kvt_tenant_ns_other_shape(srv, (size_t)(t - srv->tenants), ns, &desc);
	if (other) {
		/* the same model in another shape is another namespace: an engine
		 * whose config changed finds none of the blocks saved before */
		char was[160];

		srv->c.hello_shape_mismatch++;
		shape_str(other, was, sizeof(was));
		kvt_srv_log(srv, KVT_LOG_WARN, "event=hello.shape_differs conn=%llu tenant=%s "
			    "model=\"%s\" shape=\"%s\" known_shape=\"%s\" effect=\"a namespace of "
			    "its own: blocks saved in the known shape are not found (zero hits); "
			    "check the engine's model config\"", (unsigned long long)c->id, t->name,
			    desc.model_id, shape, was);
	}
	kvt_wr_begin(&c->out, KVT_OP_HELLO | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u16(&c->out, version);
	kvt_wr_u16(&c->out, 0);
	kvt_wr_u32(&c->out, (uint32_t)slot + 1);
	kvt_wr_u64(&c->out, c->ns_block_bytes[slot]);
	kvt_wr_bytes(&c->out, kvt_ns_salt(ns), KVT_KEY_BYTES);
	kvt_wr_u32(&c->out, KVT_PROTO_MAX_KEYS);
	return kvt_wr_end(&c->out) ? -ENOMEM : KVT_REQ_ANSWERED;
}

/* The namespace of a handle of this connection, or NULL. */
static struct kvt_ns *conn_ns(struct kvt_conn *c, uint32_t handle)
{
	return handle >= 1 && handle <= KVT_CONN_MAX_NS ? c->ns[handle - 1] : NULL;
}

static int op_keys(struct kvt_conn *c, const struct kvt_req *req)
{
	const struct kvt_req_keys *k = &req->u.keys;
	struct kvt_ns *ns = conn_ns(c, k->ns);
	struct kvt_key *keys;
	uint8_t *tiers = NULL;
	uint32_t load = 0;
	int n;

	if (!ns)
		return -EBADF;
	/* the frame's keys are unaligned bytes; the store takes an array */
	keys = malloc((size_t)k->n * sizeof(*keys) + 1);
	if (!keys)
		return -ENOMEM;
	memcpy(keys, k->keys, (size_t)k->n * sizeof(*keys));
	switch (req->hdr.op) {
	case KVT_OP_LOOKUP:
		tiers = malloc(k->n + 1);
		n = tiers ? kvt_lookup(ns, keys, k->n, tiers) : -ENOMEM;
		if (n >= 0) {
			/* the peer tier carries the local prefix on: tier remote */
			uint32_t local = (uint32_t)n;

			while (local && tiers[local - 1] == KVT_TIER_REMOTE)
				local--;
			c->srv->c.lookup_keys += k->n;
			c->srv->c.lookup_hits += local;
			c->srv->c.lookup_remote += (uint32_t)n - local;
			kvt_insight_lookup(c->srv->insight, c->ns_insight[k->ns - 1], keys, k->n,
					   local, c->ns_desc[k->ns - 1].block_tokens);
			kvt_plan_remember(c, keys, tiers, (uint32_t)n);
		}
		if (n >= 0 && c->version >= 2) {
			load = kvt_plan_loads(c->srv, ns, &c->ns_desc[k->ns - 1], tiers, (uint32_t)n);
			c->srv->c.plan_lookups++;
			c->srv->c.plan_load_blocks += load;
			c->srv->c.plan_recompute_blocks += (uint32_t)n - load;
		}
		break;
	case KVT_OP_PIN:
		n = kvt_pin(ns, keys, k->n);
		break;
	case KVT_OP_UNPIN:
		n = kvt_unpin(ns, keys, k->n);
		break;
	default: /* REMOVE: the count of keys removed */
		n = 0;
		for (uint32_t i = 0; i < k->n; i++)
			n += kvt_remove(ns, &keys[i]) == 0;
		break;
	}
	free(keys);
	if (n < 0) {
		free(tiers);
		return n;
	}
	kvt_wr_begin(&c->out, req->hdr.op | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u32(&c->out, (uint32_t)n);
	if (tiers) {
		kvt_wr_u32(&c->out, k->n);
		kvt_wr_bytes(&c->out, tiers, k->n);
		if (c->version >= 2)
			kvt_wr_u32(&c->out, load);
		free(tiers);
	}
	return kvt_wr_end(&c->out) ? -ENOMEM : KVT_REQ_ANSWERED;
}

static int op_xfer(struct kvt_conn *c, const struct kvt_req *req)
{
	struct kvt_server *srv = c->srv;
	const struct kvt_req_xfer *x = &req->u.xfer;
	struct kvt_ns *ns = conn_ns(c, x->ns);
	struct kvt_engine_mem *m;
	struct kvt_job *job;
	size_t bytes;

	if (!ns)
		return -EBADF;
	if ((x->flags & (KVT_XFER_PUSH | KVT_XFER_PUSH_LAYERS)) && c->version < 2)
		return -EINVAL; /* pushed completions are version 2's */
	if ((x->flags & KVT_SAVE_CLASS_MASK) && c->version < 3)
		return -EINVAL; /* the reuse class is version 3's */
	if (x->region < 1 || x->region > KVT_CONN_MAX_REGIONS || !c->regions[x->region - 1])
		return -EBADF;
	m = c->regions[x->region - 1];
	if (m->ns != x->ns) {
		/* the engine sees only EINVAL: the log says which shapes differ */
		kvt_srv_log(srv, KVT_LOG_WARN, "event=xfer.refused conn=%llu op=%s ns=%u "
			    "region=%u region_ns=%u reason=\"the region was registered for "
			    "another namespace (another model shape)\"", (unsigned long long)c->id,
			    kvt_op_name(req->hdr.op), x->ns, x->region, m->ns);
		return -EINVAL;
	}
	bytes = sizeof(*job) + (size_t)x->n * (sizeof(*job->keys) + sizeof(*job->pages) + 1);
	if (c->n_jobs >= KVT_CONN_MAX_TICKETS || c->job_bytes + bytes > KVT_CONN_MAX_TICKET_BYTES)
		return -EBUSY;
	for (uint32_t i = 0; i < x->n; i++)
		if (kvt_proto_page(x, i) >= m->pages) {
			kvt_srv_log(srv, KVT_LOG_WARN, "event=xfer.refused conn=%llu op=%s ns=%u "
				    "region=%u reason=\"page %u past the region's %u pages\"",
				    (unsigned long long)c->id, kvt_op_name(req->hdr.op), x->ns,
				    x->region, kvt_proto_page(x, i), m->pages);
			return -ERANGE;
		}
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->keys = malloc((size_t)x->n * sizeof(*job->keys));
	job->pages = malloc((size_t)x->n * sizeof(*job->pages));
	if (req->hdr.op == KVT_OP_LOAD)
		job->tiers = malloc(x->n);
	if (!job->keys || !job->pages || (req->hdr.op == KVT_OP_LOAD && !job->tiers)) {
		kvt_job_free(job);
		return -ENOMEM;
	}
	memcpy(job->keys, x->keys, (size_t)x->n * sizeof(*job->keys));
	for (uint32_t i = 0; i < x->n; i++)
		job->pages[i] = kvt_proto_page(x, i);
	for (uint32_t i = 0; job->tiers && i < x->n; i++) {
		job->tiers[i] = kvt_plan_tier_of(c, &job->keys[i]);
		/* a key not looked up may be fetched from another node too */
		job->peer |= srv->opts.peer_workers && (job->tiers[i] == KVT_TIER_REMOTE ||
							job->tiers[i] == KVT_TIER_NONE);
	}
	job->op = req->hdr.op;
	job->req_id = req->hdr.id;
	job->push = x->flags & (KVT_XFER_PUSH | KVT_XFER_PUSH_LAYERS);
	job->ticket = ++srv->next_ticket;
	job->conn = c;
	job->ns = ns;
	job->mem = m;
	kvt_engine_mem_get(m);
	job->n = x->n;
	job->has_parent = x->flags & KVT_SAVE_HAS_PARENT;
	job->reuse_class = (uint8_t)((x->flags & KVT_SAVE_CLASS_MASK) >> KVT_SAVE_CLASS_SHIFT);
	job->parent = x->parent;
	job->start_ns = kvt_now_ns();
	job->bytes = bytes;
	job->next = c->jobs;
	c->jobs = job;
	c->n_jobs++;
	c->job_bytes += bytes;
	c->refs++; /* until the final note */

	kvt_wr_begin(&c->out, req->hdr.op | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u64(&c->out, job->ticket);
	if (job->op == KVT_OP_LOAD)
		kvt_wr_u32(&c->out, m->layers);
	kvt_wr_end(&c->out);
	kvt_jobs_submit(srv, job);
	return KVT_REQ_ANSWERED;
}

static int op_wait(struct kvt_conn *c, const struct kvt_req *req)
{
	const struct kvt_req_wait *w = &req->u.wait;
	struct kvt_job *job = kvt_ticket_find(c, w->ticket);

	if (!job)
		return -ENOENT;
	if (req->hdr.op == KVT_OP_POLL || kvt_wait_satisfied(job, w->layer) || w->timeout_ms == 0) {
		kvt_wait_answer(c, req->hdr.op, req->hdr.id, job, w->layer);
		return KVT_REQ_ANSWERED;
	}
	return kvt_wait_park(c, job, req->hdr.id, w->layer, w->timeout_ms);
}

static int op_prefill(struct kvt_conn *c, const struct kvt_req *req)
{
	const struct kvt_req_prefill *p = &req->u.prefill;
	struct kvt_ns *ns = conn_ns(c, p->ns);

	if (!ns)
		return -EBADF;
	if (!p->tokens || !p->ns_elapsed)
		return -EINVAL;
	kvt_tenant_ns_prefill_add(c->srv, ns, p->tokens, p->ns_elapsed);
	c->srv->c.prefill_reports++;
	kvt_srv_log(c->srv, KVT_LOG_DEBUG, "event=prefill conn=%llu ns=%u tokens=%u ms=%.3f "
		    "tokens_per_s=%.0f", (unsigned long long)c->id, p->ns, p->tokens,
		    (double)p->ns_elapsed / 1e6, kvt_tenant_ns_prefill(c->srv, ns));
	kvt_wr_begin(&c->out, KVT_OP_PREFILL | KVT_OP_REPLY, req->hdr.id, 0);
	return kvt_wr_end(&c->out) ? -ENOMEM : KVT_REQ_ANSWERED;
}

/* STATS: the daemon-wide figures, and a tenant's own when the request
 * carries its token (or the connection said HELLO as it): a tenant's figures
 * are for those who hold its token. */
static int op_stats(struct kvt_conn *c, const struct kvt_req *req)
{
	struct kvt_server *srv = c->srv;
	const struct kvt_req_blob *b = &req->u.blob;
	size_t t = c->tenant ? (size_t)(c->tenant - srv->tenants) : SIZE_MAX;
	char *json;
	size_t len;

	if (b->len) {
		t = SIZE_MAX;
		for (size_t i = 0; i < srv->opts.n_tenants; i++)
			if (token_equal(srv->tenants[i].token, (const char *)b->data, b->len))
				t = i;
		if (t == SIZE_MAX) {
			kvt_srv_log(srv, KVT_LOG_WARN, "event=stats.refused conn=%llu pid=%d "
				    "reason=token", (unsigned long long)c->id, (int)c->pid);
			kvt_conn_hello_failed(c); /* a wrong token: its uid slows down */
			return -EACCES;
		}
	}
	json = kvt_metrics_json(srv, t, true);
	if (!json)
		return -ENOMEM;
	len = strlen(json);
	if (len > KVT_PROTO_MAX_PAYLOAD) {
		free(json);
		return -EMSGSIZE;
	}
	kvt_wr_begin(&c->out, KVT_OP_STATS | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_bytes(&c->out, json, len);
	free(json);
	return kvt_wr_end(&c->out) ? -ENOMEM : KVT_REQ_ANSWERED;
}

int kvt_dispatch(struct kvt_conn *c, const struct kvt_req *req)
{
	uint16_t op = req->hdr.op;

	if (!c->tenant && op != KVT_OP_HELLO && op != KVT_OP_PING && op != KVT_OP_STATS)
		return -EPERM;
	switch (op) {
	case KVT_OP_HELLO:
		return op_hello(c, req);
	case KVT_OP_REGISTER:
	case KVT_OP_REGISTER_PARTS:
		return kvt_op_register(c, req);
	case KVT_OP_LOOKUP:
	case KVT_OP_PIN:
	case KVT_OP_UNPIN:
	case KVT_OP_REMOVE:
		return op_keys(c, req);
	case KVT_OP_SAVE:
	case KVT_OP_LOAD:
		return op_xfer(c, req);
	case KVT_OP_WAIT:
	case KVT_OP_POLL:
		return op_wait(c, req);
	case KVT_OP_STATS:
		return op_stats(c, req);
	case KVT_OP_PREFILL:
		return op_prefill(c, req);
	case KVT_OP_PING:
		kvt_wr_begin(&c->out, KVT_OP_PING | KVT_OP_REPLY, req->hdr.id, 0);
		kvt_wr_bytes(&c->out, req->u.blob.data, req->u.blob.len);
		return kvt_wr_end(&c->out) ? -ENOMEM : KVT_REQ_ANSWERED;
	}
	return -EOPNOTSUPP;
}
