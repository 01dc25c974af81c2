/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the tests of a kvtierd whose SSD tier spans several directories
 * (--ssd-dir): a chain of blocks saved and loaded back, and the SSD tier's
 * per-device rows of STATS. Include after cmocka.h. */
#ifndef KVT_TESTS_APP_SSD_DEVICES_H
#define KVT_TESTS_APP_SSD_DEVICES_H

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "daemon_proc.h"
#include "stats_checked.h"

#define DEV_BLOCKS 128

/* Save blocks [0, DEV_BLOCKS) of e's chain from its pages (bytes of seed + i). */
static inline void dev_save_all(struct kvtd_chain *e, uint64_t seed)
{
	uint32_t pages[DEV_BLOCKS];
	uint64_t ticket;

	for (uint32_t i = 0; i < DEV_BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&e->m, i, seed + i);
	}
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region, NULL, e->keys, pages,
					 DEV_BLOCKS, &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), DEV_BLOCKS);
}

/* Load every block the daemon still finds, one LOAD each: how many loaded;
 * each that loads must hold its own bytes (a wrong byte fails the test). */
static inline int dev_load_present(struct kvtd_chain *e, uint64_t seed)
{
	int loaded = 0;

	for (uint32_t i = 0; i < DEV_BLOCKS; i++) {
		uint32_t page = i;
		uint64_t ticket;

		if (kvt_client_lookup(e->c, &e->ns, &e->keys[i], 1, NULL) != 1)
			continue;
		engine_page_fill(&e->m, page, 0);
		assert_int_equal(kvt_client_load(e->c, &e->ns, (uint32_t)e->m.region, &e->keys[i],
						 &page, 1, &ticket), 0);
		if (kvt_client_wait(e->c, ticket, 60000) != 1)
			continue; /* a miss, never data */
		if (engine_page_check(&e->m, page, seed + i))
			fail_msg("block %u: wrong bytes", i);
		loaded++;
	}
	return loaded;
}

/* tiers.ssd.devices[d].key of STATS: an integer, or a string's first char
 * compared by the caller through dev_state. */
static inline long long dev_stat(struct kvt_client *c, size_t d, const char *key)
{
	json_t *root = kvtd_stats(c), *v;
	long long n;

	v = json_object_get(json_array_get(json_object_get(json_object_get(json_object_get(root,
		"tiers"), "ssd"), "devices"), d), key);
	if (!json_is_integer(v))
		fail_msg("STATS has no tiers.ssd.devices[%zu].%s", d, key);
	n = json_integer_value(v);
	json_decref(root);
	return n;
}

/* Whether tiers.ssd.devices[d].state is state. */
static inline bool dev_state_is(struct kvt_client *c, size_t d, const char *state)
{
	json_t *root = kvtd_stats(c), *v;
	bool is;

	v = json_object_get(json_array_get(json_object_get(json_object_get(json_object_get(root,
		"tiers"), "ssd"), "devices"), d), "state");
	is = json_is_string(v) && !strcmp(json_string_value(v), state);
	if (!is)
		fprintf(stderr, "device %zu: state %s, not %s\n", d,
			json_is_string(v) ? json_string_value(v) : "(none)", state);
	json_decref(root);
	return is;
}

#endif /* KVT_TESTS_APP_SSD_DEVICES_H */
