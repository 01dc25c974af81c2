/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd: the sidecar daemon. The flow, in the order of this file:
 * configuration (daemon_config.c) -> the socket systemd passed, if any
 * (daemon_systemd.c) -> the store and its tiers (store/, tiers/) -> the
 * cluster, when configured (daemon_cluster.c: directory, peer server, peer
 * tier) -> the Unix-socket server (transport/server.c) -> ready (told to
 * systemd) -> run until SIGTERM/SIGINT -> drain, close the server, leave the
 * cluster, close the store. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "app/daemon_cluster.h"
#include "app/daemon_config.h"
#include "app/daemon_diagnose.h"
#include "app/daemon_handover.h"
#include "app/daemon_log.h"
#include "app/daemon_systemd.h"
#include "kvtier/device.h"
#include "kvtier/log.h"
#include "kvtier/store.h"
#include "transport/proto.h"
#include "transport/server.h"
#include "util/clock.h"
#include "util/size.h"

/* SIGTERM and SIGINT are blocked in every thread (the mask is set before any
 * is created, and inherited) and taken by one thread with sigwait, which
 * stops the server under a lock that main holds while it frees it: no handler
 * runs on a worker or touches a freed server. The same thread is the
 * watchdog of the drain timeout: once a stop signal came, the process ends
 * within it, whatever main is stuck on. */
static pthread_mutex_t sig_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvt_server *running;
static bool stop_requested, sig_quit;
/* a successor asked to take over (daemon_handover.c): the stop keeps the
 * listening socket for it */
static bool handover_asked;
static uint64_t stop_deadline; /* when the watchdog ends the process; 0: none */
static sigset_t stop_sigs;
static uint64_t drain_timeout_ns;

/* Leave now, without closing anything: what is stuck would never return.
 * Blocks acknowledged on SSD survive (the log is crash-safe); DRAM's go. */
static void exit_forced(const char *stage)
{
	kvtd_log(KVT_LOG_ERROR, "event=exit.forced reason=drain_timeout stage=%s timeout_ms=%llu "
		 "status=1", stage, (unsigned long long)(drain_timeout_ns / 1000000));
	fflush(NULL);
	_exit(1);
}

/* The next stop signal, or 0 once `deadline` (0 = none) has passed. */
static int next_signal(uint64_t deadline)
{
	for (;;) {
		struct timespec ts;
		uint64_t now, left;
		int sig;

		if (!deadline) {
			if (sigwait(&stop_sigs, &sig) == 0)
				return sig;
			continue;
		}
		now = kvt_now_ns();
		if (now >= deadline)
			return 0;
		left = deadline - now;
		ts.tv_sec = (time_t)(left / 1000000000);
		ts.tv_nsec = (long)(left % 1000000000);
		sig = sigtimedwait(&stop_sigs, NULL, &ts);
		if (sig > 0)
			return sig;
	}
}

static void *signal_main(void *arg)
{
	uint64_t deadline = 0;

	(void)arg;
	for (;;) {
		int sig = next_signal(deadline);

		pthread_mutex_lock(&sig_lock);
		if (sig_quit) {
			pthread_mutex_unlock(&sig_lock);
			return NULL;
		}
		if (!sig)
			exit_forced("watchdog"); /* main did not end the process in time */
		stop_requested = true; /* a signal during start-up: stop once started */
		if (!deadline)
			deadline = kvt_now_ns() + drain_timeout_ns;
		stop_deadline = deadline;
		kvtd_sd_notify("STOPPING=1");
		if (running)
			kvt_server_stop(running);
		pthread_mutex_unlock(&sig_lock);
	}
}

static int install_signals(pthread_t *thread)
{
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	if (pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL))
		return -EINVAL;
	signal(SIGPIPE, SIG_IGN);
	return -pthread_create(thread, NULL, signal_main, NULL);
}

/* Make the server (and the clients' fds it holds) the server's to size:
 * the soft limit on open files up to the hard one. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			kvtd_log(KVT_LOG_WARN, "event=rlimit.nofile err=\"%s\"", strerror(errno));
	}
}

static void set_running(struct kvt_server *srv)
{
	pthread_mutex_lock(&sig_lock);
	running = srv;
	if (srv && handover_asked)
		kvt_server_handover(srv);
	else if (srv && stop_requested)
		kvt_server_stop(srv);
	pthread_mutex_unlock(&sig_lock);
}

/* A successor of our uid asked to take over (on the hand-over thread). */
static void handover_cb(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&sig_lock);
	handover_asked = true;
	if (running)
		kvt_server_handover(running);
	pthread_mutex_unlock(&sig_lock);
}

