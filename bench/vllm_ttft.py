#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time to first token through vLLM (CPU) with and without kvtier, beside
vLLM's own prefix cache.

For each prefix length, a prompt of prefix + question (max_tokens 1, so the
request's time is its time to first token), in two vLLM processes with the
same model and weights (tests/vllm/vllm_engine.py):
  vllm      no connector, vLLM's prefix cache on:
              recompute      the first prompt of the prefix, computed whole
              prefix_cache   a second question: the prefix from vLLM's own
                             cache, the reference for a hit that never
                             leaves the engine
  kvtier    the connector (use_plan off: every stored block is loaded),
            vLLM's prefix cache off:
              save           a first prompt, computed and saved to kvtierd
              dram           another question, the prefix loaded from DRAM
              ssd            another, after a kvtierd restart: from SSD
Each figure is the median of --reps questions. Writes JSON to stdout (or
--json FILE) and a Markdown table to stderr.

    build/venv-vllm must exist (sh scripts/vllm-venv.sh); kvtierd from the
    release build (or $KVTIERD):
    python3 bench/vllm_ttft.py --prefix-tokens 1024,2048,4096,8192
"""

import argparse
import json
import os
import random
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))

from vllm_env import Engine, ensure_venv, push_to_ssd  # noqa: E402

import kvtier  # noqa: E402
from kvtier.daemon import Daemon  # noqa: E402

MODEL = os.path.join(ROOT, "bench", "vllm-model")
NAMESPACE = "kvtier-bench|vllm-cpu-LBHNC"     # the connector's: served name, device, layout
KV_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix-tokens", default="1024,2048,4096,8192")
    ap.add_argument("--question-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default=MODEL, help="a directory with a config.json")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dram", default="256M", help="kvtierd's DRAM tier (pushed to SSD by "
                    "filling it: keep it small)")
    ap.add_argument("--ssd", default="8G")
    ap.add_argument("--json", help="write the JSON here instead of stdout")
    args = ap.parse_args()
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sizes = [int(x) for x in args.prefix_tokens.split(",")]
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    vocab = cfg["vocab_size"]
    rng = random.Random(1)
    prefixes = {p: [rng.randrange(3, vocab) for _ in range(p)] for p in sizes}

    def warm():
        """A prompt that shares no block with the measured ones."""
        return [rng.randrange(3, vocab) for _ in range(64)]

    def prompt(p):
        return prefixes[p] + [rng.randrange(3, vocab) for _ in range(args.question_tokens)]

    # vLLM's dummy weights: the times do not depend on their values
    common = dict(model=args.model, load_format="dummy", served_name="kvtier-bench",
                  dtype=args.dtype,
                  kv_bytes=(max(sizes) * 4 + 8192) * kv_bytes_per_token(cfg, args.dtype),
                  max_model_len=max(sizes) + 1024, max_batched=max(sizes) + 1024)
    rows = {p: {"prefix_tokens": p} for p in sizes}

    def timed(eng, p, key, want_cached=None):
        secs = []
        for _ in range(args.reps):
            o = eng.run([prompt(p)], 1)[0]
            if want_cached is not None and o["cached"] != want_cached:
                raise SystemExit("%s %d: %d tokens cached, want %d" % (key, p, o["cached"],
                                                                       want_cached))
            secs.append(o["seconds"])
        rows[p][key + "_s"] = statistics.median(secs)

    eng = Engine("bench-vllm", prefix_caching=True, **common)
    try:
        eng.run([warm()], 1)                      # warm-up, not timed
        for p in sizes:
            o = eng.run([prompt(p)], 1)[0]          # computes and caches the prefix
            rows[p]["recompute_first_s"] = o["seconds"]
            timed(eng, p, "prefix_cache", p // 32 * 32)
        # recompute: other prefixes of the same lengths, each computed whole
        for p in sizes:
            secs = []
            for r in range(args.reps):
                fresh = [random.Random(p * 100 + r).randrange(3, vocab) for _ in range(p)]
                secs.append(eng.run([fresh + [5] * args.question_tokens], 1)[0]["seconds"])
            rows[p]["recompute_s"] = statistics.median(secs)
    finally:
        eng.close()

    d = Daemon(dram=args.dram, ssd=args.ssd)
    kv = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
          "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
          "kv_connector_extra_config": {"socket": d.socket, "use_plan": False}}
    eng = Engine("bench-kvtier", connector=kv, **common)
    try:
        eng.run([warm()], 1)
        for p in sizes:
            rows[p]["save_s"] = eng.run([prompt(p)], 1)[0]["seconds"]
            timed(eng, p, "kvtier_dram", p // 32 * 32)
        with kvtier.Client(socket=d.socket) as c:
            ns = c.hello(NAMESPACE, layers=cfg["num_hidden_layers"],
                         kv_heads=cfg["num_key_value_heads"], head_dim=head_dim(cfg),
                         block_tokens=32, dtype=KV_DTYPES[args.dtype])
            keys = [ns.prefix_keys(prefixes[p]) for p in sizes]
            if not push_to_ssd(d.socket, parse_size(args.dram), lambda: all(
                    set(c.lookup(ns, k)[1]) == {"ssd"} for k in keys)):
                raise SystemExit("the prefixes did not reach SSD")
        assert d.stop() == 0                    # DRAM emptied; SSD stays
        d.start()
        for p in sizes:
            # each rep after a restart: every rep reads SSD, none DRAM; a
            # request of another prompt first, untimed, so that the timed one
            # does not pay for the connector's reconnection
            secs = []
            for _ in range(args.reps):
                eng.run([warm()], 1)
                o = eng.run([prompt(p)], 1)[0]
                if o["loaded_blocks"] != p // 32:
                    print("ssd %d: not loaded: %s" % (p, {k: v for k, v in o.items()
                                                         if k != "tokens"}), file=sys.stderr)
                else:
                    secs.append(o["seconds"])
                assert d.stop() == 0
                d.start()
            rows[p]["kvtier_ssd_s"] = statistics.median(secs) if secs else None
    finally:
        log = eng.close()
        print("".join(l for l in log.splitlines(True) if "kvtier" in l)[-3000:], file=sys.stderr)
        d.remove()

    out = {"model": os.path.basename(args.model), "dtype": args.dtype,
           "threads": args.threads, "question_tokens": args.question_tokens,
           "reps": args.reps, "kv_bytes_per_token": kv_bytes_per_token(cfg, args.dtype),
           "rows": [rows[p] for p in sizes]}
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    print("| prefix | recompute | vLLM prefix cache | kvtier DRAM | kvtier SSD | "
          "first request with save |", file=sys.stderr)
    print("|---|---|---|---|---|---|", file=sys.stderr)
    for r in out["rows"]:
        rc_s = r["recompute_s"]

        def cell(s):
            return "%.3f s (%.2fx)" % (s, rc_s / s) if s else "-"
        print("| %d | %.3f s | %s | %s | %s | %.3f s |" % (
            r["prefix_tokens"], rc_s, cell(r["prefix_cache_s"]), cell(r["kvtier_dram_s"]),
            cell(r["kvtier_ssd_s"]), r["save_s"]), file=sys.stderr)


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def kv_bytes_per_token(cfg, dtype):
    el = 4 if dtype in ("float32", "fp32") else 2
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim(cfg) * el


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


if __name__ == "__main__":
    main()
