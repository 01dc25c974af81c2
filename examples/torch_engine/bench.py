#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time to first token of the reference engine with kvtier and without.

For each prefix length P: a prompt of P shared tokens (a system prompt, a
document) and a question of Q tokens. TTFT, from the request's arrival to
its first token, three ways, on the same engine, weights and machine:

  recompute   a cold request: its LOOKUP misses (one round trip), it
              computes all P + Q tokens, and saves them after its first token
  load DRAM   the same request again: the prefix loaded from kvtierd's DRAM
              tier layer by layer while the question's chunk computes
  load SSD    the same with the prefix's blocks demoted to the SSD tier
              first (other blocks fill DRAM, then are removed, so the load
              reads SSD and never waits for a demotion)

and what the daemon's plan chose for each (plan_dram_tokens, plan_ssd_tokens:
the prefix tokens LOOKUP's plan would have the engine load; the loaded runs
load the whole prefix whatever the plan says, to time the load), beside what
`kvtier-bench recompute` predicts for the same shapes: its CPU
prefill (OpenBLAS sgemm at the engine's chunk rows, measured) and its
measured DRAM-tier and SSD-tier bandwidths. Each rep asks a new question
(the question's own blocks are removed after each run, so only the prefix
is ever loaded); the loaded runs' first-token logits are checked against
the recompute run's, bitwise (the cuts are the same).

    bench.py [--config FILE] [--prefix-tokens 512,1K,2K,4K,8K] [--json]

Medians over --reps. Run it alone: other benchmarks on the machine skew
its timings. Needs kvtierd and kvtier-bench (a build tree, or $KVTIERD and
$KVTIER_BENCH) and the interpreter that has torch (/usr/bin/python3).
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))


def parse_tokens(s):
    out = []
    for part in s.split(","):
        part = part.strip()
        mult = 1024 if part[-1:] in "kK" else 1
        out.append(int(part[:-1] if mult > 1 else part) * mult)
    if not out or any(v <= 0 for v in out):
        raise argparse.ArgumentTypeError("a list of positive token counts")
    return out


def find_bench():
    env = os.environ.get("KVTIER_BENCH")
    if env:
        return env
    for preset in ("release", "asan"):
        p = os.path.join(ROOT, "build", preset, "bench", "kvtier-bench")
        if os.path.exists(p):
            return p
    return "kvtier-bench"