/* The path a listening Unix socket is bound to, into buf ("" if none). */
static void bound_path(int fd, char *buf, size_t len)
{
	struct sockaddr_un sa;
	socklen_t sl = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	buf[0] = 0;
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sun_path[0])
		snprintf(buf, len, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
}

/* Keep fd in systemd's fd store under name, replacing what it kept under
 * that name (a region refused at start, a socket bound anew). Returns
 * whether systemd has it (false outside systemd). */
static bool fd_store(const char *name, int fd)
{
	char msg[64];

	if (fd < 0 || !getenv("NOTIFY_SOCKET"))
		return false;
	snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
	kvtd_sd_notify(msg);
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
	if (kvtd_sd_notify_fds(msg, &fd, 1)) {
		kvtd_log(KVT_LOG_WARN, "event=systemd.fdstore.failed name=%s", name);
		return false;
	}
	return true;
}

/* A clean stop without a successor: the blocks only DRAM holds go down to
 * the SSD tier, in what is left of the drain timeout but a margin for
 * closing the store; what was kept and what was not goes to the log and
 * the stop summary (stdout). */
static void write_down(struct kvt_store *store, const struct kvtd_config *cfg)
{
	uint64_t now = kvt_now_ns(), margin = drain_timeout_ns / 8, deadline;
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_write_down wd;
	const char *why;
	unsigned timeout_ms;
	char b[32];
	int err;

	pthread_mutex_lock(&sig_lock);
	deadline = stop_deadline ? stop_deadline : now + drain_timeout_ns;
	pthread_mutex_unlock(&sig_lock);
	if (!cfg->ssd_bytes || deadline <= now + margin)
		return;
	timeout_ms = (unsigned)((deadline - now - margin) / 1000000);
	err = kvt_store_write_down(store, timeout_ms, &wd);
	if (err) {
		kvtd_log(KVT_LOG_WARN, "event=stop.write_down.failed err=\"%s\"", kvt_strerror(err));
		return;
	}
	/* the tier stops at its capacity (it never evicts what it wrote) */
	why = !wd.left ? "" : kvt_store_stats(store, &st) == 0 && st.tier[KVT_TIER_SSD].degraded ?
	      "the SSD tier is degraded" : wd.ms >= timeout_ms ? "out of time" :
	      "the SSD tier is full";
	kvtd_log(wd.left ? KVT_LOG_WARN : KVT_LOG_INFO, "event=stop.write_down blocks=%llu "
		 "bytes=%llu refused=%llu left=%llu ms=%llu kept=%llu dropped=%llu%s%s%s",
		 (unsigned long long)wd.written, (unsigned long long)wd.written_bytes,
		 (unsigned long long)wd.refused, (unsigned long long)wd.left,
		 (unsigned long long)wd.ms, (unsigned long long)wd.written,
		 (unsigned long long)wd.left, wd.left ? " reason=\"" : "", why, wd.left ? "\"" : "");
	printf("kvtierd stopping: %llu blocks only in DRAM written down to SSD (%s)",
	       (unsigned long long)wd.written, kvt_fmt_bytes(wd.written_bytes, b, sizeof(b)));
	if (wd.left)
		printf(", %llu not written (%s): they go with this process's DRAM tier",
		       (unsigned long long)wd.left, why);
	if (wd.refused)
		printf(", %llu kept off SSD by the admission rule", (unsigned long long)wd.refused);
	printf("\n");
	fflush(stdout);
}

/* The drain timed out: a job is stuck (a copy on a device that does not
 * answer, a LOAD waiting on a peer; the server has named them). Closing
 * would wait for it, so the process ends without closing, but first keeps
 * what a stop keeps: the blocks only DRAM holds go down to SSD, and a
 * successor that asked gets the socket and the region (the SSD directory
 * freed for it). It gets them as this process ends, with no take-back: a
 * stuck job could still write into the region while this process lives. */
static void drain_timed_out(struct kvt_server *srv, struct kvt_store *store,
			    struct kvtd_handover *handover, const struct kvtd_config *cfg)
{
	int listen_fd = -1, err;

