#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier beside its peers (Mooncake Store, LMCache) on one machine: the same
block shapes, the same counts, the same file system, in one run.

    peers_bench.py [--stores kvtier,mooncake,lmcache] [--shapes 2M,256K]
                   [--total 1G] [--clients 8] [--reps 3] [--dir DIR]
                   [--no-ssd] [--no-peer] [--json FILE] [--require STORES] [--smoke]

Each repetition starts each store afresh, then, per block shape:
  - ready_s: from starting the store's processes to a client connecting;
    the rows below start then: every store faults its memory in as it is
    used (kvtierd a little ahead of its slots, in the background);
  - one client puts --total bytes in 32-block batches (put_gbps_1), gets them
    back (get_gbps_1), gets each 32-block batch again timed alone
    (get32_p50_ms, get32_p99_ms) and looks up a 64-block prefix 200 times
    (lookup64_p50_us);
  - --clients processes put and get --total bytes between them, at least
    32 blocks each (put_gbps_8, get_gbps_8), started together;
  - mem_per_gb: bytes the store's processes hold (RSS and huge pages, less
    the engines' buffers they map) per byte stored, with both phases' blocks
    stored; every store gets the same capacity, room for all of them;
  - peer_get_gbps: two nodes of the store on this machine, over TCP on
    loopback; one client puts --total bytes through node A, another gets
    them through node B, which fetches them from A (kvtierd: its cluster's
    peer tier, with a redis-server the bench starts; Mooncake: a second
    mooncake_client reading A's segment with its TCP transfer engine);
  - ssd_get_gbps: a store with a small DRAM tier and an SSD tier under --dir,
    --total put, the store restarted so that what is read comes from its
    files, then one client gets the leading run of blocks on the SSD.
Rows report the median over --reps; a store that cannot do a row says why.
Prints a table, and the JSON document with --json (or '-' for stdout).
"""

import argparse
import json
import multiprocessing
import os
import platform
import signal
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROWS = [
    ("put_gbps_1", "put GB/s, 1 client", True),
    ("get_gbps_1", "get GB/s, 1 client", True),
    ("put_gbps_8", "put GB/s, N clients", True),
    ("get_gbps_8", "get GB/s, N clients", True),
    ("get32_p50_ms", "32-block get p50 ms", False),
    ("get32_p99_ms", "32-block get p99 ms", False),
    ("lookup64_p50_us", "64-block lookup p50 us", False),
    ("ssd_get_gbps", "SSD-resident get GB/s", True),
    ("peer_get_gbps", "get GB/s from another node, TCP", True),
    ("mem_per_gb", "memory per GB stored", False),
    ("ready_s", "start to ready s", False),
]


# (store, row) a store cannot do on this machine (common.Unsupported): not
# counted against --require
CANNOT = set()


# the DRAM tier of the SSD row: small beside --total, so most blocks go down
def ssd_row_dram(total):
    return max(16 << 20, min(64 << 20, total // 4))


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def load_store(name):
    if name == "kvtier":
        import side_kvtier
        return side_kvtier.Store()
    if name == "mooncake":
        import side_mooncake
        return side_mooncake.Store()
    if name == "lmcache":
        import side_lmcache
        return side_lmcache.Store()
    raise SystemExit("unknown store: " + name)


def _one_client(store, nblocks, out):
    """The one-client phases, in a process of their own (a store's client
    library may hold threads a fork must not copy)."""
    try:
        c = store.open_client(0, nblocks)
        r = {}
        bs = store.block_bytes
        t0 = time.monotonic()
        for b in range(0, nblocks, common.BATCH):
            c.put(b, min(common.BATCH, nblocks - b))
        r["put_gbps_1"] = nblocks * bs / (time.monotonic() - t0) / 1e9
        t0 = time.monotonic()
        got = 0
        for b in range(0, nblocks, common.BATCH):
            got += c.get(b, min(common.BATCH, nblocks - b))
        r["get_gbps_1"] = nblocks * bs / (time.monotonic() - t0) / 1e9
        if got != nblocks:
            raise RuntimeError("got %d of %d blocks back" % (got, nblocks))
        c.verify()
        lat = []
        for b in range(0, nblocks - common.BATCH + 1, common.BATCH):
            t0 = time.monotonic()
            n = c.get(b, common.BATCH)
            lat.append(time.monotonic() - t0)
            if n != common.BATCH:
                raise RuntimeError("32-block get returned %d" % n)
        r["get32_p50_ms"] = common.median(lat) * 1e3
        r["get32_p99_ms"] = common.percentile(lat, 99) * 1e3
        lk = []
        for _ in range(200):
            t0 = time.monotonic()
            n = c.lookup(common.LOOKUP_BLOCKS)
            lk.append(time.monotonic() - t0)
            if n != min(common.LOOKUP_BLOCKS, nblocks):
                raise RuntimeError("lookup found %d" % n)
        r["lookup64_p50_us"] = common.median(lk) * 1e6
        c.close()
        out.put((r, None))
    except Exception as e:
        out.put((None, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))


def _cold_get(store, nblocks, phase, out):
    try:
        c = store.open_client(0, nblocks)
        bs = store.block_bytes
        if phase == "put":
            for b in range(0, nblocks, common.BATCH):
                c.put(b, min(common.BATCH, nblocks - b))
            out.put((None, None))
        else:
            # the blocks that went down to the SSD when the small DRAM tier
            # filled (the last ones saved, still in DRAM at the restart, are
            # gone): the leading run the store reports as SSD-resident
            where = c.tiers(nblocks)
            n = nblocks
            if where:
                n = 0
                while n < len(where) and where[n] == "ssd":
                    n += 1
                if n < nblocks // 2:
                    raise RuntimeError("only %d of %d blocks on the SSD" % (n, nblocks))
            t0 = time.monotonic()
            got = 0
            for b in range(0, n, common.BATCH):
                got += c.get(b, min(common.BATCH, n - b))
            gbps = n * bs / (time.monotonic() - t0) / 1e9
            if got != n:
                raise RuntimeError("got %d of %d blocks back from the SSD" % (got, n))
            c.verify()
            out.put(({"ssd_get_gbps": gbps}, None))
        c.close()
    except Exception as e:
        out.put((None, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))


def _peer_get(store, nblocks, phase, out):
    """The two-node row: put through node A (phase "put"), then get through
    node B what B finds is stored (the directory of the cluster may take a
    moment to tell B)."""
    try:
        bs = store.block_bytes
        if phase == "put":
            c = store.open_client(0, nblocks, node=0)
            for b in range(0, nblocks, common.BATCH):
                c.put(b, min(common.BATCH, nblocks - b))
            c.close()
            out.put((None, None))
            return
        c = store.open_client(0, nblocks, node=1)
        end = time.monotonic() + 30
        while c.lookup(nblocks) < nblocks and time.monotonic() < end:
            time.sleep(0.05)
        where = c.tiers(nblocks)
        if c.lookup(nblocks) < nblocks or (where and set(where) != {"remote"}):
            raise RuntimeError("node B finds %d of %d blocks (%s)" %
                               (c.lookup(nblocks), nblocks, sorted(set(where))))
        t0 = time.monotonic()
        got = 0
        for b in range(0, nblocks, common.BATCH):
            got += c.get(b, min(common.BATCH, nblocks - b))
        gbps = nblocks * bs / (time.monotonic() - t0) / 1e9
        if got != nblocks:
            raise RuntimeError("node B got %d of %d blocks" % (got, nblocks))
        c.verify()
        c.close()
        out.put(({"peer_get_gbps": gbps}, None))
    except Exception as e:
        out.put((None, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))


def peer_row(store, work, shape, capacity, nblocks):
    """The two-node row on a pair of store's nodes started for it:
    {"peer_get_gbps": GB/s}."""
    store.start_pair(work, shape, capacity)
    try:
        in_child(_peer_get, store, nblocks, "put")
        return in_child(_peer_get, store, nblocks, "get")
    finally:
        store.stop()


def in_child(fn, *args):
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=fn, args=args + (q,))
    p.start()
    res, err = q.get(timeout=1200)
    p.join(60)
    if err:
        raise RuntimeError(err)
    return res


def run_rep(store, shape, args, work):
    """One repetition of every row for store at shape: {row: value}, and
    {row: why} for the rows it could not do (a phase that fails is reported
    as its row's reason; the next phases still run)."""
    values, why = {}, {}
    nblocks = args.total // shape
    per_client = max(common.BATCH, nblocks // args.clients)
    stored = (nblocks + per_client * args.clients) * shape
    # room for all of it below the stores' eviction watermarks (Mooncake
    # evicts above 90% of its segment), the same for every store
    capacity = stored + stored // 4 + (256 << 20)

    def phase(rows, fn):
        try:
            fn()
        except common.Unsupported as e:
            why.update({r: str(e) for r in rows})
            CANNOT.update((store.name, r) for r in rows)
        except Exception as e:
            msg = str(e).strip().splitlines()
            why.update({r: "failed: " + (msg[0] if msg else type(e).__name__) for r in rows})

    def one_client():
        values.update(in_child(_one_client, store, nblocks))

    def clients(op):
        def run():
            secs, done = common.run_clients(store, args.clients, per_client, op)
            if done != per_client * args.clients:
                raise RuntimeError("%d clients: %d of %d blocks %s" %
                                   (args.clients, done, per_client * args.clients,
                                    "stored" if op == "put" else "came back"))
            values[op + "_gbps_8"] = done * shape / secs / 1e9
        return run

    def memory():
        values["mem_per_gb"] = common.memory_of(store.store_pids(), store.engine_maps()) / stored

    store.generation += 1
    t0 = time.monotonic()
    store.start(work, shape, capacity)
    values["ready_s"] = time.monotonic() - t0
    try:
        phase(["put_gbps_1", "get_gbps_1", "get32_p50_ms", "get32_p99_ms", "lookup64_p50_us"],
              one_client)
        store.generation += 1
        phase(["put_gbps_8"], clients("put"))
        if "put_gbps_8" in values:
            phase(["get_gbps_8"], clients("get"))
        else:
            why["get_gbps_8"] = "nothing to get: the put failed"
        phase(["mem_per_gb"], memory)
    finally:
        store.stop()
    if args.peer:
        def peer():
            store.generation += 1
            values.update(peer_row(store, work, shape, capacity, nblocks))
        phase(["peer_get_gbps"], peer)
    if args.ssd:
        def ssd():
            store.generation += 1
            store.start(work, shape, ssd_row_dram(args.total), ssd=2 * args.total)
            try:
                in_child(_cold_get, store, nblocks, "put")
                store.restart_cold()
                values.update(in_child(_cold_get, store, nblocks, "get"))
            finally:
                store.stop()
        phase(["ssd_get_gbps"], ssd)
    return values, why


def table(doc):
    lines = []
    stores = doc["stores"]
    for sh in doc["shapes"]:
        lines.append("")
        lines.append("block %s, %d clients for the N rows, medians of %d reps"
                     % (sh["block"], doc["clients"], doc["reps"]))
        head = ["row"] + [s for s in stores] + ["kvtier/" + s for s in stores if s != "kvtier"]
        lines.append(" | ".join(head))
        for key, label, higher_better in ROWS:
            r = sh["rows"][key]
            cells = [label]
            for s in stores:
                v = r[s]
                cells.append("%.3g" % v if isinstance(v, (int, float)) else "-")
            for s in stores:
                if s == "kvtier":
                    continue
                ratio = r.get("kvtier_over_" + s)
                cells.append("%.2fx" % ratio if ratio is not None else "-")
            lines.append(" | ".join(cells))
        for key, _, _ in ROWS:
            for s, reason in sh["rows"][key].get("why", {}).items():
                lines.append("  %s, %s: %s" % (key, s, reason))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--stores", default="kvtier,mooncake,lmcache")
    ap.add_argument("--shapes", default="2M,256K")
    ap.add_argument("--total", default="1G", help="bytes each throughput phase moves")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-ssd", dest="ssd", action="store_false")
    ap.add_argument("--no-peer", dest="peer", action="store_false",
                    help="leave out the two-node row")
    ap.add_argument("--dir", default=None, help="where the stores keep their files "
                    "(the same file system for all; not tmpfs)")
    ap.add_argument("--json", default=None, help="write the JSON here ('-': stdout)")
    ap.add_argument("--require", default="",
                    help="stores (comma-separated) that must fill every row, else exit 1")
    ap.add_argument("--smoke", action="store_true",
                    help="toy sizes, one rep: proves the bench runs")
    args = ap.parse_args()
    # SIGTERM unwinds like an error, so each store's processes are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.smoke:
        args.total, args.reps, args.clients = "64M", 1, 2
    args.total = parse_size(args.total)
    shapes = [parse_size(s) for s in args.shapes.split(",")]
    for sh in shapes:
        if sh not in common.SHAPES:
            raise SystemExit("block shapes: 2M or 256K")
    names = args.stores.split(",")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="peers-bench.", dir=args.dir)

    stores, versions, unavailable = [], {}, {}
    for n in names:
        try:
            st = load_store(n)
            versions[n] = st.version()
            stores.append(st)
        except (ImportError, common.Unsupported) as e:
            unavailable[n] = "not installed or cannot run here: %s" % e
    doc = {"stores": [s.name for s in stores] + list(unavailable), "versions": versions,
           "unavailable": unavailable, "clients": args.clients, "reps": args.reps,
           "total_bytes": args.total, "batch_blocks": common.BATCH,
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                       "dir": work}, "shapes": []}
    for shape in shapes:
        per = {s.name: [] for s in stores}
        why = {s.name: {} for s in stores}
        for rep in range(args.reps):
            # each repetition starts with the next store, so that each store
            # follows each other one as often: a store's exit (memory freed,
            # files written back) slows the one after it
            k = rep % len(stores) if stores else 0
            for st in stores[k:] + stores[:k]:
                try:
                    v, w = run_rep(st, shape, args, work)
                except common.Unsupported as e:
                    v, w = {}, {k: str(e) for k, _, _ in ROWS}
                per[st.name].append(v)
                why[st.name].update(w)
                print("%s %s rep %d: %s" % (st.name, common.shape_name(shape), rep,
                                            json.dumps({k: round(x, 4) for k, x in v.items()})),
                      file=sys.stderr, flush=True)
        rows = {}
        for key, _, higher_better in ROWS:
            r = {"why": {}}
            for st in stores:
                vals = [v[key] for v in per[st.name] if key in v]
                r[st.name] = common.median(vals)
                r[st.name + "_all"] = vals
                if r[st.name] is None:
                    r["why"][st.name] = why[st.name].get(key, "not measured")
            for n, reason in unavailable.items():
                r[n] = None
                r["why"][n] = reason
            for n in doc["stores"]:
                if n == "kvtier":
                    continue
                a, b = r.get("kvtier"), r.get(n)
                if a is None or b is None or a == 0 or b == 0:
                    r["kvtier_over_" + n] = None
                else:
                    # > 1 means kvtier is better, whichever way the row goes
                    r["kvtier_over_" + n] = (a / b) if higher_better else (b / a)
            rows[key] = r
        doc["shapes"].append({"block": common.shape_name(shape), "block_bytes": shape,
                              "rows": rows})
    os.rmdir(work) if not os.listdir(work) else None
    print(table(doc), file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    missing = ["%s %s: %s" % (sh["block"], key, n)
               for n in filter(None, args.require.split(","))
               for sh in doc["shapes"] for key, _, _ in ROWS
               if sh["rows"][key].get(n) is None and (n, key) not in CANNOT]
    if missing:
        sys.exit("rows not measured: " + ", ".join(missing))


if __name__ == "__main__":
    main()
