/* SPDX-License-Identifier: Apache-2.0 */
/* Whole peer frames over a socket (see peer_io.h). */
#include "cluster/peer_io.h"

#include <errno.h>

#include "transport/sockio.h"

int kvt_peer_recv_frame(int fd, struct kvt_frame_hdr *h, uint8_t *buf, size_t cap,
			uint64_t deadline_ns)
{
	uint8_t hb[KVT_PROTO_HDR_BYTES];
	int err;

	err = kvt_sock_recv(fd, hb, sizeof(hb), deadline_ns);
	if (err)
		return err;
	err = kvt_peer_hdr_decode(hb, sizeof(hb), h);
	if (err)
		return err;
	if (h->len > cap)
		return -EMSGSIZE;
	return h->len ? kvt_sock_recv(fd, buf, h->len, deadline_ns) : 0;
}

int kvt_peer_send_wr(int fd, struct kvt_wr *w, uint64_t deadline_ns)
{
	int err = kvt_sock_send(fd, w->buf, w->len, deadline_ns);

	w->len = 0;
	return err;
}

int kvt_peer_exchange(int fd, struct kvt_wr *w, struct kvt_frame_hdr *h, uint8_t *buf,
		      size_t cap, uint64_t deadline_ns)
{
	int err = kvt_peer_send_wr(fd, w, deadline_ns);

	return err ? err : kvt_peer_recv_frame(fd, h, buf, cap, deadline_ns);
}
