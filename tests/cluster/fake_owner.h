/* SPDX-License-Identifier: Apache-2.0 */
/* A misbehaving owner for the peer transport's tests: a loopback listener
 * whose one connection a thread of the test serves, through the real
 * handshake and frame decoders, then answers as the test wants (wrong
 * bytes, a close, silence). */
#ifndef KVT_TESTS_CLUSTER_FAKE_OWNER_H
#define KVT_TESTS_CLUSTER_FAKE_OWNER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/peer_auth.h"
#include "cluster/peer_proto.h"
#include "transport/wire.h"

struct kvt_fake_owner {
	int lfd;
	int port;
	char addr[64];            /* "127.0.0.1:PORT" */
	pthread_t th;
	int stop_pipe[2];
};

/* Listen on 127.0.0.1 (a free port) and run fn(arg) on a thread. */
void kvt_fake_owner_start(struct kvt_fake_owner *o, void *(*fn)(void *), void *arg);

/* Accept the first connection (waiting up to 5 s), answer the handshake as
 * node id with secret s, and read one GET into *h and *q (buf: room for
 * KVT_PROTO_MAX_PAYLOAD bytes, which q points into). Returns the
 * connection (the caller closes it), or -1. */
int kvt_fake_owner_get(struct kvt_fake_owner *o, const struct kvt_peer_secret *s, const char *id,
		       uint8_t *buf, struct kvt_frame_hdr *h, struct kvt_peer_keys_req *q);

/* Send block `index` of request id: its frame, data[0..len) and the XXH3
 * trailer of good[0..len) (data itself, or what data should have been). */
void kvt_fake_owner_send_block(int fd, struct kvt_wr *w, uint64_t id, uint32_t index,
			       const struct kvt_key *key, const void *data, const void *good,
			       size_t len);

/* Send data[0..len) one byte every every_ms, until all is sent, the reader
 * hangs up, or kvt_fake_owner_stop. Returns the bytes sent. */
size_t kvt_fake_owner_trickle(struct kvt_fake_owner *o, int fd, const void *data, size_t len,
			      unsigned every_ms);

/* A peer that trickles: every connection (up to KVT_FAKE_TRICKLE_CONNS) is
 * served on a thread of its own through the handshake and one GET, whose
 * first block's frame is sent and then its bytes one every every_ms. Start
 * with kvt_fake_owner_start(&t->fo, kvt_fake_trickler_main, t). */
#define KVT_FAKE_TRICKLE_CONNS 64

struct kvt_fake_trickler {
	struct kvt_fake_owner fo;
	const struct kvt_peer_secret *secret;
	const char *id;            /* the node id it answers as */
	unsigned every_ms;
	pthread_t conn_th[KVT_FAKE_TRICKLE_CONNS];
	int conn_fd[KVT_FAKE_TRICKLE_CONNS];
	unsigned conns;            /* accepted (atomic) */
	unsigned gets;             /* GETs read (atomic) */
};

void *kvt_fake_trickler_main(void *arg);

/* Wait, connected and saying nothing, until kvt_fake_owner_stop. */
void kvt_fake_owner_idle(struct kvt_fake_owner *o);

/* End the idle wait, join the thread, close the listener. */
void kvt_fake_owner_stop(struct kvt_fake_owner *o);

#endif /* KVT_TESTS_CLUSTER_FAKE_OWNER_H */
