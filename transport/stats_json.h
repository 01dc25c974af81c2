/* SPDX-License-Identifier: Apache-2.0 */
/* Counters into the JSON objects of STATS replies. A section of plain
 * counts is written as a table of (key, value) pairs set by one call, so the
 * code reads as the list of keys it produces. */
#ifndef KVT_TRANSPORT_STATS_JSON_H
#define KVT_TRANSPORT_STATS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct kvt_json_count {
	const char *key;
	uint64_t value;
};

/* Set key to the integer value in o. */
static inline void kvt_json_set_count(json_t *o, const char *key, uint64_t value)
{
	json_object_set_new(o, key, json_integer((json_int_t)value));
}

/* Set every count of table (n entries) in o. */
static inline void kvt_json_set_counts(json_t *o, const struct kvt_json_count *table, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kvt_json_set_count(o, table[i].key, table[i].value);
}

/* kvt_json_set_counts for a table that is an array in scope. */
#define KVT_JSON_SET_COUNTS(o, table) \
	kvt_json_set_counts((o), (table), sizeof(table) / sizeof((table)[0]))

#endif /* KVT_TRANSPORT_STATS_JSON_H */
