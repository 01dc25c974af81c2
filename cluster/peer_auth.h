/* SPDX-License-Identifier: Apache-2.0 */
/* Peer authentication: both ends prove they know the cluster secret, with
 * HMAC-SHA256 over two fresh random challenges, before anything else crosses
 * the connection.
 *
 *   owner  -> reader  CHALLENGE  nonce_s, owner id
 *   reader -> owner   AUTH       nonce_c, reader id,
 *                                HMAC(secret, "kvtier-peer-1 client" | nonce_s | nonce_c | ids)
 *   owner  -> reader  AUTH reply HMAC(secret, "kvtier-peer-1 server" | nonce_s | nonce_c | ids)
 *                                (or -EACCES, and the owner closes)
 *
 * Each side's nonce makes a recorded exchange useless later, and the two
 * labels keep one side's proof from being reflected as the other's. MACs are
 * compared in constant time. The secret authenticates peers; it does not
 * encrypt or sign the frames that follow (a cluster network an attacker can
 * write to needs IPsec or WireGuard under it), though every block is still
 * checksummed end to end. */
#ifndef KVT_CLUSTER_PEER_AUTH_H
#define KVT_CLUSTER_PEER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/peer_proto.h"

#define KVT_PEER_SECRET_MIN 16
#define KVT_PEER_SECRET_MAX 1024

struct kvt_peer_secret {
	uint8_t bytes[KVT_PEER_SECRET_MAX];
	size_t len;
};

/* Use len bytes at p as the secret. Returns 0 or -EINVAL (shorter than
 * KVT_PEER_SECRET_MIN or longer than KVT_PEER_SECRET_MAX). */
int kvt_peer_secret_set(struct kvt_peer_secret *s, const void *p, size_t len);

/* Read the secret from a file (one trailing newline is dropped). Returns 0,
 * -EPERM when the file is readable by group or others (chmod 600), -EINVAL
 * for a secret of the wrong length, or the open/read error. */
int kvt_peer_secret_load(const char *path, struct kvt_peer_secret *s);

/* The proof of one side (server: the owner's) for this exchange. */
void kvt_peer_auth_mac(const struct kvt_peer_secret *s, bool server,
		       const uint8_t nonce_s[KVT_PEER_NONCE_BYTES],
		       const uint8_t nonce_c[KVT_PEER_NONCE_BYTES], const char *client_id,
		       const char *server_id, uint8_t out[KVT_PEER_MAC_BYTES]);

/* The owner's side on an accepted socket: send a CHALLENGE (offering
 * flags), check the AUTH, answer. Returns 0 with the reader's id in peer_id,
 * or -EACCES (wrong secret: refused and answered so), -EBADMSG/-EPROTO (not
 * the peer protocol), or the socket error. */
int kvt_peer_auth_server(int fd, const struct kvt_peer_secret *s, const char *self_id,
			 uint32_t flags, uint64_t deadline_ns, char peer_id[KVT_PEER_ID_MAX + 1]);

/* The owner's side in two steps, kvt_peer_auth_server's: send the
 * CHALLENGE (its nonce kept in nonce), so that a reader can answer before
 * anything else runs for its connection; then read the AUTH, check it and
 * answer. Return as kvt_peer_auth_server (the first, -EIO or the socket
 * error). */
int kvt_peer_auth_challenge(int fd, const char *self_id, uint32_t flags, uint64_t deadline_ns,
			    uint8_t nonce[KVT_PEER_NONCE_BYTES]);
int kvt_peer_auth_finish(int fd, const struct kvt_peer_secret *s, const char *self_id,
			 const uint8_t nonce[KVT_PEER_NONCE_BYTES], uint64_t deadline_ns,
			 char peer_id[KVT_PEER_ID_MAX + 1]);

/* The reader's side on a connected socket. expect_id, when not NULL, is the
 * node the caller means to reach. Returns 0 with the owner's id and flags,
 * or -EACCES (refused, or the owner's proof is wrong: it does not know the
 * secret), -ESTALE (another node answers at that address), -EPROTONOSUPPORT,
 * -EBADMSG/-EPROTO, or the socket error. */
int kvt_peer_auth_client(int fd, const struct kvt_peer_secret *s, const char *self_id,
			 const char *expect_id, uint64_t deadline_ns,
			 char server_id[KVT_PEER_ID_MAX + 1], uint32_t *flags);

#endif /* KVT_CLUSTER_PEER_AUTH_H */
