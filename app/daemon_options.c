/* SPDX-License-Identifier: Apache-2.0 */
/* The table of kvtierd's options (daemon_options.h): one row per option,
 * from which the command line, the config file, --help, --print-config and
 * the man page are made. */
#include "app/daemon_options.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/admission.h"
#include "store/policy.h"
#include "tiers/codec.h"

/* ---- the checks rows name -------------------------------------------------- */

static bool policy_ok(const char *v)
{
	return kvt_policy_find(v) != NULL;
}

static bool admission_ok(const char *v)
{
	return kvt_admission_find(v) != NULL;
}

static bool codec_ok(const char *v)
{
	return kvt_codec_parse(v) >= 0 || !strcmp(v, KVT_SSD_CODEC_AUTO);
}

/* "HOST:PORT": an IPv4 address (or localhost) and a port from 0 to 65535. */
static bool metrics_addr_ok(const char *v)
{
	const char *colon = strrchr(v, ':');
	char host[64], *end;
	struct in_addr a;
	unsigned long port;

	if (!colon || (size_t)(colon - v) >= sizeof(host))
		return false;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port > 65535)
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

/* HOST:PORT[,HOST:PORT...]: 1 to 8 Sentinels, a host name or IPv4 address
 * each and a port from 1 to 65535 */
static bool sentinels_ok(const char *v)
{
	unsigned n = 0;

	while (*v) {
		size_t host = strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-");
		unsigned port = 0;
		size_t digits = 0;

		if (host == 0 || v[host] != ':' || ++n > 8)
			return false;
		v += host + 1;
		for (; *v >= '0' && *v <= '9' && digits < 6; v++, digits++)
			port = port * 10 + (unsigned)(*v - '0');
		if (digits == 0 || port < 1 || port > 65535 || (*v && *v != ','))
			return false;
		if (*v == ',' && !*++v)
			return false;
	}
	return n > 0;
}

/* a directory URL, or "" for none; a Sentinels' one checked whole (the
 * others are parsed by the directory) */
static bool cluster_url_ok(const char *v)
{
	char list[256];
	const char *slash;

	if (!*v || !strncmp(v, "redis://", 8) || !strncmp(v, "unix://", 7))
		return true;
	if (strncmp(v, "sentinel://", 11) || !(slash = strchr(v + 11, '/')) ||
	    (size_t)(slash - v - 11) >= sizeof(list))
		return false;
	memcpy(list, v + 11, (size_t)(slash - v - 11));
	list[slash - v - 11] = 0;
	return sentinels_ok(list) && node_id_ok(slash + 1);
}

/* ---- the table ------------------------------------------------------------- */

#define FIELD(f) .offset = offsetof(struct kvtd_config, f), \
		 .size = sizeof(((struct kvtd_config *)0)->f)
#define DURATION "(\"ms\" or \"s\" suffix)"