def predict(args, sizes):
    """kvtier-bench recompute's figures for the model at the given lengths:
    {tokens: cpu prefill s}, {tokens: dram-tier load s}, {tokens: ssd-tier load s}."""
    cmd = [find_bench(), "recompute", "--models", args.config,
           "--sizes", ",".join(str(s) for s in sorted(set(sizes))),
           "--gemm-tokens", str(args.chunk_tokens), "--block-tokens", "16",
           "--reps", str(args.reps), "--bytes", args.predict_bytes, "--dir", args.dir, "--json"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        raise RuntimeError("%s: %s" % (" ".join(cmd), p.stderr.strip()))
    doc = json.loads(p.stdout)
    model = doc["models"][0]
    cpu = next(r for r in model["recompute"] if r["name"] == "cpu-openblas")
    links = {l["name"]: {pt["tokens"]: pt["load_s"] for pt in l["points"]}
             for l in model["interconnects"]}
    paths = {l["name"]: l["bytes_per_s"] for l in doc["paths"]
             if l["name"] in ("dram-tier", "ssd-tier")}
    return ({pt["tokens"]: pt["seconds"] for pt in cpu["points"]},
            links.get("dram-tier", {}), links.get("ssd-tier", {}), cpu["flops_per_s"], paths)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="TTFT of the reference engine: prefix loaded from kvtier's DRAM and SSD "
                    "tiers against recomputed, beside kvtier-bench recompute's prediction. "
                    "Exit status 0; 1 when a loaded run's logits differ from the recomputed "
                    "run's; 2 on a usage error.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--config", metavar="FILE", default=os.path.join(HERE, "configs", "qwen3-0.6b.json"),
                    help="model config.json (default configs/qwen3-0.6b.json)")
    ap.add_argument("--prefix-tokens", type=parse_tokens, metavar="LIST", default=parse_tokens("512,1K,2K,4K,8K"),
                    help="prefix lengths, K = 1024 (default 512,1K,2K,4K,8K)")
    ap.add_argument("--question-tokens", type=int, default=256, metavar="N",
                    help="tokens after the prefix (default 256, one chunk)")
    ap.add_argument("--chunk-tokens", type=int, default=256, metavar="N", help="prefill chunk (default 256)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, metavar="N",
                    help="torch and OpenBLAS threads (default: every CPU)")
    ap.add_argument("--reps", type=int, default=3, metavar="N", help="repetitions, medians reported (3)")
    ap.add_argument("--seed", type=int, default=1, metavar="N", help="weights' seed (default 1)")
    ap.add_argument("--dir", default="/var/tmp",
                    help="where kvtierd's SSD tier and the prediction's files go; must allow "
                         "O_DIRECT, so not tmpfs (default /var/tmp)")
    ap.add_argument("--predict-bytes", default="64M", metavar="SIZE",
                    help="bytes per bandwidth measurement of kvtier-bench recompute (64M)")
    ap.add_argument("--no-predict", action="store_true", help="skip kvtier-bench recompute")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.chunk_tokens % 16 or args.question_tokens <= 0 or args.reps <= 0:
        ap.error("--chunk-tokens a multiple of 16; --question-tokens and --reps positive")

    # SIGTERM unwinds, so the daemon below is stopped and its files removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # OpenBLAS reads its thread count when it loads, with torch
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch

    import engine as E
    import kvtier
    from kvtier.daemon import Daemon
    from model import Config, Weights

    torch.set_num_threads(args.threads)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    cfg = Config.load(args.config)
    bt = E.BLOCK_TOKENS
    sizes = sorted(args.prefix_tokens)
    if any(p % bt for p in sizes):
        ap.error("prefix lengths must be multiples of %d" % bt)
    q = args.question_tokens
    t = time.perf_counter()
    weights = Weights(cfg, args.seed)
    say("weights of %s (seed %d) in %.1f s; %d threads" % (cfg.name, args.seed,
                                                            time.perf_counter() - t, args.threads))

    block_bytes = cfg.kv_bytes_per_token * bt
    max_pages = (sizes[-1] + q + bt) // bt + 4
    dram = max(256 << 20, 2 * (sizes[-1] // bt + 1) * block_bytes)
    # plain LRU: under tail-lru a chain leaves DRAM one block per demotion
    # round (a parent becomes a tail only once its child is on SSD), so
    # pushing an 8K-token prefix down would take 512 rounds of filler
    d = Daemon(["--policy", "lru"], dram="%dM" % (dram >> 20), ssd="%dM" % (6 * dram >> 20),
               base=args.dir)
    rows = []
    try:
        # the loaded runs load whatever the plan says: their time is the bench's
        conn = E.make_connector(cfg, args.seed, d.socket, None, use_plan=False)
        eng = E.Engine(cfg, weights, max_pages, conn, chunk_tokens=args.chunk_tokens)
        client = kvtier.Client(socket=d.socket)
        ns = client.hello(E.model_id(cfg, args.seed), layers=cfg.layers, kv_heads=cfg.kv_heads,
                          head_dim=cfg.head_dim, block_tokens=bt, dtype=conn.kv_dtype)
        filler = Filler(client, dram)
        # the first pass allocates and faults in what later ones reuse: not timed
        warm = [1] * (args.chunk_tokens + 1)
        eng.release(eng.generate(E.Request("warm-up", warm, 1)))
        client.remove(ns, ns.prefix_keys(warm)[::-1])
        for p in sizes:
            rng = random.Random(p)
            prefix = [rng.randrange(cfg.vocab) for _ in range(p)]
            keys = ns.prefix_keys(prefix)

            plans = {"dram": [], "ssd": []}

            def run(prompt, want_loaded, tiers):
                hit, load, where = client.lookup_plan(ns, keys)
                if tiers:
                    plans[tiers].append(load * bt)
                if hit != (len(keys) if want_loaded else 0) or (hit and set(where) != {tiers}):
                    raise RuntimeError("P=%d: prefix %d blocks on %s before a %s run" % (
                        p, hit, set(where[:hit]), tiers or "recompute"))
                res = eng.generate(E.Request("p%d" % p, prompt, 1), boundaries=[p])
                eng.release(res)
                if res.loaded_tokens != want_loaded or res.fallback:
                    raise RuntimeError("P=%d: loaded %d tokens, expected %d (fallback %s)" % (
                        p, res.loaded_tokens, want_loaded, res.fallback))
                # what it saved past the prefix goes, so that the next run
                # with this question finds the prefix only
                client.remove(ns, ns.prefix_keys(prompt)[len(keys):][::-1])
                return res

            rc, dram_runs, ssd_runs = [], [], []
            for _ in range(args.reps):
                prompt = prefix + [rng.randrange(cfg.vocab) for _ in range(q)]
                client.remove(ns, keys[::-1])
                rc.append(run(prompt, 0, None))         # cold: misses, computes, saves
                dram_runs.append(run(prompt, p, "dram"))
                filler.push(ns, keys)
                ssd_runs.append(run(prompt, p, "ssd"))
            same = all(torch.equal(a.logits[0], b.logits[0])
                       for runs in (dram_runs, ssd_runs) for a, b in zip(rc, runs))
            row = {
                "prefix_tokens": p, "question_tokens": q,
                "ttft_recompute_s": statistics.median(r.ttft_s for r in rc),
                "ttft_load_dram_s": statistics.median(r.ttft_s for r in dram_runs),
                "ttft_load_ssd_s": statistics.median(r.ttft_s for r in ssd_runs),
                "cpu_recompute_s": statistics.median(r.ttft_cpu_s for r in rc),
                "cpu_load_dram_s": statistics.median(r.ttft_cpu_s for r in dram_runs),
                "cpu_load_ssd_s": statistics.median(r.ttft_cpu_s for r in ssd_runs),
                "prefix_bytes": len(keys) * block_bytes,
                "plan_dram_tokens": statistics.median(plans["dram"]),
                "plan_ssd_tokens": statistics.median(plans["ssd"]),
                "first_token_logits_equal": same,
            }
            row["speedup_dram"] = row["ttft_recompute_s"] / row["ttft_load_dram_s"]
            row["speedup_ssd"] = row["ttft_recompute_s"] / row["ttft_load_ssd_s"]
            rows.append(row)
            say("P=%6d  recompute %8.3f s  load dram %7.3f s (%5.1fx)  load ssd %7.3f s "
                "(%5.1fx)  engine CPU s %.1f / %.1f / %.1f  plan loads %d / %d tokens  "
                "logits equal: %s" % (
                    p, row["ttft_recompute_s"], row["ttft_load_dram_s"], row["speedup_dram"],
                    row["ttft_load_ssd_s"], row["speedup_ssd"], row["cpu_recompute_s"],
                    row["cpu_load_dram_s"], row["cpu_load_ssd_s"], row["plan_dram_tokens"],
                    row["plan_ssd_tokens"], same))
        stats = client.stats()
        filler.close()
        client.close()
        conn.close()
    finally:
        d.remove()

    report = {"bench": "engine", "model": cfg.name, "config": args.config,
              "kv_bytes_per_token": cfg.kv_bytes_per_token, "block_tokens": bt,
              "chunk_tokens": args.chunk_tokens, "threads": args.threads, "reps": args.reps,
              "kvtierd_tiers": stats.get("tiers"),
              "rows": rows}
    if not args.no_predict:
        say("kvtier-bench recompute for the same shapes ...")
        cpu, dram_l, ssd_l, flops, paths = predict(args, sizes + [p + q for p in sizes])
        report["predicted_cpu_flops_per_s"] = flops
        report["predicted_bytes_per_s"] = paths
        for row in rows:
            p = row["prefix_tokens"]
            tail = cpu[p + q] - cpu[p]
            row["predicted_ttft_recompute_s"] = cpu[p + q]
            row["predicted_ttft_load_dram_s"] = dram_l[p] + tail if p in dram_l else None
            row["predicted_ttft_load_ssd_s"] = ssd_l[p] + tail if p in ssd_l else None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0 if all(r["first_token_logits_equal"] for r in rows) else 1


class Filler:
    """Pushes a prefix's blocks from DRAM to SSD: saves other blocks (their
    own namespace, 2 MiB each), as many as DRAM holds, so the demoter moves
    the older prefix down, then removes them, so DRAM has room for the load's
    promotions. No LOOKUP in between: a lookup is a use, and keeps the prefix
    warm."""

    def __init__(self, client, dram_bytes):
        import kvtier
        self.c = client
        self.ns = client.hello("bench/filler", layers=32, kv_heads=8, head_dim=128,
                               block_tokens=16)
        self.mem = kvtier.EngineMemory.paged(self.ns, pages=16)
        self.region = client.register(self.ns, self.mem)
        # SAVEs of 16 blocks that make one DRAM tier's worth, and a bit
        self.saves = (dram_bytes // self.ns.block_bytes + 16) // 16 + 1
        self.n = 0

    def push(self, ns, keys):
        saved = []
        for _ in range(4):
            for _ in range(self.saves):
                fk = self.ns.prefix_keys([self.n * 256 + i for i in range(16 * 16)])
                self.n += 1
                self.c.save(self.ns, self.region, fk, range(16)).wait()
                saved += fk
            hit, tiers = self.c.lookup(ns, keys)
            if hit == len(keys) and set(tiers) == {"ssd"}:
                break
        else:
            raise RuntimeError("after %d filler blocks the prefix has %d of %d blocks, on %s" %
                               (len(saved), hit, len(keys), sorted(set(tiers[:hit]))))
        self.c.remove(self.ns, saved[::-1])

    def close(self):
        self.mem.close()


def print_table(report):
    rows = report["rows"]
    print("\n%s (%d B/token KV), question %d tokens, chunks of %d, %d threads, median of %d" % (
        report["model"], report["kv_bytes_per_token"], rows[0]["question_tokens"],
        report["chunk_tokens"], report["threads"], report["reps"]))
    hdr = "%8s %12s %12s %12s %8s %8s %10s %10s" % ("prefix", "recompute", "load dram",
                                                    "load ssd", "x dram", "x ssd",
                                                    "plan dram", "plan ssd")
    pred = "predicted_ttft_recompute_s" in rows[0]
    if pred:
        hdr += "   %12s %12s %12s" % ("pred. recomp", "pred. dram", "pred. ssd")
    print(hdr)
    for r in rows:
        line = "%8d %11.3fs %11.3fs %11.3fs %7.1fx %7.1fx %10d %10d" % (
            r["prefix_tokens"], r["ttft_recompute_s"], r["ttft_load_dram_s"],
            r["ttft_load_ssd_s"], r["speedup_dram"], r["speedup_ssd"], r["plan_dram_tokens"],
            r["plan_ssd_tokens"])
        if pred:
            line += "   %11.3fs %11.3fs %11.3fs" % (
                r["predicted_ttft_recompute_s"], r["predicted_ttft_load_dram_s"] or 0,
                r["predicted_ttft_load_ssd_s"] or 0)
        print(line)


if __name__ == "__main__":
    sys.exit(main())
