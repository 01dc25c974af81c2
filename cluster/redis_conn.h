/* SPDX-License-Identifier: Apache-2.0 */
/* One connection to Redis whose every operation ends by a deadline.
 *
 * hiredis 0.14's blocking calls have no overall timeout (a connect to a
 * black-holed address, or a server that accepted and stopped answering, can
 * hold them for minutes), so this connects the socket itself (non-blocking,
 * with a deadline), hands the fd to hiredis for the protocol, and drives the
 * writes and reads with poll() until a deadline. A pipeline that misses its
 * deadline or fails leaves the connection unusable (a reply may be half
 * read): the caller closes it and connects again.
 *
 * Not thread-safe: one thread owns a connection. */
#ifndef KVT_CLUSTER_REDIS_CONN_H
#define KVT_CLUSTER_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "transport/sockio.h"

#define KVT_REDIS_MAX_SENTINELS 8
#define KVT_REDIS_MASTER_MAX 64

/* Where Redis is: parsed from redis://[:PASSWORD@]HOST[:PORT][/DB],
 * unix://PATH[?db=DB], or sentinel://HOST:PORT[,HOST:PORT...]/MASTER: the
 * primary that Redis Sentinels name MASTER, asked of them at each connect. */
struct kvt_redis_url {
	char hostport[300];   /* "HOST:PORT" or a socket path (kvt_sockaddr_parse);
	                       * "" with sentinels */
	char password[128];   /* "" = none */
	unsigned db;
	unsigned n_sentinels; /* 0: hostport is Redis itself */
	char sentinels[KVT_REDIS_MAX_SENTINELS][72]; /* "HOST:PORT" */
	char master[KVT_REDIS_MASTER_MAX + 1];       /* the name the Sentinels monitor */
};

/* Parse url into out. Returns 0 or -EINVAL (unknown scheme, bad port or db,
 * a part too long, more than KVT_REDIS_MAX_SENTINELS Sentinels, no master
 * name or one with characters other than A-Z a-z 0-9 . _ -). */
int kvt_redis_url_parse(const char *url, struct kvt_redis_url *out);

struct kvt_redis;

/* Connect (and AUTH, SELECT when the URL asks) before deadline_ns. With
 * Sentinels, the primary's address is asked of each Sentinel in turn (each
 * gets an equal share of the time left) with SENTINEL
 * get-master-addr-by-name, and the server found there must answer ROLE as
 * a master (a Sentinel that has not seen a failover yet may still name a
 * demoted one). Returns 0 and *out, or -ETIMEDOUT, the connect error,
 * -EACCES (AUTH refused), -EPROTO (an unexpected reply), -ENOENT (no
 * Sentinel knows the master's name), -EAGAIN (the server named is not a
 * primary now), -ENOMEM. errbuf (may be NULL) gets a short reason for the
 * log. */
int kvt_redis_connect(const struct kvt_redis_url *url, uint64_t deadline_ns,
		      struct kvt_redis **out, char *errbuf, size_t errlen);

/* Queue one command (argv of argc strings with their lengths) to be sent by
 * the next kvt_redis_exec. Returns 0 or -ENOMEM. */
int kvt_redis_append(struct kvt_redis *r, int argc, const char **argv, const size_t *argvlen);

/* Send the queued commands and read one reply for each, before deadline_ns.
 * Returns 0 with replies[0..n) set (n must equal the number appended since
 * the last exec; free them with kvt_redis_free_replies), or -ETIMEDOUT,
 * -ECONNRESET, -EPROTO, -ENOMEM; then no reply is returned and the connection
 * must be closed. An error reply of Redis (REDIS_REPLY_ERROR) is a reply:
 * the caller inspects it; but a READONLY error (the server was made a
 * replica: a failover demoted it) fails the whole pipeline with -EROFS, so
 * that the caller reconnects, to the new primary, as for a lost
 * connection. */
int kvt_redis_exec(struct kvt_redis *r, redisReply **replies, size_t n, uint64_t deadline_ns);

/* Free replies[0..n) (NULL entries skipped) and set them to NULL. */
void kvt_redis_free_replies(redisReply **replies, size_t n);

/* The address of the server connected to ("HOST:PORT" or a socket path):
 * with Sentinels, the primary they named. */
const char *kvt_redis_addr(const struct kvt_redis *r);

/* Why the last call failed, for the log ("" when it did not). */
const char *kvt_redis_errstr(const struct kvt_redis *r);

/* Close the connection. NULL is accepted. */
void kvt_redis_close(struct kvt_redis *r);

#endif /* KVT_CLUSTER_REDIS_CONN_H */
