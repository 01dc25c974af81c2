/* SPDX-License-Identifier: Apache-2.0 */
/* STATS from a cmocka test: the daemon's JSON, with a failed request or a
 * missing counter failing the test. Include after cmocka.h. */
#ifndef KVT_TESTS_SIDECAR_STATS_CHECKED_H
#define KVT_TESTS_SIDECAR_STATS_CHECKED_H

#include <stdlib.h>

#include <jansson.h>

#include "helpers.h"
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

/* A STATS counter: root.obj[.sub].key. */
struct kvtd_stat_path {
	const char *obj, *sub, *key;
};

/* STATS once the daemon is still: each counter of paths[0..n) the same
 * twice, 100 ms apart (20 s at most, else the test fails). */
static inline json_t *kvtd_settled_stats(struct kvt_client *c, const struct kvtd_stat_path *paths,
					 size_t n)
{
	for (int i = 0; i < 200; i++) {
		json_t *a = kvtd_stats(c), *b;
		size_t k = 0;

		kvt_test_sleep_ms(100);
		b = kvtd_stats(c);
		while (k < n && kvtd_stat(a, paths[k].obj, paths[k].sub, paths[k].key) ==
					kvtd_stat(b, paths[k].obj, paths[k].sub, paths[k].key))
			k++;
		json_decref(a);
		if (k == n)
			return b;
		json_decref(b);
	}
	fail_msg("the daemon's counters did not settle in 20 s");
	return NULL;
}

#endif
