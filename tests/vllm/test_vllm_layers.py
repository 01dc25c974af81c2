#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier's vLLM connector with the KV cache in a tensor per layer (as vLLM
releases before the shared backing allocated it), against a real kvtierd:
the layers sit in allocations of their own at unrelated addresses, so the
connector registers them as a region in parts (REGISTER_PARTS, a memfd per
layer), and vLLM answers exactly as without the connector.

The tiny Llama of test_vllm_connector.py (4 layers, seeded weights that make
every answer depend on the KV, greedy, float32) in two vLLM processes, one
after the other:
  ref  no connector, vLLM's own prefix cache on: each prompt set after the
       first finds its prefix in that cache, so it computes what a kvtier
       hit computes (the question over a cached prefix).
  e    the connector, a KV tensor per layer, vLLM's prefix cache off: the
       first set is computed and saved; every later set loads its prefix
       from kvtierd (loaded blocks counted by the connector).
Every answer's tokens and first-token logprob equal ref's, bitwise.

Needs the vLLM venv (scripts/vllm-venv.sh): exits 77 when it cannot be made.
KVT_TEST_SEED replays the random prompts."""

import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from vllm_env import BT, SEED, VOCAB, Engine, connector_config, ensure_venv  # noqa: E402

from kvtier.daemon import Daemon  # noqa: E402

PREFIX_BLOCKS = 3
QUESTION = 20
GENERATE = 8
LAYERS = 4


class VllmPerLayerTest(unittest.TestCase):

    def test_per_layer_tensors_load_from_kvtier(self):
        print("seed: KVT_TEST_SEED=%d" % SEED, file=sys.stderr)
        rng = random.Random(SEED)
        prefixes = [[rng.randrange(3, VOCAB) for _ in range(PREFIX_BLOCKS * BT)]
                    for _ in range(2)]
        sets = [[p + [rng.randrange(3, VOCAB) for _ in range(QUESTION)] for p in prefixes]
                for _ in range(3)]
        ref = Engine("ref", prefix_caching=True)
        try:
            want = [ref.run(s, GENERATE) for s in sets]
        finally:
            ref.close()
        self.assertEqual([[o["cached"] for o in w] for w in want],
                         [[0, 0]] + [[PREFIX_BLOCKS * BT] * 2] * 2)
        # the answers depend on the prompt (the weights are not degenerate)
        self.assertNotEqual(want[1][0]["tokens"], want[2][0]["tokens"])

        daemon = Daemon(dram="64M")
        try:
            e = Engine("e", connector=connector_config(daemon.socket), per_layer_kv=True)
            try:
                got = [e.run(s, GENERATE) for s in sets]
            finally:
                log = e.close()
            self.assertNotIn("kvtier off", log)
            with open(daemon.log.name) as f:
                regs = [line for line in f if "event=register " in line]
            self.assertEqual(len(regs), 1, regs)
            self.assertIn("parts=%d layers=%d" % (LAYERS, LAYERS), regs[0])
        finally:
            self.assertEqual(daemon.stop(), 0)
            daemon.remove()
        for i, (g, w) in enumerate(zip(got, want)):
            hit = 0 if i == 0 else PREFIX_BLOCKS * BT
            self.assertEqual([o["cached"] for o in g], [hit] * 2, i)
            self.assertEqual([o["loaded_blocks"] for o in g], [hit // BT] * 2, i)
            for o, r in zip(g, w):
                self.assertEqual(o["tokens"], r["tokens"], i)
                self.assertEqual(o["logprob0"], r["logprob0"], i)


if __name__ == "__main__":
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    unittest.main(verbosity=2)
