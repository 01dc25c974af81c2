/* STATS from a cmocka test: the daemon's JSON, with a failed request or a
 * missing counter failing the test. Include after cmocka.h. */
#ifndef KVT_TESTS_SIDECAR_STATS_CHECKED_H
#define KVT_TESTS_SIDECAR_STATS_CHECKED_H

#include <stdlib.h>

#include <jansson.h>

#include "kvtier/client.h"

/* The daemon's STATS as JSON (the caller json_decref()s it). */
static inline json_t *kvtd_stats(struct kvt_client *c)
{
	char *text = NULL;
	json_t *root;

	assert_int_equal(kvt_client_stats(c, &text), 0);
	root = json_loads(text, 0, NULL);
	assert_non_null(root);
	free(text);
	return root;
}

/* The integer root.obj[.sub].key. */
static inline long long kvtd_stat(json_t *root, const char *obj, const char *sub,
					  const char *key)
{
	json_t *o = json_object_get(root, obj), *v;

	if (sub)
		o = json_object_get(o, sub);
	v = json_object_get(o, key);
	if (!json_is_integer(v))
		fail_msg("STATS has no integer %s%s%s.%s", obj, sub ? "." : "", sub ? sub : "", key);
	return json_integer_value(v);
}

#endif
