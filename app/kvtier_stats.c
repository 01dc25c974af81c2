/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier stats: a running kvtierd's counters, for a person (a table) or a
 * script (--json, the daemon's STATS reply verbatim, indented). The same
 * numbers are on the daemon's Prometheus endpoint. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "app/kvtier_cmds.h"
#include "kvtier/client.h"
#include "util/size.h"

void kvt_stats_usage(FILE *f)
{
	fputs("NAME\n"
	      "    kvtier stats - counters of a running kvtierd\n\n"
	      "SYNOPSIS\n"
	      "    kvtier stats [--socket PATH] [--token TOKEN] [--mrc] [--json]\n\n"
	      "DESCRIPTION\n"
	      "    Asks the daemon for its counters over its socket and prints, per tier,\n"
	      "    capacity, occupancy, blocks, hits, bytes in and out, evictions, errors\n"
	      "    and whether it is degraded, then each tier's own named counters\n"
	      "    (docs/tiers-interface.md), and for an SSD tier over several drives\n"
	      "    (kvtierd --ssd-dir) a line per device: its capacity, use, blocks,\n"
	      "    bytes written and read, errors, blocks lost and state; lookup hits\n"
	      "    and misses; with an SSD tier,\n"
	      "    the blocks its admission rule (kvtierd --ssd-admission) kept off it and\n"
	      "    the spare copies it let go; bytes copied to and from engine memory;\n"
	      "    and per operation the count, errors and latency\n"
	      "    (mean, and p50/p99 as histogram bucket bounds). With a tenant's token,\n"
	      "    also that tenant's lookups, hits and tokens saved, in total and per\n"
	      "    namespace. A daemon in a cluster adds its state (Redis reachable,\n"
	      "    epoch, members) and the peer tier: blocks fetched, retried and\n"
	      "    missed, and per peer hits, bytes, misses and errors.\n\n"
	      "    --mrc prints the live miss-ratio curve instead: for each tier, the hit\n"
	      "    ratio of the tiers down to it had it 1/8 to 8 times its size (in blocks\n"
	      "    and bytes), estimated from sampled reuse distances of every key looked\n"
	      "    up (LRU-like policies); with a token, each of the tenant's namespaces'\n"
	      "    too.\n\n"
	      "OPTIONS\n"
	      "    -s, --socket PATH  The daemon's socket (default $KVTIER_SOCKET, else\n"
	      "                       /run/kvtier/kvtierd.sock as root, else\n"
	      "                       /tmp/kvtier-UID/kvtierd.sock, as kvtierd).\n"
	      "    -t, --token TOKEN  A tenant's token (default $KVTIER_TOKEN): its figures\n"
	      "                       too. A token no tenant has is refused.\n"
	      "    -m, --mrc          The miss-ratio curves (with --json: {\"mrc\": ...,\n"
	      "                       \"namespaces\": [...]}).\n"
	      "    -j, --json         Print the counters as one JSON object.\n"
	      "    -h, --help         This text.\n\n"
	      "EXIT STATUS\n"
	      "    0 printed, 1 the daemon could not be reached, 2 usage error.\n", f);
}

static double num(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

/* A byte counter of o, for a person. */
static const char *bytes_of(json_t *o, const char *key, char *buf, size_t len)
{
	return kvt_fmt_bytes((uint64_t)num(o, key), buf, len);
}

/* Upper bound of the bucket holding quantile q, in microseconds. */
static double bucket_quantile(json_t *buckets, json_t *bounds, double q)
{
	double total = 0, seen = 0;
	size_t i;
	json_t *v;

	json_array_foreach(buckets, i, v)
		total += (double)json_integer_value(v);
	if (total == 0)
		return 0;
	json_array_foreach(buckets, i, v) {
		seen += (double)json_integer_value(v);
		if (seen >= q * total)
			return i < json_array_size(bounds) ? json_number_value(json_array_get(bounds, i))
							    : -1;
	}
	return -1;
}

static void fmt_us(double us, char *buf, size_t len)
{
	if (us < 0)
		snprintf(buf, len, "> 5 s");
	else if (us < 1000)
		snprintf(buf, len, "%.0f us", us);
	else if (us < 1e6)
		snprintf(buf, len, "%.1f ms", us / 1e3);
	else
		snprintf(buf, len, "%.2f s", us / 1e6);
}

/* LOOKUP's plan: what each tier delivered to engines, the engines' prefill
 * speeds, and what the plan decided. */
static void print_plan(json_t *plan)
{
	json_t *tiers = json_object_get(plan, "tiers"), *engines = json_object_get(plan, "engines");
	const char *name;
	json_t *t;
	size_t i;

	printf("plan      %.0f lookups planned: %.0f stored blocks to load, %.0f to recompute; "
	       "%.0f retries of a stale tier\n", num(plan, "lookups"), num(plan, "load_blocks"),
	       num(plan, "recompute_blocks"), num(plan, "retries"));
	printf("          delivered to engines:");
	json_object_foreach(tiers, name, t) {
		if (num(t, "samples"))
			printf("  %s %.2f GB/s (%.0f loads, %.0f s ago)", name,
			       num(t, "bytes_per_s") / 1e9, num(t, "samples"), num(t, "age_s"));
		else
			printf("  %s not measured", name);
	}
	printf("\n");
	json_array_foreach(engines, i, t)
		printf("          engines of namespace %zu: prefill %.0f tokens/s (%.0f reports)\n",
		       i + 1, num(t, "prefill_tokens_per_s"), num(t, "reports"));
}

/* The RDMA side of a daemon started with --rdma-device. */
static void print_rdma(json_t *r)
{
	json_t *l = json_object_get(r, "leases");
	char a[32];

	if (!r)
		return;
	printf("rdma      %.0f READs (%s) verified, %.0f failed (%.0f checksum, %.0f timeout, %.0f "
	       "lease expired); lent %.0f leases (%.0f now, holding %.0f blocks), %.0f expired, "
	       "%.0f refused\n", num(r, "reads"), bytes_of(r, "bytes", a, sizeof(a)),
	       num(r, "retry_exceeded") + num(r, "remote_access_errors") + num(r, "flushed") +
	       num(r, "other_errors") + num(r, "checksum_errors") + num(r, "timeouts") +
	       num(r, "lease_expired"), num(r, "checksum_errors"), num(r, "timeouts"),
	       num(r, "lease_expired"), num(l, "granted"), num(l, "active"), num(l, "blocks_held"),
	       num(l, "expired"), num(l, "refused"));
}

/* The cluster's state and the peer tier, per peer (a daemon in a cluster). */
static void print_cluster(json_t *cl)
{
	json_t *dir = json_object_get(cl, "directory"), *srv = json_object_get(cl, "serving");
	json_t *tier = json_object_get(cl, "peer_tier"), *p;
	char a[32], b[32];
	size_t i;

	if (!cl)
		return;
	printf("cluster   node %s at %s: redis %s, epoch %.0f, %.0f members, %.0f joins\n",
	       json_string_value(json_object_get(cl, "node_id")),
	       json_string_value(json_object_get(cl, "peer_addr")),
	       json_is_true(json_object_get(dir, "reachable")) ? "reachable" : "UNREACHABLE (local-only)",
	       num(dir, "epoch"), num(dir, "members"), num(dir, "joins"));
	printf("remote    %.0f blocks fetched (%s), %.0f retried on another holder, %.0f missed; "
	       "served %.0f blocks (%s) to peers, %.0f refused handshakes\n", num(tier, "blocks"),
	       bytes_of(tier, "bytes", a, sizeof(a)), num(tier, "retries"), num(tier, "misses"),
	       num(srv, "blocks_sent"), bytes_of(srv, "bytes_sent", b, sizeof(b)),
	       num(srv, "auth_failures"));
	printf("%-16s %-22s %9s %10s %8s %8s %s\n", "peer", "address", "hits", "bytes", "misses",
	       "errors", "state");
	json_array_foreach(json_object_get(cl, "peers"), i, p)
		printf("%-16s %-22s %9.0f %10s %8.0f %8.0f %s\n",
		       json_string_value(json_object_get(p, "node")),
		       json_string_value(json_object_get(p, "addr")), num(p, "hits"),
		       bytes_of(p, "bytes", a, sizeof(a)), num(p, "misses"), num(p, "errors"),
		       json_is_true(json_object_get(p, "down")) ? "down" : "ok");
	print_rdma(json_object_get(cl, "rdma"));
	printf("\n");
}

/* The DRAM tier across the last restart (docs/restart.md). */
static void print_restart(json_t *r)
{
	json_t *d = json_object_get(r, "dropped"), *wd = json_object_get(r, "write_down");
	char a[32];

	if (!json_is_true(json_object_get(r, "warm")))
		return;
	if (json_is_true(json_object_get(r, "adopted")))
		printf("restart   %.0f blocks (%s) back warm in DRAM, index rebuilt in %.1f ms, %.0f "
		       "verified so far; dropped: %.0f torn, %.0f bad header, %.0f no namespace, "
		       "%.0f checksum\n", num(r, "warm_blocks"), bytes_of(r, "warm_bytes", a, sizeof(a)),
		       num(r, "rebuild_us") / 1e3, num(r, "verified"), num(d, "torn"), num(d, "header"),
		       num(d, "namespace"), num(d, "checksum"));
	else
		printf("restart   DRAM started empty%s; it survives the next restart\n",
		       json_is_true(json_object_get(r, "refused")) ?
		       " (the region handed in was REFUSED: another version or geometry)" : "");
	if (num(wd, "blocks") || num(wd, "left"))
		printf("stop      %.0f blocks written down to SSD, %.0f refused by the admission rule, "
		       "%.0f left\n", num(wd, "blocks"), num(wd, "refused"), num(wd, "left"));
}

/* Each tier's named counters (tiers.<tier>.counters, with their units),
 * as many to a line as fit: a counter a tier adds shows up here as it is. */
static void print_tier_counters(json_t *tiers)
{
	const char *name, *key;
	json_t *t, *v;

	json_object_foreach(tiers, name, t) {
		json_t *units = json_object_get(t, "units");
		const char *label = name; /* the tier's name on its first line */
		int col = 0;

		json_object_foreach(json_object_get(t, "counters"), key, v) {
			const char *unit = json_string_value(json_object_get(units, key));
			char val[48], item[160];
			int len;

			if (unit && !strcmp(unit, "bytes"))
				kvt_fmt_bytes((uint64_t)json_number_value(v), val, sizeof(val));
			else
				snprintf(val, sizeof(val), "%.0f", json_number_value(v));
			len = snprintf(item, sizeof(item), "%s %s", key, val);
			if (col && col + 2 + len > 100) {
				printf("\n");
				col = 0;
			}
			if (col) {
				col += printf(", %s", item);
			} else {
				col = printf("%-9s %s", label, item);
				label = "";
			}
		}
		if (col)
			printf("\n");
	}
}

/* The SSD tier's devices, one line each, where it spans several drives. */
static void print_devices(json_t *ssd)
{
	json_t *devs = json_object_get(ssd, "devices"), *d;
	char a[32], b[32], c[32], e[32];
	size_t i;

	if (!json_array_size(devs))
		return;
	printf("%-6s %10s %10s %9s %10s %10s %6s %7s %s\n", "device", "capacity", "used", "blocks",
	       "written", "read", "errors", "lost", "state  path");
	json_array_foreach(devs, i, d) {
		const char *err = json_string_value(json_object_get(d, "error"));

		printf("%-6zu %10s %10s %9.0f %10s %10s %6.0f %7.0f %-8s %s%s%s%s\n", i,
		       bytes_of(d, "capacity_bytes", a, sizeof(a)), bytes_of(d, "used_bytes", b, sizeof(b)),
		       num(d, "blocks"), bytes_of(d, "write_bytes", c, sizeof(c)),
		       bytes_of(d, "read_bytes", e, sizeof(e)), num(d, "errors"), num(d, "blocks_lost"),
		       json_string_value(json_object_get(d, "state")),
		       json_string_value(json_object_get(d, "path")), err && *err ? " (" : "",
		       err && *err ? err : "", err && *err ? ")" : "");
	}
}

static void print_table(json_t *root, const char *socket)
{
	json_t *server = json_object_get(root, "server"), *store = json_object_get(root, "store");
	json_t *tiers = json_object_get(root, "tiers"), *ops = json_object_get(root, "ops");
	json_t *copies = json_object_get(root, "copies"), *bounds = json_object_get(root, "latency_bounds_us");
	double keys = num(store, "lookup_keys"), hits = num(store, "lookup_hit_keys");
	const char *name;
	json_t *t;
	char a[32], b[32], c[32], d[32];

	printf("kvtierd at %s: up %.1f s, %.0f connections, %.0f jobs in flight, %.0f workers\n\n",
	       socket, num(server, "uptime_s"), num(server, "connections_open"),
	       num(server, "jobs_in_flight"), num(server, "workers"));
	printf("%-6s %10s %10s %6s %9s %9s %10s %10s %8s %6s %s\n", "tier", "capacity", "used",
	       "occ", "blocks", "hits", "in", "out", "evicted", "errors", "state");
	json_object_foreach(tiers, name, t) {
		printf("%-6s %10s %10s %5.1f%% %9.0f %9.0f %10s %10s %8.0f %6.0f %s\n", name,
		       bytes_of(t, "capacity_bytes", a, sizeof(a)),
		       bytes_of(t, "used_bytes", b, sizeof(b)), 100 * num(t, "occupancy"),
		       num(t, "blocks"), num(t, "hits"), bytes_of(t, "bytes_in", c, sizeof(c)),
		       bytes_of(t, "bytes_out", d, sizeof(d)), num(t, "evictions"),
		       num(t, "errors"), json_is_true(json_object_get(t, "degraded")) ? "DEGRADED" : "ok");
	}
	print_tier_counters(tiers);
	print_devices(json_object_get(tiers, "ssd"));
	printf("\nlookups   %.0f keys: %.0f hits (%.1f%%), %.0f misses; %.0f blocks in %.0f namespaces\n",
	       keys, hits, keys ? 100 * hits / keys : 0, keys - hits, num(store, "blocks"),
	       num(store, "namespaces"));
	if (num(store, "recovered_unattached") > 0)
		printf("recovered %.0f blocks kept from before the restart, in the tiers above; each "
		       "namespace's\n          are indexed at its first HELLO\n",
		       num(store, "recovered_unattached"));
	if (json_object_get(tiers, "ssd"))
		printf("ssd       %.0f blocks refused by the admission rule (%s not written), "
		       "%.0f spare copies dropped for room; %.0f write batches of %.1f blocks\n",
		       num(store, "ssd_admission_refused"),
		       bytes_of(store, "ssd_admission_refused_bytes", a, sizeof(a)),
		       num(store, "ssd_copies_dropped"), num(store, "demote_batches"),
		       num(store, "demote_batches") ?
		       num(store, "demote_batch_blocks") / num(store, "demote_batches") : 0);
	if (json_object_get(tiers, "ssd") && num(store, "ssd_compressed_writes"))
		printf("codec     %.0f written encoded: %s as %s (%.2fx smaller)\n",
		       num(store, "ssd_compressed_writes"),
		       bytes_of(store, "ssd_write_raw_bytes", a, sizeof(a)),
		       bytes_of(store, "ssd_write_stored_bytes", b, sizeof(b)),
		       num(store, "ssd_write_stored_bytes") ?
		       num(store, "ssd_write_raw_bytes") / num(store, "ssd_write_stored_bytes") : 0);
	printf("engine    saved %.0f blocks (%s gathered), loaded %.0f (%s scattered), "
	       "%.0f load misses\n", num(copies, "save_blocks"),
	       bytes_of(copies, "gather_bytes", a, sizeof(a)), num(copies, "load_blocks"),
	       bytes_of(copies, "scatter_bytes", b, sizeof(b)), num(copies, "load_misses"));
	if (json_object_get(root, "plan"))
		print_plan(json_object_get(root, "plan"));
	print_restart(json_object_get(root, "restart"));
	printf("refused   %.0f connections, %.0f hellos, %.0f bad frames; %.0f checksum failures\n\n",
	       num(server, "connections_refused"), num(server, "hello_refused"),
	       num(server, "bad_frames"), num(store, "checksum_failures"));
	print_cluster(json_object_get(root, "cluster"));
	printf("%-9s %10s %8s %10s %10s %10s\n", "op", "count", "errors", "mean", "p50 <=", "p99 <=");
	json_object_foreach(ops, name, t) {
		json_t *h = json_object_get(t, "latency_buckets");

		if (num(t, "count") == 0)
			continue;
		fmt_us(num(t, "mean_us"), a, sizeof(a));
		fmt_us(bucket_quantile(h, bounds, 0.5), b, sizeof(b));
		fmt_us(bucket_quantile(h, bounds, 0.99), c, sizeof(c));
		printf("%-9s %10.0f %8.0f %10s %10s %10s\n", name, num(t, "count"), num(t, "errors"),
		       a, b, c);
	}
}

/* A tenant's figures: total, per namespace, the rest. */
static void print_tenant(json_t *t)
{
	json_t *nss = json_object_get(t, "namespaces"), *n;
	size_t i;

	printf("\ntenant %s: %.0f lookups, %.0f keys, %.0f hits (%.1f%%), %.0f tokens saved\n",
	       json_string_value(json_object_get(t, "name")), num(t, "lookups"),
	       num(t, "lookup_keys"), num(t, "lookup_hit_keys"),
	       num(t, "lookup_keys") ? 100 * num(t, "lookup_hit_keys") / num(t, "lookup_keys") : 0,
	       num(t, "tokens_saved"));
	printf("  %-40s %10s %10s %10s %14s\n", "namespace", "lookups", "keys", "hits",
	       "tokens saved");
	json_array_foreach(nss, i, n)
		printf("  %-40s %10.0f %10.0f %10.0f %14.0f\n",
		       json_string_value(json_object_get(n, "namespace")), num(n, "lookups"),
		       num(n, "lookup_keys"), num(n, "lookup_hit_keys"), num(n, "tokens_saved"));
	n = json_object_get(t, "other");
	if (num(n, "lookups") > 0)
		printf("  %-40s %10.0f %10.0f %10.0f %14.0f\n", "(other)", num(n, "lookups"),
		       num(n, "lookup_keys"), num(n, "lookup_hit_keys"), num(n, "tokens_saved"));
}

/* One estimator's curves: a row per tier and capacity factor. */
static void print_curves(json_t *tiers)
{
	const char *name;
	json_t *pts, *p;
	size_t i;
	char a[32];

	printf("  %-6s %8s %14s %12s %10s\n", "tier", "factor", "blocks", "bytes", "hit ratio");
	json_object_foreach(tiers, name, pts)
		json_array_foreach(pts, i, p)
			printf("  %-6s %7gx %14.0f %12s %10.4f\n", name, num(p, "capacity_factor"),
			       num(p, "capacity_blocks"),
			       kvt_fmt_bytes((uint64_t)num(p, "capacity_bytes"), a, sizeof(a)),
			       num(p, "hit_ratio"));
}

/* --mrc: the daemon-wide curve and, with a token, the tenant's namespaces'. */
static void print_mrc(json_t *root)
{
	json_t *mrc = json_object_get(root, "mrc"), *t = json_object_get(root, "tenant"), *n;
	size_t i;

	if (!json_is_object(mrc)) {
		printf("no miss-ratio curve yet (no lookup, or no block stored), or the daemon "
		       "keeps none (--mrc-budget 0)\n");
		return;
	}
	printf("miss-ratio curve of every key looked up (sampling rate %.4g: %.0f of %.0f "
	       "references)\nhit ratio of the tiers down to each tier, had it that many times "
	       "its size:\n\n", num(mrc, "sampling_rate"), num(mrc, "sampled_references"),
	       num(mrc, "references"));
	print_curves(json_object_get(mrc, "tiers"));
	json_array_foreach(json_object_get(t, "namespaces"), i, n) {
		if (!json_is_object(json_object_get(n, "mrc")))
			continue;
		printf("\nnamespace %s (tenant %s)\n", json_string_value(json_object_get(n, "namespace")),
		       json_string_value(json_object_get(t, "name")));
		print_curves(json_object_get(n, "mrc"));
	}
}

/* --mrc --json: the curves alone. */
static json_t *mrc_only(json_t *root)
{
	json_t *o = json_object(), *nss = json_array(), *n;
	size_t i;

	json_object_set(o, "mrc", json_object_get(root, "mrc"));
	json_array_foreach(json_object_get(json_object_get(root, "tenant"), "namespaces"), i, n)
		json_array_append_new(nss, json_pack("{s:O, s:O}", "namespace",
						     json_object_get(n, "namespace"), "mrc",
						     json_object_get(n, "mrc")));
	json_object_set_new(o, "namespaces", nss);
	return o;
}

static const char *default_socket(char *buf, size_t len)
{
	const char *env = getenv("KVTIER_SOCKET");

	if (env && *env)
		return env;
	if (geteuid() == 0)
		return "/run/kvtier/kvtierd.sock";
	snprintf(buf, len, "/tmp/kvtier-%u/kvtierd.sock", (unsigned)geteuid());
	return buf;
}

int kvt_stats_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "token", required_argument, NULL, 't' },
		{ "mrc", no_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvt_client_opts copts;
	struct kvt_client *c;
	char buf[128], *text = NULL;
	const char *socket = NULL, *token = NULL;
	bool as_json = false, mrc = false;
	json_t *root;
	int opt, err;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "s:t:mjh", opts, NULL)) != -1) {
		switch (opt) {
		case 's': socket = optarg; break;
		case 't': token = optarg; break;
		case 'm': mrc = true; break;
		case 'j': as_json = true; break;
		case 'h': kvt_stats_usage(stdout); return 0;
		default: kvt_stats_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		kvt_stats_usage(stderr);
		return 2;
	}
	if (!socket)
		socket = default_socket(buf, sizeof(buf));
	kvt_client_opts_init(&copts, sizeof(copts));
	copts.socket_path = socket;
	copts.token = token; /* NULL: $KVTIER_TOKEN */
	err = kvt_client_connect(&copts, &c);
	if (!err) {
		err = kvt_client_stats(c, &text);
		kvt_client_close(c);
	}
	if (err) {
		fprintf(stderr, "kvtier stats: %s: %s\n", socket, kvt_strerror(err));
		return 1;
	}
	root = json_loads(text, 0, NULL);
	free(text);
	if (!root) {
		fprintf(stderr, "kvtier stats: the daemon's reply is not JSON\n");
		return 1;
	}
	if (as_json) {
		json_t *out = mrc ? mrc_only(root) : json_incref(root);

		json_dumpf(out, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
		putchar('\n');
		json_decref(out);
	} else if (mrc) {
		print_mrc(root);
	} else {
		print_table(root, socket);
		if (json_is_object(json_object_get(root, "tenant")))
			print_tenant(json_object_get(root, "tenant"));
	}
	json_decref(root);
	return 0;
}
