/* SPDX-License-Identifier: Apache-2.0 */
/* Internals the client library's files share (client.c: the connection and
 * the calls; client_region.c: registering engine memory). */
#ifndef KVT_TRANSPORT_CLIENT_INT_H
#define KVT_TRANSPORT_CLIENT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/client.h"
#include "transport/proto.h"

/* A request waiting for its reply. */
struct call {
	uint64_t id;
	bool done;
	struct kvt_frame_hdr hdr;
	uint8_t *payload; /* malloc'd, hdr.len bytes */
	struct call *next;
};

uint64_t kvt_client_new_id(struct kvt_client *c);

/* Send the frame in w (its id k->id, enc_err the encoder's result) with
 * n_fds passed fds on its first byte, wait for its reply, free w. Returns
 * the reply's status; the payload is left in k (the caller frees it), for
 * the caller's decoder when the status is 0 and for the detail of an error
 * that carries one. */
int kvt_client_roundtrip(struct kvt_client *c, struct kvt_wr *w, int enc_err, struct call *k,
			 const int *fds, int n_fds, uint16_t op);

#endif /* KVT_TRANSPORT_CLIENT_INT_H */
