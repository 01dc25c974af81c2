/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol frames over a raw socket, for tests that speak to kvtierd as an
 * old or hand-written client would. Include after cmocka.h. */
#ifndef KVT_TESTS_SIDECAR_RAW_FRAMES_H
#define KVT_TESTS_SIDECAR_RAW_FRAMES_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "transport/proto.h"

/* Read one frame: header and payload (malloc'd, the caller frees it). */
static inline void raw_read(int fd, struct kvt_frame_hdr *h, uint8_t **payload)
{
	uint8_t hb[KVT_PROTO_HDR_BYTES];

	assert_int_equal(recv(fd, hb, sizeof(hb), MSG_WAITALL), (ssize_t)sizeof(hb));
	assert_int_equal(kvt_proto_hdr_decode(hb, sizeof(hb), h), 0);
	*payload = malloc(h->len + 1);
	if (h->len)
		assert_int_equal(recv(fd, *payload, h->len, MSG_WAITALL), (ssize_t)h->len);
}

/* Send what w holds and empty it. */
static inline void raw_send(int fd, struct kvt_wr *w)
{
	assert_int_equal(send(fd, w->buf, w->len, MSG_NOSIGNAL), (ssize_t)w->len);
	w->len = 0;
}

#endif
