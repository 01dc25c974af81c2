/* SPDX-License-Identifier: Apache-2.0 */
/* The small shared vocabulary: dtypes, tier names, error messages, the
 * namespace descriptor's defaults. */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "kvtier/types.h"
#include "util/opts.h"

static const struct kvt_ns_desc ns_desc_defaults = {
	.size = sizeof(struct kvt_ns_desc),
	.layout = KVT_LAYOUT_PAGED_KV,
	.dtype = KVT_DTYPE_BF16,
	.tp_size = 1,
};

const char *kvt_version(void)
{
	return KVT_VERSION_STRING;
}

void kvt_ns_desc_init(struct kvt_ns_desc *desc, size_t size_bytes)
{
	kvt_opts_init(desc, size_bytes, &ns_desc_defaults, sizeof(ns_desc_defaults));
}

static const struct {
	enum kvt_dtype dtype;
	const char *name;
	size_t bytes;
} dtypes[] = {
	{ KVT_DTYPE_BF16, "bf16", 2 },
	{ KVT_DTYPE_FP16, "fp16", 2 },
	{ KVT_DTYPE_FP32, "fp32", 4 },
	{ KVT_DTYPE_FP8_E4M3, "fp8_e4m3", 1 },
	{ KVT_DTYPE_FP8_E5M2, "fp8_e5m2", 1 },
	{ KVT_DTYPE_INT8, "int8", 1 },
};

#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

size_t kvt_dtype_bytes(enum kvt_dtype dtype)
{
	for (size_t i = 0; i < N_DTYPES; i++)
		if (dtypes[i].dtype == dtype)
			return dtypes[i].bytes;
	return 0;
}

const char *kvt_dtype_name(enum kvt_dtype dtype)
{
	for (size_t i = 0; i < N_DTYPES; i++)
		if (dtypes[i].dtype == dtype)
			return dtypes[i].name;
	return NULL;
}

int kvt_dtype_parse(const char *name)
{
	static const struct {
		const char *alias;
		enum kvt_dtype dtype;
	} aliases[] = {
		{ "bfloat16", KVT_DTYPE_BF16 }, { "float16", KVT_DTYPE_FP16 },
		{ "half", KVT_DTYPE_FP16 },     { "float32", KVT_DTYPE_FP32 },
		{ "float", KVT_DTYPE_FP32 },    { "fp8", KVT_DTYPE_FP8_E4M3 },
		{ "float8_e4m3fn", KVT_DTYPE_FP8_E4M3 }, { "float8_e5m2", KVT_DTYPE_FP8_E5M2 },
	};

	if (!name)
		return -EINVAL;
	for (size_t i = 0; i < N_DTYPES; i++)
		if (!strcasecmp(name, dtypes[i].name))
			return dtypes[i].dtype;
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (!strcasecmp(name, aliases[i].alias))
			return aliases[i].dtype;
	return -EINVAL;
}

const char *kvt_tier_name(enum kvt_tier tier)
{
	switch (tier) {
	case KVT_TIER_HBM: return "hbm";
	case KVT_TIER_DRAM: return "dram";
	case KVT_TIER_SSD: return "ssd";
	case KVT_TIER_REMOTE: return "remote";
	default: return "none";
	}
}

const char *kvt_strerror(int err)
{
	const char *msg;

	if (err < 0)
		err = -err;
	if (err == 0)
		return "Success";
	/* strerrordesc_np is thread-safe and returns a static string (glibc >= 2.32) */
	msg = strerrordesc_np(err);
	return msg ? msg : "Unknown error";
}
