/* SPDX-License-Identifier: Apache-2.0 */
/* The directory's records as they are stored: a node's membership record
 * (JSON, readable with redis-cli) and a block hint: the list of the key's
 * holders, "NODE=EPOCH:TIER,NODE=EPOCH:TIER".
 * Decoding is strict: a record another version or a stray writer left is
 * rejected whole, never half believed. */
#ifndef KVT_CLUSTER_DIR_RECORD_H
#define KVT_CLUSTER_DIR_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/directory.h"
#include "cluster/peer_proto.h" /* kvt_node_id_valid */

#define KVT_NODE_RECORD_VERSION 1
#define KVT_HINT_VALUE_MAX 32

/* Check a node record for publishing: id, address, transports, RDMA and
 * region fields consistent. Returns 0 or -EINVAL. */
int kvt_node_info_check(const struct kvt_node_info *n);

/* Encode n as a JSON object (a malloc'd string the caller frees) with
 * "v" (KVT_NODE_RECORD_VERSION), "id", "epoch", "addr", "transports"
 * (["tcp", "rdma"]), and with RDMA "rdma" {"device", "port", "gid" (hex),
 * "lid"} and "region" {"base", "bytes", "mrs": [{"off", "len", "rkey"}]}.
 * Returns NULL on -ENOMEM or an invalid record. */
char *kvt_node_record_encode(const struct kvt_node_info *n);

/* Decode a record of len bytes. Returns 0, or -EBADMSG (not JSON, another
 * version, a missing or mistyped field, a value out of range). Unknown
 * fields are ignored, so a newer node may add some. */
int kvt_node_record_decode(const char *json, size_t len, struct kvt_node_info *out);

/* A hint's value: "EPOCH:TIER" with TIER "dram" or "ssd" and 0 < EPOCH <
 * 2^63, into buf of len >= KVT_HINT_VALUE_MAX. Returns the length written,
 * or -EINVAL. */
int kvt_hint_value_encode(uint64_t epoch, uint8_t tier, char *buf, size_t len);

/* Parse a hint's value. Returns 0 or -EBADMSG. */
int kvt_hint_value_decode(const char *s, size_t len, uint64_t *epoch, uint8_t *tier);

/* Most holders a hint lists (the writers' script keeps the newest). */
#define KVT_HINT_MAX_HOLDERS 8

/* One holder in a hint's list; node points into the parsed string. */
struct kvt_hint_holder {
	const char *node;
	size_t node_len;
	uint64_t epoch;
	uint8_t tier;
};

/* Parse a hint list "NODE=EPOCH:TIER[,NODE=EPOCH:TIER...]" of len bytes into
 * out[0..max). Returns the number of holders, or -EBADMSG when any entry is
 * malformed (a node id that is not one, a bad value, an empty entry, more
 * than max). */
int kvt_hint_list_decode(const char *s, size_t len, struct kvt_hint_holder *out, int max);

/* The 32 lowercase hex digits of key, NUL-terminated (out >= 33 bytes). */
void kvt_key_hex(const struct kvt_key *key, char *out);

#endif /* KVT_CLUSTER_DIR_RECORD_H */
