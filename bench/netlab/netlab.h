/* SPDX-License-Identifier: Apache-2.0 */
/* netlab: a small network of Linux network namespaces for the cluster's
 * tests and benches, and real processes (redis-server, iperf3, kvtier nodes)
 * running inside it.
 *
 * Two shapes:
 *  - star: a hub namespace holding a bridge (10.77.0.254/24) and one veth
 *    pair per node namespace (node i at 10.77.0.(i+1)/24). A link is cut on
 *    the hub side, so the node sees silence, not an error: what a pulled
 *    cable looks like.
 *  - pair: two node namespaces joined by one veth pair (10.77.0.1 and .2),
 *    for benches that compare two programs over the same link.
 *
 * Addresses exist only inside the namespaces; names carry the creator's pid
 * and a random tag, so parallel runs never collide. Everything is torn down
 * by kvt_netlab_close (also from an atexit hook and SIGINT/SIGTERM), and
 * namespaces left by a run that was killed are removed by the next one
 * (their creator's pid is gone). Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)
 * and iproute2; kvt_netlab_open says why when they are missing. */
#ifndef KVT_BENCH_NETLAB_H
#define KVT_BENCH_NETLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KVT_NETLAB_MAX_NODES 8
#define KVT_NETLAB_HUB (-1)

struct kvt_netlab {
	int n;                                /* node namespaces */
	bool star;                            /* hub + bridge; else a pair */
	char tag[48];                         /* "kvt-PID-RANDOM" */
	char hub[64];                         /* star: the hub namespace */
	char hub_addr[16];                    /* star: "10.77.0.254" */
	char node[KVT_NETLAB_MAX_NODES][64];  /* namespace names */
	char addr[KVT_NETLAB_MAX_NODES][16];  /* "10.77.0.1", ... */
	int made;                             /* namespaces created so far */
};

/* Build a network of n nodes (star, or pair with n == 2). Returns 0, or
 * -EPERM (not root, or namespaces refused), -ENOENT (no `ip`), -EINVAL,
 * -EIO (an ip command failed); why receives the reason. On failure nothing
 * is left behind. */
int kvt_netlab_open(struct kvt_netlab *net, int n, bool star, char *why, size_t whylen);

/* Remove every namespace of net (their processes should be gone: a process
 * left inside keeps its namespace's links alive but unreachable).
 * Idempotent. */
void kvt_netlab_close(struct kvt_netlab *net);

/* Move the calling thread into node's namespace (KVT_NETLAB_HUB for the
 * hub). For a forked child that runs in-process code there. Returns 0 or
 * -errno. */
int kvt_netlab_enter(const struct kvt_netlab *net, int node);

/* Start argv[0] (a path, or a name looked up in PATH) inside node's
 * namespace with the given fds as its stdin, stdout and stderr (-1: /dev/null
 * for stdin, inherited for the others). The child is killed if this process
 * dies (PR_SET_PDEATHSIG). Returns the pid or -errno. */
pid_t kvt_netlab_spawn(const struct kvt_netlab *net, int node, char *const argv[],
		       int in_fd, int out_fd, int err_fd);

/* Cut (up = false) or restore node's link to the hub (star), or the pair's
 * link. Returns 0 or -EIO. */
int kvt_netlab_link(const struct kvt_netlab *net, int node, bool up);

/* Shape node's link to bits_per_s each way (star: the node's and the hub's
 * end of its veth; pair: the node's end) with a token bucket filter (tc
 * tbf, bursts of 1 ms at that rate, 128 KiB at least), so that the link,
 * not the CPU, limits what crosses it; 0 removes the shaping. Returns 0,
 * -ENOENT (no tc), -EOPNOTSUPP (the kernel refused tbf: no sch_tbf); why
 * receives the reason. */
int kvt_netlab_shape(const struct kvt_netlab *net, int node, uint64_t bits_per_s, char *why,
		     size_t whylen);

/* Run a shell command line inside node's namespace; returns its exit status
 * (or -errno). */
int kvt_netlab_sh(const struct kvt_netlab *net, int node, const char *cmdline);

/* ---- redis-server as a child -------------------------------------------- */

struct kvt_redis_proc {
	pid_t pid;
	char dir[256];      /* its working directory (log, socket) */
	char sock[256];     /* unix socket path, when bind is NULL */
	char url[300];      /* redis://ADDR:PORT or unix://PATH */
	char bind[64];
	int port;
	int netns_node;     /* where it runs, with net */
	const struct kvt_netlab *net;
};

/* The redis-server binary: $KVT_REDIS_SERVER, else redis-server in PATH, else
 * /usr/bin/redis-server; NULL when none is there. */
const char *kvt_redis_server_path(void);

/* Start redis-server with no persistence, its files under dir: on a unix
 * socket dir/redis.sock when bind is NULL, else on bind:port (inside node's
 * namespace of net when net is not NULL). Waits until it answers PING.
 * Returns 0, -ENOENT (no binary), -ETIMEDOUT (it did not come up; its log is
 * printed). */
int kvt_redis_proc_start(struct kvt_redis_proc *r, const char *dir, const struct kvt_netlab *net,
			 int node, const char *bind, int port);

/* Start it again with the same settings (after kvt_redis_proc_stop). */
int kvt_redis_proc_restart(struct kvt_redis_proc *r);

/* Send sig (SIGTERM, SIGKILL) and reap it; SIGSTOP / SIGCONT just pause and
 * resume it. */
void kvt_redis_proc_signal(struct kvt_redis_proc *r, int sig);

/* Stop it (SIGKILL: no persistence anyway) and reap it. Idempotent. */
void kvt_redis_proc_stop(struct kvt_redis_proc *r);

#endif /* KVT_BENCH_NETLAB_H */
