/* SPDX-License-Identifier: Apache-2.0 */
/* Whole peer frames over a socket, with deadlines (sockio.h): the calls the
 * peer server, the peer client and the handshake share. */
#ifndef KVT_CLUSTER_PEER_IO_H
#define KVT_CLUSTER_PEER_IO_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/peer_proto.h"

/* Read one frame: its header (decoded, checked) and its payload into
 * buf[0..cap). Returns 0, -EMSGSIZE (payload over cap), the header's decode
 * error, or the socket error (-ETIMEDOUT, -ECONNRESET, ...). A frame that
 * fails to decode leaves the stream unusable. */
int kvt_peer_recv_frame(int fd, struct kvt_frame_hdr *h, uint8_t *buf, size_t cap,
			uint64_t deadline_ns);

/* Send w's bytes and empty it. Returns 0 or the socket error. */
int kvt_peer_send_wr(int fd, struct kvt_wr *w, uint64_t deadline_ns);

/* A request and its answer: kvt_peer_send_wr, then kvt_peer_recv_frame,
 * both by the deadline. */
int kvt_peer_exchange(int fd, struct kvt_wr *w, struct kvt_frame_hdr *h, uint8_t *buf,
		      size_t cap, uint64_t deadline_ns);

#endif /* KVT_CLUSTER_PEER_IO_H */
