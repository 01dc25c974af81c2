/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's configuration: defaults, INI file (libinih), command line. */
#include "app/daemon_config.h"

#include <ctype.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <ini.h>

#include "app/daemon_memory.h"
#include "store/admission.h"
#include "store/policy.h"
#include "tiers/codec.h"
#include "transport/proto.h"
#include "util/size.h"

#define DEFAULT_DRAM "25%"
#define DEFAULT_SSD "50%"
#define DEFAULT_METRICS "127.0.0.1:9464"
#define KVTD_CONFIG_MAX_BYTES (1 << 20)
/* The smallest SSD tier: one segment of the smallest size (4 MiB). */
#define KVTD_SSD_MIN (4ull << 20)
#define KVTD_CONFIG_MAX_TEXT "1 MiB"

void kvtd_usage(FILE *f)
{
	fputs(
"NAME\n"
"    kvtierd - the kvtier sidecar daemon: a tiered KV-cache block store for an\n"
"    inference engine on the same node\n"
"\n"
"SYNOPSIS\n"
"    kvtierd [--config FILE] [OPTIONS]\n"
"\n"
"DESCRIPTION\n"
"    kvtierd owns the tiers (pinned host DRAM, an SSD segment log under a data\n"
"    directory) and serves engines over a Unix socket: they save blocks of KV\n"
"    cache by prefix key, look them up and load them back. It runs in the\n"
"    foreground, logs one structured line per event to stderr, and stops\n"
"    gracefully on SIGTERM or SIGINT (stops accepting, finishes the copies in\n"
"    flight, closes the store).\n"
"\n"
"    Settings come from the embedded defaults, then the config file, then the\n"
"    options below, each overriding the last. Sizes take K, M, G, T (powers of\n"
"    1024) or a percentage.\n"
"\n"
"OPTIONS\n"
"    -c, --config FILE     INI file to read (see CONFIGURATION): a regular file\n"
"                          of at most 1 MiB.\n"
"    -s, --socket PATH     Unix socket to listen on. Default: $KVTIER_SOCKET, or\n"
"                          /run/kvtier/kvtierd.sock as root, else\n"
"                          /tmp/kvtier-UID/kvtierd.sock.\n"
"        --socket-mode MODE  Octal mode of the socket (default 0660).\n"
"        --socket-group GROUP  Group of the socket; its members may connect,\n"
"                          by primary or supplementary group (default: the\n"
"                          daemon's group).\n"
"        --allow-uid UID   Also let this uid connect (repeatable). Root and the\n"
"                          daemon's own uid always may; every peer's credentials\n"
"                          are checked (SO_PEERCRED).\n"
"    -d, --data-dir DIR    Directory of the SSD tier. Default: /var/lib/kvtier as\n"
"                          root, else $XDG_DATA_HOME/kvtier or\n"
"                          ~/.local/share/kvtier.\n"
"        --dram SIZE       DRAM tier capacity (default " DEFAULT_DRAM "); N% is of the\n"
"                          memory this process may use: the host's available\n"
"                          memory, or the room left under its cgroup's memory\n"
"                          limit (v2 memory.max, v1 memory.limit_in_bytes) when\n"
"                          that is less. From 1 MiB to that; more is refused.\n"
"        --ssd SIZE        SSD tier capacity, 4 MiB to the size of the data\n"
"                          directory's file system; N% is of the free space\n"
"                          (default " DEFAULT_SSD ", at most 64G when a\n"
"                          percentage); 0 turns the tier off. When the free\n"
"                          space plus what the tier holds is less, the tier\n"
"                          starts at that (off under 4 MiB), with a warning.\n"
"        --no-huge-pages   Map the DRAM tier with 4 KiB pages only (neither\n"
"                          reserved nor transparent huge pages).\n"
"        --no-prefault     Do not fault the DRAM tier in (by default a thread\n"
"                          does it while the daemon serves, 64 MiB at a time, so\n"
"                          saves stop paying for first-touch page faults).\n"
"        --policy NAME     Eviction policy: tail-lru (default), lru, lfu, cost,\n"
"                          ghost-lru (tail-lru that evicts blocks used once first\n"
"                          while they hold more than an adaptive share),\n"
"                          ghost-ends (ghost-lru that also evicts first the\n"
"                          blocks where requests ended, bar the newest),\n"
"                          class-lru (tail-lru that learns per reuse class,\n"
"                          the hint a client's SAVE may carry, how often new\n"
"                          blocks come back, and evicts first the new blocks\n"
"                          of classes that rarely do), class-ends (class-lru\n"
"                          that also evicts request ends first).\n"
"        --ssd-admission RULE  Which blocks leaving DRAM for room are written to\n"
"                          the SSD tier; the others are dropped, saving the\n"
"                          device's bandwidth and wear for blocks that come\n"
"                          back. always (default: every block), reused (blocks\n"
"                          used at least twice: looked up, loaded or saved\n"
"                          again after their first save, or saved again while\n"
"                          the rule remembers refusing them), useful (blocks\n"
"                          used twice, and blocks used once of a class, ends\n"
"                          or inner, that the SSD tier is seen to read back\n"
"                          often enough for the room they take; one block in\n"
"                          16 is always written to measure it). A block\n"
"                          with a clean copy on SSD moves there whatever the\n"
"                          rule. Refused blocks are counted (kvtier stats,\n"
"                          /metrics). No effect with --ssd 0.\n"
"        --ssd-codec CODEC  How blocks are encoded on the SSD tier, for every\n"
"                          namespace: raw (default: as they are), auto\n"
"                          (shuf16-pack4 for bf16 namespaces, raw for others),\n"
"                          shuf16-pack4 (bf16 K/V: the low byte of each value\n"
"                          kept, the high byte (sign and exponent) as a 4-bit\n"
"                          code; 1.33x smaller, encoding at about half and\n"
"                          decoding near memcpy's speed on one core),\n"
"                          shuf16-zstd (the high byte Huffman-coded by zstd:\n"
"                          about 1.5x smaller on bf16 K/V, encoding at about a\n"
"                          quarter of memcpy's speed), blosc-bitshuf16-lz4,\n"
"                          blosc-shuf16-zstd, shuf16-lz4, lz4. A block that\n"
"                          shrinks less than 1.1x is stored raw; blocks come\n"
"                          back as they were saved. Costs CPU on every write\n"
"                          to and read from SSD: worth it where the SSD, not\n"
"                          the CPU, limits (kvtier-bench ssd measures both).\n"
"                          No effect with --ssd 0.\n"
"        --host-copy HOW   How memfd engine memory is copied: direct (default;\n"
"                          the daemon maps it and copies) or device (through the\n"
"                          device layer's host backend, as GPU memory is).\n"
"        --no-gpu          Do not open the GPU even when one is there (engines\n"
"                          then register host memory only). By default a GPU is\n"
"                          driven when present, and engines register their KV\n"
"                          memory with CUDA IPC handles.\n"
"    -m, --metrics ADDR:PORT  Prometheus endpoint (GET /metrics, and /stats as\n"
"                          JSON). Default " DEFAULT_METRICS "; \"off\" disables.\n"
"        --metrics-tenants  The endpoint also gives lookups, hits and tokens\n"
"                          saved per tenant and per namespace, labelled with the\n"
"                          tenants' names and the model ids (by default it names\n"
"                          no tenant nor model: it needs no credentials).\n"
"    -w, --workers N       Copy threads for SAVE and LOAD (default 4).\n"
"        --hello-timeout SECONDS  Close a connection that has not said a\n"
"                          successful HELLO this long after it connected\n"
"                          (default 5; 0 turns it off; up to 3600).\n"
"        --max-conns-per-uid N  Connections one peer uid may hold (default 256;\n"
"                          0 = no cap but the daemon's own; up to 65535).\n"
"        --max-ns-per-tenant N  Namespaces (model, layout, shard) one tenant may\n"
"                          have attached (default 1024; 0 = no cap but the\n"
"                          store's 65535). A namespace with no block and no\n"
"                          connection left is detached, and counts no more.\n"
"        --mrc-budget SIZE  Memory for the live miss-ratio curves (the hit ratio\n"
"                          each tier would have at 1/8 to 8 times its size,\n"
"                          from sampled reuse distances of the keys looked up;\n"
"                          kvtier stats --mrc): the daemon-wide one and, within\n"
"                          half of it, 512 KiB per namespace with figures\n"
"                          (default 8M; 0 turns them off; at most 1G).\n"
"        --stats-namespaces N  Namespaces with their own figures (lookups,\n"
"                          hits, tokens saved) in STATS and the metrics\n"
"                          (default 16; 0 to 4096); a tenant's namespaces past\n"
"                          them count as its \"other\".\n"
"        --plan-retry SECONDS  LOOKUP's plan stops loading from a tier that\n"
"                          delivers slower than the engine recomputes; once its\n"
"                          measurement is this old, one LOOKUP loads from it\n"
"                          again to measure it anew (default 30; 0.1 to 86400,\n"
"                          \"ms\" or \"s\" suffix allowed).\n"
"        --drain-timeout SECONDS  After SIGTERM or SIGINT, how long the process\n"
"                          may take to end (default 30; 0.1 to 3600, \"ms\" or \"s\"\n"
"                          suffix allowed). The SAVEs and LOADs in flight get\n"
"                          all of it but a quarter (at most 2 s) kept for closing\n"
"                          the store; past it the process exits with status 1\n"
"                          without closing the store, even if a copy is stuck\n"
"                          (the SSD log is crash-safe).\n"
"        --no-warm-restart  Map the DRAM tier privately: it is lost at every\n"
"                          restart. By default it lives in a memfd, with a\n"
"                          header per block, that survives a restart: kept by\n"
"                          systemd's fd store (FileDescriptorStoreMax=), also\n"
"                          across a crash, or handed to a successor\n"
"                          (--take-over); a clean stop without a successor\n"
"                          writes the blocks only DRAM holds to the SSD tier\n"
"                          first, within the drain timeout.\n"
"        --handover-socket PATH  Where a successor asks this daemon to hand\n"
"                          over (mode 0600; only the daemon's uid is answered).\n"
"                          Default: the socket's path with \".takeover\".\n"
"        --take-over PATH  Start as the successor of the daemon whose\n"
"                          hand-over socket is PATH: it stops accepting,\n"
"                          drains, and hands over its listening socket and\n"
"                          DRAM tier; engines reconnect to the same socket\n"
"                          and find their blocks.\n"
"    -t, --tenant NAME:TOKEN[:SALT]  Add a tenant (repeatable; replaces the\n"
"                          default tenant). Tenants with the same SALT share\n"
"                          blocks; the salt defaults to the name.\n"
"    -l, --log-level LEVEL  error, warn, info (default) or debug.\n"
"\n"
"  Cluster (blocks shared between kvtierd nodes; see CLUSTER):\n"
"        --cluster URL     Join the cluster whose directory is this Redis:\n"
"                          redis://HOST:PORT (or unix:///PATH). Needs\n"
"                          --node-id and --peer-listen.\n"
"        --node-id ID      This node's name in the cluster: 1-64 characters of\n"
"                          A-Z a-z 0-9 . _ - (e.g. the host name).\n"
"        --peer-listen ADDR:PORT  Where other nodes fetch this node's blocks:\n"
"                          an IPv4 address they can reach (not 0.0.0.0), told\n"
"                          to them through the directory.\n"
"        --cluster-secret-file FILE  The cluster secret, 16-1024 bytes, mode\n"
"                          0600; every node needs the same one. Default\n"
"                          DATA_DIR/cluster.secret.\n"
"        --rdma-device NAME  Read peers' DRAM with one-sided RDMA READs on\n"
"                          this libibverbs device (e.g. mlx5_0; ibv_devices\n"
"                          lists them), and lend this node's DRAM to peers'\n"
"                          READs under short leases. The DRAM tier is\n"
"                          registered once, remote-read only; the device,\n"
"                          port, GID and region go into the node's record.\n"
"                          Peers without RDMA are still read over TCP. A\n"
"                          device that does not open stops the start (exit\n"
"                          1), naming the devices found. Default: none, TCP\n"
"                          only.\n"
"        --peer-timeout MS  A peer that makes no progress for this long fails\n"
"                          its blocks (they are asked of another holder, or\n"
"                          missed) (default 2000).\n"
"\n"
"        --print-config    Print the effective configuration as INI and exit.\n"
"    -h, --help            This text.\n"
"    -V, --version         Print the version.\n"
"\n"
"CONFIGURATION\n"
"    The file has a [kvtierd] section with the long option names as keys\n"
"    (socket, socket_mode, socket_group, allow_uids = 1000,1001, data_dir,\n"
"    dram, ssd, huge_pages = true|false, prefault = true|false, policy,\n"
"    ssd_admission, ssd_codec, host_copy = direct|device, gpu = true|false,\n"
"    metrics, workers, hello_timeout, max_conns_per_uid, max_ns_per_tenant,\n"
"    plan_retry, drain_timeout, mrc_budget, stats_namespaces,\n"
"    metrics_tenants = true|false, log_level, warm_restart = true|false,\n"
"    handover_socket, cluster, node_id, peer_listen,\n"
"    cluster_secret_file, rdma_device, peer_timeout)\n"
"    and one [tenant NAME] section per tenant:\n"
"\n"
"        [kvtierd]\n"
"        socket = /run/kvtier/kvtierd.sock\n"
"        dram = 64G\n"
"        metrics = 127.0.0.1:9464\n"
"\n"
"        [tenant alice]\n"
"        token = s3cret-a\n"
"        salt = team-a           ; tenants with equal salts share blocks\n"
"        models = Qwen/*, meta-llama/Llama-3.1-8B   ; model ids allowed (fnmatch)\n"
"\n"
"    Without tenants, one tenant named \"default\" with an empty token serves\n"
"    every client the socket lets in.\n"
"\n"
"CLUSTER\n"
"    With --cluster, nodes share blocks: a prefix saved on one node loads on\n"
"    another instead of being recomputed. Each node keeps its membership (a\n"
"    record renewed every second under a 3 s TTL, an epoch from INCR) and a\n"
"    hint per saved block in Redis. A LOOKUP that misses locally asks Redis\n"
"    for the rest of the prefix (at most 50 ms) and reports those blocks\n"
"    with tier remote; a LOAD fetches them from a holder over TCP into DRAM,\n"
"    checksummed end to end, and asks the next holder when one fails. Peers\n"
"    prove the cluster secret (HMAC) before anything is served. Redis out of\n"
"    reach means local-only, and the node rejoins by itself when it is back.\n"
"    Peer traffic is authenticated, not encrypted: on an untrusted network run\n"
"    it over WireGuard or IPsec.\n"
"\n"
"ENVIRONMENT\n"
"    KVTIER_SOCKET         Default socket path (the client library reads it too).\n"
"    KVTIER_CGROUP_DIR     Read the memory limit from this cgroup directory\n"
"                          instead of the process's own (containers that mount\n"
"                          it elsewhere; tests).\n"
"    LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES  Socket activation (systemd's\n"
"                          kvtierd.socket): the listening Unix socket passed as\n"
"                          fd 3 (or the one named \"sidecar\") is served instead\n"
"                          of binding --socket; its mode and owner are the\n"
"                          socket unit's, and it is left in place at exit.\n"
"    NOTIFY_SOCKET         Where READY=1 (serving) and STOPPING=1 (draining)\n"
"                          are sent, for systemd's Type=notify.\n"
"\n"
"EXIT STATUS\n"
"    0 after a graceful stop, 1 on a runtime error, 2 on a usage error.\n", f);
}

