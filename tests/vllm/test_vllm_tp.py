#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier's vLLM connector at tensor_parallel_size 2, vLLM on CPU with its
multiprocess executor (a worker process per rank, as `vllm serve` runs it),
against a real kvtierd.

Each rank holds half the KV heads of every layer. A rank that loaded the
other rank's half would answer with the wrong attention: before the rank
went into the namespace, both ranks shared one (same model, same per-rank
shape) and a fresh engine answered 8 of 8 tokens differently from vLLM.

  e1   TP 2, the connector, vLLM's own prefix cache on: computes and saves
       the prefixes, then answers the reference set over its own cache
       (what a kvtier hit computes: the question over a cached prefix).
  e2   a fresh TP 2 engine, its prefix cache off: loads the prefixes from
       kvtierd, each rank its own shard; tokens and first-token logprobs
       equal e1's, bitwise.

The tiny model's weights come from a seed (tests/vllm/vllm_engine.py), so
its answers depend on every K and V.

Needs the vLLM venv (scripts/vllm-venv.sh): exits 77 when it cannot be made.
KVT_TEST_SEED replays the random prompts."""

import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from vllm_env import BT, NAMESPACE, SEED, VOCAB, Engine, connector_config, ensure_venv  # noqa: E402,E501

import kvtier  # noqa: E402
from kvtier.daemon import Daemon  # noqa: E402

PREFIX_BLOCKS = 4
QUESTION = 20
GENERATE = 8
TP = 2


class VllmTensorParallelTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        print("seed: KVT_TEST_SEED=%d" % SEED, file=sys.stderr)
        rng = random.Random(SEED)
        cls.prefixes = [[rng.randrange(3, VOCAB) for _ in range(PREFIX_BLOCKS * BT)]
                        for _ in range(2)]
        cls.sets = {name: [p + [rng.randrange(3, VOCAB) for _ in range(QUESTION)]
                           for p in cls.prefixes] for name in ("first", "ref")}
        cls.daemon = Daemon(dram="64M")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.remove()

    def connector(self):
        return connector_config(self.daemon.socket)

    def shards(self):
        """Per rank: how many blocks of each prefix kvtierd holds in that
        rank's namespace (one KV head of the tiny model's two). The keys are
        the scheduler's, made once in the first shard's namespace; every
        rank stores them in its own."""
        with kvtier.Client(socket=self.daemon.socket) as c:
            ns = [c.hello(NAMESPACE, layers=4, kv_heads=2 // TP, head_dim=32, block_tokens=BT,
                          dtype="fp32", tp_rank=rank, tp_size=TP) for rank in range(TP)]
            keys = [ns[0].prefix_keys(p) for p in self.prefixes]
            return [[c.lookup(n, k)[0] for k in keys] for n in ns]

    def loaded_blocks(self):
        with kvtier.Client(socket=self.daemon.socket) as c:
            return c.stats()["copies"]["load_blocks"]

    def test_ranks_load_their_own_shards(self):
        e1 = Engine("tp-e1", connector=self.connector(), prefix_caching=True, tp=TP)
        try:
            first = e1.run(self.sets["first"], GENERATE)
            ref = e1.run(self.sets["ref"], GENERATE)
        finally:
            e1.close()
        self.assertEqual([o["cached"] for o in first], [0, 0])
        self.assertEqual([o["cached"] for o in ref], [PREFIX_BLOCKS * BT] * 2)
        self.assertEqual(self.loaded_blocks(), 0)

        e2 = Engine("tp-e2", connector=self.connector(), tp=TP)
        try:
            outs = e2.run(self.sets["ref"], GENERATE)
        finally:
            e2.close()
        for o, r in zip(outs, ref):
            self.assertEqual(o["cached"], PREFIX_BLOCKS * BT)
            self.assertEqual(o["tokens"], r["tokens"])
            self.assertEqual(o["logprob0"], r["logprob0"])
        # both ranks loaded both prefixes from kvtierd, each from its own
        # namespace, where e1's rank saved it
        self.assertEqual(self.loaded_blocks(), TP * 2 * PREFIX_BLOCKS)
        self.assertEqual(self.shards(), [[PREFIX_BLOCKS] * 2] * TP)


if __name__ == "__main__":
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    unittest.main(verbosity=2)
