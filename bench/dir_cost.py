#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the cluster's directory costs Redis, measured on real kvtierd nodes
and a real redis-server.

    dir_cost.py [--blocks 100000] [--nodes 4] [--lookup-keys 16384]
                [--lookups 20] [--idle-secs 10] [--json FILE] [--no-batches]

A redis-server on a Unix socket (no persistence) and --nodes kvtierd in one
cluster (small 2 KiB blocks: the directory's cost does not depend on the
block size). Redis's own counters (CONFIG RESETSTAT, then INFO
commandstats, stats, cpu, memory) are read around each phase:

  - idle: the nodes only renew their membership and read the others',
    for --idle-secs: commands, bytes and Redis CPU per node per second;
  - save: node A saves --blocks blocks (requests of 1,024, paced so that
    its hint queue never overflows), until every hint is written: Redis
    commands, bytes in and out and Redis CPU per block saved, and the
    memory per stored block (used_memory before and after, and MEMORY
    USAGE of a sample of the hint keys);
  - lookup: node B LOOKUPs the first --lookup-keys blocks (all held by A,
    none by B) --lookups times, and a 64-block prefix as often, a second
    apart (kvtierd answers a LOOKUP of keys it found in the last second
    from its holder cache, with no Redis command; these are cold): Redis
    commands, bytes and CPU per LOOKUP, and its latency through kvtierd
    (from this script, through the Python binding);
  - batches (unless --no-batches): redis-benchmark on the same hint keys,
    one client, --lookup-keys keys read as MGETs of 256, 1,024, 4,096 and
    all of them pipelined, each beside a second client's GET latency: how
    long the lookup takes, and how long it holds up another node's command.

The idle figures less the save and lookup phases' share of them are what
the phases themselves cost. Prints a table, and the JSON with --json ('-':
stdout). Needs redis-server (and redis-benchmark for the batches), a built
kvtierd ($KVTIERD or build/release) and the Python binding on PYTHONPATH
(python/).
"""

import argparse
import ctypes
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvtier  # noqa: E402
from kvtier.daemon import Daemon  # noqa: E402

# a tiny model: 4 layers, 2 KV heads of 16 dims, 4 tokens a block, bf16 = 2 KiB
SHAPE = dict(layers=4, kv_heads=2, head_dim=16, block_tokens=4)
BLOCK_BYTES = 2 * 4 * 2 * 16 * 4 * 2
SAVE_BATCH = 1024


class Redis:
    """redis-server on a Unix socket in a directory of its own, and a
    minimal RESP client for INFO and friends."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvt-dircost.", dir="/tmp")  # short socket path
        self.sock = os.path.join(self.dir, "redis.sock")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.sock, "--save", "",
             "--appendonly", "no", "--dir", self.dir], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        for _ in range(500):
            if os.path.exists(self.sock):
                try:
                    self.s = socket.socket(socket.AF_UNIX)
                    self.s.connect(self.sock)
                    self.f = self.s.makefile("rb")
                    break
                except OSError:
                    self.s.close()
            time.sleep(0.01)
        else:
            raise RuntimeError("redis-server did not start")
        self.url = "unix://" + self.sock

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self._reply()

    def _reply(self):
        line = self.f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            if kind == b"-":
                raise RuntimeError(rest.decode())
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise RuntimeError("RESP: %r" % line)

    def info(self, section):
        """INFO section as a dict; commandstats as {cmd: {calls, usec}}."""
        out = {}
        for line in self.cmd("INFO", section).decode().splitlines():
            if not line or line.startswith("#") or ":" not in line:
                continue
            k, v = line.split(":", 1)
            if k.startswith("cmdstat_"):
                fields = dict(x.split("=") for x in v.split(","))
                out[k[8:]] = {"calls": int(fields["calls"]), "usec": int(fields["usec"])}
            else:
                try:
                    out[k] = float(v) if "." in v else int(v)
                except ValueError:
                    out[k] = v
        return out

    def snapshot(self):
        st = self.info("stats")
        cpu = self.info("cpu")
        return {"t": time.monotonic(), "cmds": self.info("commandstats"),
                "in": st["total_net_input_bytes"], "out": st["total_net_output_bytes"],
                "cpu": cpu["used_cpu_sys"] + cpu["used_cpu_user"],
                "mem": self.info("memory")["used_memory"]}

    def stop(self):
        self.s.close()
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def delta(a, b):
    """What Redis did between snapshots a and b."""
    cmds = {}
    for name, v in b["cmds"].items():
        if name in ("info", "config|resetstat"):
            continue  # this script's own
        p = a["cmds"].get(name, {"calls": 0, "usec": 0})
        if v["calls"] > p["calls"]:
            cmds[name] = {"calls": v["calls"] - p["calls"], "usec": v["usec"] - p["usec"]}
    return {"secs": b["t"] - a["t"], "cmds": cmds, "in": b["in"] - a["in"],
            "out": b["out"] - a["out"], "cpu": b["cpu"] - a["cpu"], "mem": b["mem"] - a["mem"]}


