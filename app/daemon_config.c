/* kvtierd's configuration: defaults, INI file (libinih), command line. */
#include "app/daemon_config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <ini.h>

#include "transport/proto.h"

#define DEFAULT_DRAM "25%"
#define DEFAULT_SSD "50%"
#define DEFAULT_METRICS "127.0.0.1:9464"

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
"    -c, --config FILE     INI file to read (see CONFIGURATION).\n"
"    -s, --socket PATH     Unix socket to listen on. Default: $KVTIER_SOCKET, or\n"
"                          /run/kvtier/kvtierd.sock as root, else\n"
"                          /tmp/kvtier-UID/kvtierd.sock.\n"
"        --socket-mode MODE  Octal mode of the socket (default 0660).\n"
"        --socket-group GROUP  Group of the socket; its members may connect\n"
"                          (default: the daemon's group).\n"
"        --allow-uid UID   Also let this uid connect (repeatable). Root and the\n"
"                          daemon's own uid always may; every peer's credentials\n"
"                          are checked (SO_PEERCRED).\n"
"    -d, --data-dir DIR    Directory of the SSD tier. Default: /var/lib/kvtier as\n"
"                          root, else $XDG_DATA_HOME/kvtier or\n"
"                          ~/.local/share/kvtier.\n"
"        --dram SIZE       DRAM tier capacity; N% is of the memory available at\n"
"                          start (default " DEFAULT_DRAM ").\n"
"        --ssd SIZE        SSD tier capacity; N% is of the data directory's free\n"
"                          space (default " DEFAULT_SSD ", at most 64G when a\n"
"                          percentage); 0 turns the tier off.\n"
"        --no-huge-pages   Map the DRAM tier with normal pages only.\n"
"        --no-prefault     Do not fault the DRAM tier in (by default a thread\n"
"                          does it while the daemon serves, 64 MiB at a time, so\n"
"                          saves stop paying for first-touch page faults).\n"
"        --policy NAME     Eviction policy: tail-lru (default), lru, lfu, cost.\n"
"        --host-copy HOW   How memfd engine memory is copied: direct (default;\n"
"                          the daemon maps it and copies) or device (through the\n"
"                          device layer's host backend, as GPU memory is).\n"
"        --no-gpu          Do not open the GPU even when one is there (engines\n"
"                          then register host memory only). By default a GPU is\n"
"                          driven when present, and engines register their KV\n"
"                          memory with CUDA IPC handles.\n"
"    -m, --metrics ADDR:PORT  Prometheus endpoint (GET /metrics, and /stats as\n"
"                          JSON). Default " DEFAULT_METRICS "; \"off\" disables.\n"
"    -w, --workers N       Copy threads for SAVE and LOAD (default 4).\n"
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
"        --rdma-device NAME  RDMA device for one-sided reads of peers' DRAM\n"
"                          (e.g. mlx5_0). Default: none, TCP only.\n"
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
"    host_copy = direct|device, gpu = true|false, metrics, workers, log_level,\n"
"    cluster, node_id, peer_listen, cluster_secret_file, rdma_device,\n"
"    peer_timeout)\n"
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
	set_str(cfg->policy, sizeof(cfg->policy), "tail-lru");
	set_str(cfg->metrics, sizeof(cfg->metrics), DEFAULT_METRICS);
	cfg->workers = 4;
	cfg->log_level = KVT_LOG_INFO;
	cfg->peer_timeout_ms = 2000;
}

int kvtd_parse_size(const char *s, uint64_t whole, uint64_t *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0 || v != v)
		return -EINVAL;
	while (isspace((unsigned char)*end))
		end++;
	switch (toupper((unsigned char)*end)) {
	case 0: break;
	case 'K': v *= 1024.0; end++; break;
	case 'M': v *= 1048576.0; end++; break;
	case 'G': v *= 1073741824.0; end++; break;
	case 'T': v *= 1099511627776.0; end++; break;
	case '%':
		if (v > 100)
			return -EINVAL;
		v = v / 100.0 * (double)whole;
		end++;
		if (*end)
			return -EINVAL;
		*out = (uint64_t)v;
		return 0;
	default:
		return -EINVAL;
	}
	if (toupper((unsigned char)*end) == 'I')
		end++;
	if (toupper((unsigned char)*end) == 'B')
		end++;
	if (*end || v >= 18446744073709551615.0)
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
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
#define STR(field) (fits(v, sizeof(cfg->field)) ? (set_str(cfg->field, sizeof(cfg->field), v), 0) : -EINVAL)
	if (!strcmp(k, "socket"))
		return STR(socket_path);
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
		return STR(data_dir);
	if (!strcmp(k, "dram"))
		return kvtd_parse_size(v, 100, &size) ? -EINVAL : STR(dram_spec);
	if (!strcmp(k, "ssd"))
		return kvtd_parse_size(v, 100, &size) ? -EINVAL : STR(ssd_spec);
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
		return STR(policy);
	if (!strcmp(k, "metrics")) {
		if (!strcmp(v, "off") || !*v) {
			cfg->metrics[0] = 0;
			return 0;
		}
		return strchr(v, ':') ? STR(metrics) : -EINVAL;
	}
	if (!strcmp(k, "workers")) {
		if (parse_uint(v, 10, 256, &n) || n == 0)
			return -EINVAL;
		cfg->workers = (unsigned)n;
		return 0;
	}
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