	pthread_mutex_lock(&sig_lock);
	if (handover_asked && handover)
		listen_fd = kvt_server_take_listener(srv);
	pthread_mutex_unlock(&sig_lock);
	write_down(store, cfg);
	if (listen_fd > 0) {
		kvt_store_quiesce(store);
		err = kvtd_handover_send(handover, listen_fd, kvt_store_dram_fd(store));
		kvtd_log(err ? KVT_LOG_ERROR : KVT_LOG_INFO, "event=handover.sent%s%s region=%s "
			 "reason=drain_timeout", err ? " err=" : "", err ? kvt_strerror(err) : "",
			 kvt_store_dram_fd(store) >= 0 ? "yes" : "no");
	}
	exit_forced("drain");
}

/* How long a daemon that handed over waits for its successor to serve. */
#define HANDOVER_CONFIRM_MS 120000u

/* The successor died before it served (err): start over on the listening
 * socket and the region as this process's own successor would, by
 * executing kvtierd again (the same pid) with both passed the way systemd
 * passes them. Returns only when that failed (the fds stay the caller's). */
static void take_back(char **argv, int listen_fd, int dram_fd, int err)
{
	kvtd_log(KVT_LOG_ERROR, "event=handover.taken_back err=\"%s\" action=\"the successor "
		 "did not serve: this daemon starts over on its socket and region\"",
		 kvt_strerror(err));
	fflush(NULL);
	err = kvtd_handover_reexec(argv, listen_fd, dram_fd);
	kvtd_log(KVT_LOG_ERROR, "event=handover.take_back_failed err=\"%s\" reason=\"the region "
		 "is lost with this process\"", kvt_strerror(err));
}

/* Successor: take the listening socket and the DRAM tier over from the
 * daemon whose hand-over socket is cfg->take_over. Returns 0 or -errno. */
static int take_over(struct kvtd_config *cfg, struct kvtd_handed *h)
{
	uint64_t t0 = kvt_now_ns();
	int err = kvtd_handover_receive(cfg->take_over, cfg->drain_timeout_ms + 5000, h);

	if (err) {
		kvtd_log(KVT_LOG_ERROR, "event=takeover.failed socket=%s err=\"%s\"", cfg->take_over,
			 err == -EPERM ? "refused" : kvt_strerror(err));
		return err;
	}
	if (h->sidecar >= 0) {
		char path[sizeof(cfg->socket_path)];

		bound_path(h->sidecar, path, sizeof(path));
		if (path[0])
			snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", path);
	}
	kvtd_log(KVT_LOG_INFO, "event=takeover.received socket=%s region=%s wait_ms=%llu",
		 cfg->socket_path, h->dram >= 0 ? "yes" : "no",
		 (unsigned long long)((kvt_now_ns() - t0) / 1000000));
	return 0;
}

/* Whether the store took over the DRAM region it was handed; if not, the
 * successor declines the hand-over (logged). */
static bool region_adopted(struct kvt_store *store, const struct kvtd_config *cfg)
{
	struct kvt_store_stats st = { .size = sizeof(st) };

	if (!kvt_store_stats(store, &st) && st.warm.adopted)
		return true;
	kvtd_log(KVT_LOG_ERROR, "event=takeover.declined reason=\"this configuration cannot "
		 "adopt the DRAM region handed over%s\" action=\"the old daemon takes it back "
		 "and serves on; to change the DRAM tier, stop it (its clean stop writes DRAM "
		 "down to SSD) and start this one\"", cfg->warm_restart ?
		 " (see event=dram.warm.refused)" : ": warm restarts are off");
	return false;
}

static void stop_signal_thread(pthread_t thread)
{
	pthread_mutex_lock(&sig_lock);
	sig_quit = true;
	pthread_mutex_unlock(&sig_lock);
	pthread_kill(thread, SIGTERM); /* blocked here: sigwait takes it */
	pthread_join(thread, NULL);
}

/* Whether the metrics endpoint listens beyond loopback ("" is off). */
static bool metrics_exposed(const char *addr)
{
	const char *colon = strrchr(addr, ':');
	size_t host = colon ? (size_t)(colon - addr) : 0;

	if (!*addr || host == 0)
		return false;
	return strncmp(addr, "127.", 4) && !(host == 9 && !strncmp(addr, "localhost", 9));
}

/* The GPU, when one is there and wanted: opened with the cuda backend and the
 * DRAM tier registered with it (pinned, mapped for the gather/scatter
 * kernels). NULL otherwise, with the reason in why. */
