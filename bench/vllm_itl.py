#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Inter-token latency of requests already decoding in vLLM (CPU) while the
connector moves another request's KV: a long prefix loaded from kvtierd,
and a finished prompt's KV saved to it.

Each mode is a fresh vLLM process with the same model, dummy weights and
scheduler settings, and vLLM's own prefix cache on:
  none    no connector: the load event's request finds its prefix in vLLM's
          own prefix cache (computed before the decoders start), the save
          event's prompt is computed and kept by vLLM alone. The same
          compute as the other modes, with no transfer.
  sync    the connector with loads and saves inside the step (extra config
          --sync-config): LOADs waited for layer by layer, SAVEs waited for
          at the step's end.
  async   the connector with loads and saves outside the step (extra config
          --async-config).
In each, --decoders requests decode (prompts of 64 tokens, --decode-tokens
each); once every one has 8 tokens, the load event's request arrives: a
prefix of --prefix-tokens (stored in kvtierd beforehand: synthetic KV in
the connector's namespace and keys) plus 32 tokens, max_tokens 1. When it
is done, the save event's request arrives: --save-tokens fresh tokens,
max_tokens 1, computed in chunks of --chunk tokens, then saved. The gaps
between consecutive tokens of the decoders, from the first event's arrival
to the end of the second, are the figures: p50 and p99 per mode, and
their ratio to mode none.

    sh scripts/vllm-venv.sh && cmake --build --preset release
    python3 bench/vllm_itl.py --modes none,sync,async --reps 3 --json out.json

The model is bench/vllm-model-qwen3-0.6b: Qwen3-0.6B's config (28 layers, 8
KV heads of 128: 112 KiB of KV per token in bf16), vLLM's dummy weights.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))

MODEL = os.path.join(ROOT, "bench", "vllm-model-qwen3-0.6b")
SERVED = "kvtier-itl"
BT = 32                                   # vLLM's CPU block size
QUESTION = 32


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def kv_bytes_per_token(cfg):
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim(cfg) * 2


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


# ---- one mode, in the vLLM venv ----------------------------------------------

