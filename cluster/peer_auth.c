/* SPDX-License-Identifier: Apache-2.0 */
/* Peer authentication with the cluster secret (see peer_auth.h). */
#include "cluster/peer_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "cluster/peer_io.h"
#include "transport/sockio.h"

int kvt_peer_secret_set(struct kvt_peer_secret *s, const void *p, size_t len)
{
	if (!p || len < KVT_PEER_SECRET_MIN || len > KVT_PEER_SECRET_MAX)
		return -EINVAL;
	memcpy(s->bytes, p, len);
	s->len = len;
	return 0;
}

int kvt_peer_secret_load(const char *path, struct kvt_peer_secret *s)
{
	uint8_t buf[KVT_PEER_SECRET_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t len = 0;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		err = -EPERM;
		goto out;
	}
	while (len < sizeof(buf) && (n = read(fd, buf + len, sizeof(buf) - len)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			goto out;
		}
		len += (size_t)n;
	}
	if (len && buf[len - 1] == '\n')
		len--;
	err = kvt_peer_secret_set(s, buf, len);
out:
	OPENSSL_cleanse(buf, sizeof(buf));
	close(fd);
	return err;
}

void kvt_peer_auth_mac(const struct kvt_peer_secret *s, bool server,
		       const uint8_t nonce_s[KVT_PEER_NONCE_BYTES],
		       const uint8_t nonce_c[KVT_PEER_NONCE_BYTES], const char *client_id,
		       const char *server_id, uint8_t out[KVT_PEER_MAC_BYTES])
{
	static const char lc[] = "kvtier-peer-1 client", ls[] = "kvtier-peer-1 server";
	uint8_t msg[32 + 2 * KVT_PEER_NONCE_BYTES + 2 * (1 + KVT_PEER_ID_MAX)];
	size_t n = 0, lc_len = strlen(client_id), ls_len = strlen(server_id);
	unsigned out_len = KVT_PEER_MAC_BYTES;

	memcpy(msg, server ? ls : lc, sizeof(lc) - 1);
	n += sizeof(lc) - 1;
	memcpy(msg + n, nonce_s, KVT_PEER_NONCE_BYTES);
	n += KVT_PEER_NONCE_BYTES;
	memcpy(msg + n, nonce_c, KVT_PEER_NONCE_BYTES);
	n += KVT_PEER_NONCE_BYTES;
	/* length-prefixed ids, so no two id pairs give the same message */
	msg[n++] = (uint8_t)lc_len;
	memcpy(msg + n, client_id, lc_len);
	n += lc_len;
	msg[n++] = (uint8_t)ls_len;
	memcpy(msg + n, server_id, ls_len);
	n += ls_len;
	HMAC(EVP_sha256(), s->bytes, (int)s->len, msg, n, out, &out_len);
}

int kvt_peer_auth_challenge(int fd, const char *self_id, uint32_t flags, uint64_t deadline_ns,
			    uint8_t nonce[KVT_PEER_NONCE_BYTES])
{
	struct kvt_peer_challenge c = { .min_version = KVT_PEER_VERSION,
					.max_version = KVT_PEER_VERSION, .flags = flags };
	struct kvt_wr w;
	int err;

	kvt_wr_init(&w);
	snprintf(c.id, sizeof(c.id), "%s", self_id);
	if (RAND_bytes(c.nonce, sizeof(c.nonce)) != 1) {
		err = -EIO;
		goto out;
	}
	err = kvt_peer_enc_challenge(&w, &c);
	if (!err)
		err = kvt_peer_send_wr(fd, &w, deadline_ns);
	if (!err)
		memcpy(nonce, c.nonce, sizeof(c.nonce));
out:
	kvt_wr_free(&w);
	return err;
}