static struct kvt_dev *open_gpu(const struct kvtd_config *cfg, struct kvt_store *store,
				char *why, size_t len)
{
	struct kvt_dev_opts o;
	struct kvt_dev *dev;
	uint64_t rlen;
	void *base;
	int err;

	if (!cfg->gpu) {
		snprintf(why, len, "off by configuration");
		return NULL;
	}
	kvt_dev_opts_init(&o, sizeof(o));
	o.backend = KVT_DEV_CUDA;
	err = kvt_dev_open(&o, &dev);
	if (err) {
		snprintf(why, len, "%s", err == -ENODEV ? "no GPU" : kvt_strerror(err));
		return NULL;
	}
	err = kvt_store_dram_region(store, &base, &rlen);
	if (!err)
		err = kvt_dev_host_register(dev, base, rlen, KVT_DEV_HOST_MAPPED);
	if (err) {
		snprintf(why, len, "cannot pin the DRAM tier: %s", kvt_strerror(err));
		kvt_dev_close(dev);
		return NULL;
	}
	return dev;
}

static void close_gpu(struct kvt_dev *dev, struct kvt_store *store)
{
	uint64_t rlen;
	void *base;

	if (!dev)
		return;
	if (!kvt_store_dram_region(store, &base, &rlen))
		kvt_dev_host_unregister(dev, base);
	kvt_dev_close(dev);
}

