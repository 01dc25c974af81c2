/* SPDX-License-Identifier: Apache-2.0 */
/* The directory interface: options, the backend registry, and the calls
 * that dispatch through a backend's ops (see directory.h). */
#include "cluster/directory.h"

#include <errno.h>
#include <string.h>

#include "cluster/dir_record.h"

extern const struct kvt_dir_ops kvt_dir_redis_ops;

/* Backends by URL scheme. */
static const struct {
	const char *scheme;
	const struct kvt_dir_ops *ops;
} backends[] = {
	{ "redis://", &kvt_dir_redis_ops },
	{ "unix://", &kvt_dir_redis_ops },
	{ "sentinel://", &kvt_dir_redis_ops },
};

void kvt_dir_opts_init(struct kvt_dir_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->key_prefix = "kvt:";
	opts->self.transports = KVT_NODE_TCP;
	opts->io_timeout_ms = 250;
	opts->lookup_timeout_ms = 50;
	opts->lookup_batch_keys = 1024;
	opts->member_ttl_ms = 3000;
	opts->hint_ttl_ms = 600000;
	opts->max_queued_keys = 65536;
	opts->batch_keys = 512;
	opts->replay_ms = 60000;
}

int kvt_dir_open(const struct kvt_dir_opts *opts, struct kvt_dir **out)
{
	if (!opts || !out || opts->size != sizeof(*opts) || !opts->url || !opts->key_prefix)
		return -EINVAL;
	if (kvt_node_info_check(&opts->self) || opts->io_timeout_ms == 0 ||
	    opts->lookup_timeout_ms == 0 || opts->member_ttl_ms < 300 || opts->hint_ttl_ms == 0 ||
	    opts->max_queued_keys == 0 || opts->batch_keys == 0 ||
	    opts->lookup_batch_keys == 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strncmp(opts->url, backends[i].scheme, strlen(backends[i].scheme)) == 0)
			return backends[i].ops->open(opts, out);
	return -EPROTONOSUPPORT;
}

void kvt_dir_publish(struct kvt_dir *d, const struct kvt_key *keys, size_t n, uint8_t tier)
{
	if (d && keys && n)
		d->ops->publish(d, keys, n, tier);
}

void kvt_dir_forget(struct kvt_dir *d, const struct kvt_key *keys, size_t n)
{
	if (d && keys && n)
		d->ops->forget(d, keys, n);
}

int kvt_dir_lookup(struct kvt_dir *d, const struct kvt_key *keys, size_t n,
		   struct kvt_dir_holders *out)
{
	if (!d || (n && (!keys || !out)))
		return -EINVAL;
	return d->ops->lookup(d, keys, n, out);
}

int kvt_dir_members(struct kvt_dir *d, struct kvt_node_info *out, size_t max)
{
	if (!d || (max && !out))
		return -EINVAL;
	return d->ops->members(d, out, max);
}

int kvt_dir_set_self(struct kvt_dir *d, const struct kvt_node_info *self)
{
	if (!d || !self)
		return -EINVAL;
	return d->ops->set_self(d, self);
}

void kvt_dir_stats(struct kvt_dir *d, struct kvt_dir_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (d)
		d->ops->stats(d, out);
}

void kvt_dir_close(struct kvt_dir *d)
{
	if (d)
		d->ops->close(d);
}
