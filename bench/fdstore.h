/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for systemd's side of the service protocol kvtierd speaks, for
 * the restart bench and its tests: a notify socket ($NOTIFY_SOCKET) taking
 * READY=1, STOPPING=1 and the fd store's FDSTORE=1 / FDSTOREREMOVE=1 with
 * FDNAME= and fds over SCM_RIGHTS (sd_notify(3), sd_pid_notify_with_fds),
 * and the start of a service with the stored fds passed as systemd passes
 * them: from fd 3 on, with LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID
 * (sd_listen_fds(3)), and $FDSTORE saying the store's size (systemd 254). As systemd does, the store outlives the service's
 * process: a kill -9 leaves it whole for the next start. */
#ifndef KVT_BENCH_FDSTORE_H
#define KVT_BENCH_FDSTORE_H

#include <stdbool.h>
#include <sys/types.h>

#define KVT_FDSTORE_MAX 8

struct kvt_fdstore {
	int notify_fd;
	char notify_path[108];
	int fds[KVT_FDSTORE_MAX];
	char names[KVT_FDSTORE_MAX][32];
	int n;
	pid_t pid;           /* the service's process, 0 when none runs */
	bool ready, stopping;
};

/* Bind the notify socket in dir. Returns 0 or -errno. */
int kvt_fdstore_open(struct kvt_fdstore *m, const char *dir);

/* Start argv (argv[0] a path) with NOTIFY_SOCKET and the stored fds, its
 * stdout and stderr appended to log. Returns the pid or -errno. */
pid_t kvt_fdstore_start(struct kvt_fdstore *m, const char *const *argv, const char *log);

/* Take notifications until READY=1 comes (0), the service exits (-ECHILD)
 * or timeout_ms pass (-ETIMEDOUT). */
int kvt_fdstore_wait_ready(struct kvt_fdstore *m, int timeout_ms);

/* Take the notifications waiting now (the fd store's among them). */
void kvt_fdstore_poll(struct kvt_fdstore *m);

/* Send sig to the service and reap it, taking its notifications until it
 * exits. Returns its wait status. */
int kvt_fdstore_stop(struct kvt_fdstore *m, int sig);

/* The stored fd named name, -1 if none. */
int kvt_fdstore_fd(const struct kvt_fdstore *m, const char *name);

/* Close the store and the socket (the service must have exited). */
void kvt_fdstore_close(struct kvt_fdstore *m);

#endif /* KVT_BENCH_FDSTORE_H */
