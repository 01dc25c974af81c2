#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An example engine in Python, over the kvtier binding (python/kvtier).

What an inference engine's KV connector does around kvtierd: allocate paged KV
memory (a sealed memfd, registered once), compute prefix keys for token
sequences sharing a prefix, "prefill" their blocks (bytes derived from each
key stand in for the model's output), save the blocks kvtier lacks, drop the
local copies, look the prefixes up again, load them back into other pages
layer by layer, and compare every byte.

    PYTHONPATH=python examples/engine.py [--socket PATH] [--token TOKEN]
                                         [--sequences N] [--blocks N] [--seed N]

Exit status 0 when every byte came back, 1 otherwise.
"""

import argparse
import hashlib
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvtier  # noqa: E402

LAYERS, KV_HEADS, HEAD_DIM, BLOCK_TOKENS = 8, 4, 64, 16


def prefill(key, layer, kv, nbytes):
    """The bytes the model would have computed for one page (deterministic)."""
    out = bytearray()
    counter = 0
    seed = key + bytes([layer, kv])
    while len(out) < nbytes:
        out += hashlib.blake2b(seed + counter.to_bytes(8, "little"), digest_size=64).digest()
        counter += 1
    return bytes(out[:nbytes])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", help="kvtierd socket (default $KVTIER_SOCKET or the daemon's)")
    ap.add_argument("--token", help="tenant token (default $KVTIER_TOKEN or none)")
    ap.add_argument("--sequences", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    system_prompt = [rng.randrange(151936) for _ in range(args.blocks // 2 * BLOCK_TOKENS)]

    with kvtier.Client(socket=args.socket, token=args.token) as c:
        ns = c.hello("example/tiny-llm", layers=LAYERS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                     block_tokens=BLOCK_TOKENS, dtype="bf16")
        with kvtier.EngineMemory.paged(ns, pages=2 * args.blocks) as mem:
            region = c.register(ns, mem)
            saved = verified = 0
            for s in range(args.sequences):
                tail = [rng.randrange(151936)
                        for _ in range((args.blocks - args.blocks // 2) * BLOCK_TOKENS)]
                keys = ns.prefix_keys(system_prompt + tail)
                assert len(keys) == args.blocks

                hit, _ = c.lookup(ns, keys)
                missing = list(range(hit, args.blocks))
                for i in missing:
                    for layer in range(LAYERS):
                        for kv in range(2):
                            mem.write_page(i, layer, kv, prefill(keys[i], layer, kv, ns.page_bytes))
                if missing:
                    t = c.save(ns, region, keys[hit:], missing,
                               parent=keys[hit - 1] if hit else None)
                    if t.wait() != len(missing):
                        print("engine.py: save stored too few blocks", file=sys.stderr)
                        return 1
                    saved += len(missing)

                mem.buf[:] = bytes(mem.nbytes)          # the engine drops its copy

                hit, tiers = c.lookup(ns, keys)
                if hit != args.blocks:
                    print("engine.py: prefix not found after save", file=sys.stderr)
                    return 1
                pages = [args.blocks + (args.blocks - 1 - i) for i in range(args.blocks)]
                t = c.load(ns, region, keys, pages)
                for layer in range(LAYERS):
                    t.wait_layer(layer)                 # compute on layer could start here
                    for i, p in enumerate(pages):
                        for kv in range(2):
                            if mem.read_page(p, layer, kv) != prefill(keys[i], layer, kv,
                                                                     ns.page_bytes):
                                print("engine.py: sequence %d block %d layer %d: wrong bytes"
                                      % (s, i, layer), file=sys.stderr)
                                return 1
                            verified += ns.page_bytes
                if t.wait() != args.blocks:
                    print("engine.py: load brought back too few blocks", file=sys.stderr)
                    return 1
            print("engine.py: %d sequences x %d blocks: saved %d blocks, %d bytes verified "
                  "(tiers %s)" % (args.sequences, args.blocks, saved, verified,
                                 ",".join(sorted(set(tiers)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