def less_idle(d, idle_rate):
    """d less what the idle membership traffic did meanwhile."""
    s = d["secs"]
    cmds = {}
    for name, v in d["cmds"].items():
        r = idle_rate["cmds"].get(name, {"calls": 0, "usec": 0})
        cmds[name] = {"calls": max(0.0, v["calls"] - r["calls"] * s),
                      "usec": max(0.0, v["usec"] - r["usec"] * s)}
    return {"secs": s, "cmds": cmds, "in": max(0.0, d["in"] - idle_rate["in"] * s),
            "out": max(0.0, d["out"] - idle_rate["out"] * s),
            "cpu": max(0.0, d["cpu"] - idle_rate["cpu"] * s), "mem": d["mem"]}


def per(d, n, only=None):
    """d per unit (n units); of the commands, only those named, if any."""
    return {"cmds": {k: {"calls": v["calls"] / n, "usec": v["usec"] / n}
                     for k, v in d["cmds"].items() if not only or k in only},
            "bytes_in": d["in"] / n, "bytes_out": d["out"] / n, "cpu_us": d["cpu"] * 1e6 / n}


class Node:
    def __init__(self, redis, node_id, secret, dram):
        extra = ["--cluster", redis.url, "--node-id", node_id, "--peer-listen",
                 "127.0.0.1:%d" % free_port(), "--cluster-secret-file", secret, "--no-prefault"]
        self.d = Daemon(extra=extra, dram=dram, ssd="0")
        self.c = kvtier.Client(socket=self.d.socket)
        self.ns = self.c.hello("dir-cost", **SHAPE)
        assert self.ns.page_bytes * SHAPE["layers"] * 2 == BLOCK_BYTES

    def directory(self):
        return self.c.stats()["cluster"]["directory"]

    def close(self):
        self.c.close()
        self.d.remove()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(cond, secs, what):
    end = time.monotonic() + secs
    while not cond():
        if time.monotonic() > end:
            raise RuntimeError("timed out: " + what)
        time.sleep(0.05)


