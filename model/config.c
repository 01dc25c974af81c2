/* SPDX-License-Identifier: Apache-2.0 */
/* Reading a Hugging Face config.json into a struct kvt_model.
 *
 * Field names differ between families; each figure is looked up under the
 * names the families in use give it (Llama/Qwen/Mistral, Qwen-MoE, Mixtral,
 * DeepSeek-V2/V3). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>

#include "kvtier/model.h"
#include "model/model_internal.h"

/* The integer under the first of names present and not null; 0 if none.
 * -ERANGE for a negative value or one past UINT32_MAX, -EINVAL for a
 * non-integer. */
static int get_u32(json_t *cfg, uint32_t *out, const char *const *names)
{
	*out = 0;
	for (; *names; names++) {
		json_t *v = json_object_get(cfg, *names);
		json_int_t x;

		if (!v || json_is_null(v))
			continue;
		if (!json_is_integer(v))
			return -EINVAL;
		x = json_integer_value(v);
		if (x < 0 || x > (json_int_t)UINT32_MAX)
			return -ERANGE;
		*out = (uint32_t)x;
		return 0;
	}
	return 0;
}

#define GET(cfg, field, ...)                                                       \
	do {                                                                       \
		static const char *const names_[] = { __VA_ARGS__, NULL };         \
		int e_ = get_u32(cfg, &(field), names_);                           \
		if (e_)                                                            \
			return e_;                                                 \
	} while (0)

