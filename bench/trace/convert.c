/* SPDX-License-Identifier: Apache-2.0 */
/* The token-id trace converter; see convert.h. */
#include "bench/trace/convert.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kvtier/store.h"
#include "store/index.h"

void kvt_convert_opts_init(struct kvt_convert_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->block_tokens = 512;
	opts->errors = stderr;
	opts->label = "input";
}

struct conv {
	const struct kvt_convert_opts *o;
	struct kvt_index *ids;   /* key -> record number, which is the dense id */
	uint32_t *tokens;
	size_t tokens_cap;
	struct kvt_key *keys;
	size_t keys_cap;
	uint64_t line;
	struct kvt_convert_stats st;
};

static int bad(struct conv *c, const char *what)
{
	c->st.bad_lines++;
	if (c->o->errors)
		fprintf(c->o->errors, "%s:%llu: %s%s\n", c->o->label, (unsigned long long)c->line,
			what, c->o->skip_bad ? " (skipped)" : "");
	return -EBADMSG;
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
	void *q;

	if (n <= *cap)
		return 0;
	n = n < 1024 ? 1024 : n * 2;
	q = realloc(*p, n * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

/* The dense id of key: its record number in the index (records are handed
 * out 0, 1, 2, ... and never freed here). */
static int id_of(struct conv *c, const struct kvt_key *key, uint64_t *id)
{
	uint32_t i;
	int err = kvt_index_insert(c->ids, 0, key, &i);

	if (err == 0) {
		kvt_index_rec(c->ids, i)->state = KVT_REC_LIVE;
		c->st.distinct_blocks++;
	} else if (err != -EEXIST) {
		return err;
	}
	*id = i;
	return 0;
}

static int convert_line(struct conv *c, const char *buf, size_t len, FILE *out)
{
	const struct kvt_convert_opts *o = c->o;
	json_error_t jerr;
	json_t *doc = json_loadb(buf, len, 0, &jerr), *toks = NULL, *v;
	double ts = (double)(c->line - 1);
	uint64_t outl = 0;
	size_t n, full, nk, i;
	int err = 0;

	if (!doc)
		return bad(c, "bad JSON");
	if (json_is_array(doc)) {
		toks = doc;
	} else if (json_is_object(doc)) {
		toks = json_object_get(doc, "tokens");
		if (!toks)
			toks = json_object_get(doc, "token_ids");
		if (!toks)
			toks = json_object_get(doc, "prompt_token_ids");
		if (!toks) {
			err = bad(c, "missing field \"tokens\"");
			goto out;
		}
		v = json_object_get(doc, "timestamp");
		if (v) {
			if (!json_is_number(v) || !isfinite(json_number_value(v))) {
				err = bad(c, "\"timestamp\" is not a number");
				goto out;
			}
			ts = json_number_value(v);
		}
		v = json_object_get(doc, "output_length");
		if (v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0) {
				err = bad(c, "\"output_length\" is not a non-negative integer");
				goto out;
			}
			outl = (uint64_t)json_integer_value(v);
		}
	} else {
		err = bad(c, "neither a token array nor an object");
		goto out;
	}
	if (!json_is_array(toks)) {
		err = bad(c, "tokens are not an array");
		goto out;
	}
	n = json_array_size(toks);
	err = grow((void **)&c->tokens, &c->tokens_cap, n, sizeof(*c->tokens));
	if (!err)
		err = grow((void **)&c->keys, &c->keys_cap, n / o->block_tokens + 1, sizeof(*c->keys));
	if (err)
		goto out;
	for (i = 0; i < n; i++) {
		json_t *t = json_array_get(toks, i);

		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > UINT32_MAX) {
			err = bad(c, "a token id is not an integer in [0, 2^32)");
			goto out;
		}
		c->tokens[i] = (uint32_t)json_integer_value(t);
	}
	full = n / o->block_tokens;
	err = kvt_prefix_keys(o->salt, o->salt_len, NULL, c->tokens, n, o->block_tokens,
			      c->keys, full);
	if (err < 0)
		goto out;
	nk = full;
	if (n % o->block_tokens) {
		/* the partial tail, keyed by its own tokens under the last full block */
		err = kvt_prefix_keys(o->salt, o->salt_len, full ? &c->keys[full - 1] : NULL,
				      c->tokens + full * o->block_tokens, n % o->block_tokens,
				      (uint32_t)(n % o->block_tokens), &c->keys[full], 1);
		if (err < 0)
			goto out;
		nk++;
	}
	err = 0;
	if (fprintf(out, "{\"timestamp\": %.17g, \"input_length\": %zu, \"output_length\": %llu, "
			 "\"hash_ids\": [", ts, n, (unsigned long long)outl) < 0) {
		err = -EIO;
		goto out;
	}
	for (i = 0; i < nk; i++) {
		uint64_t id;

		err = id_of(c, &c->keys[i], &id);
		if (err)
			goto out;
		if (fprintf(out, i ? ", %llu" : "%llu", (unsigned long long)id) < 0) {
			err = -EIO;
			goto out;
		}
	}
	if (fputs("]}\n", out) < 0) {
		err = -EIO;
		goto out;
	}
	c->st.requests++;
	c->st.tokens += n;
	c->st.blocks += nk;
out:
	json_decref(doc);
	return err;
}

int kvt_trace_convert(FILE *in, FILE *out, const struct kvt_convert_opts *o,
		      struct kvt_convert_stats *stats)
{
	struct conv c = { .o = o };
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int err;

	if (!in || !out || !o || o->size != sizeof(*o) || !o->block_tokens ||
	    (o->salt_len && !o->salt))
		return -EINVAL;
	err = kvt_index_create(1 << 16, &c.ids);
	if (err)
		return err;
	while ((len = getline(&line, &cap, in)) >= 0) {
		size_t i;

		c.line++;
		for (i = 0; i < (size_t)len && strchr(" \t\r\n", line[i]); i++)
			;
		if (i == (size_t)len)
			continue;
		err = convert_line(&c, line, (size_t)len, out);
		if (err == -EBADMSG && o->skip_bad)
			err = 0;
		if (err)
			break;
	}
	if (!err && ferror(in))
		err = -EIO;
	if (!err && fflush(out))
		err = -EIO;
	if (stats)
		*stats = c.st;
	free(line);
	free(c.tokens);
	free(c.keys);
	kvt_index_destroy(c.ids);
	return err;
}