int kvt_peer_auth_finish(int fd, const struct kvt_peer_secret *s, const char *self_id,
			 const uint8_t nonce[KVT_PEER_NONCE_BYTES], uint64_t deadline_ns,
			 char peer_id[KVT_PEER_ID_MAX + 1])
{
	struct kvt_peer_auth a;
	struct kvt_frame_hdr h;
	uint8_t buf[256], mac[KVT_PEER_MAC_BYTES];
	struct kvt_wr w;
	int err;

	kvt_wr_init(&w);
	err = kvt_peer_recv_frame(fd, &h, buf, sizeof(buf), deadline_ns);
	if (err)
		goto out;
	if (h.op != KVT_PEER_AUTH || h.status != 0 || kvt_peer_dec_auth(buf, h.len, &a)) {
		err = -EBADMSG;
		goto out;
	}
	kvt_peer_auth_mac(s, false, nonce, a.nonce, a.id, self_id, mac);
	if (CRYPTO_memcmp(mac, a.mac, sizeof(mac)) != 0) {
		kvt_peer_enc_auth_rep(&w, -EACCES, NULL);
		kvt_peer_send_wr(fd, &w, deadline_ns);
		err = -EACCES;
		goto out;
	}
	kvt_peer_auth_mac(s, true, nonce, a.nonce, a.id, self_id, mac);
	err = kvt_peer_enc_auth_rep(&w, 0, mac);
	if (!err)
		err = kvt_peer_send_wr(fd, &w, deadline_ns);
	if (!err)
		memcpy(peer_id, a.id, sizeof(a.id));
out:
	OPENSSL_cleanse(mac, sizeof(mac));
	kvt_wr_free(&w);
	return err;
}

int kvt_peer_auth_server(int fd, const struct kvt_peer_secret *s, const char *self_id,
			 uint32_t flags, uint64_t deadline_ns, char peer_id[KVT_PEER_ID_MAX + 1])
{
	uint8_t nonce[KVT_PEER_NONCE_BYTES];
	int err = kvt_peer_auth_challenge(fd, self_id, flags, deadline_ns, nonce);

	return err ? err : kvt_peer_auth_finish(fd, s, self_id, nonce, deadline_ns, peer_id);
}

int kvt_peer_auth_client(int fd, const struct kvt_peer_secret *s, const char *self_id,
			 const char *expect_id, uint64_t deadline_ns,
			 char server_id[KVT_PEER_ID_MAX + 1], uint32_t *flags)
{
	struct kvt_peer_challenge c;
	struct kvt_peer_auth a = { 0 };
	struct kvt_frame_hdr h;
	uint8_t buf[256], mac[KVT_PEER_MAC_BYTES], theirs[KVT_PEER_MAC_BYTES];
	struct kvt_wr w;
	int err;

	kvt_wr_init(&w);
	err = kvt_peer_recv_frame(fd, &h, buf, sizeof(buf), deadline_ns);
	if (err)
		goto out;
	if (h.op != KVT_PEER_CHALLENGE || h.status != 0 || kvt_peer_dec_challenge(buf, h.len, &c)) {
		err = -EBADMSG;
		goto out;
	}
	if (c.min_version > KVT_PEER_VERSION || c.max_version < KVT_PEER_VERSION) {
		err = -EPROTONOSUPPORT;
		goto out;
	}
	if (expect_id && strcmp(expect_id, c.id) != 0) {
		err = -ESTALE;
		goto out;
	}
	snprintf(a.id, sizeof(a.id), "%s", self_id);
	if (RAND_bytes(a.nonce, sizeof(a.nonce)) != 1) {
		err = -EIO;
		goto out;
	}
	kvt_peer_auth_mac(s, false, c.nonce, a.nonce, self_id, c.id, a.mac);
	err = kvt_peer_enc_auth(&w, &a);
	if (!err)
		err = kvt_peer_exchange(fd, &w, &h, buf, sizeof(buf), deadline_ns);
	if (err)
		goto out;
	if (h.op != (KVT_PEER_AUTH | KVT_OP_REPLY)) {
		err = -EBADMSG;
		goto out;
	}
	if (h.status != 0) {
		err = h.status == -EACCES ? -EACCES : -EPROTO;
		goto out;
	}
	if (kvt_peer_dec_mac(buf, h.len, theirs)) {
		err = -EBADMSG;
		goto out;
	}
	kvt_peer_auth_mac(s, true, c.nonce, a.nonce, self_id, c.id, mac);
	if (CRYPTO_memcmp(mac, theirs, sizeof(mac)) != 0) {
		err = -EACCES; /* an owner without the secret must not feed us blocks */
		goto out;
	}
	memcpy(server_id, c.id, sizeof(c.id));
	*flags = c.flags;
out:
	OPENSSL_cleanse(mac, sizeof(mac));
	kvt_wr_free(&w);
	return err;
}