static void set_str(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src);
}

void kvtd_config_defaults(struct kvtd_config *cfg)
{
	const char *env = getenv("KVTIER_SOCKET"), *home, *xdg;

	memset(cfg, 0, sizeof(*cfg));
	if (env && *env)
		set_str(cfg->socket_path, sizeof(cfg->socket_path), env);
	else if (geteuid() == 0)
		set_str(cfg->socket_path, sizeof(cfg->socket_path), "/run/kvtier/kvtierd.sock");
	else
		snprintf(cfg->socket_path, sizeof(cfg->socket_path), "/tmp/kvtier-%u/kvtierd.sock",
			 (unsigned)geteuid());
	cfg->socket_mode = 0660;
	xdg = getenv("XDG_DATA_HOME");
	home = getenv("HOME");
	if (geteuid() == 0)
		set_str(cfg->data_dir, sizeof(cfg->data_dir), "/var/lib/kvtier");
	else if (xdg && *xdg)
		snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/kvtier", xdg);
	else
		snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/.local/share/kvtier",
			 home && *home ? home : "/tmp");
	set_str(cfg->dram_spec, sizeof(cfg->dram_spec), DEFAULT_DRAM);
	set_str(cfg->ssd_spec, sizeof(cfg->ssd_spec), DEFAULT_SSD);
	cfg->huge_pages = true;
	cfg->prefault = true;
	cfg->gpu = true;
	cfg->warm_restart = true;
	set_str(cfg->policy, sizeof(cfg->policy), "tail-lru");
	set_str(cfg->ssd_admission, sizeof(cfg->ssd_admission), "always");
	set_str(cfg->ssd_codec, sizeof(cfg->ssd_codec), "raw");
	set_str(cfg->metrics, sizeof(cfg->metrics), DEFAULT_METRICS);
	cfg->workers = 4;
	cfg->drain_timeout_ms = 30000;
	cfg->plan_retry_ms = 30000;
	cfg->hello_timeout_ms = 5000;
	cfg->max_conns_per_uid = 256;
	cfg->max_ns_per_tenant = 1024;
	set_str(cfg->mrc_budget_spec, sizeof(cfg->mrc_budget_spec), "8M");
	cfg->mrc_budget = 8u << 20;
	cfg->stats_namespaces = 16;
	cfg->log_level = KVT_LOG_INFO;
	cfg->peer_timeout_ms = 2000;
}

