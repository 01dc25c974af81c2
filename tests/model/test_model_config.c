/* SPDX-License-Identifier: Apache-2.0 */
/* Reading config.json: the field names of each family, fallbacks, nesting,
 * and clear errors for what is not a model config. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "helpers.h"
#include "kvtier/model.h"

static int parse(const char *json, struct kvt_model *m)
{
	return kvt_model_parse(json, strlen(json), "t", m);
}

static void every_shipped_config_parses(void **state)
{
	const char *name;
	size_t n = 0;

	for (size_t i = 0; (name = kvt_model_shipped(i)); i++, n++) {
		struct kvt_model m;

		assert_int_equal(kvt_model_load(name, &m), 0);
		assert_string_equal(m.name, name);
		assert_true(m.layers && m.hidden && m.heads && m.kv_heads && m.head_dim && m.vocab);
		assert_true(kvt_model_kv_bytes_per_token(&m, KVT_DTYPE_BF16) > 0);
		assert_true(kvt_model_params_active(&m) <= kvt_model_params_total(&m));
	}
	assert_true(n >= 11);
}

static void fields_of_each_family(void **state)
{
	struct kvt_model m;

	/* Llama-3.1: no head_dim, so hidden / heads */
	assert_int_equal(kvt_model_load("llama-3.1-70b", &m), 0); /* case-insensitive */
	assert_int_equal(m.head_dim, 128);
	assert_int_equal(m.kv_heads, 8);
	assert_int_equal(m.max_context, 131072);
	assert_false(m.tie_embeddings);
	assert_false(m.qkv_bias);
	assert_int_equal(m.dtype, KVT_DTYPE_BF16);
	/* Qwen2 has q/k/v biases though its config does not say so */
	assert_int_equal(kvt_model_load("Qwen2.5-7B", &m), 0);
	assert_true(m.qkv_bias);
	assert_int_equal(m.kv_heads, 4);
	/* Qwen3 declares head_dim, which is not hidden / heads for the 32B */
	assert_int_equal(kvt_model_load("Qwen3-32B", &m), 0);
	assert_int_equal(m.head_dim, 128);
	assert_int_equal(m.hidden / m.heads, 80);
	assert_true(m.qk_norm);
	/* Qwen-MoE names */
	assert_int_equal(kvt_model_load("Qwen3-30B-A3B", &m), 0);
	assert_int_equal(m.experts, 128);
	assert_int_equal(m.experts_per_tok, 8);
	assert_int_equal(m.expert_intermediate, 768);
	assert_int_equal(m.shared_intermediate, 0);
	/* DeepSeek names, MLA, MTP */
	assert_int_equal(kvt_model_load("DeepSeek-V3", &m), 0);
	assert_int_equal(m.experts, 256);
	assert_int_equal(m.q_lora_rank, 1536);
	assert_int_equal(m.v_head_dim, 128);
	assert_int_equal(m.mtp_layers, 1);
	assert_int_equal(m.head_dim, 192); /* q.k width: 128 nope + 64 rope */
}