const struct kvtd_option kvtd_options[] = {
	{ .name = "config", .letter = 'c', .arg = "FILE", .action = KVTD_CONFIG,
	  .help = "INI file to read (see CONFIGURATION): a regular file of at most 1 MiB." },
	{ .name = "socket", .letter = 's', .arg = "PATH", .key = "socket",
	  .type = &kvtd_string, FIELD(socket_path), .flags = KVTD_NONEMPTY,
	  .accepts = "a non-empty path shorter than 108 bytes", .sample = "/tmp/kvtd-sample.sock",
	  .help = "Unix socket to listen on. Default: $KVTIER_SOCKET, or "
		  "/run/kvtier/kvtierd.sock as root, else /tmp/kvtier-UID/kvtierd.sock." },
	{ .name = "socket-mode", .arg = "MODE", .key = "socket_mode",
	  .type = &kvtd_mode, FIELD(socket_mode), .min = 0, .max = 0777, .def = "0660",
	  .accepts = "an octal mode from 0 to 0777", .sample = "0600",
	  .help = "Octal mode of the socket (default {default})." },
	{ .name = "socket-group", .arg = "GROUP", .key = "socket_group",
	  .type = &kvtd_string, FIELD(socket_group), .flags = KVTD_PRINT_IF_SET,
	  .accepts = "a group name", .sample = "root",
	  .help = "Group of the socket; its members may connect, by primary or "
		  "supplementary group (default: the daemon's group)." },
	{ .name = "allow-uid", .arg = "UID", .key = "allow_uids",
	  .type = &kvtd_uids, FIELD(allow_uids), .flags = KVTD_PRINT_IF_SET,
	  .accepts = "uids, comma-separated, at most 64", .sample = "1000,1001",
	  .help = "Also let this uid connect (repeatable). Root and the daemon's own uid "
		  "always may; every peer's credentials are checked (SO_PEERCRED)." },
	{ .name = "data-dir", .letter = 'd', .arg = "DIR", .key = "data_dir",
	  .type = &kvtd_string, FIELD(data_dir), .flags = KVTD_NONEMPTY,
	  .accepts = "a non-empty directory path", .sample = "/tmp/kvtd-sample-data",
	  .help = "Directory of the SSD tier. Default: /var/lib/kvtier as root, else "
		  "$XDG_DATA_HOME/kvtier or ~/.local/share/kvtier." },
	{ .name = "dram", .arg = "SIZE", .key = "dram",
	  .type = &kvtd_size, FIELD(dram_spec), .flags = KVTD_PERCENT, .def = "25%",
	  .accepts = "a size (K, M, G, T: powers of 1024) or a percentage", .sample = "5G",
	  .help = "DRAM tier capacity (default {default}); N% is of the memory this "
		  "process may use: the host's available memory, or the room left under its "
		  "cgroup's memory limit (v2 memory.max, v1 memory.limit_in_bytes) when that "
		  "is less. From 1 MiB to that; more is refused." },
	{ .name = "ssd", .arg = "SIZE", .key = "ssd",
	  .type = &kvtd_size, FIELD(ssd_spec), .flags = KVTD_PERCENT, .def = "50%",
	  .accepts = "a size (K, M, G, T: powers of 1024), a percentage, or 0 for none",
	  .sample = "0",
	  .help = "SSD tier capacity, 4 MiB to the size of the data directory's file "
		  "system; N% is of the free space (default {default}, at most 64G when a "
		  "percentage); 0 turns the tier off. When the free space plus what the tier "
		  "holds is less, the tier starts at that (off under 4 MiB), with a warning." },
	{ .name = "ssd-dir", .arg = "PATH[:SIZE]", .key = "ssd_dir",
	  .type = &kvtd_ssd_dirs, FIELD(ssd_dirs), .flags = KVTD_PRINT_IF_SET,
	  .accepts = "an existing directory, then optionally ':' and a size or a percentage; "
		     "at most 16, each once",
	  .sample = "/tmp/kvtd-sample-ssd0:64M",
	  .help = "A directory of the SSD tier on a drive of its own (repeatable, at most "
		  "16; comma-separated in the config file): the tier then spans these "
		  "directories instead of DATA_DIR/ssd, each with its own segments, recovery, "
		  "I/O rings and capacity, and spreads blocks over them, weighted by free "
		  "space. SIZE is as --ssd's, of that directory's file system (default: "
		  "--ssd's). The directory must exist (a drive not mounted is never filled "
		  "from below); one that is missing or fails at start is left out and named, "
		  "and a drive that fails while running costs only its own blocks "
		  "(docs/ssd-tier.md)." },
	{ .name = "no-huge-pages", .key = "huge_pages",
	  .type = &kvtd_bool, FIELD(huge_pages), .def = "true", .flag_value = "false",
	  .accepts = "true or false", .sample = "false",
	  .help = "Map the DRAM tier with 4 KiB pages only (neither reserved nor "
		  "transparent huge pages)." },
	{ .name = "no-prefault", .key = "prefault",
	  .type = &kvtd_bool, FIELD(prefault), .def = "true", .flag_value = "false",
	  .accepts = "true or false", .sample = "false",
	  .help = "Do not fault the DRAM tier in ahead of use (by default a thread keeps "
		  "it faulted in one 64 MiB slab ahead of the slots handed out, so saves "
		  "rarely pay for first-touch page faults and the daemon's memory grows "
		  "with what it stores)." },
	{ .name = "policy", .arg = "NAME", .key = "policy",
	  .type = &kvtd_string, FIELD(policy), .def = "tail-lru", .valid = policy_ok,
	  .names = kvt_policy_names, .sample = "lfu",
	  .help = "Eviction policy: tail-lru (default), lru, lfu, cost, ghost-lru (tail-lru "
		  "that evicts blocks used once first while they hold more than an adaptive "
		  "share), ghost-ends (ghost-lru that also evicts first the blocks where "
		  "requests ended, bar the newest), class-lru (tail-lru that learns per reuse "
		  "class, the hint a client's SAVE may carry, how often new blocks come back, "
		  "and evicts first the new blocks of classes that rarely do), class-ends "
		  "(class-lru that also evicts request ends first)." },
	{ .name = "ssd-admission", .arg = "RULE", .key = "ssd_admission",
	  .type = &kvtd_string, FIELD(ssd_admission), .def = "always", .valid = admission_ok,
	  .names = kvt_admission_names, .sample = "useful",
	  .help = "Which blocks leaving DRAM for room are written to the SSD tier; the "
		  "others are dropped, saving the device's bandwidth and wear for blocks that "
		  "come back. always (default: every block), reused (blocks used at least "
		  "twice: looked up, loaded or saved again after their first save, or saved "
		  "again while the rule remembers refusing them), useful (blocks used twice, "
		  "and blocks used once of a class, ends or inner, that the SSD tier is seen "
		  "to read back often enough for the room they take; one block in 16 is "
		  "always written to measure it). A block with a clean copy on SSD moves "
		  "there whatever the rule. Refused blocks are counted (kvtier stats, "
		  "/metrics). No effect with --ssd 0." },
	{ .name = "ssd-codec", .arg = "CODEC", .key = "ssd_codec",
	  .type = &kvtd_string, FIELD(ssd_codec), .def = "raw", .valid = codec_ok,
	  .accepts = "raw, auto, lz4, shuf16-lz4, blosc-bitshuf16-lz4, blosc-shuf16-zstd, "
		     "shuf16-zstd or shuf16-pack4",
	  .sample = "shuf16-zstd",
	  .help = "How blocks are encoded on the SSD tier, for every namespace: raw "
		  "(default: as they are), auto (shuf16-pack4 for bf16 namespaces, raw for "
		  "others), shuf16-pack4 (bf16 K/V: the low byte of each value kept, the high "
		  "byte (sign and exponent) as a 4-bit code; 1.33x smaller, encoding at about "
		  "half and decoding near memcpy's speed on one core), shuf16-zstd (the high "
		  "byte Huffman-coded by zstd: about 1.5x smaller on bf16 K/V, encoding at "
		  "about a quarter of memcpy's speed), blosc-bitshuf16-lz4, "
		  "blosc-shuf16-zstd, shuf16-lz4, lz4. A block that shrinks less than 1.1x is "
		  "stored raw; blocks come back as they were saved. Costs CPU on every write "
		  "to and read from SSD: worth it where the SSD, not the CPU, limits "
		  "(kvtier-bench ssd measures both). No effect with --ssd 0." },
	{ .name = "host-copy", .arg = "HOW", .key = "host_copy",
	  .type = &kvtd_host_copy, FIELD(host_copy_device), .def = "direct",
	  .accepts = "direct or device", .sample = "device",
	  .help = "How memfd engine memory is copied: direct (default; the daemon maps it "
		  "and copies) or device (through the device layer's host backend, as GPU "
		  "memory is)." },
	{ .name = "no-gpu", .key = "gpu",
	  .type = &kvtd_bool, FIELD(gpu), .def = "true", .flag_value = "false",
	  .accepts = "true or false", .sample = "false",
	  .help = "Do not open the GPU even when one is there (engines then register host "
		  "memory only). By default a GPU is driven when present, and engines "
		  "register their KV memory with CUDA IPC handles." },
	{ .name = "metrics", .letter = 'm', .arg = "ADDR:PORT", .key = "metrics",
	  .type = &kvtd_off_string, FIELD(metrics), .def = "127.0.0.1:9464",
	  .valid = metrics_addr_ok,
	  .accepts = "HOST:PORT with an IPv4 address or localhost and a port from 0 to "
		     "65535 (0: any free one), or off",
	  .sample = "off",
	  .help = "Prometheus endpoint (GET /metrics, and /stats as JSON). Default "
		  "{default}; \"off\" disables." },
	{ .name = "workers", .letter = 'w', .arg = "N", .key = "workers",
	  .type = &kvtd_uint, FIELD(workers), .min = 1, .max = 256, .def = "4",
	  .accepts = "1 to 256", .sample = "2",
	  .help = "Copy threads for SAVE and LOAD (default {default})." },
	{ .name = "hello-timeout", .arg = "SECONDS", .key = "hello_timeout",
	  .type = &kvtd_ms, FIELD(hello_timeout_ms), .min = 100, .max = 3600 * 1000,
	  .flags = KVTD_ZERO_OK, .def = "5",
	  .accepts = "0 (never) or 0.1 to 3600 seconds " DURATION, .sample = "0",
	  .help = "Close a connection that has not said a successful HELLO this long after "
		  "it connected (default {default}; 0 turns it off; up to 3600)." },
	{ .name = "max-conns-per-uid", .arg = "N", .key = "max_conns_per_uid",
	  .type = &kvtd_uint, FIELD(max_conns_per_uid), .min = 0, .max = 65535, .def = "256",
	  .accepts = "0 (no cap) to 65535", .sample = "7",
	  .help = "Connections one peer uid may hold (default {default}; 0 = no cap but the "
		  "daemon's own; up to 65535)." },
	{ .name = "max-ns-per-tenant", .arg = "N", .key = "max_ns_per_tenant",
	  .type = &kvtd_uint, FIELD(max_ns_per_tenant), .min = 0, .max = 65535, .def = "1024",
	  .accepts = "0 (no cap) to 65535", .sample = "0",
	  .help = "Namespaces (model, layout, shard) one tenant may have attached (default "
		  "{default}; 0 = no cap but the store's 65535). A namespace with no block "
		  "and no connection left is detached, and counts no more." },
	{ .name = "plan-retry", .arg = "SECONDS", .key = "plan_retry",
	  .type = &kvtd_ms, FIELD(plan_retry_ms), .min = 100, .max = 86400 * 1000, .def = "30",
	  .accepts = "0.1 to 86400 seconds " DURATION, .sample = "500ms",
	  .help = "LOOKUP's plan stops loading from a tier that delivers slower than the "
		  "engine recomputes; once its measurement is this old, one LOOKUP loads "
		  "from it again to measure it anew (default {default}; 0.1 to 86400, \"ms\" "
		  "or \"s\" suffix allowed)." },
	{ .name = "drain-timeout", .arg = "SECONDS", .key = "drain_timeout",
	  .type = &kvtd_ms, FIELD(drain_timeout_ms), .min = 100, .max = 3600 * 1000,
	  .def = "30",
	  .accepts = "0.1 to 3600 seconds " DURATION, .sample = "2.5s",
	  .help = "After SIGTERM or SIGINT, how long the process may take to end (default "
		  "{default}; 0.1 to 3600, \"ms\" or \"s\" suffix allowed). The SAVEs and "
		  "LOADs in flight get all of it but a quarter (at most 2 s) kept for closing "
		  "the store; past it the process exits with status 1 without closing the "
		  "store, even if a copy is stuck (the SSD log is crash-safe)." },
	{ .name = "mrc-budget", .arg = "SIZE", .key = "mrc_budget",
	  .type = &kvtd_size, FIELD(mrc_budget_spec), .min = 1 << 20, .max = 1 << 30,
	  .flags = KVTD_ZERO_OK, .def = "8M",
	  .accepts = "0 (none) or a size from 1M to 1G (K, M, G: powers of 1024)",
	  .sample = "1G",
	  .help = "Memory for the live miss-ratio curves (the hit ratio each tier would "
		  "have at 1/8 to 8 times its size, from sampled reuse distances of the keys "
		  "looked up; kvtier stats --mrc): the daemon-wide one and, within half of "
		  "it, 512 KiB per namespace with figures (default {default}; 0 turns them "
		  "off; at most 1G)." },
	{ .name = "stats-namespaces", .arg = "N", .key = "stats_namespaces",
	  .type = &kvtd_uint, FIELD(stats_namespaces), .min = 0, .max = 4096, .def = "16",
	  .accepts = "0 to 4096", .sample = "4096",
	  .help = "Namespaces with their own figures (lookups, hits, tokens saved) in "
		  "STATS and the metrics (default {default}; 0 to 4096); a tenant's "
		  "namespaces past them count as its \"other\"." },
	{ .name = "metrics-tenants", .key = "metrics_tenants",
	  .type = &kvtd_bool, FIELD(metrics_tenants), .def = "false", .flag_value = "true",
	  .accepts = "true or false", .sample = "true",
	  .help = "The endpoint also gives lookups, hits and tokens saved per tenant and "
		  "per namespace, labelled with the tenants' names and the model ids (by "
		  "default it names no tenant nor model: it needs no credentials)." },
	{ .name = "log-level", .letter = 'l', .arg = "LEVEL", .key = "log_level",
	  .type = &kvtd_level, FIELD(log_level), .def = "info",
	  .accepts = "error, warn, info or debug", .sample = "debug",
	  .help = "error, warn, info (default) or debug." },
	{ .name = "no-warm-restart", .key = "warm_restart",
	  .type = &kvtd_bool, FIELD(warm_restart), .def = "true", .flag_value = "false",
	  .accepts = "true or false", .sample = "false",
	  .help = "Map the DRAM tier privately: it is lost at every restart. By default it "
		  "lives in a memfd, with a header per block, that survives a restart: kept "
		  "by systemd's fd store (FileDescriptorStoreMax=), also across a crash, or "
		  "handed to a successor (--take-over); a clean stop without a successor "
		  "writes the blocks only DRAM holds to the SSD tier first, within the drain "
		  "timeout." },
	{ .name = "handover-socket", .arg = "PATH", .key = "handover_socket",
	  .type = &kvtd_string, FIELD(handover_socket), .flags = KVTD_PRINT_IF_SET,
	  .accepts = "a path shorter than 108 bytes", .sample = "/tmp/kvtd-sample.takeover",
	  .help = "Where a successor asks this daemon to hand over (mode 0600; only the "
		  "daemon's uid is answered). Default: the socket's path with \".takeover\"." },
	{ .name = "take-over", .arg = "PATH", .key = "take_over",
	  .type = &kvtd_string, FIELD(take_over), .flags = KVTD_PRINT_NEVER,
	  .accepts = "a path shorter than 108 bytes", .sample = "/tmp/kvtd-sample-old.takeover",
	  .help = "Start as the successor of the daemon whose hand-over socket is PATH: it "
		  "stops accepting, drains, and hands over its listening socket and DRAM "
		  "tier; engines reconnect to the same socket and find their blocks." },
	{ .name = "tenant", .letter = 't', .arg = "NAME:TOKEN[:SALT]", .action = KVTD_TENANT,
	  .help = "Add a tenant (repeatable; replaces the default tenant). Tenants with the "
		  "same SALT share blocks; the salt defaults to the name." },

	{ .name = "cluster", .arg = "URL", .key = "cluster",
	  .type = &kvtd_string, FIELD(cluster), .valid = cluster_url_ok,
	  .flags = KVTD_PRINT_CLUSTER,
	  .accepts = "redis://HOST:PORT, unix:///PATH or sentinel://HOST:PORT[,...]/MASTER",
	  .sample = "redis://10.0.0.9:6379",
	  .heading = "  Cluster (blocks shared between kvtierd nodes; see CLUSTER):",
	  .help = "Join the cluster whose directory is this Redis: redis://HOST:PORT (or "
		  "unix:///PATH), or the primary that Redis Sentinels name MASTER: "
		  "sentinel://HOST:PORT[,HOST:PORT...]/MASTER, asked at each connect and "
		  "again when the connection is lost or the server answers READONLY, so "
		  "the node follows a failover. Needs --node-id and --peer-listen." },
	{ .name = "node-id", .arg = "ID", .key = "node_id",
	  .type = &kvtd_string, FIELD(node_id), .valid = node_id_ok, .flags = KVTD_PRINT_CLUSTER,
	  .accepts = "1 to 64 characters of A-Z a-z 0-9 . _ -", .sample = "gpu-7",
	  .help = "This node's name in the cluster: 1-64 characters of A-Z a-z 0-9 . _ - "
		  "(e.g. the host name)." },
	{ .name = "peer-listen", .arg = "ADDR:PORT", .key = "peer_listen",
	  .type = &kvtd_string, FIELD(peer_listen), .valid = peer_addr_ok,
	  .flags = KVTD_PRINT_CLUSTER,
	  .accepts = "ADDR:PORT, an IPv4 address peers reach (not 0.0.0.0) and a port from "
		     "1 to 65535",
	  .sample = "10.0.0.7:7400",
	  .help = "Where other nodes fetch this node's blocks: an IPv4 address they can "
		  "reach (not 0.0.0.0), told to them through the directory." },
	{ .name = "peer-timeout", .arg = "MS", .key = "peer_timeout",
	  .type = &kvtd_uint, FIELD(peer_timeout_ms), .min = 10, .max = 600000, .def = "2000",
	  .flags = KVTD_PRINT_CLUSTER,
	  .accepts = "10 to 600000 milliseconds", .sample = "1500",
	  .help = "A peer that makes no progress for this long fails its blocks (they are "
		  "asked of another holder, or missed) (default {default}). A fetch ends in "
		  "all by this plus its bytes at 8 MiB/s; a peer that misses that deadline "
		  "is counted slow and not asked for 10 s." },
	{ .name = "cluster-secret-file", .arg = "FILE", .key = "cluster_secret_file",
	  .type = &kvtd_string, FIELD(cluster_secret_file),
	  .flags = KVTD_NONEMPTY | KVTD_PRINT_CLUSTER | KVTD_PRINT_IF_SET,
	  .accepts = "a file path", .sample = "/etc/kvtd-sample.secret",
	  .help = "The cluster secret, 16-1024 bytes, mode 0600; every node needs the same "
		  "one. Default DATA_DIR/cluster.secret." },
	{ .name = "rdma-device", .arg = "NAME", .key = "rdma_device",
	  .type = &kvtd_string, FIELD(rdma_device),
	  .flags = KVTD_PRINT_CLUSTER | KVTD_PRINT_IF_SET,
	  .accepts = "an RDMA device name (e.g. mlx5_0)", .sample = "mlx5_0",
	  .help = "Read peers' DRAM with one-sided RDMA READs on this libibverbs device "
		  "(e.g. mlx5_0; ibv_devices lists them), and lend this node's DRAM to peers' "
		  "READs under short leases. The DRAM tier is registered once, remote-read "
		  "only; the device, port, GID and region go into the node's record. Peers "
		  "without RDMA are still read over TCP. A device that does not open stops "
		  "the start (exit 1), naming the devices found. Default: none, TCP only." },

	{ .name = "print-config", .type = &kvtd_bool, FIELD(print_config),
	  .flag_value = "true", .heading = "",
	  .help = "Print the effective configuration as INI and exit; a configuration the "
		  "daemon would refuse (a size this machine cannot give, a path too long) "
		  "is refused the same way, with exit status 2." },
	{ .name = "help", .letter = 'h', .action = KVTD_HELP, .help = "This text." },
	{ .name = "version", .letter = 'V', .action = KVTD_VERSION, .help = "Print the version." },
};

const size_t kvtd_n_options = sizeof(kvtd_options) / sizeof(kvtd_options[0]);
_Static_assert(sizeof(kvtd_options) / sizeof(kvtd_options[0]) <= KVTD_MAX_OPTIONS,
	       "raise KVTD_MAX_OPTIONS: the command line's table is built in an array of it");

const struct kvtd_option *kvtd_option_by_key(const char *key)
{
	char k[64];

	kvtd_set_str(k, sizeof(k), key);
	for (char *p = k; *p; p++)
		if (*p == '-')
			*p = '_';
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];
		size_t n = strlen(o->name);

		if (!o->key)
			continue;
		if (!strcmp(k, o->key))
			return o;
		/* "allow_uid", as --allow-uid is spelled */
		if (o->arg && strlen(k) == n) {
			bool same = true;

			for (size_t j = 0; j < n && same; j++)
				same = k[j] == (o->name[j] == '-' ? '_' : o->name[j]);
			if (same)
				return o;
		}
	}
	return NULL;
}

const char *kvtd_option_accepts(const struct kvtd_option *o)
{
	if (o->names)
		return o->names();
	return o->accepts ? o->accepts : "a valid value";
}