static int parse_level(const char *s, enum kvt_log_level *out)
{
	static const char *names[] = { "error", "warn", "info", "debug" };

	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, names[i])) {
			*out = (enum kvt_log_level)i;
			return 0;
		}
	}
	if (!strcasecmp(s, "warning")) {
		*out = KVT_LOG_WARN;
		return 0;
	}
	return -EINVAL;
}

static int parse_uint(const char *s, unsigned base, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, (int)base);
	if (errno || end == s || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* A duration in seconds ("30", "2.5", "30s") or milliseconds ("500ms"),
 * within [min_ms, max_ms]. */
static int parse_duration_ms(const char *s, unsigned min_ms, unsigned max_ms, unsigned *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v >= 0))
		return -EINVAL;
	if (!strcmp(end, "ms"))
		;
	else if (!*end || !strcmp(end, "s"))
		v *= 1000;
	else
		return -EINVAL;
	if (v < min_ms || v > max_ms)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* v as a decimal from min to max into *out; 0 or -EINVAL. */
static int set_uint(const char *v, unsigned long min, unsigned long max, unsigned *out)
{
	unsigned long n;

	if (parse_uint(v, 10, max, &n) || n < min)
		return -EINVAL;
	*out = (unsigned)n;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	if (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") || !strcmp(s, "1"))
		*out = true;
	else if (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off") || !strcmp(s, "0"))
		*out = false;
	else
		return -EINVAL;
	return 0;
}

static int add_uids(struct kvtd_config *cfg, const char *list)
{
	char buf[1024], *save, *tok;
	unsigned long v;

	set_str(buf, sizeof(buf), list);
	for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		if (parse_uint(tok, 10, UINT_MAX - 1, &v) || cfg->n_allow_uids >= KVTD_MAX_UIDS)
			return -EINVAL;
		cfg->allow_uids[cfg->n_allow_uids++] = (uid_t)v;
	}
	return 0;
}

static bool fits(const char *v, size_t cap)
{
	return strlen(v) < cap;
}

/* Whether v has no control character: each setting is one INI line, and
 * --print-config must write it back as one. */
static bool one_line(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 || *v == 0x7f)
			return false;
	return true;
}

/* A tenant's name is written back as "[tenant NAME]": one line, no
 * brackets or quotes, no space at either end. */
static bool tenant_name_ok(const char *name)
{
	size_t len = strlen(name);

	return len && one_line(name) && !strpbrk(name, "[]\"") && name[0] != ' ' &&
	       name[len - 1] != ' ';
}

