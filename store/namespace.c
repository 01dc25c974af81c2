/* SPDX-License-Identifier: Apache-2.0 */
/* Namespaces of include/kvtier/store.h: attach, detach, their codec and
 * prefix keys. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <endian.h>

#include "kvtier/store.h"
#include "store/store_impl.h"
#include "store/tiering.h"
#include "store/warm.h"
#include "util/opts.h"

/* The caller's descriptor as a whole one (fields it lacks at their
 * defaults). Returns 0 or -EINVAL. */
/* The codec of a namespace of dtype under the store's ssd_codec: "auto"
 * packs bf16's exponent bytes (shuf16-pack4: 1.33x fewer bytes at about
 * memcpy's speed) and leaves other dtypes raw, where it does not pay. */
static enum kvt_codec_id codec_of(const char *ssd_codec, enum kvt_dtype dtype)
{
	if (!strcmp(ssd_codec, KVT_SSD_CODEC_AUTO))
		return dtype == KVT_DTYPE_BF16 ? KVT_CODEC_SHUF16_PACK4 : KVT_CODEC_RAW;
	return (enum kvt_codec_id)kvt_codec_parse(ssd_codec);
}

static int ns_desc_load(const struct kvt_ns_desc *desc, struct kvt_ns_desc *d)
{
	kvt_ns_desc_init(d, sizeof(*d));
	return kvt_opts_load(d, sizeof(*d), desc);
}

/* Block bytes of a whole descriptor, 0 when it is invalid. */
static uint64_t block_bytes_of(const struct kvt_ns_desc *d)
{
	uint64_t planes, elem;

	if (!d->layers || !d->kv_heads || !d->head_dim ||
	    !d->block_tokens || !d->tp_size || d->tp_rank >= d->tp_size ||
	    d->tenant_salt_len > KVT_SALT_MAX)
		return 0;
	switch (d->layout) {
	case KVT_LAYOUT_PAGED_KV:
	case KVT_LAYOUT_SPLIT_KV:
		planes = 2;
		break;
	case KVT_LAYOUT_MLA:
		planes = 1;
		break;
	default:
		return 0;
	}
	elem = kvt_dtype_bytes(d->dtype);
	if (!elem)
		return 0;
	/* a descriptor comes from a client: a product that wraps is invalid */
	{
		uint64_t f[] = { d->layers, d->kv_heads, d->head_dim, elem, d->block_tokens };
		uint64_t bytes = planes;
		for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++)
			if (__builtin_mul_overflow(bytes, f[k], &bytes))
				return 0;
		return bytes;
	}
}

uint64_t kvt_ns_desc_block_bytes(const struct kvt_ns_desc *desc)
{
	struct kvt_ns_desc d;

	return ns_desc_load(desc, &d) ? 0 : block_bytes_of(&d);
}

/* The namespace's identity: SHA-256 over every field that defines it, in a
 * fixed little-endian encoding, so it is stable across runs and machines. */
int kvt_ns_digest(const struct kvt_ns_desc *d, struct kvt_key *out)
{
	uint32_t fields[] = { (uint32_t)d->layout, (uint32_t)d->dtype, d->layers, d->kv_heads,
			      d->head_dim, d->block_tokens, d->tp_rank, d->tp_size,
			      d->tenant_salt_len };
	unsigned char md[EVP_MAX_MD_SIZE];
	char model[KVT_MODEL_ID_MAX] = { 0 };
	unsigned int md_len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok;

	if (!ctx)
		return -ENOMEM;
	memcpy(model, d->model_id, strnlen(d->model_id, sizeof(model) - 1));
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		fields[i] = htole32(fields[i]);
	ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(ctx, "kvtier-ns-v1", 12) &&
	     EVP_DigestUpdate(ctx, model, sizeof(model)) &&
	     EVP_DigestUpdate(ctx, fields, sizeof(fields)) &&
	     EVP_DigestUpdate(ctx, d->tenant_salt, d->tenant_salt_len) &&
	     EVP_DigestFinal_ex(ctx, md, &md_len);
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -EIO;
	memcpy(out->bytes, md, KVT_KEY_BYTES);
	return 0;
}

