/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's configuration: embedded defaults, then a config file (INI, read
 * with libinih), then command-line overrides, each layer over the last. Each
 * option is a row of the table in daemon_options.h. */
#ifndef KVT_APP_DAEMON_CONFIG_H
#define KVT_APP_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "kvtier/store.h"
#include "transport/server.h"

#define KVTD_MAX_TENANTS 64
#define KVTD_MAX_UIDS 64

struct kvtd_tenant {
	char name[64];
	char token[257];              /* KVT_PROTO_MAX_TOKEN + 1 */
	char salt[KVT_SALT_MAX + 1];
	char models[512];
	bool has_token;               /* a token was given (possibly empty) */
};

/* One --ssd-dir: a directory of the SSD tier on a drive of its own. */
struct kvtd_ssd_dir {
	char path[4096];
	char spec[32];                /* its SIZE as written; "" = --ssd's */
	uint64_t bytes;               /* resolved; 0: left out */
};

struct kvtd_config {
	char config_path[4096];
	char socket_path[108];
	unsigned socket_mode;
	char socket_group[64];        /* "" = the daemon's group */
	uid_t allow_uids[KVTD_MAX_UIDS];
	size_t n_allow_uids;
	char data_dir[4096];
	char dram_spec[32];           /* "25%" of available memory, or a size */
	uint64_t dram_bytes;          /* resolved */
	char ssd_spec[32];            /* a size, a % of the data dir's free space, "0" = off */
	uint64_t ssd_bytes;           /* resolved */
	char ssd_short[4608];         /* why ssd_bytes is below what ssd_spec asks
	                               * (the disk is full), else "" */
	struct kvtd_ssd_dir ssd_dirs[KVT_SSD_MAX_DIRS]; /* --ssd-dir: the tier over
	                               * these instead of DATA_DIR/ssd */
	size_t n_ssd_dirs;            /* ssd_bytes is then their sum */
	bool huge_pages;
	bool prefault;                /* fault the DRAM tier in at start */
	bool host_copy_device;        /* memfd copies through the device layer */
	bool gpu;                     /* serve CUDA IPC registrations when a GPU is there */
	char policy[16];
	char ssd_admission[16];       /* rule for writes to SSD (store/admission.h) */
	char ssd_codec[24];           /* encoding of SSD records (tiers/codec.h) */
	char metrics[64];             /* "HOST:PORT" or "" = off */
	unsigned workers;
	unsigned drain_timeout_ms;    /* SIGTERM ends the process within this */
	unsigned plan_retry_ms;       /* a tier's stale measurement is retried */
	unsigned hello_timeout_ms;    /* 0 = connections may wait for ever */
	unsigned max_conns_per_uid;   /* 0 = no cap per uid */
	unsigned max_ns_per_tenant;   /* 0 = no cap per tenant */
	char mrc_budget_spec[32];     /* memory of the live miss-ratio curves */
	uint64_t mrc_budget;          /* resolved; 0 = none */
	unsigned stats_namespaces;    /* namespaces with their own figures */
	bool metrics_tenants;         /* per-tenant series on the endpoint */
	enum kvt_log_level log_level;
	struct kvtd_tenant tenants[KVTD_MAX_TENANTS];
	size_t n_tenants;
	/* the cluster (all empty: a node of its own) */
	char cluster[256];            /* directory URL: redis://HOST:PORT, unix:///PATH */
	char node_id[65];             /* [A-Za-z0-9._-], 1..64 */
	char peer_listen[129];        /* ADDR:PORT peers connect to (and are told) */
	char cluster_secret_file[4096]; /* default DATA_DIR/cluster.secret */
	char rdma_device[32];         /* "" = TCP only */
	unsigned peer_timeout_ms;     /* a peer that makes no progress fails (2000) */
	bool print_config;            /* print the effective config and exit */
	/* warm restart (docs/restart.md) */
	bool warm_restart;            /* the DRAM tier in a memfd a successor or
	                               * systemd's fd store keeps (default true) */
	char handover_socket[108];    /* where a successor asks to take over;
	                               * default: the socket's path + ".takeover" */
	char take_over[108];          /* --take-over: the running daemon's
	                               * hand-over socket ("" = start anew) */
};

/* Fill cfg with the embedded defaults (they depend on the uid and the
 * environment, see kvtd_usage). */
void kvtd_config_defaults(struct kvtd_config *cfg);

/* Build cfg from defaults, the --config file and the command line. Returns
 * 0, 1 when --help/--version was handled (exit 0), or -EINVAL with a message
 * on stderr (exit 2). */
int kvtd_config_load(struct kvtd_config *cfg, int argc, char **argv);

/* Resolve the sizes (percentages of the memory this process may use, see
 * daemon_memory.h, and of the data directory's free space) and create the
 * data directory and the socket's directory. Returns 0, -EINVAL for a
 * setting that cannot work here (a usage error), or another -errno, each
 * with a message. */
int kvtd_config_resolve(struct kvtd_config *cfg);

/* The checks of kvtd_config_resolve on a copy of cfg, making nothing (the
 * data directory's file system is that of its nearest existing folder):
 * for --print-config, which refuses what the daemon would. Returns 0,
 * -EINVAL (a usage error, with its message), -ENOMEM, or another -errno. */
int kvtd_config_check(const struct kvtd_config *cfg);

/* Print the effective configuration as an INI file kvtierd reads back. */
void kvtd_config_print(const struct kvtd_config *cfg, FILE *f);

void kvtd_usage(FILE *f);

#endif /* KVT_APP_DAEMON_CONFIG_H */