/* What a setting accepts, for the message of a usage error. */
static const char *accepted(const char *key)
{
	static const struct { const char *key, *what; } hints[] = {
		{ "socket", "a non-empty path shorter than 108 bytes" },
		{ "socket_mode", "an octal mode from 0 to 0777" },
		{ "socket_group", "a group name" },
		{ "allow_uid", "uids, comma-separated, at most 64" },
		{ "allow_uids", "uids, comma-separated, at most 64" },
		{ "data_dir", "a non-empty directory path" },
		{ "dram", "a size (K, M, G, T: powers of 1024) or a percentage" },
		{ "ssd", "a size (K, M, G, T: powers of 1024), a percentage, or 0 for none" },
		{ "huge_pages", "true or false" },
		{ "prefault", "true or false" },
		{ "gpu", "true or false" },
		{ "host_copy", "direct or device" },
		{ "ssd_codec", "raw, auto, lz4, shuf16-lz4, blosc-bitshuf16-lz4, blosc-shuf16-zstd, "
			       "shuf16-zstd or shuf16-pack4" },
		{ "metrics", "HOST:PORT with an IPv4 address or localhost and a port from 0 to "
			     "65535 (0: any free one), or off" },
		{ "workers", "1 to 256" },
		{ "hello_timeout", "0 (never) or 0.1 to 3600 seconds (\"ms\" or \"s\" suffix)" },
		{ "max_conns_per_uid", "0 (no cap) to 65535" },
		{ "max_ns_per_tenant", "0 (no cap) to 65535" },
		{ "drain_timeout", "0.1 to 3600 seconds (\"ms\" or \"s\" suffix)" },
		{ "plan_retry", "0.1 to 86400 seconds (\"ms\" or \"s\" suffix)" },
		{ "mrc_budget", "0 (none) or a size from 1M to 1G (K, M, G: powers of 1024)" },
		{ "stats_namespaces", "0 to 4096" },
		{ "metrics_tenants", "true or false" },
		{ "warm_restart", "true or false" },
		{ "handover_socket", "a path shorter than 108 bytes" },
		{ "take_over", "a path shorter than 108 bytes" },
		{ "log_level", "error, warn, info or debug" },
		{ "cluster", "redis://HOST:PORT or unix:///PATH" },
		{ "node_id", "1 to 64 characters of A-Z a-z 0-9 . _ -" },
		{ "peer_listen", "ADDR:PORT, an IPv4 address peers reach (not 0.0.0.0) and a "
				 "port from 1 to 65535" },
		{ "cluster_secret_file", "a file path" },
		{ "rdma_device", "an RDMA device name (e.g. mlx5_0)" },
		{ "peer_timeout", "10 to 600000 milliseconds" },
	};

	if (!strcmp(key, "policy"))
		return kvt_policy_names();
	if (!strcmp(key, "ssd_admission"))
		return kvt_admission_names();
	for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
		if (!strcmp(hints[i].key, key))
			return hints[i].what;
	return "a valid value";
}

/* "HOST:PORT": an IPv4 address (or localhost) and a port from 0 to 65535. */
static bool metrics_addr_ok(const char *v)
{
	const char *colon = strrchr(v, ':');
	char host[64];
	struct in_addr a;
	unsigned long port;

	if (!colon || (size_t)(colon - v) >= sizeof(host) || parse_uint(colon + 1, 10, 65535, &port))
		return false;
	memcpy(host, v, (size_t)(colon - v));
	host[colon - v] = 0;
	return !*host || !strcmp(host, "localhost") || inet_pton(AF_INET, host, &a) == 1;
}

/* 1..64 characters of [A-Za-z0-9._-] (what the directory and the peer
 * handshake accept). */
static bool node_id_ok(const char *v)
{
	size_t n = strlen(v);

	if (n < 1 || n > 64)
		return false;
	for (; *v; v++)
		if (!isalnum((unsigned char)*v) && *v != '.' && *v != '_' && *v != '-')
			return false;
	return true;
}

/* An IPv4 address peers can reach and a port: what this node tells them. */
static bool peer_addr_ok(const char *v)
{
	const char *colon = strrchr(v, ':');
	char host[64];
	unsigned a, b, c, d, port;
	char tail;

	if (!colon || (size_t)(colon - v) >= sizeof(host))
		return false;
	memcpy(host, v, (size_t)(colon - v));
	host[colon - v] = 0;
	if (sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 ||
	    c > 255 || d > 255 || (a | b | c | d) == 0)
		return false;
	return sscanf(colon + 1, "%u%c", &port, &tail) == 1 && port >= 1 && port <= 65535;
}

/* One setting of [kvtierd] or of the command line; key uses '_' or '-'. */
static int apply(struct kvtd_config *cfg, const char *key, const char *v)
{
	char k[64];
	unsigned long n;
	uint64_t size;

	set_str(k, sizeof(k), key);
	for (char *p = k; *p; p++)
		if (*p == '-')
			*p = '_';
#define STR(field) (fits(v, sizeof(cfg->field)) && one_line(v) ? \
			 (set_str(cfg->field, sizeof(cfg->field), v), 0) : -EINVAL)
	if (!strcmp(k, "socket"))
		return *v ? STR(socket_path) : -EINVAL;
	if (!strcmp(k, "socket_mode")) {
		if (parse_uint(v, 8, 0777, &n))
			return -EINVAL;
		cfg->socket_mode = (unsigned)n;
		return 0;
	}
	if (!strcmp(k, "socket_group"))
		return STR(socket_group);
	if (!strcmp(k, "allow_uid") || !strcmp(k, "allow_uids"))
		return add_uids(cfg, v);
	if (!strcmp(k, "data_dir"))
		return *v ? STR(data_dir) : -EINVAL;
	if (!strcmp(k, "dram"))
		return kvt_parse_size(v, 100, &size) ? -EINVAL : STR(dram_spec);
	if (!strcmp(k, "ssd"))
		return kvt_parse_size(v, 100, &size) ? -EINVAL : STR(ssd_spec);
	if (!strcmp(k, "huge_pages"))
		return parse_bool(v, &cfg->huge_pages);
	if (!strcmp(k, "prefault"))
		return parse_bool(v, &cfg->prefault);
	if (!strcmp(k, "gpu"))
		return parse_bool(v, &cfg->gpu);
	if (!strcmp(k, "host_copy")) {
		if (strcmp(v, "direct") && strcmp(v, "device"))
			return -EINVAL;
		cfg->host_copy_device = !strcmp(v, "device");
		return 0;
	}
	if (!strcmp(k, "policy"))
		return kvt_policy_find(v) ? STR(policy) : -EINVAL;
	if (!strcmp(k, "ssd_admission"))
		return kvt_admission_find(v) ? STR(ssd_admission) : -EINVAL;
	if (!strcmp(k, "ssd_codec"))
		return kvt_codec_parse(v) >= 0 || !strcmp(v, KVT_SSD_CODEC_AUTO) ? STR(ssd_codec)
									     : -EINVAL;
	if (!strcmp(k, "metrics")) {
		if (!strcmp(v, "off") || !*v) {
			cfg->metrics[0] = 0;
			return 0;
		}
		return metrics_addr_ok(v) ? STR(metrics) : -EINVAL;
	}
	if (!strcmp(k, "workers"))
		return set_uint(v, 1, 256, &cfg->workers);
	if (!strcmp(k, "hello_timeout")) {
		unsigned ms;

		if (parse_duration_ms(v, 0, 3600 * 1000, &ms) || (ms && ms < 100))
			return -EINVAL;
		cfg->hello_timeout_ms = ms; /* 0: off */
		return 0;
	}
	if (!strcmp(k, "max_conns_per_uid"))
		return set_uint(v, 0, 65535, &cfg->max_conns_per_uid);
	if (!strcmp(k, "max_ns_per_tenant"))
		return set_uint(v, 0, 65535, &cfg->max_ns_per_tenant);
	if (!strcmp(k, "drain_timeout"))
		return parse_duration_ms(v, 100, 3600 * 1000, &cfg->drain_timeout_ms);
	if (!strcmp(k, "plan_retry"))
		return parse_duration_ms(v, 100, 86400 * 1000, &cfg->plan_retry_ms);
	if (!strcmp(k, "mrc_budget")) {
		if (kvt_parse_size(v, 0, &size) || (size && (size < (1u << 20) || size > (1u << 30))))
			return -EINVAL;
		cfg->mrc_budget = size;
		return STR(mrc_budget_spec);
	}
	if (!strcmp(k, "stats_namespaces"))
		return set_uint(v, 0, 4096, &cfg->stats_namespaces);
	if (!strcmp(k, "metrics_tenants"))
		return parse_bool(v, &cfg->metrics_tenants);
	if (!strcmp(k, "warm_restart"))
		return parse_bool(v, &cfg->warm_restart);
	if (!strcmp(k, "handover_socket"))
		return STR(handover_socket);
	if (!strcmp(k, "take_over"))
		return STR(take_over);
	if (!strcmp(k, "log_level"))
		return parse_level(v, &cfg->log_level);
	if (!strcmp(k, "cluster")) {
		if (*v && strncmp(v, "redis://", 8) && strncmp(v, "unix://", 7))
			return -EINVAL;
		return STR(cluster);
	}
	if (!strcmp(k, "node_id"))
		return node_id_ok(v) ? STR(node_id) : -EINVAL;
	if (!strcmp(k, "peer_listen"))
		return peer_addr_ok(v) ? STR(peer_listen) : -EINVAL;
	if (!strcmp(k, "cluster_secret_file"))
		return *v ? STR(cluster_secret_file) : -EINVAL;
	if (!strcmp(k, "rdma_device"))
		return STR(rdma_device);
	if (!strcmp(k, "peer_timeout")) {
		if (parse_uint(v, 10, 600000, &n) || n < 10)
			return -EINVAL;
		cfg->peer_timeout_ms = (unsigned)n;
		return 0;
	}