int kvt_ns_attach(struct kvt_store *s, const struct kvt_ns_desc *desc, struct kvt_ns **out)
{
	struct kvt_ns *ns, **grown;
	struct kvt_ns_desc d;
	struct kvt_key salt;
	uint64_t bytes;
	int err;

	if (!s || !out || ns_desc_load(desc, &d))
		return -EINVAL;
	bytes = block_bytes_of(&d);
	if (!bytes || memchr(d.model_id, 0, KVT_MODEL_ID_MAX) == NULL)
		return -EINVAL;
	if (bytes > s->mem->ops->max_block(s->mem) || bytes > UINT32_MAX)
		return -EFBIG;
	err = kvt_ns_digest(&d, &salt);
	if (err)
		return err;

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_ns; i++) {
		if (s->ns[i] && !memcmp(&s->ns[i]->salt, &salt, sizeof(salt))) {
			*out = s->ns[i];
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
	}
	err = -ENOSPC;
	if (s->n_ns == MAX_NAMESPACES && !s->n_free_ids)
		goto unlock;
	err = -ENOMEM;
	ns = calloc(1, sizeof(*ns));
	grown = s->n_free_ids ? s->ns : realloc(s->ns, (s->n_ns + 1) * sizeof(*grown));
	if (!ns || !grown) {
		free(ns);
		if (grown)
			s->ns = grown;
		goto unlock;
	}
	s->ns = grown;
	ns->store = s;
	/* a detached namespace's id is free: none of its records is left */
	ns->id = s->n_free_ids ? s->free_ids[--s->n_free_ids] : (uint16_t)++s->n_ns;
	ns->desc = d;
	ns->block_bytes = bytes;
	ns->salt = salt;
	kvt_codec_cfg_init(&ns->codec);
	/* the store's codec, where there is a tier to write to */
	if (kvt_tiering_has(s, KVT_TIER_CAP_DEMOTE)) {
		ns->codec.id = codec_of(s->opts.ssd_codec, d.dtype);
		if (s->opts.ssd_codec_min_ratio > 0)
			ns->codec.min_ratio = s->opts.ssd_codec_min_ratio;
	}
	s->ns[ns->id - 1] = ns;
	s->live_ns++;
	kvt_warm_ns_attached(s, ns);
	kvt_tiering_import(s, ns);
	*out = ns;
	err = 0;
unlock:
	pthread_mutex_unlock(&s->lock);
	return err;
}

int kvt_ns_detach(struct kvt_ns *ns)
{
	struct kvt_store *s;
	int err = 0;

	if (!ns)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	if (kvt_index_ns_count(s->cat.idx, ns->id)) {
		err = -EBUSY;
	} else if (!s->free_ids && !(s->free_ids = malloc(MAX_NAMESPACES * sizeof(*s->free_ids)))) {
		err = -ENOMEM;
	} else {
		kvt_warm_ns_detached(s, ns);
		s->ns[ns->id - 1] = NULL;
		s->free_ids[s->n_free_ids++] = ns->id;
		s->live_ns--;
	}
	pthread_mutex_unlock(&s->lock);
	if (!err)
		free(ns);
	return err;
}

uint64_t kvt_ns_block_bytes(const struct kvt_ns *ns)
{
	return ns ? ns->block_bytes : 0;
}

const struct kvt_key *kvt_ns_salt(const struct kvt_ns *ns)
{
	return ns ? &ns->salt : NULL;
}

uint64_t kvt_ns_storage_id(const struct kvt_ns *ns)
{
	uint64_t v;

	memcpy(&v, ns->salt.bytes, sizeof(v));
	return le64toh(v);
}

int kvt_ns_set_ssd_codec(struct kvt_ns *ns, const char *codec, double min_ratio)
{
	struct kvt_store *s = ns ? ns->store : NULL;
	int id = kvt_codec_parse(codec);
	int err = -EINVAL;

	if (!s || id < 0 || min_ratio < 0)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if (kvt_tiering_has(s, KVT_TIER_CAP_DEMOTE)) {
		kvt_codec_cfg_init(&ns->codec); /* min_ratio 0 means the default, 1.1 */
		ns->codec.id = (enum kvt_codec_id)id;
		if (min_ratio > 0)
			ns->codec.min_ratio = min_ratio;
		err = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

int kvt_ns_prefix_keys(const struct kvt_ns *ns, const uint32_t *tokens, size_t n_tokens,
		       struct kvt_key *keys, size_t max_keys)
{
	if (!ns)
		return -EINVAL;
	return kvt_prefix_keys(ns->salt.bytes, KVT_KEY_BYTES, NULL, tokens, n_tokens,
			       ns->desc.block_tokens, keys, max_keys);
}