/* What a value of key must look like, for its error message. */
static const char *value_hint(const char *key)
{
	if (!strcmp(key, "cluster"))
		return " (expected redis://HOST:PORT or unix:///PATH)";
	if (!strcmp(key, "node_id"))
		return " (1-64 characters of A-Z a-z 0-9 . _ -)";
	if (!strcmp(key, "peer_listen"))
		return " (expected ADDR:PORT, an IPv4 address peers reach, not 0.0.0.0)";
	if (!strcmp(key, "peer_timeout"))
		return " (milliseconds, 10 to 600000)";
	return "";
}

static struct kvtd_tenant *tenant_named(struct kvtd_config *cfg, const char *name)
{
	struct kvtd_tenant *t;

	for (size_t i = 0; i < cfg->n_tenants; i++)
		if (!strcmp(cfg->tenants[i].name, name))
			return &cfg->tenants[i];
	if (cfg->n_tenants >= KVTD_MAX_TENANTS || !*name || !fits(name, sizeof(t->name)))
		return NULL;
	t = &cfg->tenants[cfg->n_tenants++];
	set_str(t->name, sizeof(t->name), name);
	set_str(t->salt, sizeof(t->salt), name);
	return t;
}

struct ini_ctx {
	struct kvtd_config *cfg;
	const char *path;
	int err;
};

static int ini_cb(void *user, const char *section, const char *key, const char *v)
{
	struct ini_ctx *ctx = user;
	struct kvtd_tenant *t;
	int err = 0;

	if (!strcmp(section, "kvtierd")) {
		err = apply(ctx->cfg, key, v);
	} else if (!strncmp(section, "tenant ", 7) || !strncmp(section, "tenant:", 7)) {
		const char *name = section + 7;

		while (*name == ' ' || *name == '"')
			name++;
		char clean[64];
		set_str(clean, sizeof(clean), name);
		for (char *p = clean + strlen(clean); p > clean && (p[-1] == '"' || p[-1] == ' ');)
			*--p = 0;
		t = tenant_named(ctx->cfg, clean);
		if (!t)
			err = -EINVAL;
		else if (!strcmp(key, "token"))
			err = fits(v, sizeof(t->token)) ? (set_str(t->token, sizeof(t->token), v), 0) : -EINVAL;
		else if (!strcmp(key, "salt"))
			err = fits(v, sizeof(t->salt)) && *v ? (set_str(t->salt, sizeof(t->salt), v), 0) : -EINVAL;
		else if (!strcmp(key, "models"))
			err = fits(v, sizeof(t->models)) ? (set_str(t->models, sizeof(t->models), v), 0) : -EINVAL;
		else
			err = -ENOENT;
	} else {
		fprintf(stderr, "kvtierd: %s: unknown section [%s]\n", ctx->path, section);
		ctx->err = -EINVAL;
		return 0;
	}
	if (err) {
		fprintf(stderr, "kvtierd: %s: [%s] %s = %s: %s%s\n", ctx->path, section, key, v,
			err == -ENOENT ? "unknown key" : "invalid value", value_hint(key));
		ctx->err = -EINVAL;
	}
	return 1;
}

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
	{ "tenant", required_argument, NULL, 't' },
	{ "log-level", required_argument, NULL, 'l' },
	{ "print-config", no_argument, NULL, 8 },
	{ "no-prefault", no_argument, NULL, 9 },
	{ "host-copy", required_argument, NULL, 10 },
	{ "no-gpu", no_argument, NULL, 11 },
	{ "cluster", required_argument, NULL, 12 },
	{ "node-id", required_argument, NULL, 13 },
	{ "peer-listen", required_argument, NULL, 14 },
	{ "cluster-secret-file", required_argument, NULL, 15 },
	{ "rdma-device", required_argument, NULL, 16 },
	{ "peer-timeout", required_argument, NULL, 17 },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static const char short_opts[] = "c:s:d:m:w:t:l:hV";

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
	t = tenant_named(cfg, buf);
	if (!t || !fits(token, sizeof(t->token)) || (salt && (!*salt || !fits(salt, sizeof(t->salt)))))
		return -EINVAL;
	set_str(t->token, sizeof(t->token), token);
	if (salt)
		set_str(t->salt, sizeof(t->salt), salt);
	return 0;
}

/* A token picks the tenant at HELLO: two tenants sharing one would make the
 * first of them unreachable (or either, by configuration order), and an
 * empty token beside others would let any client in as that tenant. */