#undef STR
	return -ENOENT;
}

static struct kvtd_tenant *tenant_find(struct kvtd_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_tenants; i++)
		if (!strcmp(cfg->tenants[i].name, name))
			return &cfg->tenants[i];
	return NULL;
}

static struct kvtd_tenant *tenant_named(struct kvtd_config *cfg, const char *name)
{
	struct kvtd_tenant *t = tenant_find(cfg, name);

	if (t)
		return t;
	/* the name is the default salt: it must fit whole, or two long names
	 * alike in their first bytes would share blocks */
	if (cfg->n_tenants >= KVTD_MAX_TENANTS || !tenant_name_ok(name) ||
	    !fits(name, sizeof(t->salt)))
		return NULL;
	t = &cfg->tenants[cfg->n_tenants++];
	set_str(t->name, sizeof(t->name), name);
	set_str(t->salt, sizeof(t->salt), name);
	return t;
}

/* Whether section is "tenant NAME" (or "tenant:NAME", NAME maybe quoted);
 * NAME goes to name. */
static bool tenant_section(const char *section, char *name, size_t cap)
{
	const char *n = section + 7;

	if (strncmp(section, "tenant ", 7) && strncmp(section, "tenant:", 7))
		return false;
	while (*n == ' ' || *n == '"')
		n++;
	set_str(name, cap, n);
	for (char *p = name + strlen(name); p > name && (p[-1] == '"' || p[-1] == ' ');)
		*--p = 0;
	return true;
}

/* Create the tenants of every [tenant NAME] header of the file's text, in
 * order: libinih reports keys only, so a section without any would vanish
 * (and a tenant without a token must be refused, not forgotten). Returns 0,
 * or -EINVAL past KVTD_MAX_TENANTS (said on stderr). */
static int declare_tenants(struct kvtd_config *cfg, const char *path, const char *text)
{
	for (const char *line = text; *line;) {
		const char *end = strchr(line, '\n'), *close;
		char section[128], name[64];

		if (!end)
			end = line + strlen(line);
		while (line < end && (*line == ' ' || *line == '\t'))
			line++;
		close = memchr(line, ']', (size_t)(end - line));
		if (*line == '[' && close && (size_t)(close - line - 1) < sizeof(section)) {
			memcpy(section, line + 1, (size_t)(close - line - 1));
			section[close - line - 1] = 0;
			if (tenant_section(section, name, sizeof(name)) && tenant_find(cfg, name)) {
				/* its keys would merge into the first: a token silently replaced */
				fprintf(stderr, "kvtierd: %s: [%s]: tenant %s is declared twice\n",
					path, section, name);
				return -EINVAL;
			}
			if (tenant_section(section, name, sizeof(name)) && !tenant_named(cfg, name)) {
				fprintf(stderr, "kvtierd: %s: [%s]: at most %d tenants, names of 1 to "
					"32 bytes without brackets or quotes\n", path, section,
					KVTD_MAX_TENANTS);
				return -EINVAL;
			}
		}
		line = *end ? end + 1 : end;
	}
	return 0;
}

struct ini_ctx {
	struct kvtd_config *cfg;
	const char *path;
	int err;
};

static int ini_cb(void *user, const char *section, const char *key, const char *v)
{
	struct ini_ctx *ctx = user;
	struct kvtd_tenant *t = NULL;
	char name[64];
	int err = 0;

	if (!strcmp(section, "kvtierd")) {
		err = apply(ctx->cfg, key, v);
	} else if (tenant_section(section, name, sizeof(name))) {
		t = tenant_named(ctx->cfg, name);
		if (!t)
			err = -EINVAL;
		else if (!strcmp(key, "token")) {
			err = fits(v, sizeof(t->token)) ? 0 : -EINVAL;
			if (!err) {
				set_str(t->token, sizeof(t->token), v);
				t->has_token = true;
			}
		}
		else if (!strcmp(key, "salt"))
			err = fits(v, sizeof(t->salt)) && *v && one_line(v) ?
			      (set_str(t->salt, sizeof(t->salt), v), 0) : -EINVAL;
		else if (!strcmp(key, "models"))
			err = fits(v, sizeof(t->models)) && one_line(v) ?
			      (set_str(t->models, sizeof(t->models), v), 0) : -EINVAL;
		else
			err = -ENOENT;
	} else {
		fprintf(stderr, "kvtierd: %s: unknown section [%s]\n", ctx->path, section);
		ctx->err = -EINVAL;
		return 0;
	}
	if (err == -ENOENT)
		fprintf(stderr, "kvtierd: %s: [%s] %s: unknown key\n", ctx->path, section, key);
	else if (err && strcmp(section, "kvtierd"))
		fprintf(stderr, "kvtierd: %s: [%s] %s = %s: invalid value%s\n", ctx->path, section,
			key, v, t ? "" : " (at most 64 tenants, names of 1 to 32 bytes)");
	else if (err)
		fprintf(stderr, "kvtierd: %s: [%s] %s = %s: expected %s\n", ctx->path, section, key,
			v, accepted(key));
	if (err)
		ctx->err = -EINVAL;
	return 1;
}

