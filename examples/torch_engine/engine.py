#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The reference engine: a PyTorch decoder (model.py) with a paged KV cache,
chunked prefill on block boundaries and greedy decoding, sharing prefix KV
through kvtierd with nothing but the connector (python/kvtier/connector.py):
lookup, load layer by layer while the first chunk computes, save after
prefill.

    engine.py --config configs/tiny.json --prompt prompt.json --generate 32
              [--socket PATH] [--token T] [--no-kvtier] [--out FILE] [--json]

The prompt is a JSON list of token ids (or --random-prompt N). Prefill runs
in chunks of --chunk-tokens tokens cut at multiples of it and where the
loaded prefix ends (--boundary adds cuts: a from-scratch run with B's cuts
reproduces B bitwise). When a load fails (the daemon gone, a block evicted)
the engine recomputes the whole prompt with the same cuts and produces the
same tokens. --out writes a torch file with the tokens, the logits of every
generated token and the KV of the prompt's full blocks; --json prints what
happened on stdout. Exit status 0, 2 on a usage error. Run with the
interpreter that has torch (Debian's python3-torch: /usr/bin/python3).
"""

import argparse
import json
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from model import KV_DTYPE_NAMES, Config, Model, Weights  # noqa: E402

BLOCK_TOKENS = 16


class Request:
    """A prompt and the number of tokens to generate (exactly max_tokens:
    no stop token), which the connector saves the prompt's blocks with as
    their reuse class (kvtier.reuse_class_of(max_tokens)), a hint for the
    daemon's class-lru policy."""

    def __init__(self, request_id, prompt_token_ids, max_tokens):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.max_tokens = max_tokens


class Result:
    def __init__(self):
        self.tokens = []
        self.logits = []
        self.ttft_s = None
        self.ttft_cpu_s = None      # this process's CPU time until then (all threads)
        self.total_s = None
        self.loaded_tokens = 0      # prefix tokens whose KV came from kvtier
        self.matched_tokens = 0     # what the lookup offered
        self.fallback = False       # a load failed and the prompt was recomputed
        self.chunks = []            # [start, end) of each prefill chunk
        self.block_table = []


class BlockPool:
    """Free pages of the KV cache. Pages a failed load may still be written
    into are quarantined: never handed out again."""

    def __init__(self, pages):
        self.free = list(range(pages - 1, -1, -1))
        self.quarantined = set()

    def alloc(self, n):
        if n > len(self.free):
            raise MemoryError("KV cache full: %d pages wanted, %d free" % (n, len(self.free)))
        return [self.free.pop() for _ in range(n)]

    def release(self, pages):
        self.free.extend(p for p in reversed(pages) if p not in self.quarantined)

    def quarantine(self, pages):
        self.quarantined.update(pages)


def model_id(cfg, seed):
    """The namespace's model id: the shapes' name and the weights' seed, so
    KV of different weights never mixes."""
    return "torch-engine/%s@seed%d" % (cfg.name, seed)


class Engine:
    """One request at a time, prefill in chunks, then greedy decoding."""

    def __init__(self, cfg, weights, pages, connector=None, chunk_tokens=256, tile_tokens=256,
                 block_tokens=BLOCK_TOKENS):
        if chunk_tokens % block_tokens:
            raise ValueError("chunk_tokens must be a multiple of block_tokens")
        self.cfg = cfg
        self.bt = block_tokens
        self.chunk = chunk_tokens
        self.conn = connector
        shape = (cfg.layers, 2, pages + 1, block_tokens, cfg.kv_heads, cfg.head_dim)
        if connector is not None:
            kv = connector.allocate_kv_cache(pages + 1)
            connector.register_kv_caches(
                {"model.layers.%d.self_attn" % i: kv[i] for i in range(cfg.layers)})
        else:
            kv = torch.zeros(shape, dtype=cfg.kv_dtype)
        self.kv = kv
        # the last page stays zero: attention tiles read it past the context
        self.model = Model(cfg, weights, kv, block_tokens, zero_page=pages,
                           tile_tokens=tile_tokens)
        self.pool = BlockPool(pages)

    def _cuts(self, start, end, boundaries):
        cuts = {start, end}
        cuts.update(range((start // self.chunk + 1) * self.chunk, end, self.chunk))
        cuts.update(b for b in boundaries if start < b < end)
        cuts = sorted(cuts)
        return list(zip(cuts[:-1], cuts[1:]))

    def _chunk(self, tokens, s, e, table, hook=None):
        """Compute [s, e) padded to chunk_tokens rows: every chunk has the
        same shape, so a row's result never depends on the chunk's length."""
        rows = list(tokens[s:e]) + [0] * (self.chunk - (e - s))
        return self.model.forward(rows, s, e - s, table, hook)

    def generate(self, req, boundaries=()):
        """Prefill req's prompt and generate req.max_tokens tokens greedily."""
        from kvtier.connector import ScheduledRequest

        res = Result()
        t0 = time.perf_counter()
        c0 = time.process_time()
        prompt = req.prompt_token_ids
        n = len(prompt)
        if not n:
            raise ValueError("empty prompt")
        conn = self.conn
        ext = 0
        if conn is not None:
            ext, _ = conn.get_num_new_matched_tokens(req, 0)
        res.matched_tokens = ext
        table = self.pool.alloc((n + req.max_tokens + self.bt - 1) // self.bt)
        if conn is not None:
            conn.update_state_after_alloc(req, table, ext)
        start = ext
        hidden = None
        while hidden is None:
            chunks = self._cuts(start, n, list(boundaries) + [ext])
            for s, e in chunks:
                hook = None
                if conn is not None:
                    meta = conn.build_connector_meta([ScheduledRequest(req, table, s, e - s)])
                    conn.bind_connector_metadata(meta)
                    if meta.loads:
                        conn.start_load_kv()
                        hook = conn.wait_for_layer_load
                # the hook at the last layer also checks the whole load
                h = self._chunk(prompt, s, e, table, hook)
                if h is None:
                    # the load failed: its pages may still be written by a
                    # daemon that lost us; take fresh ones, recompute all
                    bad = conn.get_block_ids_with_load_errors()
                    self.pool.quarantine(bad)
                    table = [self.pool.alloc(1)[0] if p in bad else p for p in table]
                    conn.clear_connector_metadata()
                    res.fallback = True
                    res.chunks = []
                    start = 0
                    break
                res.chunks.append((s, e))
                if e == n:
                    hidden = h
                    logits = self.model.logits(hidden)
                    res.logits.append(logits)
                    res.tokens.append(int(torch.argmax(logits)))
                    res.ttft_s = time.perf_counter() - t0
                    res.ttft_cpu_s = time.process_time() - c0
                if conn is not None:
                    conn.wait_for_save()
                    conn.clear_connector_metadata()
        res.loaded_tokens = 0 if res.fallback else ext
        for i in range(1, req.max_tokens):
            pos = n + i - 1
            h = self.model.forward([res.tokens[-1]], pos, 1, table)
            logits = self.model.logits(h)
            res.logits.append(logits)
            res.tokens.append(int(torch.argmax(logits)))
        res.total_s = time.perf_counter() - t0
        res.block_table = table
        if conn is not None:
            conn.request_finished(req)
        return res

    def prompt_kv(self, res, n_tokens):
        """The KV of the first n_tokens // block_tokens blocks of a finished
        request: [blocks, layers, 2, block_tokens, kv_heads, head_dim]."""
        pages = torch.tensor(res.block_table[:n_tokens // self.bt], dtype=torch.long)
        return self.kv.index_select(2, pages).permute(2, 0, 1, 3, 4, 5).clone()

    def release(self, res):
        self.pool.release(res.block_table)


def make_connector(cfg, seed, socket, token, block_tokens=BLOCK_TOKENS, **kwargs):
    """The engine's connector; kwargs go to EngineConnector (use_plan,
    completions, ...)."""
    from kvtier.connector import EngineConnector
    return EngineConnector(model_id(cfg, seed), cfg.layers, cfg.kv_heads, cfg.head_dim,
                           block_tokens, KV_DTYPE_NAMES[cfg.kv_dtype], socket=socket,
                           token=token, **kwargs)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="The reference PyTorch engine over kvtierd's connector.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--config", metavar="FILE", default=os.path.join(HERE, "configs", "tiny.json"),
                    help="a Hugging Face config.json (default configs/tiny.json)")
    ap.add_argument("--seed", type=int, default=1, metavar="N", help="weights' seed (default 1)")
    ap.add_argument("--prompt", metavar="FILE", help="JSON file: a list of token ids")
    ap.add_argument("--random-prompt", type=int, metavar="N",
                    help="a prompt of N random tokens (seeded by --prompt-seed)")
    ap.add_argument("--prompt-seed", type=int, default=0, metavar="N",
                    help="seed of --random-prompt (default 0)")
    ap.add_argument("--generate", type=int, default=32, metavar="N",
                    help="tokens to generate (default 32)")
    ap.add_argument("--socket", metavar="PATH", help="kvtierd socket (default $KVTIER_SOCKET or kvtierd's)")
    ap.add_argument("--token", metavar="TOKEN", help="tenant token (default $KVTIER_TOKEN)")
    ap.add_argument("--no-kvtier", action="store_true", help="recompute, no connector")
    ap.add_argument("--no-plan", action="store_true",
                    help="load every stored block, whatever kvtierd's plan says (tests)")
    ap.add_argument("--chunk-tokens", type=int, default=256, metavar="N",
                    help="prefill chunk, a multiple of 16 (default 256)")
    ap.add_argument("--boundary", type=int, action="append", default=[], metavar="N",
                    help="an extra prefill cut at this token (repeatable)")
    ap.add_argument("--pages", type=int, metavar="N",
                    help="KV cache pages (default: twice the request's, room for a fallback)")
    ap.add_argument("--threads", type=int, default=1, metavar="N", help="torch threads (default 1)")
    ap.add_argument("--out", metavar="FILE", help="write tokens, logits and prompt KV here (torch.save)")
    ap.add_argument("--json", action="store_true", help="print a JSON summary")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    cfg = Config.load(args.config)
    if args.prompt:
        with open(args.prompt) as f:
            prompt = json.load(f)
    elif args.random_prompt:
        rng = random.Random(args.prompt_seed)
        prompt = [rng.randrange(cfg.vocab) for _ in range(args.random_prompt)]
    else:
        ap.error("give --prompt FILE or --random-prompt N")
    if any(not 0 <= t < cfg.vocab for t in prompt):
        ap.error("prompt tokens must be in [0, %d)" % cfg.vocab)
    pages = args.pages or 2 * ((len(prompt) + args.generate) // BLOCK_TOKENS + 1)
    conn = None if args.no_kvtier else make_connector(cfg, args.seed, args.socket, args.token,
                                                      use_plan=not args.no_plan)
    eng = Engine(cfg, Weights(cfg, args.seed), pages, conn, chunk_tokens=args.chunk_tokens)
    res = eng.generate(Request("req-0", prompt, args.generate), boundaries=args.boundary)
    if args.out:
        torch.save({"tokens": res.tokens, "logits": torch.stack(res.logits),
                    "kv": eng.prompt_kv(res, len(prompt)), "chunks": res.chunks}, args.out)
    summary = {
        "model": model_id(cfg, args.seed), "prompt_tokens": len(prompt),
        "matched_tokens": res.matched_tokens, "loaded_tokens": res.loaded_tokens,
        "fallback": res.fallback, "ttft_s": res.ttft_s, "total_s": res.total_s,
        "chunks": res.chunks, "tokens": res.tokens,
        "connector": conn.stats if conn is not None else None,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print("engine: %d prompt tokens (%d loaded%s), TTFT %.3f s, %d tokens in %.3f s" % (
            len(prompt), res.loaded_tokens, ", load failed: recomputed" if res.fallback else "",
            res.ttft_s, len(res.tokens), res.total_s))
    if conn is not None:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