static void mixtral_and_fallbacks(void **state)
{
	struct kvt_model m;

	/* Mixtral: num_local_experts, experts as wide as intermediate_size */
	assert_int_equal(parse("{\"num_hidden_layers\":32,\"hidden_size\":4096,"
			       "\"num_attention_heads\":32,\"num_key_value_heads\":8,"
			       "\"intermediate_size\":14336,\"vocab_size\":32000,"
			       "\"num_local_experts\":8,\"num_experts_per_tok\":2,"
			       "\"torch_dtype\":\"float16\"}", &m), 0);
	assert_int_equal(m.experts, 8);
	assert_int_equal(m.expert_intermediate, 14336);
	assert_int_equal(m.moe_layers, 32);
	assert_int_equal(m.dtype, KVT_DTYPE_FP16);
	/* Mixtral-8x7B: 46.7B total, 12.9B active */
	assert_true(kvt_model_params_total(&m) > 46.6e9 && kvt_model_params_total(&m) < 46.8e9);
	assert_true(kvt_model_params_active(&m) > 12.8e9 && kvt_model_params_active(&m) < 13.0e9);
	/* no num_key_value_heads: multi-head attention; null head_dim ignored */
	assert_int_equal(parse("{\"num_hidden_layers\":2,\"hidden_size\":256,"
			       "\"num_attention_heads\":4,\"head_dim\":null,\"vocab_size\":100,"
			       "\"tie_word_embeddings\":true}", &m), 0);
	assert_int_equal(m.kv_heads, 4);
	assert_int_equal(m.head_dim, 64);
	assert_true(m.tie_embeddings);
	/* multimodal: the language model under text_config */
	assert_int_equal(parse("{\"model_type\":\"vl\",\"text_config\":{\"num_hidden_layers\":3,"
			       "\"hidden_size\":128,\"num_attention_heads\":2,\"vocab_size\":50}}",
			       &m), 0);
	assert_int_equal(m.layers, 3);
	/* mlp_only_layers and decoder_sparse_step pick the MoE layers */
	assert_int_equal(parse("{\"num_hidden_layers\":8,\"hidden_size\":64,"
			       "\"num_attention_heads\":2,\"vocab_size\":50,\"num_experts\":4,"
			       "\"num_experts_per_tok\":1,\"moe_intermediate_size\":32,"
			       "\"decoder_sparse_step\":2,\"mlp_only_layers\":[3]}", &m), 0);
	assert_int_equal(m.moe_layers, 3); /* layers 1, 5, 7 */
	assert_int_equal(m.dense_layers, 5);
}

static void bad_configs_are_errors(void **state)
{
	struct kvt_model m;

	assert_int_equal(parse("{", &m), -EINVAL);
	assert_int_equal(parse("[1,2]", &m), -EINVAL);
	assert_int_equal(parse("{\"hidden_size\":64}", &m), -EINVAL);
	assert_int_equal(parse("{\"num_hidden_layers\":\"32\",\"hidden_size\":64,"
			       "\"num_attention_heads\":2,\"vocab_size\":5}", &m), -EINVAL);
	assert_int_equal(parse("{\"num_hidden_layers\":-1,\"hidden_size\":64,"
			       "\"num_attention_heads\":2,\"vocab_size\":5}", &m), -ERANGE);
	assert_int_equal(parse("{\"num_hidden_layers\":99999999999,\"hidden_size\":64,"
			       "\"num_attention_heads\":2,\"vocab_size\":5}", &m), -ERANGE);
	/* experts without a routing width */
	assert_int_equal(parse("{\"num_hidden_layers\":2,\"hidden_size\":64,"
			       "\"num_attention_heads\":2,\"vocab_size\":5,\"num_experts\":4}", &m),
			 -EINVAL);
	assert_int_equal(kvt_model_parse(NULL, 0, NULL, &m), -EINVAL);
	assert_int_equal(kvt_model_load("no-such-model-or-file", &m), -ENOENT);
}

static void loads_a_config_file_by_path(void **state)
{
	char *dir = kvt_test_mkdtemp("model_config"), *sub, *path;
	struct kvt_model m;
	FILE *f;

	assert_non_null(dir);
	assert_true(asprintf(&sub, "%s/My-Model", dir) > 0);
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_true(asprintf(&path, "%s/config.json", sub) > 0);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"num_hidden_layers\":4,\"hidden_size\":512,\"num_attention_heads\":8,"
	      "\"num_key_value_heads\":2,\"vocab_size\":1000}", f);
	fclose(f);
	assert_int_equal(kvt_model_load(path, &m), 0);
	assert_string_equal(m.name, "My-Model"); /* named for its folder */
	memset(&m, 0, sizeof(m));
	assert_int_equal(kvt_model_load(sub, &m), 0); /* the folder itself */
	assert_string_equal(m.name, "My-Model");
	assert_int_equal(m.kv_heads, 2);
	assert_int_equal(kvt_model_load(dir, &m), -ENOENT); /* no config.json there */
	assert_int_equal(kvt_model_kv_bytes_per_token(&m, KVT_DTYPE_BF16), 2 * 4 * 2 * 64 * 2);
	free(path);
	free(sub);
	kvt_test_rmdir(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_shipped_config_parses),
		cmocka_unit_test(fields_of_each_family),
		cmocka_unit_test(mixtral_and_fallbacks),
		cmocka_unit_test(bad_configs_are_errors),
		cmocka_unit_test(loads_a_config_file_by_path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