/* An option with a value sets the config file's key of its name, '-' read
 * as '_' (see kvtd_config_load); the codes of long-only options need only
 * differ from each other and from the letters. */
static const struct option long_opts[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "socket", required_argument, NULL, 's' },
	{ "socket-mode", required_argument, NULL, 1 },
	{ "socket-group", required_argument, NULL, 2 },
	{ "allow-uid", required_argument, NULL, 3 },
	{ "data-dir", required_argument, NULL, 'd' },
	{ "dram", required_argument, NULL, 4 },
	{ "ssd", required_argument, NULL, 5 },
	{ "no-huge-pages", no_argument, NULL, 6 },
	{ "policy", required_argument, NULL, 7 },
	{ "metrics", required_argument, NULL, 'm' },
	{ "workers", required_argument, NULL, 'w' },
	{ "drain-timeout", required_argument, NULL, 12 },
	{ "hello-timeout", required_argument, NULL, 13 },
	{ "max-conns-per-uid", required_argument, NULL, 14 },
	{ "max-ns-per-tenant", required_argument, NULL, 15 },
	{ "mrc-budget", required_argument, NULL, 16 },
	{ "stats-namespaces", required_argument, NULL, 17 },
	{ "metrics-tenants", no_argument, NULL, 18 },
	{ "plan-retry", required_argument, NULL, 19 },
	{ "tenant", required_argument, NULL, 't' },
	{ "log-level", required_argument, NULL, 'l' },
	{ "print-config", no_argument, NULL, 8 },
	{ "no-prefault", no_argument, NULL, 9 },
	{ "host-copy", required_argument, NULL, 10 },
	{ "no-gpu", no_argument, NULL, 11 },
	{ "cluster", required_argument, NULL, 20 },
	{ "node-id", required_argument, NULL, 21 },
	{ "peer-listen", required_argument, NULL, 22 },
	{ "cluster-secret-file", required_argument, NULL, 23 },
	{ "rdma-device", required_argument, NULL, 24 },
	{ "peer-timeout", required_argument, NULL, 25 },
	{ "ssd-admission", required_argument, NULL, 26 },
	{ "ssd-codec", required_argument, NULL, 27 },
	{ "no-warm-restart", no_argument, NULL, 28 },
	{ "handover-socket", required_argument, NULL, 29 },
	{ "take-over", required_argument, NULL, 30 },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static const char short_opts[] = "c:s:d:m:w:t:l:hV";

/* The entry of long_opts for c (a short option's letter or a long-only
 * code), NULL for none ('?': an unknown option). */
static const struct option *long_opt(int c)
{
	for (const struct option *o = long_opts; o->name; o++)
		if (o->val == c)
			return o;
	return NULL;
}

/* The config file's key an option with a value sets: the option's name with
 * '_' for '-' (--socket-mode sets socket_mode). */
static const char *option_key(const struct option *o, char *key, size_t size)
{
	size_t i;

	for (i = 0; o->name[i] && i + 1 < size; i++)
		key[i] = o->name[i] == '-' ? '_' : o->name[i];
	key[i] = 0;
	return key;
}

/* --tenant NAME:TOKEN[:SALT] */
static int add_cli_tenant(struct kvtd_config *cfg, const char *arg, bool *first)
{
	char buf[512], *token, *salt;
	struct kvtd_tenant *t;

	if (!fits(arg, sizeof(buf)))
		return -EINVAL;
	set_str(buf, sizeof(buf), arg);
	token = strchr(buf, ':');
	if (!token)
		return -EINVAL;
	*token++ = 0;
	salt = strchr(token, ':');
	if (salt)
		*salt++ = 0;
	if (*first) {
		cfg->n_tenants = 0; /* the command line's tenants replace the file's */
		*first = false;
	}
	if (tenant_find(cfg, buf))
		return -EEXIST;
	t = tenant_named(cfg, buf);
	if (!t && cfg->n_tenants >= KVTD_MAX_TENANTS)
		return -ENOSPC;
	if (!t || !fits(token, sizeof(t->token)) || !one_line(token) ||
	    (salt && (!*salt || !fits(salt, sizeof(t->salt)) || !one_line(salt))))
		return -EINVAL;
	set_str(t->token, sizeof(t->token), token);
	t->has_token = true;
	if (salt)
		set_str(t->salt, sizeof(t->salt), salt);
	return 0;
}

/* A token picks the tenant at HELLO: two tenants sharing one would make the
 * first of them unreachable (or either, by configuration order), and an
 * empty token beside others would let any client in as that tenant. */
