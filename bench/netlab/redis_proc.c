/* SPDX-License-Identifier: Apache-2.0 */
/* redis-server as a child process of a test or bench (see netlab.h). */
#include "bench/netlab/netlab.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

const char *kvt_redis_server_path(void)
{
	static char found[512];
	const char *env = getenv("KVT_REDIS_SERVER"), *path = getenv("PATH");

	if (env && *env)
		return access(env, X_OK) == 0 ? env : NULL;
	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);

		if (n && n < sizeof(found) - 16) {
			snprintf(found, sizeof(found), "%.*s/redis-server", (int)n, path);
			if (access(found, X_OK) == 0)
				return found;
		}
		path = colon ? colon + 1 : NULL;
	}
	return access("/usr/bin/redis-server", X_OK) == 0 ? "/usr/bin/redis-server" : NULL;
}

/* One PING, answered +PONG, over a fresh connection (in the caller's
 * namespace: the child, for a server inside one). */
static bool ping_once(const struct kvt_redis_proc *r)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	char buf[16];
	int fd;
	bool ok = false;

	if (!r->bind[0]) {
		struct sockaddr_un *un = (struct sockaddr_un *)&ss;

		un->sun_family = AF_UNIX;
		snprintf(un->sun_path, sizeof(un->sun_path), "%.107s", r->sock);
		len = sizeof(*un);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)r->port);
		if (inet_pton(AF_INET, r->bind, &in->sin_addr) != 1)
			return false;
		len = sizeof(*in);
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	{
		struct timeval tv = { .tv_sec = 1 };

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (connect(fd, (struct sockaddr *)&ss, len) == 0 && write(fd, "PING\r\n", 6) == 6 &&
	    read(fd, buf, 7) == 7 && memcmp(buf, "+PONG\r\n", 7) == 0)
		ok = true;
	close(fd);
	return ok;
}

/* PING from inside the server's namespace (a forked child enters it). */
static bool ping(const struct kvt_redis_proc *r)
{
	pid_t pid;
	int st;

	if (!r->net)
		return ping_once(r);
	pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0)
		_exit(kvt_netlab_enter(r->net, r->netns_node) == 0 && ping_once(r) ? 0 : 1);
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void print_log(const struct kvt_redis_proc *r)
{
	char path[300], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/redis.log", r->dir);
	f = fopen(path, "r");
	if (!f)
		return;
	fprintf(stderr, "--- %s\n", path);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

static int launch(struct kvt_redis_proc *r)
{
	const char *bin = kvt_redis_server_path();
	char port[16], logf[300];
	char *argv[32];
	int a = 0;
	struct timespec ts = { .tv_nsec = 20 * 1000000 };

	if (!bin)
		return -ENOENT;
	snprintf(port, sizeof(port), "%d", r->bind[0] ? r->port : 0);
	snprintf(logf, sizeof(logf), "%s/redis.log", r->dir);
	argv[a++] = (char *)bin;
	argv[a++] = "--port";
	argv[a++] = port;
	if (r->bind[0]) {
		argv[a++] = "--bind";
		argv[a++] = r->bind;
		argv[a++] = "--protected-mode";
		argv[a++] = "no";
	} else {
		argv[a++] = "--unixsocket";
		argv[a++] = r->sock;
		argv[a++] = "--unixsocketperm";
		argv[a++] = "700";
	}
	argv[a++] = "--save";
	argv[a++] = "";
	argv[a++] = "--appendonly";
	argv[a++] = "no";
	argv[a++] = "--dir";
	argv[a++] = r->dir;
	argv[a++] = "--logfile";
	argv[a++] = logf;
	argv[a++] = "--daemonize";
	argv[a++] = "no";
	argv[a] = NULL;
	if (!r->bind[0])
		unlink(r->sock);
	r->pid = kvt_netlab_spawn(r->net, r->netns_node, argv, -1, -1, -1);
	if (r->pid < 0) {
		int err = (int)r->pid;

		r->pid = 0;
		return err;
	}
	for (int i = 0; i < 250; i++) { /* 5 s */
		int st;

		if (ping(r))
			return 0;
		if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
			r->pid = 0;
			break;
		}
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "redis-server did not come up\n");
	print_log(r);
	kvt_redis_proc_stop(r);
	return -ETIMEDOUT;
}

int kvt_redis_proc_start(struct kvt_redis_proc *r, const char *dir, const struct kvt_netlab *net,
			 int node, const char *bind, int port)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	r->net = net;
	r->netns_node = node;
	if (bind) {
		snprintf(r->bind, sizeof(r->bind), "%s", bind);
		r->port = port;
		snprintf(r->url, sizeof(r->url), "redis://%s:%d", bind, port);
	} else {
		snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", dir);
		snprintf(r->url, sizeof(r->url), "unix://%s", r->sock);
	}
	return launch(r);
}

int kvt_redis_proc_restart(struct kvt_redis_proc *r)
{
	kvt_redis_proc_stop(r);
	return launch(r);
}

void kvt_redis_proc_signal(struct kvt_redis_proc *r, int sig)
{
	if (r->pid <= 0)
		return;
	kill(r->pid, sig);
	if (sig != SIGSTOP && sig != SIGCONT) {
		if (sig != SIGKILL)
			kill(r->pid, SIGCONT);
		waitpid(r->pid, NULL, 0);
		r->pid = 0;
	}
}

void kvt_redis_proc_stop(struct kvt_redis_proc *r)
{
	kvt_redis_proc_signal(r, SIGKILL);
}
