/* SPDX-License-Identifier: Apache-2.0 */
/* Hand-over from a running kvtierd to its successor, without systemd: the
 * running daemon listens on a Unix socket of its own (mode 0600, next to
 * the sidecar socket); `kvtierd --take-over PATH` connects to it. A peer of
 * another uid (SO_PEERCRED) is refused and nothing is sent. For the
 * daemon's own uid, the running daemon stops accepting, drains, closes its
 * store (its DRAM region lives on in the memfd) and sends, over SCM_RIGHTS,
 * its listening sidecar socket, the DRAM tier's memfd and this hand-over
 * socket; then it waits for the successor to confirm that it serves (its
 * store open on the region), and exits. Engines' connections in the listen
 * backlog are accepted by the successor; those that were open reconnect to
 * the same path and find their blocks. A successor that dies before it
 * confirms leaves the socket and the region with the old daemon, which
 * starts over on them (kvtierd.c: it executes itself again with both).
 *
 * The message: "KVTH1" + NUL-padded to 8 bytes, then a NUL-terminated list
 * of names, one per fd, colon-separated ("sidecar:dram:handover"). The
 * confirmation: "KVTH1 serving" with its NUL, on the same connection. */
#ifndef KVT_APP_DAEMON_HANDOVER_H
#define KVT_APP_DAEMON_HANDOVER_H

#include <stdbool.h>

struct kvtd_handover;

/* What a successor receives: each fd -1 when not sent. */
struct kvtd_handed {
	int sidecar;   /* the listening sidecar socket */
	int dram;      /* the DRAM tier's memfd */
	int handover;  /* the listening hand-over socket */
	int conn;      /* the connection to confirm on (kvtd_handover_confirm) */
};

/* Called once, on the hand-over thread, when a successor of the daemon's
 * uid asked to take over (its connection is kept for kvtd_handover_send). */
typedef void (*kvtd_handover_cb)(void *arg);

/* Listen for a successor at path (replacing a stale socket file, one no
 * process listens on), or on inherited (>= 0: a hand-over socket passed by
 * the daemon before, which is then served as it is), and start the thread
 * that waits for one. Returns 0 and *out, -EADDRINUSE (another daemon
 * listens at path, or something else is there: left as it was), or
 * -errno. */
int kvtd_handover_listen(const char *path, int inherited, kvtd_handover_cb cb, void *arg,
			 struct kvtd_handover **out);

/* Send the fds to the successor that asked (and this socket's listening fd
 * with them). Returns 0, -ENOTCONN (none asked), or the errno of sendmsg. */
int kvtd_handover_send(struct kvtd_handover *h, int sidecar_fd, int dram_fd);

/* After kvtd_handover_send: wait up to timeout_ms for the successor to
 * confirm. Returns 0 (confirmed), -EPIPE (it closed the connection
 * without: it died, or failed to start), or -ETIMEDOUT. */
int kvtd_handover_wait_confirm(struct kvtd_handover *h, unsigned timeout_ms);

/* Stop the thread and close the sockets; the socket file is unlinked
 * unless `handed` (the successor serves it now) or this process never
 * bound it. NULL is accepted. */
void kvtd_handover_close(struct kvtd_handover *h, bool handed);

/* Successor: connect to path, ask, and wait up to timeout_ms for the fds
 * (the connection is kept in out->conn, for kvtd_handover_confirm).
 * Returns 0 and *out, -ECONNREFUSED/-ENOENT (no daemon there), -EPERM
 * (refused: the connection closed without fds), -ETIMEDOUT, -EPROTO. */
int kvtd_handover_receive(const char *path, unsigned timeout_ms, struct kvtd_handed *out);

/* Successor: tell the old daemon that this one serves now (its store open
 * on the region), so it may exit; closes out->conn. Until then the old
 * daemon keeps what it sent. Nothing happens when out->conn is -1. */
void kvtd_handover_confirm(struct kvtd_handed *out);

/* Old daemon whose successor did not serve: execute this program again
 * (the same pid) with argv less any --take-over (and one that clears a
 * take_over of the config file), passing sidecar_fd and
 * dram_fd (either may be -1) as systemd would (LISTEN_FDS, LISTEN_FDNAMES
 * "sidecar:dram", LISTEN_PID): it starts on the socket and adopts the
 * region. Call with the store closed. Returns only on failure: -errno
 * (the fds are still the caller's, though they may be moved). */
int kvtd_handover_reexec(char **argv, int sidecar_fd, int dram_fd);

#endif /* KVT_APP_DAEMON_HANDOVER_H */