static int check_tokens(const struct kvtd_config *cfg, bool printing)
{
	for (size_t i = 0; i < cfg->n_tenants; i++) {
		const struct kvtd_tenant *t = &cfg->tenants[i];

		if (!t->has_token && printing)
			continue;
		if (!t->has_token) {
			fprintf(stderr, "kvtierd: [tenant %s] has no token line: every tenant needs "
				"one (\"token =\" empty only for a lone tenant)\n", t->name);
			return -EINVAL;
		}
		if (!t->token[0] && cfg->n_tenants > 1) {
			fprintf(stderr, "kvtierd: tenant %s: an empty token is allowed only when it "
				"is the only tenant\n", t->name);
			return -EINVAL;
		}
		for (size_t j = 0; j < i; j++) {
			if (cfg->tenants[j].has_token && !strcmp(cfg->tenants[j].token, t->token)) {
				fprintf(stderr, "kvtierd: tenants %s and %s have the same token\n",
					cfg->tenants[j].name, t->name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* The config file's text (malloc'd, NUL-terminated): a regular file of at
 * most KVTD_CONFIG_MAX_BYTES. Anything else (a directory, a device such as
 * /dev/zero, a FIFO: opened without blocking, never read) or a larger file
 * is refused with a message. Returns 0 or -EINVAL. */
static int read_config_file(const char *path, char **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	const char *why = NULL;
	size_t len = 0;
	struct stat st;
	char *text = NULL;

	if (fd < 0) {
		fprintf(stderr, "kvtierd: --config %s: %s\n", path, strerror(errno));
		return -EINVAL;
	}
	if (fstat(fd, &st))
		why = strerror(errno);
	else if (!S_ISREG(st.st_mode))
		why = "not a regular file";
	else if (st.st_size > KVTD_CONFIG_MAX_BYTES)
		why = "larger than " KVTD_CONFIG_MAX_TEXT ", the limit of a config file";
	else if (!(text = malloc((size_t)st.st_size + 2)))
		why = strerror(ENOMEM);
	/* the file may grow meanwhile: read one byte past its size to notice */
	while (!why) {
		ssize_t n = read(fd, text + len, (size_t)st.st_size + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			why = strerror(errno);
		else if (len + (size_t)n > (size_t)st.st_size)
			why = "changed while being read";
		else if (n == 0)
			break;
		len += n > 0 ? (size_t)n : 0;
	}
	close(fd);
	if (!why && memchr(text, 0, len))
		why = "holds a NUL byte: not a text file";
	if (why) {
		fprintf(stderr, "kvtierd: --config %s: %s\n", path, why);
		free(text);
		return -EINVAL;
	}
	text[len] = 0;
	*out = text;
	return 0;
}

/* The cluster's settings go together: a directory, a name, an address. */
static int check_cluster(const struct kvtd_config *cfg)
{
	if (!cfg->cluster[0]) {
		if (cfg->node_id[0] || cfg->peer_listen[0] || cfg->rdma_device[0]) {
			fprintf(stderr, "kvtierd: node_id, peer_listen and rdma_device need "
				"--cluster redis://HOST:PORT\n");
			return -EINVAL;
		}
		return 0;
	}
#ifndef KVT_HAVE_CLUSTER
	fprintf(stderr, "kvtierd: --cluster: this kvtierd was built without the cluster "
		"(hiredis was not found at build time)\n");
	return -EINVAL;
#endif
	if (!cfg->node_id[0] || !cfg->peer_listen[0]) {
		fprintf(stderr, "kvtierd: --cluster needs --node-id ID and --peer-listen ADDR:PORT "
			"(the address other nodes reach this one at)\n");
		return -EINVAL;
	}
	return 0;
}

int kvtd_config_load(struct kvtd_config *cfg, int argc, char **argv)
{
	bool first_tenant = true;
	int c, err;

	kvtd_config_defaults(cfg);
	/* pass 1: the config file, so the command line can override it */
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, short_opts, long_opts, NULL)) != -1) {
		if (c == 'c')
			set_str(cfg->config_path, sizeof(cfg->config_path), optarg);
		else if (c == 'h') {
			kvtd_usage(stdout);
			return 1;
		} else if (c == 'V') {
			printf("kvtierd %s (protocol %d)\n", kvt_version(), KVT_PROTO_VERSION_MAX);
			return 1;
		}
	}
	if (cfg->config_path[0]) {
		struct ini_ctx ctx = { .cfg = cfg, .path = cfg->config_path };
		char *text;
		int line;

		if (read_config_file(cfg->config_path, &text))
			return -EINVAL;
		if (declare_tenants(cfg, cfg->config_path, text)) {
			free(text);
			return -EINVAL;
		}
		line = ini_parse_string(text, ini_cb, &ctx);
		free(text);
		if (line < 0) {
			fprintf(stderr, "kvtierd: --config %s: %s\n", cfg->config_path,
				strerror(ENOMEM));
			return -EINVAL;
		}
		if (line > 0) {
			fprintf(stderr, "kvtierd: %s:%d: syntax error\n", cfg->config_path, line);
			return -EINVAL;
		}
		if (ctx.err)
			return -EINVAL;
	}
	/* pass 2: the overrides */
	opterr = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, short_opts, long_opts, NULL)) != -1) {
		const struct option *opt;
		const char *key;
		char key_buf[32];

		switch (c) {
		case 'c': case 'h': case 'V':
			continue;
		case 6: cfg->huge_pages = false; continue;
		case 18: cfg->metrics_tenants = true; continue;
		case 28: cfg->warm_restart = false; continue;
		case 8: cfg->print_config = true; continue;
		case 9: cfg->prefault = false; continue;
		case 11: cfg->gpu = false; continue;
		case 't':
			err = add_cli_tenant(cfg, optarg, &first_tenant);
			if (err == -ENOSPC)
				fprintf(stderr, "kvtierd: --tenant %s: at most %d tenants\n", optarg,
					KVTD_MAX_TENANTS);
			else if (err == -EEXIST)
				fprintf(stderr, "kvtierd: --tenant %s: that tenant is given twice\n",
					optarg);
			else if (err)
				fprintf(stderr, "kvtierd: --tenant %s: expected NAME:TOKEN[:SALT] (a name "
					"of 1 to 32 bytes without brackets, quotes or control "
					"characters; a token of at most 256, a salt of 1 to %d, "
					"each on one line)\n", optarg, KVT_SALT_MAX);
			if (err)
				return -EINVAL;
			continue;
		default:
			/* every other option with a value sets the key of its name */
			opt = long_opt(c);
			if (!opt || opt->has_arg != required_argument) {
				fprintf(stderr, "Try 'kvtierd --help'.\n");
				return -EINVAL;
			}
			break;
		}
		key = option_key(opt, key_buf, sizeof(key_buf));
		err = apply(cfg, key, optarg);
		if (err) {
			fprintf(stderr, "kvtierd: --%s %s: expected %s\n", opt->name, optarg,
				accepted(key));
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvtierd: unexpected argument '%s'\nTry 'kvtierd --help'.\n", argv[optind]);
		return -EINVAL;
	}
	if (cfg->n_tenants == 0) {
		struct kvtd_tenant *t = tenant_named(cfg, "default");
		t->token[0] = 0;
		t->has_token = true; /* the lone tenant, open by design */
	}
	if (check_cluster(cfg))
		return -EINVAL;
	if (cfg->socket_group[0] && !getgrnam(cfg->socket_group)) {
		fprintf(stderr, "kvtierd: --socket-group %s: no such group\n", cfg->socket_group);
		return -EINVAL;
	}
	/* a printed config shows no tokens, so one read back from it lacks
	 * them: it is checked for all else */
	return check_tokens(cfg, cfg->print_config);
}

/* Bytes the SSD tier's segment files under data_dir take on disk now. */
static uint64_t ssd_tier_bytes(const char *data_dir)
{
	char path[4200];
	struct dirent *e;
	uint64_t sum = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/ssd", data_dir);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		struct stat st;

		if (strncmp(e->d_name, "seg-", 4) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		sum += (uint64_t)st.st_blocks * 512;
	}
	if (d)
		closedir(d);
	return sum;
}

/* mkdir -p */
static int make_dirs(const char *path, mode_t mode)
{
	char buf[4096];

	if (!fits(path, sizeof(buf)))
		return -ENAMETOOLONG;
	set_str(buf, sizeof(buf), path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) && errno != EEXIST)
		return -errno;
	return 0;
}