def save_phase(redis, a, keys, idle_rate):
    mem = kvtier.EngineMemory.paged(a.ns, pages=SAVE_BATCH)
    region = a.c.register(a.ns, mem)
    before = a.directory()
    s0 = redis.snapshot()
    for first in range(0, len(keys), SAVE_BATCH):
        chunk = keys[first:first + SAVE_BATCH]
        # the hint queue holds 65,536 keys; a faster SAVE would drop some
        wait(lambda: a.directory()["queued_keys"] < 32768, 60, "hint queue drains")
        got = a.c.save(a.ns, region, chunk, list(range(len(chunk))),
                       parent=keys[first - 1] if first else None).wait()
        if got != len(chunk):
            raise RuntimeError("SAVE stored %d of %d" % (got, len(chunk)))
    want = before["published_keys"] + len(keys)
    wait(lambda: a.directory()["published_keys"] >= want and a.directory()["queued_keys"] == 0,
         120, "every hint written")
    s1 = redis.snapshot()
    after = a.directory()
    mem.close()
    d = less_idle(delta(s0, s1), idle_rate)
    # EVALSHA, and the GET and SET the script runs inside it
    out = per(d, len(keys), ("evalsha", "get", "set"))
    out["blocks"] = len(keys)
    out["secs"] = d["secs"]
    out["dropped_hints"] = after["dropped_keys"] - before["dropped_keys"]
    out["used_memory_per_block"] = d["mem"] / len(keys)
    sample = keys[:: max(1, len(keys) // 1000)]
    usage = [redis.cmd("MEMORY", "USAGE", "kvt:blk:" + bytes(k).hex(), "SAMPLES", "0")
             for k in sample]
    out["memory_usage_per_key"] = statistics.mean(u for u in usage if u is not None)
    value = redis.cmd("GET", "kvt:blk:" + bytes(keys[0]).hex())
    out["hint_value"] = value.decode() if value else None
    out["dbsize"] = redis.cmd("DBSIZE")
    return out


HOLDERS_FRESH_S = 1.1    # cluster/peer_tier.c HELD_FRESH_NS, and a margin


def lookup_phase(redis, b, keys, n, reps, idle_rate):
    # the keys and tiers arrays made once: the binding's conversion of a
    # Python list of 16,384 keys takes longer than the LOOKUP itself
    arr, _ = kvtier._keys_array(keys[:n])
    tiers = (ctypes.c_uint8 * n)()
    lat = []
    s0 = redis.snapshot()
    for r in range(reps):
        if r:
            # the peer tier answers a LOOKUP of keys it found in the last
            # second from its own cache, without Redis: wait that out, so
            # that each LOOKUP is a cold one, whose cost is the directory's
            time.sleep(HOLDERS_FRESH_S)
        t0 = time.monotonic()
        hit = kvtier._lib.kvt_client_lookup(b.c._c, ctypes.byref(b.ns._raw), arr, n, tiers)
        lat.append(time.monotonic() - t0)
        if hit != n or kvtier.TIER_NAMES.get(tiers[n - 1]) != "remote":
            raise RuntimeError("LOOKUP of %d found %d" % (n, hit))
    s1 = redis.snapshot()
    out = per(less_idle(delta(s0, s1), idle_rate), reps, ("mget",))
    out["keys"] = n
    out["p50_ms"] = statistics.median(lat) * 1e3
    return out


def batches_phase(redis, keys, n, reps):
    """redis-benchmark MGETs of n hint keys in batches, one client, beside a
    second client's GETs."""
    if not shutil.which("redis-benchmark"):
        return {"skipped": "no redis-benchmark"}
    names = ["kvt:blk:" + bytes(k).hex() for k in keys[:n]]
    rows = []
    for batch in (256, 1024, 4096, n):
        if batch > n or (rows and rows[-1]["batch"] == batch):
            continue
        pipe = (n + batch - 1) // batch
        cmd = ["redis-benchmark", "-s", redis.sock, "-c", "1", "-n", str(pipe * reps), "-P",
               str(pipe), "--csv", "MGET"] + names[:batch]
        other = {}

        def other_client():
            time.sleep(0.2)
            r = subprocess.run(["redis-benchmark", "-s", redis.sock, "-c", "1", "-n", "2000",
                                "-t", "get", "--csv"], capture_output=True, text=True)
            f = r.stdout.strip().splitlines()[-1].strip('"').split('","')
            other.update(p50_ms=float(f[-4]), p99_ms=float(f[-2]), max_ms=float(f[-1]))

        th = threading.Thread(target=other_client)
        th.start()
        r = subprocess.run(cmd, capture_output=True, text=True)
        th.join()
        f = r.stdout.strip().splitlines()[-1].strip('"').split('","')
        rps = float(f[-7])
        rows.append({"batch": batch, "mgets": pipe, "lookup_ms": pipe / rps * 1e3,
                     "other_get": other})
    return {"keys": n, "lookups": reps, "rows": rows}


def table(doc):
    lines = []
    i = doc["idle"]
    lines.append("idle: %d nodes: %.1f commands/s per node (%s), %.0f B/s in and %.0f B/s "
                 "out per node; Redis CPU %.0f us/s in all; a node's record %d B" %
                 (doc["nodes"], sum(v["calls"] for v in i["cmds"].values()),
                  ", ".join("%s %.1f" % (k, v["calls"]) for k, v in sorted(i["cmds"].items())),
                  i["bytes_in"], i["bytes_out"], i["server_cpu_us_per_s"],
                  i["member_record_bytes"]))
    s = doc["save"]
    lines.append("save: %d blocks: per block %s; %.0f B in, %.0f B out; Redis CPU %.1f us "
                 "(EVALSHA %.1f us); used_memory %.0f B, MEMORY USAGE %.0f B; hints dropped %d" %
                 (s["blocks"], ", ".join("%s %.2f" % (k, v["calls"])
                                         for k, v in sorted(s["cmds"].items())),
                  s["bytes_in"], s["bytes_out"], s["cpu_us"],
                  s["cmds"].get("evalsha", {}).get("usec", 0), s["used_memory_per_block"],
                  s["memory_usage_per_key"], s["dropped_hints"]))
    for k in ("lookup_long", "lookup_64"):
        lk = doc[k]
        lines.append("LOOKUP of %d keys: per LOOKUP %s (MGET %.0f us); %.0f B in, %.0f B out; "
                     "Redis CPU %.0f us; p50 %.2f ms through kvtierd" %
                     (lk["keys"], ", ".join("%s %.2f" % (c, v["calls"])
                                            for c, v in sorted(lk["cmds"].items())),
                      lk["cmds"].get("mget", {}).get("usec", 0), lk["bytes_in"],
                      lk["bytes_out"], lk["cpu_us"], lk["p50_ms"]))
    bt = doc.get("batches", {})
    for r in bt.get("rows", []):
        o = r["other_get"]
        lines.append("MGET batches of %5d (%2d pipelined) for %d keys: %.2f ms a lookup; "
                     "another client's GET p50 %.3f p99 %.3f max %.3f ms" %
                     (r["batch"], r["mgets"], bt["keys"], r["lookup_ms"], o.get("p50_ms", 0),
                      o.get("p99_ms", 0), o.get("max_ms", 0)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--blocks", type=int, default=100000)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--lookup-keys", type=int, default=16384)
    ap.add_argument("--lookups", type=int, default=20)
    ap.add_argument("--idle-secs", type=float, default=10)
    ap.add_argument("--no-batches", dest="batches", action="store_false")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.nodes < 2:
        raise SystemExit("--nodes: at least 2")
    # what this machine lacks is a skip (77), as in the tests
    if not shutil.which("redis-server"):
        print("skip: no redis-server (Debian's redis-server package)", file=sys.stderr)
        sys.exit(77)
    from kvtier.daemon import find_kvtierd
    if "--cluster" not in subprocess.run([find_kvtierd(), "--help"], capture_output=True,
                                         text=True).stdout:
        print("skip: this kvtierd is built without the cluster (hiredis)", file=sys.stderr)
        sys.exit(77)
    nlook = min(args.lookup_keys, args.blocks)
    redis = Redis()
    nodes = []
    work = tempfile.mkdtemp(prefix="kvt-dircost-secret.")
    try:
        secret = os.path.join(work, "cluster.secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, secrets.token_hex(32).encode())
        os.close(fd)
        dram = "%dM" % (args.blocks * BLOCK_BYTES * 5 // 4 // (1 << 20) + 32)
        for i in range(args.nodes):
            nodes.append(Node(redis, "n%d" % i, secret, dram if i < 2 else "16M"))
        wait(lambda: all(n.directory()["members"] == args.nodes and n.directory()["reachable"]
                         for n in nodes), 30, "every node sees every other")
        a, b = nodes[0], nodes[1]
        tokens = [(7919 * t + 13) & 0x7FFFFFFF for t in range(args.blocks * SHAPE["block_tokens"])]
        keys = a.ns.prefix_keys(tokens)
        doc = {"nodes": args.nodes, "block_bytes": BLOCK_BYTES,
               "redis": redis.info("server").get("redis_version")}

        redis.cmd("CONFIG", "RESETSTAT")
        s0 = redis.snapshot()
        time.sleep(args.idle_secs)
        idle = delta(s0, redis.snapshot())
        rate = {"cmds": {k: {"calls": v["calls"] / idle["secs"], "usec": v["usec"] / idle["secs"]}
                         for k, v in idle["cmds"].items()},
                "in": idle["in"] / idle["secs"], "out": idle["out"] / idle["secs"],
                "cpu": idle["cpu"] / idle["secs"]}
        # per node per second; Redis's CPU for the whole server (its own
        # timers included)
        doc["idle"] = per(idle, idle["secs"] * args.nodes)
        doc["idle"]["server_cpu_us_per_s"] = idle["cpu"] * 1e6 / idle["secs"]
        doc["idle"]["member_record_bytes"] = len(redis.cmd("GET", "kvt:node:n0") or b"")
        doc["save"] = save_phase(redis, a, keys, rate)
        doc["lookup_long"] = lookup_phase(redis, b, keys, nlook, args.lookups, rate)
        doc["lookup_64"] = lookup_phase(redis, b, keys, min(64, nlook), args.lookups, rate)
        if args.batches:
            doc["batches"] = batches_phase(redis, keys, nlook, 100)
    finally:
        for n in nodes:
            n.close()
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(table(doc), file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")


if __name__ == "__main__":
    main()
