/* SPDX-License-Identifier: Apache-2.0 */
/* Network namespaces for tests and benches (see netlab.h). */
#include "bench/netlab/netlab.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NETNS_DIR "/run/netns"
#define MAX_OPEN 4

/* Nets to tear down at exit or on SIGINT/SIGTERM. The paths are kept ready
 * so that the signal handler only makes system calls. */
static struct kvt_netlab *open_nets[MAX_OPEN];
static bool hooks_installed;

/* Delete one namespace as `ip netns del` does: detach its bind mount and
 * remove the file; the namespace ends when its last process leaves.
 * Async-signal-safe. */
static void del_ns(const char *name)
{
	char path[sizeof(NETNS_DIR) + 80];
	size_t a = sizeof(NETNS_DIR) - 1, b = strlen(name);

	if (!name[0] || a + 1 + b >= sizeof(path))
		return;
	memcpy(path, NETNS_DIR, a);
	path[a] = '/';
	memcpy(path + a + 1, name, b + 1);
	umount2(path, MNT_DETACH);
	unlink(path);
}

static void teardown(struct kvt_netlab *net)
{
	for (int i = 0; i < net->n && i < KVT_NETLAB_MAX_NODES; i++)
		del_ns(net->node[i]);
	if (net->star)
		del_ns(net->hub);
	net->made = 0;
}

static void teardown_all(void)
{
	for (int i = 0; i < MAX_OPEN; i++)
		if (open_nets[i]) {
			teardown(open_nets[i]);
			open_nets[i] = NULL;
		}
}