int kvtd_config_resolve(struct kvtd_config *cfg)
{
	char dir[sizeof(cfg->socket_path)], avail[32], limit[32];
	struct kvtd_memory mem;
	struct statvfs vfs;
	char *slash;
	int err;

	kvtd_memory_measure(&mem);
	kvt_fmt_bytes(mem.available, avail, sizeof(avail));
	if (kvt_parse_size(cfg->dram_spec, mem.available, &cfg->dram_bytes) ||
	    cfg->dram_bytes < (1u << 20) || cfg->dram_bytes > mem.available) {
		fprintf(stderr, "kvtierd: --dram %s: the DRAM tier takes 1 MiB to %s, the memory "
			"this process may use (", cfg->dram_spec, avail);
		if (mem.cgroup_room < mem.host_available)
			fprintf(stderr, "the room left under the %s limit of cgroup %s",
				kvt_fmt_bytes(mem.cgroup_limit, limit, sizeof(limit)), mem.cgroup_dir);
		else
			fprintf(stderr, "the host's available memory");
		fprintf(stderr, ")\n");
		return -EINVAL;
	}
	cfg->ssd_bytes = 0;
	cfg->ssd_short[0] = 0;
	if (strcmp(cfg->ssd_spec, "0")) {
		uint64_t free_bytes, held, room, total, asked;
		bool percent = strchr(cfg->ssd_spec, '%') != NULL;
		char a[32], b[32], c[32];

		err = make_dirs(cfg->data_dir, 0750);
		if (err) {
			fprintf(stderr, "kvtierd: data dir %s: %s\n", cfg->data_dir, strerror(-err));
			return err;
		}
		if (statvfs(cfg->data_dir, &vfs)) {
			err = -errno;
			fprintf(stderr, "kvtierd: data dir %s: %s\n", cfg->data_dir, strerror(-err));
			return err;
		}
		free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
		/* what the tier's segments hold is theirs again on a restart */
		held = ssd_tier_bytes(cfg->data_dir);
		room = free_bytes + held;
		kvt_parse_size(cfg->ssd_spec, free_bytes, &cfg->ssd_bytes);
		if (percent && cfg->ssd_bytes > (64ull << 30))
			cfg->ssd_bytes = 64ull << 30;
		asked = cfg->ssd_bytes;
		/* a size no disk of this size could hold is a mistake; one that
		 * does not fit today's free space is a disk others filled */
		if (!percent && (asked < KVTD_SSD_MIN || asked > total)) {
			fprintf(stderr, "kvtierd: --ssd %s: the SSD tier takes %s to %s (the size "
				"of the file system of %s; %s of it free, plus the %s its segments "
				"hold), or 0 for none\n", cfg->ssd_spec,
				kvt_fmt_bytes(KVTD_SSD_MIN, a, sizeof(a)),
				kvt_fmt_bytes(total, b, sizeof(b)), cfg->data_dir,
				kvt_fmt_bytes(free_bytes, c, sizeof(c)), kvt_fmt_bytes(held, avail,
											sizeof(avail)));
			return -EINVAL;
		}
		if (asked > room || asked < KVTD_SSD_MIN) {
			/* whole MiB of what fits; none under the smallest tier */
			cfg->ssd_bytes = room < asked ? room & ~((1ull << 20) - 1) : asked;
			if (cfg->ssd_bytes < KVTD_SSD_MIN)
				cfg->ssd_bytes = 0;
			snprintf(cfg->ssd_short, sizeof(cfg->ssd_short),
				 "--ssd %s asks %s; the file system of %s has %s free and the tier's "
				 "segments hold %s", cfg->ssd_spec, kvt_fmt_bytes(asked, a, sizeof(a)),
				 cfg->data_dir, kvt_fmt_bytes(free_bytes, b, sizeof(b)),
				 kvt_fmt_bytes(held, c, sizeof(c)));
			fprintf(stderr, "kvtierd: warning: %s: the SSD tier starts %s%s\n",
				cfg->ssd_short, cfg->ssd_bytes ? "at " : "off",
				cfg->ssd_bytes ? kvt_fmt_bytes(cfg->ssd_bytes, avail, sizeof(avail)) : "");
		}
	}
	if (cfg->cluster[0] && !cfg->cluster_secret_file[0])
		snprintf(cfg->cluster_secret_file, sizeof(cfg->cluster_secret_file),
			 "%.4070s/cluster.secret", cfg->data_dir);
	if (!cfg->handover_socket[0] &&
	    snprintf(cfg->handover_socket, sizeof(cfg->handover_socket), "%s.takeover",
		     cfg->socket_path) >= (int)sizeof(cfg->handover_socket)) {
		fprintf(stderr, "kvtierd: %s.takeover: too long for a socket path; set "
			"--handover-socket\n", cfg->socket_path);
		return -EINVAL;
	}
	set_str(dir, sizeof(dir), cfg->socket_path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		err = make_dirs(dir, 0750);
		if (err) {
			fprintf(stderr, "kvtierd: socket dir %s: %s\n", dir, strerror(-err));
			return err;
		}
	}
	return 0;
}

void kvtd_config_print(const struct kvtd_config *cfg, FILE *f)
{
	fprintf(f, "[kvtierd]\nsocket = %s\nsocket_mode = %04o\n", cfg->socket_path, cfg->socket_mode);
	if (cfg->socket_group[0])
		fprintf(f, "socket_group = %s\n", cfg->socket_group);
	if (cfg->n_allow_uids) {
		fprintf(f, "allow_uids = ");
		for (size_t i = 0; i < cfg->n_allow_uids; i++)
			fprintf(f, "%s%u", i ? "," : "", (unsigned)cfg->allow_uids[i]);
		fputc('\n', f);
	}
	fprintf(f, "data_dir = %s\ndram = %s\nssd = %s\nhuge_pages = %s\nprefault = %s\npolicy = %s\n"
		"ssd_admission = %s\nssd_codec = %s\nhost_copy = %s\ngpu = %s\nmetrics = %s\n"
		"workers = %u\n"
		"hello_timeout = %ums\nmax_conns_per_uid = %u\nmax_ns_per_tenant = %u\n"
		"plan_retry = %ums\ndrain_timeout = %ums\nmrc_budget = %s\nstats_namespaces = %u\n"
		"metrics_tenants = %s\nlog_level = %s\nwarm_restart = %s\n",
		cfg->data_dir, cfg->dram_spec,
		cfg->ssd_spec, cfg->huge_pages ? "true" : "false", cfg->prefault ? "true" : "false",
		cfg->policy, cfg->ssd_admission, cfg->ssd_codec,
		cfg->host_copy_device ? "device" : "direct",
		cfg->gpu ? "true" : "false",
		cfg->metrics[0] ? cfg->metrics : "off", cfg->workers, cfg->hello_timeout_ms,
		cfg->max_conns_per_uid, cfg->max_ns_per_tenant, cfg->plan_retry_ms,
		cfg->drain_timeout_ms, cfg->mrc_budget_spec, cfg->stats_namespaces,
		cfg->metrics_tenants ? "true" : "false",
		(const char *[]){ "error", "warn", "info", "debug" }[cfg->log_level],
		cfg->warm_restart ? "true" : "false");
	if (cfg->handover_socket[0])
		fprintf(f, "handover_socket = %s\n", cfg->handover_socket);
	if (cfg->cluster[0]) {
		fprintf(f, "cluster = %s\nnode_id = %s\npeer_listen = %s\npeer_timeout = %u\n",
			cfg->cluster, cfg->node_id, cfg->peer_listen, cfg->peer_timeout_ms);
		if (cfg->cluster_secret_file[0])
			fprintf(f, "cluster_secret_file = %s\n", cfg->cluster_secret_file);
		if (cfg->rdma_device[0])
			fprintf(f, "rdma_device = %s\n", cfg->rdma_device);
	}
	for (size_t i = 0; i < cfg->n_tenants; i++) {
		const struct kvtd_tenant *t = &cfg->tenants[i];
		/* tokens are secrets: never printed */
		fprintf(f, "\n[tenant %s]\n%s\nsalt = %s\n", t->name,
			t->token[0] ? "; token = (set, not shown)" : "token =", t->salt);
		if (t->models[0])
			fprintf(f, "models = %s\n", t->models);
	}
}