static bool get_bool(json_t *cfg, const char *name, bool dflt)
{
	json_t *v = json_object_get(cfg, name);

	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* Which layers carry routed experts: DeepSeek's first_k_dense_replace and
 * moe_layer_freq, Qwen-MoE's decoder_sparse_step and mlp_only_layers. */
static int count_moe_layers(json_t *cfg, struct kvt_model *m)
{
	uint32_t first_dense = 0, freq = 1, step = 1;
	json_t *only = json_object_get(cfg, "mlp_only_layers");

	GET(cfg, first_dense, "first_k_dense_replace");
	GET(cfg, freq, "moe_layer_freq");
	GET(cfg, step, "decoder_sparse_step");
	if (!freq)
		freq = 1;
	if (!step)
		step = 1;
	m->moe_layers = 0;
	for (uint32_t i = 0; m->experts && i < m->layers; i++) {
		bool moe = i >= first_dense && i % freq == 0 && (i + 1) % step == 0;
		size_t j;
		json_t *v;

		json_array_foreach(only, j, v)
			if (json_is_integer(v) && json_integer_value(v) == (json_int_t)i)
				moe = false;
		m->moe_layers += moe;
	}
	m->dense_layers = m->layers - m->moe_layers;
	return 0;
}

static int parse_obj(json_t *cfg, struct kvt_model *m)
{
	json_t *text = json_object_get(cfg, "text_config");
	json_t *v;
	uint32_t shared_n = 0;
	int err;

	/* multimodal configs nest the language model */
	if (!json_object_get(cfg, "hidden_size") && json_is_object(text))
		cfg = text;

	GET(cfg, m->layers, "num_hidden_layers", "n_layer", "num_layers");
	GET(cfg, m->hidden, "hidden_size", "n_embd", "d_model");
	GET(cfg, m->heads, "num_attention_heads", "n_head");
	GET(cfg, m->kv_heads, "num_key_value_heads", "num_kv_heads");
	GET(cfg, m->head_dim, "head_dim");
	GET(cfg, m->intermediate, "intermediate_size", "ffn_hidden_size");
	GET(cfg, m->vocab, "vocab_size");
	GET(cfg, m->max_context, "max_position_embeddings");
	if (!m->layers || !m->hidden || !m->heads || !m->vocab)
		return -EINVAL;
	if (!m->kv_heads)
		m->kv_heads = m->heads;
	if (!m->head_dim)
		m->head_dim = m->hidden / m->heads;
	m->tie_embeddings = get_bool(cfg, "tie_word_embeddings", false);

	v = json_object_get(cfg, "model_type");
	if (json_is_string(v))
		snprintf(m->model_type, sizeof(m->model_type), "%s", json_string_value(v));
	/* Qwen2 has q/k/v biases without saying so; others say attention_bias */
	m->qkv_bias = get_bool(cfg, "attention_bias", !strncmp(m->model_type, "qwen2", 5));
	m->qk_norm = !strncmp(m->model_type, "qwen3", 5);

	m->dtype = KVT_DTYPE_BF16;
	v = json_object_get(cfg, "torch_dtype");
	if (!json_is_string(v))
		v = json_object_get(cfg, "dtype");
	if (json_is_string(v)) {
		int d = kvt_dtype_parse(json_string_value(v));
		if (d > 0)
			m->dtype = (enum kvt_dtype)d;
	}
	/* checkpoints shipped quantized (DeepSeek-V3: fp8 blocks) say so here */
	v = json_object_get(json_object_get(cfg, "quantization_config"), "quant_method");
	if (json_is_string(v) && !strcmp(json_string_value(v), "fp8"))
		m->dtype = KVT_DTYPE_FP8_E4M3;

	GET(cfg, m->experts, "num_experts", "n_routed_experts", "num_local_experts");
	GET(cfg, m->experts_per_tok, "num_experts_per_tok", "num_experts_per_token");
	GET(cfg, m->expert_intermediate, "moe_intermediate_size");
	if (m->experts && !m->expert_intermediate)
		m->expert_intermediate = m->intermediate; /* Mixtral */
	if (m->experts && !m->experts_per_tok)
		return -EINVAL;
	GET(cfg, shared_n, "n_shared_experts", "num_shared_experts");
	GET(cfg, m->shared_intermediate, "shared_expert_intermediate_size",
	    "moe_shared_expert_intermediate_size");
	if (!m->shared_intermediate && shared_n)
		m->shared_intermediate = shared_n * m->expert_intermediate;
	err = count_moe_layers(cfg, m);
	if (err)
		return err;

	GET(cfg, m->kv_lora_rank, "kv_lora_rank");
	GET(cfg, m->q_lora_rank, "q_lora_rank");
	GET(cfg, m->qk_rope_head_dim, "qk_rope_head_dim");
	GET(cfg, m->qk_nope_head_dim, "qk_nope_head_dim");
	GET(cfg, m->v_head_dim, "v_head_dim");
	GET(cfg, m->mtp_layers, "num_nextn_predict_layers");
	/* MLA: hidden / heads means nothing; a head's q.k width does */
	if (m->kv_lora_rank && !json_integer_value(json_object_get(cfg, "head_dim")))
		m->head_dim = m->qk_nope_head_dim + m->qk_rope_head_dim;
	if (m->kv_lora_rank && !m->v_head_dim)
		m->v_head_dim = m->head_dim;
	return 0;
}

int kvt_model_parse(const char *json, size_t len, const char *name, struct kvt_model *out)
{
	json_error_t jerr;
	json_t *cfg;
	int err;

	if (!json || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	cfg = json_loadb(json, len, 0, &jerr);
	if (!cfg)
		return -EINVAL;
	err = json_is_object(cfg) ? parse_obj(cfg, out) : -EINVAL;
	json_decref(cfg);
	if (err)
		return err;
	if (name)
		snprintf(out->name, sizeof(out->name), "%s", name);
	return 0;
}

const char *kvt_model_shipped(size_t i)
{
	for (size_t j = 0; kvt_model_embedded[j].name; j++)
		if (j == i)
			return kvt_model_embedded[j].name;
	return NULL;
}

/* "dir/Foo-7B.json" -> "Foo-7B"; "dir/Foo-7B/config.json" -> "Foo-7B" */
static void stem_of(const char *path, char *buf, size_t len)
{
	const char *base = strrchr(path, '/');
	size_t n;

	base = base ? base + 1 : path;
	if (!strcmp(base, "config.json") && base > path + 1) {
		const char *end = base - 1, *start = end;
		while (start > path && start[-1] != '/')
			start--;
		n = (size_t)(end - start);
		snprintf(buf, len, "%.*s", (int)n, start);
		return;
	}
	n = strlen(base);
	if (n > 5 && !strcmp(base + n - 5, ".json"))
		n -= 5;
	snprintf(buf, len, "%.*s", (int)n, base);
}

/* The shipped config a Hugging Face id names: "meta-llama/Llama-3.1-70B"
 * is Llama-3.1-70B, and an -Instruct (or -Chat, -it) variant has its base
 * model's shape. -1 when none. */
static int shipped_by_hub_id(const char *id)
{
	static const char *const variants[] = { "-Instruct", "-Chat", "-it" };
	const char *base = strrchr(id, '/');
	size_t n;

	if (!base || !base[1] || strchr(id, '/') != base)
		return -1; /* an id is ORG/NAME */
	base++;
	n = strlen(base);
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		size_t vl = strlen(variants[v]);

		if (n > vl && !strcasecmp(base + n - vl, variants[v])) {
			n -= vl;
			break;
		}
	}
	for (size_t i = 0; kvt_model_embedded[i].name; i++)
		if (strlen(kvt_model_embedded[i].name) == n &&
		    !strncasecmp(base, kvt_model_embedded[i].name, n))
			return (int)i;
	return -1;
}

int kvt_model_load(const char *name_or_path, struct kvt_model *out)
{
	char stem[KVT_MODEL_NAME_MAX], dirpath[4096];
	char *buf = NULL;
	size_t cap = 0, len = 0;
	struct stat st;
	FILE *f;
	int err;

	if (!name_or_path || !out)
		return -EINVAL;
	for (size_t i = 0; kvt_model_embedded[i].name; i++)
		if (!strcasecmp(name_or_path, kvt_model_embedded[i].name))
			return kvt_model_parse(kvt_model_embedded[i].json, kvt_model_embedded[i].len,
					       kvt_model_embedded[i].name, out);
	/* a model's directory (a downloaded snapshot) holds its config.json */
	if (stat(name_or_path, &st) == 0 && S_ISDIR(st.st_mode)) {
		if ((size_t)snprintf(dirpath, sizeof(dirpath), "%s/config.json", name_or_path) >=
		    sizeof(dirpath))
			return -ENAMETOOLONG;
		name_or_path = dirpath;
	}
	f = fopen(name_or_path, "rb");
	if (!f && (errno == ENOENT || errno == ENOTDIR)) {
		/* no such file: perhaps a Hugging Face id of a shipped model */
		int i = shipped_by_hub_id(name_or_path);

		if (i >= 0)
			return kvt_model_parse(kvt_model_embedded[i].json, kvt_model_embedded[i].len,
					       kvt_model_embedded[i].name, out);
		return -ENOENT;
	}
	if (!f)
		return -errno;
	for (;;) {
		size_t got;

		if (len == cap) {
			char *nb;
			/* a config.json is a few KiB; refuse anything absurd */
			if (cap >= (16u << 20)) {
				err = -EFBIG;
				goto out;
			}
			cap = cap ? cap * 2 : 16384;
			nb = realloc(buf, cap);
			if (!nb) {
				err = -ENOMEM;
				goto out;
			}
			buf = nb;
		}
		got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		err = -EIO;
		goto out;
	}
	stem_of(name_or_path, stem, sizeof(stem));
	err = kvt_model_parse(buf, len, stem, out);
out:
	free(buf);
	fclose(f);
	return err;
}