static void print_summary(const struct kvtd_config *cfg, const struct kvt_server *srv,
			  bool activated, const char *ssd_dir, struct kvt_dev *gpu,
			  const char *gpu_why, struct kvtd_cluster *cl)
{
	char a[32], b[32];

	printf("kvtierd %s ready (protocol %d, pid %d)\n", kvt_version(), KVT_PROTO_VERSION_MAX,
	       (int)getpid());
	if (activated)
		printf("  socket    %s (passed by systemd)\n", cfg->socket_path);
	else
		printf("  socket    %s (mode %04o%s%s)\n", cfg->socket_path, cfg->socket_mode,
		       cfg->socket_group[0] ? ", group " : "", cfg->socket_group);
	printf("  dram      %s%s%s, policy %s\n", kvt_fmt_bytes(cfg->dram_bytes, a, sizeof(a)),
	       cfg->huge_pages ? ", huge pages when available" : "",
	       cfg->prefault ? ", prefaulting in the background" : "", cfg->policy);
	if (cfg->ssd_bytes && cfg->n_ssd_dirs)
		printf("  ssd       %s over %zu directories, admission %s, codec %s\n",
		       kvt_fmt_bytes(cfg->ssd_bytes, b, sizeof(b)), cfg->n_ssd_dirs,
		       cfg->ssd_admission, cfg->ssd_codec);
	else if (cfg->ssd_bytes)
		printf("  ssd       %s under %s, admission %s, codec %s\n",
		       kvt_fmt_bytes(cfg->ssd_bytes, b, sizeof(b)), ssd_dir, cfg->ssd_admission,
		       cfg->ssd_codec);
	else
		printf("  ssd       off\n");
	if (cfg->ssd_short[0])
		printf("            WARNING: short of disk: %s\n", cfg->ssd_short);
	if (gpu) {
		struct kvt_dev_info info = { .size = sizeof(info) };
		kvt_dev_info(gpu, &info);
		printf("  device    cuda: %s (%s), engine memory by CUDA IPC handle; memfds too\n",
		       info.name, info.pci_bus_id);
	} else {
		printf("  device    host: engine memory shared as sealed memfds (cuda: %s)\n", gpu_why);
	}
	printf("  copies    memfd engine memory copied %s\n", cfg->host_copy_device ?
	       "through the device layer's host backend" : "directly by the copy workers");
	printf("  tenants   %zu:", cfg->n_tenants);
	for (size_t i = 0; i < cfg->n_tenants; i++)
		printf(" %s%s", cfg->tenants[i].name, cfg->tenants[i].token[0] ? "" : " (no token)");
	printf("\n  metrics   ");
	if (cfg->metrics[0])
		printf("http://%s/metrics%s\n", cfg->metrics, metrics_exposed(cfg->metrics) ?
		       " (beyond loopback: readable without credentials)" : "");
	else
		printf("off\n");
	printf("  workers   %u copy threads\n", cfg->workers);
	if (cl)
		kvtd_cluster_describe(cl, stdout);
	else
		printf("  cluster   off\n");
	/* RDMA is the cluster's: its line above says whether peers use it */
	printf("  features  save/load/lookup/pin on; per-layer load completion on; cuda ipc %s\n",
	       gpu ? "on" : "off");
	(void)srv;
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static struct kvtd_config cfg;
	struct kvt_server_tenant tenants[KVTD_MAX_TENANTS];
	struct kvt_store_opts sopts;
	struct kvt_server_opts vopts;
	struct kvt_store *store = NULL;
	struct kvt_server *srv = NULL;
	struct kvt_dev *gpu = NULL, *host_dev = NULL;
	struct kvtd_cluster *cluster = NULL;
	char ssd_dir[4200], gpu_why[160] = "";
	struct kvt_ssd_dir ssd_dirs[KVT_SSD_MAX_DIRS];
	char sd_path[sizeof(cfg.socket_path)];
	struct kvtd_handed handed = { -1, -1, -1, -1 };
	struct kvtd_handover *handover = NULL;
	pthread_t sig_thread;
	int err, status = 0, listen_fd, dram_fd = -1, spare_dram_fd, send_err = 0;
	bool handing = false; /* a successor takes the socket and the region */
	bool region_handed = false; /* this successor was handed a region */

	err = kvtd_config_load(&cfg, argc, argv);
	if (err)
		return err > 0 ? 0 : 2;
	if (cfg.print_config) {
		/* refused here whatever the daemon would refuse before it starts
		 * (sizes against this machine's memory and disk, path lengths) */
		err = kvtd_config_check(&cfg);
		if (err == -EINVAL)
			return 2;
		kvtd_config_print(&cfg, stdout);
		return 0;
	}
	kvtd_log_set_level(cfg.log_level);
	drain_timeout_ns = (uint64_t)cfg.drain_timeout_ms * 1000000;
	kvt_log_set_handler(kvtd_log_cb, NULL); /* the library's lines too */
	/* a successor takes the socket and the region from the daemon it
	 * replaces; else socket activation: serve the socket systemd holds,
	 * named by its path, and the region its fd store kept */
	sd_path[0] = 0;
	if (cfg.take_over[0]) {
		if (take_over(&cfg, &handed))
			return 1;
		listen_fd = handed.sidecar >= 0 ? handed.sidecar : 0;
		dram_fd = handed.dram;
		region_handed = dram_fd >= 0;
	} else {
		listen_fd = kvtd_sd_listen_fd(sd_path, sizeof(sd_path), &dram_fd);
	}
	if (listen_fd < 0) {
		kvtd_log(KVT_LOG_ERROR, "event=exit status=1 err=\"%s\" reason=\"bad socket from "
			 "systemd\"", kvt_strerror(listen_fd));
		return 1;
	}
	if (listen_fd > 0 && sd_path[0])
		snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", sd_path);
	if (install_signals(&sig_thread))
		return 1;
	raise_nofile();
	err = kvtd_config_resolve(&cfg);
	if (err) {
		/* a setting that cannot work here (a size, a path) was given */
		status = err == -EINVAL ? 2 : 1;
		goto out_signals;
	}
	if (!cfg.warm_restart && dram_fd >= 0) {
		close(dram_fd); /* a region kept before warm restarts were turned off */
		dram_fd = -1;
	}

	if (cfg.ssd_short[0])
		kvtd_log(KVT_LOG_WARN, "event=ssd.short ssd_bytes=%llu reason=\"%s\" action=\"%s\"",
			 (unsigned long long)cfg.ssd_bytes, cfg.ssd_short, cfg.ssd_bytes ?
			 "the SSD tier starts at what fits" : "no SSD tier: DRAM only");
	if (metrics_exposed(cfg.metrics))
		kvtd_log(KVT_LOG_WARN, "event=metrics.exposed addr=%s reason=\"/metrics and /stats "
			 "need no credentials: whoever reaches this address reads the counters\"",
			 cfg.metrics);

	kvt_store_opts_init(&sopts, sizeof(sopts));
	sopts.dram_bytes = cfg.dram_bytes;
	sopts.dram_huge_pages = cfg.huge_pages;
	sopts.policy = cfg.policy;
	sopts.ssd_admission = cfg.ssd_admission;
	sopts.ssd_codec = cfg.ssd_codec;
	sopts.dram_warm = cfg.warm_restart;
	sopts.dram_fd = dram_fd;
	dram_fd = -1; /* the store's now, whatever kvt_store_open returns */
	snprintf(ssd_dir, sizeof(ssd_dir), "%s/ssd", cfg.data_dir);
	if (cfg.ssd_bytes && cfg.n_ssd_dirs) {
		for (size_t k = 0; k < cfg.n_ssd_dirs; k++)
			ssd_dirs[k] = (struct kvt_ssd_dir){ .path = cfg.ssd_dirs[k].path,
							    .bytes = cfg.ssd_dirs[k].bytes };
		sopts.ssd_dirs = ssd_dirs;
		sopts.n_ssd_dirs = cfg.n_ssd_dirs;
		snprintf(ssd_dir, sizeof(ssd_dir), "%s", cfg.ssd_dirs[0].path);
	} else if (cfg.ssd_bytes) {
		sopts.ssd_dir = ssd_dir;
		sopts.ssd_bytes = cfg.ssd_bytes;
	}
	/* a second try without the SSD tier (below) gets the region again */
	spare_dram_fd = sopts.dram_fd >= 0 ? fcntl(sopts.dram_fd, F_DUPFD_CLOEXEC, 0) : -1;
	err = kvt_store_open(&sopts, &store);
	/* over several directories, none opened: each was named in the log */
	if (err && ((sopts.ssd_dir && (err == -ENOSPC || err == -EDQUOT || err == -EIO ||
				       err == -EROFS || err == -EBADMSG)) ||
		    (sopts.n_ssd_dirs && err != -ENOMEM && err != -EINVAL && err != -EBUSY))) {
		/* a disk that fails or is full, or a directory the tier refuses
		 * to touch (its segments are not its meta file's), costs the SSD
		 * tier, not the cache */
		kvtd_log(KVT_LOG_ERROR, "event=ssd.open_failed dir=%s err=\"%s\" action=\"no SSD "
			 "tier: DRAM only\"", ssd_dir, kvt_strerror(err));
		snprintf(cfg.ssd_short, sizeof(cfg.ssd_short), "the SSD tier under %s failed to "
			 "open: %s", ssd_dir, kvt_strerror(err));
		cfg.ssd_bytes = 0;
		sopts.ssd_dir = NULL;
		sopts.ssd_bytes = 0;
		sopts.n_ssd_dirs = 0;
		sopts.dram_fd = spare_dram_fd;
		spare_dram_fd = -1;
		err = kvt_store_open(&sopts, &store);
	}
	if (spare_dram_fd >= 0)
		close(spare_dram_fd);
	if (err) {
		char why[PATH_MAX + 320];

		/* over several directories the tier's log named the one at fault */
		kvtd_explain_store_error(err, sopts.n_ssd_dirs ? NULL : sopts.ssd_dir, why,
					 sizeof(why));
		kvtd_log(KVT_LOG_ERROR, "event=store.open.failed err=\"%s\" %s dram_bytes=%llu",
			 kvt_strerror(err), why, (unsigned long long)cfg.dram_bytes);
		goto out_signals;
	}
	/* a successor that cannot adopt the region it was handed (another
	 * --dram, warm restarts off) declines before it confirms: the old
	 * daemon takes the region back and serves on. Confirming would lose
	 * every block only DRAM holds, which a stop and a start keep (the stop
	 * writes them down) */
	if (region_handed && !region_adopted(store, &cfg)) {
		err = -ENOTSUP;
		goto out_store;
	}
	/* under systemd the region outlives a crash too: the fd store keeps it */
	fd_store("dram", kvt_store_dram_fd(store));

	gpu = open_gpu(&cfg, store, gpu_why, sizeof(gpu_why));
	if (cfg.host_copy_device) {
		struct kvt_dev_opts o;

		kvt_dev_opts_init(&o, sizeof(o));
		o.backend = KVT_DEV_HOST;
		err = kvt_dev_open(&o, &host_dev);
		if (err) {
			kvtd_log(KVT_LOG_ERROR, "event=device.open.failed backend=host err=\"%s\"",
				 kvt_strerror(err));
			goto out_store;
		}
	}

	kvt_server_opts_init(&vopts, sizeof(vopts));
	if (cfg.cluster[0]) {
		err = kvtd_cluster_open(&cfg, store, &vopts.hooks, &cluster);
		if (err)
			goto out_store;
	}
	for (size_t i = 0; i < cfg.n_tenants; i++) {
		tenants[i] = (struct kvt_server_tenant){
			.name = cfg.tenants[i].name,
			.token = cfg.tenants[i].token,
			.salt = (const uint8_t *)cfg.tenants[i].salt,
			.salt_len = (uint32_t)strlen(cfg.tenants[i].salt),
			.models = cfg.tenants[i].models[0] ? cfg.tenants[i].models : NULL,
		};
	}
	if (cfg.socket_group[0]) {
		struct group *g = getgrnam(cfg.socket_group);
		if (!g) {
			kvtd_log(KVT_LOG_ERROR, "event=config.error reason=\"no such group\" group=%s",
				 cfg.socket_group);
			err = -EINVAL;
			goto out_cluster;
		}
		vopts.socket_gid = g->gr_gid;
	}
	vopts.socket_path = cfg.socket_path;
	if (listen_fd > 0)
		vopts.listen_fd = listen_fd;
	vopts.socket_mode = cfg.socket_mode;
	vopts.allow_uids = cfg.allow_uids;
	vopts.n_allow_uids = cfg.n_allow_uids;
	vopts.store = store;
	vopts.tenants = tenants;
	vopts.n_tenants = cfg.n_tenants;
	vopts.workers = cfg.workers;
	/* LOADs from other nodes may take half the copy workers, the rest keep
	 * serving local SAVEs and LOADs while a peer is slow */
	vopts.peer_workers = cluster ? (cfg.workers > 1 ? cfg.workers / 2 : 1) : 0;
	vopts.metrics_addr = cfg.metrics[0] ? cfg.metrics : NULL;
	vopts.dev_cuda = gpu;
	vopts.dev_host = host_dev;
	vopts.hello_timeout_ms = cfg.hello_timeout_ms;
	vopts.plan_retry_ms = cfg.plan_retry_ms;
	vopts.max_conns_per_uid = cfg.max_conns_per_uid;
	vopts.max_ns_per_tenant = cfg.max_ns_per_tenant;
	vopts.mrc_budget = (size_t)cfg.mrc_budget;
	vopts.stats_namespaces = cfg.stats_namespaces;
	vopts.metrics_tenants = cfg.metrics_tenants;
	vopts.log = kvtd_log_cb;
	vopts.log_level = cfg.log_level;
	vopts.prefault_dram = cfg.prefault ? KVT_PREFAULT_BACKGROUND : KVT_PREFAULT_NONE;
	/* the jobs in flight get the drain timeout but a quarter of it (at most
	 * 2 s), which is kept for closing the server and the store */
	vopts.drain_timeout_ms = cfg.drain_timeout_ms -
				 (cfg.drain_timeout_ms / 4 < 2000 ? cfg.drain_timeout_ms / 4 : 2000);
	/* a successor may ask from now on: the stop it asks for waits until the
	 * server runs (set_running) */
	if (cfg.warm_restart) {
		err = kvtd_handover_listen(cfg.handover_socket, handed.handover, handover_cb, NULL,
					   &handover);
		handed.handover = -1; /* its now, or closed */
		if (err)
			kvtd_log(KVT_LOG_WARN, "event=handover.listen.failed socket=%s err=\"%s\" "
				 "reason=\"no hand-over to a successor (systemd's fd store still "
				 "works)\"", cfg.handover_socket, kvt_strerror(err));
		err = 0;
	}
	err = kvt_server_open(&vopts, &srv);
	if (err) {
		kvtd_log(KVT_LOG_ERROR, "event=server.open.failed err=\"%s\" socket=%s metrics=%s",
			 kvt_strerror(err), cfg.socket_path, cfg.metrics[0] ? cfg.metrics : "off");
		goto out_cluster;
	}
	listen_fd = 0; /* the server's now */
	/* the store serves the region and the server the socket: the daemon
	 * that handed them over may go */
	kvtd_handover_confirm(&handed);
	if (cfg.metrics[0] && kvt_server_metrics_port(srv)) {
		/* port 0 asks for any free port: show the one bound */
		char *colon = strrchr(cfg.metrics, ':');
		if (colon && !strcmp(colon, ":0"))
			snprintf(colon, sizeof(cfg.metrics) - (size_t)(colon - cfg.metrics), ":%d",
				 kvt_server_metrics_port(srv));
	}
	/* the socket outlives this process in the fd store, where there is one
	 * ($FDSTORE, set by systemd 254 and later to FileDescriptorStoreMax=):
	 * a stop leaves its file for the next start, which serves the same
	 * socket. Without it the socket is not stored: a manager that drops it
	 * would leave a file no one serves. */
	if (getenv("FDSTORE") && atoi(getenv("FDSTORE")) > 0 &&
	    fd_store("sidecar", kvt_server_listen_fd(srv)))
		kvt_server_keep_path(srv);
	set_running(srv);
	print_summary(&cfg, srv, vopts.listen_fd >= 0, ssd_dir, gpu, gpu_why, cluster);
	kvtd_log(KVT_LOG_INFO, "event=start pid=%d socket=%s%s dram_bytes=%llu ssd_bytes=%llu "
		 "tenants=%zu", (int)getpid(), cfg.socket_path,
		 vopts.listen_fd >= 0 ? " socket_from=systemd" : "", (unsigned long long)cfg.dram_bytes,
		 (unsigned long long)cfg.ssd_bytes, cfg.n_tenants);
	/* Type=notify: the store is open and the socket is served */
	if (kvtd_sd_notify("READY=1\nSTATUS=serving"))
		kvtd_log(KVT_LOG_WARN, "event=systemd.notify.failed state=READY");
	err = kvt_server_run(srv);
	if (err == -ETIMEDOUT)
		drain_timed_out(srv, store, handover, &cfg); /* closing would wait on it */
	set_running(NULL);
	pthread_mutex_lock(&sig_lock);
	if (handover_asked)
		listen_fd = kvt_server_take_listener(srv); /* the successor's */
	handing = handover_asked && listen_fd > 0;
	pthread_mutex_unlock(&sig_lock);
	if (!handing) {
		/* a clean stop: no successor is answered now */
		kvtd_handover_close(handover, false);
		handover = NULL;
	}
	kvt_server_close(srv);
out_cluster:
	/* no client is served any more: leave, then stop serving peers */
	kvtd_cluster_close(cluster);
out_store:
	/* the server is gone, so no region or copy uses the devices any more */
	kvt_dev_close(host_dev);
	close_gpu(gpu, store);
	if (store && !err && !handing)
		write_down(store, &cfg);
	if (handing) {
		int herr;

		/* the region outlives the store in this dup, until it is sent */
		dram_fd = kvt_store_dram_fd(store) >= 0 ? dup(kvt_store_dram_fd(store)) : -1;
		/* the successor may open the SSD directory and the region now,
		 * while this process unmaps the region (which takes a while on
		 * 4 KiB pages) */
		kvt_store_quiesce(store);
		herr = kvtd_handover_send(handover, listen_fd, dram_fd);
		send_err = herr;

		kvtd_log(herr ? KVT_LOG_ERROR : KVT_LOG_INFO, "event=handover.sent%s%s region=%s",
			 herr ? " err=" : "", herr ? kvt_strerror(herr) : "",
			 dram_fd >= 0 ? "yes" : "no");
	}
	/* closing the store writes back what the tiers keep across restarts */
	kvt_store_close(store);
	if (handing) {
		/* the socket and the region stay ours (in these fds) until the
		 * successor serves them: one that dies first, or never got them
		 * (a failed send), hands them back */
		int cerr = send_err ? send_err :
			   kvtd_handover_wait_confirm(handover, HANDOVER_CONFIRM_MS);

		if (cerr == -ETIMEDOUT)
			kvtd_log(KVT_LOG_WARN, "event=handover.unconfirmed err=\"%s\" action=\"exit: "
				 "the successor keeps the region\"", kvt_strerror(cerr));
		else if (cerr)
			take_back(argv, listen_fd, dram_fd, cerr);
		kvtd_handover_close(handover, true);
		handover = NULL;
		if (dram_fd >= 0)
			close(dram_fd);
		dram_fd = -1;
	}
out_signals:
	kvtd_handover_close(handover, false);
	if (dram_fd >= 0)
		close(dram_fd);
	if (handed.handover >= 0)
		close(handed.handover);
	if (handed.conn >= 0)
		close(handed.conn); /* not serving: the old daemon takes the region back */
	if (listen_fd > 0)
		close(listen_fd); /* never served, or handed over */
	stop_signal_thread(sig_thread);
	if (err && !status)
		status = 1;
	kvtd_log(err ? KVT_LOG_ERROR : KVT_LOG_INFO, "event=exit status=%d%s%s", status,
		 err ? " err=" : "", err ? kvt_strerror(err) : "");
	return status;
}
