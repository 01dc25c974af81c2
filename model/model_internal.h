/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of model/: the configs built into the library. */
#ifndef KVT_MODEL_INTERNAL_H
#define KVT_MODEL_INTERNAL_H

#include <stddef.h>

/* One shipped config.json, verbatim; the table ends with a NULL name. */
struct kvt_model_embedded {
	const char *name;
	const char *json;
	size_t len;
};

extern const struct kvt_model_embedded kvt_model_embedded[];

#endif /* KVT_MODEL_INTERNAL_H */