static int check_tokens(const struct kvtd_config *cfg)
{
	for (size_t i = 0; i < cfg->n_tenants; i++) {
		const struct kvtd_tenant *t = &cfg->tenants[i];

		if (!t->token[0] && cfg->n_tenants > 1) {
			fprintf(stderr, "kvtierd: tenant %s: an empty token is allowed only when it "
				"is the only tenant\n", t->name);
			return -EINVAL;
		}
		for (size_t j = 0; j < i; j++) {
			if (!strcmp(cfg->tenants[j].token, t->token)) {
				fprintf(stderr, "kvtierd: tenants %s and %s have the same token\n",
					cfg->tenants[j].name, t->name);
				return -EINVAL;
			}
		}
	}
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
			printf("kvtierd 0.1.0 (protocol %d)\n", KVT_PROTO_VERSION);
			return 1;
		}
	}
	if (cfg->config_path[0]) {
		struct ini_ctx ctx = { .cfg = cfg, .path = cfg->config_path };
		int line = ini_parse(cfg->config_path, ini_cb, &ctx);

		if (line < 0) {
			fprintf(stderr, "kvtierd: cannot read %s: %s\n", cfg->config_path,
				strerror(errno ? errno : ENOENT));
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
		const char *key = NULL;

		switch (c) {
		case 'c': case 'h': case 'V':
			continue;
		case 's': key = "socket"; break;
		case 1: key = "socket_mode"; break;
		case 2: key = "socket_group"; break;
		case 3: key = "allow_uid"; break;
		case 'd': key = "data_dir"; break;
		case 4: key = "dram"; break;
		case 5: key = "ssd"; break;
		case 6: cfg->huge_pages = false; continue;
		case 7: key = "policy"; break;
		case 'm': key = "metrics"; break;
		case 'w': key = "workers"; break;
		case 'l': key = "log_level"; break;
		case 8: cfg->print_config = true; continue;
		case 9: cfg->prefault = false; continue;
		case 10: key = "host_copy"; break;
		case 11: cfg->gpu = false; continue;
		case 12: key = "cluster"; break;
		case 13: key = "node_id"; break;
		case 14: key = "peer_listen"; break;
		case 15: key = "cluster_secret_file"; break;
		case 16: key = "rdma_device"; break;
		case 17: key = "peer_timeout"; break;
		case 't':
			if (add_cli_tenant(cfg, optarg, &first_tenant)) {
				fprintf(stderr, "kvtierd: --tenant %s: expected NAME:TOKEN[:SALT]\n", optarg);
				return -EINVAL;
			}
			continue;
		default:
			fprintf(stderr, "Try 'kvtierd --help'.\n");
			return -EINVAL;
		}
		err = apply(cfg, key, optarg);
		if (err) {
			fprintf(stderr, "kvtierd: invalid value '%s' for %s%s\n", optarg, key,
				value_hint(key));
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
	}
	if (check_cluster(cfg))
		return -EINVAL;
	/* a printed config shows no tokens, so only a daemon about to serve checks them */
	return cfg->print_config ? 0 : check_tokens(cfg);
}

static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	if (!kb)
		return (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	return kb * 1024;
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
	char dir[sizeof(cfg->socket_path)];
	struct statvfs vfs;
	char *slash;
	int err;

	if (kvtd_parse_size(cfg->dram_spec, mem_available(), &cfg->dram_bytes) ||
	    cfg->dram_bytes < (1u << 20)) {
		fprintf(stderr, "kvtierd: dram = %s: need at least 1 MiB\n", cfg->dram_spec);
		return -EINVAL;
	}
	cfg->ssd_bytes = 0;
	if (strcmp(cfg->ssd_spec, "0")) {
		err = make_dirs(cfg->data_dir, 0750);
		if (err) {
			fprintf(stderr, "kvtierd: data dir %s: %s\n", cfg->data_dir, strerror(-err));
			return err;
		}
		if (statvfs(cfg->data_dir, &vfs)) {
			fprintf(stderr, "kvtierd: data dir %s: %s\n", cfg->data_dir, strerror(errno));
			return -errno;
		}
		kvtd_parse_size(cfg->ssd_spec, (uint64_t)vfs.f_bavail * vfs.f_frsize, &cfg->ssd_bytes);
		if (strchr(cfg->ssd_spec, '%') && cfg->ssd_bytes > (64ull << 30))
			cfg->ssd_bytes = 64ull << 30;
	}
	if (cfg->cluster[0] && !cfg->cluster_secret_file[0])
		snprintf(cfg->cluster_secret_file, sizeof(cfg->cluster_secret_file),
			 "%.4070s/cluster.secret", cfg->data_dir);
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
		"host_copy = %s\ngpu = %s\nmetrics = %s\nworkers = %u\nlog_level = %s\n",
		cfg->data_dir, cfg->dram_spec,
		cfg->ssd_spec, cfg->huge_pages ? "true" : "false", cfg->prefault ? "true" : "false",
		cfg->policy, cfg->host_copy_device ? "device" : "direct", cfg->gpu ? "true" : "false",
		cfg->metrics[0] ? cfg->metrics : "off", cfg->workers,
		(const char *[]){ "error", "warn", "info", "debug" }[cfg->log_level]);
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