def run_mode(args):
    """One vLLM process: the decoders, the two events; prints JSON."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    cfg = json.load(open(os.path.join(args.model, "config.json")))
    rng = random.Random(args.seed)
    vocab = cfg["vocab_size"]
    prefix = [rng.randrange(3, vocab) for _ in range(args.prefix_tokens)]
    load_prompt = prefix + [rng.randrange(3, vocab) for _ in range(QUESTION)]
    save_prompt = [rng.randrange(3, vocab) for _ in range(args.save_tokens)]
    kw = {}
    if args.mode != "none":
        extra = {"socket": args.socket, "use_plan": False}
        extra.update(json.loads(args.async_config if args.mode == "async" else
                                args.sync_config))
        kw["kv_transfer_config"] = {
            "kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": extra}
    tokens_max = args.prefix_tokens + QUESTION + args.decode_tokens + 256
    llm = LLM(model=args.model, load_format="dummy", skip_tokenizer_init=True,
              dtype="bfloat16", block_size=BT, enforce_eager=True, enable_prefix_caching=True,
              kv_cache_memory_bytes=(tokens_max + args.save_tokens +
                                     args.decoders * (64 + args.decode_tokens) + 4096) *
              kv_bytes_per_token(cfg), max_model_len=tokens_max,
              max_num_batched_tokens=args.chunk, served_model_name=SERVED, seed=0, **kw)
    eng = llm.llm_engine
    one = SamplingParams(temperature=0.0, max_tokens=1, detokenize=False, ignore_eos=True)
    # every shape the measured steps run once first (kernels made at first
    # use cost seconds on CPU): a prompt of the save event's length, and
    # the decoders' batch
    llm.generate([TokensPrompt(prompt_token_ids=[rng.randrange(3, vocab)
                                                 for _ in range(args.save_tokens)])], one,
                 use_tqdm=False)
    llm.generate([TokensPrompt(prompt_token_ids=[rng.randrange(3, vocab) for _ in range(64)])
                  for _ in range(args.decoders)],
                 SamplingParams(temperature=0.0, max_tokens=8, detokenize=False,
                                ignore_eos=True), use_tqdm=False)
    if args.mode == "none":
        # the prefix in vLLM's own cache: the load event then costs what it
        # costs with a kvtier hit, less the transfer
        llm.generate([TokensPrompt(prompt_token_ids=prefix + [5])], one, use_tqdm=False)
    dec = SamplingParams(temperature=0.0, max_tokens=args.decode_tokens, detokenize=False,
                         ignore_eos=True)
    for i in range(args.decoders):
        eng.add_request("d%d" % i, TokensPrompt(
            prompt_token_ids=[rng.randrange(3, vocab) for _ in range(64)]), dec)
    seen = {}                                   # request -> tokens so far
    stamps = {}                                 # decoder -> [time of each new token]
    window = None                               # (start, end) of the events
    events = []
    step_s = []
    while eng.has_unfinished_requests():
        t0 = time.perf_counter()
        outs = eng.step()
        now = time.perf_counter()
        step_s.append(now - t0)
        for o in outs:
            n = len(o.outputs[0].token_ids) if o.outputs else 0
            if n > seen.get(o.request_id, 0) and o.request_id.startswith("d"):
                stamps.setdefault(o.request_id, []).append(now)
            seen[o.request_id] = n
            if o.finished and o.request_id in ("load", "save"):
                events.append((o.request_id, now, o.num_cached_tokens or 0))
                if o.request_id == "load":
                    eng.add_request("save", TokensPrompt(prompt_token_ids=save_prompt), one)
                else:
                    window = (window[0], now)
        if window is None and len(stamps) == args.decoders and \
           all(len(v) >= 8 for v in stamps.values()):
            window = (now, None)
            eng.add_request("load", TokensPrompt(prompt_token_ids=load_prompt), one)
    if window is None or window[1] is None:
        raise SystemExit("the events did not finish while the decoders ran: "
                         "raise --decode-tokens")
    gaps = []
    for ts in stamps.values():
        gaps += [b - a for a, b in zip(ts, ts[1:]) if window[0] <= b <= window[1]]
    conn = None
    if args.mode != "none":
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        conn = get_kv_transfer_group().kvtier.stats
    print(json.dumps({"mode": args.mode, "gaps_s": gaps, "events": events,
                      "step_median_s": statistics.median(step_s),
                      "connector": conn}), flush=True)


# ---- the driver ---------------------------------------------------------------

def store_prefix(socket, cfg, args):
    """The load event's prefix in kvtierd, as the connector keys it: the
    namespace of the connector (served name, device, layout; rank 0 of 1),
    synthetic KV."""
    import kvtier
    rng = random.Random(args.seed)
    vocab = cfg["vocab_size"]
    prefix = [rng.randrange(3, vocab) for _ in range(args.prefix_tokens)]
    with kvtier.Client(socket=socket) as c:
        ns = c.hello("%s|vllm-cpu-LBHNC" % SERVED, layers=cfg["num_hidden_layers"],
                     kv_heads=cfg["num_key_value_heads"], head_dim=head_dim(cfg),
                     block_tokens=BT, dtype="bf16")
        keys = ns.prefix_keys(prefix)
        pages = 32
        with kvtier.EngineMemory.paged(ns, pages=pages) as mem:
            mem.buf[:] = os.urandom(len(mem.buf))
            region = c.register(ns, mem)
            for i in range(0, len(keys), pages):
                part = keys[i:i + pages]
                c.save(ns, region, part, range(len(part)),
                       parent=keys[i - 1] if i else None).wait()
        hit, _ = c.lookup(ns, keys)
        if hit != len(keys):
            raise SystemExit("kvtierd holds %d of the prefix's %d blocks" % (hit, len(keys)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="none,sync,async")
    ap.add_argument("--sync-config", default='{"async_load": false, "async_save": false}',
                    help="extra config of mode sync (JSON)")
    ap.add_argument("--async-config", default='{"async_load": true, "async_save": true}',
                    help="extra config of mode async (JSON)")
    ap.add_argument("--prefix-tokens", type=int, default=8192)
    ap.add_argument("--save-tokens", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=512, help="max_num_batched_tokens")
    ap.add_argument("--decoders", type=int, default=4)
    ap.add_argument("--decode-tokens", type=int, default=400)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dram", default="3G")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--json")
    ap.add_argument("--one", dest="mode", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        return run_mode(args)

    from vllm_env import PYTHON, engine_env, ensure_venv
    from kvtier.daemon import Daemon
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    env = engine_env()
    env["OMP_NUM_THREADS"] = str(os.cpu_count())
    runs = {m: [] for m in args.modes.split(",")}
    for rep in range(args.reps):
        for mode in runs:                      # modes alternate within a rep
            d = None
            cmd = [PYTHON, os.path.abspath(__file__), "--one", mode,
                   "--prefix-tokens", str(args.prefix_tokens),
                   "--save-tokens", str(args.save_tokens), "--chunk", str(args.chunk),
                   "--decoders", str(args.decoders), "--decode-tokens", str(args.decode_tokens),
                   "--seed", str(args.seed), "--model", args.model,
                   "--sync-config", args.sync_config, "--async-config", args.async_config]
            if mode != "none":
                d = Daemon(dram=args.dram)
                store_prefix(d.socket, cfg, args)
                cmd += ["--socket", d.socket]
            try:
                p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            finally:
                if d:
                    d.remove()
            if p.returncode:
                sys.stderr.write(p.stderr[-4000:])
                raise SystemExit("mode %s failed (%d)" % (mode, p.returncode))
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r["p50_s"], r["p99_s"] = percentile(r["gaps_s"], 0.5), percentile(r["gaps_s"], 0.99)
            print("rep %d %-5s p50 %.3f s  p99 %.3f s  (%d gaps; events %s)" % (
                rep, mode, r["p50_s"], r["p99_s"], len(r["gaps_s"]),
                [(e[0], e[2]) for e in r["events"]]), file=sys.stderr)
            runs[mode].append(r)
    rows = []
    base = runs.get("none")
    for mode, rs in runs.items():
        row = {"mode": mode, "p50_s": statistics.median(r["p50_s"] for r in rs),
               "p99_s": statistics.median(r["p99_s"] for r in rs),
               "step_median_s": statistics.median(r["step_median_s"] for r in rs),
               "load_cached_tokens": [e[2] for r in rs for e in r["events"] if e[0] == "load"]}
        if base:
            row["p50_vs_none"] = row["p50_s"] / statistics.median(r["p50_s"] for r in base)
            row["p99_vs_none"] = row["p99_s"] / statistics.median(r["p99_s"] for r in base)
        rows.append(row)
    out = {"model": os.path.basename(args.model), "prefix_tokens": args.prefix_tokens,
           "save_tokens": args.save_tokens, "chunk": args.chunk, "decoders": args.decoders,
           "reps": args.reps, "sync_config": json.loads(args.sync_config),
           "async_config": json.loads(args.async_config),
           "kv_bytes_per_token": kv_bytes_per_token(cfg), "rows": rows,
           "runs": {m: [{k: v for k, v in r.items() if k != "gaps_s"} for r in rs]
                    for m, rs in runs.items()}}
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    print("| mode | ITL p50 | ITL p99 | p50 / none | p99 / none |", file=sys.stderr)
    print("|---|---|---|---|---|", file=sys.stderr)
    for r in rows:
        print("| %s | %.3f s | %.3f s | %s | %s |" % (
            r["mode"], r["p50_s"], r["p99_s"],
            "%.2f" % r["p50_vs_none"] if "p50_vs_none" in r else "-",
            "%.2f" % r["p99_vs_none"] if "p99_vs_none" in r else "-"), file=sys.stderr)


if __name__ == "__main__":
    main()