static void on_signal(int sig)
{
	teardown_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void install_hooks(void)
{
	struct sigaction sa = { .sa_handler = on_signal };

	if (hooks_installed)
		return;
	hooks_installed = true;
	atexit(teardown_all);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* Namespaces "kvt-PID-..." whose creator is gone: left by a run that was
 * killed (SIGKILL, a test timeout) before it could clean up. */
static void reap_stale(void)
{
	DIR *dir = opendir(NETNS_DIR);
	struct dirent *e;

	if (!dir)
		return;
	while ((e = readdir(dir))) {
		char *end;
		long pid;

		if (strncmp(e->d_name, "kvt-", 4) != 0)
			continue;
		pid = strtol(e->d_name + 4, &end, 10);
		if (pid <= 0 || *end != '-' || pid == getpid())
			continue;
		if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
			del_ns(e->d_name);
	}
	closedir(dir);
}

static int sh(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Run an ip command line; on failure the command is the reason. */
static int sh(char *why, size_t whylen, const char *fmt, ...)
{
	char cmd[512], full[560];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
	st = system(full);
	if (st == 0)
		return 0;
	if (why)
		snprintf(why, whylen, "'%s' failed (exit %d)", cmd,
			 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return -EIO;
}

static bool have_ip(void)
{
	return access("/usr/sbin/ip", X_OK) == 0 || access("/sbin/ip", X_OK) == 0 ||
	       access("/usr/bin/ip", X_OK) == 0 || access("/bin/ip", X_OK) == 0;
}

static int add_ns(struct kvt_netlab *net, const char *name, char *why, size_t whylen)
{
	if (sh(why, whylen, "ip netns add %s", name))
		return -EPERM;
	net->made++;
	return sh(why, whylen, "ip -n %s link set lo up", name);
}

int kvt_netlab_open(struct kvt_netlab *net, int n, bool star, char *why, size_t whylen)
{
	uint32_t rnd = 0;
	int err, slot = -1;

	memset(net, 0, sizeof(*net));
	if (n < 1 || n > KVT_NETLAB_MAX_NODES || (!star && n != 2))
		return -EINVAL;
	if (geteuid() != 0) {
		snprintf(why, whylen, "network namespaces need root (CAP_SYS_ADMIN)");
		return -EPERM;
	}
	if (!have_ip()) {
		snprintf(why, whylen, "iproute2's ip is not installed");
		return -ENOENT;
	}
	for (int i = 0; i < MAX_OPEN; i++)
		if (!open_nets[i]) {
			slot = i;
			break;
		}
	if (slot < 0)
		return -EBUSY;
	install_hooks();
	reap_stale();
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)getpid() * 2654435761u;
	net->n = n;
	net->star = star;
	snprintf(net->tag, sizeof(net->tag), "kvt-%d-%06x", (int)getpid(), rnd & 0xffffff);
	for (int i = 0; i < n; i++) {
		snprintf(net->node[i], sizeof(net->node[i]), "%s-n%d", net->tag, i);
		snprintf(net->addr[i], sizeof(net->addr[i]), "10.77.0.%d", i + 1);
	}
	open_nets[slot] = net; /* from here on, an exit tears it down */
	if (star) {
		snprintf(net->hub, sizeof(net->hub), "%s-hub", net->tag);
		snprintf(net->hub_addr, sizeof(net->hub_addr), "10.77.0.254");
		if ((err = add_ns(net, net->hub, why, whylen)))
			goto fail;
		if ((err = sh(why, whylen, "ip -n %s link add br0 type bridge", net->hub)) ||
		    (err = sh(why, whylen, "ip -n %s addr add %s/24 dev br0", net->hub, net->hub_addr)) ||
		    (err = sh(why, whylen, "ip -n %s link set br0 up", net->hub)))
			goto fail;
	}
	for (int i = 0; i < n; i++) {
		if ((err = add_ns(net, net->node[i], why, whylen)))
			goto fail;
		if (star) {
			if ((err = sh(why, whylen, "ip -n %s link add vh%d type veth peer name eth0 netns %s",
				      net->hub, i, net->node[i])) ||
			    (err = sh(why, whylen, "ip -n %s link set vh%d master br0 up", net->hub, i)))
				goto fail;
		} else if (i == 1 &&
			   (err = sh(why, whylen, "ip -n %s link add eth0 type veth peer name eth0 netns %s",
				     net->node[0], net->node[1]))) {
			goto fail;
		}
	}
	for (int i = 0; i < n; i++)
		if ((err = sh(why, whylen, "ip -n %s addr add %s/24 dev eth0", net->node[i], net->addr[i])) ||
		    (err = sh(why, whylen, "ip -n %s link set eth0 up", net->node[i])))
			goto fail;
	return 0;
fail:
	teardown(net);
	open_nets[slot] = NULL;
	return err;
}

void kvt_netlab_close(struct kvt_netlab *net)
{
	if (!net)
		return;
	teardown(net);
	for (int i = 0; i < MAX_OPEN; i++)
		if (open_nets[i] == net)
			open_nets[i] = NULL;
}

int kvt_netlab_enter(const struct kvt_netlab *net, int node)
{
	char path[sizeof(NETNS_DIR) + 80];
	int fd, err = 0;

	if (node < KVT_NETLAB_HUB || node >= net->n || (node == KVT_NETLAB_HUB && !net->star))
		return -EINVAL;
	snprintf(path, sizeof(path), NETNS_DIR "/%s", node == KVT_NETLAB_HUB ? net->hub : net->node[node]);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (setns(fd, CLONE_NEWNET) < 0)
		err = -errno;
	close(fd);
	return err;
}

pid_t kvt_netlab_spawn(const struct kvt_netlab *net, int node, char *const argv[],
		       int in_fd, int out_fd, int err_fd)
{
	pid_t parent = getpid(), pid;
	int null_fd;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	if (net && kvt_netlab_enter(net, node) < 0) {
		fprintf(stderr, "netlab: cannot enter namespace of node %d\n", node);
		_exit(127);
	}
	if (in_fd < 0) {
		null_fd = open("/dev/null", O_RDONLY);
		if (null_fd >= 0)
			in_fd = null_fd;
	}
	if (in_fd >= 0 && in_fd != 0)
		dup2(in_fd, 0);
	if (out_fd >= 0 && out_fd != 1)
		dup2(out_fd, 1);
	if (err_fd >= 0 && err_fd != 2)
		dup2(err_fd, 2);
	execvp(argv[0], argv);
	fprintf(stderr, "netlab: exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

int kvt_netlab_link(const struct kvt_netlab *net, int node, bool up)
{
	if (node < 0 || node >= net->n)
		return -EINVAL;
	if (net->star)
		return sh(NULL, 0, "ip -n %s link set vh%d %s", net->hub, node, up ? "up" : "down");
	return sh(NULL, 0, "ip -n %s link set eth0 %s", net->node[node], up ? "up" : "down");
}

int kvt_netlab_sh(const struct kvt_netlab *net, int node, const char *cmdline)
{
	char *argv[] = { "/bin/sh", "-c", (char *)cmdline, NULL };
	int st;
	pid_t pid = kvt_netlab_spawn(net, node, argv, -1, -1, -1);

	if (pid < 0)
		return (int)pid;
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static bool have_tc(void)
{
	return access("/usr/sbin/tc", X_OK) == 0 || access("/sbin/tc", X_OK) == 0 ||
	       access("/usr/bin/tc", X_OK) == 0 || access("/bin/tc", X_OK) == 0;
}

int kvt_netlab_shape(const struct kvt_netlab *net, int node, uint64_t bits_per_s, char *why,
		     size_t whylen)
{
	/* a burst must hold the largest (GSO) packet tbf lets through whole;
	 * 1 ms at the rate keeps the bucket small against the link */
	uint64_t burst = bits_per_s / 8 / 1000;
	const char *ns[2] = { net->node[node], net->star ? net->hub : NULL };
	char dev[2][16];

	if (node < 0 || node >= net->n)
		return -EINVAL;
	if (!have_tc()) {
		snprintf(why, whylen, "iproute2's tc is not installed");
		return -ENOENT;
	}
	if (burst < 128 * 1024)
		burst = 128 * 1024;
	snprintf(dev[0], sizeof(dev[0]), "eth0");
	snprintf(dev[1], sizeof(dev[1]), "vh%d", node);
	for (int e = 0; e < 2 && ns[e]; e++) {
		sh(NULL, 0, "ip netns exec %s tc qdisc del dev %s root", ns[e], dev[e]);
		if (bits_per_s &&
		    sh(why, whylen, "ip netns exec %s tc qdisc add dev %s root tbf rate %llubit "
		       "burst %llu latency 50ms", ns[e], dev[e], (unsigned long long)bits_per_s,
		       (unsigned long long)burst))
			return -EOPNOTSUPP;
	}
	return 0;
}
