/* SPDX-License-Identifier: Apache-2.0 */
/* The directory's stored records (see dir_record.h). */
#include "cluster/dir_record.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static bool printable(const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

int kvt_node_info_check(const struct kvt_node_info *n)
{
	if (!n || !kvt_node_id_valid(n->id) || !printable(n->addr, KVT_NODE_ADDR_MAX))
		return -EINVAL;
	if (!(n->transports & KVT_NODE_TCP) || (n->transports & ~(KVT_NODE_TCP | KVT_NODE_RDMA)))
		return -EINVAL;
	if (!(n->transports & KVT_NODE_RDMA))
		return 0;
	if (!printable(n->rdma.device, sizeof(n->rdma.device) - 1) ||
	    n->region.n_mrs == 0 || n->region.n_mrs > KVT_NODE_MAX_MRS || n->region.bytes == 0)
		return -EINVAL;
	for (uint32_t i = 0; i < n->region.n_mrs; i++) {
		const struct kvt_node_mr *m = &n->region.mrs[i];

		if (m->len == 0 || m->off > n->region.bytes || m->len > n->region.bytes - m->off)
			return -EINVAL;
	}
	return 0;
}

static const char hexd[] = "0123456789abcdef";

static void to_hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hexd[p[i] >> 4];
		out[2 * i + 1] = hexd[p[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static int from_hex(const char *s, uint8_t *p, size_t n)
{
	if (strlen(s) != 2 * n)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EBADMSG;
		p[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void kvt_key_hex(const struct kvt_key *key, char *out)
{
	to_hex(key->bytes, KVT_KEY_BYTES, out);
}

/* json_integer takes a signed 64-bit value; every field here is far below
 * 2^63 (addresses, sizes, epochs), and a larger one is refused. */
static int set_u64(json_t *o, const char *k, uint64_t v)
{
	if (v > INT64_MAX)
		return -1;
	return json_object_set_new(o, k, json_integer((json_int_t)v));
}

char *kvt_node_record_encode(const struct kvt_node_info *n)
{
	json_t *o = NULL, *tr, *r, *g, *mrs;
	char gid[33];
	char *s = NULL;
	int bad = 0;

	if (kvt_node_info_check(n))
		return NULL;
	o = json_object();
	tr = json_array();
	if (!o || !tr) {
		json_decref(tr);
		goto out;
	}
	bad |= json_object_set_new(o, "v", json_integer(KVT_NODE_RECORD_VERSION));
	bad |= json_object_set_new(o, "id", json_string(n->id));
	bad |= set_u64(o, "epoch", n->epoch);
	bad |= json_object_set_new(o, "addr", json_string(n->addr));
	bad |= json_array_append_new(tr, json_string("tcp"));
	if (n->transports & KVT_NODE_RDMA)
		bad |= json_array_append_new(tr, json_string("rdma"));
	bad |= json_object_set_new(o, "transports", tr);
	if (n->transports & KVT_NODE_RDMA) {
		r = json_object();
		g = json_object();
		mrs = json_array();
		bad |= json_object_set_new(o, "rdma", r);
		bad |= json_object_set_new(o, "region", g);
		if (!r || !g || !mrs) {
			json_decref(mrs);
			goto out;
		}
		to_hex(n->rdma.gid, 16, gid);
		bad |= json_object_set_new(r, "device", json_string(n->rdma.device));
		bad |= json_object_set_new(r, "port", json_integer(n->rdma.port));
		bad |= json_object_set_new(r, "gid", json_string(gid));
		bad |= json_object_set_new(r, "lid", json_integer(n->rdma.lid));
		bad |= set_u64(g, "base", n->region.base);
		bad |= set_u64(g, "bytes", n->region.bytes);
		for (uint32_t i = 0; i < n->region.n_mrs; i++) {
			json_t *m = json_object();

			bad |= json_array_append_new(mrs, m);
			if (!m)
				break;
			bad |= set_u64(m, "off", n->region.mrs[i].off);
			bad |= set_u64(m, "len", n->region.mrs[i].len);
			bad |= json_object_set_new(m, "rkey", json_integer(n->region.mrs[i].rkey));
		}
		bad |= json_object_set_new(g, "mrs", mrs);
	}
	if (!bad)
		s = json_dumps(o, JSON_COMPACT);
out:
	json_decref(o);
	return s;
}

/* A non-negative integer field <= max; sets *bad otherwise. */
static uint64_t get_uint(json_t *o, const char *k, uint64_t max, bool *bad)
{
	json_t *v = json_object_get(o, k);
	json_int_t i;

	if (!json_is_integer(v)) {
		*bad = true;
		return 0;
	}
	i = json_integer_value(v);
	if (i < 0 || (uint64_t)i > max) {
		*bad = true;
		return 0;
	}
	return (uint64_t)i;
}

/* A string field of 1..cap-1 bytes copied into out; sets *bad otherwise. */
static void get_str(json_t *o, const char *k, char *out, size_t cap, bool *bad)
{
	json_t *v = json_object_get(o, k);
	size_t n;

	if (!json_is_string(v) || (n = json_string_length(v)) == 0 || n >= cap ||
	    strlen(json_string_value(v)) != n) {
		*bad = true;
		return;
	}
	memcpy(out, json_string_value(v), n + 1);
}

static void decode_rdma(json_t *o, struct kvt_node_info *n, bool *bad)
{
	json_t *r = json_object_get(o, "rdma"), *g = json_object_get(o, "region"), *mrs;
	char gid[33];
	size_t i;

	if (!json_is_object(r) || !json_is_object(g)) {
		*bad = true;
		return;
	}
	get_str(r, "device", n->rdma.device, sizeof(n->rdma.device), bad);
	n->rdma.port = (uint8_t)get_uint(r, "port", 255, bad);
	n->rdma.lid = (uint16_t)get_uint(r, "lid", 65535, bad);
	get_str(r, "gid", gid, sizeof(gid), bad);
	if (!*bad && from_hex(gid, n->rdma.gid, 16))
		*bad = true;
	n->region.base = get_uint(g, "base", INT64_MAX, bad);
	n->region.bytes = get_uint(g, "bytes", INT64_MAX, bad);
	mrs = json_object_get(g, "mrs");
	if (!json_is_array(mrs) || json_array_size(mrs) > KVT_NODE_MAX_MRS) {
		*bad = true;
		return;
	}
	n->region.n_mrs = (uint32_t)json_array_size(mrs);
	for (i = 0; i < n->region.n_mrs && !*bad; i++) {
		json_t *m = json_array_get(mrs, i);

		if (!json_is_object(m)) {
			*bad = true;
			break;
		}
		n->region.mrs[i].off = get_uint(m, "off", INT64_MAX, bad);
		n->region.mrs[i].len = get_uint(m, "len", INT64_MAX, bad);
		n->region.mrs[i].rkey = (uint32_t)get_uint(m, "rkey", UINT32_MAX, bad);
	}
}

int kvt_node_record_decode(const char *js, size_t len, struct kvt_node_info *out)
{
	json_t *o, *tr;
	bool bad = false;
	size_t i;

	memset(out, 0, sizeof(*out));
	o = json_loadb(js, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		return -EBADMSG;
	}
	if (get_uint(o, "v", INT64_MAX, &bad) != KVT_NODE_RECORD_VERSION)
		bad = true;
	get_str(o, "id", out->id, sizeof(out->id), &bad);
	out->epoch = get_uint(o, "epoch", INT64_MAX, &bad);
	get_str(o, "addr", out->addr, sizeof(out->addr), &bad);
	tr = json_object_get(o, "transports");
	if (!json_is_array(tr))
		bad = true;
	for (i = 0; !bad && i < json_array_size(tr); i++) {
		const char *t = json_string_value(json_array_get(tr, i));
		uint32_t bit = !t ? 0 : !strcmp(t, "tcp") ? KVT_NODE_TCP
				: !strcmp(t, "rdma")     ? KVT_NODE_RDMA
							 : 0;

		if (!bit || (out->transports & bit))
			bad = true;
		out->transports |= bit;
	}
	if (!bad && (out->transports & KVT_NODE_RDMA))
		decode_rdma(o, out, &bad);
	json_decref(o);
	if (bad || kvt_node_info_check(out)) {
		memset(out, 0, sizeof(*out));
		return -EBADMSG;
	}
	return 0;
}

int kvt_hint_value_encode(uint64_t epoch, uint8_t tier, char *buf, size_t len)
{
	const char *t = tier == KVT_TIER_DRAM ? "dram" : tier == KVT_TIER_SSD ? "ssd" : NULL;
	int n;

	if (!t || epoch == 0 || epoch > INT64_MAX || len < KVT_HINT_VALUE_MAX)
		return -EINVAL;
	n = snprintf(buf, len, "%" PRIu64 ":%s", epoch, t);
	return n;
}

int kvt_hint_list_decode(const char *s, size_t len, struct kvt_hint_holder *out, int max)
{
	size_t at = 0;
	int n = 0;

	if (len == 0)
		return -EBADMSG;
	while (at <= len) {
		const char *e = s + at, *comma = memchr(e, ',', len - at), *eq;
		size_t elen = comma ? (size_t)(comma - e) : len - at;
		char id[KVT_NODE_ID_MAX + 1];

		eq = memchr(e, '=', elen);
		if (!eq || n == max || eq == e || (size_t)(eq - e) > KVT_NODE_ID_MAX)
			return -EBADMSG;
		memcpy(id, e, (size_t)(eq - e));
		id[eq - e] = '\0';
		if (!kvt_node_id_valid(id) ||
		    kvt_hint_value_decode(eq + 1, elen - (size_t)(eq - e) - 1, &out[n].epoch, &out[n].tier))
			return -EBADMSG;
		out[n].node = e;
		out[n].node_len = (size_t)(eq - e);
		n++;
		at += elen + 1;
		if (!comma)
			break;
	}
	return n;
}

int kvt_hint_value_decode(const char *s, size_t len, uint64_t *epoch, uint8_t *tier)
{
	uint64_t e = 0;
	size_t i = 0;

	/* decimal epoch without sign or leading zero, ':', a tier name; nothing more */
	if (len == 0 || len >= KVT_HINT_VALUE_MAX || s[0] == '0')
		return -EBADMSG;
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		if (i >= 19) /* epochs stay below 2^63, as in the node records */
			return -EBADMSG;
		e = e * 10 + (uint64_t)(s[i] - '0');
	}
	if (e > INT64_MAX)
		return -EBADMSG;
	if (i == 0 || i >= len || s[i] != ':')
		return -EBADMSG;
	i++;
	if (len - i == 4 && memcmp(s + i, "dram", 4) == 0)
		*tier = KVT_TIER_DRAM;
	else if (len - i == 3 && memcmp(s + i, "ssd", 3) == 0)
		*tier = KVT_TIER_SSD;
	else
		return -EBADMSG;
	*epoch = e;
	return 0;
}
